//! Which documented difference explains a request's differences. The first request whose
//! answers differ on a counter is classified by the rows below (each a row of the table of
//! differences in the docs); every counter it touched is then marked with that row, and a later
//! difference on a marked counter follows from it (the servers' counts parted there).

use std::collections::HashMap;

use crate::compare::Difference;
use crate::generate::{self, Config, Node, Request};
use crate::lookup;
use crate::{Exchange, Mode};

/// How a request's exchange is accounted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Explained {
    Agreed,
    /// Every difference is explained by this row (or follows from a difference it explained).
    Row(&'static str),
    /// Some difference is not explained; `root` when it does not follow an earlier one.
    Unexplained {
        root: bool,
    },
}

/// The marks of one sequence: which counters parted, and why.
pub struct Ledger<'a> {
    mode: &'a Mode,
    config: &'a Config,
    /// A counter (domain and entries) whose counts parted, and the row that explained it
    /// (`None`: unexplained).
    parted: HashMap<String, Option<&'static str>>,
    /// The reference's local cache: a window key it denied, and the limit that denied it
    /// (requests per unit, unit).
    reference_cache: HashMap<String, (u32, i32)>,
}

impl<'a> Ledger<'a> {
    pub fn new(mode: &'a Mode, config: &'a Config) -> Self {
        Ledger {
            mode,
            config,
            parted: HashMap::new(),
            reference_cache: HashMap::new(),
        }
    }

    pub fn explain(&mut self, request: &Request, exchange: &Exchange) -> Explained {
        let explained = self.explain_differences(request, exchange);
        self.remember_cached(request, exchange);
        explained
    }

    fn explain_differences(&mut self, request: &Request, exchange: &Exchange) -> Explained {
        if exchange.differences.is_empty() {
            return Explained::Agreed;
        }
        let counters: Vec<String> = (0..request.descriptors.len())
            .map(|i| key_part(self.config, request, i))
            .collect();
        let differing: Vec<usize> = self.differing_descriptors(request, exchange);
        let earlier: Vec<Option<&'static str>> = differing
            .iter()
            .filter_map(|&i| self.parted.get(&counters[i]).copied())
            .collect();
        let follows = !differing.is_empty() && earlier.len() == differing.len();
        let explained = if follows {
            match earlier.iter().find_map(|row| *row) {
                Some(row) if earlier.iter().all(Option::is_some) => Explained::Row(row),
                _ => Explained::Unexplained { root: false },
            }
        } else {
            let rows: Vec<Option<&'static str>> = exchange
                .differences
                .iter()
                .map(|d| self.row_for(request, exchange, d))
                .collect();
            // A row that parts the servers' counters names the request over one that
            // does not.
            let rows: Option<Vec<&'static str>> = rows.into_iter().collect();
            match rows {
                Some(rows) => Explained::Row(
                    rows.iter()
                        .copied()
                        .find(|row| !LEAVES_COUNTS_ALIKE.contains(row))
                        .unwrap_or(rows[0]),
                ),
                None => Explained::Unexplained { root: true },
            }
        };
        let mark = match explained {
            Explained::Row(row) if LEAVES_COUNTS_ALIKE.contains(&row) => return explained,
            Explained::Row(row) => Some(row),
            _ => None,
        };
        for i in differing {
            self.parted.entry(counters[i].clone()).or_insert(mark);
        }
        explained
    }

    /// The descriptors the differences name, directly or through a key they write; all of
    /// them when only request-wide fields differ.
    fn differing_descriptors(&self, request: &Request, exchange: &Exchange) -> Vec<usize> {
        let mut out: Vec<usize> = Vec::new();
        for d in &exchange.differences {
            let named: Vec<usize> = match (d.descriptor, d.field.strip_prefix("key ")) {
                (Some(i), _) => vec![i],
                (None, Some(key)) => (0..request.descriptors.len())
                    .filter(|&i| key.contains(&key_part(self.config, request, i)))
                    .collect(),
                (None, None) => Vec::new(),
            };
            for i in named {
                if !out.contains(&i) {
                    out.push(i);
                }
            }
        }
        if out.is_empty() {
            // Only request-wide fields differ: every descriptor may be the cause.
            out = (0..request.descriptors.len()).collect();
        }
        out
    }

