//! The service's metrics: every call, every limited descriptor's hits, store calls and config
//! loads, written to the server's one recorder (`series`) and, when on, to statsd under the
//! reference's stat names (`statsd::ServiceStats`). Names follow envoyproxy/ratelimit's
//! Prometheus mapping so existing dashboards keep working; sluice's own metrics start with
//! `sluice_`. Other components write their own series (`series::Reporting`).

mod classes;
mod leases;
pub mod limitador;
pub mod loads;
mod modifiers;
pub mod runtime;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use arc_swap::ArcSwap;

use metrics::{Counter, Histogram, Label};

use crate::hitters::{HeavyHitters, HittersSettings, Tracked};
use crate::statsd::ServiceStats;
use sluice_core::algorithm::Mark;
use sluice_core::labels::LimitLabels;
use sluice_core::limit::{Algorithm, Decision, LeaseOutcome};
use sluice_core::modifier::Class;
use sluice_proto::rate_limit_descriptor::Entry;
use sluice_store::series::Series;

/// The per-limit label value of every series past the request-valued series bound.
pub const OVERFLOW_LABEL: &str = "_overflow_";

/// What a limited descriptor got, for its counters.
#[derive(Debug, Clone, Copy)]
pub struct LimitOutcome<'a> {
    pub algorithm: Algorithm,
    pub capacity: u64,
    pub cost: u64,
    pub decision: Decision,
    pub shadow_mode: bool,
    /// The class of traffic a modifier put the hit in, counted by class.
    pub class: Option<Class<'a>>,
    /// The descriptor's entries, for its limit's heavy hitters (empty: not tracked).
    pub entries: &'a [Entry],
}

/// One limit's counters, registered once and kept.
struct LimitCounters {
    total: Counter,
    within: Counter,
    near: Counter,
    over: Counter,
    shadow: Counter,
    /// The same, under statsd's names, when a statsd sink is on.
    statsd: Option<[Arc<AtomicU64>; 5]>,
    /// The labels they are registered under (the overflow set's past the bound).
    labels: LimitLabels,
    /// A lease limit's series, registered when it first takes or frees one.
    leases: OnceLock<leases::LeaseCounters>,
    /// Its modifiers' series, each registered at the modifier's first note on it.
    modifiers: modifiers::LimitModifiers,
    /// The decisions by class of traffic, for a limit whose modifiers put hits in classes.
    classes: classes::ClassCounters,
    /// Its heavy hitters, found at its first decision with entries (`None`: not tracked).
    hitters: OnceLock<Option<Arc<Tracked>>>,
}

/// The server's metrics. Handles are registered once and cached, so recording a decision is a
/// map lookup and a few atomic increments.
pub struct Metrics {
    series: Series,
    near_limit_ratio: f64,
    max_request_valued_series: usize,
    /// Read on every decision without a lock; replaced whole (under `limits_writer`) when a
    /// label set is first seen, which the series bound makes rare. Keys and values are shared,
    /// so a copy costs a pointer per label set: 0.2 ms at the default 10,000, where owned
    /// strings took 4.7 ms (measured with 3-label sets).
    /// Hashed with foldhash's per-process seed (std's SipHash cost a decision a few hundred
    /// instructions); the request-valued label sets are bounded, and their hashes unknown to a
    /// client.
    limits: ArcSwap<HashMap<Arc<LimitLabels>, Arc<LimitCounters>, foldhash::fast::RandomState>>,
    limits_writer: Mutex<()>,
    request_valued_series: AtomicUsize,
    /// By algorithm, then OK / OVER_LIMIT.
    decisions: Vec<[Counter; 2]>,
    /// `ratelimit_service_total_requests{grpc_method="ShouldRateLimit"}`.
    requests: Counter,
    request_latency: Histogram,
    /// Requests global shadow mode turned from OVER_LIMIT to OK.
    global_shadow_mode: Counter,
    store_latency: Histogram,
    /// The statsd sink's stats, when on (`USE_STATSD`, `USE_DOG_STATSD`).
    statsd: Option<ServiceStats>,
    /// The clock of what ages in the modifiers' series (blocks in force).
    epoch: std::time::Instant,
    /// The configuration loads so far (Limitador's `/status`).
    loads: loads::ConfigLoads,
    /// Limitador's series.
    limitador: limitador::LimitadorSeries,
    /// Who is being limited (`hitters`).
    hitters: Arc<HeavyHitters>,
    /// This instance's number, under which label sets keep its counters' handle.
    owner: usize,
}

