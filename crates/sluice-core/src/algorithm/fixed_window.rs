//! Fixed window: a counter per window [kW, (k+1)W), windows aligned to the Unix epoch as in
//! envoyproxy/ratelimit. Admits when count + cost <= L; a denial and a cost of 0 change nothing.
//! In debt the count exceeds L, and the excess carries into the next windows, L per window.
//! Charged by the reference's counting (every hit, denied or not) the count exceeds L too, but
//! within its window only: the reference's key names the window, so nothing carries over.
//!
//! Over a calendar (`window: {calendar: month, time_zone: Europe/Berlin, anchor_day: 15}`),
//! the windows are the calendar's periods instead, from local midnight of the anchor day:
//! `crate::calendar` draws them, and the Redis script is handed them. Such a window cannot
//! take debt (its periods differ in length, so there is no rate to repay at).
//!
//! Exact for any time below 2^64 microseconds and counts below 2^64.

use crate::algorithm::params::{Given, Parameters, Refusal};
use crate::algorithm::persist::{Input, Persist};
use crate::algorithm::remaining;
use crate::algorithm::{Ask, Decision, HeapSize, LimitAlgorithm, Rate};
use crate::calendar::{self, Calendar};

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

/// A fixed window's own setting (`window`): the calendar it counts over, or windows that start
/// at each counter's first hit (`window: {start: first_hit}`, Limitador's); neither: the
/// epoch's windows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct FixedWindowParameters {
    pub calendar: Option<&'static Calendar>,
    pub from_first_hit: bool,
}

impl FixedWindowParameters {
    /// Windows that each start at their counter's first hit.
    pub const FROM_FIRST_HIT: FixedWindowParameters = FixedWindowParameters {
        calendar: None,
        from_first_hit: true,
    };
}

impl crate::algorithm::Counting {
    /// Whether these are a fixed window's windows from each counter's first hit.
    pub fn from_first_hit(&self) -> bool {
        matches!(self, crate::algorithm::Counting::FixedWindow(own) if own.from_first_hit)
    }
}

/// How `window` names windows that start at a counter's first hit, and the epoch's.
const START_KEY: &str = "start";

impl Parameters for FixedWindowParameters {
    const KEYS: &'static [&'static str] = &["window"];
    const SCRIPT_ARGS: &'static [&'static str] = &["window_start_us", "window_end_us", "first_hit"];

    /// `window`: a calendar whose period is the limit's `unit` (and `unit_multiplier` 1), or
    /// `{start: first_hit}` (or `{start: epoch}`, the default).
    fn parse(given: &Given, _: u32, period_us: u64) -> Result<Self, Refusal> {
        let Some(value) = given.get("window") else {
            return Ok(FixedWindowParameters::default());
        };
        if let Some(start) = value.get(START_KEY) {
            return start_of_windows(value, start);
        }
        let calendar =
            calendar::from_yaml(value).map_err(|(key, reason)| Refusal::new(key, reason))?;
        if calendar.nominal_seconds() * 1_000_000 != period_us {
            let unit = calendar.unit().as_str();
            let reason = format!(
                "a calendar {unit} counts per {unit}: give unit: {unit} (and no unit_multiplier)"
            );
            return Err(Refusal::new("window.calendar", reason));
        }
        Ok(FixedWindowParameters {
            calendar: Some(calendar::intern(calendar)),
            from_first_hit: false,
        })
    }

    fn describe(&self, _: &Rate) -> String {
        match self.calendar {
            Some(calendar) => format!(", {calendar}"),
            None if self.from_first_hit => ", windows from each counter's first hit".to_string(),
            None => String::new(),
        }
    }

    /// A window from the first hit is a state of its own shape (`first_`).
    fn shape(&self, _: &Rate) -> [u64; 2] {
        [u64::from(self.from_first_hit), 0]
    }

    fn write_key([from_first_hit, _]: [u64; 2], key: &mut String) {
        if from_first_hit == 1 {
            key.push_str("first_");
        }
    }

    /// The calendar window at `now_us` (start, end), 0 and 0 when the windows are the
    /// epoch's or start at the first hit; then 1 when they start at the first hit.
    fn script_args(&self, _: &Rate, now_us: u64) -> [u64; 3] {
        match self.calendar {
            Some(calendar) => {
                let (start_us, end_us) = calendar.window_us(now_us);
                [start_us, end_us, 0]
            }
            None => [0, 0, u64::from(self.from_first_hit)],
        }
    }

    fn calendar(&self) -> Option<&'static Calendar> {
        self.calendar
    }

    fn refuses_debt(&self) -> Option<&'static str> {
        if self.calendar.is_some() {
            return Some("a calendar window takes no debt: its periods differ in length, so there is no rate to repay at");
        }
        self.from_first_hit.then_some(
            "a window from the first hit takes no debt: its count ends with its window, which the next hit opens",
        )
    }
}

