//! Sliding window log: the time of every admitted unit of cost in the last W. Admits when the
//! entries in the window plus the cost fit in L. Exact; memory is one timestamp per admitted
//! unit, so limits are bounded (`MAX_REQUESTS_PER_UNIT` below).
//!
//! An entry stamped `ts` is in the window at `now` iff `ts + W > now`: the window is
//! (now - W, now], and an entry leaves it exactly W after it was admitted.

use crate::algorithm::params::NoParameters;
use crate::algorithm::remaining;
use crate::algorithm::{Ask, Decision, LimitAlgorithm, Rate};

/// Admission times, ascending, of every admitted unit of cost still in the window.
pub type Log = Vec<u64>;

/// The entries of `stored` still in the window at `now_us`. Entries stamped in the future (the
/// clock went back) still count: never admit more.
fn live(stored: Option<&Log>, period: u64, now_us: u64) -> &[u64] {
    stored.map_or(&[], |log| {
        let first_live = log.partition_point(|&ts| ts.saturating_add(period) <= now_us);
        &log[first_live..]
    })
}

/// `live` with `count` entries stamped `now_us` added in time order, keeping the newest
/// L + 1 at most. Exact: while L + 1 entries are live every hit is denied, and a decision only
/// ever looks at the newest L + 1 - cost entries. Allocated to its length: no spare capacity.
fn with_entries(live: &[u64], count: u64, capacity: u64, now_us: u64) -> Log {
    let kept = capacity.saturating_add(1) as usize;
    let at = live.partition_point(|&ts| ts <= now_us);
    let added = count.min(kept as u64) as usize;
    let total = live.len() + added;
    let excess = total.saturating_sub(kept);
    // The oldest `excess` of (entries up to now, the new ones, entries after now) are dropped.
    let from_before = excess.min(at);
    let from_added = (excess - from_before).min(added);
    let from_after = excess - from_before - from_added;
    let mut log = Vec::with_capacity(total - excess);
    log.extend_from_slice(&live[from_before..at]);
    log.resize(log.len() + added - from_added, now_us);
    log.extend_from_slice(&live[at + from_after..]);
    log
}

/// Time until the newest entry leaves the window (all capacity back).
fn until_empty(live: &[u64], period: u64, now_us: u64) -> u64 {
    live.last()
        .map_or(0, |&ts| (ts + period).saturating_sub(now_us))
}

/// The sliding log in the registry.
pub struct SlidingWindowLog;

impl LimitAlgorithm for SlidingWindowLog {
    type State = Log;
    type Params = NoParameters;
    const MAX_REQUESTS_PER_UNIT: Option<(u32, &'static str)> = Some((
        10_000,
        "keeps one entry per request (use sliding_window_counter for larger limits)",
    ));
    const NEEDS_NONCE: bool = true;

    /// Decides one hit; returns the decision and the log to store when it changed.
    #[inline]
    fn decide(stored: Option<&Log>, ask: &Ask<'_, Self::Params>) -> (Decision, Option<Log>) {
        let (limit, cost, now_us) = (ask.rate, ask.cost, ask.now_us);
        let period = limit.period_us();
        let capacity = u64::from(limit.requests_per_unit);
        let live = live(stored, period, now_us);
        let count = live.len() as u64;
        let admitted = count.saturating_add(cost) <= capacity;
        if !admitted {
            let retry_after_us = if cost > capacity {
                period
            } else {
                // The oldest (count + cost - capacity) entries must leave first.
                let must_leave = (count + cost - capacity) as usize;
                live[must_leave - 1] + period - now_us
            };
            let decision = Decision {
                admitted,
                remaining: remaining(u128::from(capacity.saturating_sub(count))),
                reset_after_us: until_empty(live, period, now_us),
                retry_after_us,
                ..Decision::default()
            };
            return (decision, None);
        }
        let changed = (cost > 0).then(|| with_entries(live, cost, capacity, now_us));
        let after: &[u64] = changed.as_deref().unwrap_or(live);
        let decision = Decision {
            admitted,
            remaining: remaining(u128::from(capacity.saturating_sub(after.len() as u64))),
            reset_after_us: until_empty(after, period, now_us),
            retry_after_us: 0,
            ..Decision::default()
        };
        (decision, changed)
    }

    /// When the state no longer matters: the newest entry leaves the window.
    fn force(stored: Option<&Log>, ask: &Ask<'_, Self::Params>) -> Log {
        let (limit, cost, now_us) = (ask.rate, ask.cost, ask.now_us);
        let live = live(stored, limit.period_us(), now_us);
        with_entries(live, cost, u64::from(limit.requests_per_unit), now_us)
    }

    /// The entries in the window (at most L + 1 are kept).
    fn used(stored: Option<&Log>, ask: &Ask<'_, Self::Params>) -> Option<u64> {
        Some(live(stored, ask.rate.period_us(), ask.now_us).len() as u64)
    }

    const CREDIT_REFUSAL: Option<&'static str> = Some(
        "sliding_window_log keeps the time of each admitted hit, not a count to give back to (reset it instead)",
    );

    fn expires_at_us(log: &Log, limit: &Rate, _own: &Self::Params) -> u64 {
        log.last().map_or(0, |&ts| ts + limit.period_us())
    }
}
