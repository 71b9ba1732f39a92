//! `sluice simulate`: replays synthetic traffic against a config on a virtual clock, through
//! the same service and memory store the server runs, so users see what each algorithm does
//! to their traffic before they deploy it. Runs instantly and always gives the same result.

pub mod chart;
pub mod traffic;

use std::path::PathBuf;
use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::config::{self, ConfigErrors, LoadOptions};
use crate::limit::ceil_seconds;
use crate::metrics::Metrics;
use crate::proto::rate_limit_descriptor::Entry;
use crate::proto::rate_limit_response::Code;
use crate::proto::{RateLimitDescriptor, RateLimitRequest};
use crate::service::{DecisionError, RateLimiter, ServiceOptions};
use crate::store::memory::MemoryStore;
use crate::store::ManualClock;
pub use traffic::{Traffic, TrafficError};

/// What to simulate.
#[derive(Debug, Clone)]
pub struct Simulation {
    pub config_paths: Vec<PathBuf>,
    pub load_options: LoadOptions,
    pub domain: String,
    /// Each descriptor as (key, value) entries; each is simulated on its own.
    pub descriptors: Vec<Vec<(String, String)>>,
    pub traffic: Traffic,
    /// Chart bucket; `None` picks whole seconds, at most about 60 rows.
    pub bucket_us: Option<u64>,
}

/// Every decision of every descriptor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub runs: Vec<DescriptorRun>,
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimulatedDecision {
    pub time_us: u64,
    pub admitted: bool,
    pub remaining: u32,
    pub reset_s: i64,
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
    let config = Arc::new(ArcSwap::from_pointee(config));
    let runtime = tokio::runtime::Builder::new_current_thread().build()?;
    let times = simulation.traffic.times_us();
    let mut runs = Vec::new();
    for (entries, limit) in simulation.descriptors.iter().zip(limits) {
        let decisions = runtime.block_on(replay(&config, &simulation.domain, entries, &times))?;
        runs.push(DescriptorRun {
            descriptor: entries
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(","),
            limit,
            decisions,
        });
    }
    let duration_us = simulation.traffic.duration_us;
    let default_bucket = ceil_seconds(duration_us.div_ceil(60)).max(1) * 1_000_000;
    Ok(Report {
        runs,
        bucket_us: simulation
            .bucket_us
            .filter(|b| *b > 0)
            .unwrap_or(default_bucket),
        duration_us,
    })
}

/// One descriptor's requests at `times`, on a fresh store whose clock follows them.
async fn replay(
    config: &Arc<ArcSwap<config::Config>>,
    domain: &str,
    entries: &[(String, String)],
    times: &[u64],
) -> Result<Vec<SimulatedDecision>, SimulateError> {
    let clock = Arc::new(ManualClock::default());
    let store = Arc::new(MemoryStore::new(1024, clock.clone()));
    let metrics = Arc::new(Metrics::new(0.8, 0));
    let limiter = RateLimiter::new(config.clone(), store, ServiceOptions::default(), metrics);
    let request = RateLimitRequest {
        domain: domain.to_string(),
        descriptors: vec![RateLimitDescriptor {
            entries: entries
                .iter()
                .map(|(key, value)| Entry {
                    key: key.clone(),
                    value: value.clone(),
                })
                .collect(),
            ..Default::default()
        }],
        hits_addend: 0,
    };
    let mut decisions = Vec::with_capacity(times.len());
    for &time_us in times {
        clock.set(time_us);
        let response = limiter
            .decide(&request)
            .await
            .map_err(SimulateError::Refused)?;
        let status = response.statuses.first().cloned().unwrap_or_default();
        decisions.push(SimulatedDecision {
            time_us,
            admitted: status.code != Code::OverLimit as i32,
            remaining: status.limit_remaining,
            reset_s: status.duration_until_reset.map_or(0, |d| d.seconds),
        });
    }
    Ok(decisions)
}

/// The limit the descriptor falls under, in words.
fn describe(domain: &config::Domain, entries: &[(String, String)]) -> String {
    let matched = domain.resolve(entries.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    match matched.map(|m| m.rule) {
        None => "no limit matches: every request is admitted".to_string(),
        Some(rule) if rule.is_unlimited() => "unlimited".to_string(),
        Some(rule) => {
            let limits: Vec<String> = rule
                .limits
                .iter()
                .filter_map(|named| named.limit.map(|limit| limit.to_string()))
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
