//! The algorithms' vector tables: a limit, the hits of one key in time order, and what each
//! hit got (admitted, remaining, reset, retry), for every algorithm whose rules are its public
//! decisions alone (warm_up's tests, which read its ramp, stay in its own file).

use super::*;
use crate::limit::{Limit, Unit};

/// A second, in µs.
pub const S: u64 = 1_000_000;

/// A limit of `requests` per second counted by `algorithm`, with `burst`.
pub fn per_second(algorithm: Algorithm, requests: u32, burst: Option<u32>) -> Limit {
    Limit::new(
        Counting::of(algorithm).with_burst(burst),
        requests,
        Unit::Second,
    )
}

/// Runs (time in µs, cost) on a fresh key; returns (admitted, remaining, reset, retry).
pub fn run(limit: Limit, hits: &[(u64, u64)]) -> Vec<(bool, u32, u64, u64)> {
    let mut state: Option<State> = None;
    hits.iter()
        .map(|&(now, cost)| {
            let outcome = limit.decide(state.as_ref(), cost, now);
            if let Some((new_state, _)) = outcome.new_state {
                state = Some(new_state);
            }
            let d = outcome.decision;
            (d.admitted, d.remaining, d.reset_after_us, d.retry_after_us)
        })
        .collect()
}

/// `fixed_window`.
mod fixed_window {
    use super::{run, S};
    use crate::limit::Limit;
    use crate::limit::Unit;

    #[test]
    fn counts_to_the_limit_then_denies_until_the_next_window() {
        // L = 3 per second. Window [10 s, 11 s).
        let limit = Limit::fixed_window(3, Unit::Second);
        let got = run(
            limit,
            &[
                (10 * S, 1),           // count 1, 2 left, 1 s to reset
                (10 * S + 250_000, 1), // count 2
                (10 * S + 500_000, 1), // count 3 = L: exactly at the limit is admitted
                (10 * S + 750_000, 1), // 4 > 3: denied, retry at 11 s
                (11 * S, 1),           // window edge is inclusive at the start: fresh window
            ],
        );
        assert_eq!(
            got,
            vec![
                (true, 2, S, 0),
                (true, 1, 750_000, 0),
                (true, 0, 500_000, 0),
                (false, 0, 250_000, 250_000),
                (true, 2, S, 0),
            ]
        );
    }

    #[test]
    fn cost_zero_reads_and_oversized_cost_is_denied_without_charge() {
        let limit = Limit::fixed_window(5, Unit::Minute);
        let got = run(limit, &[(0, 2), (1, 0), (2, 6), (3, 3), (4, 0)]);
        assert_eq!(got[1], (true, 3, 60 * S - 1, 0)); // cost 0: reads 3 left
        assert!(!got[2].0); // 6 > 5 never fits
        assert_eq!(got[2].1, 3); // and charged nothing
        assert_eq!(got[3].1, 0); // 3 more fit exactly
        assert_eq!(got[4], (true, 0, 60 * S - 4, 0));
    }

    #[test]
    fn unit_multiplier_widens_the_window() {
        let mut limit = Limit::fixed_window(1, Unit::Second);
        limit.unit_multiplier = 30;
        // Window [0, 30 s): the second hit at 29.9 s is denied, the third at 30 s admitted.
        let got = run(limit, &[(0, 1), (29 * S + 900_000, 1), (30 * S, 1)]);
        assert_eq!(got[1], (false, 0, 100_000, 100_000));
        assert_eq!(got[2], (true, 0, 30 * S, 0));
    }

    #[test]
    fn zero_limit_blocks_everything() {
        let limit = Limit::fixed_window(0, Unit::Second);
        assert_eq!(run(limit, &[(0, 1)]), vec![(false, 0, S, S)]);
    }
}

/// `sliding_window_log`.
mod sliding_window_log {
    use super::{per_second, run, S};
    use crate::limit::{Algorithm, Unit};

    #[test]
    fn window_slides_with_each_entry() {
        // L = 2 per second.
        let got = run(
            per_second(Algorithm::SlidingWindowLog, 2, None),
            &[
                (10 * S, 1),           // entries {10.0}: 1 left, empty at 11.0
                (10 * S + 600_000, 1), // {10.0, 10.6}: at the limit, empty at 11.6
                (10 * S + 900_000, 1), // full: 10.0 leaves at 11.0 -> retry 0.1 s
                (11 * S, 1),           // 10.0 + 1 s = 11.0 is out (exclusive): admitted
                (11 * S + 500_000, 1), // {10.6, 11.0} full: 10.6 leaves at 11.6 -> 0.1 s
                (11 * S + 500_000, 0), // cost 0 reads: 0 left, admitted
            ],
        );
        assert_eq!(
            got,
            vec![
                (true, 1, S, 0),
                (true, 0, S, 0),
                (false, 0, 700_000, 100_000),
                (true, 0, S, 0),
                (false, 0, 500_000, 100_000),
                (true, 0, 500_000, 0),
            ]
        );
    }

