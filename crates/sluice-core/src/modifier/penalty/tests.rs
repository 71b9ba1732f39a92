use proptest::prelude::*;

use super::*;

const SECOND: u64 = 1_000_000;

fn policy(after: u32, within_s: u64, block_s: u64, factor_milli: u32, max_s: u64) -> Policy {
    Policy {
        after,
        within_us: within_s * SECOND,
        block_ms: block_s * 1000,
        factor_milli,
        max_block_ms: max_s * 1000,
        forget_us: 600 * SECOND,
    }
}

/// The limit's own answer: denied or admitted, charged or not, what remained.
fn limit(admitted: bool, charged: bool, remaining: u32) -> Outcome {
    Outcome {
        decision: Decision {
            admitted,
            remaining,
            retry_after_us: if admitted { 0 } else { SECOND },
            ..Decision::default()
        },
        new_state: charged.then(|| {
            let window = crate::algorithm::fixed_window::Window {
                start_us: 0,
                count: 1,
            };
            (crate::algorithm::State::FixedWindow(window), 0)
        }),
    }
}

/// Denials at `times` (seconds), each decided on the record the last left; the decisions.
fn denials(policy: &Policy, times: &[u64]) -> (Vec<Decision>, Option<Record>) {
    let mut record = None;
    let mut decisions = Vec::new();
    for &at in times {
        let (outcome, next) = decide(policy, record.as_ref(), at * SECOND, || {
            limit(false, false, 0)
        });
        if let Some(next) = next {
            record = Some(next);
        }
        decisions.push(outcome.decision);
    }
    (decisions, record)
}

#[test]
fn after_denials_within_the_period_block_and_the_block_grows() {
    // 3 denials within 60 s block for 10 s, then 20 s, 40 s, held to 50 s.
    let policy = policy(3, 60, 10, 2_000, 50);
    let (decisions, record) = denials(&policy, &[0, 1, 2, 3, 12, 13, 14, 40, 41, 42]);
    let until: Vec<u64> = decisions
        .iter()
        .map(|d| Penalized::of(d).until_us / SECOND)
        .collect();
    // The third denial imposes 2 + 10; a request at 3 s is blocked; from 12 s the limit
    // decides again and the third denial after the block imposes 14 + 20.
    assert_eq!(until, [0, 0, 12, 12, 0, 0, 34, 0, 0, 82]);
    assert!(Penalized::of(&decisions[2]).imposed && !Penalized::of(&decisions[3]).imposed);
    assert_eq!(decisions[3].retry_after_us, 9 * SECOND);
    assert_eq!(decisions[3].remaining, 0);
    assert_eq!(Penalized::of(&decisions[9]).offence, 3);
    let record = record.expect("remembered");
    assert_eq!(record.last_block_ms, 40_000);
    assert_eq!(record.remembered_until_us, 82 * SECOND + policy.forget_us);
}

#[test]
fn strikes_outside_the_period_do_not_count() {
    let policy = policy(3, 10, 10, 2_000, 50);
    let (decisions, _) = denials(&policy, &[0, 5, 11, 16, 18]);
    // 0 and 5, then 11 (0 is out: 5, 11), 16 (5 is out: 11, 16), 18 (11, 16, 18): blocked.
    let imposed: Vec<bool> = decisions.iter().map(|d| Penalized::of(d).imposed).collect();
    assert_eq!(imposed, [false, false, false, false, true]);
}

#[test]
fn a_quiet_client_is_forgotten_and_starts_again_at_the_first_block() {
    let policy = policy(1, 10, 10, 2_000, 100);
    // Blocked at 0 (10 s), at 10 (20 s: still remembered), then quiet: the block ended at
    // 30 s, so from 630 s the client is forgotten.
    let (decisions, _) = denials(&policy, &[0, 10, 629, 2000]);
    let blocks: Vec<u64> = decisions
        .iter()
        .map(|d| d.retry_after_us / SECOND)
        .collect();
    assert_eq!(blocks, [10, 20, 40, 10]);
}

