//! The rules of one request, pure: given its hits and a view of their state, which hits are
//! admitted, which charges stand, what each key holds afterwards, and which limit of a
//! descriptor binds. All-or-nothing, debt, the veto of enforced and quota hits, descriptor
//! groups, the binding limit, the state each hit is decided on, and the modifiers run around
//! its limit's decision (`ModifierPolicy::around`, in registry order, with the states they
//! keep beside the limit's) are written here once; the memory store calls `decide` under its locks (and keeps what is its
//! own: locking, room, bytes), the Redis Cluster path calls `standing` to know which charges
//! to take back. `lua/request.lua` is the one other copy (atomic on one Redis), held to this
//! one by the contract test.

use smallvec::SmallVec;

use crate::algorithm::{self, Kept, Outcome, State};
use crate::limit::{Decision, Hit, Role};
use crate::modifier::{Layer, Left, Turn};

/// How a store charges the hits of one request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Charging {
    /// A request is charged only if it is not `vetoed`: a denied request charges nothing
    /// (`STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true`, sluice's default).
    #[default]
    AllOrNothing,
    /// Every hit of every descriptor is charged, denied or not, as envoyproxy/ratelimit
    /// counts (`STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false`, its default): a fixed window's
    /// count goes past L within its window, the other algorithms take the hit as debt.
    EveryHit,
    /// A dry run (Kuadrant's `CheckRateLimit`): each hit is decided and answered as
    /// `AllOrNothing` would, and nothing is written.
    Check,
}

/// The hits of `hits` by descriptor: runs of a hit and those that join it.
pub fn descriptor_groups(hits: &[Hit]) -> impl Iterator<Item = std::ops::Range<usize>> + '_ {
    let mut start = 0;
    std::iter::from_fn(move || {
        if start >= hits.len() {
            return None;
        }
        let end = start
            + 1
            + hits[start + 1..]
                .iter()
                .take_while(|hit| hit.joins_previous)
                .count();
        let group = start..end;
        start = end;
        Some(group)
    })
}

/// Whether hits of these roles, admitted or not, deny their request: an enforced hit denied,
/// or every quota hit denied (when there is one; a passing quota hit never is). The stores
/// charge nothing for such a request (`Charging::AllOrNothing`; with `EveryHit`, no lease),
/// and its overall code is OVER_LIMIT.
pub fn vetoed(outcomes: impl IntoIterator<Item = (Role, bool)>) -> bool {
    let (mut quota_hits, mut quota_denied) = (0, 0);
    for (role, admitted) in outcomes {
        match role {
            Role::Enforced if !admitted => return true,
            Role::Quota => {
                quota_hits += 1;
                quota_denied += usize::from(!admitted);
            }
            Role::PassingQuota => quota_hits += 1,
            _ => {}
        }
    }
    quota_hits > 0 && quota_denied == quota_hits
}

/// Decides `hit` at `now_us` on the key's `state`, a hit that does not fit charged as
/// `charging` says (`EveryHit`: always; else only in debt).
pub fn decide_hit(hit: &Hit, charging: Charging, state: Option<&State>, now_us: u64) -> Outcome {
    let rate = hit
        .limit
        .rate()
        .with_denied_charged(charging == Charging::EveryHit);
    algorithm::decide_within(
        &hit.limit.counting,
        state,
        &rate,
        (hit.cost, headroom(hit)),
        now_us,
        hit.lease,
    )
}

/// What `hit` must leave unused of its limit (its modifiers say; 0 for most).
fn headroom(hit: &Hit) -> u64 {
    hit.limit.modifiers.headroom(hit.limit.capacity())
}

/// `hit` as a read of `cost` finds it: no lease taken or released.
fn with_cost(hit: &Hit, cost: u64) -> Hit {
    Hit {
        cost,
        lease: None,
        ..hit.clone()
    }
}

/// What an admitted hit whose charge did not stand (its descriptor or its request denied
/// elsewhere) is told: admitted still, with what remains of `state` as its key stays. Other
/// hits of the request may have charged the key past the limit; that never turns the hit's
/// own admission into a denial (a hit's decision never depends on a later hit).
pub fn uncharged(hit: &Hit, state: Option<&State>, now_us: u64) -> Decision {
    let read = decide_hit(&with_cost(hit, 0), Charging::AllOrNothing, state, now_us).decision;
    Decision {
        admitted: true,
        retry_after_us: 0,
        ..read
    }
}

