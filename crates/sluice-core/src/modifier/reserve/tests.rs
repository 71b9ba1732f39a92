use std::collections::HashMap;

use proptest::prelude::*;

use super::*;
use crate::engine::{self, Charging, Of, Part};
use crate::limit::{Algorithm, Counting, Hit, LeaseCall, Limit, Role, Unit};

const SECOND: u64 = 1_000_000;

/// A budget of `limit` a minute on `algorithm`, reserving `amount` for at most `hold_s`.
fn budget(algorithm: Algorithm, limit: u32, amount: u64, hold_s: u64) -> Limit {
    let mut budget = Limit::new(Counting::of(algorithm), limit, Unit::Minute);
    budget.modifiers.reserve = Some(Policy {
        amount,
        max_fraction_ppm: 1_000_000,
        max_hold_us: hold_s * SECOND,
        max_holds: 1_000,
    });
    budget
}

/// One key's states by part, kept as a store keeps them (with their expiry).
#[derive(Default)]
struct Store(HashMap<u64, (State, u64)>);

impl Store {
    /// The name of `part` of `hit`: a settled mark is one per token.
    fn name(hit: &Hit, of: Of) -> u64 {
        let (part, token) = of.kept_part(hit).unwrap_or(("limit", None));
        Store::named(&hit.key, part, token.unwrap_or(0))
    }

    fn named(key: &str, part: &str, token: u64) -> u64 {
        use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
        BuildHasherDefault::<DefaultHasher>::default().hash_one((key, part, token))
    }

    /// Decides one call of `cost` on `limit` at `now_s`, as a request of one descriptor.
    fn call(&mut self, limit: Limit, cost: u64, call: LeaseCall, now_us: u64) -> Decision {
        let hits = [Hit {
            key: "k".into(),
            limit,
            cost,
            role: Role::Enforced,
            joins_previous: false,
            lease: Some(call),
        }];
        let mut plan = engine::decide(
            &hits,
            |part: Part| Store::name(&hits[part.hit], part.of),
            Charging::AllOrNothing,
            now_us,
            |part| {
                self.0
                    .get(&Store::name(&hits[part.hit], part.of))
                    .filter(|(_, expires)| *expires > now_us)
                    .map(|(state, _)| state)
            },
        );
        let writes = plan.take_writes();
        for write in writes {
            self.0.insert(write.key, (write.state, write.expires_at_us));
        }
        let decisions = plan.answers(&hits, now_us, |_| None);
        decisions[0]
    }

    /// What the limit's state counts as used at `now_us`: the limit less what a check of cost
    /// 0 finds remaining, with no holds.
    fn used(&self, limit: &Limit, now_us: u64) -> u64 {
        let state = self
            .0
            .get(&Store::named("k", "limit", 0))
            .filter(|(_, expires)| *expires > now_us)
            .map(|(state, _)| state);
        if let Some(State::FixedWindow(window)) = state {
            // A window's count, which settles may take past the limit.
            let current = window.start_us + limit.period_us() > now_us;
            return if current { window.count } else { 0 };
        }
        let remaining = limit.decide(state, 0, now_us).decision.remaining;
        u64::from(limit.requests_per_unit) - u64::from(remaining)
    }

    fn held(&self, now_us: u64) -> u64 {
        match self.0.get(&Store::named("k", HOLDS, 0)) {
            Some((State::Kept(kept), _)) => {
                Holds::of_kept(kept).map_or(0, |h| h.live(now_us).0.total())
            }
            _ => 0,
        }
    }
}

#[test]
fn an_opening_is_admitted_only_while_used_held_and_estimate_fit() {
    let limit = budget(Algorithm::FixedWindow, 10_000, 4_000, 120);
    let mut store = Store::default();
    let first = store.call(limit.clone(), 4_000, LeaseCall::Acquire(1), SECOND);
    assert!(first.admitted);
    assert_eq!(first.remaining, 6_000, "net of its own hold");
    let second = store.call(limit.clone(), 4_000, LeaseCall::Acquire(2), SECOND);
    assert!(second.admitted);
    assert_eq!(second.remaining, 2_000);
    let third = store.call(limit.clone(), 4_000, LeaseCall::Acquire(3), SECOND);
    assert!(!third.admitted, "2,000 remain net of the holds");
    assert_eq!(third.remaining, 2_000);
    assert_eq!(store.used(&limit, SECOND), 0, "an opening charges nothing");
    // The first settles at 1,000: its hold goes, the actual is charged.
    let settle = store.call(limit.clone(), 1_000, LeaseCall::Release(1), 2 * SECOND);
    assert!(settle.admitted);
    assert_eq!(settle.remaining, 5_000);
    let reserved = Reserved::of(&settle).expect("a settle's mark");
    assert_eq!(reserved.call, Call::Settled);
    assert_eq!((reserved.estimate, reserved.held), (4_000, 4_000));
    assert!(
        store
            .call(limit, 4_000, LeaseCall::Acquire(3), 2 * SECOND)
            .admitted
    );
}

