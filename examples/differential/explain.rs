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
    /// The config with each domain's files in the other order, when a domain has several.
    reversed: Option<Config>,
    /// The reference's local cache: a window key it denied, and the limit that denied it
    /// (requests per unit, unit).
    reference_cache: HashMap<String, (u32, i32)>,
    /// The reference's window keys, each with the shortest period (seconds) of a limit that
    /// wrote it: a window of a second starting at a minute's first second writes the minute's
    /// key too, and the reference keeps it for a period after its first use, not to the
    /// window's end.
    reference_windows: HashMap<String, u64>,
}

impl<'a> Ledger<'a> {
    pub fn new(mode: &'a Mode, config: &'a Config) -> Self {
        Ledger {
            mode,
            config,
            parted: HashMap::new(),
            reference_cache: HashMap::new(),
            reference_windows: HashMap::new(),
            reversed: mode.split_domains.then(|| Config {
                files: config.files.iter().rev().cloned().collect(),
            }),
        }
    }

    pub fn explain(&mut self, request: &Request, exchange: &Exchange) -> Explained {
        let explained = self.explain_differences(request, exchange);
        self.remember_cached(request, exchange);
        self.remember_windows(request, exchange);
        explained
    }

    fn explain_differences(&mut self, request: &Request, exchange: &Exchange) -> Explained {
        if exchange.differences.is_empty() {
            return Explained::Agreed;
        }
        if exchange.straddled {
            // Not a difference of the servers: they decided in two windows of a second.
            for i in 0..request.descriptors.len() {
                let counter = key_part(self.config, request, i);
                self.parted.entry(counter).or_insert(Some(STRADDLED));
            }
            return Explained::Row(STRADDLED);
        }
        let counters: Vec<String> = (0..request.descriptors.len())
            .map(|i| key_part(self.config, request, i))
            .collect();
        // Each difference on its own: a row explains it, or it follows from its counters'
        // earlier parting (the row that parted them, or none when that was unexplained).
        let mut rows: Vec<&'static str> = Vec::new();
        let mut parted_now: Vec<(usize, Option<&'static str>)> = Vec::new();
        let mut unexplained_root = false;
        let mut unexplained_after = false;
        // A request-wide field (the overall code, a header) follows from the descriptors the
        // other differences name, or from all of them when none does.
        let mut specific: Vec<usize> = Vec::new();
        for d in &exchange.differences {
            for i in self.descriptors_of(request, d).unwrap_or_default() {
                if !specific.contains(&i) {
                    specific.push(i);
                }
            }
        }
        if specific.is_empty() {
            specific = (0..request.descriptors.len()).collect();
        }
        let classified: Vec<Classified> = exchange
            .differences
            .iter()
            .map(|d| {
                let named = self
                    .descriptors_of(request, d)
                    .unwrap_or_else(|| specific.clone());
                let earlier: Vec<Option<&'static str>> = named
                    .iter()
                    .filter_map(|&i| self.parted.get(&counters[i]).copied())
                    .collect();
                let follows = (!named.is_empty() && earlier.len() == named.len()).then(|| {
                    earlier
                        .into_iter()
                        .collect::<Option<Vec<_>>>()
                        .and_then(|marks| marks.first().copied())
                });
                Classified {
                    row: self.row_for(request, exchange, d),
                    named,
                    follows,
                }
            })
            .collect();
        // A difference that follows an earlier one changed the request's fate, and with it
        // (all or nothing) what its other descriptors got.
        let cascade = classified.iter().find_map(|c| c.follows);
        for Classified {
            named,
            row,
            follows,
        } in classified
        {
            let resolved = match (row, follows.or(cascade)) {
                (Some(row), _) => Some(row),
                (None, Some(Some(mark))) => Some(mark),
                (None, Some(None)) => {
                    unexplained_after = true;
                    None
                }
                (None, None) => {
                    unexplained_root = true;
                    None
                }
            };
            rows.extend(resolved);
            let mark = match resolved {
                Some(row) if LEAVES_COUNTS_ALIKE.contains(&row) => continue,
                resolved => resolved,
            };
            parted_now.extend(named.into_iter().map(|i| (i, mark)));
        }
        for (i, mark) in parted_now {
            self.parted.entry(counters[i].clone()).or_insert(mark);
        }
        if unexplained_root || unexplained_after {
            return Explained::Unexplained {
                root: unexplained_root,
            };
        }
        // A row that parts the servers' counters names the request over one that does not.
        Explained::Row(
            rows.iter()
                .copied()
                .find(|row| !LEAVES_COUNTS_ALIKE.contains(row))
                .unwrap_or(rows[0]),
        )
    }

    /// The descriptors a difference names: its own, or those whose key it is; `None` for a
    /// request-wide field.
    fn descriptors_of(&self, request: &Request, d: &Difference) -> Option<Vec<usize>> {
        match (d.descriptor, d.field.strip_prefix("key ")) {
            (Some(i), _) => Some(vec![i]),
            (None, Some(key)) => {
                let prefix = self.setting("CACHE_KEY_PREFIX").unwrap_or("");
                let key = key.strip_prefix(prefix).unwrap_or(key);
                let of_key = (0..request.descriptors.len()).filter(|&i| {
                    key.strip_prefix(key_part(self.config, request, i).as_str())
                        .is_some_and(|window| {
                            !window.is_empty() && window.bytes().all(|b| b.is_ascii_digit())
                        })
                });
                Some(of_key.collect())
            }
            (None, None) => None,
        }
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
        if self.merge_order_matters(request) {
            return Some(MERGE_ORDER);
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
        if d.field == "metadata metadata" && self.metadata_renamed_away(request) {
            return Some(METADATA_WITH_METRIC_FLAGS);
        }
        if self.setting("LOCAL_CACHE_SIZE_IN_BYTES").is_some()
            && self.cached_under_another_limit(request, exchange)
        {
            return Some(CACHE_BY_WINDOW_KEY);
        }
        if self.read_a_shorter_windows_key(request, exchange) {
            return Some(WINDOW_KEY_OUTLIVES);
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

    /// With a domain spread over files (`MERGE_DOMAIN_CONFIG`): whether a descriptor finds
    /// another rule when the reference merges the files in the other order (it merges them
    /// in a Go map's order, which varies; a level's wildcards are tried in merged order).
    fn merge_order_matters(&self, request: &Request) -> bool {
        let Some(reversed) = &self.reversed else {
            return false;
        };
        request.descriptors.iter().any(|d| {
            let as_loaded = lookup::by_joined_string(self.config, &request.domain, &d.entries);
            let other = lookup::by_joined_string(reversed, &request.domain, &d.entries);
            d.limit.is_none()
                && as_loaded.map(|n| (&n.key, &n.value)) != other.map(|n| (&n.key, &n.value))
        })
    }

    /// Whether a descriptor's rule has `metadata` the reference leaves out: it rebuilds the
    /// limit, without it, when `detailed_metric` or a `value_to_metric` on the path renames
    /// the limit's metric.
    fn metadata_renamed_away(&self, request: &Request) -> bool {
        request.descriptors.iter().any(|d| {
            let path = lookup::path_by_joined_string(self.config, &request.domain, &d.entries);
            d.limit.is_none()
                && path.len() == d.entries.len()
                && path
                    .last()
                    .is_some_and(|n| n.metadata.is_some() && n.limit.is_some())
                && path.iter().any(|n| n.detailed_metric || n.value_to_metric)
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
        self.any_window_key(request, exchange, |key, a| {
            self.reference_cache
                .get(key)
                .is_some_and(|&denied_by| denied_by != (a.requests_per_unit, a.unit))
        })
    }

    /// Whether `test` holds for some descriptor's window key in the reference (at the
    /// request's second) and the limit the reference applies to it.
    fn any_window_key(
        &self,
        request: &Request,
        exchange: &Exchange,
        test: impl Fn(&str, &Applied) -> bool,
    ) -> bool {
        self.reference_limits(request)
            .iter()
            .enumerate()
            .any(|(i, applied)| {
                applied.as_ref().is_some_and(|a| {
                    test(&self.reference_key(request, i, a.unit, exchange.now_s), a)
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
            let Some(a) = applied else { continue };
            let key = self.reference_key(request, i, a.unit, exchange.now_s);
            // A shadow-mode limit's status says OK, but its key is cached all the same when
            // the hit takes it over its limit.
            let shadow_over = a.shadow_mode && goes_over(request, exchange, i, &key, &a);
            if status.code == OVER_LIMIT || shadow_over {
                self.reference_cache
                    .entry(key)
                    .or_insert((a.requests_per_unit, a.unit));
            }
        }
    }

    /// Keeps, for each window key the reference may have written, the shortest period of a
    /// limit that wrote it.
    fn remember_windows(&mut self, request: &Request, exchange: &Exchange) {
        for (i, applied) in self.reference_limits(request).iter().enumerate() {
            let Some(a) = applied else { continue };
            let key = self.reference_key(request, i, a.unit, exchange.now_s);
            let period = generate::unit_seconds(a.unit).max(1);
            self.reference_windows
                .entry(key)
                .and_modify(|shortest| *shortest = (*shortest).min(period))
                .or_insert(period);
        }
    }

    /// Whether a descriptor's window key held a count in the reference's Redis that a
    /// shorter window, now ended, wrote at the same second: the reference keeps a key for
    /// its period after the first use (plus jitter), so the longer window's limit reads the
    /// shorter one's hits; sluice's key ends with the shorter window.
    fn read_a_shorter_windows_key(&self, request: &Request, exchange: &Exchange) -> bool {
        self.any_window_key(request, exchange, |key, a| {
            let period = generate::unit_seconds(a.unit).max(1);
            let start = exchange.now_s / period * period;
            let counted = exchange
                .reference_before
                .get(key)
                .and_then(|v| v.parse::<u64>().ok())
                .is_some_and(|count| count > 0);
            let shorter_ended = self
                .reference_windows
                .get(key)
                .is_some_and(|&shortest| shortest < period && exchange.now_s >= start + shortest);
            counted && shorter_ended
        })
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
            if goes_over(request, exchange, i, &key, a) {
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

/// One difference, classified: the descriptors it names, the row that explains it, and,
/// when its counters parted earlier, the row that parted them (`None` if unexplained).
struct Classified {
    named: Vec<usize>,
    row: Option<&'static str>,
    follows: Option<Option<&'static str>>,
}

/// A limit the reference applies to a descriptor, as far as the rows need it.
struct Applied {
    requests_per_unit: u32,
    unit: i32,
    shadow_mode: bool,
    quota_mode: bool,
}

/// Whether descriptor `i`'s hit takes the count the reference's Redis held at `key` before
/// the request past `a`'s limit.
fn goes_over(request: &Request, exchange: &Exchange, i: usize, key: &str, a: &Applied) -> bool {
    let before: u64 = exchange
        .reference_before
        .get(key)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    before + cost(request, i) > u64::from(a.requests_per_unit)
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
pub const MERGE_ORDER: &str = "merged-files-order";
pub const RETRY_AFTER: &str = "retry-after-header";
pub const CHECK_WRITES_KEY: &str = "check-writes-zero-key";
pub const WEEK_IN_METADATA: &str = "week-override-in-metadata";
pub const METADATA_WITH_METRIC_FLAGS: &str = "metadata-kept-with-metric-flags";
/// Not a row of the table: the second ended between the two calls of a request, so the
/// servers counted in two windows (reported apart; the run keeps its calls clear of a
/// second's last 60 ms, which a slow call can still cross).
pub const STRADDLED: &str = "(calls-straddled-a-second)";

/// Rows after which both servers still count alike: a counter they explain has not parted.
const LEAVES_COUNTS_ALIKE: [&str; 4] = [
    RETRY_AFTER,
    CHECK_WRITES_KEY,
    WEEK_IN_METADATA,
    METADATA_WITH_METRIC_FLAGS,
];
pub const CACHE_BY_WINDOW_KEY: &str = "local-cache-by-window-key";
pub const STOP_CHARGES_THE_HIT_OVER: &str = "stop-increment-charges-the-hit-over";
pub const STOP_SAME_DESCRIPTOR_TWICE: &str = "stop-increment-same-descriptor-twice";
pub const STOP_SHADOW_OR_QUOTA_OVER: &str = "stop-increment-shadow-or-quota-over";
pub const WINDOW_KEY_OUTLIVES: &str = "window-key-outlives-its-window";

/// The part of a fixed-window key both servers build from a descriptor's entries (a
/// `share_threshold` entry holds its pattern), before the window.
fn key_part(config: &Config, request: &Request, i: usize) -> String {
    let descriptor = &request.descriptors[i];
    let entries = &descriptor.entries;
    // An override's limit takes no `share_threshold` pattern: the values as sent.
    let values = match descriptor.limit {
        Some(_) => entries.iter().map(|(_, v)| v.clone()).collect(),
        None => lookup::key_values(config, &request.domain, entries),
    };
    let mut part = format!("{}_", request.domain);
    for ((k, _), v) in entries.iter().zip(values) {
        part.push_str(&format!("{k}_{v}_"));
    }
    part
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::generate::{ConfigFile, Descriptor, Override};
    use crate::wire::{self, Answer};

    const SECOND: i32 = 1;
    const MINUTE: i32 = 2;
    /// A minute's first second.
    const MINUTE_START: u64 = 1_800_000_000 / 60 * 60;

    fn config() -> Config {
        Config {
            files: vec![ConfigFile {
                name: "d.yaml".into(),
                domain: "d".into(),
                nodes: Vec::new(),
            }],
        }
    }

    /// `d | api=c [+hits] limit=N/unit`.
    fn override_of(requests_per_unit: u32, unit: i32, hits: Option<u64>) -> Request {
        Request {
            domain: "d".into(),
            hits_addend: 0,
            descriptors: vec![Descriptor {
                entries: vec![("api".into(), "c".into())],
                hits_addend: hits,
                limit: Some(Override {
                    requests_per_unit,
                    unit,
                }),
            }],
        }
    }

    fn answer(code: i32) -> wire::Outcome {
        Ok(Answer {
            overall: code,
            statuses: Vec::new(),
            headers: Vec::new(),
            request_headers: Vec::new(),
            metadata: None,
        })
    }

    fn exchange(now_s: u64, before: &[(&str, &str)], codes: Option<(i32, i32)>) -> Exchange {
        let (reference, sluice) = codes.unwrap_or((1, 1));
        Exchange {
            differences: codes
                .map(|(r, s)| Difference {
                    field: "statuses[0].code".into(),
                    descriptor: Some(0),
                    reference: r.to_string(),
                    sluice: s.to_string(),
                })
                .into_iter()
                .collect(),
            reference: answer(reference),
            sluice: answer(sluice),
            now_s,
            reference_before: before
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
            straddled: false,
        }
    }

    #[test]
    fn a_minute_limit_reading_a_second_windows_key_after_that_second_is_a_documented_row() {
        let config = config();
        let mode = &crate::MODES[0];
        let key = format!("d_api_c_{MINUTE_START}");
        let check = override_of(0, MINUTE, Some(0));
        let later = exchange(MINUTE_START + 1, &[(&key, "1")], Some((OVER_LIMIT, 1)));

        let mut ledger = Ledger::new(mode, &config);
        let hit = override_of(2, SECOND, None);
        assert_eq!(
            ledger.explain(&hit, &exchange(MINUTE_START, &[], None)),
            Explained::Agreed
        );
        assert_eq!(
            ledger.explain(&check, &later),
            Explained::Row(WINDOW_KEY_OUTLIVES)
        );

        // Without the second's hit at the minute's first second, the same answers are not
        // explained: the reference's count came from nowhere sluice knows of.
        let mut fresh = Ledger::new(mode, &config);
        assert_eq!(
            fresh.explain(&check, &later),
            Explained::Unexplained { root: true }
        );
        // Nor within that second, when both servers still hold the key.
        let mut same_second = Ledger::new(mode, &config);
        same_second.explain(&hit, &exchange(MINUTE_START, &[], None));
        let within = exchange(MINUTE_START, &[(&key, "1")], Some((OVER_LIMIT, 1)));
        assert_eq!(
            same_second.explain(&check, &within),
            Explained::Unexplained { root: true }
        );
    }
}
