//! The contract between the lease path and the exact path: one replica on a leased limit (a
//! fixed window (of the epoch's windows and from the first hit), a token bucket, a leaky bucket; alone and beside a plain limit) gives the exact
//! path's codes for the same sequence of calls, and on a fixed window its `limit_remaining`.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::support::redis::RedisServer;
use crate::support::stores::{redis_store, START_US};
use sluice_core::algorithm::fixed_window::FixedWindowParameters;
use sluice_core::engine::Charging;
use sluice_core::limit::{Algorithm, Counting, Decision, Hit, Limit, Role, Unit};
use sluice_store::leasing::WithLeasing;
use sluice_store::{ManualClock, Store};

/// A leased limit of `limit` (its own algorithm), in chunks of at most `max_chunk`.
fn leased(mut limit: Limit, max_chunk: u32) -> Limit {
    limit.modifiers.budget_leasing = Some(sluice_core::modifier::leasing::Policy {
        max_chunk,
        max_hold_us: 60_000_000,
    });
    limit
}

/// A small deterministic generator: the same sequences on every run.
struct Steps(u64);

impl Steps {
    fn next(&mut self, below: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % below
    }
}

/// The hits of one request: the leased limit at `cost` on key `k`, and with `other`, a plain
/// limit on key `o` beside it.
fn hits_of(limit: Limit, k: &str, cost: u64, other: Option<Limit>, o: &str) -> Vec<Hit> {
    let hit = |key: &str, limit: Limit, cost: u64| Hit {
        key: key.to_string(),
        limit,
        cost,
        role: Role::Enforced,
        joins_previous: false,
        lease: None,
    };
    let mut hits = vec![hit(k, limit, cost)];
    hits.extend(other.map(|other| hit(o, other, 1)));
    hits
}

#[tokio::test]
async fn one_replica_on_a_leased_limit_answers_as_the_exact_path() {
    let redis = RedisServer::start(&[]);
    let limits = [
        leased(Limit::fixed_window(40, Unit::Minute), 8),
        leased(
            Limit::new(
                Counting::FixedWindow(FixedWindowParameters::FROM_FIRST_HIT),
                40,
                Unit::Minute,
            ),
            8,
        ),
        leased(
            Limit::new(Counting::of(Algorithm::TokenBucket), 30, Unit::Minute),
            6,
        ),
        leased(
            Limit {
                counting: Counting::of(Algorithm::LeakyBucket).with_burst(Some(12)),
                ..Limit::new(Counting::of(Algorithm::LeakyBucket), 60, Unit::Minute)
            },
            5,
        ),
    ];
    let other = Limit::fixed_window(25, Unit::Minute);
    for (index, limit) in limits.into_iter().enumerate() {
        let mut served_here = 0;
        for seed in 1..=4u64 {
            let clock = Arc::new(ManualClock::at(START_US));
            let exact =
                redis_store(&redis.url(), format!("exact{index}_{seed}_"), clock.clone()).await;
            let inner =
                redis_store(&redis.url(), format!("lease{index}_{seed}_"), clock.clone()).await;
            let lease = WithLeasing::new(inner, clock.clone());
            let mut steps = Steps(seed * 7919 + index as u64);
            for call_number in 0..400 {
                clock.advance(steps.next(3_000_000));
                let cost = 1 + steps.next(3);
                let beside = (steps.next(4) == 0).then_some(other.clone());
                let hits = hits_of(limit.clone(), "k", cost, beside.clone(), "o");
                let from_exact = exact
                    .charge(&hits, Charging::AllOrNothing)
                    .await
                    .expect("exact");
                let from_lease = lease
                    .charge(&hits, Charging::AllOrNothing)
                    .await
                    .expect("leased");
                let codes = |d: &[Decision]| d.iter().map(|d| d.admitted).collect::<Vec<_>>();
                assert_eq!(
                    codes(&from_lease),
                    codes(&from_exact),
                    "{limit}, seed {seed}, call {call_number}, cost {cost}, with another limit: {}",
                    beside.is_some()
                );
                if limit.algorithm() == Algorithm::FixedWindow {
                    // With one replica, what the store has left plus the replica's chunk is
                    // exactly what the exact path has left.
                    assert_eq!(
                        from_lease[0].remaining, from_exact[0].remaining,
                        "{limit}, seed {seed}, call {call_number}: {from_lease:?} {from_exact:?} {hits:?}"
                    );
                }
            }
            served_here += lease.table().served.load(Ordering::Relaxed);
        }
        assert!(
            served_here >= 20,
            "{limit}: {served_here} hits served from chunks"
        );
    }
}