#[test]
fn a_report_landing_in_debt_with_room_left_is_no_strike() {
    let policy = policy(1, 60, 10, 2_000, 50);
    let (outcome, record) = decide(&policy, None, 0, || limit(false, true, 5));
    assert!(record.is_none());
    assert_eq!(Penalized::of(&outcome.decision), Penalized::default());
    // In debt already (nothing remained), a charged denial is one.
    let (outcome, record) = decide(&policy, None, 0, || limit(false, true, 0));
    assert!(record.is_some() && Penalized::of(&outcome.decision).imposed);
}

#[test]
fn a_blocked_client_never_reaches_its_limit() {
    let policy = policy(1, 60, 10, 2_000, 50);
    let (_, record) = decide(&policy, None, 0, || limit(false, false, 0));
    let (outcome, changed) = decide(&policy, record.as_ref(), 5 * SECOND, || {
        panic!("the limit was asked while the client is blocked")
    });
    assert!(changed.is_none() && outcome.new_state.is_none());
    assert!(!outcome.decision.admitted);
    // At the block's end the limit alone decides.
    let (outcome, changed) = decide(&policy, record.as_ref(), 10 * SECOND, || {
        limit(true, true, 3)
    });
    assert!(outcome.decision.admitted && changed.is_none());
    assert_eq!(Penalized::of(&outcome.decision), Penalized::default());
}

/// One step of a client: seconds since the last, and whether its limit denies it.
fn steps() -> impl Strategy<Value = Vec<(u64, bool)>> {
    prop::collection::vec((0u64..40, prop::bool::weighted(0.7)), 1..120)
}

proptest! {
    /// No block without `after` strikes within the period; a block never outlasts its end;
    /// blocks stay between `block` and `max_block`, each the last times the factor; a client
    /// quiet for `forget_after` starts again at the first block.
    #[test]
    fn blocks_follow_the_policy(
        steps in steps(),
        after in 1u32..5,
        within_s in 1u64..60,
        block_s in 1u64..30,
        factor_milli in 1000u32..3000,
        max_extra_s in 0u64..200,
        forget_s in 60u64..400,
    ) {
        let policy = Policy {
            forget_us: forget_s * SECOND,
            ..policy(after, within_s, block_s, factor_milli, block_s + max_extra_s)
        };
        let (mut record, mut now) = (None::<Record>, 0u64);
        // The model: strikes since the last block, the current block's end, the last
        // block's length, and until when the client is remembered.
        let (mut strikes, mut block_end, mut last_block, mut remembered_until) =
            (Vec::<u64>::new(), 0u64, 0u64, 0u64);
        for (gap, denies) in steps {
            now += gap * SECOND;
            let (outcome, next) = decide(&policy, record.as_ref(), now, || limit(!denies, false, 0));
            let decision = outcome.decision;
            if now < block_end {
                prop_assert!(!decision.admitted);
                prop_assert_eq!(Penalized::of(&decision).until_us, block_end);
                prop_assert!(next.is_none());
                continue;
            }
            if now >= remembered_until {
                // Quiet long enough: forgotten.
                strikes.clear();
                last_block = 0;
            }
            if !denies {
                prop_assert!(decision.admitted);
                prop_assert_eq!(Penalized::of(&decision), Penalized::default());
                continue;
            }
            strikes.retain(|&at| now - at < policy.within_us);
            strikes.push(now);
            if Penalized::of(&decision).imposed {
                prop_assert!(strikes.len() >= after as usize);
                let length = Penalized::of(&decision).until_us - now;
                let expected_ms = if last_block == 0 {
                    policy.block_ms
                } else {
                    (last_block / 1000 * u64::from(factor_milli) / 1000).min(policy.max_block_ms)
                };
                prop_assert_eq!(length, expected_ms * 1000);
                prop_assert!(length <= policy.max_block_ms * 1000);
                prop_assert!(length >= policy.block_ms * 1000);
                block_end = Penalized::of(&decision).until_us;
                last_block = length;
                strikes.clear();
                remembered_until = block_end + policy.forget_us;
            } else {
                prop_assert!(strikes.len() < after as usize);
                prop_assert_eq!(Penalized::of(&decision), Penalized::default());
                let kept = if last_block > 0 { policy.forget_us } else { policy.within_us };
                remembered_until = now + kept;
            }
            record = next.or(record);
        }
    }
}
