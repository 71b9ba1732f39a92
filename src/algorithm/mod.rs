//! The rate limit algorithms as pure functions of (state, limit, cost, now): no clock, no I/O,
//! no async. Stores keep the state and call `check`; the Lua scripts of the Redis store must
//! reach the same decisions. Common rules: a denied hit and a hit of cost 0 change no state; a
//! cost that can never fit is denied with one period as its retry time; `requests_per_unit: 0`
//! admits only cost 0, whatever the burst.

pub mod fixed_window;
pub mod leaky_bucket;
pub mod sliding_window_counter;
pub mod sliding_window_log;
pub mod token_bucket;

use crate::limit::{Algorithm, Decision, Limit};

/// The stored state of one key, one variant per algorithm, so state written under one
/// algorithm is never read as another's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    FixedWindow(fixed_window::Window),
    SlidingWindowLog(sliding_window_log::Log),
    SlidingWindowCounter(sliding_window_counter::Counts),
    // The buckets hold 128-bit values: boxed, so that every state (and the memory store's
    // entries, one per key) stays 32 bytes and 8-byte aligned.
    TokenBucket(Box<token_bucket::Bucket>),
    LeakyBucket(Box<leaky_bucket::Tat>),
}

/// The result of one check: the decision, and the state to store (with the time after which
/// it no longer matters) when it changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub decision: Decision,
    pub new_state: Option<(State, u64)>,
}

/// Charges `cost` against `limit` at `now_us`, given the key's current `state` (if any).
/// State of another algorithm's shape is treated as absent.
pub fn check(state: Option<&State>, limit: &Limit, cost: u64, now_us: u64) -> Outcome {
    if limit.requests_per_unit == 0 && limit.algorithm != Algorithm::FixedWindow {
        return outcome(blocked(limit, cost), None);
    }
    match limit.algorithm {
        Algorithm::FixedWindow => {
            let stored = match state {
                Some(State::FixedWindow(window)) => Some(*window),
                _ => None,
            };
            let (decision, changed) = fixed_window::check(stored, limit, cost, now_us);
            let period = limit.period_us();
            outcome(
                decision,
                changed.map(|w| (State::FixedWindow(w), w.start_us + period)),
            )
        }
        Algorithm::SlidingWindowLog => {
            let stored = match state {
                Some(State::SlidingWindowLog(log)) => Some(log),
                _ => None,
            };
            let (decision, changed) = sliding_window_log::check(stored, limit, cost, now_us);
            let changed = changed.map(|log| {
                let expires = sliding_window_log::expires_at_us(&log, limit);
                (State::SlidingWindowLog(log), expires)
            });
            outcome(decision, changed)
        }
        Algorithm::SlidingWindowCounter => {
            let stored = match state {
                Some(State::SlidingWindowCounter(counts)) => Some(*counts),
                _ => None,
            };
            let (decision, changed) = sliding_window_counter::check(stored, limit, cost, now_us);
            let changed = changed.map(|c| {
                let expires = sliding_window_counter::expires_at_us(&c, limit);
                (State::SlidingWindowCounter(c), expires)
            });
            outcome(decision, changed)
        }
        Algorithm::TokenBucket => {
            let stored = match state {
                Some(State::TokenBucket(bucket)) => Some(**bucket),
                _ => None,
            };
            let (decision, changed) = token_bucket::check(stored, limit, cost, now_us);
            let changed = changed.map(|b| {
                (
                    State::TokenBucket(Box::new(b)),
                    token_bucket::expires_at_us(&b, limit),
                )
            });
            outcome(decision, changed)
        }
        Algorithm::LeakyBucket => {
            let stored = match state {
                Some(State::LeakyBucket(tat)) => Some(**tat),
                _ => None,
            };
            let (decision, changed) = leaky_bucket::check(stored, limit, cost, now_us);
            let changed = changed.map(|t| {
                (
                    State::LeakyBucket(Box::new(t)),
                    leaky_bucket::expires_at_us(&t, limit),
                )
            });
            outcome(decision, changed)
        }
    }
}

/// `count` as a `remaining` field: saturated to u32 (limits are u32, so only overflowing
/// intermediate values can exceed it).
pub(crate) fn remaining(count: u128) -> u32 {
    u32::try_from(count).unwrap_or(u32::MAX)
}

/// Microseconds until `scaled` units drain at `per_us` units per microsecond, rounded up; 0
/// when nothing is owed, one `period_us` when nothing drains.
pub(crate) fn wait_us(scaled: u128, per_us: u128, period_us: u64) -> u64 {
    if scaled == 0 {
        return 0;
    }
    if per_us == 0 {
        return period_us;
    }
    u64::try_from(scaled.div_ceil(per_us)).unwrap_or(u64::MAX)
}

/// `requests_per_unit: 0`: only cost 0 passes, and nothing ever will. (The fixed window gets
/// this from its own rule, with the reference server's reset time: the window's end.)
fn blocked(limit: &Limit, cost: u64) -> Decision {
    Decision {
        admitted: cost == 0,
        remaining: 0,
        reset_after_us: 0,
        retry_after_us: if cost == 0 { 0 } else { limit.period_us() },
    }
}

fn outcome(decision: Decision, new_state: Option<(State, u64)>) -> Outcome {
    Outcome {
        decision,
        new_state,
    }
}

/// Helpers for the algorithms' vector tables.
#[cfg(test)]
pub(crate) mod vectors {
    use super::*;
    use crate::limit::Unit;

    /// A limit of `requests` per second counted by `algorithm`, with `burst`.
    pub fn per_second(algorithm: Algorithm, requests: u32, burst: Option<u32>) -> Limit {
        Limit {
            algorithm,
            burst,
            ..Limit::fixed_window(requests, Unit::Second)
        }
    }

    /// Runs (time in µs, cost) on a fresh key; returns (admitted, remaining, reset, retry).
    pub fn run(limit: Limit, hits: &[(u64, u64)]) -> Vec<(bool, u32, u64, u64)> {
        let mut state: Option<State> = None;
        hits.iter()
            .map(|&(now, cost)| {
                let outcome = check(state.as_ref(), &limit, cost, now);
                if let Some((new_state, _)) = outcome.new_state {
                    state = Some(new_state);
                }
                let d = outcome.decision;
                (d.admitted, d.remaining, d.reset_after_us, d.retry_after_us)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limit::Unit;

    #[test]
    fn a_zero_limit_blocks_every_algorithm_whatever_the_burst() {
        for algorithm in Algorithm::ALL {
            let limit = Limit {
                algorithm,
                burst: algorithm.has_burst().then_some(5),
                ..Limit::fixed_window(0, Unit::Second)
            };
            let mut state = None;
            for now in [0, 1, 5_000_000] {
                let outcome = check(state.as_ref(), &limit, 1, now);
                assert!(!outcome.decision.admitted, "{algorithm} at {now}");
                assert!(
                    check(state.as_ref(), &limit, 0, now).decision.admitted,
                    "{algorithm}"
                );
                state = outcome.new_state.map(|(s, _)| s);
            }
        }
    }
}
