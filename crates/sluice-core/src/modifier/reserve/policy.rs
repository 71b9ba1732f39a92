//! A limit's `reserve` setting as YAML gives it: each request holds an estimate of its cost
//! (`amount`, or the descriptor's own `hits_addend` when above 0), never more than
//! `max_fraction` of the limit, for at most `max_hold`. Read and validated here, each refusal
//! naming its key.

use std::fmt;

use crate::algorithm::params::Refusal;
use crate::duration;
use crate::modifier::{duration_of, fixed_point, policy_map};

/// The YAML keys of `reserve`.
pub const KEYS: [&str; 4] = ["amount", "max_fraction", "max_hold", "max_holds"];

/// The longest `max_hold`: a day (a request in flight for longer is not one a budget waits
/// for).
const MAX_HOLD_US: u64 = 86_400 * 1_000_000;
/// `max_hold` when not given: ten minutes, or the limit's period when that is shorter.
const DEFAULT_MAX_HOLD_US: u64 = 600 * 1_000_000;
/// `max_fraction`'s scale: millionths.
const FRACTION_SCALE: u64 = 1_000_000;
/// The largest `amount`: the largest limit.
const MAX_AMOUNT: u64 = u32::MAX as u64;
/// `max_holds` when not given.
const DEFAULT_MAX_HOLDS: u32 = 1_000;
/// The largest `max_holds`: a key's holds are read and written whole at each of its calls.
pub const MAX_HOLDS: u32 = 10_000;

/// A reservation: what a request holds, how much of the limit at most, for how long at most.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Policy {
    /// The estimate of a request that names none.
    pub amount: u64,
    /// The largest estimate, as millionths of the limit.
    pub max_fraction_ppm: u32,
    /// A hold lapses this long after it was taken, unless its window ends first.
    pub max_hold_us: u64,
    /// The most requests that hold at once on one key: an opening past them is denied, so a
    /// client cannot make a key's holds (read and written whole) grow without bound.
    pub max_holds: u32,
}

impl Policy {
    /// The policy `value` (a YAML map) gives a limit of period `period_us`.
    pub fn parse(value: &serde_yaml::Value, period_us: u64) -> Result<Policy, Refusal> {
        let map = policy_map(value, "reserve", &KEYS)?;
        let amount = match map.get("amount") {
            None => {
                return Err(Refusal::new(
                    "reserve.amount",
                    "is required: the cost a request holds when it names none",
                ))
            }
            Some(value) => value
                .as_u64()
                .filter(|n| (1..=MAX_AMOUNT).contains(n))
                .ok_or_else(|| {
                    Refusal::new(
                        "reserve.amount",
                        format!("must be a whole number from 1 to {MAX_AMOUNT}"),
                    )
                })?,
        };
        let max_fraction_ppm = match map.get("max_fraction") {
            None => FRACTION_SCALE,
            Some(value) => fixed_point(value, 6)
                .filter(|ppm| (1..=FRACTION_SCALE).contains(ppm))
                .ok_or_else(|| {
                    Refusal::new(
                        "reserve.max_fraction",
                        "must be a number above 0 and at most 1, at most six decimals (0.5)",
                    )
                })?,
        };
        let max_hold_us = duration_of(map.get("max_hold"), "reserve.max_hold", MAX_HOLD_US)?
            .unwrap_or_else(|| DEFAULT_MAX_HOLD_US.min(period_us.max(1)));
        let max_holds = match map.get("max_holds") {
            None => DEFAULT_MAX_HOLDS,
            Some(value) => value
                .as_u64()
                .filter(|n| (1..=u64::from(MAX_HOLDS)).contains(n))
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| {
                    Refusal::new(
                        "reserve.max_holds",
                        format!("must be a whole number from 1 to {MAX_HOLDS}"),
                    )
                })?,
        };
        Ok(Policy {
            amount,
            max_fraction_ppm: u32::try_from(max_fraction_ppm).unwrap_or(u32::MAX),
            max_hold_us,
            max_holds,
        })
    }

    /// The largest estimate a limit of `requests_per_unit` lets one request hold: its
    /// fraction, rounded down, but at least 1.
    pub fn cap(&self, requests_per_unit: u32) -> u64 {
        let cap = u64::from(requests_per_unit) * u64::from(self.max_fraction_ppm) / FRACTION_SCALE;
        cap.max(1)
    }

    /// The estimate a request holds: its descriptor's own `hits_addend` when above 0, else
    /// `amount`; held to `cap`.
    pub fn estimate(&self, hits_addend: Option<u64>, requests_per_unit: u32) -> u64 {
        let asked = hits_addend.filter(|&n| n > 0).unwrap_or(self.amount);
        asked.min(self.cap(requests_per_unit))
    }

    /// `max_fraction` as written (`0.5`, `1`).
    pub fn fraction_text(&self) -> String {
        let ppm = u64::from(self.max_fraction_ppm);
        let (whole, part) = (ppm / FRACTION_SCALE, ppm % FRACTION_SCALE);
        if part == 0 {
            whole.to_string()
        } else {
            format!("{whole}.{part:06}")
                .trim_end_matches('0')
                .to_string()
        }
    }
}

