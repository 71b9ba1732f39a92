//! The admin API's read held to the store contract: after any sequence of requests (every
//! algorithm, debt, penalties, reservations, both ways of charging), both stores read every
//! limit alike, from the key its modifiers give it and without setting one off; the read is
//! what a request of cost 0 is told; and `used` is what the state holds, past the limit
//! included.

use std::sync::atomic::{AtomicUsize, Ordering};

use proptest::prelude::*;

use super::{check_cases, multi_hit_scenario, Fixture, Ran};
use sluice_core::engine::Charging;
use sluice_core::limit::{Hit, Limit, Role};
use sluice_core::modifier::Modifiers;
use sluice_store::admin::{AdminStore, Reading};
use sluice_store::Store;

/// One limit read after a sequence: both stores' readings, what a request of cost 0 on the
/// memory store is told (its modifiers left out), and the limit.
struct Read {
    memory: Reading,
    redis: Reading,
    asked: sluice_core::limit::Decision,
    limit: Limit,
}

/// Runs `requests` on both stores, then reads each of `limits` on both.
fn read_after(
    fixture: &Fixture,
    limits: &[Limit],
    requests: &[super::RequestSpec],
    charging: Charging,
) -> Vec<Read> {
    fixture.runtime.block_on(async {
        let key_of: Vec<usize> = (0..limits.len()).collect();
        let ran = Ran::new(fixture, &key_of).await;
        ran.requests(limits, &key_of, requests, charging).await;
        ran.clock.advance(1);
        let mut reads = Vec::new();
        for (key, limit) in ran.keys.iter().zip(limits) {
            let hit = Hit {
                key: key.clone(),
                limit: limit.clone(),
                cost: 0,
                role: Role::Enforced,
                joins_previous: false,
                lease: None,
            };
            let plain = Hit {
                limit: Limit {
                    modifiers: Modifiers::default(),
                    ..*limit
                },
                ..hit.clone()
            };
            let memory = ran.memory.read(&hit).await.expect("memory read");
            let redis = ran.redis.read(&hit).await.expect("redis read");
            let asked = ran
                .memory
                .charge(&[plain], Charging::AllOrNothing)
                .await
                .expect("memory")[0];
            reads.push(Read {
                memory,
                redis,
                asked,
                limit: limit.clone(),
            });
        }
        reads
    })
}

#[test]
fn every_limit_reads_alike_in_both_stores_after_random_requests() {
    let fixture = Fixture::new();
    // Limits read past their capacity, and limits with a modifier read with a count: the
    // cases the issue found broken were exercised, not only carried.
    let (past_capacity, modified) = (AtomicUsize::new(0), AtomicUsize::new(0));
    check_cases(96, &multi_hit_scenario(), |(limits, requests, all)| {
        let charging = if all {
            Charging::AllOrNothing
        } else {
            Charging::EveryHit
        };
        for read in read_after(&fixture, &limits, &requests, charging) {
            let limit = read.limit;
            prop_assert_eq!(read.memory, read.redis, "{} {:?}", limit, charging);
            prop_assert_eq!(read.memory.decision, read.asked, "{}", limit);
            let capacity = limit.capacity();
            prop_assert_eq!(
                u64::from(read.memory.decision.remaining),
                capacity.saturating_sub(read.memory.used),
                "{}: used is the capacity less what remains, or more",
                limit
            );
            if read.memory.used > capacity && capacity > 0 {
                past_capacity.fetch_add(1, Ordering::Relaxed);
            }
            let has_modifier =
                limit.modifiers.penalty.is_some() || limit.modifiers.reserve.is_some();
            if has_modifier && read.memory.used > 0 {
                modified.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(())
    });
    let (past_capacity, modified) = (past_capacity.into_inner(), modified.into_inner());
    assert!(
        past_capacity > 10 && modified > 20,
        "{past_capacity} limits read past their capacity, {modified} with a modifier and a count"
    );
}
