//! Reserved budgets, pure: a request holds an estimate of its cost against its limit while it
//! runs, and settles the actual cost when it ends (docs/budgets.md). The engine asks `open` for
//! a request's call and `settle` for the call that carries its token; `lua/reserve.lua` is the
//! Redis copy, held to this one by the contract test.
//!
//! Rules. An opening is admitted if and only if the limit admits the holds still live plus the
//! estimate (used + held + estimate fits); it then holds the estimate under the request's
//! token until the earlier of `max_hold` and its window's end, and charges the limit nothing
//! (a token opening twice on one key adds to its hold, which lapses at the later end).
//! What remains is net of every hold. A settle is never denied: it drops the token's hold (if
//! one is live) and charges the actual cost to the window current then, past the limit if need
//! be; the token is remembered as settled for as long as its hold could have lived (`max_hold`
//! from now when it had none), and a settle of a remembered token charges nothing. A hold
//! that lapses charges nothing.

pub mod policy;
mod state;

use smallvec::{smallvec, SmallVec};

use crate::algorithm::{self, Counting, Decision, Kept, LeaseCall, Mark, Outcome, Rate, State};
use crate::modifier::{KeptPart, Left, Turn};
pub use policy::Policy;
pub use state::{
    Call, Hold, Holds, ReserveMeter, Reserved, SettleMark, ESTIMATE_ERROR, HOLDS, HOLD_KEY,
    SETTLED, SETTLE_KEY, TICKET,
};

/// The reservation's YAML key, which names its notes on decisions.
pub const KEY: &str = "reserve";

/// The parts of state a budget keeps: its holds, and a mark per settled token.
const PARTS: &[KeptPart] = &[
    KeptPart {
        name: HOLDS,
        per_token: false,
        reset: false,
    },
    KeptPart {
        name: SETTLED,
        per_token: true,
        reset: false,
    },
];

/// The parts a hit making `lease` reads: the holds, and for a settle its token's mark.
fn parts_read(lease: Option<LeaseCall>) -> SmallVec<[u8; 2]> {
    match lease {
        Some(LeaseCall::Release(_)) => smallvec![0, 1],
        _ => smallvec![0],
    }
}

/// Decides `turn`: an opening (`LeaseCall::Acquire`) or a settle (`LeaseCall::Release`) of
/// its token, in place of the limit's own decision (`inner`, for a hit of neither): the
/// engine's hook (`ModifierPolicy::around`). What it leaves stands as the limit's charge.
fn around(
    policy: &Policy,
    turn: &Turn<'_>,
    kept: &dyn Fn(u8) -> Option<Kept>,
    inner: &mut dyn FnMut() -> Outcome,
    leave: &mut dyn FnMut(Left),
) -> Outcome {
    let Some(call) = turn.lease else {
        return inner();
    };
    let budget = Budget {
        counting: turn.counting,
        rate: turn.rate,
        window_end_us: turn.window_end_us,
        cost: turn.cost,
        headroom: turn.headroom,
    };
    let holds = kept(0).and_then(|kept| Holds::of_kept(&kept));
    let reservation = match call {
        LeaseCall::Release(token) => {
            let settled = kept(1).and_then(|kept| SettleMark::of_kept(&kept));
            let stored = (turn.state, holds.as_ref(), settled.as_ref());
            settle(policy, &budget, token, stored, turn.now_us)
        }
        LeaseCall::Acquire(token) => open(
            policy,
            &budget,
            token,
            turn.state,
            holds.as_ref(),
            turn.now_us,
        ),
    };
    if let Some((holds, expires_at_us)) = reservation.holds {
        leave(Left {
            part: 0,
            kept: Kept::of(HOLDS, &holds),
            expires_at_us,
            always: false,
        });
    }
    if let Some((settled, expires_at_us)) = reservation.settled {
        leave(Left {
            part: 1,
            kept: Kept::of(SETTLED, &settled),
            expires_at_us,
            always: false,
        });
    }
    Outcome {
        decision: reservation.decision,
        new_state: reservation.limit,
    }
}