    /// The row of the documented differences that explains `d`, if one does.
    fn row_for(
        &self,
        request: &Request,
        exchange: &Exchange,
        d: &Difference,
    ) -> Option<&'static str> {
        if self.matches_apart(request) {
            return Some(JOINED_STRING);
        }
        let sluice_over = matches!(&exchange.sluice, Ok(a) if a.overall == OVER_LIMIT);
        if d.field == "header retry-after" && d.reference == "(none)" && sluice_over {
            return Some(RETRY_AFTER);
        }
        if d.field.starts_with("key ") && d.reference == "0" && d.sluice == "(absent)" {
            return Some(CHECK_WRITES_KEY);
        }
        if d.field.starts_with("metadata descriptors[")
            && d.sluice.replace("unit:WEEK", "unit:7") == d.reference
        {
            return Some(WEEK_IN_METADATA);
        }
        if self.setting("LOCAL_CACHE_SIZE_IN_BYTES").is_some()
            && self.cached_under_another_limit(request, exchange)
        {
            return Some(CACHE_BY_WINDOW_KEY);
        }
        if self.setting("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT") == Some("true") {
            return self.stop_over_limit_row(request, exchange);
        }
        None
    }

    fn setting(&self, name: &str) -> Option<&'static str> {
        self.mode
            .env
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| *v)
    }

    /// Whether a descriptor of `request` reaches another rule by the reference's joined
    /// string than by its key and value.
    fn matches_apart(&self, request: &Request) -> bool {
        request.descriptors.iter().any(|d| {
            d.limit.is_none()
                && !d.entries.is_empty()
                && !std::ptr::eq(
                    lookup::by_joined_string(self.config, &request.domain, &d.entries)
                        .map_or(std::ptr::null(), |n| n as *const _),
                    lookup::by_key_and_value(self.config, &request.domain, &d.entries)
                        .map_or(std::ptr::null(), |n| n as *const _),
                )
        })
    }

    /// The limits the reference applies to `request`'s descriptors (`None`: none applies):
    /// the client's override, else the matched rule's, less those another one `replaces`.
    fn reference_limits(&self, request: &Request) -> Vec<Option<Applied>> {
        let nodes: Vec<Option<&Node>> = request
            .descriptors
            .iter()
            .map(|d| lookup::by_joined_string(self.config, &request.domain, &d.entries))
            .collect();
        let replaced: Vec<&str> = request
            .descriptors
            .iter()
            .zip(&nodes)
            .filter(|(d, _)| d.limit.is_none())
            .filter_map(|(_, n)| n.and_then(|n| n.limit.as_ref()))
            .flat_map(|l| l.replaces.iter().copied())
            .collect();
        request
            .descriptors
            .iter()
            .zip(nodes)
            .map(|(d, node)| match (d.limit, node) {
                (Some(o), _) => Some(Applied {
                    requests_per_unit: o.requests_per_unit,
                    unit: o.unit,
                    shadow_mode: false,
                    quota_mode: false,
                }),
                (None, Some(node)) => {
                    let limit = node.limit.as_ref()?;
                    if limit.unlimited || limit.name.is_some_and(|n| replaced.contains(&n)) {
                        return None;
                    }
                    Some(Applied {
                        requests_per_unit: limit.requests_per_unit,
                        unit: generate::unit_number(limit.unit),
                        shadow_mode: node.shadow_mode,
                        quota_mode: node.quota_mode,
                    })
                }
                (None, None) => None,
            })
            .collect()
    }

    /// The reference's key of descriptor `i` under a limit of `unit` at `now_s` (the entries'
    /// values as sent: a `share_threshold` pattern is not followed).
    fn reference_key(&self, request: &Request, i: usize, unit: i32, now_s: u64) -> String {
        let prefix = self.setting("CACHE_KEY_PREFIX").unwrap_or("");
        let seconds = generate::unit_seconds(unit).max(1);
        format!(
            "{prefix}{}{}",
            key_part(self.config, request, i),
            now_s / seconds * seconds
        )
    }

    /// With `LOCAL_CACHE_SIZE_IN_BYTES`: whether a descriptor's window key is in the
    /// reference's cache, put there by a denial under another limit (the reference's cache
    /// names the window only; sluice's names the limit too).
    fn cached_under_another_limit(&self, request: &Request, exchange: &Exchange) -> bool {
        self.reference_limits(request)
            .iter()
            .enumerate()
            .any(|(i, applied)| {
                applied.as_ref().is_some_and(|a| {
                    let key = self.reference_key(request, i, a.unit, exchange.now_s);
                    self.reference_cache
                        .get(&key)
                        .is_some_and(|&denied_by| denied_by != (a.requests_per_unit, a.unit))
                })
            })
    }

    /// Keeps the reference's local cache as it keys it: each window key it denied, with the
    /// limit that denied it.
    fn remember_cached(&mut self, request: &Request, exchange: &Exchange) {
        let Ok(answer) = &exchange.reference else {
            return;
        };
        let limits = self.reference_limits(request);
        for (i, (status, applied)) in answer.statuses.iter().zip(limits).enumerate() {
            if let (OVER_LIMIT, Some(a)) = (status.code, applied) {
                let key = self.reference_key(request, i, a.unit, exchange.now_s);
                self.reference_cache
                    .entry(key)
                    .or_insert((a.requests_per_unit, a.unit));
            }
        }
    }

    /// With `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true`: the reference reads every key
    /// first and, when a hit would take one past its limit, charges only the hits that would
    /// (sluice's all-or-nothing charges nothing of a denied request). Which of the reference's
    /// ways explains the request, if a hit would go over.
    fn stop_over_limit_row(&self, request: &Request, exchange: &Exchange) -> Option<&'static str> {
        let limits = self.reference_limits(request);
        let mut over: Vec<(usize, &Applied)> = Vec::new();
        for (i, applied) in limits.iter().enumerate() {
            let Some(a) = applied else { continue };
            let key = self.reference_key(request, i, a.unit, exchange.now_s);
            let before: u64 = exchange
                .reference_before
                .get(&key)
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            if before + cost(request, i) > u64::from(a.requests_per_unit) {
                over.push((i, a));
            }
        }
        let keys: Vec<String> = (0..request.descriptors.len())
            .map(|i| key_part(self.config, request, i))
            .collect();
        let twice = (0..keys.len()).any(|i| limits[i].is_some() && keys[..i].contains(&keys[i]));
        if over.is_empty() {
            return twice.then_some(STOP_SAME_DESCRIPTOR_TWICE);
        }
        if over.iter().all(|(_, a)| a.shadow_mode || a.quota_mode) {
            return Some(STOP_SHADOW_OR_QUOTA_OVER);
        }
        Some(STOP_CHARGES_THE_HIT_OVER)
    }
}

