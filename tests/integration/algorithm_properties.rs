//! Properties of every algorithm over random sequences of (time step, cost): the documented
//! bound on what is admitted, no state change on denial or cost 0, remaining never growing
//! without time passing, a clock going back never admitting more than a clock standing, and,
//! for limits taking debt, every cost charged and the retry time exact.

use proptest::prelude::*;
use sluice_core::algorithm::warm_up::WarmUpParameters;
use sluice_core::algorithm::State;
use sluice_core::limit::{Algorithm, Counting, Decision, Limit};

use crate::support::scenario::{limit, scenario};

const START_US: u64 = 1_700_000_000_000_000;

/// Runs hits at START_US + cumulative steps; returns (time, cost, decision) per hit.
fn replay(limit: &Limit, steps: &[(u64, u64)]) -> Vec<(u64, u64, Decision)> {
    let mut state: Option<State> = None;
    let mut now = START_US;
    let mut out = Vec::new();
    for &(step, cost) in steps {
        now += step;
        let outcome = limit.decide(state.as_ref(), cost, now);
        assert!(
            outcome.decision.admitted && cost > 0 || outcome.new_state.is_none(),
            "a denial or cost 0 changed the state: {outcome:?}"
        );
        if let Some((new_state, _)) = outcome.new_state {
            state = Some(new_state);
        }
        out.push((now, cost, outcome.decision));
    }
    out
}

fn admitted(events: &[(u64, u64, Decision)]) -> Vec<(u64, u64)> {
    events
        .iter()
        .filter(|e| e.2.admitted)
        .map(|e| (e.0, e.1))
        .collect()
}

/// The most cost admitted in any span [t, t + length) starting at an admitted hit.
fn most_in_any_span(admitted: &[(u64, u64)], length: u64) -> u64 {
    admitted
        .iter()
        .map(|&(t, _)| {
            admitted
                .iter()
                .filter(|e| e.0 >= t && e.0 < t + length)
                .map(|e| e.1)
                .sum()
        })
        .max()
        .unwrap_or(0)
}

