//! One limit's penalty series: blocks imposed, requests a block denied, and the clients
//! blocked now (by blocks this replica imposed: summed over replicas, every block counts
//! once), kept as block ends by the second so that a flood of offenders costs one entry per
//! second of the longest block, not one per client.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Instant;

use metrics::{Counter, Gauge, Label};

use crate::penalty::Penalized;
use crate::series::Series;

/// The series of one limit's penalty.
pub(super) struct PenaltyCounters {
    imposed: Counter,
    denied: Counter,
    blocked: Gauge,
    /// Blocks imposed here that have not ended: how many end in each second (since `epoch`).
    ends: Mutex<BTreeMap<u64, u64>>,
}

impl PenaltyCounters {
    /// The series under `labels`.
    pub(super) fn new(series: &Series, labels: &[Label]) -> PenaltyCounters {
        PenaltyCounters {
            imposed: series.counter("sluice_penalties_imposed_total", labels.to_vec()),
            denied: series.counter("sluice_penalty_denials_total", labels.to_vec()),
            blocked: series.gauge("sluice_penalty_blocked_clients", labels.to_vec()),
            ends: Mutex::new(BTreeMap::new()),
        }
    }

    /// A hit's `penalty`, whose block ends `wait_us` from now.
    pub(super) fn record(&self, penalty: &Penalized, wait_us: u64, epoch: Instant) {
        if penalty.imposed {
            self.imposed.increment(1);
            let ends_s = (epoch.elapsed().as_micros() as u64 + wait_us).div_ceil(1_000_000);
            *self.lock().entry(ends_s).or_default() += 1;
            self.refresh(epoch);
        } else if penalty.until_us > 0 {
            self.denied.increment(1);
        }
    }

    /// Sets the gauge to the blocks that have not ended, forgetting the others.
    pub(super) fn refresh(&self, epoch: Instant) {
        let now_s = epoch.elapsed().as_secs();
        let mut ends = self.lock();
        let live = ends.split_off(&(now_s + 1));
        *ends = live;
        #[allow(clippy::cast_precision_loss)]
        self.blocked.set(ends.values().sum::<u64>() as f64);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, u64>> {
        self.ends
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
