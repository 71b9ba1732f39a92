//! Concurrency: at most L leases held at once, each freed by its release or, at the latest, W
//! after it was taken (its life, so a lost release never holds capacity longer). A hit that
//! acquires takes `cost` leases under the request's token when they fit; a hit that releases
//! frees what its token holds, and nothing when the token holds nothing here (a denied
//! request's, an expired one's, another key's): a release never frees a lease it did not take.
//!
//! A lease of a token acquired twice on one key (two descriptors of one request) holds the sum
//! of both, until the later life ends. A lease past its life is dropped when its key is next
//! written, and reported as expired then if that is within one more life; the key is kept
//! for that long after its last lease ends, and then forgotten.

use crate::algorithm::params::NoParameters;
use crate::algorithm::persist::{put_count, Input, Persist};
use crate::algorithm::remaining;
use crate::algorithm::{Ask, Decision, HeapSize, LeaseCall, LimitAlgorithm, Mark};

/// One token's leases on one key: how many, and when they end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    pub token: u64,
    pub units: u64,
    pub expires_at_us: u64,
}

/// The leases of one key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Leases(pub Vec<Lease>);

impl Persist for Leases {
    fn put(&self, out: &mut Vec<u8>) {
        put_count(out, self.0.len());
        for lease in &self.0 {
            for value in [lease.token, lease.units, lease.expires_at_us] {
                out.extend_from_slice(&value.to_le_bytes());
            }
        }
    }

    fn take(input: &mut Input<'_>) -> Option<Self> {
        let count = input.count(24)?;
        let mut leases = Vec::with_capacity(count);
        for _ in 0..count {
            leases.push(Lease {
                token: input.u64()?,
                units: input.u64()?,
                expires_at_us: input.u64()?,
            });
        }
        Some(Leases(leases))
    }
}

impl HeapSize for Leases {
    fn heap_bytes(&self) -> usize {
        self.0.capacity() * std::mem::size_of::<Lease>()
    }
}

/// The concurrency limit in the registry.
pub struct Concurrency;

impl LimitAlgorithm for Concurrency {
    type State = Leases;
    type Params = NoParameters;
    const MAX_REQUESTS_PER_UNIT: Option<(u32, &'static str)> = Some((
        10_000,
        "keeps every lease held (a concurrency limit counts requests in flight)",
    ));
    const DECIDES_ZERO_LIMIT: bool = true;
    const OWES: bool = false;
    const KEY_NAMES_RATE: bool = false;

    fn decide(stored: Option<&Leases>, ask: &Ask<'_, Self::Params>) -> (Decision, Option<Leases>) {
        let now_us = ask.now_us;
        let (mut live, expired) = split_live(stored, now_us, ask.rate.period_us());
        let capacity = u64::from(ask.rate.requests_per_unit);
        let held: u64 = live.iter().map(|l| l.units).sum();
        let mut released = 0;
        let mut admitted = true;
        let mut retry_after_us = 0;
        match ask.lease {
            Some(LeaseCall::Release(token)) => {
                if let Some(at) = live.iter().position(|l| l.token == token) {
                    released = live.swap_remove(at).units;
                }
            }
            Some(LeaseCall::Acquire(_)) | None if ask.cost > 0 => {
                if held.saturating_add(ask.cost) <= capacity {
                    acquire(&mut live, ask);
                } else {
                    admitted = false;
                    retry_after_us = until_fits(&live, held, ask.cost, capacity, now_us)
                        .unwrap_or(ask.rate.period_us());
                }
            }
            // Cost 0: a read.
            _ => {}
        }
        let held_after: u64 = live.iter().map(|l| l.units).sum();
        // Only an acquire that is taken and a release write, pruning what expired (and
        // reporting it then, once): a read or a denial leaves the key as it is.
        let releases = matches!(ask.lease, Some(LeaseCall::Release(_)));
        let taken = admitted && ask.cost > 0 && !releases;
        let writes = taken || (releases && (released > 0 || expired > 0));
        let reset_after_us = live
            .iter()
            .map(|l| l.expires_at_us.saturating_sub(now_us))
            .max()
            .unwrap_or(0);
        let decision = Decision {
            admitted,
            remaining: remaining(u128::from(capacity.saturating_sub(held_after))),
            reset_after_us,
            retry_after_us,
            mark: Mark::leases(
                remaining(u128::from(released)),
                if writes {
                    remaining(u128::from(expired))
                } else {
                    0
                },
            ),
            ..Decision::default()
        };
        (decision, writes.then_some(Leases(live)))
    }

    /// A concurrency limit never owes: a lease that does not fit is not taken.
    fn force(stored: Option<&Leases>, ask: &Ask<'_, Self::Params>) -> Leases {
        split_live(stored, ask.now_us, ask.rate.period_us())
            .0
            .into()
    }

    /// One life after the last lease ends: until then an expiry is still reported.
    const CREDIT_REFUSAL: Option<&'static str> = Some(
        "concurrency counts leases in flight: a credit would free leases their holders still use (each ends by its release or its life)",
    );

    fn expires_at_us(state: &Leases, rate: &crate::algorithm::Rate, _: &NoParameters) -> u64 {
        let last = state.0.iter().map(|l| l.expires_at_us).max().unwrap_or(0);
        last.saturating_add(rate.period_us())
    }
}

