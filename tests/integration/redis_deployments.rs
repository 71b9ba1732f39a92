//! Redis deployments users run: a real 3-primary Cluster, a primary found through Sentinel,
//! and TLS (`rediss://`, certificates made by the test).

use crate::support::redis::RedisServer;
use crate::support::*;

const CONFIG: &str = include_str!("../fixtures/cases/redis_deployments/config.yaml");

/// Calls `times` times for each of `values`; returns the admitted count per value.
async fn admitted_per_value(
    sluice: &Sluice,
    key: &str,
    values: &[String],
    times: usize,
) -> Vec<usize> {
    let mut client = sluice.client().await;
    let mut counts = Vec::new();
    for value in values {
        let mut admitted = 0;
        for _ in 0..times {
            let response = call(&mut client, request("d", vec![descriptor(&[(key, value)])])).await;
            admitted += usize::from(overall(&response) == Code::Ok);
        }
        counts.push(admitted);
    }
    counts
}

#[tokio::test]
async fn a_three_primary_cluster_enforces_limits_on_every_slot() {
    let nodes = crate::support::redis::start_cluster();
    let flags = crate::support::redis::cluster_flags(&nodes);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let sluice = Sluice::start(CONFIG, &flags);
    for node in &nodes {
        let info = node.cli(&["INFO", "memory"]);
        assert!(
            info.contains("number_of_cached_scripts:1"),
            "scripts on every primary: {info}"
        );
    }
    let values: Vec<String> = (0..24).map(|i| format!("u{i}")).collect();
    for key in ["user", "bucket"] {
        let counts = admitted_per_value(&sluice, key, &values, 5).await;
        assert!(counts.iter().all(|&c| c == 3), "{key}: {counts:?}");
    }
    for node in &nodes {
        let keys: usize = node.cli(&["DBSIZE"]).trim().parse().unwrap();
        assert!(keys > 0, "keys spread over every primary's slots");
    }
    // One request with descriptors in different slots: one call, every limit enforced.
    let mut client = sluice.client().await;
    let spread: Vec<_> = (100..108)
        .map(|i| descriptor(&[("user", &format!("m{i}"))]))
        .collect();
    for expected_remaining in [2, 1, 0] {
        let response = call(&mut client, request("d", spread.clone())).await;
        assert!(response
            .statuses
            .iter()
            .all(|s| s.limit_remaining == expected_remaining));
    }
}

#[tokio::test]
async fn sentinel_leads_sluice_to_the_primary() {
    let primary = RedisServer::start(&[]);
    let primary_port = primary.port.to_string();
    let _replica = RedisServer::start(&["--replicaof", "127.0.0.1", &primary_port]);
    let sentinel = RedisServer::start_sentinel("mymaster", primary.port);
    let sentinel_url = sentinel.url();
    // The reference's form: REDIS_TYPE=SENTINEL, REDIS_URL=name,host:port.
    let redis_url = format!("mymaster,127.0.0.1:{}", sentinel.port);
    let sluice = Sluice::start_with(
        &[("config.yaml", CONFIG)],
        &["--store", "redis"],
        &[("REDIS_TYPE", "SENTINEL"), ("REDIS_URL", &redis_url)],
    );
    assert!(!sentinel_url.is_empty());
    let counts = admitted_per_value(&sluice, "user", &["s1".to_string()], 5).await;
    assert_eq!(counts, [3]);
    let keys = primary.cli(&["--scan", "--pattern", "d_user_s1_*"]);
    assert_eq!(
        keys.lines().count(),
        1,
        "the counter lives on the primary: {keys}"
    );
}

#[tokio::test]
async fn a_primary_sentinel_cannot_reach_is_logged_when_lost_not_at_every_retry() {
    let mut primary = RedisServer::start(&[]);
    let sentinel = RedisServer::start_sentinel("mymaster", primary.port);
    let redis_url = format!("mymaster,127.0.0.1:{}", sentinel.port);
    let sluice = Sluice::start_with(
        &[("config.yaml", CONFIG)],
        &["--store", "redis", "--redis-command-timeout", "300ms"],
        &[("REDIS_TYPE", "SENTINEL"), ("REDIS_URL", &redis_url)],
    );
    assert_eq!(
        admitted_per_value(&sluice, "user", &["s1".to_string()], 1).await,
        [1]
    );
    // Sentinel keeps naming the stopped primary (its down-after is a minute): every call
    // fails over to a lookup that fails.
    primary.stop();
    let mut client = sluice.client().await;
    let mut failed = 0;
    for _ in 0..20 {
        let answer = client
            .should_rate_limit(request("d", vec![descriptor(&[("user", "s2")])]))
            .await;
        failed += usize::from(answer.is_err());
    }
    assert!(failed >= 15, "{failed} calls failed");
    let log = sluice.log();
    assert!(
        log.matches("cannot find the Redis primary through Sentinel")
            .count()
            <= 1,
        "{log}"
    );
    assert_eq!(log.matches("Redis is unreachable").count(), 1, "{log}");
}

