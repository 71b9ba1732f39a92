//! `sluice simulate`: replays synthetic traffic against a config on a virtual clock, through
//! the same request path (`sluice_limiter`) and memory store the server runs, so users see what each algorithm does
//! to their traffic before they deploy it. Runs instantly and always gives the same result.

pub mod chart;
pub mod traffic;

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::path::PathBuf;
use std::sync::Arc;

use sluice_config::{self as config, ConfigErrors, LoadOptions};
use sluice_core::lease::LEASE_KEY;
use sluice_core::limit::ceil_seconds;
use sluice_core::modifier::{Event, Modifiers};
use sluice_limiter::ticket;
use sluice_limiter::{DecisionError, Limiter, LimiterOptions};
use sluice_proto::rate_limit_descriptor::Entry;
use sluice_proto::rate_limit_response::Code;
use sluice_proto::{RateLimitDescriptor, RateLimitRequest};
use sluice_store::memory::MemoryStore;
use sluice_store::ManualClock;
pub use traffic::{Traffic, TrafficError};

/// What to simulate.
#[derive(Debug, Clone)]
pub struct Simulation {
    pub config_paths: Vec<PathBuf>,
    pub load_options: LoadOptions,
    pub domain: String,
    /// Each descriptor as (key, value) entries; each is simulated on its own, or, with
    /// `together`, all in each request.
    pub descriptors: Vec<Vec<(String, String)>>,
    /// Every request carries every descriptor (a request of several descriptors).
    pub together: bool,
    pub traffic: Traffic,
    /// The cost of each request of `traffic`.
    pub cost: u64,
    /// Costs reported after the response (Envoy's `apply_on_stream_done`): one request of
    /// cost `count` at `at_us` each.
    pub reports: Vec<traffic::Burst>,
    /// How long each admitted request runs: its leases are released then, and the tokens its
    /// limits' modifiers gave returned (`None`: never).
    pub hold_us: Option<u64>,
    /// The actual cost each admitted request reports when it ends (with `hold_us`): a settle
    /// of its holds, or, where no hold was opened, a plain charge (a gateway that checks
    /// at the request and charges at the end). `None`: the request's own cost settles.
    pub actual: Option<u64>,
    /// Chart bucket; `None` picks whole seconds, at most about 60 rows.
    pub bucket_us: Option<u64>,
}

/// Every decision of every descriptor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub runs: Vec<DescriptorRun>,
    /// With requests of several descriptors: how many requests were admitted as a whole.
    pub requests_admitted: Option<usize>,
    pub bucket_us: u64,
    pub duration_us: u64,
}

/// The decisions one descriptor got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescriptorRun {
    /// `key=value,key2=value2`.
    pub descriptor: String,
    /// The limit that applied, described.
    pub limit: String,
    pub decisions: Vec<SimulatedDecision>,
}

/// What one request got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimulatedDecision {
    pub time_us: u64,
    pub admitted: bool,
    pub remaining: u32,
    pub reset_s: i64,
    /// What a modifier marked on this request (`Event`: a block imposed).
    pub event: Option<Event>,
}