impl From<Vec<Lease>> for Leases {
    fn from(leases: Vec<Lease>) -> Leases {
        Leases(leases)
    }
}

/// Adds the leases `ask` acquires: its token's lease grows (and lives from now), or a new one
/// is held. A hit without a lease (a simulation's, never a request's) holds its own.
fn acquire(live: &mut Vec<Lease>, ask: &Ask<'_, NoParameters>) {
    let expires_at_us = ask.now_us.saturating_add(ask.rate.period_us());
    let token = ask.lease.map(LeaseCall::token);
    match live.iter_mut().find(|l| token == Some(l.token)) {
        Some(lease) => {
            lease.units += ask.cost;
            lease.expires_at_us = expires_at_us;
        }
        None => live.push(Lease {
            token: token.unwrap_or(0),
            units: ask.cost,
            expires_at_us,
        }),
    }
}

/// The leases of `stored` still held at `now_us`, and the units of those that ended within
/// the last `life_us` (older ones are forgotten).
fn split_live(stored: Option<&Leases>, now_us: u64, life_us: u64) -> (Vec<Lease>, u64) {
    let Some(Leases(leases)) = stored else {
        return (Vec::new(), 0);
    };
    let mut expired = 0;
    let mut live = Vec::with_capacity(leases.len() + 1);
    for lease in leases {
        if lease.expires_at_us > now_us {
            live.push(*lease);
        } else if lease.expires_at_us.saturating_add(life_us) > now_us {
            expired += lease.units;
        }
    }
    (live, expired)
}

