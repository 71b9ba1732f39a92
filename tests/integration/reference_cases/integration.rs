//! `test/integration/integration_test.go`: the whole server under traffic, on each store and
//! with the local cache, the all-or-nothing setting, Redis authentication and a reload.
//! (Its memcached, xDS, gRPC TLS and statsd-tag cases are not replayed: docs/differences.md
//! .) Units are hours where the reference uses minutes, so that no
//! window ends mid-test.

use super::*;

const BASIC: &str = include_str!("../../fixtures/cases/reference_cases_integration/basic.yaml");

const ANOTHER: &str = include_str!("../../fixtures/cases/reference_cases_integration/another.yaml");

/// The reference's `testBasicBaseConfig`, on `sluice`; `stop`: whether a denied request
/// charges nothing (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT).
async fn basic_base_config(s: &Sluice, store: &str, stop: bool) {
    let mut client = s.client().await;
    let unknown = call_one(&mut client, "foo", &[("hello", "world")]).await;
    assert_eq!(overall(&unknown), Code::Ok, "{store}");
    assert_eq!(unknown.statuses[0].current_limit, None);
    let first = call_one(&mut client, "basic", &[("key1", "foo")]).await;
    assert_eq!(first.statuses[0].limit_remaining, 49);
    let labels = r#"{domain="basic",key1="key1"}"#;
    assert_eq!(
        counter(s, "ratelimit_service_rate_limit_total_hits", labels),
        1.0
    );
    // Over a limit of 20: OK with 19, 18, ... then OVER_LIMIT with 0.
    let value = format!("{}", now_seconds());
    for i in 0..25u32 {
        let response = call_one(&mut client, "another", &[("key2", &value)]).await;
        let (expected, remaining) = if i >= 20 {
            (Code::OverLimit, 0)
        } else {
            (Code::Ok, 20 - (i + 1))
        };
        assert_eq!(code(&response.statuses[0]), expected, "{store}: call {i}");
        assert_eq!(
            response.statuses[0].limit_remaining, remaining,
            "{store}: call {i}"
        );
    }
    let key2 = r#"{domain="another",key1="key2"}"#;
    assert_eq!(
        counter(s, "ratelimit_service_rate_limit_total_hits", key2),
        25.0
    );
    assert_eq!(
        counter(s, "ratelimit_service_rate_limit_over_limit", key2),
        5.0
    );
    // Two limits in one request: key3 (10) runs out first.
    let value = format!("{value}-both");
    for i in 0..15u32 {
        let both = request(
            "another",
            vec![
                descriptor(&[("key2", &value)]),
                descriptor(&[("key3", &value)]),
            ],
        );
        let response = call(&mut client, both).await;
        let (expected, remaining3) = if i >= 10 {
            (Code::OverLimit, 0)
        } else {
            (Code::Ok, 10 - (i + 1))
        };
        // Denied requests stop charging key2 when asked to (sluice's default).
        let remaining2 = if i >= 10 && stop { 10 } else { 20 - (i + 1) };
        assert_eq!(overall(&response), expected, "{store}: call {i}");
        assert_eq!(code(&response.statuses[0]), Code::Ok);
        assert_eq!(
            response.statuses[0].limit_remaining, remaining2,
            "{store} stop={stop}: call {i}"
        );
        assert_eq!(response.statuses[1].limit_remaining, remaining3);
    }
    let key3 = r#"{domain="another",key1="key3"}"#;
    assert_eq!(
        counter(s, "ratelimit_service_rate_limit_over_limit", key3),
        5.0
    );
    assert_eq!(
        counter(s, "ratelimit_service_rate_limit_over_limit", key2),
        5.0
    );
    // That duration_until_reset counts down is a row of rules.rs (LIMITER_CASES), on the
    // manual clock.
}

const FILES: [(&str, &str); 2] = [("basic.yaml", BASIC), ("another.yaml", ANOTHER)];

#[tokio::test]
async fn test_basic_config() {
    for stop in [true, false] {
        let envs = [(
            "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
            if stop { "true" } else { "false" },
        )];
        for on in on_both_stores(&FILES, &[], &envs) {
            basic_base_config(&on.sluice, on.store, stop).await;
        }
    }
    // With the local over-limit cache in front of Redis.
    let (_redis, cached) = on_redis(&FILES, &[("LOCAL_CACHE_SIZE_IN_BYTES", "1000000")]);
    basic_base_config(&cached, "redis with local cache", true).await;
    assert!(counter(&cached, "sluice_local_cache_hits_total", "") >= 4.0);
}

