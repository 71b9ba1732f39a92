//! Limitador and sluice side by side (`scripts/limitador-differential`): for each seed, a
//! generated limits file (conditions, variables, several limits in a namespace, variables a
//! request may lack) and a generated sequence of calls (Envoy's ShouldRateLimit, Kuadrant's
//! CheckRateLimit and Report, Limitador's HTTP check, report and check_and_report), sent to a
//! live Limitador and to sluice run as `limitador-server`, each on its memory store (or each
//! on a Redis of its own), with the same command line. Every answer is compared, then Limitador's series (`authorized_calls`,
//! `authorized_hits`, `limited_calls` by namespace). A difference the docs name
//! (docs/kuadrant.md) is counted apart; any other fails the run, with its seed and call.
//!
//!   limitador_differential --limitador PATH --sluice PATH [--seeds 10] [--calls 200]
//!                          [--storage memory|redis]

#[path = "../differential/error.rs"]
mod error;
#[allow(dead_code)]
#[path = "../differential/generate.rs"]
mod generate;
// Shared with the reference's run, which reads Redis's keys too.
#[allow(dead_code)]
#[path = "../differential/process.rs"]
mod process;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use sluice_proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use sluice_proto::kuadrant::service::ratelimit::v1::rate_limit_service_client::RateLimitServiceClient as KuadrantClient;
use sluice_proto::rate_limit_descriptor::Entry;
use sluice_proto::rate_limit_response::Code;
use sluice_proto::{RateLimitDescriptor, RateLimitRequest};
use tonic::transport::Channel;

pub use error::Error;
use generate::Rng;
use process::{free_port, Process, Redis};

#[derive(Parser, Debug)]
#[command(about = "Runs Limitador and sluice side by side on generated limits and calls")]
struct Args {
    /// Limitador's server binary (built from its own source, outside this repository).
    #[arg(long, env = "LIMITADOR_BIN")]
    limitador: PathBuf,
    /// sluice's binary (run under the name `limitador-server`).
    #[arg(long)]
    sluice: PathBuf,
    #[arg(long, default_value_t = 10)]
    seeds: u64,
    #[arg(long, default_value_t = 1)]
    first_seed: u64,
    #[arg(long, default_value_t = 200)]
    calls: usize,
    /// `memory`, or `redis`: each server on a `redis-server` of its own.
    #[arg(long, default_value = "memory", value_parser = ["memory", "redis"])]
    storage: String,
}

/// Which calls a run sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Calls {
    Every,
    /// Envoy's ShouldRateLimit alone.
    Rls,
    /// Kuadrant's gRPC calls and Limitador's HTTP API alone.
    Kuadrant,
}

/// The namespace every generated limit and call is in.
const NAMESPACE: &str = "ns";
/// Entry keys and the values they take; a call may lack any of them.
const KEYS: [(&str, &[&str]); 3] = [
    ("method", &["GET", "POST"]),
    ("user", &["u1", "u2", "u3"]),
    ("tier", &["gold", "free"]),
];

/// A limits file of two to four limits: a period long enough that no window ends in a run
/// (sluice's windows are aligned to the epoch, Limitador's start at their first hit).
fn limits_file(rng: &mut Rng) -> String {
    let mut text = String::new();
    for index in 0..2 + rng.below(3) {
        let max_value = 1 + rng.below(6);
        text.push_str(&format!(
            "- namespace: {NAMESPACE}\n  max_value: {max_value}\n  seconds: 86400\n  name: limit-{index}\n"
        ));
        // Limitador requires both lists, empty or not.
        let (key, values) = *rng.pick(&KEYS);
        let condition = format!("\"descriptors[0]['{key}'] == '{}'\"", rng.pick(values));
        let conditions = if rng.chance(60) {
            condition
        } else {
            String::new()
        };
        let (variable, _) = *rng.pick(&KEYS);
        let variable = format!("\"descriptors[0]['{variable}']\"");
        let variables = if rng.chance(70) {
            variable
        } else {
            String::new()
        };
        text.push_str(&format!(
            "  conditions: [{conditions}]\n  variables: [{variables}]\n"
        ));
    }
    text
}

