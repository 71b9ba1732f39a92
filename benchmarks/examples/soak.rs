//! The soak's driver (`benchmarks/soak` starts the servers and runs it): mixed load on a sluice on
//! the memory store and one on Redis, every algorithm saturated on a few keys, leases held
//! and released, a config reload every few seconds, and a Redis fault at random every
//! 20-60 s (stopped, its clients killed, its scripts flushed, out of memory), all bounded in
//! rate and time. Every report period it prints, per server: calls, errors inside and outside
//! the faults' windows, resident memory, open descriptors, threads and runtime tasks, the
//! highest share of a limit admitted on any key, and the most leases held at once; a summary
//! table at the end.
//!
//!   soak --memory 127.0.0.1:P --memory-pid PID --memory-http 127.0.0.1:H \
//!        --redis 127.0.0.1:P --redis-pid PID --redis-http 127.0.0.1:H \
//!        --redis-port R --redis-server-pid PID \
//!        --config FILE --duration 30m

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use sluice_proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use sluice_proto::rate_limit_descriptor::Entry;
use sluice_proto::rate_limit_response::Code;
use sluice_proto::{RateLimitDescriptor, RateLimitRequest};
use tonic::transport::{Channel, Endpoint};

#[derive(Parser)]
struct Args {
    /// Writes the first config to --config and exits (the servers start on it).
    #[arg(long)]
    write_config: bool,
    /// The gRPC address, pid and HTTP address of the sluice on the memory store.
    #[arg(long, default_value = "")]
    memory: String,
    #[arg(long, default_value_t = 0)]
    memory_pid: u32,
    #[arg(long, default_value = "")]
    memory_http: String,
    /// The same, of the sluice on Redis.
    #[arg(long, default_value = "")]
    redis: String,
    #[arg(long, default_value_t = 0)]
    redis_pid: u32,
    #[arg(long, default_value = "")]
    redis_http: String,
    /// The port and pid of the redis-server the second sluice uses (the faults' target).
    #[arg(long, default_value_t = 0)]
    redis_port: u16,
    #[arg(long, default_value_t = 0)]
    redis_server_pid: u32,
    /// The config file both servers watch (rewritten for each reload).
    #[arg(long)]
    config: std::path::PathBuf,
    #[arg(long, default_value = "30m", value_parser = sluice_core::duration::parse)]
    duration: Duration,
    #[arg(long, default_value = "60s", value_parser = sluice_core::duration::parse)]
    report_every: Duration,
    /// Calls per second each server is offered (in all).
    #[arg(long, default_value_t = 600)]
    rate: u64,
}

/// Every limit of the soak's config: L per second, on `KEYS` values each.
pub const LIMIT: u64 = 5;
/// Leases of the concurrency limit, each living 2 s at most.
const LEASES: u64 = 3;
const KEYS: usize = 10;
const RATES: [&str; 6] = [
    "fixed_window",
    "sliding_window_log",
    "sliding_window_counter",
    "token_bucket",
    "leaky_bucket",
    "warm_up",
];

/// The config at reload `generation`: the limits never change, one rule does.
fn config(generation: u64) -> String {
    let mut yaml = String::from("domain: soak\ndescriptors:\n");
    for algorithm in RATES {
        yaml.push_str(&format!(
            "  - key: {algorithm}\n    rate_limit: {{unit: second, requests_per_unit: {LIMIT}, algorithm: {algorithm}}}\n"
        ));
    }
    yaml.push_str(&format!(
        "  - key: leases\n    rate_limit: {{unit: second, unit_multiplier: 2, requests_per_unit: {LEASES}, algorithm: concurrency}}\n"
    ));
    yaml.push_str(&format!(
        "  - key: reloaded\n    value: g{generation}\n    rate_limit: {{unit: minute, requests_per_unit: 1}}\n"
    ));
    yaml
}

/// What one server's calls saw in one report period.
#[derive(Default)]
struct Period {
    calls: u64,
    errors_in_faults: u64,
    errors_outside: u64,
    /// Admitted per (algorithm, key).
    admitted: HashMap<(usize, usize), u64>,
    /// Leases held now per key, and the most at once.
    held: [u64; KEYS],
    most_held: u64,
}

/// The windows of the faults applied so far (start, end), in ms since the soak began (a
/// fault under way ends at `u64::MAX`); an error counts as the fault's if it lands within it
/// or 3 s after.
#[derive(Default)]
struct Faults(Mutex<Vec<(u64, u64)>>);

impl Faults {
    fn covers(&self, at_ms: u64) -> bool {
        let faults = self.0.lock().unwrap_or_else(|p| p.into_inner());
        faults
            .iter()
            .any(|&(start, end)| at_ms + 100 >= start && at_ms <= end.saturating_add(3000))
    }
}

fn request(descriptors: Vec<Vec<(&str, String)>>) -> RateLimitRequest {
    RateLimitRequest {
        domain: "soak".into(),
        descriptors: descriptors
            .into_iter()
            .map(|entries| RateLimitDescriptor {
                entries: entries
                    .into_iter()
                    .map(|(key, value)| Entry {
                        key: key.into(),
                        value,
                    })
                    .collect(),
                ..Default::default()
            })
            .collect(),
        hits_addend: 0,
    }
}