/// Whether the charge of `hit` stands: debt and a lease's release always do, and with
/// `EveryHit` every hit but a lease's acquire; otherwise only when no limit of its descriptor
/// denied and the request is not vetoed. (A lease is taken only by an admitted request in
/// both modes: one taken by a denied request would get no token to release it with.)
pub fn charge_stands(hit: &Hit, charging: Charging, group_denied: bool, vetoed: bool) -> bool {
    hit.limit.debt
        || hit.releases()
        || (charging == Charging::EveryHit && !hit.acquires())
        || !(group_denied || vetoed)
}

/// Whether a request whose hits were admitted as `admitted` says is vetoed (in either
/// charging mode: the reference's counting still charges every hit but a lease's acquire).
fn request_vetoed(hits: &[Hit], admitted: impl Fn(usize) -> bool) -> bool {
    vetoed(
        hits.iter()
            .enumerate()
            .map(|(i, hit)| (hit.role, admitted(i))),
    )
}

/// For a request decided hit by hit elsewhere (one call per Cluster slot), whether each
/// hit's charge stands, given which hits were admitted; `failed`: part of the request could
/// not be decided, so it is vetoed.
pub fn standing(
    hits: &[Hit],
    admitted: impl Fn(usize) -> bool,
    charging: Charging,
    failed: bool,
) -> SmallVec<[bool; 8]> {
    let vetoed = failed || request_vetoed(hits, &admitted);
    let mut stands = SmallVec::from_elem(false, hits.len());
    for group in descriptor_groups(hits) {
        let denied = group.clone().any(|i| !admitted(i));
        for i in group {
            stands[i] = charge_stands(&hits[i], charging, denied, vetoed);
        }
    }
    stands
}

/// The decision that binds: of the denials, the one that waits longest; else the one with the
/// least remaining (the first of equals). `None` for no decisions.
pub fn binding(decisions: &[Decision]) -> Option<usize> {
    let denied = decisions
        .iter()
        .enumerate()
        .filter(|(_, d)| !d.admitted)
        .max_by_key(|(index, d)| (d.retry_after_us, std::cmp::Reverse(*index)));
    if let Some((index, _)) = denied {
        return Some(index);
    }
    decisions
        .iter()
        .enumerate()
        .min_by_key(|(index, d)| (d.remaining, *index))
        .map(|(index, _)| index)
}

/// Which state of a hit a key holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Of {
    /// The limit's own state.
    Limit,
    /// A part of what a modifier of the limit keeps beside it: the modifier's registry row,
    /// and the part's index among its parts (`ModifierPolicy::PARTS`).
    Kept { row: u8, part: u8 },
}

impl Of {
    /// For a modifier's part of `hit`'s state: the part's name, and the token it is kept
    /// under when it is kept per token (the hit's lease's); `None` for the limit's own.
    pub fn kept_part(self, hit: &Hit) -> Option<(&'static str, Option<u64>)> {
        let Of::Kept { row, part } = self else {
            return None;
        };
        let part = hit.limit.modifiers.part(row, part)?;
        let token = hit
            .lease
            .filter(|_| part.per_token)
            .map(|call| call.token());
        Some((part.name, token))
    }
}

/// Which state of a request's hit a key holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Part {
    pub hit: usize,
    pub of: Of,
}

impl Part {
    /// The state of hit `hit`'s limit.
    pub fn limit(hit: usize) -> Part {
        Part { hit, of: Of::Limit }
    }

    /// The parts every hit of `hits` has state under: its limit's, then its modifiers'.
    pub fn of_request(hits: &[Hit]) -> SmallVec<[Part; 4]> {
        let mut parts: SmallVec<[Part; 4]> = (0..hits.len()).map(Part::limit).collect();
        for (hit, h) in hits.iter().enumerate() {
            for (row, layer) in h.limit.modifiers.layers() {
                for part in layer.parts_read(h.lease) {
                    parts.push(Part {
                        hit,
                        of: Of::Kept { row, part },
                    });
                }
            }
        }
        parts
    }
}

/// A state a request leaves under one key: the hit that wrote it last (its limit's state, or
/// a modifier's), and until when it matters.
#[derive(Debug)]
pub struct Write<K> {
    pub hit: usize,
    pub of: Of,
    pub key: K,
    pub state: State,
    pub expires_at_us: u64,
}

impl<K> Write<K> {
    /// What the write holds.
    pub fn part(&self) -> Part {
        Part {
            hit: self.hit,
            of: self.of,
        }
    }
}

/// What a request decided: each hit's decision, and the last state of every key its
/// standing charges and its modifiers' lasting writes touched (to be written together, or
/// not at all).
#[derive(Debug)]
pub struct Decided<K> {
    pub decisions: Vec<Decision>,
    pub writes: SmallVec<[Write<K>; 4]>,
    charged: SmallVec<[bool; 8]>,
}