/// The numbers `Metrics::owner` is taken from.
static OWNERS: AtomicUsize = AtomicUsize::new(1);

impl Metrics {
    /// The service's metrics on a recorder of their own. `near_limit_ratio`: the share of a
    /// limit past which admitted hits count as near the limit (`NEAR_LIMIT_RATIO`). At most
    /// `max_request_valued_series` label sets carry values from requests; the rest share
    /// `key1="_overflow_"`.
    pub fn new(near_limit_ratio: f64, max_request_valued_series: usize) -> Metrics {
        let series = Series::new();
        let decisions = Algorithm::ALL
            .iter()
            .map(|algorithm| {
                ["OK", "OVER_LIMIT"].map(|code| {
                    let labels = vec![
                        Label::new("algorithm", algorithm.as_str()),
                        Label::new("code", code),
                    ];
                    series.counter("sluice_decisions_total", labels)
                })
            })
            .collect();
        // The reference names its gRPC method metrics after the method (its interceptor).
        let of_method = || vec![Label::new("grpc_method", "ShouldRateLimit")];
        Metrics {
            requests: series.counter("ratelimit_service_total_requests", of_method()),
            request_latency: series
                .histogram("ratelimit_service_response_time_seconds", of_method()),
            global_shadow_mode: series.counter("ratelimit_service_global_shadow_mode", vec![]),
            store_latency: series.histogram("sluice_store_duration_seconds", vec![]),
            decisions,
            near_limit_ratio,
            max_request_valued_series,
            limits: ArcSwap::default(),
            limits_writer: Mutex::new(()),
            request_valued_series: AtomicUsize::new(0),
            statsd: None,
            epoch: std::time::Instant::now(),
            loads: loads::ConfigLoads::new(),
            limitador: limitador::LimitadorSeries::new(&series),
            hitters: Arc::default(),
            owner: OWNERS.fetch_add(1, Ordering::Relaxed),
            series,
        }
    }

    /// The same metrics, tracking heavy hitters as `settings` say.
    pub fn with_heavy_hitters(mut self, settings: HittersSettings) -> Metrics {
        self.hitters = Arc::new(HeavyHitters::new(settings));
        self
    }

    /// Who is being limited.
    pub fn heavy_hitters(&self) -> &Arc<HeavyHitters> {
        &self.hitters
    }

    /// The same metrics, sent to statsd too under the reference's stat names.
    pub fn with_statsd(mut self, statsd: ServiceStats) -> Metrics {
        self.statsd = Some(statsd);
        self
    }

    /// Limitador's `limited_calls` by `limit_name` too (`--limit-name-in-labels`).
    pub fn with_limit_name_in_labels(mut self, on: bool) -> Metrics {
        self.limitador = self.limitador.with_limit_name_in_labels(on);
        self
    }

    /// Whether Limitador's `limited_calls` name the limit that limited
    /// (`--limit-name-in-labels`): only then is the name worth finding.
    pub fn names_limits(&self) -> bool {
        self.limitador.names_limits()
    }

    /// Counts a call of Limitador's (`limitador::CallOutcome`) in `namespace`, and how its
    /// store call went (`None`: it failed).
    pub fn record_limitador(
        &self,
        namespace: &str,
        outcome: Option<limitador::CallOutcome<'_>>,
        store_seconds: f64,
    ) {
        match outcome {
            Some(outcome) => {
                self.limitador.record(&self.series, namespace, outcome);
                self.limitador.store_answered(store_seconds);
            }
            None => self.limitador.store_failed(),
        }
    }

    /// The recorder, for the components that write series of their own.
    pub fn series(&self) -> &Series {
        &self.series
    }

    /// Folds recorded histogram samples into their buckets (`Series::upkeep`).
    pub fn upkeep(&self) {
        self.series.upkeep();
    }

