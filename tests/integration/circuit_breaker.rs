//! The circuit breaker before Redis (docs/hot-keys.md), among the fault tests: Redis stopped
//! (SIGSTOP) and killed under load, on a single node, through Sentinel and on a Cluster. Once
//! the circuit opens no call waits on Redis, each limit answers as its `on_store_failure` says
//! (a local share admits the limit divided by the replicas per window, no more), health stays
//! SERVING unless it follows the store, the circuit closes within a second of Redis answering
//! again, and what the replicas admitted alone is not replayed into Redis.

use std::time::{Duration, Instant};

use crate::support::redis::{
    cluster_flags, sentinel_flags, single_flags, start_cluster, RedisServer,
};
use crate::support::*;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tonic::transport::Channel;

/// `--redis-command-timeout`: a call before the circuit opens waits this long.
const TIMEOUT_MS: u64 = 400;
/// What scheduling on a loaded 2-core machine may add to a wait (as the other fault tests).
const SLACK_MS: u64 = 600;
/// The replicas the local shares divide by (`--store-replicas`).
const REPLICAS: u64 = 2;
/// `shared`'s limit: each replica admits half of it alone.
const SHARED: u64 = 60;

const CONFIG: &str = r#"
domain: cb
descriptors:
  - key: shared
    rate_limit: {unit: hour, requests_per_unit: 60, on_store_failure: local_share}
  - key: open
    rate_limit: {unit: hour, requests_per_unit: 5, on_store_failure: allow}
  - key: closed
    rate_limit: {unit: hour, requests_per_unit: 5, on_store_failure: deny}
  - key: plain
    rate_limit: {unit: hour, requests_per_unit: 5}
"#;

fn flags(store: &[String], more: &[&str]) -> Vec<String> {
    let timeout = format!("{TIMEOUT_MS}ms");
    let replicas = REPLICAS.to_string();
    let mut all: Vec<String> = store.to_vec();
    all.extend(
        [
            "--redis-command-timeout",
            &timeout,
            "--store-circuit-failures",
            "3",
            "--store-circuit-probe-interval",
            "100ms",
            "--store-replicas",
            &replicas,
        ]
        .map(str::to_string),
    );
    all.extend(more.iter().map(|s| s.to_string()));
    all
}

fn start(flags: &[String]) -> Sluice {
    let args: Vec<&str> = flags.iter().map(String::as_str).collect();
    Sluice::start_with(&[("config.yaml", CONFIG)], &args, &[])
}

fn ask(key: &str) -> RateLimitRequest {
    request("cb", vec![descriptor(&[(key, "v")])])
}

fn metric(sluice: &Sluice, name: &str) -> f64 {
    series(&sluice.http_get("/metrics").1, name).unwrap_or(0.0)
}

/// Calls `shared` until the circuit opens (the first calls wait out the timeout); how many
/// of those were admitted.
async fn until_open(sluice: &Sluice, client: &mut RateLimitServiceClient<Channel>) -> u64 {
    let mut admitted = 0;
    for _ in 0..10 {
        let answer = call(client, ask("shared")).await;
        admitted += u64::from(overall(&answer) == Code::Ok);
        if metric(sluice, "sluice_store_circuit_open") == 1.0 {
            return admitted;
        }
    }
    panic!("the circuit did not open after 10 failed calls");
}

/// `clients` clients calling `shared` `calls` times each, at once: how many were admitted,
/// and the slowest call.
async fn load(sluice: &Sluice, clients: usize, calls: usize) -> (u64, Duration) {
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let mut client = sluice.client().await;
        tasks.push(tokio::spawn(async move {
            let (mut admitted, mut slowest) = (0, Duration::ZERO);
            for _ in 0..calls {
                let started = Instant::now();
                let answer = call(&mut client, ask("shared")).await;
                slowest = slowest.max(started.elapsed());
                admitted += u64::from(overall(&answer) == Code::Ok);
            }
            (admitted, slowest)
        }));
    }
    let (mut admitted, mut slowest) = (0, Duration::ZERO);
    for task in tasks {
        let (more, slow) = task.await.expect("a client");
        admitted += more;
        slowest = slowest.max(slow);
    }
    (admitted, slowest)
}

