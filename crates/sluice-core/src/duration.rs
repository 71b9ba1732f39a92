//! Durations as people write them on command lines and in environment variables: `500ms`,
//! `150us` (or `µs`), `10s`, `2m`, `1h`, `1d`, or a bare number of seconds.

use std::time::Duration;

/// A text that is not a duration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{0}' is not a duration (e.g. 500ms, 10s, 2m, 1h)")]
pub struct DurationError(pub String);

/// Parses a duration into microseconds.
pub fn parse_us(text: &str) -> Result<u64, DurationError> {
    let error = || DurationError(text.to_string());
    let trimmed = text.trim();
    let split = trimmed
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    let number: u64 = number.parse().map_err(|_| error())?;
    let scale: u64 = match unit {
        "us" | "µs" => 1,
        "ms" => 1_000,
        "" | "s" => 1_000_000,
        "m" => 60_000_000,
        "h" => 3_600_000_000,
        "d" => 86_400_000_000,
        _ => return Err(error()),
    };
    number.checked_mul(scale).ok_or_else(error)
}

/// `us` in the largest unit that writes it whole (`90s`, `2m`, `1h`, `1d`, `1500ms`), as
/// `parse_us` reads it back.
pub fn format_us(us: u64) -> String {
    const UNITS: [(u64, &str); 6] = [
        (86_400_000_000, "d"),
        (3_600_000_000, "h"),
        (60_000_000, "m"),
        (1_000_000, "s"),
        (1_000, "ms"),
        (1, "us"),
    ];
    for (scale, unit) in UNITS {
        if us >= scale && us % scale == 0 {
            return format!("{}{unit}", us / scale);
        }
    }
    "0s".to_string()
}

/// `us` for people: days, hours, minutes and seconds, each when not 0, the seconds to the
/// millisecond (`1d2h`, `3m22.5s`, `90ms`); `0s` for 0.
pub fn human(us: u64) -> String {
    let mut out = String::new();
    let mut rest = us;
    for (scale, unit) in [
        (86_400_000_000, "d"),
        (3_600_000_000, "h"),
        (60_000_000, "m"),
    ] {
        if rest >= scale {
            out.push_str(&format!("{}{unit}", rest / scale));
            rest %= scale;
        }
    }
    let millis = rest / 1000;
    if millis >= 1000 || (millis > 0 && !out.is_empty()) {
        let seconds = format!("{}.{:03}", millis / 1000, millis % 1000);
        out.push_str(seconds.trim_end_matches('0').trim_end_matches('.'));
        out.push('s');
    } else if millis > 0 {
        out.push_str(&format!("{millis}ms"));
    } else if out.is_empty() {
        out.push_str(&format_us(us));
    }
    out
}

/// Parses a duration (for clap's `value_parser`).
pub fn parse(text: &str) -> Result<Duration, DurationError> {
    parse_us(text).map(Duration::from_micros)
}

/// Rounds microseconds up to whole seconds: Envoy truncates, so rounding down would tell a
/// client to retry before it may.
pub fn ceil_seconds(us: u64) -> u64 {
    us.div_ceil(1_000_000)
}

/// `seconds` since the epoch as RFC 3339 UTC (`2026-12-01T20:15:00Z`), by the civil calendar
/// (days to year, month, day as in Howard Hinnant's `civil_from_days`).
pub fn utc_text(seconds: u64) -> String {
    let (days, rest) = (seconds / 86_400, seconds % 86_400);
    let z = days + 719_468;
    let era = z / 146_097;
    let day_of_era = z % 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(parse_us("500ms"), Ok(500_000));
        assert_eq!(parse_us("2m"), Ok(120_000_000));
        assert_eq!(parse_us("150µs"), Ok(150));
        assert_eq!(parse_us("7"), Ok(7_000_000));
        assert!(parse_us("7 parsecs").is_err());
        assert!(parse_us("").is_err());
    }

    #[test]
    fn formats_read_back() {
        for us in [
            0,
            1,
            1_500,
            90_000_000,
            120_000_000,
            3_600_000_000,
            86_400_000_000,
        ] {
            assert_eq!(parse_us(&format_us(us)).unwrap_or(u64::MAX), us, "{us}");
        }
        assert_eq!(format_us(90_000_000), "90s");
        assert_eq!(format_us(7_200_000_000), "2h");
    }

    #[test]
    fn human_durations_name_each_unit() {
        let cases = [
            (202_500_000, "3m22.5s"),
            (90_000_000, "1m30s"),
            (3_600_000_000, "1h"),
            (90_000, "90ms"),
            (93_600_000_000, "1d2h"),
            (0, "0s"),
        ];
        for (us, text) in cases {
            assert_eq!(human(us), text, "{us}");
        }
    }

    #[test]
    fn utc_text_is_the_civil_calendar() {
        assert_eq!(utc_text(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc_text(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(utc_text(1_796_156_100), "2026-12-01T20:15:00Z");
        assert_eq!(utc_text(4_102_444_799), "2099-12-31T23:59:59Z");
    }
}
