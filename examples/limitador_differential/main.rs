//! Limitador and sluice side by side (`scripts/limitador-differential`): for each seed, a
//! generated limits file (conditions, variables, several limits in a namespace, variables a
//! request may lack) and a generated sequence of calls (Envoy's ShouldRateLimit, Kuadrant's
//! CheckRateLimit and Report, Limitador's HTTP check, report and check_and_report), sent to a
//! live Limitador and to sluice run as `limitador-server`, each on its memory store (or each
//! on a Redis of its own), with the same command line (`--rate-limit-headers DRAFT_VERSION_03`
//! included). Every answer is compared: the code, and for ShouldRateLimit the headers
//! (`X-RateLimit-Reset` within a second). Every 50 calls and at the end, `/counters` is
//! compared (each counter's limit, variables and remaining, and its seconds to expiry within
//! one: the windows start at each counter's first hit on both), and at the end Limitador's
//! series (`authorized_calls`, `authorized_hits`, `limited_calls` by namespace). Any
//! difference fails the run, with its seed and call, but those docs/kuadrant.md names (the
//! counters after the most constrained one in `X-RateLimit-Limit`, sluice's `Retry-After`,
//! Limitador's `remaining` wrapped below zero, read as 0, and the counters with nothing
//! charged that Limitador's memory store lists, and Limitador's `X-RateLimit-Reset` of 0 at
//! the first hit of a limit without variables), which are left out; and where counters of
//! equal remaining tie for the headers, Limitador's pick is its hash set's order, so
//! sluice's must only name a limit that applies.
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

/// The namespace every generated limit and call is in.
const NAMESPACE: &str = "ns";
/// Entry keys and the values they take; a call may lack any of them.
const KEYS: [(&str, &[&str]); 3] = [
    ("method", &["GET", "POST"]),
    ("user", &["u1", "u2", "u3"]),
    ("tier", &["gold", "free"]),
];

/// A generated limit: its name, its condition (`descriptors[0][key] == value`) and its
/// variable (`descriptors[0][key]`), when it has them.
struct Generated {
    name: String,
    condition: Option<(&'static str, &'static str)>,
    variable: Option<&'static str>,
}

impl Generated {
    /// Whether the limit makes a counter for a call of `entries`: its condition holds and
    /// its variable has a value.
    fn applies(&self, entries: &BTreeMap<String, String>) -> bool {
        self.condition
            .is_none_or(|(key, value)| entries.get(key).is_some_and(|v| v == value))
            && self.variable.is_none_or(|key| entries.contains_key(key))
    }
}

/// A limits file of two to four limits, of periods long enough that no window ends in a run
/// (a call at a window's end could reach one server before it and the other after).
fn limits_file(rng: &mut Rng) -> (String, Vec<Generated>) {
    let mut text = String::new();
    let mut generated = Vec::new();
    for index in 0..2 + rng.below(3) {
        let max_value = 1 + rng.below(6);
        let seconds = rng.pick(&[600, 3600, 86400]);
        text.push_str(&format!(
            "- namespace: {NAMESPACE}\n  max_value: {max_value}\n  seconds: {seconds}\n  name: limit-{index}\n"
        ));
        // Limitador requires both lists, empty or not.
        let (key, values) = *rng.pick(&KEYS);
        let value = *rng.pick(values);
        let condition = rng.chance(60).then_some((key, value));
        let conditions = condition.map_or(String::new(), |(key, value)| {
            format!("\"descriptors[0]['{key}'] == '{value}'\"")
        });
        let (variable, _) = *rng.pick(&KEYS);
        let variable = rng.chance(70).then_some(variable);
        let variables =
            variable.map_or(String::new(), |key| format!("\"descriptors[0]['{key}']\""));
        text.push_str(&format!(
            "  conditions: [{conditions}]\n  variables: [{variables}]\n"
        ));
        generated.push(Generated {
            name: format!("limit-{index}"),
            condition,
            variable,
        });
    }
    (text, generated)
}

