//! What a penalty says outside the store. In a response's dynamic metadata, `sluice.penalty`,
//! the block ending last among the request's descriptors: until when the client is blocked
//! (RFC 3339, UTC, to the second, rounded up as `Retry-After` is), the seconds to wait, the
//! offence's number, whether this request's denial imposed it, the descriptor (its index in
//! the request), the limit's name, and whether the limit is in shadow mode (the block
//! counted, not enforced). In the metrics, for each limit: blocks imposed, requests a block
//! denied, and the clients blocked now (`Meter`).

use std::collections::BTreeMap;
use std::sync::Mutex;

use super::Penalized;
use crate::algorithm::{Decision, Noted};
use crate::duration::{ceil_seconds, utc_text};
use crate::modifier::edges::{flag_of, number_of};
use crate::modifier::{Event, MetaField, MetaValue, Meter, Said, SeriesDef, SeriesKind, Tally};

/// The dynamic metadata field of a penalty's block (docs/penalties.md).
pub const METADATA_KEY: &str = "sluice.penalty";

/// The series a penalty records for its limit, in `Tally` order.
pub const SERIES: &[SeriesDef] = &[
    SeriesDef {
        name: "sluice_penalties_imposed_total",
        kind: SeriesKind::Counter,
        label: None,
    },
    SeriesDef {
        name: "sluice_penalty_denials_total",
        kind: SeriesKind::Counter,
        label: None,
    },
    SeriesDef {
        name: "sluice_penalty_blocked_clients",
        kind: SeriesKind::Gauge,
        label: None,
    },
];
const IMPOSED: usize = 0;
const DENIED: usize = 1;
const BLOCKED: usize = 2;

