//! Fixed window: a counter per window [kW, (k+1)W), windows aligned to the Unix epoch as in
//! envoyproxy/ratelimit. Admits when count + cost <= L; a denial and a cost of 0 change nothing.
//! In debt the count exceeds L, and the excess carries into the next windows, L per window.
//! Charged by the reference's counting (every hit, denied or not) the count exceeds L too, but
//! within its window only: the reference's key names the window, so nothing carries over.
//!
//! Exact for any time below 2^64 microseconds and counts below 2^64.

use crate::algorithm::params::NoParameters;
use crate::algorithm::persist::{Input, Persist};
use crate::algorithm::remaining;
use crate::algorithm::{Ask, Decision, HeapSize, LimitAlgorithm, Rate};

/// The counter of one window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// Start of the window in microseconds since the epoch.
    pub start_us: u64,
    /// Cost charged in this window so far; above L only in debt (the excess carries over)
    /// or by the reference's counting (it does not).
    pub count: u64,
}

impl Persist for Window {
    fn put(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.start_us.to_le_bytes());
        out.extend_from_slice(&self.count.to_le_bytes());
    }

    fn take(input: &mut Input<'_>) -> Option<Self> {
        Some(Window {
            start_us: input.u64()?,
            count: input.u64()?,
        })
    }
}

/// Start of the window holding `now_us`.
pub fn window_start_us(limit: &Rate, now_us: u64) -> u64 {
    now_us - now_us % limit.period_us()
}

/// The stored window moved to the one holding `now_us`: in debt every window that passed
/// drains L; otherwise a past window's count is of its own window, and the next starts empty.
fn rolled(stored: Option<Window>, limit: &Rate, now_us: u64) -> Window {
    let start_us = window_start_us(limit, now_us);
    match stored {
        // The current window, or one ahead of the clock (it went back): never admit more.
        Some(window) if window.start_us >= start_us => window,
        Some(window) if limit.debt => {
            let passed = (start_us - window.start_us) / limit.period_us();
            let drained = u64::from(limit.requests_per_unit).saturating_mul(passed);
            Window {
                start_us,
                count: window.count.saturating_sub(drained),
            }
        }
        _ => Window { start_us, count: 0 },
    }
}

/// Windows (1: the next) until `count` has drained to nothing at L per window; at least one,
/// the reference's reset time: the window's end (always, without debt: nothing carries).
fn windows_to_drain(count: u64, limit: &Rate) -> u64 {
    let capacity = u64::from(limit.requests_per_unit);
    if capacity == 0 || !limit.debt {
        return 1;
    }
    count.div_ceil(capacity).max(1)
}

/// The first window (1: the next) in which `cost` fits after `count`; a cost that never fits
/// is told the next window, as the reference does (and every cost, without debt: the next
/// window starts empty).
fn windows_until_fits(count: u64, cost: u64, limit: &Rate) -> u64 {
    let capacity = u64::from(limit.requests_per_unit);
    if cost > capacity || capacity == 0 || !limit.debt {
        return 1;
    }
    (count.saturating_add(cost) - capacity)
        .div_ceil(capacity)
        .max(1)
}

/// Time from `now_us` to the start of the `windows`-th window after the one at `start_us`.
fn until(start_us: u64, windows: u64, period_us: u64, now_us: u64) -> u64 {
    start_us
        .saturating_add(windows.saturating_mul(period_us))
        .saturating_sub(now_us)
}

/// The fixed window in the registry.
pub struct FixedWindow;

/// Held inline: nothing on the heap.
impl HeapSize for Window {}

impl LimitAlgorithm for FixedWindow {
    type State = Window;
    type Params = NoParameters;
    const KEY_HOLDS_WINDOW: bool = true;
    const DECIDES_ZERO_LIMIT: bool = true;
    const EXCESS_ENDS_WITH_WINDOW: bool = true;

    /// Decides one hit. Returns the decision and the window to store when it changed.
    #[inline]
    fn decide(stored: Option<&Window>, ask: &Ask<'_, Self::Params>) -> (Decision, Option<Window>) {
        let (limit, cost, now_us) = (ask.rate, ask.cost, ask.now_us);
        let window = rolled(stored.copied(), limit, now_us);
        let (period, capacity) = (limit.period_us(), u64::from(limit.requests_per_unit));
        let admitted = window.count.saturating_add(cost) <= capacity;
        let count_after = if admitted {
            window.count + cost
        } else {
            window.count
        };
        let drain = windows_to_drain(count_after, limit);
        let decision = Decision {
            admitted,
            remaining: remaining(u128::from(capacity.saturating_sub(count_after))),
            reset_after_us: until(window.start_us, drain, period, now_us),
            retry_after_us: if admitted {
                0
            } else {
                let fits = windows_until_fits(window.count, cost, limit);
                until(window.start_us, fits, period, now_us)
            },
            ..Decision::default()
        };
        let changed = (admitted && cost > 0).then_some(Window {
            count: count_after,
            ..window
        });
        (decision, changed)
    }

    fn force(stored: Option<&Window>, ask: &Ask<'_, Self::Params>) -> Window {
        let (limit, cost, now_us) = (ask.rate, ask.cost, ask.now_us);
        let window = rolled(stored.copied(), limit, now_us);
        Window {
            count: window.count.saturating_add(cost),
            ..window
        }
    }

    /// The count has drained.
    fn expires_at_us(window: &Window, rate: &Rate, _own: &Self::Params) -> u64 {
        let drain = windows_to_drain(window.count, rate);
        window
            .start_us
            .saturating_add(drain.saturating_mul(rate.period_us()))
    }
}