    #[test]
    fn rejects_across_a_fixed_window_boundary() {
        // Two at 0.9 s fill the limit; at 1.1 s a fixed window would start afresh, the log not.
        let got = run(
            per_second(Algorithm::SlidingWindowLog, 2, None),
            &[(900_000, 2), (1_100_000, 1), (1_900_000, 1)],
        );
        assert_eq!(got[1], (false, 0, 800_000, 800_000));
        assert_eq!(got[2], (true, 1, S, 0));
    }

    #[test]
    fn cost_larger_than_the_limit_never_fits_and_idle_refills_fully() {
        let got = run(
            per_second(Algorithm::SlidingWindowLog, 3, None),
            &[(0, 4), (0, 3), (S, 3)],
        );
        assert_eq!(got[0], (false, 3, 0, S));
        assert_eq!(got[1], (true, 0, S, 0));
        assert_eq!(got[2], (true, 0, S, 0), "after W idle, all 3 are back");
    }

    #[test]
    fn unit_multiplier_widens_the_window() {
        let mut five_minutes = per_second(Algorithm::SlidingWindowLog, 1, None);
        five_minutes.unit = Unit::Minute;
        five_minutes.unit_multiplier = 5;
        let got = run(five_minutes, &[(0, 1), (299 * S, 1), (300 * S, 1)]);
        assert_eq!(got[1], (false, 0, S, S));
        assert!(got[2].0);
    }
}

/// `sliding_window_counter`.
mod sliding_window_counter {
    use super::{per_second, run, S};
    use crate::limit::Algorithm;

    #[test]
    fn the_previous_window_is_weighted_by_its_overlap() {
        // L = 10 per second.
        let got = run(
            per_second(Algorithm::SlidingWindowCounter, 10, None),
            &[
                (10 * S + 500_000, 10), // window [10, 11): cur 10 = L, admitted; empty at 12.0
                (10 * S + 900_000, 1),  // 10 + 1 > 10: denied. Next window, 1 fits once
                //                         10 x (1 - e) + 1 <= 10, e >= 0.1: retry at 11.1 -> 0.2 s
                (11 * S + 250_000, 1), // prev 10 weighs 7.5; 7.5 + 1 = 8.5 <= 10: admitted,
                //                        remaining floor(10 - 8.5) = 1; empty at 13.0
                (11 * S + 250_000, 2), // 7.5 + 1 + 2 = 10.5 > 10: denied; retry when
                //                        10 x (1 - e) <= 10 - 1 - 2 = 7: e >= 0.3 -> 0.05 s
                (11 * S + 250_000, 0), // cost 0 reads: 1 left, as after the third hit
            ],
        );
        assert_eq!(
            got,
            vec![
                (true, 0, 3 * S / 2, 0),
                (false, 0, 1_100_000, 200_000),
                (true, 1, 1_750_000, 0),
                (false, 1, 1_750_000, 50_000),
                (true, 1, 1_750_000, 0),
            ]
        );
    }

    #[test]
    fn a_cost_beyond_the_limit_never_fits_and_idle_refills_fully() {
        let got = run(
            per_second(Algorithm::SlidingWindowCounter, 5, None),
            &[(0, 6), (0, 5), (2 * S, 5)],
        );
        assert_eq!(got[0], (false, 5, 0, S));
        assert_eq!(got[1], (true, 0, 2 * S, 0));
        assert_eq!(
            got[2],
            (true, 0, 2 * S, 0),
            "two windows later the old count is gone"
        );
    }

    #[test]
    fn unit_multiplier_widens_the_windows() {
        let mut thirty_seconds = per_second(Algorithm::SlidingWindowCounter, 2, None);
        thirty_seconds.unit_multiplier = 30;
        // At 45 s: prev [0, 30) = 2 weighs 2 x 15/30 = 1; one more fits, a second not.
        let got = run(thirty_seconds, &[(0, 2), (45 * S, 1), (45 * S, 1)]);
        assert_eq!(got[1], (true, 0, 45 * S, 0));
        assert!(!got[2].0);
    }
}

/// `token_bucket`.
mod token_bucket {
    use super::{per_second, run, S};
    use crate::limit::{Algorithm, Unit};