    /// The Prometheus text exposition, every component's series included (what ages in the
    /// modifiers' series, as of now), the heavy hitters' last.
    pub fn render(&self) -> String {
        let now_us = self.now_us();
        for counters in self.limits.load().values() {
            counters.modifiers.refresh(now_us);
        }
        let mut text = self.series.render();
        text.push_str(&self.hitters.exposition());
        text
    }

    /// What a limit's modifier noted on a hit (`decision`, of `cost`: an opening's estimate,
    /// a settle's actual), in that modifier's series; nothing when none noted anything.
    pub fn record_modifiers(&self, labels: &LimitLabels, decision: &Decision, cost: u64) {
        if !matches!(decision.mark, Mark::Noted(_)) {
            return;
        }
        let counters = self.counters_of(labels);
        let labels = || limit_labels(&counters.labels);
        counters
            .modifiers
            .record(&self.series, labels, decision, cost, self.now_us());
    }

    /// Microseconds on the metrics' clock.
    fn now_us(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    /// The counters of the limit under `labels`, registered when first seen.
    fn counters_of(&self, labels: &LimitLabels) -> Arc<LimitCounters> {
        match self.limits.load().get(labels) {
            Some(counters) => counters.clone(),
            None => self.register_limit(labels),
        }
    }

    /// Counts one limited descriptor's hits, split as envoyproxy/ratelimit's base limiter
    /// splits them (`split_hits`). A rule's labels keep their counters' handle
    /// (`LimitLabels::series`), so most decisions look nothing up.
    pub fn record_limit(&self, labels: &LimitLabels, outcome: &LimitOutcome) {
        if let Some(counters) = labels.series.get::<LimitCounters>(self.owner) {
            return self.count(counters, outcome);
        }
        let counters = self.counters_of(labels);
        labels.series.keep(self.owner, counters.clone());
        self.count(&counters, outcome);
    }

    /// What a descriptor's lease limit did to its leases; `request_denied`: the request
    /// was denied, so leases its limit admitted were not taken (and are counted nowhere).
    pub fn record_lease(&self, labels: &LimitLabels, lease: &LeaseOutcome, request_denied: bool) {
        let counters = self.counters_of(labels);
        counters
            .leases
            .get_or_init(|| {
                leases::LeaseCounters::new(&self.series, &limit_labels(&counters.labels))
            })
            .record(lease, request_denied);
    }

    fn count(&self, counters: &LimitCounters, outcome: &LimitOutcome) {
        let split = split_hits(outcome, self.near_limit_ratio);
        counters.total.increment(outcome.cost);
        // Most decisions add to one of the four: the others are not touched.
        for (counter, value) in [
            (&counters.within, split.within),
            (&counters.near, split.near),
            (&counters.over, split.over),
            (&counters.shadow, split.shadow),
        ] {
            if value > 0 {
                counter.increment(value);
            }
        }
        if let Some(statsd) = &counters.statsd {
            let values = [
                outcome.cost,
                split.within,
                split.near,
                split.over,
                split.shadow,
            ];
            for (counter, value) in statsd.iter().zip(values) {
                if value > 0 {
                    counter.fetch_add(value, Ordering::Relaxed);
                }
            }
        }
        if !outcome.entries.is_empty() {
            let tracked = counters
                .hitters
                .get_or_init(|| self.hitters.tracker(&counters.labels));
            if let Some(tracked) = tracked {
                let denied = !outcome.decision.admitted;
                self.hitters
                    .record(tracked, outcome.entries, outcome.cost, denied);
            }
        }
        let over = !(outcome.decision.admitted || outcome.shadow_mode);
        self.decisions[outcome.algorithm.index()][usize::from(over)].increment(1);
        if let Some(class) = outcome.class {
            let labels = || limit_labels(&counters.labels);
            let admitted = outcome.decision.admitted;
            counters
                .classes
                .record(&self.series, labels, class, admitted);
        }
    }

    /// A ShouldRateLimit call, and its latency.
    pub fn record_request(&self, seconds: f64) {
        self.requests.increment(1);
        self.request_latency.record(seconds);
        if let Some(statsd) = &self.statsd {
            statsd.request((seconds * 1000.0) as u64);
        }
    }

    /// A request global shadow mode answered OK though its limits denied it.
    pub fn record_global_shadow_mode(&self) {
        self.global_shadow_mode.increment(1);
        if let Some(statsd) = &self.statsd {
            statsd.global_shadow_mode();
        }
    }

    /// A failed ShouldRateLimit call, by `DecisionError::metric_label`.
    pub fn record_error(&self, err_type: &'static str) {
        let labels = vec![Label::new("err_type", err_type)];
        self.series
            .counter("ratelimit_service_should_rate_limit_error", labels)
            .increment(1);
        if let Some(statsd) = &self.statsd {
            statsd.error(err_type);
        }
    }

    /// A store call's latency (its failures are counted by the store's failure layer,
    /// `sluice_store::on_failure`, whatever answers them).
    pub fn record_store_call(&self, seconds: f64) {
        self.store_latency.record(seconds);
    }

    /// A configuration load (at startup or reload).
    pub fn record_config_load(&self, success: bool) {
        let name = if success {
            "ratelimit_service_config_load_success"
        } else {
            "ratelimit_service_config_load_error"
        };
        self.series.counter(name, vec![]).increment(1);
        self.loads.note(success);
        if let Some(statsd) = &self.statsd {
            statsd.config_load(success);
        }
    }

    /// The configuration loads so far.
    pub fn config_loads(&self) -> loads::LoadsNow {
        self.loads.now()
    }

    /// The counters of `labels`, registered on first use; past the bound on request-valued
    /// label sets, the overflow set's.
    fn register_limit(&self, labels: &LimitLabels) -> Arc<LimitCounters> {
        let full = labels.from_request
            && self.request_valued_series.load(Ordering::Relaxed) >= self.max_request_valued_series;
        let labels = if full {
            LimitLabels {
                domain: labels.domain.clone(),
                key1: OVERFLOW_LABEL.to_string(),
                key2: None,
                from_request: false,
                stats_key: format!("{}.{OVERFLOW_LABEL}", labels.domain),
                series: Default::default(),
            }
        } else {
            labels.clone()
        };
        if let Some(counters) = self.limits.load().get(&labels) {
            return counters.clone();
        }
        let _writer = self
            .limits_writer
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let known = self.limits.load_full();
        if let Some(counters) = known.get(&labels) {
            return counters.clone();
        }
        if labels.from_request {
            self.request_valued_series.fetch_add(1, Ordering::Relaxed);
        }
        let counter = |name: &'static str| self.series.counter(name, limit_labels(&labels));
        let counters = Arc::new(LimitCounters {
            total: counter("ratelimit_service_rate_limit_total_hits"),
            within: counter("ratelimit_service_rate_limit_within_limit"),
            near: counter("ratelimit_service_rate_limit_near_limit"),
            over: counter("ratelimit_service_rate_limit_over_limit"),
            shadow: counter("ratelimit_service_rate_limit_shadow_mode"),
            statsd: self
                .statsd
                .as_ref()
                .map(|statsd| statsd.limit_counters(&labels.stats_key)),
            leases: OnceLock::new(),
            modifiers: modifiers::LimitModifiers::default(),
            classes: classes::ClassCounters::default(),
            hitters: OnceLock::new(),
            labels: labels.clone(),
        });
        let mut grown = HashMap::clone(&known);
        grown.insert(Arc::new(labels), counters.clone());
        self.limits.store(Arc::new(grown));
        counters
    }
}

/// How a descriptor's hits count in each counter besides `total_hits`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct SplitHits {
    within: u64,
    near: u64,
    over: u64,
    shadow: u64,
}