/// One call of a run.
#[derive(Debug, Clone)]
enum Call {
    Should(BTreeMap<String, String>, u32),
    Check(BTreeMap<String, String>, u32),
    Report(BTreeMap<String, String>, u32),
    Http(&'static str, BTreeMap<String, String>, u32),
}

/// `count` calls of the kinds `kinds` allows. On Redis sluice counts ShouldRateLimit and
/// Kuadrant's calls on keys of their own (docs/kuadrant.md, "Counters on Redis"), so a run
/// there sends one family: Kuadrant routes each policy's limits through one.
fn calls(rng: &mut Rng, count: usize, kinds: Calls) -> Vec<Call> {
    (0..count)
        .map(|_| {
            let mut entries = BTreeMap::new();
            for (key, values) in KEYS {
                if rng.chance(80) {
                    entries.insert(key.to_string(), rng.pick(values).to_string());
                }
            }
            let hits = rng.below(3) as u32;
            let kind = match kinds {
                Calls::Every => rng.below(6),
                Calls::Rls => 0,
                Calls::Kuadrant => 2 + rng.below(4),
            };
            match kind {
                0 | 1 => Call::Should(entries, hits),
                2 => Call::Check(entries, hits),
                3 => Call::Report(entries, hits),
                4 => {
                    let path = if rng.chance(50) { "/check" } else { "/report" };
                    Call::Http(path, entries, hits.max(1))
                }
                _ => Call::Http("/check_and_report", entries, hits.max(1)),
            }
        })
        .collect()
}

/// One server of a run: its process, gRPC channel and HTTP address.
struct Side {
    _process: Process,
    channel: Channel,
    http: SocketAddr,
}

impl Side {
    /// `binary` with Limitador's command line on `limits` and `storage` (its words), once
    /// `/status` answers.
    async fn start(binary: &Path, limits: &Path, storage: &[String]) -> Result<Side, Error> {
        let (grpc, http) = (free_port()?, free_port()?);
        let child = Command::new(binary)
            .args(["--rls-ip", "127.0.0.1", "--rls-port", &grpc.to_string()])
            .args(["--http-ip", "127.0.0.1", "--http-port", &http.to_string()])
            .arg(limits)
            .args(storage)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| Error(format!("cannot start {}: {e}", binary.display())))?;
        let process = Process(child);
        let http = SocketAddr::from(([127, 0, 0, 1], http));
        let deadline = Instant::now() + Duration::from_secs(30);
        while http_call(http, "GET", "/status", "").map_or(true, |(code, _)| code != 200) {
            if Instant::now() > deadline {
                return Err(Error(format!("{} did not serve", binary.display())));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let channel = Channel::from_shared(format!("http://127.0.0.1:{grpc}"))
            .map_err(|e| Error(e.to_string()))?
            .connect()
            .await
            .map_err(|e| Error(format!("gRPC: {e}")))?;
        Ok(Side {
            _process: process,
            channel,
            http,
        })
    }

    /// What the server answers `call`: the code, as text.
    async fn answer(&self, call: &Call) -> Result<String, Error> {
        let grpc = |e: tonic::Status| Error(format!("gRPC: {e}"));
        let code = |code: i32| format!("{:?}", Code::try_from(code).unwrap_or(Code::Unknown));
        Ok(match call {
            Call::Should(entries, hits) => {
                let mut client = RateLimitServiceClient::new(self.channel.clone());
                let response = client.should_rate_limit(request(entries, *hits)).await;
                code(response.map_err(grpc)?.into_inner().overall_code)
            }
            Call::Check(entries, hits) => {
                let mut client = KuadrantClient::new(self.channel.clone());
                let response = client.check_rate_limit(request(entries, *hits)).await;
                code(response.map_err(grpc)?.into_inner().overall_code)
            }
            Call::Report(entries, hits) => {
                let mut client = KuadrantClient::new(self.channel.clone());
                let response = client.report(request(entries, *hits)).await;
                code(response.map_err(grpc)?.into_inner().overall_code)
            }
            Call::Http(path, entries, delta) => {
                let body = serde_json::json!({
                    "namespace": NAMESPACE, "values": entries, "delta": delta,
                });
                let (status, _) = http_call(self.http, "POST", path, &body.to_string())?;
                format!("HTTP {status}")
            }
        })
    }

    /// Limitador's series of the namespace: `name{labels}` -> value.
    fn series(&self) -> Result<BTreeMap<String, f64>, Error> {
        let (_, text) = http_call(self.http, "GET", "/metrics", "")?;
        Ok(text
            .lines()
            .filter(|line| {
                ["authorized_calls", "authorized_hits", "limited_calls"]
                    .iter()
                    .any(|name| line.starts_with(&format!("{name}{{")))
            })
            .filter_map(|line| {
                let (series, value) = line.rsplit_once(' ')?;
                Some((series.to_string(), value.parse().ok()?))
            })
            .collect())
    }
}

/// One descriptor of `entries` in the namespace, at `hits`.
fn request(entries: &BTreeMap<String, String>, hits: u32) -> RateLimitRequest {
    let entries = entries
        .iter()
        .map(|(key, value)| Entry {
            key: key.clone(),
            value: value.clone(),
        })
        .collect();
    RateLimitRequest {
        domain: NAMESPACE.into(),
        descriptors: vec![RateLimitDescriptor {
            entries,
            ..RateLimitDescriptor::default()
        }],
        hits_addend: hits,
    }
}

/// One HTTP/1.1 exchange: the status and the body.
fn http_call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &str,
) -> Result<(u16, String), Error> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut text = String::new();
    stream.read_to_string(&mut text)?;
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| Error(format!("no HTTP status from {addr}{path}")))?;
    let body = text
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    Ok((status, body))
}