#[test]
fn a_settle_is_never_denied_and_charges_past_the_limit() {
    let limit = budget(Algorithm::TokenBucket, 1_000, 500, 120);
    let mut store = Store::default();
    assert!(
        store
            .call(limit.clone(), 500, LeaseCall::Acquire(7), 0)
            .admitted
    );
    let settle = store.call(limit.clone(), 2_500, LeaseCall::Release(7), SECOND);
    assert!(settle.admitted, "a settle is never denied");
    assert_eq!(settle.remaining, 0);
    assert!(
        store.used(&limit, SECOND) >= 1_000,
        "charged in full, into debt"
    );
    assert!(!store.call(limit, 1, LeaseCall::Acquire(8), SECOND).admitted);
}

#[test]
fn a_second_settle_charges_nothing_and_an_unknown_token_charges_once() {
    let limit = budget(Algorithm::FixedWindow, 10_000, 100, 60);
    let mut store = Store::default();
    assert!(
        store
            .call(limit.clone(), 100, LeaseCall::Acquire(1), 0)
            .admitted
    );
    store.call(limit.clone(), 300, LeaseCall::Release(1), SECOND);
    let again = store.call(limit.clone(), 300, LeaseCall::Release(1), 2 * SECOND);
    assert_eq!(Reserved::of(&again).map(|r| r.call), Some(Call::Duplicate));
    assert_eq!(store.used(&limit, 2 * SECOND), 300);
    let unknown = store.call(limit.clone(), 50, LeaseCall::Release(99), 3 * SECOND);
    assert_eq!(Reserved::of(&unknown).map(|r| r.call), Some(Call::Unknown));
    assert_eq!(store.used(&limit, 3 * SECOND), 350, "its cost was real");
    store.call(limit.clone(), 50, LeaseCall::Release(99), 4 * SECOND);
    assert_eq!(store.used(&limit, 4 * SECOND), 350, "once");
}

#[test]
fn a_hold_lapses_at_max_hold_or_its_windows_end_and_charges_nothing() {
    let limit = budget(Algorithm::FixedWindow, 1_000, 600, 30);
    let mut store = Store::default();
    assert!(
        store
            .call(limit.clone(), 600, LeaseCall::Acquire(1), 10 * SECOND)
            .admitted
    );
    assert!(
        store
            .call(limit.clone(), 300, LeaseCall::Acquire(2), 20 * SECOND)
            .admitted
    );
    assert!(
        !store
            .call(limit.clone(), 600, LeaseCall::Acquire(3), 39 * SECOND)
            .admitted
    );
    let after = store.call(limit.clone(), 600, LeaseCall::Acquire(3), 40 * SECOND);
    assert!(after.admitted, "the first hold lapsed at 10 s + 30 s");
    assert_eq!(Reserved::of(&after).map(|r| r.lapsed), Some(1));
    assert_eq!(after.remaining, 100);
    assert_eq!(store.used(&limit, 40 * SECOND), 0);
    // Taken at 40 s, it lapses with its window at 60 s, before its 30 s.
    assert_eq!(store.held(49 * SECOND), 900);
    assert_eq!(store.held(59 * SECOND), 600);
    let late = store.call(limit, 600, LeaseCall::Acquire(4), 60 * SECOND);
    assert!(late.admitted);
    assert_eq!(late.remaining, 400, "the last window's holds are gone");
}

#[test]
fn holds_are_taken_only_by_a_request_that_is_admitted() {
    let limit = budget(Algorithm::FixedWindow, 1_000, 100, 60);
    let hits = [
        Hit {
            key: "k".into(),
            limit,
            cost: 100,
            role: Role::Enforced,
            joins_previous: false,
            lease: Some(LeaseCall::Acquire(1)),
        },
        Hit {
            key: "other".into(),
            limit: Limit::fixed_window(0, Unit::Minute),
            cost: 1,
            role: Role::Enforced,
            joins_previous: false,
            lease: None,
        },
    ];
    let plan = engine::decide(
        &hits,
        |part| (part.hit, part.of),
        Charging::AllOrNothing,
        0,
        |_| None,
    );
    assert!(plan.decisions[0].admitted && !plan.decisions[1].admitted);
    assert!(plan.writes.is_empty(), "a vetoed request holds nothing");
}

