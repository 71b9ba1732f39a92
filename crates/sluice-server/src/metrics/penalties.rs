//! One limit's penalty series: blocks imposed, requests a block denied, and the clients
//! blocked now (by blocks this replica imposed: summed over replicas, every block counts
//! once), kept as block ends by the second so that a flood of offenders costs one entry per
//! second of the longest block, not one per client.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Instant;

use metrics::{Counter, Gauge, Label};

use sluice_core::modifier::penalty::Penalized;
use sluice_store::series::Series;

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
        self.record_at(penalty, wait_us, elapsed_us(epoch));
    }

    /// Sets the gauge to the blocks that have not ended, forgetting the others.
    pub(super) fn refresh(&self, epoch: Instant) {
        self.refresh_at(elapsed_us(epoch));
    }

    /// `record` at `now_us` since the epoch. A block is kept under the second its end falls
    /// in, and counted until that second starts (less than a second early): a client blocked
    /// again as soon as its block ends is then never counted twice.
    fn record_at(&self, penalty: &Penalized, wait_us: u64, now_us: u64) {
        if penalty.imposed {
            self.imposed.increment(1);
            let ends_s = now_us.saturating_add(wait_us) / 1_000_000;
            *self.lock().entry(ends_s).or_default() += 1;
            self.refresh_at(now_us);
        } else if penalty.until_us > 0 {
            self.denied.increment(1);
        }
    }

    /// `refresh` at `now_us` since the epoch: the blocks whose end's second has not begun.
    fn refresh_at(&self, now_us: u64) {
        let now_s = now_us / 1_000_000;
        let mut ends = self.lock();
        let live = ends.split_off(&(now_s + 1));
        *ends = live;
        #[allow(clippy::cast_precision_loss)]
        self.blocked.set(ends.values().sum::<u64>() as f64);
    }

    /// The clients counted as blocked now.
    #[cfg(test)]
    fn blocked_now(&self) -> u64 {
        self.lock().values().sum()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, u64>> {
        self.ends
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Microseconds since `epoch`.
fn elapsed_us(epoch: Instant) -> u64 {
    u64::try_from(epoch.elapsed().as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn imposed() -> Penalized {
        Penalized {
            imposed: true,
            until_us: 1,
            ..Penalized::default()
        }
    }

    #[test]
    fn a_client_blocked_again_right_after_its_block_ends_counts_once() {
        let series = Series::new();
        let counters = PenaltyCounters::new(&series, &[]);
        // Blocked at 9.7 s for 0.5 s: the block ends at 10.2 s.
        counters.record_at(&imposed(), 500_000, 9_700_000);
        assert_eq!(counters.blocked_now(), 1);
        // Blocked again at 10.25 s, just after, for 2 s.
        counters.record_at(&imposed(), 2_000_000, 10_250_000);
        assert_eq!(counters.blocked_now(), 1, "one client, one block at a time");
        counters.refresh_at(12_300_000);
        assert_eq!(counters.blocked_now(), 0);
    }

    #[test]
    fn blocks_of_several_clients_count_until_they_end() {
        let series = Series::new();
        let counters = PenaltyCounters::new(&series, &[]);
        counters.record_at(&imposed(), 3_000_000, 1_000_000);
        counters.record_at(&imposed(), 5_000_000, 1_500_000);
        counters.refresh_at(3_500_000);
        assert_eq!(counters.blocked_now(), 2);
        counters.refresh_at(4_100_000);
        assert_eq!(counters.blocked_now(), 1, "the first ended at 4 s");
        counters.refresh_at(6_600_000);
        assert_eq!(counters.blocked_now(), 0);
    }
}