#[tokio::test]
async fn tls_with_a_private_ca() {
    let redis = RedisServer::start_tls();
    let url = format!("rediss://127.0.0.1:{}", redis.port);
    let ca = redis.tls_ca().expect("a CA").to_string();
    let sluice = Sluice::on_redis_url(
        &[("config.yaml", CONFIG)],
        &url,
        &["--redis-tls-ca-file", &ca],
        &[],
    );
    let counts = admitted_per_value(&sluice, "bucket", &["t1".to_string()], 5).await;
    assert_eq!(counts, [3]);
    let keys = redis.cli(&[
        "--scan",
        "--pattern",
        "token_bucket_3per86400s_b3_d_bucket_t1_",
    ]);
    assert_eq!(keys.trim(), "token_bucket_3per86400s_b3_d_bucket_t1_");
}

#[tokio::test]
async fn per_second_limits_live_in_their_own_redis_and_requests_spanning_both_stay_all_or_nothing()
{
    let main = RedisServer::start(&[]);
    let fast = RedisServer::start(&[]);
    let config = include_str!("../fixtures/cases/redis_deployments/per_second_limits_live_in_their_own_redis_and_requests_spanning_both_stay_all_or_nothing.yaml");
    // The reference's variables: the per-second Redis given as host:port.
    let fast_address = fast.url().trim_start_matches("redis://").to_string();
    let main_url = main.url();
    let sluice = Sluice::start_with(
        &[("config.yaml", config)],
        &["--store", "redis", "--redis-url", &main_url],
        &[
            ("REDIS_PERSECOND", "true"),
            ("REDIS_PERSECOND_URL", &fast_address),
        ],
    );
    let mut client = sluice.client().await;
    let both = |second_key: &str| {
        request(
            "p",
            vec![
                descriptor(&[(second_key, "a")]),
                descriptor(&[("daily", "a")]),
            ],
        )
    };
    let keys = |redis: &RedisServer| redis.cli(&["--scan"]);
    // A per-second key lives until its second ends: on a loaded machine the scan may come
    // after that, so the call is made again until a scan sees its key.
    let (mut seen, mut calls) = (false, 0u32);
    while !seen && calls < 10 {
        let call_result = call(&mut client, both("burst")).await;
        assert_eq!(overall(&call_result), Code::Ok);
        calls += 1;
        seen = keys(&fast).contains("p_burst_a_");
    }
    assert!(seen, "{}", keys(&fast));
    assert!(!keys(&fast).contains("daily"), "{}", keys(&fast));
    assert!(keys(&main).contains("p_daily_a_"), "{}", keys(&main));
    assert!(!keys(&main).contains("burst"), "{}", keys(&main));
    // A request denied by its per-second limit charges nothing in the main Redis either.
    let mut denied = 0;
    for _ in 0..5 {
        let response = call(&mut client, both("tight")).await;
        denied += usize::from(overall(&response) == Code::OverLimit);
    }
    assert!(
        denied >= 3,
        "the 1-per-second limit denies within a second or two"
    );
    let daily = call_one(&mut client, "p", &[("daily", "a")]).await;
    assert_eq!(
        daily.statuses[0].limit_remaining,
        50 - calls - (5 - denied as u32) - 1,
        "only admitted requests charged the daily limit"
    );
}

#[tokio::test]
async fn a_redis_that_checks_client_certificates_is_reached_with_one() {
    let redis = RedisServer::start_tls();
    let (cert, key) = redis.client_certificate();
    redis.cli(&["CONFIG", "SET", "tls-auth-clients", "yes"]);
    let url = format!("rediss://127.0.0.1:{}", redis.port);
    let ca = redis.tls_ca().expect("a CA").to_string();
    let args = [
        "--store",
        "redis",
        "--redis-url",
        &url,
        "--redis-tls-ca-file",
        &ca,
    ];
    let sluice = Sluice::start_with(
        &[("config.yaml", CONFIG)],
        &args,
        &[
            ("REDIS_TLS_CLIENT_CERT", &cert),
            ("REDIS_TLS_CLIENT_KEY", &key),
        ],
    );
    let counts = admitted_per_value(&sluice, "user", &["mtls".to_string()], 5).await;
    assert_eq!(counts, [3]);
    // Without a client certificate Redis refuses the connection: sluice does not start.
    let mut without: Vec<&str> = args.to_vec();
    without.extend(["--redis-startup-wait", "1s"]);
    let refused = Sluice::try_start_with(&[("config.yaml", CONFIG)], &without, &[]);
    assert!(
        refused.is_err(),
        "a Redis refusing the connection stops the start"
    );
    // The reference's REDIS_TLS_SKIP_HOSTNAME_VERIFICATION: no CA given, nothing verified.
    let unverified = Sluice::start_with(
        &[("config.yaml", CONFIG)],
        &["--store", "redis", "--redis-url", &url],
        &[
            ("REDIS_TLS_CLIENT_CERT", &cert),
            ("REDIS_TLS_CLIENT_KEY", &key),
            ("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "true"),
        ],
    );
    let counts = admitted_per_value(&unverified, "user", &["skip".to_string()], 5).await;
    assert_eq!(counts, [3]);
}
