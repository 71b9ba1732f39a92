//! Sliding window counter (Cloudflare's approximation): counts of the current and previous
//! aligned windows; the previous one is weighted by how much of it the sliding window still
//! covers, as if its requests had been spread evenly. O(1) memory.
//!
//! Admits when prev x (W - elapsed) / W + cur + h <= L, computed exactly as
//! prev x (W - elapsed) + (cur + h) x W <= L x W in 128-bit integers (exact for every u32
//! limit, u64 cost and period). In any aligned window at most L pass; in any window of length W
//! at most L + prev x elapsed / W < 2L.

use crate::algorithm::params::NoParameters;
use crate::algorithm::persist::{Input, Persist};
use crate::algorithm::{remaining, remaining_u64};
use crate::algorithm::{Ask, Decision, HeapSize, LimitAlgorithm, Rate};

/// Counts of the current window (starting at `start_us`) and of the one before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub start_us: u64,
    pub previous: u64,
    pub current: u64,
}

impl Persist for Counts {
    fn put(&self, out: &mut Vec<u8>) {
        for value in [self.start_us, self.previous, self.current] {
            out.extend_from_slice(&value.to_le_bytes());
        }
    }

    fn take(input: &mut Input<'_>) -> Option<Self> {
        Some(Counts {
            start_us: input.u64()?,
            previous: input.u64()?,
            current: input.u64()?,
        })
    }
}

/// The stored counts moved to the window holding `now_us`.
fn rolled(stored: Option<Counts>, capacity: u64, period: u64, now_us: u64) -> Counts {
    let start_us = now_us - now_us % period;
    match stored {
        // The current window, or one ahead of the clock (time went back): never admit more.
        Some(c) if c.start_us >= start_us => c,
        Some(c) => passed(&c, capacity, period, (start_us - c.start_us) / period),
        None => Counts {
            start_us,
            previous: 0,
            current: 0,
        },
    }
}

/// The counts `windows` (>= 1) windows after `c`: each window that passes takes at most L of
/// the current count as its own (the next window's previous) and carries the rest, debt, as
/// the next window's current. Without debt the current count is at most L, so it simply
/// becomes the previous one, and after two windows nothing is left.
fn passed(c: &Counts, capacity: u64, period: u64, windows: u64) -> Counts {
    let drained = |windows: u64| c.current.saturating_sub(capacity.saturating_mul(windows));
    Counts {
        start_us: c.start_us.saturating_add(windows.saturating_mul(period)),
        previous: drained(windows - 1).min(capacity),
        current: drained(windows),
    }
}

/// The estimate scaled by W: prev x (W - elapsed) + cur x W.
fn weighted(previous: u64, current: u64, elapsed: u64, period: u64) -> u128 {
    let covered = u128::from(period.saturating_sub(elapsed));
    u128::from(previous) * covered + u128::from(current) * u128::from(period)
}

/// Windows after `c`'s until the estimate is 0: the current count (drained L per window)
/// decays through the window after it; without one, the previous through this one.
fn windows_to_empty(c: &Counts, capacity: u64) -> u64 {
    if c.current > 0 {
        c.current.div_ceil(capacity.max(1)) + 1
    } else {
        u64::from(c.previous > 0)
    }
}

/// Time until the estimate is 0.
fn until_empty(c: &Counts, capacity: u64, period: u64, now_us: u64) -> u64 {
    let windows = windows_to_empty(c, capacity);
    if windows == 0 {
        return 0;
    }
    c.start_us
        .saturating_add(windows.saturating_mul(period))
        .saturating_sub(now_us)
}

/// Earliest time the same hit fits, given that nothing else is admitted before then.
fn retry_after(c: &Counts, capacity: u64, cost: u64, period: u64, now_us: u64) -> u64 {
    if cost > capacity {
        return period;
    }
    // In this window, `previous` decays: find the first elapsed e with
    // previous x (W - e) <= (L - current - cost) x W.
    let fit_in = |counts: &Counts| {
        let room = capacity.checked_sub(counts.current.saturating_add(cost));
        first_fit(counts.previous, room, period)
    };
    if let Some(e) = fit_in(c) {
        return (c.start_us + e).saturating_sub(now_us);
    }
    // Later windows: the first one whose carried debt leaves room for the cost (the next one
    // without debt), or one of the two after it, where what it carried decays in turn.
    let first = (c.current.saturating_add(cost).saturating_sub(capacity))
        .div_ceil(capacity.max(1))
        .max(1);
    for windows in first..first + 3 {
        let later = passed(c, capacity, period, windows);
        if let Some(e) = fit_in(&later) {
            return later.start_us.saturating_add(e).saturating_sub(now_us);
        }
    }
    period
}