/// One call of a run.
#[derive(Debug, Clone)]
enum Call {
    Should(BTreeMap<String, String>, u32),
    Check(BTreeMap<String, String>, u32),
    Report(BTreeMap<String, String>, u32),
    Http(&'static str, BTreeMap<String, String>, u32),
}

/// `count` calls of every kind, mixed: they count on one counter per limit and values.
fn calls(rng: &mut Rng, count: usize) -> Vec<Call> {
    (0..count)
        .map(|_| {
            let mut entries = BTreeMap::new();
            for (key, values) in KEYS {
                if rng.chance(80) {
                    entries.insert(key.to_string(), rng.pick(values).to_string());
                }
            }
            let hits = rng.below(3) as u32;
            match rng.below(6) {
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

/// A server's answer to a call: its code and headers as text, but `X-RateLimit-Limit`'s
/// binding limit (`6, 6;w=600;name="limit-0"`) and `X-RateLimit-Reset`'s seconds apart.
#[derive(Debug, Default)]
struct Answer {
    text: String,
    binding: Option<String>,
    reset: Option<u64>,
}

/// How two answers to a call compare.
#[derive(Debug, PartialEq, Eq)]
enum Compared {
    Agree,
    /// The same code and remaining, of two counters that tie: Limitador orders the counters
    /// of equal remaining as its hash set does (docs/kuadrant.md); sluice's names a limit
    /// that applies to the call.
    Tie,
    Differ,
}

impl Answer {
    fn compare(&self, ours: &Answer, call: &Call, limits: &[Generated]) -> Compared {
        if self.text != ours.text {
            return Compared::Differ;
        }
        let binding = |answer: &Answer| {
            let named = answer
                .binding
                .as_deref()
                .and_then(|b| b.split(";name=\"").nth(1))
                .map(|name| name.trim_end_matches('"'));
            limits
                .iter()
                .find(|limit| Some(limit.name.as_str()) == named)
        };
        if self.binding == ours.binding {
            // Limitador's counter of a limit without variables starts its window at its
            // first update, so that hit is told 0 (docs/kuadrant.md); sluice, the window.
            let unstarted = self.reset == Some(0)
                && binding(self).is_some_and(|limit| limit.variable.is_none());
            return match unstarted || within_a_second(self.reset, ours.reset) {
                true => Compared::Agree,
                false => Compared::Differ,
            };
        }
        let Call::Should(entries, _) = call else {
            return Compared::Differ;
        };
        match binding(ours) {
            Some(limit) if limit.applies(entries) && self.binding.is_some() => Compared::Tie,
            _ => Compared::Differ,
        }
    }
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
            .args(["--rate-limit-headers", "DRAFT_VERSION_03"])
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

    /// What the server answers `call`.
    async fn answer(&self, call: &Call) -> Result<Answer, Error> {
        let grpc = |e: tonic::Status| Error(format!("gRPC: {e}"));
        let code = |code: i32| format!("{:?}", Code::try_from(code).unwrap_or(Code::Unknown));
        let text = match call {
            Call::Should(entries, hits) => {
                let mut client = RateLimitServiceClient::new(self.channel.clone());
                let response = client.should_rate_limit(request(entries, *hits)).await;
                let response = response.map_err(grpc)?.into_inner();
                let mut answer = Answer {
                    text: code(response.overall_code),
                    ..Answer::default()
                };
                let mut headers = response.response_headers_to_add;
                headers.sort_by(|a, b| a.key.cmp(&b.key));
                for header in headers {
                    match header.key.as_str() {
                        "X-RateLimit-Reset" => answer.reset = header.value.parse().ok(),
                        // sluice's addition on a denial (docs/kuadrant.md, the differences).
                        "Retry-After" => {}
                        // Limitador lists every counter after the most constrained one;
                        // sluice gives that one alone (docs/kuadrant.md).
                        "X-RateLimit-Limit" => {
                            let binding: Vec<&str> = header.value.splitn(3, ", ").take(2).collect();
                            answer.binding = Some(binding.join(", "));
                        }
                        "X-RateLimit-Remaining" => answer.text.push_str(&format!(
                            "; {}: {}",
                            header.key,
                            unwrapped(header.value.parse().unwrap_or(0))
                        )),
                        _ => answer
                            .text
                            .push_str(&format!("; {}: {}", header.key, header.value)),
                    }
                }
                return Ok(answer);
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
        };
        Ok(Answer {
            text,
            ..Answer::default()
        })
    }

    /// `/counters` of the namespace, each counter as `name {variables}: remaining`, sorted,
    /// with its seconds to expiry.
    fn counters(&self) -> Result<Vec<(String, u64)>, Error> {
        let (status, body) = http_call(self.http, "GET", &format!("/counters/{NAMESPACE}"), "")?;
        if status != 200 {
            return Err(Error(format!("/counters answered {status}: {body}")));
        }
        let listed: serde_json::Value =
            serde_json::from_str(&body).map_err(|e| Error(format!("/counters: {e}: {body}")))?;
        let mut counters: Vec<(String, u64)> = listed
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            // Limitador's memory store lists a counter that a denied request looked at, with
            // nothing charged; sluice lists those that hold a count (docs/kuadrant.md).
            .filter(|counter| counter["remaining"] != counter["limit"]["max_value"])
            .map(|counter| {
                let remaining = unwrapped(counter["remaining"].as_u64().unwrap_or(0));
                let text = format!(
                    "{} {}: {remaining}",
                    counter["limit"]["name"], counter["set_variables"]
                );
                (text, counter["expires_in_seconds"].as_u64().unwrap_or(0))
            })
            .collect();
        counters.sort();
        Ok(counters)
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

/// A `remaining` as sluice gives it: Limitador's wraps below zero once a report takes a
/// counter past its limit (2^64 - 3 for 3 past), a defect docs/kuadrant.md names; sluice
/// answers 0.
fn unwrapped(remaining: u64) -> u64 {
    if remaining > u64::MAX / 2 {
        0
    } else {
        remaining
    }
}

/// Whether two times in whole seconds agree, within the second a call may straddle.
fn within_a_second(theirs: Option<u64>, ours: Option<u64>) -> bool {
    match (theirs, ours) {
        (Some(theirs), Some(ours)) => theirs.abs_diff(ours) <= 1,
        (theirs, ours) => theirs == ours,
    }
}

/// What one seed's run found: the calls that agreed (ties included), the ties, and each
/// difference.
struct Found {
    agreed: usize,
    ties: usize,
    differences: Vec<String>,
}

/// A run of one seed.
async fn run(args: &Args, seed: u64, link: &Path) -> Result<Found, Error> {
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir()?;
    let limits = dir.path().join("limits.yaml");
    let (text, generated) = limits_file(&mut rng);
    std::fs::write(&limits, &text)?;
    // On Redis, each server on a Redis of its own.
    let redis = match args.storage.as_str() {
        "redis" => Some((Redis::start()?, Redis::start()?)),
        _ => None,
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
    let (mut agreed, mut ties) = (0, 0);
    let mut differences = Vec::new();
    let calls = calls(&mut rng, args.calls);
    for (index, call) in calls.iter().enumerate() {
        let (theirs, ours) = (limitador.answer(call).await?, sluice.answer(call).await?);
        let compared = theirs.compare(&ours, call, &generated);
        ties += usize::from(compared == Compared::Tie);
        if compared != Compared::Differ {
            agreed += 1;
        } else {
            differences.push(format!(
                "seed {seed}, call {index} {call:?}: Limitador {theirs:?}, sluice {ours:?}\n{text}"
            ));
        }
        if index % 50 == 49 || index + 1 == calls.len() {
            let (theirs, ours) = (limitador.counters()?, sluice.counters()?);
            let same = theirs.len() == ours.len()
                && theirs
                    .iter()
                    .zip(&ours)
                    .all(|(a, b)| a.0 == b.0 && within_a_second(Some(a.1), Some(b.1)));
            if !same {
                differences.push(format!(
                    "seed {seed}, /counters after call {index}: Limitador {theirs:?}, sluice {ours:?}\n{text}"
                ));
            }
        }
    }
    let (theirs, ours) = (limitador.series()?, sluice.series()?);
    if theirs != ours {
        differences.push(format!(
            "seed {seed}, series: Limitador {theirs:?}, sluice {ours:?}"
        ));
    }
    Ok(Found {
        agreed,
        ties,
        differences,
    })
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
    let (mut calls, mut agreed, mut ties, mut failed) = (0, 0, 0, Vec::new());
    for seed in args.first_seed..args.first_seed + args.seeds {
        match run(&args, seed, &link).await {
            Ok(found) => {
                calls += args.calls;
                agreed += found.agreed;
                ties += found.ties;
                failed.extend(found.differences);
            }
            Err(e) => {
                eprintln!("limitador_differential: seed {seed}: {e}");
                return std::process::ExitCode::from(2);
            }
        }
    }
    println!(
        "{} seeds, {calls} calls: {agreed} agreed ({ties} of them ties of counters broken \
         otherwise), {} unexplained differences",
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