/// What a call on a reserved budget decided, and the states to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reservation {
    pub decision: Decision,
    /// The limit's state after a settle's charge.
    pub limit: Option<(State, u64)>,
    /// The holds after the call (with the time the last one lapses).
    pub holds: Option<(Holds, u64)>,
    /// The token's settled mark (with the time it is forgotten).
    pub settled: Option<(SettleMark, u64)>,
}

/// The hold id of a value a request named its hold by, or a settle sent back: a token sluice
/// issued (16 hex digits) is itself; any other value is hashed (FNV-1a, the same on every
/// replica and version).
pub fn hold_id(value: &str) -> u64 {
    if let Some(token) = crate::lease::parse_token(value) {
        return token;
    }
    value.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// One call on a reserved budget as the rules see it: the limit's algorithm and rate, the end
/// of the window the call is in (for an algorithm that has windows), and the call's cost (an
/// opening's estimate, a settle's actual). The engine makes it from a hit.
#[derive(Debug, Clone, Copy)]
pub struct Budget<'a> {
    pub counting: &'a Counting,
    pub rate: Rate,
    pub window_end_us: Option<u64>,
    pub cost: u64,
    /// What an opening must leave unused of the limit (`ModifierPolicy::headroom`).
    pub headroom: u64,
}

/// When a hold taken at `now_us` lapses: `max_hold` later, or its window's end when sooner;
/// a window from the first hit ends where its counter's does, which the limit's decision
/// (`decided`, at the opening) tells.
fn lapse_at(policy: &Policy, budget: &Budget<'_>, decided: &Decision, now_us: u64) -> u64 {
    let held = now_us.saturating_add(policy.max_hold_us);
    match budget.window_end_us {
        Some(end) => held.min(end),
        None if budget.counting.from_first_hit() => {
            held.min(now_us.saturating_add(decided.reset_after_us))
        }
        None => held,
    }
}

/// The limit's decision of `cost` on `state`, its state left as it is (a limit that takes
/// debt answers a denial as its debt would).
/// An opening's asks leave `budget.headroom` unused; a settle's (`headroom` 0) none.
fn ask(
    budget: &Budget<'_>,
    state: Option<&State>,
    (cost, headroom): (u64, u64),
    now_us: u64,
) -> Decision {
    let rate = budget.rate.with_denied_charged(false);
    algorithm::decide_within(
        budget.counting,
        state,
        &rate,
        (cost, headroom),
        now_us,
        None,
    )
    .decision
}

/// Opens a hold of `budget.cost` (the estimate) under `token` at `now_us`, on the limit's `state`
/// and the key's `holds`.
pub fn open(
    policy: &Policy,
    budget: &Budget<'_>,
    token: u64,
    state: Option<&State>,
    holds: Option<&Holds>,
    now_us: u64,
) -> Reservation {
    let (mut live, lapsed, lapsed_amount) = holds.map(|h| h.live(now_us)).unwrap_or_default();
    let held = live.total();
    let estimate = budget.cost;
    let holding = live.0.iter().any(|hold| hold.token == token);
    if !holding && live.0.len() >= policy.max_holds as usize {
        return Reservation {
            decision: too_many_holds(budget, state, &live, now_us),
            limit: None,
            holds: None,
            settled: None,
        };
    }
    let decision = ask(
        budget,
        state,
        (held.saturating_add(estimate), budget.headroom),
        now_us,
    );
    if !decision.admitted {
        let decision = Decision {
            // What remained before it, net of the holds, as every denial reports.
            remaining: remaining_net(decision.remaining, held),
            ..decision
        };
        return Reservation {
            decision,
            limit: None,
            holds: None,
            settled: None,
        };
    }
    let lapses = lapse_at(policy, budget, &decision, now_us);
    // A token holds once per key: a second opening of it (two descriptors of one request
    // on one key) adds to its hold.
    match live.0.iter_mut().find(|hold| hold.token == token) {
        Some(hold) => {
            hold.amount = hold.amount.saturating_add(estimate);
            hold.expires_us = hold.expires_us.max(lapses);
        }
        None => live.0.push(Hold {
            token,
            amount: estimate,
            expires_us: lapses,
        }),
    }
    let expires = live.expires_at_us();
    let decision = Decision {
        mark: Mark::Noted(
            Reserved {
                call: Call::Opened,
                held: live.total(),
                estimate,
                lapsed,
                lapsed_amount,
            }
            .noted(),
        ),
        ..decision
    };
    Reservation {
        decision,
        limit: None,
        holds: Some((live, expires)),
        settled: None,
    }
}

