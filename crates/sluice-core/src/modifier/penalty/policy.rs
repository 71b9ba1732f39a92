//! A limit's `penalty` setting as YAML gives it: when a client is denied `after` times
//! `within` a period it is blocked for `block`; each repeat offence while it is remembered
//! multiplies the block by `factor`, up to `max_block`; `forget_after` without a denial
//! forgets it. Read and validated here, each refusal naming its key.

use std::fmt;

use crate::algorithm::params::Refusal;
use crate::duration;
use crate::modifier::{duration_of, fixed_point, policy_map};

/// The most denials `after` may count: the strikes a client's record holds.
pub const MAX_AFTER: u64 = 100;
/// The longest duration a penalty may name: a year (blocks times the factor stay below 2^53
/// in milliseconds, where the Redis script's doubles are exact).
const MAX_DURATION_US: u64 = 365 * 86_400 * 1_000_000;
/// The largest factor, in thousandths.
const MAX_FACTOR_MILLI: u64 = 100_000;
/// `max_block` when not given: a day (or `block`, when that is longer).
const DEFAULT_MAX_BLOCK_US: u64 = 86_400 * 1_000_000;
/// `forget_after` when not given: a day (or `within`, when that is longer).
const DEFAULT_FORGET_US: u64 = 86_400 * 1_000_000;
/// `factor` when not given, in thousandths.
const DEFAULT_FACTOR_MILLI: u32 = 2_000;

/// The YAML keys of `penalty`.
pub const KEYS: [&str; 6] = [
    "after",
    "within",
    "block",
    "factor",
    "max_block",
    "forget_after",
];

/// A penalty: when, for how long, how it grows, when a client is forgotten. Blocks are whole
/// milliseconds (the escalation's arithmetic); the periods microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Policy {
    /// Denials within `within_us` that block the client.
    pub after: u32,
    pub within_us: u64,
    /// The first block.
    pub block_ms: u64,
    /// Each repeat offence's block: the last one times `factor_milli` / 1000.
    pub factor_milli: u32,
    pub max_block_ms: u64,
    /// A client denied nothing for this long (after its last block ended) is forgotten.
    pub forget_us: u64,
}

impl Policy {
    /// The policy `value` (a YAML map) gives a limit of period `period_us` (`within`'s
    /// default).
    pub fn parse(value: &serde_yaml::Value, period_us: u64) -> Result<Policy, Refusal> {
        let map = policy_map(value, "penalty", &KEYS)?;
        let get = |key: &str| map.get(key);
        let after = match get("after") {
            None => 1,
            Some(value) => match value.as_u64().filter(|n| (1..=MAX_AFTER).contains(n)) {
                Some(after) => u32::try_from(after).unwrap_or(1),
                None => {
                    let reason = format!("must be a whole number from 1 to {MAX_AFTER}");
                    return Err(Refusal::new("penalty.after", reason));
                }
            },
        };
        let duration_of = |value, key| duration_of(value, key, MAX_DURATION_US);
        let within_us = duration_of(get("within"), "penalty.within")?
            .unwrap_or_else(|| period_us.min(MAX_DURATION_US));
        let Some(block_us) = duration_of(get("block"), "penalty.block")? else {
            return Err(Refusal::new(
                "penalty.block",
                "is required: how long a client is blocked (1m, 30s, ...)",
            ));
        };
        let block_ms = whole_ms(block_us, "penalty.block")?;
        let factor_milli = match get("factor") {
            None => DEFAULT_FACTOR_MILLI,
            Some(value) => factor_of(value)?,
        };
        let max_block_us = duration_of(get("max_block"), "penalty.max_block")?
            .unwrap_or(DEFAULT_MAX_BLOCK_US.max(block_us));
        let max_block_ms = whole_ms(max_block_us, "penalty.max_block")?;
        not_shorter("penalty.max_block", max_block_us, ("block", block_us), "")?;
        let forget_us = duration_of(get("forget_after"), "penalty.forget_after")?
            .unwrap_or(DEFAULT_FORGET_US.max(within_us));
        let why = ": a client would be forgotten while its denials still count";
        not_shorter(
            "penalty.forget_after",
            forget_us,
            ("within", within_us),
            why,
        )?;
        Ok(Policy {
            after,
            within_us,
            block_ms,
            factor_milli,
            max_block_ms,
            forget_us,
        })
    }