/// The smallest e in [0, W) with decaying x (W - e) <= room x W, if any.
fn first_fit(decaying: u64, room: Option<u64>, period: u64) -> Option<u64> {
    let room = u128::from(room?);
    if decaying == 0 {
        return Some(0);
    }
    // W - e <= room x W / decaying  <=>  e >= W - floor(room x W / decaying)
    let span = room * u128::from(period) / u128::from(decaying);
    let e = u128::from(period).saturating_sub(span);
    (e < u128::from(period)).then_some(e as u64)
}

/// The sliding window counter in the registry.
pub struct SlidingWindowCounter;

/// Held inline: nothing on the heap.
impl HeapSize for Counts {}

impl LimitAlgorithm for SlidingWindowCounter {
    type State = Counts;
    type Params = NoParameters;

    /// Decides one hit; returns the decision and the counts to store when they changed.
    #[inline]
    fn decide(stored: Option<&Counts>, ask: &Ask<'_, Self::Params>) -> (Decision, Option<Counts>) {
        let (limit, cost, now_us) = (ask.rate, ask.cost, ask.now_us);
        let period = limit.period_us();
        let capacity = u64::from(limit.requests_per_unit);
        let counts = rolled(stored.copied(), capacity, period, now_us);
        // Zero when the stored window is ahead of the clock: the previous count weighs fully.
        let elapsed = now_us.saturating_sub(counts.start_us);
        let admitted = weighted(
            counts.previous,
            counts.current.saturating_add(cost),
            elapsed,
            period,
        ) <= u128::from(capacity) * u128::from(period);
        let after = Counts {
            current: if admitted {
                counts.current + cost
            } else {
                counts.current
            },
            ..counts
        };
        let used = weighted(after.previous, after.current, elapsed, period);
        let decision = Decision {
            admitted,
            // floor(L - estimate) = floor((L x W - used) / W)
            remaining: remaining(
                (u128::from(capacity) * u128::from(period)).saturating_sub(used)
                    / u128::from(period),
            ),
            reset_after_us: until_empty(&after, capacity, period, now_us),
            retry_after_us: if admitted {
                0
            } else {
                retry_after(&counts, capacity, cost, period, now_us)
            },
            ..Decision::default()
        };
        (decision, (admitted && cost > 0).then_some(after))
    }

    fn force(stored: Option<&Counts>, ask: &Ask<'_, Self::Params>) -> Counts {
        let (limit, cost, now_us) = (ask.rate, ask.cost, ask.now_us);
        let capacity = u64::from(limit.requests_per_unit);
        let counts = rolled(stored.copied(), capacity, limit.period_us(), now_us);
        Counts {
            current: counts.current.saturating_add(cost),
            ..counts
        }
    }

    /// The estimate, rounded up: past L in debt.
    fn used(stored: Option<&Counts>, ask: &Ask<'_, Self::Params>) -> Option<u64> {
        let period = ask.rate.period_us().max(1);
        let capacity = u64::from(ask.rate.requests_per_unit);
        let counts = rolled(stored.copied(), capacity, period, ask.now_us);
        let elapsed = ask.now_us.saturating_sub(counts.start_us);
        let estimate = weighted(counts.previous, counts.current, elapsed, period);
        Some(remaining_u64(estimate.div_ceil(u128::from(period))))
    }

    /// When the state no longer matters: the estimate is 0 (without debt, when the current
    /// window has also become the previous one).
    const CREDIT_REFUSAL: Option<&'static str> = None;

    /// The current window's count, down by the cost (never below 0).
    fn credit(stored: Option<&Counts>, ask: &Ask<'_, Self::Params>) -> Counts {
        let (limit, now_us) = (ask.rate, ask.now_us);
        let capacity = u64::from(limit.requests_per_unit);
        let counts = rolled(stored.copied(), capacity, limit.period_us(), now_us);
        Counts {
            current: counts.current.saturating_sub(ask.cost),
            ..counts
        }
    }

    fn expires_at_us(counts: &Counts, limit: &Rate, _own: &Self::Params) -> u64 {
        let windows = windows_to_empty(counts, u64::from(limit.requests_per_unit)).max(2);
        counts
            .start_us
            .saturating_add(windows.saturating_mul(limit.period_us()))
    }
}
