//! A dry run (`Charging::Check`, Kuadrant's `CheckRateLimit`) held to the store contract: on
//! any sequence of requests (every algorithm, debt, penalties, reservations, several hits and
//! a key twice), both stores answer a check alike, field by field; a check denies a request
//! exactly when the same request charged at that moment is denied; and checks write nothing:
//! the charges of a sequence with a check before each request are those of the sequence
//! alone.

use std::cell::Cell;

use proptest::prelude::*;

use super::{check_cases, lease_of, multi_hit_scenario, Fixture, Ran, RequestSpec};
use sluice_core::engine::{self, Charging};
use sluice_core::limit::{Decision, Hit, Limit};
use sluice_store::Store;

/// What one run of a sequence answered: each check (memory, Redis), each charge (memory,
/// Redis), hit by hit; and by request, whether its check and its charge denied it.
#[derive(Default)]
struct Answers {
    checks: (Vec<Decision>, Vec<Decision>),
    charges: (Vec<Decision>, Vec<Decision>),
    denied: Vec<(bool, bool)>,
}

/// Whether `decisions` of `hits` deny their request.
fn denied(hits: &[Hit], decisions: &[Decision]) -> bool {
    engine::vetoed(
        hits.iter()
            .zip(decisions)
            .map(|(h, d)| (h.role, d.admitted)),
    )
}

/// The hits of request `number` (`specs`) on the keys of `ran`, as `Ran::requests` makes them.
fn hits_of(ran: &Ran, limits: &[Limit], number: usize, specs: &RequestSpec) -> Vec<Hit> {
    specs
        .1
        .iter()
        .enumerate()
        .map(|(i, &(index, cost, role, joins))| Hit {
            key: ran.keys[index].clone(),
            limit: limits[index].clone(),
            cost,
            role,
            joins_previous: joins && i > 0,
            lease: lease_of(&limits[index], number, cost),
        })
        .collect()
}

/// Runs `requests` all or nothing on both stores, each preceded by a check of the same hits
/// when `checking`.
fn run(fixture: &Fixture, limits: &[Limit], requests: &[RequestSpec], checking: bool) -> Answers {
    fixture.runtime.block_on(async {
        let key_of: Vec<usize> = (0..limits.len()).collect();
        let ran = Ran::new(fixture, &key_of).await;
        let mut answers = Answers::default();
        for (number, request) in requests.iter().enumerate() {
            ran.clock.advance(request.0);
            let hits = hits_of(&ran, limits, number, request);
            let mut check_denied = false;
            if checking {
                let memory = ran.memory.charge(&hits, Charging::Check).await;
                let memory = memory.expect("memory check");
                let redis = ran.redis.charge(&hits, Charging::Check).await;
                check_denied = denied(&hits, &memory);
                answers.checks.0.extend(memory);
                answers.checks.1.extend(redis.expect("redis check"));
            }
            let memory = ran.memory.charge(&hits, Charging::AllOrNothing).await;
            let memory = memory.expect("memory charge");
            let redis = ran.redis.charge(&hits, Charging::AllOrNothing).await;
            answers.denied.push((check_denied, denied(&hits, &memory)));
            answers.charges.0.extend(memory);
            answers.charges.1.extend(redis.expect("redis charge"));
        }
        answers
    })
}

#[test]
fn checks_agree_admit_as_the_charge_would_and_write_nothing() {
    let fixture = Fixture::new();
    let (denied_checks, admitted_checks) = (Cell::new(0), Cell::new(0));
    check_cases(64, &multi_hit_scenario(), |(limits, requests, _)| {
        let checked = run(&fixture, &limits, &requests, true);
        let alone = run(&fixture, &limits, &requests, false);
        prop_assert_eq!(&checked.checks.0, &checked.checks.1, "{:?}", limits);
        for (number, (check, charge)) in checked.denied.iter().enumerate() {
            prop_assert_eq!(check, charge, "request {} of {:?}", number, requests);
        }
        prop_assert_eq!(&checked.charges.0, &alone.charges.0, "{:?}", limits);
        prop_assert_eq!(&checked.charges.1, &alone.charges.1, "{:?}", limits);
        let denied = checked.denied.iter().filter(|(check, _)| *check).count();
        denied_checks.set(denied_checks.get() + denied);
        admitted_checks.set(admitted_checks.get() + checked.denied.len() - denied);
        Ok(())
    });
    let (denied_checks, admitted_checks) = (denied_checks.get(), admitted_checks.get());
    assert!(
        denied_checks > 50 && admitted_checks > 50,
        "{admitted_checks} checks admitted, {denied_checks} denied"
    );
}

/// Found by the property above: a hit admitted in a descriptor that a shadow hit denied is
/// not charged, and a later descriptor's reservation charged its key past the limit. The hit
/// stays admitted (it is told what remains, 0), so the request is admitted by its charge as by
/// its check, on both stores.
#[test]
fn an_uncharged_hit_stays_admitted_when_a_later_hit_fills_its_key() {
    use sluice_core::limit::{Role, Unit};
    let fixture = Fixture::new();
    let zero = Limit::fixed_window(0, Unit::Second);
    let mut reserved = Limit::fixed_window(3, Unit::Second);
    reserved.modifiers.reserve = Some(sluice_core::modifier::reserve::Policy {
        amount: 1,
        max_fraction_ppm: 100_000,
        max_hold_us: 100_000,
        max_holds: 1,
    });
    let limits = vec![zero.clone(), reserved, zero];
    let hits = vec![
        (2, 1, Role::Shadow, false),
        (1, 1, Role::Enforced, true),
        (1, 8, Role::Enforced, false),
    ];
    let checked = run(&fixture, &limits, &[(0, hits)], true);
    assert_eq!(checked.denied, vec![(false, false)]);
    assert_eq!(checked.charges.0, checked.charges.1, "memory and Redis");
    let uncharged = &checked.charges.0[1];
    assert!(uncharged.admitted, "{uncharged:?}");
    assert_eq!((uncharged.remaining, uncharged.retry_after_us), (0, 0));
}
