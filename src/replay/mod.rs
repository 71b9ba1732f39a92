//! `sluice replay`: a recording's calls decided again under a new config, in the service on
//! the memory store with a virtual clock following the recorded times, and compared with what
//! they got (the recorded decisions, or a baseline config replayed the same way). The report
//! (`report`) says per rule what changes; `svg` draws it. Deterministic: the same inputs give
//! the same report.

pub mod report;
pub mod svg;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use smallvec::SmallVec;

pub use report::Report;
use sluice_config::{self as config, Config, ConfigErrors, LoadOptions};
use sluice_core::engine::Charging;
use sluice_core::lease::LEASE_KEY;
use sluice_core::modifier::Modifiers;
use sluice_limiter::ticket;
use sluice_limiter::{Limiter, LimiterOptions};
use sluice_proto::rate_limit_response::Code;
use sluice_server::record::format::{self, Call, FormatError, RecordedOptions};
use sluice_store::memory::MemoryStore;
use sluice_store::ManualClock;

/// What to replay.
#[derive(Debug, Clone)]
pub struct Replay {
    /// The config under test.
    pub config: Vec<PathBuf>,
    /// The config to compare with, replayed the same way; `None`: the recorded decisions.
    pub baseline: Option<Vec<PathBuf>>,
    pub recordings: Vec<PathBuf>,
    pub merge_domain_config: bool,
    /// Compare with the config under test without its modifiers that keep something per
    /// request (those with a ticket),
    /// the calls replayed as a gateway without them sends them: a settle is a plain charge
    /// of the actual cost (instead of `baseline`).
    pub without_tickets: bool,
    /// A file of admin overrides in force under the config under test (docs/admin.md).
    pub overrides: Option<PathBuf>,
}

/// Why a replay cannot run.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("{0}")]
    Recording(#[from] FormatError),
    #[error("configuration {which} refused:\n{errors}")]
    Config {
        which: &'static str,
        errors: ConfigErrors,
    },
    #[error("{0} records decisions under other settings ({1:?}) than the first recording ({2:?})")]
    Options(PathBuf, RecordedOptions, RecordedOptions),
    #[error("{path}: call {call} has no recorded decisions: compare with --baseline")]
    NoDecisions { path: PathBuf, call: usize },
    #[error("cannot start the runtime: {0}")]
    Runtime(#[from] std::io::Error),
    #[error("overrides refused:\n{}", .0.join("\n"))]
    Overrides(Vec<String>),
}

/// What one call got on one side: its overall answer, each descriptor's, and whether the
/// config knew its domain or the service refused it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decided {
    pub admitted: bool,
    /// What each descriptor's limit decided on its own: admitted or not (a shadow-mode
    /// limit's denial included), `None` where no limit applied.
    pub descriptors: SmallVec<[Option<bool>; 2]>,
    pub unknown_domain: bool,
    pub refused: bool,
}

/// Runs the replay.
pub fn run(replay: &Replay) -> Result<Report, ReplayError> {
    let (calls, options) = read_recordings(&replay.recordings)?;
    let load_options = LoadOptions {
        merge_domain_config: replay.merge_domain_config,
        debt: options.debt,
        without_tickets: false,
        every_hit: false,
        ..LoadOptions::default()
    };
    let load = |paths: &[PathBuf], which, without_tickets| {
        let options = LoadOptions {
            without_tickets,
            ..load_options
        };
        config::load(paths, options).map_err(|errors| ReplayError::Config { which, errors })
    };
    let config = load(&replay.config, "--config", false)?;
    let overrides = match &replay.overrides {
        Some(path) => {
            let docs =
                config::overrides::read_file(path).map_err(|e| ReplayError::Overrides(vec![e]))?;
            let index = config::overrides::index_of(&docs, &config, load_options)
                .map_err(ReplayError::Overrides)?;
            Arc::new(index)
        }
        None => Arc::default(),
    };
    let runtime = tokio::runtime::Builder::new_current_thread().build()?;
    let before = match &replay.baseline {
        _ if replay.without_tickets => {
            let baseline = load(&replay.config, "--config", true)?;
            let plain: Vec<Call> = calls.iter().map(without_tickets).collect();
            runtime.block_on(decide_all(baseline, options, &plain))
        }
        Some(paths) => {
            let baseline = load(paths, "--baseline", false)?;
            runtime.block_on(decide_all(baseline, options, &calls))
        }
        None => recorded(&replay.recordings, &calls)?,
    };
    let config = Arc::new(config);
    let after = runtime.block_on(decide_all_shared(
        config.clone(),
        overrides,
        options,
        &calls,
    ));
    let baseline = match &replay.baseline {
        _ if replay.without_tickets => {
            let held: Vec<&str> = Modifiers::tickets().iter().map(|(_, t)| t.noun).collect();
            format!(
                "{} without its {} replayed",
                list(&replay.config),
                held.join(" and ")
            )
        }
        Some(paths) => format!("{} replayed", list(paths)),
        None => "the recorded decisions".to_string(),
    };
    Ok(report::build(&config, &calls, &before, &after, baseline))
}

