//! Fixed windows that start at each counter's first hit (`window: {start: first_hit}`,
//! Limitador's windows) held to the store contract: both stores answer alike, field by field,
//! on the behaviour table and on random sequences, both ways of charging; and the window is
//! the counter's: it opens at the first charge, lasts exactly one period from then, and a
//! check or a denial opens none.

use proptest::prelude::*;

use super::{both, both_requests, check_cases, Fixture, RequestSpec, CASES, S};
use crate::support::scenario::{limit, scenario};
use sluice_core::algorithm::fixed_window::FixedWindowParameters;
use sluice_core::engine::Charging;
use sluice_core::limit::{Algorithm, Counting, Limit, Role};

/// `requests` per `multiplier` seconds, each counter's window from its first hit.
fn from_first_hit(requests: u32, multiplier: u32) -> Limit {
    Limit {
        counting: Counting::FixedWindow(FixedWindowParameters::FROM_FIRST_HIT),
        ..limit(Algorithm::FixedWindow, requests, multiplier, None)
    }
}

#[test]
fn the_behaviour_table_agrees_for_windows_from_the_first_hit() {
    let fixture = Fixture::new();
    for (what, steps) in CASES {
        for (requests, multiplier) in [(3, 1), (4, 2), (0, 1)] {
            let limit = from_first_hit(requests, multiplier);
            let (memory, redis) = both(&fixture, limit.clone(), steps);
            assert_eq!(memory, redis, "{what}, {limit}");
        }
    }
}

#[test]
fn random_sequences_of_windows_from_the_first_hit_agree_both_ways_of_charging() {
    let fixture = Fixture::new();
    check_cases(48, &scenario(40), |(l, m, _, steps)| {
        let limit = from_first_hit(l, m);
        for charging in [Charging::AllOrNothing, Charging::EveryHit] {
            let requests: Vec<RequestSpec> = steps
                .iter()
                .map(|&(step, cost)| (step, vec![(0, cost, Role::Enforced, false)]))
                .collect();
            let (memory, redis) =
                both_requests(&fixture, std::slice::from_ref(&limit), &requests, charging);
            prop_assert_eq!(memory, redis, "{} {:?}", limit, charging);
        }
        Ok(())
    });
}

#[test]
fn a_window_opens_at_the_first_charge_and_lasts_one_period_in_both_stores() {
    let fixture = Fixture::new();
    let limit = from_first_hit(2, 10);
    // A read first (cost 0: no window), a denial of a cost past the limit (none either), then
    // the first charge 3.3 s in: its window ends 10 s after it, wherever the epoch's would.
    let steps = [
        (0, 0),
        (0, 5),
        (3_300_000, 1),
        (S, 1),
        (5 * S, 1),
        (4 * S - 1, 1),
        (1, 1),
    ];
    let (memory, redis) = both(&fixture, limit, &steps);
    assert_eq!(memory, redis);
    let reset_s: Vec<u64> = memory.iter().map(|d| d.reset_after_us).collect();
    let admitted: Vec<bool> = memory.iter().map(|d| d.admitted).collect();
    assert_eq!(
        admitted,
        [true, false, true, true, false, false, true],
        "the window from the first charge admits 2, then a new one opens at its end"
    );
    assert_eq!(
        reset_s[0],
        10 * S,
        "a read opens no window: a whole period ahead"
    );
    assert_eq!(reset_s[2], 10 * S, "the first charge opens the window");
    assert_eq!(reset_s[3], 9 * S);
    assert_eq!(
        reset_s[5], 1,
        "the window ends one period after its first charge"
    );
    assert_eq!(reset_s[6], 10 * S, "the next charge opens the next window");
}