/// The state under `key` as this request left it so far: its descriptor's changes, then the
/// standing charges of earlier descriptors, then what modifiers left to stand whatever the
/// request's fate.
fn left<K: Copy + Eq>(key: K, lists: [&[Write<K>]; 3]) -> Option<&State> {
    lists
        .into_iter()
        .find_map(|list| list.iter().rev().find(|w| w.key == key))
        .map(|w| &w.state)
}

/// Decides hit `i` of `hits` through its modifiers (`layers[0]` outermost) around its
/// limit's decision, on the states `current` finds; `leave` takes what each modifier writes.
fn decide_through(
    turn: &Turn<'_>,
    layers: &[(u8, &dyn Layer)],
    current: &dyn Fn(Of) -> Option<Kept>,
    limit: &mut dyn FnMut() -> Outcome,
    leave: &mut dyn FnMut(u8, Left),
) -> Outcome {
    let Some(((row, layer), inside)) = layers.split_first() else {
        return limit();
    };
    let row = *row;
    let kept = |part| current(Of::Kept { row, part });
    let leave = std::cell::RefCell::new(leave);
    let mut inner = || {
        let mut leave_inside = |row, left| (leave.borrow_mut())(row, left);
        decide_through(turn, inside, current, limit, &mut leave_inside)
    };
    let mut own = |left| (leave.borrow_mut())(row, left);
    layer.around(turn, &kept, &mut inner, &mut own)
}

/// Decides `hits` in order, each on the state the hits before it left: its descriptor's
/// earlier hits, the charges of earlier descriptors that stand, else what the store holds
/// (`stored(part)`, for the state under `key_of(part)`). Only the charges that stand are
/// planned, and what a modifier leaves `always` (`Left::always`), whatever the request's fate
/// (under `Charging::Check`, nothing: the decisions are as `AllOrNothing`'s).
pub fn decide<'s, K: Copy + Eq>(
    hits: &[Hit],
    key_of: impl Fn(Part) -> K,
    charging: Charging,
    now_us: u64,
    stored: impl Fn(Part) -> Option<&'s State>,
) -> Decided<K> {
    let mut charged: Vec<Write<K>> = Vec::new();
    let mut records: SmallVec<[Write<K>; 2]> = SmallVec::new();
    let mut decisions = Vec::with_capacity(hits.len());
    for group in descriptor_groups(hits) {
        let mut changes: SmallVec<[Write<K>; 2]> = SmallVec::new();
        for i in group.clone() {
            let current = |part: Part| {
                left(key_of(part), [&changes, &charged, &records]).or_else(|| stored(part))
            };
            let state = current(Part::limit(i));
            let hit = &hits[i];
            let turn = Turn {
                counting: &hit.limit.counting,
                rate: hit.limit.rate(),
                window_end_us: hit.limit.window_end_us(now_us),
                cost: hit.cost,
                headroom: headroom(hit),
                lease: hit.lease,
                now_us,
                state,
            };
            let kept = |of| match current(Part { hit: i, of }) {
                Some(State::Kept(kept)) => Some(kept.clone()),
                _ => None,
            };
            let mut left: SmallVec<[(u8, Left); 2]> = SmallVec::new();
            let outcome = decide_through(
                &turn,
                &hit.limit.modifiers.layers(),
                &kept,
                &mut || decide_hit(hit, charging, state, now_us),
                &mut |row, l| left.push((row, l)),
            );
            if let Some((state, expires_at_us)) = outcome.new_state {
                changes.push(Write {
                    hit: i,
                    of: Of::Limit,
                    key: key_of(Part::limit(i)),
                    state,
                    expires_at_us,
                });
            }
            for (row, l) in left {
                let of = Of::Kept { row, part: l.part };
                let write = Write {
                    hit: i,
                    of,
                    key: key_of(Part { hit: i, of }),
                    state: State::Kept(l.kept),
                    expires_at_us: l.expires_at_us,
                };
                if l.always {
                    records.push(write);
                } else {
                    changes.push(write);
                }
            }
            decisions.push(outcome.decision);
        }
        let denied = group.clone().any(|i| !decisions[i].admitted);
        charged.extend(
            changes
                .into_iter()
                .filter(|c| charge_stands(&hits[c.hit], charging, denied, false)),
        );
    }
    let vetoed = request_vetoed(hits, |i| decisions[i].admitted);
    charged.retain(|c| charge_stands(&hits[c.hit], charging, false, vetoed));
    let mut is_charged = SmallVec::from_elem(false, hits.len());
    for charge in &charged {
        is_charged[charge.hit] = true;
    }
    // The last write of each key is its new state.
    let mut writes: SmallVec<[Write<K>; 4]> = SmallVec::new();
    if charging == Charging::Check {
        // A dry run is answered as its charges would be, and writes nothing.
        charged.clear();
        records.clear();
    }
    for write in charged.into_iter().chain(records).rev() {
        if !writes.iter().any(|w| w.key == write.key) {
            writes.push(write);
        }
    }
    Decided {
        decisions,
        writes,
        charged: is_charged,
    }
}