/// The lease token an admitted acquire carries in its dynamic metadata.
fn lease_token(response: &sluice_proto::RateLimitResponse) -> Option<String> {
    use prost_types::value::Kind;
    let fields = &response.dynamic_metadata.as_ref()?.fields;
    match fields.get("sluice.lease")?.kind.as_ref()? {
        Kind::StringValue(token) => Some(token.clone()),
        _ => None,
    }
}

/// SplitMix64's finaliser: a well-spread number from a counter.
fn mix(n: u64) -> u64 {
    let mut z = n.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// One caller: a call every `every`, cycling over the algorithms and keys; one call in eight
/// takes a lease, held 0-200 ms, then released.
async fn caller(
    mut client: RateLimitServiceClient<Channel>,
    index: u64,
    every: Duration,
    started: Instant,
    until: Instant,
    period: Arc<Mutex<Period>>,
    faults: Arc<Faults>,
) {
    // Callers start spread over one interval, and draw what they ask at random.
    tokio::time::sleep(every.mul_f64(index as f64 / 32.0)).await;
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut n = index << 32;
    while Instant::now() < until {
        ticks.tick().await;
        n += 1;
        let draw = mix(n) as usize;
        let key = draw % KEYS;
        let algorithm = (draw / KEYS) % RATES.len();
        let leasing = (draw / KEYS / RATES.len()) % 8 == 0;
        let descriptor = if leasing {
            vec![("leases", format!("k{key}"))]
        } else {
            vec![(RATES[algorithm], format!("k{key}"))]
        };
        let answer = client.should_rate_limit(request(vec![descriptor])).await;
        let at_ms = started.elapsed().as_millis() as u64;
        let token = {
            let mut period = period.lock().unwrap_or_else(|p| p.into_inner());
            period.calls += 1;
            match &answer {
                Err(_) if faults.covers(at_ms) => {
                    period.errors_in_faults += 1;
                    None
                }
                Err(_) => {
                    period.errors_outside += 1;
                    None
                }
                Ok(response) if response.get_ref().overall_code == Code::Ok as i32 => {
                    if leasing {
                        period.held[key] += 1;
                        period.most_held = period.most_held.max(period.held[key]);
                        lease_token(response.get_ref())
                    } else {
                        *period.admitted.entry((algorithm, key)).or_default() += 1;
                        None
                    }
                }
                Ok(_) => None,
            }
        };
        if let Some(token) = token {
            let hold = Duration::from_millis(mix(!n) % 200);
            tokio::time::sleep(hold).await;
            // Counted free as the release leaves: the server frees it only later, so the
            // count here never exceeds what the server holds.
            {
                let mut period = period.lock().unwrap_or_else(|p| p.into_inner());
                period.held[key] = period.held[key].saturating_sub(1);
            }
            let release = request(vec![vec![
                ("leases", format!("k{key}")),
                ("sluice.lease", token),
            ]]);
            // A failed release leaves the lease to its life (2 s): the server holds it
            // longer than counted here, never shorter.
            let _ = client.should_rate_limit(release).await;
        }
    }
}

/// A process's resident memory (KiB), open descriptors and threads, from /proc.
fn process(pid: u32) -> (u64, usize, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count());
    (field("VmRSS:"), fds, field("Threads:"))
}