/// `window: {start: first_hit}` or `{start: epoch}`, alone in its map.
fn start_of_windows(
    window: &serde_yaml::Value,
    start: &serde_yaml::Value,
) -> Result<FixedWindowParameters, Refusal> {
    let from_first_hit = match start.as_str() {
        Some("first_hit") => true,
        Some("epoch") => false,
        _ => {
            return Err(Refusal::new(
                "window.start",
                "must be first_hit (each counter's window starts at its first hit) or epoch",
            ))
        }
    };
    if window.as_mapping().is_some_and(|map| map.len() > 1) {
        return Err(Refusal::new(
            "window",
            "start is given alone (a calendar's periods start where the calendar says)",
        ));
    }
    Ok(FixedWindowParameters {
        calendar: None,
        from_first_hit,
    })
}

/// Start of the window holding `now_us`, aligned to the epoch.
pub fn window_start_us(limit: &Rate, now_us: u64) -> u64 {
    now_us - now_us % limit.period_us()
}

/// The window holding `now_us` (start, end): the calendar's period, or the epoch's window;
/// for windows from the first hit, the one that would open at `now_us`.
pub fn window_us(limit: &Rate, own: &FixedWindowParameters, now_us: u64) -> (u64, u64) {
    match own.calendar {
        Some(calendar) => calendar.window_us(now_us),
        None if own.from_first_hit => (now_us, now_us.saturating_add(limit.period_us())),
        None => {
            let start_us = window_start_us(limit, now_us);
            (start_us, start_us.saturating_add(limit.period_us()))
        }
    }
}

/// The window a hit at `now_us` counts in, with its bounds (start, end): the stored one
/// rolled to the window holding `now_us`; for windows from the first hit, the stored one
/// while it lasts, else a new one opening at `now_us`.
fn current(
    stored: Option<&Window>,
    limit: &Rate,
    own: &FixedWindowParameters,
    now_us: u64,
) -> (Window, (u64, u64)) {
    if own.from_first_hit {
        let period = limit.period_us();
        return match stored {
            Some(window) if window.start_us.saturating_add(period) > now_us => (
                *window,
                (window.start_us, window.start_us.saturating_add(period)),
            ),
            _ => (
                Window {
                    start_us: now_us,
                    count: 0,
                },
                (now_us, now_us.saturating_add(period)),
            ),
        };
    }
    let bounds = window_us(limit, own, now_us);
    (rolled(stored.copied(), limit, bounds.0), bounds)
}