/// The most cost admitted in any epoch-aligned window [kW, (k+1)W).
fn most_in_an_aligned_window(admitted: &[(u64, u64)], period: u64) -> u64 {
    admitted
        .iter()
        .map(|&(t, _)| {
            let start = t - t % period;
            admitted
                .iter()
                .filter(|e| e.0 >= start && e.0 < start + period)
                .map(|e| e.1)
                .sum()
        })
        .max()
        .unwrap_or(0)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn fixed_window_admits_at_most_l_per_window_and_2l_across_a_boundary((l, m, _b, steps) in scenario(60)) {
        let limit = limit(Algorithm::FixedWindow, l, m, None);
        let period = limit.period_us();
        let admitted = admitted(&replay(&limit, &steps));
        prop_assert!(most_in_an_aligned_window(&admitted, period) <= u64::from(l));
        prop_assert!(most_in_any_span(&admitted, period) <= 2 * u64::from(l));
    }

    #[test]
    fn sliding_log_admits_at_most_l_in_any_window((l, m, _b, steps) in scenario(60)) {
        let limit = limit(Algorithm::SlidingWindowLog, l, m, None);
        let admitted = admitted(&replay(&limit, &steps));
        prop_assert!(most_in_any_span(&admitted, limit.period_us()) <= u64::from(l));
    }

    #[test]
    fn sliding_counter_admits_at_most_l_per_window_and_under_2l_in_any((l, m, _b, steps) in scenario(60)) {
        let limit = limit(Algorithm::SlidingWindowCounter, l, m, None);
        let period = limit.period_us();
        let admitted = admitted(&replay(&limit, &steps));
        prop_assert!(most_in_an_aligned_window(&admitted, period) <= u64::from(l));
        let most = most_in_any_span(&admitted, period);
        prop_assert!(most < 2 * u64::from(l) || most == 0, "{most} in one window, L = {l}");
    }

    #[test]
    fn buckets_admit_at_most_burst_plus_rate_times_t((l, m, b, steps) in scenario(60)) {
        for algorithm in [Algorithm::TokenBucket, Algorithm::LeakyBucket] {
            let limit = limit(algorithm, l, m, Some(b));
            let period = u128::from(limit.period_us());
            let admitted = admitted(&replay(&limit, &steps));
            for i in 0..admitted.len() {
                let mut sum = 0u128;
                for j in i..admitted.len() {
                    sum += u128::from(admitted[j].1);
                    let elapsed = u128::from(admitted[j].0 - admitted[i].0);
                    let bound = u128::from(b) + u128::from(l) * elapsed / period;
                    prop_assert!(sum <= bound, "{algorithm}: {sum} > {bound}");
                }
            }
        }
    }

    #[test]
    fn token_and_leaky_buckets_of_one_burst_decide_alike((l, m, b, steps) in scenario(60)) {
        let token = replay(&limit(Algorithm::TokenBucket, l, m, Some(b)), &steps);
        let leaky = replay(&limit(Algorithm::LeakyBucket, l, m, Some(b)), &steps);
        for (t, k) in token.iter().zip(&leaky) {
            prop_assert_eq!((t.2.admitted, t.2.remaining), (k.2.admitted, k.2.remaining));
        }
    }

    #[test]
    fn remaining_never_grows_without_time_passing((l, m, b, steps) in scenario(60)) {
        for &algorithm in Algorithm::ALL {
            let limit = limit(algorithm, l, m, Some(b));
            let events = replay(&limit, &steps);
            for pair in events.windows(2) {
                if pair[0].0 == pair[1].0 {
                    prop_assert!(pair[1].2.remaining <= pair[0].2.remaining, "{algorithm}: {pair:?}");
                }
            }
        }
    }

    #[test]
    fn cost_zero_is_always_admitted_and_changes_nothing((l, m, b, steps) in scenario(60)) {
        for &algorithm in Algorithm::ALL {
            let limit = limit(algorithm, l, m, Some(b));
            for (_, cost, decision) in replay(&limit, &steps) {
                if cost == 0 {
                    prop_assert!(decision.admitted, "{algorithm}");
                }
            }
        }
    }

    #[test]
    fn a_clock_going_back_never_admits_more((l, m, b, steps) in scenario(60), back in 1u64..5_000_000, cost in 0u64..=3) {
        for &algorithm in Algorithm::ALL {
            let limit = limit(algorithm, l, m, Some(b));
            let mut state: Option<State> = None;
            let mut now = START_US;
            for &(step, hit_cost) in &steps {
                now += step;
                if let Some((s, _)) = limit.decide(state.as_ref(), hit_cost, now).new_state {
                    state = Some(s);
                }
            }
            let standing = limit.decide(state.as_ref(), cost, now).decision;
            let earlier = limit.decide(state.as_ref(), cost, now - back).decision;
            prop_assert!(!earlier.admitted || standing.admitted, "{algorithm}: back {back} admitted, standing not");
            let standing = limit.decide(state.as_ref(), 0, now).decision;
            let earlier = limit.decide(state.as_ref(), 0, now - back).decision;
            prop_assert!(earlier.remaining <= standing.remaining, "{algorithm}: {earlier:?} vs {standing:?}");
        }
    }

    #[test]
    fn a_denied_hit_waits_exactly_its_retry_time((l, m, b, steps) in scenario(60)) {
        // When a hit is denied, the same hit at now + retry_after fits, and one microsecond
        // earlier it does not (for costs that can ever fit).
        for &algorithm in Algorithm::ALL {
            let limit = limit(algorithm, l, m, Some(b));
            let mut state: Option<State> = None;
            let mut now = START_US;
            for &(step, cost) in &steps {
                now += step;
                let outcome = limit.decide(state.as_ref(), cost, now);
                let d = outcome.decision;
                if !d.admitted && cost <= limit.capacity() {
                    let at = limit.decide(state.as_ref(), cost, now + d.retry_after_us).decision;
                    prop_assert!(at.admitted, "{algorithm}: not admitted after retry {d:?}");
                    if d.retry_after_us > 0 {
                        let before = limit.decide(state.as_ref(), cost, now + d.retry_after_us - 1).decision;
                        prop_assert!(!before.admitted, "{algorithm}: admitted before retry {d:?}");
                    }
                }
                if let Some((s, _)) = outcome.new_state {
                    state = Some(s);
                }
            }
        }
    }

    #[test]
    fn in_debt_every_cost_is_charged_and_a_hit_of_cost_1_waits_exactly_its_retry_time(
        (l, m, b, steps) in scenario(60),
        report in 0u64..=30,
    ) {
        // A limit taking debt: every hit of cost > 0 changes the state (admitted or not); a
        // denied one is told when a hit of cost 1 fits, exactly. (A concurrency limit takes
        // none: refused at load.)
        for &algorithm in Algorithm::ALL.iter().filter(|a| a.owes()) {
            let limit = Limit { debt: true, ..limit(algorithm, l.max(1), m, Some(b)) };
            let mut state: Option<State> = None;
            let mut now = START_US;
            let hits = steps.iter().copied().chain(std::iter::once((0, report)));
            for (step, cost) in hits {
                now += step;
                let outcome = limit.decide(state.as_ref(), cost, now);
                prop_assert_eq!(outcome.new_state.is_some(), cost > 0, "{}: {:?}", algorithm, outcome);
                if let Some((s, _)) = outcome.new_state {
                    state = Some(s);
                }
                let d = outcome.decision;
                if !d.admitted && cost > 0 {
                    let at = limit.decide(state.as_ref(), 1, now + d.retry_after_us).decision;
                    prop_assert!(at.admitted, "{}: cost 1 not admitted after retry {:?}", algorithm, d);
                    if d.retry_after_us > 0 {
                        let before = limit.decide(state.as_ref(), 1, now + d.retry_after_us - 1).decision;
                        prop_assert!(!before.admitted, "{}: cost 1 admitted before retry {:?}", algorithm, d);
                    }
                }
            }
        }
    }

    #[test]
    fn in_debt_the_total_charged_is_the_total_reported((l, _m, b, steps) in scenario(60)) {
        // A fixed window taking debt, over one window: its count is every cost, admitted or not.
        let limit = Limit { debt: true, ..limit(Algorithm::FixedWindow, l, 100, Some(b)) };
        let mut state: Option<State> = None;
        let mut now = START_US - START_US % limit.period_us();
        let mut reported = 0;
        for &(step, cost) in steps.iter().take(10) {
            now += step / 100;
            reported += cost;
            if let Some((s, _)) = limit.decide(state.as_ref(), cost, now).new_state {
                state = Some(s);
            }
        }
        let left = limit.decide(state.as_ref(), 0, now).decision.remaining;
        prop_assert_eq!(u64::from(left), u64::from(l).saturating_sub(reported));
    }
}