impl<K> Decided<K> {
    /// The decisions to answer, once the writes are made: an admitted hit whose charge did not
    /// stand reports the state as it stays (`stored(i)`, read after the writes), the decision
    /// of cost 0. (A release that freed nothing reports what it found.)
    pub fn answers<'s>(
        mut self,
        hits: &[Hit],
        now_us: u64,
        stored: impl Fn(usize) -> Option<&'s State>,
    ) -> Vec<Decision> {
        for (i, decision) in self.decisions.iter_mut().enumerate() {
            if decision.admitted && hits[i].cost > 0 && !self.charged[i] && !hits[i].releases() {
                *decision = uncharged(&hits[i], stored(i), now_us);
            }
        }
        self.decisions
    }

    /// Takes the writes out, leaving the decisions to `answers`.
    pub fn take_writes(&mut self) -> SmallVec<[Write<K>; 4]> {
        std::mem::take(&mut self.writes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limit::{Limit, Unit};

    fn decided(admitted: bool, remaining: u32, retry_after_us: u64) -> Decision {
        Decision {
            admitted,
            remaining,
            reset_after_us: 0,
            retry_after_us,
            ..Decision::default()
        }
    }

    fn hit(key: u8, limit: u32, cost: u64, role: Role, joins_previous: bool) -> Hit {
        Hit {
            key: key.to_string(),
            limit: Limit::fixed_window(limit, Unit::Hour),
            cost,
            role,
            joins_previous,
            lease: None,
        }
    }

    #[test]
    fn the_denial_that_waits_longest_binds_else_the_least_remaining() {
        assert_eq!(binding(&[]), None);
        let admitted = [
            decided(true, 5, 0),
            decided(true, 2, 0),
            decided(true, 2, 0),
        ];
        assert_eq!(binding(&admitted), Some(1));
        let denied = [
            decided(true, 0, 0),
            decided(false, 0, 10),
            decided(false, 0, 99),
        ];
        assert_eq!(binding(&denied), Some(2));
    }

    #[test]
    fn a_denied_limit_of_a_descriptor_leaves_its_other_limits_uncharged() {
        let hits = [
            hit(1, 10, 1, Role::Enforced, false),
            hit(2, 0, 1, Role::Shadow, true),
        ];
        let plan = decide(&hits, |p| p.hit, Charging::AllOrNothing, 0, |_| None);
        assert!(plan.writes.is_empty());
        let decisions = plan.answers(&hits, 0, |_| None);
        assert!(decisions[0].admitted);
        assert_eq!(decisions[0].remaining, 10, "reports what remains uncharged");
        assert!(!decisions[1].admitted);
    }

    #[test]
    fn the_reference_counting_charges_every_hit_and_a_key_keeps_its_last_state() {
        // Two hits of cost 1 on one key of limit 1.
        let hits = vec![hit(1, 1, 1, Role::Enforced, false); 2];
        let plan = decide(&hits, |_| 1u8, Charging::EveryHit, 0, |_| None);
        assert_eq!(plan.writes.len(), 1);
        assert_eq!(plan.writes[0].hit, 1);
        assert!(plan.decisions[0].admitted && !plan.decisions[1].admitted);
    }

    #[test]
    fn standing_takes_back_all_but_debt_of_a_vetoed_or_failed_request() {
        let mut debt = hit(3, 5, 1, Role::Enforced, false);
        debt.limit.debt = true;
        let hits = [
            hit(1, 5, 1, Role::Enforced, false),
            hit(2, 5, 1, Role::Quota, false),
            debt,
        ];
        let all = |_| true;
        assert_eq!(
            standing(&hits, all, Charging::AllOrNothing, false).as_slice(),
            [true; 3]
        );
        assert_eq!(
            standing(&hits, |i| i != 1, Charging::AllOrNothing, false).as_slice(),
            [false, false, true],
            "every quota hit denied vetoes the request"
        );
        assert_eq!(
            standing(&hits, all, Charging::AllOrNothing, true).as_slice(),
            [false, false, true]
        );
    }
}
