//! `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false`: the reference's counting
//! (`src/redis/fixed_cache_impl.go`, `getHitsAddend`), where every hit is charged, the denied
//! hit included, replayed from `test/redis/fixed_cache_impl_test.go` (`TestRedis`,
//! `TestNearLimit`, `TestOverLimitWithLocalCache`) and `DoLimit`: one row per case, one
//! runner, on both stores. The counts the reference's mocks return are reached here by real
//! hits, so every row starts from an empty key; its windows are hours and days, which a test
//! does not cross.

use super::*;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;

const CONFIG: &str = include_str!("../../fixtures/cases/reference_cases_counting/config.yaml");

const OK: Code = Code::Ok;
const OVER: Code = Code::OverLimit;

/// A descriptor of a row: its config keys, `outer/inner` for the nested one.
type Key = &'static str;

/// One request of a row: each descriptor's key, its hits, and the code it must get.
type Call = &'static [(Key, u64, Code)];

/// A case: what it replays, its requests in order, and then each key's counters: total,
/// within, near and over limit (`NEAR_LIMIT_RATIO` 0.8, the reference's).
struct Case {
    replays: &'static str,
    calls: &'static [Call],
    counts: &'static [(Key, [u64; 4])],
}

const CASES: &[Case] = &[
    Case {
        replays: "getHitsAddend: with 9 of 10 used, a hit of 5 is denied and counted (14), so a hit of 1 is denied too",
        calls: &[&[("ten", 9, OK)], &[("ten", 5, OVER)], &[("ten", 1, OVER)], &[("ten", 0, OVER)]],
        // 9 within (1 past the threshold of 8); 14: 4 over, 1 near; 15: 1 over.
        counts: &[("ten", [15, 9, 2, 5])],
    },
    Case {
        replays: "TestNearLimit key4: 15 per unit, 11 and 13 within, 16 over the limit",
        calls: &[
            &[("fifteen", 10, OK)],
            &[("fifteen", 1, OK)],
            &[("fifteen", 2, OK)],
            &[("fifteen", 3, OVER)],
            &[("fifteen", 1, OVER)],
        ],
        // Threshold 12: 11 -> 13 has 1 near; 13 -> 16 has 2 near and 1 over; 17: 1 over.
        counts: &[("fifteen", [17, 13, 3, 2])],
    },
    Case {
        replays: "TestNearLimit key9: 20 per unit at 15, 7 more: 2 over and 4 near; then 23, over",
        calls: &[&[("twenty", 15, OK)], &[("twenty", 7, OVER)], &[("twenty", 1, OVER)]],
        counts: &[("twenty", [23, 15, 4, 3])],
    },
    Case {
        replays: "TestNearLimit key6: 8 per unit at 5, 2 more: within, 1 past the threshold of 6",
        calls: &[&[("eight", 5, OK)], &[("eight", 2, OK)]],
        counts: &[("eight", [7, 7, 1, 0])],
    },
    Case {
        replays: "TestNearLimit key7: 20 per unit at 16, 3 more: all within and all near",
        calls: &[&[("twenty", 16, OK)], &[("twenty", 3, OK)]],
        counts: &[("twenty", [19, 19, 3, 0])],
    },
    Case {
        replays: "TestNearLimit key8: 20 per unit at 19, 3 more: 2 over and 1 near; then 1 more, over",
        calls: &[&[("twenty", 19, OK)], &[("twenty", 3, OVER)], &[("twenty", 1, OVER)]],
        // 19 within, 3 past the threshold of 16; 22: 2 over, 1 near; 23: 1 over.
        counts: &[("twenty", [23, 19, 4, 3])],
    },
    Case {
        replays: "TestNearLimit key10: all of it over the limit (27 of 10, 3 more)",
        calls: &[&[("ten", 10, OK)], &[("ten", 17, OVER)], &[("ten", 3, OVER)]],
        counts: &[("ten", [30, 10, 2, 20])],
    },
    Case {
        replays: "TestRedis key2: a nested key at 10 of 10, 1 more: over, 1 over and none near",
        calls: &[&[("outer/inner", 10, OK)], &[("outer/inner", 1, OVER)]],
        counts: &[("outer/inner", [11, 10, 2, 1])],
    },
    Case {
        replays: "TestRedis key3: past both limits, a hit of 0 on the parent is over and a hit of 1 on the child is counted",
        calls: &[
            &[("outer", 11, OVER)],
            &[("outer/inner", 12, OVER)],
            &[("outer", 0, OVER), ("outer/inner", 1, OVER)],
        ],
        counts: &[("outer", [11, 0, 2, 1]), ("outer/inner", [13, 0, 2, 3])],
    },
    Case {
        replays: "a hit larger than the whole limit is denied and counted: the next hit of 1 is over",
        calls: &[&[("five", 6, OVER)], &[("five", 1, OVER)]],
        // 6 of 5 from nothing: 1 over, 1 near (the threshold of 4 to 5); 7: 1 over.
        counts: &[("five", [7, 0, 1, 2])],
    },
    Case {
        replays: "DoLimit: every hit is INCRBY'd, the descriptor that admits a denied request's too",
        calls: &[
            &[("five", 1, OK), ("one", 1, OK)],
            &[("five", 1, OK), ("one", 1, OVER)],
            &[("five", 1, OK), ("one", 1, OVER)],
            &[("five", 0, OK), ("one", 0, OVER)],
        ],
        // `one`'s threshold is 0: its first hit is within and near.
        counts: &[("five", [3, 3, 0, 0]), ("one", [3, 1, 1, 2])],
    },
];