/// `sluice.penalty` for the block ending last among `decisions` (the first descriptor's of
/// blocks ending together), when one denied the request.
pub fn said(decisions: &[Said<'_>]) -> Option<MetaField> {
    let block = decisions
        .iter()
        .map(|said| (said, Penalized::of(&said.decision)))
        .filter(|(_, penalty)| penalty.until_us > 0)
        .max_by_key(|(said, penalty)| (penalty.until_us, std::cmp::Reverse(said.descriptor)))?;
    Some((METADATA_KEY, fields(block.0, &block.1)))
}

/// The fields of `sluice.penalty` for the block `penalty` on `said`.
fn fields(said: &Said<'_>, penalty: &Penalized) -> Vec<(&'static str, MetaValue)> {
    #[allow(clippy::cast_precision_loss)]
    let mut fields = vec![
        (
            "until",
            MetaValue::Text(utc_text(ceil_seconds(penalty.until_us))),
        ),
        (
            "retry_after_seconds",
            MetaValue::Number(ceil_seconds(said.decision.retry_after_us) as f64),
        ),
        ("offence", MetaValue::Number(f64::from(penalty.offence))),
        ("descriptor", MetaValue::Number(said.descriptor as f64)),
        ("imposed", MetaValue::Flag(penalty.imposed)),
        ("shadow_mode", MetaValue::Flag(said.shadow_mode)),
    ];
    if !said.limit_name.is_empty() {
        fields.push(("limit", MetaValue::Text(said.limit_name.to_string())));
    }
    fields
}

/// A block this request's denial imposed, as `simulate` marks it: `blocked at 7s: offence
/// 1, for 1m`.
pub fn event((key, values): &MetaField) -> Option<Event> {
    if *key != METADATA_KEY || !flag_of(values, "imposed")? {
        return None;
    }
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let (descriptor, offence, block_s) = (
        number_of(values, "descriptor")? as usize,
        number_of(values, "offence")? as u64,
        number_of(values, "retry_after_seconds")? as u64,
    );
    Some(Event {
        descriptor,
        verb: "blocked",
        detail: format!(
            "offence {offence}, for {}",
            crate::duration::human(block_s * 1_000_000)
        ),
    })
}

/// One limit's penalty series: what it counts, and when the blocks in force end (whole
/// seconds of the metrics' clock, with the clients whose block ends then), so that a client
/// blocked again right after its block ends counts once.
#[derive(Default)]
pub struct PenaltyMeter {
    ends: Mutex<BTreeMap<u64, u64>>,
}

impl Meter for PenaltyMeter {
    fn record(
        &self,
        noted: &Noted,
        decision: &Decision,
        _cost: u64,
        now_us: u64,
        tally: &dyn Tally,
    ) {
        let penalty = Penalized::of_noted(noted);
        if penalty.imposed {
            tally.count(IMPOSED, 1);
            let ends_s = now_us.saturating_add(decision.retry_after_us) / 1_000_000;
            *self.lock().entry(ends_s).or_default() += 1;
            self.refresh(now_us, tally);
        } else if penalty.until_us > 0 {
            tally.count(DENIED, 1);
        }
    }

    fn refresh(&self, now_us: u64, tally: &dyn Tally) {
        let now_s = now_us / 1_000_000;
        let mut ends = self.lock();
        let live = ends.split_off(&(now_s + 1));
        *ends = live;
        #[allow(clippy::cast_precision_loss)]
        tally.set(BLOCKED, ends.values().sum::<u64>() as f64);
    }
}

impl PenaltyMeter {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, u64>> {
        self.ends
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;

    /// The series as numbers, by place.
    #[derive(Default)]
    struct Numbers(RefCell<[f64; 3]>);

    impl Tally for Numbers {
        fn count(&self, series: usize, n: u64) {
            #[allow(clippy::cast_precision_loss)]
            let n = n as f64;
            self.0.borrow_mut()[series] += n;
        }
        fn shift(&self, series: usize, change: f64) {
            self.0.borrow_mut()[series] += change;
        }
        fn set(&self, series: usize, value: f64) {
            self.0.borrow_mut()[series] = value;
        }
        fn observe(&self, _series: usize, _value: f64) {}
    }

    fn imposed(meter: &PenaltyMeter, wait_us: u64, now_us: u64, numbers: &Numbers) {
        let noted = Penalized {
            imposed: true,
            until_us: now_us + wait_us,
            offence: 1,
        }
        .noted();
        let decision = Decision {
            retry_after_us: wait_us,
            ..Decision::default()
        };
        meter.record(&noted, &decision, 1, now_us, numbers);
    }

    fn blocked(numbers: &Numbers) -> f64 {
        numbers.0.borrow()[BLOCKED]
    }

    #[test]
    fn a_client_blocked_again_right_after_its_block_ends_counts_once() {
        let (meter, numbers) = (PenaltyMeter::default(), Numbers::default());
        imposed(&meter, 500_000, 9_700_000, &numbers);
        assert_eq!(blocked(&numbers), 1.0);
        imposed(&meter, 2_000_000, 10_250_000, &numbers);
        assert_eq!(blocked(&numbers), 1.0, "one client, one block at a time");
        meter.refresh(12_300_000, &numbers);
        assert_eq!(blocked(&numbers), 0.0);
        assert_eq!(numbers.0.borrow()[IMPOSED], 2.0);
    }

    #[test]
    fn blocks_of_several_clients_count_until_they_end() {
        let (meter, numbers) = (PenaltyMeter::default(), Numbers::default());
        imposed(&meter, 3_000_000, 1_000_000, &numbers);
        imposed(&meter, 5_000_000, 1_500_000, &numbers);
        meter.refresh(3_500_000, &numbers);
        assert_eq!(blocked(&numbers), 2.0);
        meter.refresh(4_100_000, &numbers);
        assert_eq!(blocked(&numbers), 1.0, "the first ended at 4 s");
        meter.refresh(6_600_000, &numbers);
        assert_eq!(blocked(&numbers), 0.0);
    }

    #[test]
    fn the_block_ending_last_is_said_with_its_descriptor_and_limit() {
        let block = |until_us, retry_after_us| Decision {
            admitted: false,
            retry_after_us,
            mark: crate::algorithm::Mark::Noted(
                Penalized {
                    until_us,
                    offence: 2,
                    imposed: false,
                }
                .noted(),
            ),
            ..Decision::default()
        };
        let decisions = [
            Said {
                descriptor: 0,
                decision: Decision::default(),
                limit_name: "",
                shadow_mode: false,
            },
            Said {
                descriptor: 1,
                decision: block(9_000_000, 1_500_000),
                limit_name: "per_client",
                shadow_mode: true,
            },
            Said {
                descriptor: 2,
                decision: block(5_000_000, 1_000_000),
                limit_name: "",
                shadow_mode: false,
            },
        ];
        let (key, fields) = said(&decisions).expect("a block");
        assert_eq!(key, METADATA_KEY);
        let field = |name: &str| {
            fields
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(field("descriptor"), Some(MetaValue::Number(1.0)));
        assert_eq!(
            field("until"),
            Some(MetaValue::Text("1970-01-01T00:00:09Z".into()))
        );
        assert_eq!(field("retry_after_seconds"), Some(MetaValue::Number(2.0)));
        assert_eq!(field("limit"), Some(MetaValue::Text("per_client".into())));
        assert_eq!(field("shadow_mode"), Some(MetaValue::Flag(true)));
        assert!(said(&decisions[..1]).is_none(), "no block, nothing said");
    }
}