impl fmt::Display for Policy {
    /// `each request holds 4000 or its own hits_addend (at most 0.5 of the limit) until it
    /// settles, for at most 2m`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "each request holds {} or its own hits_addend",
            self.amount
        )?;
        if u64::from(self.max_fraction_ppm) < FRACTION_SCALE {
            write!(f, " (at most {} of the limit)", self.fraction_text())?;
        }
        write!(
            f,
            " until it settles, for at most {}",
            duration::human(self.max_hold_us)
        )
    }
}

impl crate::modifier::ModifierPolicy for Policy {
    fn held(&self, kept: &dyn Fn(u8) -> Option<crate::algorithm::Kept>, now_us: u64) -> u64 {
        kept(0)
            .and_then(|kept| super::Holds::of_kept(&kept))
            .map_or(0, |holds| holds.live(now_us).0.total())
    }

    /// max_hold_us, the end of the hit's window (0: none) and max_holds.
    fn script_numbers(&self, window_end_us: u64) -> String {
        format!("{} {window_end_us} {}", self.max_hold_us, self.max_holds)
    }

    const PARTS: &'static [crate::modifier::KeptPart] = super::PARTS;

    fn parts_read(
        &self,
        lease: Option<crate::algorithm::LeaseCall>,
    ) -> smallvec::SmallVec<[u8; 2]> {
        super::parts_read(lease)
    }

    fn around(
        &self,
        turn: &crate::modifier::Turn<'_>,
        kept: &dyn Fn(u8) -> Option<crate::algorithm::Kept>,
        inner: &mut dyn FnMut() -> crate::algorithm::Outcome,
        leave: &mut dyn FnMut(crate::modifier::Left),
    ) -> crate::algorithm::Outcome {
        super::around(self, turn, kept, inner, leave)
    }

    /// A concurrency limit holds each request's leases until released already; a bucket
    /// must be able to hold the largest estimate.
    fn refused_on(&self, limit: &crate::modifier::Carrier<'_>) -> Result<(), Refusal> {
        if limit.leases {
            return Err(Refusal::new("reserve", "concurrency holds each request's leases until it releases them: there is no budget to reserve (reserve applies to the rate algorithms)"));
        }
        let largest = self.amount.min(self.cap(limit.requests_per_unit));
        if largest > limit.capacity {
            let reason = format!(
                "an estimate of {largest} could never be held by {}, which holds at most {} at once (its burst): raise burst or lower amount",
                limit.algorithm, limit.capacity
            );
            return Err(Refusal::new("reserve.amount", reason));
        }
        Ok(())
    }

    const TICKET: Option<crate::modifier::Ticket> = Some(super::TICKET);

    fn opening_cost(&self, own_cost: Option<u64>, requests_per_unit: u32) -> Option<u64> {
        Some(self.estimate(own_cost, requests_per_unit))
    }

    fn names_denial(&self) -> bool {
        true
    }

    const SERIES: &'static [crate::modifier::SeriesDef] = super::state::SERIES;

    fn meter() -> Option<Box<dyn crate::modifier::Meter>> {
        Some(Box::new(super::ReserveMeter))
    }