/// A limit the reference applies to a descriptor, as far as the rows need it.
struct Applied {
    requests_per_unit: u32,
    unit: i32,
    shadow_mode: bool,
    quota_mode: bool,
}

/// What descriptor `i` costs: its own `hits_addend`, else the request's, at least 1.
fn cost(request: &Request, i: usize) -> u64 {
    request.descriptors[i]
        .hits_addend
        .unwrap_or_else(|| u64::from(request.hits_addend.max(1)))
}

const OVER_LIMIT: i32 = 2;

/// The rows of the table of differences (docs: "Differences from envoyproxy/ratelimit"),
/// by the name the harness reports.
pub const JOINED_STRING: &str = "rule-found-by-joined-string";
pub const RETRY_AFTER: &str = "retry-after-header";
pub const CHECK_WRITES_KEY: &str = "check-writes-zero-key";
pub const WEEK_IN_METADATA: &str = "week-override-in-metadata";
/// Rows after which both servers still count alike: a counter they explain has not parted.
const LEAVES_COUNTS_ALIKE: [&str; 3] = [RETRY_AFTER, CHECK_WRITES_KEY, WEEK_IN_METADATA];
pub const CACHE_BY_WINDOW_KEY: &str = "local-cache-by-window-key";
pub const STOP_CHARGES_THE_HIT_OVER: &str = "stop-increment-charges-the-hit-over";
pub const STOP_SAME_DESCRIPTOR_TWICE: &str = "stop-increment-same-descriptor-twice";
pub const STOP_SHADOW_OR_QUOTA_OVER: &str = "stop-increment-shadow-or-quota-over";

/// The part of a fixed-window key both servers build from a descriptor's entries (a
/// `share_threshold` entry holds its pattern), before the window.
fn key_part(config: &Config, request: &Request, i: usize) -> String {
    let entries = &request.descriptors[i].entries;
    let values = lookup::key_values(config, &request.domain, entries);
    let mut part = format!("{}_", request.domain);
    for ((k, _), v) in entries.iter().zip(values) {
        part.push_str(&format!("{k}_{v}_"));
    }
    part
}