/// `warm_up` at `l` per `m` seconds, warming up over `warmup_us` from `cold` times slower.
fn warm_up(l: u32, m: u32, warmup_us: u64, cold: u32) -> Limit {
    let own = WarmUpParameters {
        warmup_us: Some(warmup_us),
        cold_factor: Some(cold),
    };
    Limit {
        counting: Counting::WarmUp(own),
        ..limit(Algorithm::WarmUp, l, m, None)
    }
}

/// A client that sends a hit of cost 1 whenever the limit lets it, from `start` on a key at
/// `state`, for `hits` hits; returns the admission times and the state after.
fn saturate(
    limit: &Limit,
    mut state: Option<State>,
    start: u64,
    hits: usize,
) -> (Vec<u64>, Option<State>) {
    let mut now = start;
    let mut times = Vec::new();
    while times.len() < hits {
        let outcome = limit.decide(state.as_ref(), 1, now);
        if outcome.decision.admitted {
            times.push(now);
            state = outcome.new_state.map(|(s, _)| s);
        } else {
            now += outcome.decision.retry_after_us;
        }
    }
    (times, state)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn warm_up_is_never_faster_than_the_stable_rate(
        (l, m, _, steps) in scenario(80),
        warm in 1u64..=4,
        cold in 1u32..=6,
    ) {
        let period = u64::from(m) * 1_000_000;
        let limit = warm_up(l, m, warm * period / 2, cold);
        let stable = period.div_ceil(u64::from(l));
        let hits: Vec<(u64, u64)> = admitted(&replay(&limit, &steps))
            .into_iter()
            .filter(|&(_, cost)| cost > 0)
            .collect();
        for pair in hits.windows(2) {
            let ((t0, cost), (t1, _)) = (pair[0], pair[1]);
            prop_assert!(t1 >= t0 + cost * stable, "{pair:?}, stable interval {stable}");
        }
    }

    #[test]
    fn after_a_warm_up_of_idleness_the_ramp_follows_the_trapezoid(
        l in 1u32..=40,
        m in 1u32..=3,
        warm in 1u64..=6,
        cold in 1u32..=6,
        idle_more in 0u64..3_000_000,
    ) {
        let period = u64::from(m) * 1_000_000;
        let limit = warm_up(l, m, warm * period / 2, cold);
        let stable = period.div_ceil(u64::from(l));
        let n = (warm * period / 2 / stable).max(1);
        let warmup = n * stable;
        // Above the threshold: 2N / (1 + cold) permits take the warm-up period.
        let above = (2 * n).div_ceil(u64::from(1 + cold));
        let hits = usize::try_from(above + n + 3).unwrap();
        // A key never seen, then the same key after saturating it and idling a warm-up.
        let (fresh, state) = saturate(&limit, None, START_US, hits);
        let rested = fresh[hits - 1] + warmup * 4 + idle_more;
        let (again, _) = saturate(&limit, state, rested, hits);
        for times in [&fresh, &again] {
            let start = times[0];
            let in_warm_up = times.iter().filter(|&&t| t < start + warmup).count() as u64;
            prop_assert!(in_warm_up <= above + 1, "{in_warm_up} admitted in the warm-up, {above} above the threshold");
            for pair in times.windows(2) {
                let interval = pair[1] - pair[0];
                prop_assert!(interval <= u64::from(cold) * stable + 1, "an interval above the coldest: {interval}");
                if pair[0] >= start + warmup {
                    prop_assert_eq!(interval, stable, "past the warm-up, the stable rate");
                }
            }
            prop_assert!(times.windows(2).all(|p| p[1] - p[0] >= stable));
        }
        // Idle for a warm-up, a key is as cold as one never seen.
        let relative = |times: &[u64]| times.iter().map(|t| t - times[0]).collect::<Vec<_>>();
        prop_assert_eq!(relative(&fresh), relative(&again));
    }

    #[test]
    fn a_warm_up_client_that_never_idles_sees_the_stable_rate(
        l in 1u32..=40,
        m in 1u32..=3,
        cold in 1u32..=6,
    ) {
        let period = u64::from(m) * 1_000_000;
        let limit = warm_up(l, m, period, cold);
        let stable = period.div_ceil(u64::from(l));
        // Warm it up, then keep using it: every interval after is exactly the stable one.
        let (warming, state) = saturate(&limit, None, START_US, 3 * l as usize + 3);
        let next = warming[warming.len() - 1] + stable;
        let (steady, _) = saturate(&limit, state, next, 2 * l as usize + 2);
        prop_assert!(steady.windows(2).all(|p| p[1] - p[0] == stable), "{steady:?}");
    }
}
