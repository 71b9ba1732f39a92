//! `test/limiter/base_limiter_test.go` and `test/redis/fixed_cache_impl_test.go`: cache keys
//! (byte-identical in Redis), the status of each hit, the over / near / within split, the
//! local over-limit cache, and charging when over the limit.

use super::*;
use std::time::Duration;

const CONFIG: &str = include_str!("../../fixtures/cases/reference_cases_limiter/config.yaml");

/// The Redis keys of `on`, sorted.
fn redis_keys(on: &OnStore) -> Vec<String> {
    let redis = on.redis.as_ref().expect("a Redis store");
    let mut keys: Vec<String> = redis.cli(&["--scan"]).lines().map(str::to_string).collect();
    keys.sort();
    keys
}

/// Sends one request of `descriptors` (entries, hits) in `domain`.
async fn hit(s: &Sluice, descriptors: &[(&[(&str, &str)], u64)]) -> RateLimitResponse {
    let mut client = s.client().await;
    let descriptors = descriptors
        .iter()
        .map(|(entries, hits)| descriptor_with_hits(entries, *hits))
        .collect();
    call(&mut client, request("domain", descriptors)).await
}

/// The window start, in seconds, of a `period`-second window now.
fn window(period: u64) -> u64 {
    let now = now_seconds();
    now - now % period
}

#[tokio::test]
async fn test_generate_cache_keys() {
    for on in on_both_stores(&[("c.yaml", CONFIG)], &[], &[]) {
        let before = window(60);
        hit(&on.sluice, &[(&[("key", "value")], 1)]).await;
        if on.redis.is_some() {
            let keys = redis_keys(&on);
            let expected = [before, window(60)].map(|w| format!("domain_key_value_{w}"));
            assert!(keys.len() == 1 && expected.contains(&keys[0]), "{keys:?}");
        }
        let total = counter(
            &on.sluice,
            "ratelimit_service_rate_limit_total_hits",
            r#"{domain="domain",key1="key_value"}"#,
        );
        assert_eq!(total, 1.0, "{}", on.store);
    }
}

#[tokio::test]
async fn test_generate_cache_keys_prefix() {
    let (redis, sluice) = on_redis(&[("c.yaml", CONFIG)], &[("CACHE_KEY_PREFIX", "prefix:")]);
    let before = window(60);
    hit(&sluice, &[(&[("key", "value")], 1)]).await;
    let keys = redis.cli(&["--scan"]);
    let expected = [before, window(60)].map(|w| format!("prefix:domain_key_value_{w}"));
    assert!(expected.contains(&keys.trim().to_string()), "{keys}");
}

#[tokio::test]
async fn test_generate_cache_keys_with_share_threshold() {
    for on in on_both_stores(&[("c.yaml", CONFIG)], &[], &[]) {
        clear_of_a_windows_end(Duration::from_secs(60), Duration::from_secs(10)).await;
        let before = window(60);
        for value in ["files/a.pdf", "files/b.csv", "files/c/d.txt"] {
            hit(&on.sluice, &[(&[("files", value)], 1)]).await;
        }
        for value in ["nested/x", "nested/y"] {
            hit(
                &on.sluice,
                &[(&[("parent", "value1"), ("files", value)], 1)],
            )
            .await;
        }
        let shared = hit(&on.sluice, &[(&[("files", "files/z")], 0)]).await;
        assert_eq!(
            shared.statuses[0].limit_remaining, 7,
            "{}: one counter",
            on.store
        );
        if on.redis.is_some() {
            let keys = redis_keys(&on);
            let ok = [before, window(60)].iter().any(|w| {
                keys == [
                    format!("domain_files_files/*_{w}"),
                    format!("domain_parent_value1_files_nested/*_{w}"),
                ]
            });
            assert!(ok, "{keys:?}");
        }
    }
}

#[tokio::test]
async fn test_redis() {
    for on in on_both_stores(&[("c.yaml", CONFIG)], &[], &[]) {
        // The counts and the key's expiry (its window's end) are read within one minute.
        clear_of_a_windows_end(Duration::from_secs(60), Duration::from_secs(10)).await;
        let s = &on.sluice;
        let first = hit(s, &[(&[("key", "value")], 1)]).await;
        assert_eq!(first.statuses[0].limit_remaining, 9, "{}", on.store);
        // A nested key, charged past its limit in one request: over, nothing charged.
        hit(s, &[(&[("key2", "value2"), ("subkey2", "subvalue2")], 10)]).await;
        let over = hit(s, &[(&[("key2", "value2"), ("subkey2", "subvalue2")], 1)]).await;
        assert_eq!(code(&over.statuses[0]), Code::OverLimit);
        let labels = r#"{domain="domain",key1="key2_value2",key2="subkey2_subvalue2"}"#;
        assert_eq!(
            counter(s, "ratelimit_service_rate_limit_over_limit", labels),
            1.0
        );
        if let Some(redis) = &on.redis {
            let keys = redis_keys(&on);
            assert!(
                keys.iter()
                    .any(|k| k.starts_with("domain_key2_value2_subkey2_subvalue2_")),
                "{keys:?}"
            );
            // The counter is the reference's: a plain integer, with an expiry.
            let key = keys
                .iter()
                .find(|k| k.starts_with("domain_key_value_"))
                .unwrap();
            assert_eq!(redis.cli(&["GET", key]).trim(), "1");
            let ttl: i64 = redis.cli(&["TTL", key]).trim().parse().unwrap();
            assert!((1..=60).contains(&ttl), "{ttl}");
        }
        // A hit of 0 only reads, and writes no key.
        let read = hit(s, &[(&[("key4", "value4")], 0)]).await;
        assert_eq!(read.statuses[0].limit_remaining, 15);
        if on.redis.is_some() {
            assert!(!redis_keys(&on).iter().any(|k| k.contains("key4")));
        }
    }
}
