//! One lease limit's series: leases taken, refused, released and expired (in
//! leases: a hit's cost), and those held = taken - released - expired, by this replica.

use metrics::{Counter, Gauge, Label};

use sluice_core::limit::LeaseOutcome;
use sluice_store::series::Series;

/// The series of one lease limit.
pub(super) struct LeaseCounters {
    acquired: Counter,
    refused: Counter,
    released: Counter,
    expired: Counter,
    held: Gauge,
}

impl LeaseCounters {
    /// The series under `labels`.
    pub(super) fn new(series: &Series, labels: &[Label]) -> LeaseCounters {
        let counter = |name: &'static str| series.counter(name, labels.to_vec());
        LeaseCounters {
            acquired: counter("sluice_leases_acquired_total"),
            refused: counter("sluice_leases_refused_total"),
            released: counter("sluice_leases_released_total"),
            expired: counter("sluice_leases_expired_total"),
            held: series.gauge("sluice_leases_held", labels.to_vec()),
        }
    }

    /// What a hit did to the limit's leases; `request_denied`: the request was denied, so
    /// leases its limit admitted were not taken (and are counted nowhere).
    pub(super) fn record(&self, lease: &LeaseOutcome, request_denied: bool) {
        let (released, expired) = lease.decision.leases();
        let (released, expired) = (u64::from(released), u64::from(expired));
        if lease.taken(request_denied) {
            self.acquired.increment(lease.cost);
            #[allow(clippy::cast_precision_loss)]
            self.held.increment(lease.cost as f64);
        } else if lease.refused() {
            self.refused.increment(lease.cost);
        }
        self.released.increment(released);
        self.expired.increment(expired);
        #[allow(clippy::cast_precision_loss)]
        self.held.decrement((released + expired) as f64);
    }
}