    /// The block of offence `n` (1 the first) on its own: `block` times the factor n - 1
    /// times, each product rounded down to the millisecond and held to `max_block`.
    pub fn nth_block_ms(&self, n: u32) -> u64 {
        let mut block = self.block_ms.min(self.max_block_ms);
        for _ in 1..n {
            let next = self.next_block_ms(block);
            if next == block {
                break;
            }
            block = next;
        }
        block
    }

    /// The block after one of `last_ms`.
    pub fn next_block_ms(&self, last_ms: u64) -> u64 {
        (last_ms * u64::from(self.factor_milli) / 1000).min(self.max_block_ms)
    }

    /// `factor` as written (`2`, `1.5`).
    pub fn factor_text(&self) -> String {
        let (whole, milli) = (self.factor_milli / 1000, self.factor_milli % 1000);
        if milli == 0 {
            whole.to_string()
        } else {
            format!("{whole}.{milli:03}")
                .trim_end_matches('0')
                .to_string()
        }
    }
}

impl fmt::Display for Policy {
    /// `after 5 denials within 1m: blocked 1m, x2 each repeat up to 1h, forgotten after 1d`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let denials = if self.after == 1 { "denial" } else { "denials" };
        write!(
            f,
            "after {} {denials} within {}: blocked {}, x{} each repeat up to {}, forgotten after {} without a denial",
            self.after,
            duration::human(self.within_us),
            duration::human(self.block_ms * 1000),
            self.factor_text(),
            duration::human(self.max_block_ms * 1000),
            duration::human(self.forget_us),
        )
    }
}

/// Refuses `us` under `key` when it is shorter than the other setting's `us` (`name`),
/// saying so and `why`.
fn not_shorter(
    key: &'static str,
    us: u64,
    (name, other_us): (&str, u64),
    why: &str,
) -> Result<(), Refusal> {
    if us >= other_us {
        return Ok(());
    }
    let reason = format!(
        "{} is shorter than {name} ({}){why}",
        duration::human(us),
        duration::human(other_us)
    );
    Err(Refusal::new(key, reason))
}

/// `us` in whole milliseconds, refused when it has a fraction of one.
fn whole_ms(us: u64, key: &'static str) -> Result<u64, Refusal> {
    if us % 1000 == 0 {
        Ok(us / 1000)
    } else {
        Err(Refusal::new(key, "must be whole milliseconds"))
    }
}

/// `factor`: a number from 1 to 100 with at most three decimals, in thousandths.
fn factor_of(value: &serde_yaml::Value) -> Result<u32, Refusal> {
    fixed_point(value, 3)
        .filter(|milli| (1000..=MAX_FACTOR_MILLI).contains(milli))
        .and_then(|milli| u32::try_from(milli).ok())
        .ok_or_else(|| {
            Refusal::new(
                "penalty.factor",
                "must be a number from 1 to 100, at most three decimals (2, 1.5)",
            )
        })
}

impl crate::modifier::ModifierPolicy for Policy {
    /// after, within_us, block_ms, factor_milli, max_block_ms and forget_us.
    fn script_numbers(&self, _window_end_us: u64) -> String {
        format!(
            "{} {} {} {} {} {}",
            self.after,
            self.within_us,
            self.block_ms,
            self.factor_milli,
            self.max_block_ms,
            self.forget_us
        )
    }

    fn rules_cache(&self) -> bool {
        // A block never ends early, whatever any replica charges; other denials are strikes.
        true
    }