#[tokio::test]
async fn test_basic_auth_config() {
    let redis = RedisServer::start(&[]);
    redis.cli(&["CONFIG", "SET", "requirepass", "password123"]);
    let address = redis.url().trim_start_matches("redis://").to_string();
    let sluice = Sluice::start_with(
        &FILES,
        &["--store", "redis"],
        &[("REDIS_URL", &address), ("REDIS_AUTH", "password123")],
    );
    basic_base_config(&sluice, "redis with auth", true).await;
    // A wrong password stops sluice at startup, saying why.
    let url = format!("redis://:nope@{address}");
    let wrong = Sluice::try_start_with(
        &FILES,
        &[
            "--store",
            "redis",
            "--redis-url",
            &url,
            "--redis-startup-wait",
            "1s",
        ],
        &[],
    );
    let error = wrong.err().expect("a wrong password stops the start");
    assert!(!error.contains("nope"), "no secret in the error: {error}");
}

#[tokio::test]
async fn test_basic_reload_config() {
    for on in on_both_stores(&[("basic.yaml", BASIC)], &[], &[]) {
        let s = &on.sluice;
        assert_eq!(
            limit_of(s, "reload", &[("block", "foo")]).await,
            None,
            "{}",
            on.store
        );
        let reload = "domain: reload\ndescriptors:\n  - key: block\n    rate_limit: {unit: second, requests_per_unit: 0}\n";
        std::fs::write(s.config_dir.path().join("reload.yaml"), reload).unwrap();
        let mut loaded = false;
        for _ in 0..100 {
            if limit_of(s, "reload", &[("block", "foo")]).await.is_some() {
                loaded = true;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        assert!(loaded, "{}", s.log());
        let mut client = s.client().await;
        let blocked = call_one(&mut client, "reload", &[("block", "foo")]).await;
        assert_eq!(overall(&blocked), Code::OverLimit);
        // The files loaded before still serve.
        assert!(limit_of(s, "basic", &[("key1", "x")]).await.is_some());
    }
}

#[tokio::test]
async fn test_share_threshold() {
    let config =
        include_str!("../../fixtures/cases/reference_cases_integration/test_share_threshold.yaml");
    for on in on_both_stores(&[("share.yaml", config)], &[], &[]) {
        let mut client = on.sluice.client().await;
        for i in 0..12u32 {
            let value = format!("files/file{i}.txt");
            let response = call(
                &mut client,
                request(
                    "share-threshold-test",
                    vec![descriptor(&[("files", &value)])],
                ),
            )
            .await;
            let expected = if i >= 10 { Code::OverLimit } else { Code::Ok };
            assert_eq!(overall(&response), expected, "{}: file {i}", on.store);
        }
    }
}

#[tokio::test]
async fn test_basic_tls_config() {
    let redis = RedisServer::start_tls();
    let url = format!("rediss://127.0.0.1:{}", redis.port);
    let ca = redis.tls_ca().expect("a CA").to_string();
    let sluice = Sluice::on_redis_url(&FILES, &url, &["--redis-tls-ca-file", &ca], &[]);
    basic_base_config(&sluice, "redis over TLS", true).await;
}

#[tokio::test]
async fn test_basic_auth_config_with_redis_cluster() {
    // The Cluster of the tests has no password; the same flow runs across its slots.
    let nodes = crate::support::redis::start_cluster();
    let flags = crate::support::redis::cluster_flags(&nodes);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let sluice = Sluice::start_with(&FILES, &flags, &[]);
    basic_base_config(&sluice, "redis cluster", true).await;
}

#[tokio::test]
async fn test_basic_auth_config_with_redis_sentinel() {
    let primary = RedisServer::start(&[]);
    primary.cli(&["CONFIG", "SET", "requirepass", "password123"]);
    let sentinel = RedisServer::start_sentinel("mymaster", primary.port);
    sentinel.cli(&["SENTINEL", "SET", "mymaster", "auth-pass", "password123"]);
    let redis_url = format!("mymaster,127.0.0.1:{}", sentinel.port);
    let sluice = Sluice::start_with(
        &FILES,
        &["--store", "redis"],
        &[
            ("REDIS_TYPE", "SENTINEL"),
            ("REDIS_URL", &redis_url),
            ("REDIS_AUTH", "password123"),
        ],
    );
    basic_base_config(&sluice, "redis through sentinel, with auth", true).await;
}
