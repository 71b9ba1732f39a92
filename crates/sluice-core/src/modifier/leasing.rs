//! Budget leasing, as a limit's `budget_leasing` gives it: a replica takes a chunk of a hot
//! key's budget from the shared store in one call (charged there up front) and admits from it
//! locally until it is spent, the window moves, or the key goes quiet for `max_hold` (then
//! what is unspent is given back). The rules that follow, and the bound they keep:
//!
//! - A chunk is charged to the key's state before any request spends it, so the store's count
//!   is never below what was admitted: a window never admits more than its limit, whatever
//!   the number of replicas.
//! - A replica holds at most `max_chunk` unspent per key; a request is denied while budget
//!   remains only when the replicas' unspent chunks stand in its way, so the budget wrongly
//!   denied is at most replicas x `max_chunk`.
//! - The chunk adapts to the key's rate at the replica: half of the hits it saw for the key in
//!   the last `max_hold`, held to `max_chunk`. A key seen fewer than 4 times in the last
//!   `max_hold` takes no chunk: each of its hits goes to the store, exactly.
//!
//! Leasing runs in the store layer (`sluice-store`'s `leasing`); what is here is the policy and
//! the arithmetic both sides of it share.

use std::fmt;

use crate::algorithm::params::Refusal;
use crate::duration;
use crate::modifier::{duration_of, policy_map, Described, ModifierPolicy};

/// The YAML keys of `budget_leasing`.
pub const KEYS: [&str; 2] = ["max_chunk", "max_hold"];

/// `max_hold` when not given: one second.
const DEFAULT_MAX_HOLD_US: u64 = 1_000_000;
/// The longest `max_hold`: a minute (an idle replica gives its chunk back by then).
const MAX_HOLD_US: u64 = 60 * 1_000_000;
/// The smallest chunk worth a lease: below it, the exact path.
pub const MIN_CHUNK: u64 = 2;

/// How a limit is leased to replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Policy {
    /// The most one replica takes of a key at once: the bound on what it holds unspent.
    pub max_chunk: u32,
    /// A chunk not spent within this long of its last take is given back; the rate a chunk
    /// is sized by is counted over it.
    pub max_hold_us: u64,
}

impl Policy {
    /// The chunk a replica that saw a key `seen` times in the last `max_hold` takes: half of
    /// them, held to `max_chunk`; 0 (the exact path) below two.
    pub fn chunk(&self, seen: u64) -> u64 {
        let chunk = (seen / 2).min(u64::from(self.max_chunk));
        if chunk < MIN_CHUNK {
            0
        } else {
            chunk
        }
    }

    /// A policy from its two settings given apart (a command line's), validated as
    /// `budget_leasing` is: `max_hold` a duration (`1s`, `500ms`).
    pub fn of(max_chunk: u64, max_hold: &str) -> Result<Policy, Refusal> {
        let map = serde_yaml::Mapping::from_iter([
            ("max_chunk".into(), max_chunk.into()),
            ("max_hold".into(), max_hold.into()),
        ]);
        Policy::parse(&serde_yaml::Value::Mapping(map), 0)
    }

    /// The bound, as `check-config` and `/rlconfig` state it.
    pub fn bound(&self) -> String {
        format!(
            "never admits more than the limit; denies at most replicas x {} while budget remains",
            self.max_chunk
        )
    }
}

impl super::Modifiers {
    /// The limit's leasing, unless another of its modifiers keeps the limit's budget in the
    /// store (one added at a request too: Kuadrant's calls hold their estimates there).
    pub fn leasing(&self) -> Option<Policy> {
        self.budget_leasing
            .filter(|_| self.chunk_refusal().is_none())
    }
}

impl ModifierPolicy for Policy {
    fn parse(value: &serde_yaml::Value, _period_us: u64) -> Result<Policy, Refusal> {
        let map = policy_map(value, "budget_leasing", &KEYS)?;
        let max_chunk = match map.get("max_chunk") {
            None => {
                return Err(Refusal::new(
                    "budget_leasing.max_chunk",
                    "is required: the most one replica takes at once, which bounds what leasing can deny",
                ))
            }
            Some(value) => value
                .as_u64()
                .filter(|n| *n >= MIN_CHUNK)
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| {
                    Refusal::new(
                        "budget_leasing.max_chunk",
                        format!("must be a whole number from {MIN_CHUNK} to {}", u32::MAX),
                    )
                })?,
        };
        let max_hold_us = duration_of(map.get("max_hold"), "budget_leasing.max_hold", MAX_HOLD_US)?
            .unwrap_or(DEFAULT_MAX_HOLD_US);
        Ok(Policy {
            max_chunk,
            max_hold_us,
        })
    }

    fn listed(&self) -> String {
        format!(
            ", budget_leasing: max_chunk {}, max_hold {} (bound: {})",
            self.max_chunk,
            crate::duration::human(self.max_hold_us),
            self.bound()
        )
    }

    /// What a leased limit does, in words, with its bound (docs/hot-keys.md).
    fn explained(&self, limit: &Described<'_>) -> String {
        let hold = crate::duration::human(self.max_hold_us);
        format!(
            "{}: leased on Redis: each replica takes chunks of the budget (at most {}, sized by \
             the key's rate at it; a key seen fewer than 4 times in the last {hold} keeps the \
             exact path) and admits from them without a call; a chunk unused for {hold} is \
             given back; bound: a window never admits more than {}, and at most replicas x {} \
             is denied while budget remains",
            limit.rule, self.max_chunk, limit.requests_per_unit, self.max_chunk,
        )
    }

    fn shown(&self) -> String {
        format!(", {self}")
    }
}

impl fmt::Display for Policy {
    /// `leased in chunks of at most 50, given back after 1s idle: never admits more ...`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "leased in chunks of at most {}, given back after {} idle: {}",
            self.max_chunk,
            duration::human(self.max_hold_us),
            self.bound()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(yaml: &str) -> Result<Policy, Refusal> {
        crate::modifier::parsed(yaml)
    }

    #[test]
    fn chunks_follow_the_rate_up_to_the_most_and_skip_cold_keys() {
        let leasing = policy("{max_chunk: 50}").expect("valid");
        assert_eq!(leasing.max_hold_us, 1_000_000);
        assert_eq!(leasing.chunk(0), 0);
        assert_eq!(
            leasing.chunk(3),
            0,
            "a key seen 3 times a second stays exact"
        );
        assert_eq!(leasing.chunk(4), 2);
        assert_eq!(leasing.chunk(60), 30);
        assert_eq!(leasing.chunk(1_000_000), 50);
    }

    #[test]
    fn a_policy_without_its_bound_or_with_unknown_keys_is_refused() {
        let refused = |yaml: &str| policy(yaml).err().map(|r| (r.key, r.reason));
        let (key, reason) = refused("{max_hold: 2s}").expect("refused");
        assert_eq!(key, "budget_leasing.max_chunk");
        assert!(reason.contains("required"), "{reason}");
        assert_eq!(
            refused("{max_chunk: 1}").map(|r| r.0),
            Some("budget_leasing.max_chunk")
        );
        assert_eq!(
            refused("{max_chunk: 5, chunk: 2}").map(|r| r.0),
            Some("budget_leasing")
        );
        assert_eq!(
            refused("{max_chunk: 5, max_hold: 2h}").map(|r| r.0),
            Some("budget_leasing.max_hold")
        );
        assert_eq!(
            policy("{max_chunk: 5, max_hold: 250ms}")
                .map(|p| p.max_hold_us)
                .ok(),
            Some(250_000)
        );
    }
}