/// Time until enough of `live` (holding `held`) has expired for `cost` more to fit in
/// `capacity`; `None` when it never can.
fn until_fits(live: &[Lease], held: u64, cost: u64, capacity: u64, now_us: u64) -> Option<u64> {
    if cost > capacity {
        return None;
    }
    let mut ends: Vec<(u64, u64)> = live.iter().map(|l| (l.expires_at_us, l.units)).collect();
    ends.sort_unstable();
    let mut still_held = held;
    for (expires_at_us, units) in ends {
        still_held -= units;
        if still_held + cost <= capacity {
            return Some(expires_at_us.saturating_sub(now_us));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::vectors::{per_second, S};
    use crate::algorithm::{Algorithm, State};
    use proptest::prelude::*;

    /// One step: time forward (µs), then acquire `cost` under a new token, or release the
    /// token of step `n` (held, released, denied or expired).
    #[derive(Debug, Clone)]
    enum Step {
        Acquire(u64, u64),
        Release(u64, usize),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            (0u64..1_500_000, 0u64..=4).prop_map(|(dt, cost)| Step::Acquire(dt, cost)),
            (0u64..1_500_000, 0usize..40).prop_map(|(dt, n)| Step::Release(dt, n)),
        ]
    }

    fn held(state: &Option<State>, now: u64) -> u64 {
        match state {
            Some(State::Concurrency(Leases(leases))) => leases
                .iter()
                .filter(|l| l.expires_at_us > now)
                .map(|l| l.units)
                .sum(),
            _ => 0,
        }
    }

    proptest! {
        /// Never more than L held; an unreleased lease is gone after its life; a release of a
        /// token that holds nothing changes nothing; a release frees exactly what its
        /// acquire took.
        #[test]
        fn leases_stay_within_the_limit_and_end_with_their_life(
            limit in 0u32..=4,
            steps in prop::collection::vec(step(), 1..40),
        ) {
            // A lease lives 2 s.
            let mut rule = per_second(Algorithm::Concurrency, limit, None);
            rule.unit_multiplier = 2;
            let mut state: Option<State> = None;
            let mut now = 10 * S;
            // Per step: what its acquire took, and until when.
            let mut taken: Vec<(u64, u64)> = Vec::new();
            for (index, step) in steps.iter().enumerate() {
                let token = index as u64 + 1;
                let (dt, lease, cost) = match *step {
                    Step::Acquire(dt, cost) => (dt, LeaseCall::Acquire(token), cost),
                    Step::Release(dt, n) => (dt, LeaseCall::Release(n as u64 + 1), 1),
                };
                now += dt;
                let before = held(&state, now);
                let outcome = rule.decide_lease(state.as_ref(), cost, now, Some(lease));
                let decision = outcome.decision;
                if let Some((next, _)) = outcome.new_state {
                    state = Some(next);
                }
                let after = held(&state, now);
                prop_assert!(after <= u64::from(limit), "held {after} of {limit}");
                prop_assert_eq!(u64::from(decision.remaining), u64::from(limit) - after);
                match lease {
                    LeaseCall::Acquire(_) => {
                        let took = if decision.admitted { cost } else { 0 };
                        prop_assert_eq!(after, before + took);
                        prop_assert_eq!(decision.admitted, before + cost <= u64::from(limit));
                        taken.push((took, now + 2 * S));
                    }
                    LeaseCall::Release(token) => {
                        prop_assert!(decision.admitted);
                        taken.push((0, 0));
                        let of = taken.get(token as usize - 1).copied();
                        let live = of.filter(|&(took, until)| took > 0 && until > now);
                        let freed = u64::from(decision.leases().0);
                        prop_assert_eq!(before - after, freed);
                        match live {
                            Some((took, _)) if freed > 0 => {
                                prop_assert_eq!(freed, took);
                                taken[token as usize - 1].0 = 0;
                            }
                            _ => prop_assert_eq!(freed, 0, "freed what it did not take"),
                        }
                    }
                }
            }
            // Every lease past its life: nothing held.
            let outcome = rule.decide_lease(state.as_ref(), 0, now + 2 * S, None);
            prop_assert_eq!(outcome.decision.remaining, limit);
        }
    }

    #[test]
    fn a_denial_waits_for_the_oldest_lease_that_makes_room() {
        // 3 at once, a lease lives 1 s; leases of 1 at 0, 2 at 0.2 s.
        let rule = per_second(Algorithm::Concurrency, 3, None);
        let first = rule.decide_lease(None, 1, 0, Some(LeaseCall::Acquire(1)));
        let state = first.new_state.map(|(s, _)| s);
        let second = rule.decide_lease(state.as_ref(), 2, 200_000, Some(LeaseCall::Acquire(2)));
        let state = second.new_state.map(|(s, _)| s);
        let over = rule.decide_lease(state.as_ref(), 2, 500_000, Some(LeaseCall::Acquire(3)));
        assert!(!over.decision.admitted && over.new_state.is_none());
        // Room for 2 once both have ended (1.2 s); the latest ends then too.
        assert_eq!(over.decision.retry_after_us, 700_000);
        assert_eq!(over.decision.reset_after_us, 700_000);
        let one = rule.decide_lease(state.as_ref(), 1, 500_000, Some(LeaseCall::Acquire(3)));
        assert!(!one.decision.admitted);
        // Room for 1 once the first has ended (1 s).
        assert_eq!(one.decision.retry_after_us, 500_000);
        let never = rule.decide_lease(state.as_ref(), 4, 500_000, Some(LeaseCall::Acquire(3)));
        assert_eq!(
            never.decision.retry_after_us, S,
            "more than L never fits: one life"
        );
    }
}
