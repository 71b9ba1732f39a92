//! What a penalty's block adds to a response's dynamic metadata, `sluice.penalty`: until when
//! the client is blocked (RFC 3339, UTC, to the second, rounded up as `Retry-After` is), the
//! seconds to wait, the offence's number, whether this request's denial imposed it, the
//! descriptor (its index in the request), the limit's name, and whether the limit is in
//! shadow mode (the block counted, not enforced). Plain values: the server writes them.

use crate::algorithm::Decision;
use crate::duration::ceil_seconds;
use crate::modifier::MetaValue;

/// The dynamic metadata field of a penalty's block (docs/penalties.md).
pub const METADATA_KEY: &str = "sluice.penalty";

/// A block a penalty put on a request's descriptor.
#[derive(Debug, Clone)]
pub struct Block {
    pub descriptor: usize,
    pub decision: Decision,
    pub limit_name: String,
    pub shadow_mode: bool,
}

/// The fields of `sluice.penalty` for `block`.
pub fn fields(block: &Block) -> Vec<(&'static str, MetaValue)> {
    let penalty = super::Penalized::of(&block.decision);
    #[allow(clippy::cast_precision_loss)]
    let mut fields = vec![
        (
            "until",
            MetaValue::Text(utc_text(ceil_seconds(penalty.until_us))),
        ),
        (
            "retry_after_seconds",
            MetaValue::Number(ceil_seconds(block.decision.retry_after_us) as f64),
        ),
        ("offence", MetaValue::Number(f64::from(penalty.offence))),
        ("descriptor", MetaValue::Number(block.descriptor as f64)),
        ("imposed", MetaValue::Flag(penalty.imposed)),
        ("shadow_mode", MetaValue::Flag(block.shadow_mode)),
    ];
    if !block.limit_name.is_empty() {
        fields.push(("limit", MetaValue::Text(block.limit_name.clone())));
    }
    fields
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
    fn utc_text_is_the_civil_calendar() {
        assert_eq!(utc_text(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc_text(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(utc_text(1_796_156_100), "2026-12-01T20:15:00Z");
        assert_eq!(utc_text(4_102_444_799), "2099-12-31T23:59:59Z");
    }
}