/// `sluice_runtime_tasks` from a server's /metrics.
fn runtime_tasks(http: &str) -> u64 {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect(http) else {
        return 0;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: soak\r\nConnection: close\r\n\r\n"
    );
    let mut body = String::new();
    let _ = stream.read_to_string(&mut body);
    body.lines()
        .find_map(|l| l.strip_prefix("sluice_runtime_tasks "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

/// A Redis fault, applied with redis-cli and kill; returns what it was.
fn apply_fault(choice: u64, port: u16, redis_pid: u32) -> &'static str {
    let cli = |args: &[&str]| {
        let _ = std::process::Command::new("redis-cli")
            .args(["-p", &port.to_string()])
            .args(args)
            .output();
    };
    let signal = |name: &str| {
        let _ = std::process::Command::new("kill")
            .args([name, &redis_pid.to_string()])
            .status();
    };
    match choice % 4 {
        0 => {
            signal("-STOP");
            std::thread::sleep(Duration::from_secs(2));
            signal("-CONT");
            "stopped 2 s (SIGSTOP)"
        }
        1 => {
            cli(&["CLIENT", "KILL", "TYPE", "normal"]);
            "clients killed"
        }
        2 => {
            cli(&["FUNCTION", "FLUSH"]);
            cli(&["SCRIPT", "FLUSH"]);
            "scripts flushed"
        }
        _ => {
            cli(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
            cli(&["CONFIG", "SET", "maxmemory", "1"]);
            std::thread::sleep(Duration::from_secs(3));
            cli(&["CONFIG", "SET", "maxmemory", "0"]);
            "out of memory 3 s"
        }
    }
}

/// One server under the soak.
struct Server {
    name: &'static str,
    pid: u32,
    http: String,
    period: Arc<Mutex<Period>>,
    /// Over the whole soak.
    calls: AtomicU64,
    errors_outside: AtomicU64,
    errors_in_faults: AtomicU64,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    if args.write_config {
        std::fs::write(&args.config, config(0))?;
        return Ok(());
    }
    let started = Instant::now();
    let until = started + args.duration;
    let faults = Arc::new(Faults::default());
    let mut servers = Vec::new();
    for (name, target, pid, http) in [
        ("memory", &args.memory, args.memory_pid, &args.memory_http),
        ("redis", &args.redis, args.redis_pid, &args.redis_http),
    ] {
        let server = Arc::new(Server {
            name,
            pid,
            http: http.clone(),
            period: Arc::new(Mutex::new(Period::default())),
            calls: AtomicU64::new(0),
            errors_outside: AtomicU64::new(0),
            errors_in_faults: AtomicU64::new(0),
        });
        let channel = Endpoint::from_shared(format!("http://{target}"))?
            .connect()
            .await?;
        let callers = 32_u64;
        let every = Duration::from_micros(1_000_000 * callers / args.rate.max(1));
        for index in 0..callers {
            let faults = if name == "redis" {
                faults.clone()
            } else {
                Arc::new(Faults::default())
            };
            tokio::spawn(caller(
                RateLimitServiceClient::new(channel.clone()),
                index,
                every,
                started,
                until,
                server.period.clone(),
                faults,
            ));
        }
        servers.push(server);
    }
    // Reloads every 5 s; a fault every 20-60 s.
    let config_path = args.config.clone();
    tokio::spawn(async move {
        let mut generation = 0;
        loop {
            tokio::time::sleep(Duration::from_secs(5)).await;
            generation += 1;
            let path = config_path.clone();
            // Whole or not at all: written beside the watched directory, renamed into it.
            let _ = tokio::task::spawn_blocking(move || {
                let temporary =
                    std::env::temp_dir().join(format!("soak-{}.tmp", std::process::id()));
                std::fs::write(&temporary, config(generation))?;
                std::fs::rename(&temporary, &path)
            })
            .await;
        }
    });
    let (port, redis_pid, fault_log) = (args.redis_port, args.redis_server_pid, faults.clone());
    tokio::task::spawn_blocking(move || {
        let mut n: u64 = 0x9e37_79b9;
        while Instant::now() + Duration::from_secs(70) < until {
            n = n.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            std::thread::sleep(Duration::from_secs(20 + (n >> 33) % 40));
            let start = started.elapsed().as_millis() as u64;
            let log = || fault_log.0.lock().unwrap_or_else(|p| p.into_inner());
            log().push((start, u64::MAX));
            let what = apply_fault(n >> 40, port, redis_pid);
            let end = started.elapsed().as_millis() as u64;
            if let Some(last) = log().last_mut() {
                last.1 = end;
            }
            eprintln!("{:>6.0} s  fault: {what}", start as f64 / 1000.0);
        }
    });
    println!("| t (min) | server | calls | errors outside faults | errors in faults | RSS (MiB) | fds | threads | tasks | highest share of a limit | most leases held (of {LEASES}) |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    let mut last = Instant::now();
    while Instant::now() < until {
        tokio::time::sleep(args.report_every.min(until - Instant::now())).await;
        let seconds = last.elapsed().as_secs_f64();
        last = Instant::now();
        for server in &servers {
            let period =
                std::mem::take(&mut *server.period.lock().unwrap_or_else(|p| p.into_inner()));
            let (rss_kib, fds, threads) = process(server.pid);
            let tasks = runtime_tasks(&server.http);
            // The most any key was admitted, against what its limit allows in the period
            // (its rate, plus one period's worth of burst).
            let allowed = LIMIT as f64 * (seconds + 1.0);
            let share = period
                .admitted
                .values()
                .map(|&a| a as f64 / allowed)
                .fold(0.0, f64::max);
            server.calls.fetch_add(period.calls, Ordering::Relaxed);
            server
                .errors_outside
                .fetch_add(period.errors_outside, Ordering::Relaxed);
            server
                .errors_in_faults
                .fetch_add(period.errors_in_faults, Ordering::Relaxed);
            println!(
                "| {:.0} | {} | {} | {} | {} | {:.1} | {} | {} | {} | {:.2} | {} |",
                started.elapsed().as_secs_f64() / 60.0,
                server.name,
                period.calls,
                period.errors_outside,
                period.errors_in_faults,
                rss_kib as f64 / 1024.0,
                fds,
                threads,
                tasks,
                share,
                period.most_held,
            );
        }
    }
    for server in &servers {
        eprintln!(
            "{}: {} calls, {} errors outside faults, {} in faults",
            server.name,
            server.calls.load(Ordering::Relaxed),
            server.errors_outside.load(Ordering::Relaxed),
            server.errors_in_faults.load(Ordering::Relaxed),
        );
    }
    let faults = faults.0.lock().unwrap_or_else(|p| p.into_inner()).len();
    eprintln!("{faults} Redis faults");
    Ok(())
}