/// `call` as a gateway without tickets sends it: a return's token and an opening's name
/// left out (a return is then a charge of its actual cost).
fn without_tickets(call: &Call) -> Call {
    let mut call = call.clone();
    for descriptor in &mut call.descriptors {
        descriptor
            .entries
            .retain(|(key, _)| ticket::is_matched(key));
    }
    call.ticket = None;
    call
}

fn list(paths: &[PathBuf]) -> String {
    let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    names.join(", ")
}

/// Every call of `paths`, in time order (a rotated file's calls before the newer one's at
/// equal times, as given), and the settings they were decided under.
fn read_recordings(paths: &[PathBuf]) -> Result<(Vec<Call>, RecordedOptions), ReplayError> {
    let mut calls = Vec::new();
    let mut options = None;
    for path in paths {
        let recording = format::read(path)?;
        let given = recording.header.options;
        match options {
            None => options = Some(given),
            Some(first) if first != given => {
                return Err(ReplayError::Options(path.clone(), given, first))
            }
            Some(_) => {}
        }
        calls.extend(recording.calls);
    }
    calls.sort_by_key(|call| call.t);
    Ok((calls, options.unwrap_or_default()))
}

/// The recorded decisions of `calls` (each must have them).
fn recorded(paths: &[PathBuf], calls: &[Call]) -> Result<Vec<Decided>, ReplayError> {
    calls
        .iter()
        .enumerate()
        .map(|(index, call)| {
            let statuses = call
                .statuses
                .as_ref()
                .ok_or_else(|| ReplayError::NoDecisions {
                    path: paths.first().cloned().unwrap_or_default(),
                    call: index + 1,
                })?;
            // A recorded status says which limit applied, and its code (a shadow-mode
            // limit's is OK: a recording cannot tell its denials).
            let descriptors: SmallVec<[Option<bool>; 2]> = statuses
                .iter()
                .map(|s| s.limit.is_some().then_some(s.code == format::Code::Ok))
                .collect();
            // Without its overall code (a converter's), a call is admitted when no descriptor
            // was over.
            let admitted = match call.code {
                Some(code) => code == format::Code::Ok,
                None => statuses.iter().all(|s| s.code == format::Code::Ok),
            };
            Ok(Decided {
                admitted,
                descriptors,
                unknown_domain: false,
                refused: false,
            })
        })
        .collect()
}

async fn decide_all(config: Config, options: RecordedOptions, calls: &[Call]) -> Vec<Decided> {
    decide_all_shared(Arc::new(config), Arc::default(), options, calls).await
}