/// Redis stops answering (`fault`), then answers again (`heal`): the circuit opens after three
/// failures, answers every limit as its policy says without waiting, and closes within a
/// second of Redis answering; Redis never sees what was admitted meanwhile.
async fn outage(sluice: &Sluice, fault: impl FnOnce(), heal: impl FnOnce()) {
    let mut client = sluice.client().await;
    clear_of_a_windows_end(Duration::from_secs(3600), Duration::from_secs(30)).await;
    for _ in 0..5 {
        assert_eq!(overall(&call(&mut client, ask("shared")).await), Code::Ok);
    }
    fault();
    let mut admitted = until_open(sluice, &mut client).await;
    // Open, under four clients at once: nothing waits on Redis, and `shared` admits its
    // share, no more.
    let (more, slowest) = load(sluice, 4, SHARED as usize / 2).await;
    admitted += more;
    assert_eq!(admitted, SHARED / REPLICAS, "the local share of {SHARED}");
    assert!(
        slowest < Duration::from_millis(TIMEOUT_MS / 2),
        "a call waited {slowest:?} with the circuit open"
    );
    assert_eq!(overall(&call(&mut client, ask("open")).await), Code::Ok);
    assert_eq!(
        overall(&call(&mut client, ask("closed")).await),
        Code::OverLimit
    );
    let plain = client.should_rate_limit(ask("plain")).await;
    assert_eq!(
        plain.map_err(|status| status.code()).err(),
        Some(tonic::Code::Unavailable),
        "a limit without on_store_failure fails the call (--failure-mode unavailable)"
    );
    assert_eq!(sluice.grpc_health().await, 1, "health stays SERVING");
    assert_eq!(
        metric(
            sluice,
            r#"sluice_store_circuit_transitions_total{to="open"}"#
        ),
        1.0
    );
    let not_sent = metric(sluice, r#"sluice_store_errors_total{kind="circuit_open"}"#);
    assert!(
        not_sent >= 120.0,
        "{not_sent} calls answered with the circuit open"
    );
    let healed = Instant::now();
    heal();
    while metric(sluice, "sluice_store_circuit_open") == 1.0 {
        assert!(
            healed.elapsed() < Duration::from_millis(1000 + SLACK_MS),
            "the circuit stayed open {:?} after Redis answered",
            healed.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        metric(
            sluice,
            r#"sluice_store_circuit_transitions_total{to="closed"}"#
        ),
        1.0
    );
    // Redis decides again, on its own count: the five calls before the outage and this one;
    // of the outage's, at most the three that timed out before the circuit opened (a stopped
    // Redis runs what it had received when it resumes), never what was admitted alone.
    let answer = call(&mut client, ask("shared")).await;
    let used = SHARED - u64::from(answer.statuses[0].limit_remaining);
    assert!((6..=9).contains(&used), "Redis counts {used}");
}

#[tokio::test]
async fn a_stopped_redis_opens_the_circuit_and_a_second_closes_it() {
    let redis = RedisServer::start(&[]);
    let store = single_flags(&redis);
    let sluice = start(&flags(&store, &[]));
    outage(&sluice, || redis.signal("STOP"), || redis.signal("CONT")).await;
}

#[tokio::test]
async fn a_killed_redis_opens_the_circuit_until_it_is_back() {
    let mut redis = RedisServer::start(&["--save", "", "--appendonly", "yes"]);
    let store = single_flags(&redis);
    let sluice = start(&flags(&store, &[]));
    let stopped = std::cell::RefCell::new(&mut redis);
    outage(
        &sluice,
        || stopped.borrow_mut().stop(),
        || stopped.borrow_mut().restart(),
    )
    .await;
}

#[tokio::test]
async fn a_stopped_cluster_opens_the_circuit_and_closes_it() {
    let nodes = start_cluster();
    let sluice = start(&flags(&cluster_flags(&nodes), &[]));
    let signal = |which: &str| nodes.iter().for_each(|node| node.signal(which));
    outage(&sluice, || signal("STOP"), || signal("CONT")).await;
}

#[tokio::test]
async fn a_stopped_primary_behind_sentinel_opens_the_circuit_and_closes_it() {
    let primary = RedisServer::start(&[]);
    let sentinel = RedisServer::start_sentinel("cbmaster", primary.port);
    let store = sentinel_flags(&sentinel, "cbmaster");
    let sluice = start(&flags(&store, &[]));
    outage(
        &sluice,
        || primary.signal("STOP"),
        || primary.signal("CONT"),
    )
    .await;
}

#[tokio::test]
async fn health_follows_an_open_circuit_only_when_asked_to() {
    let redis = RedisServer::start(&[]);
    let store = single_flags(&redis);
    let following = start(&flags(&store, &["--healthcheck-store"]));
    let serving = start(&flags(&store, &[]));
    assert!(following.wait_health((1, 200)).await);
    redis.signal("STOP");
    for sluice in [&following, &serving] {
        let mut client = sluice.client().await;
        until_open(sluice, &mut client).await;
    }
    assert_eq!(serving.health().await, (1, 200), "degraded, still serving");
    assert_eq!(metric(&serving, "sluice_store_circuit_open"), 1.0);
    assert_eq!(following.http_get("/healthcheck").0, 500);
    redis.signal("CONT");
    assert!(following.wait_health((1, 200)).await);
}

#[tokio::test]
async fn replicas_learn_their_count_from_redis() {
    let redis = RedisServer::start(&[]);
    let args = [
        "--store",
        "redis",
        "--redis-url",
        &redis.url(),
        "--store-circuit-failures",
        "3",
    ];
    let sluices: Vec<Sluice> = (0..3).map(|_| Sluice::start(CONFIG, &args)).collect();
    let deadline = Instant::now() + Duration::from_secs(5);
    while sluices
        .iter()
        .any(|s| metric(s, "sluice_store_replicas") != 3.0)
    {
        assert!(Instant::now() < deadline, "the replicas did not count 3");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
