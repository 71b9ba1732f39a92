//! Penalties, pure: a client (a limit's key) that its limit keeps denying is blocked, for
//! longer at each repeat offence. What is kept per client (`Record`), what a block answers,
//! which denials count (`is_violation`), and what a counted denial does (`strike`). The
//! engine asks `decide` around the limit's own decision; `lua/penalty.lua` is the Redis
//! copy, held to this one by the contract test.
//!
//! Rules. A blocked client is denied until its block ends, whatever it asks (cost 0 too),
//! and its limit is not touched; a release of leases is never blocked. Otherwise the limit
//! decides; a denial by it is a strike unless it was charged while room remained (a cost
//! reported after the response landing in debt). `after` strikes within `within` are an
//! offence: the client is blocked for `block` (the first), or the last block times `factor`
//! (held to `max_block`), and its strikes start again. A client is remembered `forget_after`
//! past its last strike or block end (only `within` while it has no offence): after that its
//! next offence is a first one again.

pub mod policy;
mod said;
mod state;

use smallvec::{smallvec, SmallVec};

use crate::algorithm::{Decision, Kept, LeaseCall, Mark, Outcome};
use crate::modifier::{KeptPart, Left, Turn};
pub use policy::Policy;
pub use said::{PenaltyMeter, METADATA_KEY};
pub use state::{Penalized, Record, PART};

/// The penalty's YAML key, which names its notes on decisions.
pub const KEY: &str = "penalty";

/// The one part of state a penalty keeps: its record of the client.
const PARTS: &[KeptPart] = &[KeptPart {
    name: PART,
    per_token: false,
    reset: true,
}];

/// The parts a hit making `lease` reads: the record, unless it releases leases (never
/// blocked).
fn parts_read(lease: Option<LeaseCall>) -> SmallVec<[u8; 2]> {
    match lease {
        Some(LeaseCall::Release(_)) => SmallVec::new(),
        _ => smallvec![0],
    }
}

/// The mark a remembered copy of `decision` carries when it is a block (which denies every
/// cost until it ends): the block, not imposed by the copy.
fn lasting(decision: &Decision) -> Option<Mark> {
    let penalized = Penalized::of(decision);
    (penalized.until_us > 0).then(|| {
        Mark::Noted(
            Penalized {
                imposed: false,
                ..penalized
            }
            .noted(),
        )
    })
}

/// Decides `turn` around its limit's decision (`inner`): the engine's hook
/// (`ModifierPolicy::around`). The record struck is left to stand whatever the request's
/// fate.
fn around(
    policy: &Policy,
    turn: &Turn<'_>,
    kept: &dyn Fn(u8) -> Option<Kept>,
    inner: &mut dyn FnMut() -> Outcome,
    leave: &mut dyn FnMut(Left),
) -> Outcome {
    if matches!(turn.lease, Some(LeaseCall::Release(_))) {
        return inner();
    }
    let record = kept(0).and_then(|kept| Record::of_kept(&kept));
    let (outcome, next) = decide(policy, record.as_ref(), turn.now_us, inner);
    if let Some(next) = next {
        leave(Left {
            part: 0,
            expires_at_us: next.remembered_until_us,
            kept: next.kept(),
            always: true,
        });
    }
    outcome
}

/// The record as it reads at `now_us`: absent once forgotten.
fn live(record: Option<&Record>, now_us: u64) -> Option<&Record> {
    record.filter(|r| r.remembered(now_us))
}

/// The answer to a client blocked at `now_us`, if it is.
pub fn blocked(record: Option<&Record>, now_us: u64) -> Option<Decision> {
    let record = live(record, now_us).filter(|r| r.blocked_until_us > now_us)?;
    Some(block_decision(record, now_us, false))
}

/// The denial of a block: nothing remains, and a retry waits for its end.
fn block_decision(record: &Record, now_us: u64, imposed: bool) -> Decision {
    let wait = record.blocked_until_us - now_us;
    Decision {
        admitted: false,
        remaining: 0,
        reset_after_us: wait,
        retry_after_us: wait,
        mark: Mark::Noted(
            Penalized {
                until_us: record.blocked_until_us,
                offence: record.offences,
                imposed,
            }
            .noted(),
        ),
        ..Decision::default()
    }
}

/// Whether the limit's `decision` is a strike: a denial, unless the hit was `charged` while
/// something remained (a report landing in debt is not a violation of its own).
pub fn is_violation(decision: &Decision, charged: bool) -> bool {
    let report_into_debt = charged && decision.remaining > 0;
    !(decision.admitted || report_into_debt)
}

/// The record after a strike at `now_us`, and whether it imposed a block.
pub fn strike(policy: &Policy, record: Option<&Record>, now_us: u64) -> (Record, bool) {
    let mut next = live(record, now_us).cloned().unwrap_or_default();
    next.strikes
        .retain(|&at| now_us.saturating_sub(at) < policy.within_us);
    next.strikes.push(now_us);
    if next.strikes.len() >= policy.after as usize {
        next.offences += 1;
        let block_ms = if next.offences == 1 {
            policy.block_ms
        } else {
            policy.next_block_ms(next.last_block_ms)
        };
        next.last_block_ms = block_ms;
        next.blocked_until_us = now_us + block_ms * 1000;
        next.remembered_until_us = next.blocked_until_us + policy.forget_us;
        next.strikes.clear();
        return (next, true);
    }
    let kept = policy.after as usize - 1;
    if next.strikes.len() > kept {
        next.strikes.drain(..next.strikes.len() - kept);
    }
    next.remembered_until_us = now_us
        + if next.offences > 0 {
            policy.forget_us
        } else {
            policy.within_us
        };
    (next, false)
}

/// Decides a hit of a limit with `policy` on the client's `record` at `now_us`: blocked, or
/// what `limit` (the limit's own decision) says, a strike counted when it is one. Returns the
/// outcome and the record to store (when it changed).
pub fn decide(
    policy: &Policy,
    record: Option<&Record>,
    now_us: u64,
    limit: impl FnOnce() -> Outcome,
) -> (Outcome, Option<Record>) {
    if let Some(decision) = blocked(record, now_us) {
        let outcome = Outcome {
            decision,
            new_state: None,
        };
        return (outcome, None);
    }
    let mut outcome = limit();
    let charged = outcome.new_state.is_some();
    if !is_violation(&outcome.decision, charged) {
        return (outcome, None);
    }
    let (next, imposed) = strike(policy, record, now_us);
    if imposed {
        let remaining = outcome.decision.remaining;
        outcome.decision = Decision {
            // What remained before the hit, for the metrics' split, as every denial reports.
            remaining,
            ..block_decision(&next, now_us, true)
        };
    }
    (outcome, Some(next))
}

#[cfg(test)]
mod tests;