/// Settles `token` with the actual cost `budget.cost` at `now_us`: drops its hold, charges the
/// actual unless the token was `settled` before, and remembers it.
pub fn settle(
    policy: &Policy,
    budget: &Budget<'_>,
    token: u64,
    (state, holds, settled): (Option<&State>, Option<&Holds>, Option<&SettleMark>),
    now_us: u64,
) -> Reservation {
    let (mut live, lapsed, lapsed_amount) = holds.map(|h| h.live(now_us)).unwrap_or_default();
    if settled.is_some() {
        let decision = after_charge(budget, state, live.total(), now_us);
        let mark = Reserved {
            call: Call::Duplicate,
            held: live.total(),
            estimate: 0,
            lapsed: 0,
            lapsed_amount: 0,
        };
        return Reservation {
            decision: Decision {
                mark: Mark::Noted(mark.noted()),
                ..decision
            },
            limit: None,
            holds: None,
            settled: None,
        };
    }
    let hold = live.take(token);
    let rate = budget.rate.with_denied_charged(true);
    let charged = algorithm::decide(budget.counting, state, &rate, budget.cost, now_us, None);
    let limit = charged.new_state;
    let after = limit.as_ref().map(|(s, _)| s).or(state);
    let decision = after_charge(budget, after, live.total(), now_us);
    let remembered_until = match hold {
        Some(hold) => hold.expires_us.max(now_us + 1),
        None => now_us.saturating_add(policy.max_hold_us),
    };
    let mark = Reserved {
        call: if hold.is_some() {
            Call::Settled
        } else {
            Call::Unknown
        },
        held: live.total(),
        estimate: hold.map_or(0, |h| h.amount),
        lapsed,
        lapsed_amount,
    };
    let holds = (hold.is_some() || lapsed > 0).then(|| {
        let expires = live.expires_at_us();
        (live, expires)
    });
    Reservation {
        decision: Decision {
            mark: Mark::Noted(mark.noted()),
            ..decision
        },
        limit,
        holds,
        settled: Some((SettleMark(budget.cost), remembered_until)),
    }
}

/// The denial of an opening on a key whose holds are `max_holds` already: what remains net
/// of them, and a retry when the first of them lapses.
fn too_many_holds(
    budget: &Budget<'_>,
    state: Option<&State>,
    live: &Holds,
    now_us: u64,
) -> Decision {
    let report = ask(budget, state, (0, budget.headroom), now_us);
    let first_lapse = live
        .0
        .iter()
        .map(|hold| hold.expires_us)
        .min()
        .unwrap_or(now_us);
    Decision {
        admitted: false,
        remaining: remaining_net(report.remaining, live.total()),
        retry_after_us: first_lapse.saturating_sub(now_us),
        ..report
    }
}

/// A settle's answer: admitted, with what remains on `state` net of `held`.
fn after_charge(budget: &Budget<'_>, state: Option<&State>, held: u64, now_us: u64) -> Decision {
    let report = ask(budget, state, (0, 0), now_us);
    Decision {
        admitted: true,
        remaining: remaining_net(report.remaining, held),
        retry_after_us: 0,
        ..report
    }
}

/// `remaining` less what is held.
fn remaining_net(remaining: u32, held: u64) -> u32 {
    u32::try_from(u64::from(remaining).saturating_sub(held)).unwrap_or(0)
}

#[cfg(test)]
mod tests;