    fn chunk_refusal(&self) -> Option<&'static str> {
        Some("a reserved budget holds each request's estimate in the store: a replica cannot hold it")
    }

    fn parse(value: &serde_yaml::Value, period_us: u64) -> Result<Policy, Refusal> {
        Policy::parse(value, period_us)
    }

    fn shown(&self) -> String {
        format!(", reserving: {self}")
    }

    fn listed(&self) -> String {
        format!(
            ", reserve: amount {}, max_fraction {}, max_hold {}, max_holds {}",
            self.amount,
            self.fraction_text(),
            duration::human(self.max_hold_us),
            self.max_holds
        )
    }

    /// What a limit's reservation does, in words, with its bound (docs/budgets.md).
    fn explained(&self, limit: &crate::modifier::Described<'_>) -> String {
        let lapse = if limit.windowed {
            " or its window's end, whichever comes first"
        } else {
            ""
        };
        format!(
            "{}: a reserved budget of {} per {}: a request is admitted only while used + held + \
             its estimate fit; it holds {} (or the descriptor's own hits_addend), at most {}, \
             until its settle (a descriptor carrying {} with hits_addend the actual cost) or for \
             {}{lapse}, charging nothing if it lapses; a settle is never denied and charges \
             once; bound: the charged total stays within {} plus, for each request in flight \
             when the budget filled, its actual less its estimate",
            limit.rule,
            limit.requests_per_unit,
            limit.period,
            self.amount,
            self.cap(limit.requests_per_unit),
            super::SETTLE_KEY,
            duration::human(self.max_hold_us),
            limit.requests_per_unit,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<Policy, Refusal> {
        let value: serde_yaml::Value = serde_yaml::from_str(yaml).expect("YAML");
        Policy::parse(&value, 86_400_000_000)
    }

    #[test]
    fn defaults_fill_what_is_not_given_and_the_text_says_it() {
        let policy = parse("{amount: 4000}").expect("valid");
        assert_eq!(
            policy,
            Policy {
                amount: 4000,
                max_fraction_ppm: 1_000_000,
                max_hold_us: 600_000_000,
                max_holds: 1_000,
            }
        );
        let short = Policy::parse(
            &serde_yaml::from_str("{amount: 1}").expect("YAML"),
            60_000_000,
        )
        .expect("valid");
        assert_eq!(short.max_hold_us, 60_000_000, "held to the limit's period");
        let given = parse("{amount: 4000, max_fraction: 0.5, max_hold: 120s}").expect("valid");
        assert_eq!(
            given.to_string(),
            "each request holds 4000 or its own hits_addend (at most 0.5 of the limit) until it settles, for at most 2m"
        );
    }

    #[test]
    fn every_field_is_validated_under_its_own_key() {
        let refused = [
            ("{}", "reserve.amount"),
            ("[1]", "reserve"),
            ("{amount: 1, amont: 3}", "reserve"),
            ("{amount: 0}", "reserve.amount"),
            ("{amount: -4}", "reserve.amount"),
            ("{amount: 1.5}", "reserve.amount"),
            ("{amount: 1, max_fraction: 0}", "reserve.max_fraction"),
            ("{amount: 1, max_fraction: 1.5}", "reserve.max_fraction"),
            (
                "{amount: 1, max_fraction: 0.1234567}",
                "reserve.max_fraction",
            ),
            ("{amount: 1, max_fraction: half}", "reserve.max_fraction"),
            ("{amount: 1, max_hold: 0s}", "reserve.max_hold"),
            ("{amount: 1, max_hold: 2d}", "reserve.max_hold"),
            ("{amount: 1, max_hold: soon}", "reserve.max_hold"),
            ("{amount: 1, max_holds: 0}", "reserve.max_holds"),
            ("{amount: 1, max_holds: 10001}", "reserve.max_holds"),
        ];
        for (yaml, key) in refused {
            let refusal = parse(yaml).expect_err(yaml);
            assert_eq!(refusal.key, key, "{yaml}: {}", refusal.reason);
        }
    }

    #[test]
    fn the_estimate_is_the_clients_own_or_the_amount_held_to_the_fraction() {
        let policy = parse("{amount: 4000, max_fraction: 0.5}").expect("valid");
        assert_eq!(policy.estimate(None, 2_000_000), 4000);
        assert_eq!(policy.estimate(Some(0), 2_000_000), 4000, "a check");
        assert_eq!(policy.estimate(Some(700), 2_000_000), 700);
        assert_eq!(policy.estimate(Some(5_000_000), 2_000_000), 1_000_000);
        assert_eq!(policy.estimate(None, 6_000), 3_000);
        assert_eq!(policy.estimate(None, 1), 1, "never below 1");
    }
}