/// A run of one seed: how many calls agreed, and each difference.
async fn run(args: &Args, seed: u64, link: &Path) -> Result<(usize, Vec<String>), Error> {
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir()?;
    let limits = dir.path().join("limits.yaml");
    let text = limits_file(&mut rng);
    std::fs::write(&limits, &text)?;
    // On Redis, each server on a Redis of its own, and one family of calls a seed.
    let (redis, kinds) = match args.storage.as_str() {
        "redis" => {
            let kinds = if seed % 2 == 1 {
                Calls::Rls
            } else {
                Calls::Kuadrant
            };
            (Some((Redis::start()?, Redis::start()?)), kinds)
        }
        _ => (None, Calls::Every),
    };
    let storage = |redis: Option<&Redis>| match redis {
        Some(redis) => vec![
            "redis".to_string(),
            format!("redis://127.0.0.1:{}", redis.port),
        ],
        None => vec!["memory".to_string()],
    };
    let (theirs_redis, ours_redis) = (redis.as_ref().map(|r| &r.0), redis.as_ref().map(|r| &r.1));
    let limitador = Side::start(&args.limitador, &limits, &storage(theirs_redis)).await?;
    let sluice = Side::start(link, &limits, &storage(ours_redis)).await?;
    let mut agreed = 0;
    let mut differences = Vec::new();
    for (index, call) in calls(&mut rng, args.calls, kinds).iter().enumerate() {
        let (theirs, ours) = (limitador.answer(call).await?, sluice.answer(call).await?);
        if theirs == ours {
            agreed += 1;
        } else {
            differences.push(format!(
                "seed {seed}, call {index} {call:?}: Limitador {theirs}, sluice {ours}\n{text}"
            ));
        }
    }
    let (theirs, ours) = (limitador.series()?, sluice.series()?);
    if theirs != ours {
        differences.push(format!(
            "seed {seed}, series: Limitador {theirs:?}, sluice {ours:?}"
        ));
    }
    Ok((agreed, differences))
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let dir = match tempfile::tempdir() {
        Ok(dir) => dir,
        Err(e) => {
            eprintln!("limitador_differential: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    // sluice answers to Limitador's command line under Limitador's name.
    let link = dir.path().join("limitador-server");
    let sluice = std::fs::canonicalize(&args.sluice).unwrap_or_else(|_| args.sluice.clone());
    if let Err(e) = std::os::unix::fs::symlink(&sluice, &link) {
        eprintln!("limitador_differential: {e}");
        return std::process::ExitCode::from(2);
    }
    let (mut calls, mut agreed, mut failed) = (0, 0, Vec::new());
    for seed in args.first_seed..args.first_seed + args.seeds {
        match run(&args, seed, &link).await {
            Ok((agreeing, differences)) => {
                calls += args.calls;
                agreed += agreeing;
                failed.extend(differences);
            }
            Err(e) => {
                eprintln!("limitador_differential: seed {seed}: {e}");
                return std::process::ExitCode::from(2);
            }
        }
    }
    println!(
        "{} seeds, {calls} calls: {agreed} agreed, {} unexplained differences",
        args.seeds,
        failed.len()
    );
    for difference in &failed {
        println!("{difference}");
    }
    if failed.is_empty() {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    }
}
