//! The contract between the stores: the memory store and the Redis store (its Lua scripts,
//! with sluice's clock passed in) reach the same decision, every field, for the same sequence
//! of (time, cost): a table of behaviour cases and random sequences, for every algorithm.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::support::redis::RedisServer;
use crate::support::scenario::{limit, scenario};
use proptest::prelude::*;
use sluice::limit::{Algorithm, Decision, Hit, Limit};
use sluice::store::memory::MemoryStore;
use sluice::store::redis::{RedisKind, RedisStore, RedisTarget, TimeSource};
use sluice::store::{ManualClock, Store};

const START_US: u64 = 1_700_000_000_123_456;

/// A Redis for one test (stopped when the test ends), and a runtime to drive the stores.
struct Fixture {
    redis: RedisServer,
    runtime: tokio::runtime::Runtime,
}

impl Fixture {
    fn new() -> Fixture {
        Fixture {
            redis: RedisServer::start(&[]),
            runtime: tokio::runtime::Runtime::new().expect("runtime"),
        }
    }
}

/// A unique key per sequence, so sequences never share state.
fn unique_key() -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    format!("contract_k_{}_", NEXT.fetch_add(1, Ordering::SeqCst))
}

/// Runs `steps` (time step, cost) through both stores; returns both decision lists.
fn both(fixture: &Fixture, limit: Limit, steps: &[(u64, u64)]) -> (Vec<Decision>, Vec<Decision>) {
    fixture.runtime.block_on(async {
        let clock = Arc::new(ManualClock::at(START_US));
        let memory = MemoryStore::new(1000, clock.clone());
        let target = RedisTarget {
            kind: RedisKind::Single,
            urls: vec![fixture.redis.url()],
            sentinel_master: None,
            tls_ca_file: None,
            connect_timeout: Duration::from_secs(2),
            command_timeout: Duration::from_secs(5),
        };
        let redis = RedisStore::connect(
            &target,
            Duration::from_secs(5),
            String::new(),
            TimeSource::Sluice,
            clock.clone(),
        )
        .await
        .expect("connect to the test Redis");
        let key = unique_key();
        let (mut from_memory, mut from_redis) = (Vec::new(), Vec::new());
        for &(step, cost) in steps {
            clock.advance(step);
            let hit = [Hit {
                key: key.clone(),
                limit,
                cost,
            }];
            from_memory.push(memory.charge(&hit).await.expect("memory")[0]);
            from_redis.push(redis.charge(&hit).await.expect("redis")[0]);
        }
        (from_memory, from_redis)
    })
}

const S: u64 = 1_000_000;

/// Behaviour cases: (what, steps) run for every algorithm.
const CASES: &[(&str, &[(u64, u64)])] = &[
    (
        "up to the limit and over",
        &[(0, 1), (0, 1), (0, 1), (0, 1), (0, 1), (0, 1)],
    ),
    ("cost 0 reads", &[(0, 0), (0, 3), (0, 0), (10, 0)]),
    ("a cost beyond the limit", &[(0, 9), (0, 1)]),
    (
        "across a window edge",
        &[(0, 2), (876_544, 2), (1, 2), (100_000, 2)],
    ),
    (
        "refill while idle",
        &[(0, 3), (250_000, 1), (2 * S, 1), (10 * S, 3)],
    ),
    (
        "dense traffic",
        &[
            (100_000, 1),
            (100_000, 1),
            (100_000, 2),
            (50_000, 1),
            (50_000, 1),
            (700_000, 3),
            (1, 1),
        ],
    ),
];

#[test]
fn the_behaviour_table_agrees_for_every_algorithm() {
    let fixture = Fixture::new();
    for &algorithm in Algorithm::ALL {
        for (what, steps) in CASES {
            for (requests, multiplier, burst) in [(3, 1, None), (4, 2, Some(2)), (0, 1, Some(3))] {
                let limit = limit(algorithm, requests, multiplier, burst);
                let (memory, redis) = both(&fixture, limit, steps);
                assert_eq!(memory, redis, "{algorithm}, {what}, {limit}");
            }
        }
    }
}

#[test]
fn the_sliding_log_agrees_at_its_largest_limit() {
    let limit = limit(Algorithm::SlidingWindowLog, 10_000, 1, None);
    let (memory, redis) = both(
        &Fixture::new(),
        limit,
        &[(0, 6_000), (1, 4_000), (1, 1), (S, 1)],
    );
    assert_eq!(memory, redis);
}

#[test]
fn random_sequences_agree_for_every_algorithm() {
    let fixture = Fixture::new();
    let config = ProptestConfig {
        cases: 48,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    let mut runner = proptest::test_runner::TestRunner::new(config);
    let result = runner.run(&scenario(40), |(l, m, b, steps)| {
        for &algorithm in Algorithm::ALL {
            let (memory, redis) = both(&fixture, limit(algorithm, l, m, Some(b)), &steps);
            prop_assert_eq!(memory, redis, "{}", algorithm);
        }
        Ok(())
    });
    if let Err(failure) = result {
        panic!("{failure}");
    }
}