/// Why a simulation cannot run.
#[derive(Debug, thiserror::Error)]
pub enum SimulateError {
    #[error("configuration refused:\n{0}")]
    Config(#[from] ConfigErrors),
    #[error("domain '{0}' is not in the configuration")]
    UnknownDomain(String),
    #[error("descriptor '{0}': expected key=value[,key=value...]")]
    Descriptor(String),
    #[error("the request was refused: {0}")]
    Refused(#[from] DecisionError),
    #[error("cannot start the runtime: {0}")]
    Runtime(#[from] std::io::Error),
}

/// Parses `key=value,key2=value2` into entries.
pub fn parse_descriptor(text: &str) -> Result<Vec<(String, String)>, SimulateError> {
    text.split(',')
        .map(|pair| match pair.split_once('=') {
            Some((key, value)) if !key.is_empty() => Ok((key.to_string(), value.to_string())),
            _ => Err(SimulateError::Descriptor(text.to_string())),
        })
        .collect()
}

/// Runs the simulation.
pub fn run(simulation: &Simulation) -> Result<Report, SimulateError> {
    let config = config::load(&simulation.config_paths, simulation.load_options)?;
    let Some(domain) = config.domain(&simulation.domain) else {
        return Err(SimulateError::UnknownDomain(simulation.domain.clone()));
    };
    let limits: Vec<String> = simulation
        .descriptors
        .iter()
        .map(|entries| describe(domain, entries))
        .collect();
    let runtime = tokio::runtime::Builder::new_current_thread().build()?;
    let requests = requests(simulation);
    let groups: Vec<Vec<usize>> = if simulation.together {
        vec![(0..simulation.descriptors.len()).collect()]
    } else {
        (0..simulation.descriptors.len()).map(|i| vec![i]).collect()
    };
    let mut runs: Vec<Option<DescriptorRun>> =
        simulation.descriptors.iter().map(|_| None).collect();
    for group in groups {
        let descriptors: Vec<&[(String, String)]> = group
            .iter()
            .map(|&i| simulation.descriptors[i].as_slice())
            .collect();
        let replayed = runtime.block_on(replay(
            &config,
            &simulation.domain,
            &descriptors,
            &requests,
            Ends {
                hold_us: simulation.hold_us,
                actual: simulation.actual,
            },
        ))?;
        for (position, &index) in group.iter().enumerate() {
            let entries = &simulation.descriptors[index];
            runs[index] = Some(DescriptorRun {
                descriptor: entries
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(","),
                limit: limits[index].clone(),
                decisions: replayed
                    .iter()
                    .map(|statuses| statuses[position].clone())
                    .collect(),
            });
        }
    }
    let runs: Vec<DescriptorRun> = runs.into_iter().flatten().collect();
    let requests_admitted = simulation.together.then(|| {
        (0..requests.len())
            .filter(|&i| runs.iter().all(|run| run.decisions[i].admitted))
            .count()
    });
    let duration_us = simulation.traffic.duration_us;
    let default_bucket = ceil_seconds(duration_us.div_ceil(60)).max(1) * 1_000_000;
    Ok(Report {
        runs,
        requests_admitted,
        bucket_us: simulation
            .bucket_us
            .filter(|b| *b > 0)
            .unwrap_or(default_bucket),
        duration_us,
    })
}

/// The requests of the simulation as (time, cost), in time order: the traffic at its cost,
/// and the reports.
fn requests(simulation: &Simulation) -> Vec<(u64, u64)> {
    let mut requests: Vec<(u64, u64)> = simulation
        .traffic
        .times_us()
        .into_iter()
        .map(|time_us| (time_us, simulation.cost))
        .collect();
    let duration_us = simulation.traffic.duration_us;
    requests.extend(
        simulation
            .reports
            .iter()
            .filter(|report| report.at_us < duration_us)
            .map(|report| (report.at_us, report.count)),
    );
    requests.sort_by_key(|&(time_us, _)| time_us);
    requests
}

/// How the simulated requests end: after how long, reporting what.
#[derive(Debug, Clone, Copy)]
struct Ends {
    hold_us: Option<u64>,
    actual: Option<u64>,
}

/// What the end of an admitted request sends, as Envoy's stream-done policies send it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum End {
    /// Releases the leases of the token.
    Release(String),
    /// Returns the token under a ticket's entry at the actual cost.
    Return(&'static str, String, u64),
    /// Charges the actual cost (no hold was opened).
    Charge(u64),
}

/// Requests of `descriptors` at (time, cost) on a fresh store whose clock follows them; per
/// request, each descriptor's decision. With `ends.hold_us`, an admitted request ends that
/// long after: its leases are released (its token sent back, as Envoy does when a stream
/// ends), its holds settled at the actual cost, or, with an actual cost and no hold, the
/// actual charged.
async fn replay(
    config: &config::Config,
    domain: &str,
    descriptors: &[&[(String, String)]],
    requests: &[(u64, u64)],
    ends: Ends,
) -> Result<Vec<Vec<SimulatedDecision>>, SimulateError> {
    let clock = Arc::new(ManualClock::default());
    let store = Arc::new(MemoryStore::new(1024, clock.clone()));
    let limiter = Limiter::new(store, LimiterOptions::default());
    let decide = async |request: &RateLimitRequest| {
        let decided = limiter.decide(config, request, |_, _| {}).await;
        decided.map(|decided| (decided.response, Modifiers::events(&decided.said)))
    };
    let mut decisions = Vec::with_capacity(requests.len());
    // Ends to come: (time, what), earliest first.
    let mut pending: BinaryHeap<Reverse<(u64, End)>> = BinaryHeap::new();
    for &(time_us, cost) in requests {
        while let Some(Reverse((at_us, end))) = pending.peek().cloned() {
            if at_us > time_us {
                break;
            }
            pending.pop();
            clock.set(at_us);
            let call = match &end {
                End::Release(token) => request_of(domain, descriptors, 0, Some((LEASE_KEY, token))),
                End::Return(key, token, actual) => {
                    request_of(domain, descriptors, *actual, Some((key, token)))
                }
                End::Charge(actual) => request_of(domain, descriptors, *actual, None),
            };
            decide(&call).await.map_err(SimulateError::Refused)?;
        }
        clock.set(time_us);
        let (response, events) = decide(&request_of(domain, descriptors, cost, None))
            .await
            .map_err(SimulateError::Refused)?;
        if let Some(hold_us) = ends.hold_us {
            let at_us = time_us.saturating_add(hold_us);
            if let Some(token) = ticket::token_in(&response, LEASE_KEY) {
                pending.push(Reverse((at_us, End::Release(token))));
            }
            let actual = ends.actual.unwrap_or(cost);
            let admitted = response.overall_code != Code::OverLimit as i32;
            let returned = Modifiers::tickets()
                .into_iter()
                .find_map(|(_, t)| ticket::token_in(&response, t.key).map(|token| (t.key, token)));
            match returned {
                Some((key, token)) => {
                    pending.push(Reverse((at_us, End::Return(key, token, actual))));
                }
                None if admitted && ends.actual.is_some() => {
                    pending.push(Reverse((at_us, End::Charge(actual))));
                }
                None => {}
            }
        }
        let statuses = response
            .statuses
            .iter()
            .enumerate()
            .map(|(index, status)| SimulatedDecision {
                time_us,
                admitted: status.code != Code::OverLimit as i32,
                remaining: status.limit_remaining,
                reset_s: status.duration_until_reset.map_or(0, |d| d.seconds),
                event: events.iter().find(|e| e.descriptor == index).cloned(),
            })
            .collect();
        decisions.push(statuses);
    }
    Ok(decisions)
}

/// A request of `descriptors` at `cost`; with `token`, each carries that entry (a lease's
/// release, a hold's settle).
fn request_of(
    domain: &str,
    descriptors: &[&[(String, String)]],
    cost: u64,
    token: Option<(&str, &str)>,
) -> RateLimitRequest {
    let token = token.map(|(key, token)| (key.to_string(), token.to_string()));
    RateLimitRequest {
        domain: domain.to_string(),
        descriptors: descriptors
            .iter()
            .map(|entries| RateLimitDescriptor {
                entries: entries
                    .iter()
                    .chain(token.as_ref())
                    .map(|(key, value)| Entry {
                        key: key.clone(),
                        value: value.clone(),
                    })
                    .collect(),
                hits_addend: Some(cost),
                ..Default::default()
            })
            .collect(),
        hits_addend: 0,
    }
}

/// The limit the descriptor falls under, in words.
fn describe(domain: &config::Domain, entries: &[(String, String)]) -> String {
    let pairs: Vec<(&str, &str)> = entries
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let matched = domain.resolve_reading(&pairs);
    match matched.map(|m| m.rule) {
        None => "no limit matches: every request is admitted".to_string(),
        Some(rule) if rule.is_unlimited() => "unlimited".to_string(),
        Some(rule) => {
            let limits: Vec<String> = rule
                .limits
                .iter()
                .filter_map(|named| named.limit.clone())
                .map(|mut limit| {
                    limit.modifiers.take_entries(pairs.iter().copied());
                    let mut text = limit.to_string();
                    for said in limit.modifiers.beside() {
                        text.push_str(&format!(" ({said})"));
                    }
                    // The class of traffic this is, when the limit's modifiers name one.
                    if let Some(class) = limit.modifiers.class() {
                        text.push_str(&format!(" (this traffic: {} {})", class.label, class.name));
                    }
                    text
                })
                .collect();
            let limits = limits.join(" and ");
            if rule.shadow_mode {
                format!("{limits} (shadow mode: never denies)")
            } else {
                limits
            }
        }
    }
}