    fn lasting(&self, decision: &crate::algorithm::Decision) -> Option<crate::algorithm::Mark> {
        super::lasting(decision)
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

    fn said(decisions: &[crate::modifier::Said<'_>]) -> Option<crate::modifier::MetaField> {
        super::said::said(decisions)
    }

    fn beside(&self) -> Option<String> {
        Some(self.to_string())
    }

    fn event(said: &crate::modifier::MetaField) -> Option<crate::modifier::Event> {
        super::said::event(said)
    }

    const SERIES: &'static [crate::modifier::SeriesDef] = super::said::SERIES;

    fn meter() -> Option<Box<dyn crate::modifier::Meter>> {
        Some(Box::<super::PenaltyMeter>::default())
    }

    fn chunk_refusal(&self) -> Option<&'static str> {
        Some("a penalty counts each denial in the store as a strike: denials answered by a replica would not count")
    }

    fn parse(value: &serde_yaml::Value, period_us: u64) -> Result<Policy, Refusal> {
        Policy::parse(value, period_us)
    }

    fn shown(&self) -> String {
        ", with a penalty".to_string()
    }

    /// What a limit's penalty does, in words, with its first blocks.
    fn explained(&self, limit: &crate::modifier::Described<'_>) -> String {
        use duration::human;
        let mut blocks: Vec<String> = Vec::new();
        for n in 1..=6 {
            let block = human(self.nth_block_ms(n) * 1000);
            if blocks.last() == Some(&block) {
                break;
            }
            blocks.push(block);
        }
        let more = if self.nth_block_ms(7) > self.nth_block_ms(6) {
            ", ..."
        } else {
            ""
        };
        let times = match self.after {
            1 => "once".to_string(),
            n => format!("{n} times"),
        };
        let enforced = if limit.shadow_mode {
            "in shadow mode, counted and reported, never enforced"
        } else {
            "every request OVER_LIMIT until the block ends, the limit not charged"
        };
        format!(
            "{}: {}: a client denied {times} within {} is blocked: {enforced}; blocks \
             {}{more} (x{} each repeat, {} at most); forgotten after {} without a denial; not \
             applied to RLQS buckets",
            limit.rule,
            limit.limit,
            human(self.within_us),
            blocks.join(", "),
            self.factor_text(),
            human(self.max_block_ms * 1000),
            human(self.forget_us),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<Policy, Refusal> {
        let value: serde_yaml::Value = serde_yaml::from_str(yaml).expect("YAML");
        Policy::parse(&value, 60_000_000)
    }

    #[test]
    fn defaults_fill_what_is_not_given() {
        let policy = parse("{block: 1m}").expect("valid");
        assert_eq!(
            policy,
            Policy {
                after: 1,
                within_us: 60_000_000,
                block_ms: 60_000,
                factor_milli: 2_000,
                max_block_ms: 86_400_000,
                forget_us: 86_400_000_000,
            }
        );
        assert_eq!(
            policy.to_string(),
            "after 1 denial within 1m: blocked 1m, x2 each repeat up to 1d, forgotten after 1d without a denial"
        );
    }

    #[test]
    fn every_field_is_validated_under_its_own_key() {
        let refused = [
            ("{}", "penalty.block"),
            ("[1]", "penalty"),
            ("{block: 1m, afterr: 3}", "penalty"),
            ("{block: 1m, after: 0}", "penalty.after"),
            ("{block: 1m, after: 101}", "penalty.after"),
            ("{block: 1m, within: 0s}", "penalty.within"),
            ("{block: 1m, within: soon}", "penalty.within"),
            ("{block: 1500us}", "penalty.block"),
            ("{block: 400d}", "penalty.block"),
            ("{block: 1m, factor: 0.5}", "penalty.factor"),
            ("{block: 1m, factor: 1.2345}", "penalty.factor"),
            ("{block: 1m, factor: 101}", "penalty.factor"),
            ("{block: 1h, max_block: 1m}", "penalty.max_block"),
            (
                "{block: 1m, within: 1h, forget_after: 1m}",
                "penalty.forget_after",
            ),
        ];
        for (yaml, key) in refused {
            let refusal = parse(yaml).expect_err(yaml);
            assert_eq!(refusal.key, key, "{yaml}: {}", refusal.reason);
        }
    }

    #[test]
    fn blocks_grow_by_the_factor_up_to_the_maximum() {
        let policy = parse("{block: 1m, factor: 1.5, max_block: 5m}").expect("valid");
        assert_eq!(policy.factor_text(), "1.5");
        let blocks: Vec<u64> = (1..=6).map(|n| policy.nth_block_ms(n) / 1000).collect();
        assert_eq!(blocks, [60, 90, 135, 202, 300, 300]);
        let flat = parse("{block: 2m, factor: 1}").expect("valid");
        assert_eq!(flat.nth_block_ms(50), 120_000);
    }
}
