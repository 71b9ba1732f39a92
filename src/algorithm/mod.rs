//! The rate limit algorithms as pure functions of (state, limit, cost, now): no clock, no I/O,
//! no async. Stores keep the state and call `check`; the Lua scripts of the Redis store must
//! reach the same decisions.

pub mod fixed_window;

use crate::limit::{Algorithm, Decision, Limit};

/// The stored state of one key, one variant per algorithm, so state written under one
/// algorithm is never read as another's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    FixedWindow(fixed_window::Window),
}

/// The result of one check: the decision, the state to store if it changed, and the time after
/// which the state no longer matters and may be dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    pub decision: Decision,
    pub new_state: Option<State>,
    pub expires_at_us: u64,
}

/// Charges `cost` against `limit` at `now_us`, given the key's current `state` (if any).
/// State of another algorithm's shape is treated as absent.
pub fn check(state: Option<&State>, limit: &Limit, cost: u64, now_us: u64) -> Outcome {
    match limit.algorithm {
        Algorithm::FixedWindow => {
            let window = state.map(|State::FixedWindow(window)| *window);
            let (decision, changed) = fixed_window::check(window, limit, cost, now_us);
            Outcome {
                decision,
                new_state: changed.map(State::FixedWindow),
                expires_at_us: fixed_window::window_end_us(limit, now_us),
            }
        }
    }
}