    #[test]
    fn burst_then_refill_at_the_rate() {
        // 4 per second (a token every 0.25 s), burst defaults to 4.
        let got = run(
            per_second(Algorithm::TokenBucket, 4, None),
            &[
                (0, 4),       // the whole bucket at once; full again in 1 s
                (0, 1),       // empty: next token in 0.25 s
                (100_000, 0), // cost 0 reads: 0.4 tokens, 0 whole; full in 0.9 s
                (250_000, 1), // one token has come back; taken
                (S, 2),       // 3 tokens back by 1.0 s: take 2, 1 left; full in 0.75 s
                (10 * S, 0),  // idle: full (4), nothing to wait for
            ],
        );
        assert_eq!(
            got,
            vec![
                (true, 0, S, 0),
                (false, 0, S, 250_000),
                (true, 0, 900_000, 0),
                (true, 0, S, 0),
                (true, 1, 750_000, 0),
                (true, 4, 0, 0),
            ]
        );
    }

    #[test]
    fn burst_sets_the_capacity() {
        // 1 per second with a burst of 3: three at once, then one per second.
        let got = run(
            per_second(Algorithm::TokenBucket, 1, Some(3)),
            &[(0, 3), (0, 1), (S, 1), (S, 1), (0, 4)],
        );
        assert_eq!(got[0], (true, 0, 3 * S, 0));
        assert_eq!(got[1], (false, 0, 3 * S, S));
        assert_eq!(got[2], (true, 0, 3 * S, 0));
        assert!(!got[3].0);
        assert_eq!(
            got[4],
            (false, 0, 3 * S, S),
            "4 > burst never fits; time going back refills nothing"
        );
    }

    #[test]
    fn unit_multiplier_slows_the_refill() {
        let mut two_per_minute = per_second(Algorithm::TokenBucket, 2, None);
        two_per_minute.unit = Unit::Minute;
        two_per_minute.unit_multiplier = 1;
        let got = run(two_per_minute, &[(0, 2), (29 * S, 1), (30 * S, 1)]);
        assert_eq!(got[1], (false, 0, 31 * S, S));
        assert_eq!(got[2], (true, 0, 60 * S, 0));
    }
}

/// `leaky_bucket`.
mod leaky_bucket {
    use super::{per_second, run, S};
    use crate::limit::{Algorithm, Unit};

    #[test]
    fn gcra_burst_five_at_one_per_second() {
        let mut hits = vec![(0, 1); 6]; // five at once pass, the sixth waits one second
        hits.extend([(3 * S, 1); 4]); // 3 s after the burst, three fit and a fourth not
        let got = run(per_second(Algorithm::LeakyBucket, 1, Some(5)), &hits);
        let admitted: Vec<bool> = got.iter().map(|g| g.0).collect();
        assert_eq!(
            admitted,
            [true, true, true, true, true, false, true, true, true, false]
        );
        assert_eq!(got[0], (true, 4, S, 0));
        assert_eq!(got[4], (true, 0, 5 * S, 0));
        assert_eq!(got[5], (false, 0, 5 * S, S));
        // At 3 s the bucket holds 5 - 3 = 2; three more fill it to 5.
        assert_eq!(got[8], (true, 0, 5 * S, 0));
        assert_eq!(got[9], (false, 0, 5 * S, S));
        // Idle until the bucket has drained: all 5 fit again, nothing to wait for.
        let drained = run(
            per_second(Algorithm::LeakyBucket, 1, Some(5)),
            &[(0, 5), (5 * S, 0), (5 * S, 5)],
        );
        assert_eq!(drained[1], (true, 5, 0, 0));
        assert_eq!(drained[2], (true, 0, 5 * S, 0));
    }

    #[test]
    fn default_burst_paces_strictly() {
        // 10 per second, burst 1: one every 0.1 s.
        let got = run(
            per_second(Algorithm::LeakyBucket, 10, None),
            &[
                (0, 1),
                (50_000, 1),
                (100_000, 1),
                (100_000, 0),
                (150_000, 2),
            ],
        );
        assert_eq!(got[0], (true, 0, 100_000, 0));
        assert_eq!(got[1], (false, 0, 50_000, 50_000));
        assert_eq!(got[2], (true, 0, 100_000, 0), "exactly one interval later");
        assert_eq!(got[3], (true, 0, 100_000, 0), "cost 0 reads");
        assert_eq!(got[4], (false, 0, 50_000, S), "2 > burst never fits");
    }

    #[test]
    fn unit_multiplier_stretches_the_interval() {
        let mut one_per_five_minutes = per_second(Algorithm::LeakyBucket, 1, None);
        one_per_five_minutes.unit = Unit::Minute;
        one_per_five_minutes.unit_multiplier = 5;
        let got = run(one_per_five_minutes, &[(0, 1), (299 * S, 1), (300 * S, 1)]);
        assert_eq!(got[1], (false, 0, S, S));
        assert!(got[2].0);
    }
}