/// The descriptor of `key` (`outer/inner`: both entries), with `hits`.
fn descriptor_of(key: Key, hits: u64, row: usize) -> RateLimitDescriptor {
    let value = format!("row{row}");
    let entries: Vec<(&str, &str)> = key.split('/').map(|k| (k, value.as_str())).collect();
    descriptor_with_hits(&entries, hits)
}

/// The metric labels of `key`.
fn labels_of(key: Key) -> String {
    match key.split_once('/') {
        Some((outer, inner)) => {
            format!(r#"{{domain="counting",key1="{outer}",key2="{inner}"}}"#)
        }
        None => format!(r#"{{domain="counting",key1="{key}"}}"#),
    }
}

/// The counters of `key`: total, within, near, over.
fn counts_of(sluice: &Sluice, key: Key) -> [u64; 4] {
    let labels = labels_of(key);
    ["total_hits", "within_limit", "near_limit", "over_limit"].map(|name| {
        counter(
            sluice,
            &format!("ratelimit_service_rate_limit_{name}"),
            &labels,
        ) as u64
    })
}

/// Runs every case on `sluice`, each row on keys of its own; `on` names the store.
async fn run_cases(sluice: &Sluice, on: &str) {
    let mut client = sluice.client().await;
    for (row, case) in CASES.iter().enumerate() {
        // Counters are per key, not per value: read them before the row and compare the rise.
        let keys: Vec<Key> = case.counts.iter().map(|(key, _)| *key).collect();
        let before: Vec<[u64; 4]> = keys.iter().map(|key| counts_of(sluice, key)).collect();
        for (step, hits) in case.calls.iter().enumerate() {
            let descriptors = hits
                .iter()
                .map(|&(key, n, _)| descriptor_of(key, n, row))
                .collect();
            let response = call(&mut client, request("counting", descriptors)).await;
            let codes: Vec<Code> = response.statuses.iter().map(code).collect();
            let expected: Vec<Code> = hits.iter().map(|&(_, _, c)| c).collect();
            assert_eq!(codes, expected, "{on}: {}, call {step}", case.replays);
            for status in response.statuses.iter().filter(|s| code(s) == OVER) {
                assert_eq!(status.limit_remaining, 0, "{on}: {}", case.replays);
            }
        }
        for ((key, expected), before) in case.counts.iter().zip(before) {
            let now = counts_of(sluice, key);
            let rise: Vec<u64> = now.iter().zip(before).map(|(n, b)| n - b).collect();
            assert_eq!(
                rise, expected,
                "{on}: {} ({key}: total, within, near, over)",
                case.replays
            );
        }
    }
}

#[tokio::test]
async fn the_references_counting_cases_on_both_stores() {
    let envs = [("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "false")];
    for on in on_both_stores(&[("c.yaml", CONFIG)], &[], &envs) {
        run_cases(&on.sluice, on.store).await;
    }
}

#[tokio::test]
async fn test_over_limit_with_local_cache_counts_as_the_reference() {
    // TestOverLimitWithLocalCache: 15 per unit; 11 and 13 within, 16 over; the next hit is
    // answered by the local cache (no script call) and counted over. Any cost is remembered:
    // with every hit counted, the window's count stays past the limit until it ends.
    let envs = [
        ("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "false"),
        ("LOCAL_CACHE_SIZE_IN_BYTES", "1000000"),
    ];
    let (redis, sluice) = on_redis(&[("c.yaml", CONFIG)], &envs);
    let mut client = sluice.client().await;
    let ask = |hits| request("counting", vec![descriptor_of("fifteen", hits, 0)]);
    for (hits, expected) in [(11, OK), (2, OK), (3, OVER)] {
        assert_eq!(overall(&call(&mut client, ask(hits)).await), expected);
    }
    let calls = crate::support::redis::script_calls(&redis);
    for hits in [1, 4] {
        let cached = call(&mut client, ask(hits)).await;
        assert_eq!(code(&cached.statuses[0]), OVER);
        assert_eq!(cached.statuses[0].limit_remaining, 0);
    }
    assert_eq!(
        crate::support::redis::script_calls(&redis),
        calls,
        "answered locally"
    );
    assert_eq!(counter(&sluice, "sluice_local_cache_hits_total", ""), 2.0);
    // 11 + 2 within (1 near), 16: 1 over and 2 near; then 1 and 4 over from the cache.
    assert_eq!(counts_of(&sluice, "fifteen"), [21, 13, 3, 6]);
}