/// envoyproxy/ratelimit's split of a descriptor's h hits, from what the limit had used before
/// them (`before`) and would have after (`after` = before + h): admitted, all are within, and
/// those past the near-limit threshold (floor(L x ratio), in single precision as the
/// reference computes it) are near; denied, those past L are over (all of them when the limit
/// was already reached), those between the threshold and L are near, and the over ones are
/// also shadow when the limit is in shadow mode.
fn split_hits(outcome: &LimitOutcome, near_limit_ratio: f64) -> SplitHits {
    let hits = outcome.cost;
    let limit = outcome.capacity;
    #[allow(clippy::cast_possible_truncation, clippy::cast_precision_loss)]
    let near_threshold = ((limit as f32) * (near_limit_ratio as f32)).floor() as u64;
    let used = limit.saturating_sub(u64::from(outcome.decision.remaining));
    if outcome.decision.admitted {
        let (before, after) = (used.saturating_sub(hits), used);
        let near = if after <= near_threshold {
            0
        } else if before >= near_threshold {
            hits
        } else {
            after - near_threshold
        };
        return SplitHits {
            within: hits,
            near,
            ..SplitHits::default()
        };
    }
    let (before, after) = (used, used.saturating_add(hits));
    let (over, near) = if before >= limit {
        (hits, 0)
    } else {
        (
            after.saturating_sub(limit),
            limit.saturating_sub(near_threshold.max(before)),
        )
    };
    SplitHits {
        over,
        near,
        shadow: if outcome.shadow_mode { over } else { 0 },
        ..SplitHits::default()
    }
}

