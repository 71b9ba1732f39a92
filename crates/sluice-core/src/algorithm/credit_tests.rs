//! A credit of N: N more admitted now where the algorithm has a count or a bucket to give
//! back to, never more than an empty window or a full bucket; refused, with its reason, by
//! the algorithms that have none.

use crate::algorithm::{Algorithm, Counting, State};
use crate::limit::{Limit, Unit};

const NOW: u64 = 1_700_000_000_000_000;

/// The algorithms that take credit.
const CREDITED: [Algorithm; 4] = [
    Algorithm::FixedWindow,
    Algorithm::SlidingWindowCounter,
    Algorithm::TokenBucket,
    Algorithm::LeakyBucket,
];

/// Charges hits of cost 1 at `NOW` until one is denied; how many were admitted, and the
/// state left.
fn admitted_until_denied(limit: &Limit, mut state: Option<State>) -> (u32, Option<State>) {
    for admitted in 0..10_000 {
        let outcome = limit.decide(state.as_ref(), 1, NOW);
        if !outcome.decision.admitted {
            return (admitted, state);
        }
        if let Some((new, _)) = outcome.new_state {
            state = Some(new);
        }
    }
    (10_000, state)
}

fn limit_of(algorithm: Algorithm, requests: u32) -> Limit {
    let mut limit = Limit::new(Counting::of(algorithm), requests, Unit::Minute);
    if let Some(burst) = algorithm.default_burst(requests) {
        limit.counting = limit.counting.with_burst(Some(burst.max(requests)));
    }
    limit
}

#[test]
fn a_credit_admits_that_many_more_now_on_windows_and_buckets() {
    for algorithm in CREDITED {
        let limit = limit_of(algorithm, 10);
        let (spent, state) = admitted_until_denied(&limit, None);
        assert_eq!(spent, 10, "{algorithm}");
        let (credited, _) = limit.credit(state.as_ref(), 4, NOW).expect("takes credit");
        let (again, _) = admitted_until_denied(&limit, Some(credited));
        assert_eq!(again, 4, "{algorithm}: a credit of 4 admits 4 more");
    }
}

#[test]
fn a_credit_never_gives_more_than_an_empty_window_or_a_full_bucket() {
    for algorithm in CREDITED {
        let limit = limit_of(algorithm, 10);
        let (_, state) = admitted_until_denied(&limit, None);
        let (credited, _) = limit
            .credit(state.as_ref(), 1_000, NOW)
            .expect("takes credit");
        let (again, _) = admitted_until_denied(&limit, Some(credited));
        assert_eq!(again, 10, "{algorithm}");
    }
}

#[test]
fn algorithms_without_a_count_to_give_back_refuse_with_a_reason() {
    for algorithm in [
        Algorithm::SlidingWindowLog,
        Algorithm::WarmUp,
        Algorithm::Concurrency,
    ] {
        let limit = limit_of(algorithm, 10);
        let refusal = limit.credit(None, 1, NOW).expect_err("refused");
        assert!(refusal.contains(algorithm.as_str()), "{refusal}");
        assert_eq!(algorithm.credit_refusal(), Some(refusal));
    }
}