/// One step of a random run: open with an estimate, settle one of the tokens issued with an
/// actual cost, or let time pass.
#[derive(Debug, Clone)]
enum Step {
    Open(u64),
    Settle(usize, u64),
    Wait(u64),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (1u64..400).prop_map(Step::Open),
        (0usize..40, 0u64..800).prop_map(|(i, a)| Step::Settle(i, a)),
        (1u64..20_000_000).prop_map(Step::Wait),
    ]
}

proptest! {
    /// On every algorithm that takes a reserve: an admitted opening never finds used + held
    /// past the limit; a settle charges its actual once however often it is sent; a hold
    /// that lapses charges nothing.
    #[test]
    fn holds_never_overcommit_and_charges_are_exact(
        steps in prop::collection::vec(step(), 1..60),
        algorithm in prop::sample::select(vec![
            Algorithm::FixedWindow,
            Algorithm::SlidingWindowCounter,
            Algorithm::TokenBucket,
        ]),
    ) {
        let limit = budget(algorithm, 1_000, 200, 30);
        let mut store = Store::default();
        let mut now = 1_000_000_000 * SECOND;
        // Each token issued, with when its hold lapses.
        let mut issued: Vec<(u64, u64)> = Vec::new();
        let window_end = |at: u64| (at / (60 * SECOND) + 1) * 60 * SECOND;
        let mut charged: HashMap<u64, u64> = HashMap::new();
        // Each token settled, with until when it is remembered.
        let mut settled: HashMap<u64, u64> = HashMap::new();
        for step in steps {
            match step {
                Step::Open(estimate) => {
                    let token = issued.len() as u64 + 1;
                    let before = store.used(&limit, now) + store.held(now);
                    let decision = store.call(limit.clone(), estimate, LeaseCall::Acquire(token), now);
                    if decision.admitted {
                        let mut lapses = now + 30 * SECOND;
                        if algorithm == Algorithm::FixedWindow {
                            lapses = lapses.min(window_end(now));
                        }
                        issued.push((token, lapses));
                        prop_assert!(before + estimate <= 1_000, "used + held {before} + {estimate}");
                        prop_assert!(store.used(&limit, now) + store.held(now) <= 1_000);
                    }
                }
                Step::Settle(index, actual) => {
                    let (token, lapses) = issued
                        .get(index)
                        .copied()
                        .unwrap_or((10_000 + index as u64, 0));
                    let decision = store.call(limit.clone(), actual, LeaseCall::Release(token), now);
                    prop_assert!(decision.admitted);
                    let call = Reserved::of(&decision).map(|r| r.call);
                    if settled.get(&token).is_some_and(|&until| until > now) {
                        prop_assert_eq!(call, Some(Call::Duplicate));
                    } else {
                        let live = lapses > now && !settled.contains_key(&token);
                        let expected = if live { Call::Settled } else { Call::Unknown };
                        prop_assert_eq!(call, Some(expected));
                        let remembered = if live { lapses } else { now + 30 * SECOND };
                        settled.insert(token, remembered);
                        *charged.entry(now / (60 * SECOND)).or_default() += actual;
                    }
                }
                Step::Wait(us) => now += us,
            }
        }
        // Only settles ever charged: a fixed window counts those of its own window.
        if algorithm == Algorithm::FixedWindow {
            let window = now / (60 * SECOND);
            prop_assert_eq!(store.used(&limit, now), charged.get(&window).copied().unwrap_or(0));
        }
    }
}

#[test]
fn a_key_holds_at_most_max_holds_at_once() {
    let mut limit = budget(Algorithm::FixedWindow, 1_000, 1, 30);
    if let Some(policy) = limit.modifiers.reserve.as_mut() {
        policy.max_holds = 2;
    }
    let mut store = Store::default();
    assert!(
        store
            .call(limit.clone(), 1, LeaseCall::Acquire(1), 0)
            .admitted
    );
    assert!(
        store
            .call(limit.clone(), 1, LeaseCall::Acquire(2), 5 * SECOND)
            .admitted
    );
    let third = store.call(limit.clone(), 1, LeaseCall::Acquire(3), 10 * SECOND);
    assert!(
        !third.admitted,
        "two holds already: 998 remain, but no third"
    );
    assert_eq!(third.remaining, 998);
    assert_eq!(third.retry_after_us, 20 * SECOND, "when the first lapses");
    assert!(
        store
            .call(limit.clone(), 1, LeaseCall::Acquire(2), 10 * SECOND)
            .admitted,
        "a token that holds already adds to its hold"
    );
    store.call(limit.clone(), 1, LeaseCall::Release(1), 11 * SECOND);
    assert!(
        store
            .call(limit, 1, LeaseCall::Acquire(3), 11 * SECOND)
            .admitted
    );
}