/// The labels of one limit's series.
fn limit_labels(labels: &LimitLabels) -> Vec<Label> {
    let mut parts = vec![
        Label::new("domain", labels.domain.clone()),
        Label::new("key1", labels.key1.clone()),
    ];
    if let Some(key2) = &labels.key2 {
        parts.push(Label::new("key2", key2.clone()));
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(capacity: u64, cost: u64, admitted: bool, remaining: u32) -> LimitOutcome<'static> {
        LimitOutcome {
            algorithm: Algorithm::FixedWindow,
            capacity,
            cost,
            decision: Decision {
                admitted,
                remaining,
                reset_after_us: 0,
                retry_after_us: 0,
                ..Decision::default()
            },
            shadow_mode: false,
            class: None,
            entries: &[],
        }
    }

    /// The reference's base limiter cases (test/limiter/base_limiter_test.go, and the
    /// near-limit cases of its Redis tests): limit 10, threshold 8. A row: the hits, whether
    /// admitted, what remained, shadow mode, then within, near, over and shadow.
    #[test]
    fn hits_split_into_within_near_over_as_the_reference_splits_them() {
        let cases: [(u64, bool, u32, bool, [u64; 4]); 6] = [
            // 5 -> 6 of 10: within only.
            (1, true, 4, false, [1, 0, 0, 0]),
            // 7 -> 10 with 3 hits: two past the threshold of 8 are near.
            (3, true, 0, false, [3, 2, 0, 0]),
            // 9 -> 10: all near.
            (1, true, 0, false, [1, 1, 0, 0]),
            // 7 used, 6 hits denied: 3 over (11..13), 2 near (9..10 past max(8, 7)).
            (6, false, 3, false, [0, 2, 3, 0]),
            // Already at the limit: every hit over.
            (4, false, 0, false, [0, 0, 4, 0]),
            // The same in shadow mode: over, and shadow.
            (4, false, 0, true, [0, 0, 4, 4]),
        ];
        for (cost, admitted, remaining, shadow_mode, [within, near, over, shadow]) in cases {
            let mut outcome = outcome(10, cost, admitted, remaining);
            outcome.shadow_mode = shadow_mode;
            let expected = SplitHits {
                within,
                near,
                over,
                shadow,
            };
            assert_eq!(split_hits(&outcome, 0.8), expected, "{outcome:?}");
        }
    }

    #[test]
    fn request_valued_series_are_bounded() {
        let metrics = Metrics::new(0.8, 2);
        let outcome = LimitOutcome {
            algorithm: Algorithm::FixedWindow,
            capacity: 10,
            cost: 1,
            decision: Decision {
                admitted: true,
                remaining: 9,
                reset_after_us: 0,
                retry_after_us: 0,
                ..Decision::default()
            },
            shadow_mode: false,
            class: None,
            entries: &[],
        };
        for value in ["a", "b", "c", "d"] {
            let labels = LimitLabels::of_override("d", [value].into_iter());
            metrics.record_limit(&labels, &outcome);
        }
        let text = metrics.render();
        assert!(
            text.contains(r#"key1="a""#) && text.contains(r#"key1="b""#),
            "{text}"
        );
        assert!(!text.contains(r#"key1="c""#), "{text}");
        assert!(text.contains(r#"key1="_overflow_""#), "{text}");
    }
}