/// Decides `calls` in order under `config` (and `overrides`) on a fresh memory store whose
/// clock follows them.
async fn decide_all_shared(
    config: Arc<Config>,
    overrides: Arc<config::overrides::OverrideIndex>,
    options: RecordedOptions,
    calls: &[Call],
) -> Vec<Decided> {
    let clock = Arc::new(ManualClock::default());
    let store = Arc::new(MemoryStore::new(usize::MAX / 1024, clock.clone()));
    let service = LimiterOptions {
        shadow_mode: options.shadow_mode,
        quota_mode: options.quota_mode,
        charging: if options.every_hit {
            Charging::EveryHit
        } else {
            Charging::AllOrNothing
        },
        ..LimiterOptions::default()
    };
    let limiter = Limiter::new(store.clone(), service).with_overrides(overrides);
    // Recorded lease and hold tokens, to the tokens this replay's acquires and openings got.
    let mut tokens: HashMap<String, String> = HashMap::new();
    let mut holds: HashMap<String, String> = HashMap::new();
    let mut swept_at = 0;
    let mut decided = Vec::with_capacity(calls.len());
    for call in calls {
        clock.set(call.t);
        if call.t.saturating_sub(swept_at) > SWEEP_EVERY_US {
            store.sweep_expired();
            swept_at = call.t;
        }
        let mut request = call.request();
        for entry in request
            .descriptors
            .iter_mut()
            .flat_map(|d| d.entries.iter_mut())
        {
            if entry.key == LEASE_KEY {
                if let Some(token) = tokens.remove(&entry.value) {
                    entry.value = token;
                }
            }
            if Modifiers::tickets().iter().any(|(_, t)| t.key == entry.key) {
                if let Some(token) = holds.get(&entry.value) {
                    entry.value = token.clone();
                }
            }
        }
        let unknown_domain = config.domain(&call.domain).is_none();
        let answer = limiter.decide(&config, &request, |_, _| {}).await;
        decided.push(
            match answer.map(|decided| (decided.response, decided.limits)) {
                Ok((response, limits)) => {
                    if let (Some(recorded), Some(token)) =
                        (&call.lease, ticket::token_in(&response, LEASE_KEY))
                    {
                        tokens.insert(recorded.clone(), token);
                    }
                    let given = Modifiers::tickets()
                        .iter()
                        .find_map(|(_, t)| ticket::token_in(&response, t.key));
                    if let (Some(recorded), Some(token)) = (&call.ticket, given) {
                        holds.insert(recorded.clone(), token);
                    }
                    Decided {
                        admitted: response.overall_code != Code::OverLimit as i32,
                        descriptors: limits.into_iter().collect(),
                        unknown_domain,
                        refused: false,
                    }
                }
                Err(_) => Decided {
                    admitted: true,
                    descriptors: call.descriptors.iter().map(|_| None).collect(),
                    unknown_domain,
                    refused: true,
                },
            },
        );
    }
    decided
}

/// Thresholds of newly denied calls, in percent, past which a replay fails (CI refusing a
/// config change).
#[derive(Debug, Clone, Copy, Default)]
pub struct Gate {
    /// Of every call.
    pub overall: Option<f64>,
    /// Of any one rule's calls.
    pub per_rule: Option<f64>,
}

impl Gate {
    /// What `report` passes: one line per threshold passed, none when within them.
    pub fn failures(&self, report: &Report) -> Vec<String> {
        #[allow(clippy::cast_precision_loss)]
        let share = |part: u64, whole: u64| {
            if whole == 0 {
                0.0
            } else {
                part as f64 * 100.0 / whole as f64
            }
        };
        let mut failures = Vec::new();
        // Releases of leases and settles are never denied: the shares are of the calls that
        // ask.
        let asking = report.calls - report.releases;
        if let Some(max) = self.overall {
            let newly = share(report.compared.newly_denied, asking);
            if newly > max {
                failures.push(format!(
                    "{} of {asking} calls newly denied ({newly:.1}%, more than {max}%)",
                    report.compared.newly_denied
                ));
            }
        }
        if let Some(max) = self.per_rule {
            for rule in &report.rules {
                let newly = share(rule.compared.newly_denied, rule.calls);
                if newly > max {
                    failures.push(format!(
                        "rule {}: {} of {} calls newly denied ({newly:.1}%, more than {max}%)",
                        rule.rule, rule.compared.newly_denied, rule.calls
                    ));
                }
            }
        }
        failures
    }
}

/// How often (in recorded time) the replay's store drops expired state.
const SWEEP_EVERY_US: u64 = 10_000_000;