/// The stored window moved to the one starting at `start_us`: in debt every window that
/// passed drains L; otherwise a past window's count is of its own window, and the next starts
/// empty.
fn rolled(stored: Option<Window>, limit: &Rate, start_us: u64) -> Window {
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

/// Time from `now_us` to the start of the `windows`-th window after the one at
/// `(start_us, end_us)`: windows after the first are the epoch's (only those take debt).
fn until((start_us, end_us): (u64, u64), windows: u64, period_us: u64, now_us: u64) -> u64 {
    if windows <= 1 {
        return end_us.saturating_sub(now_us);
    }
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
    type Params = FixedWindowParameters;
    const KEY_HOLDS_WINDOW: bool = true;
    const DECIDES_ZERO_LIMIT: bool = true;
    const EXCESS_ENDS_WITH_WINDOW: bool = true;

    /// Decides one hit. Returns the decision and the window to store when it changed.
    #[inline]
    fn decide(stored: Option<&Window>, ask: &Ask<'_, Self::Params>) -> (Decision, Option<Window>) {
        let (limit, cost, now_us) = (ask.rate, ask.cost, ask.now_us);
        let (window, bounds) = current(stored, limit, ask.own, now_us);
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
            reset_after_us: until(bounds, drain, period, now_us),
            retry_after_us: if admitted {
                0
            } else {
                let fits = windows_until_fits(window.count, cost, limit);
                until(bounds, fits, period, now_us)
            },
            ..Decision::default()
        };
        let changed = (admitted && cost > 0).then_some(Window {
            count: count_after,
            ..window
        });
        (decision, changed)
    }

    /// The window's count: past L in debt, after a settle past it, or by the reference's
    /// counting.
    fn used(stored: Option<&Window>, ask: &Ask<'_, Self::Params>) -> Option<u64> {
        Some(current(stored, ask.rate, ask.own, ask.now_us).0.count)
    }

    fn force(stored: Option<&Window>, ask: &Ask<'_, Self::Params>) -> Window {
        let (window, _) = current(stored, ask.rate, ask.own, ask.now_us);
        Window {
            count: window.count.saturating_add(ask.cost),
            ..window
        }
    }

    const CREDIT_REFUSAL: Option<&'static str> = None;

    /// The current window's count, down by the cost (never below 0).
    fn credit(stored: Option<&Window>, ask: &Ask<'_, Self::Params>) -> Window {
        let (window, _) = current(stored, ask.rate, ask.own, ask.now_us);
        Window {
            count: window.count.saturating_sub(ask.cost),
            ..window
        }
    }

    /// The count has drained (a calendar window's, at its end).
    fn expires_at_us(window: &Window, rate: &Rate, own: &Self::Params) -> u64 {
        if let Some(calendar) = own.calendar {
            return calendar.window_us(window.start_us).1;
        }
        let drain = windows_to_drain(window.count, rate);
        window
            .start_us
            .saturating_add(drain.saturating_mul(rate.period_us()))
    }
}

#[cfg(test)]
mod calendar_tests {
    use super::*;
    use crate::algorithm::{Counting, State};
    use crate::calendar::CalendarUnit;
    use crate::limit::{Limit, Unit};

    /// µs since the epoch of an RFC 3339 instant.
    fn at(text: &str) -> u64 {
        let instant: jiff::Timestamp = text.parse().expect("an instant");
        u64::try_from(instant.as_microsecond()).expect("after the epoch")
    }

    fn billing_month(requests: u32) -> Limit {
        let calendar = Calendar::new(CalendarUnit::Month, "Europe/Berlin", Some(15), None)
            .expect("a valid calendar");
        let own = FixedWindowParameters {
            calendar: Some(calendar::intern(calendar)),
            from_first_hit: false,
        };
        Limit::new(Counting::FixedWindow(own), requests, Unit::Month)
    }

    #[test]
    fn a_calendar_window_resets_at_its_local_midnight_and_not_before() {
        let limit = billing_month(3);
        let now = at("2026-03-20T12:00:00Z");
        let first = limit.decide(None, 3, now);
        assert!(first.decision.admitted);
        // The period ends at midnight of April 15th in Berlin (summer time by then).
        let end = at("2026-04-14T22:00:00Z");
        assert_eq!(first.decision.reset_after_us, end - now);
        let (state, expires_at_us) = first.new_state.expect("charged");
        assert_eq!(expires_at_us, end);
        let State::FixedWindow(window) = &state else {
            panic!("a window")
        };
        assert_eq!(window.start_us, at("2026-03-14T23:00:00Z"));
        let denied = limit.decide(Some(&state), 1, end - 1).decision;
        assert!(!denied.admitted);
        assert_eq!(denied.retry_after_us, 1);
        let next = limit.decide(Some(&state), 3, end).decision;
        assert!(next.admitted, "a new period starts empty");
    }

    #[test]
    fn a_calendar_window_describes_its_period_and_zone() {
        assert_eq!(
            billing_month(1000).to_string(),
            "fixed_window: 1000 per month, calendar month from day 15, midnight Europe/Berlin"
        );
    }
}
