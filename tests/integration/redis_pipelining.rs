//! Implicit pipelining (adaptive by default; `REDIS_PIPELINE_WINDOW`, `REDIS_PIPELINE_LIMIT`),
//! on a real `redis-server`: concurrent requests' calls go to Redis in shared pipelines, every
//! call still gets exactly its own decision, a flushed script is healed call by call, and a
//! lost Redis fails every waiting call fast.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tonic::Code as GrpcCode;

use crate::redis_store::{admitted_by, fails_fast, recovers, sluice_on, ALGORITHMS, CONFIG};
use crate::support::link::Link;
use crate::support::redis::RedisServer;
use crate::support::*;

/// The pipelines sent and the calls they held, as /metrics counts them.
fn pipelined(sluice: &Sluice) -> (f64, f64) {
    let (_, metrics) = sluice.http_get("/metrics");
    let pipelines = series(&metrics, "sluice_redis_pipelines_total").unwrap_or(0.0);
    let calls = series(&metrics, "sluice_redis_pipelined_calls_total").unwrap_or(0.0);
    (pipelines, calls)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_reference_variables_batch_concurrent_calls_and_every_algorithm_admits_exactly_the_limit(
) {
    let redis = RedisServer::start(&[]);
    let url = redis.url();
    let envs = [
        ("REDIS_PIPELINE_WINDOW", "2ms"),
        ("REDIS_PIPELINE_LIMIT", "6"),
    ];
    let sluice = Sluice::start_with(
        &[("config.yaml", CONFIG)],
        &["--store", "redis", "--redis-url", &url],
        &envs,
    );
    for algorithm in ALGORITHMS {
        let admitted = admitted_by(&[&sluice], 16, 10, algorithm).await;
        assert_eq!(admitted, 100, "{algorithm}: 160 calls on a limit of 100");
    }
    let (pipelines, calls) = pipelined(&sluice);
    assert!(
        calls >= 800.0,
        "every call went through a pipeline: {calls}"
    );
    assert!(
        calls > pipelines,
        "16 clients within 2 ms share pipelines: {calls} calls in {pipelines}"
    );
    assert!(
        pipelines * 6.0 >= calls,
        "no pipeline holds more than the limit of 6: {calls} calls in {pipelines}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_window_under_a_millisecond_keeps_every_decision_exact() {
    let redis = RedisServer::start(&[]);
    let sluice = sluice_on(&redis, &["--redis-pipeline-window", "150us"]);
    for algorithm in ALGORITHMS {
        let admitted = admitted_by(&[&sluice], 16, 10, algorithm).await;
        assert_eq!(admitted, 100, "{algorithm}: 160 calls on a limit of 100");
    }
    let (pipelines, calls) = pipelined(&sluice);
    assert!(calls >= 800.0 && pipelines >= 1.0, "{calls} in {pipelines}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_the_settings_a_lone_call_goes_straight_and_concurrent_calls_share_pipelines() {
    let redis = RedisServer::start(&[]);
    let sluice = sluice_on(&redis, &[]);
    let mut client = sluice.client().await;
    let ask = request("r", vec![descriptor(&[("envoy", "plain")])]);
    for _ in 0..5 {
        assert_eq!(overall(&call(&mut client, ask.clone()).await), Code::Ok);
    }
    assert_eq!(
        pipelined(&sluice),
        (0.0, 0.0),
        "one call at a time goes straight to Redis"
    );
    for algorithm in ALGORITHMS {
        let admitted = admitted_by(&[&sluice], 16, 10, algorithm).await;
        assert_eq!(admitted, 100, "{algorithm}: 160 calls on a limit of 100");
    }
    let (pipelines, calls) = pipelined(&sluice);
    assert!(
        calls > pipelines && pipelines >= 1.0,
        "16 clients at once share pipelines: {calls} calls in {pipelines}"
    );
}

#[tokio::test]
async fn the_reference_s_window_of_0_turns_pipelining_off() {
    let redis = RedisServer::start(&[]);
    let sluice = sluice_on(&redis, &["--redis-pipeline-window", "0"]);
    let mut client = sluice.client().await;
    let ask = request("r", vec![descriptor(&[("envoy", "plain")])]);
    assert_eq!(overall(&call(&mut client, ask).await), Code::Ok);
    let (_, metrics) = sluice.http_get("/metrics");
    assert!(
        !metrics.contains("sluice_redis_pipelines_total"),
        "no pipelining metric when pipelining is off"
    );
}

#[tokio::test]
async fn a_flushed_script_is_loaded_again_for_a_call_in_a_pipeline() {
    let redis = RedisServer::start(&[]);
    let sluice = sluice_on(&redis, &["--redis-pipeline-window", "1ms"]);
    let mut client = sluice.client().await;
    let ask = || request("r", vec![descriptor(&[("envoy", "flushed")])]);
    let mut admitted = 0;
    for round in 0..7 {
        if round == 3 {
            redis.cli(&["FUNCTION", "FLUSH"]);
            redis.cli(&["SCRIPT", "FLUSH"]);
        }
        admitted += usize::from(overall(&call(&mut client, ask()).await) == Code::Ok);
    }
    assert_eq!(admitted, 5, "5 a minute, across a flush");
    assert!(
        sluice.wait_for_log("Redis lost the scripts"),
        "{}",
        sluice.log()
    );
}

#[tokio::test]
async fn a_lost_redis_fails_pipelined_calls_fast_and_they_recover() {
    let mut redis = RedisServer::start(&[]);
    let sluice = sluice_on(
        &redis,
        &[
            "--redis-command-timeout",
            "300ms",
            "--redis-pipeline-window",
            "1ms",
            "--redis-pipeline-limit",
            "8",
        ],
    );
    let mut client = sluice.client().await;
    let ask = || request("r", vec![descriptor(&[("fixed_window", "down")])]);
    assert_eq!(overall(&call(&mut client, ask()).await), Code::Ok);
    redis.stop();
    fails_fast(&mut client, &ask(), "cannot reach Redis").await;
    redis.restart();
    recovers(&mut client, &ask()).await;
}

#[tokio::test]
async fn a_hung_redis_fails_pipelined_calls_at_the_command_timeout_and_they_recover() {
    let redis = RedisServer::start(&[]);
    let sluice = sluice_on(
        &redis,
        &[
            "--redis-command-timeout",
            "300ms",
            "--redis-pipeline-window",
            "150us",
        ],
    );
    let mut client = sluice.client().await;
    let ask = || request("r", vec![descriptor(&[("fixed_window", "hung")])]);
    assert_eq!(overall(&call(&mut client, ask()).await), Code::Ok);
    // Stopped, not killed: the connection stays open and no answer comes.
    redis.signal("STOP");
    fails_fast(&mut client, &ask(), "Redis did not answer within 300 ms").await;
    redis.signal("CONT");
    recovers(&mut client, &ask()).await;
}

#[tokio::test]
async fn a_connection_redis_never_answers_on_is_given_up_and_calls_recover() {
    let redis = RedisServer::start(&[]);
    let link = Link::start(
        format!("127.0.0.1:{}", redis.port)
            .parse()
            .expect("an address"),
        Duration::ZERO,
    );
    let sluice = Sluice::on_redis_url(
        &[("config.yaml", CONFIG)],
        &link.url(),
        &["--redis-command-timeout", "300ms"],
        &[],
    );
    let mut client = sluice.client().await;
    let ask = || request("r", vec![descriptor(&[("fixed_window", "silent")])]);
    assert_eq!(overall(&call(&mut client, ask()).await), Code::Ok);
    // The connection stays open and nothing comes back on it, as from a peer that vanished.
    link.silence_open_connections();
    fails_fast(&mut client, &ask(), "Redis did not answer within 300 ms").await;
    // Past 5 x the command timeout (at least 2 s) sluice gives the connection up and opens
    // another, which the link carries.
    recovers(&mut client, &ask()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_killed_under_concurrent_calls_fails_each_call_fast_and_all_recover() {
    let mut redis = RedisServer::start(&[]);
    let sluice = sluice_on(&redis, &["--redis-command-timeout", "500ms"]);
    let running = Arc::new(AtomicBool::new(true));
    let mut clients = tokio::task::JoinSet::new();
    for index in 0..8usize {
        let mut client = sluice.client().await;
        let running = running.clone();
        clients.spawn(async move {
            // (answered OK, how long it took) for each call while Redis dies and comes back.
            let mut calls = Vec::new();
            let ask = |n: usize| {
                let value = format!("killed-{index}-{n}");
                request("r", vec![descriptor(&[("fixed_window", &value)])])
            };
            while running.load(Ordering::Relaxed) {
                let started = Instant::now();
                let answer = client.should_rate_limit(ask(calls.len())).await;
                if let Err(status) = &answer {
                    assert_eq!(status.code(), GrpcCode::Unavailable, "{status}");
                }
                calls.push((answer.is_ok(), started.elapsed()));
            }
            let last = client.should_rate_limit(ask(calls.len())).await;
            (calls, last.map(|answer| overall(&answer.into_inner())))
        });
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    redis.stop(); // kill -9: every call in flight loses its connection
    tokio::time::sleep(Duration::from_millis(700)).await;
    redis.restart();
    let mut client = sluice.client().await;
    recovers(
        &mut client,
        &request("r", vec![descriptor(&[("fixed_window", "back")])]),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    running.store(false, Ordering::Relaxed);
    let mut failed = 0;
    while let Some(joined) = clients.join_next().await {
        let (calls, last) = joined.expect("the client's task ends");
        for (_, took) in &calls {
            assert!(*took < Duration::from_secs(2), "a call took {took:?}");
        }
        failed += calls.iter().filter(|(ok, _)| !ok).count();
        assert!(calls.first().is_some_and(|(ok, _)| *ok), "answered before");
        assert_eq!(
            last.ok(),
            Some(Code::Ok),
            "answered again after the restart"
        );
    }
    assert!(failed > 0, "calls failed while Redis was down");
}

#[tokio::test]
async fn on_a_cluster_pipelining_is_reported_and_not_applied() {
    let nodes = crate::support::redis::start_cluster();
    let mut flags = crate::support::redis::cluster_flags(&nodes);
    flags.extend(["--redis-pipeline-window".to_string(), "150us".to_string()]);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let sluice = Sluice::start(CONFIG, &flags);
    assert!(
        sluice.wait_for_log("implicit pipelining is not applied on a Cluster"),
        "{}",
        sluice.log()
    );
    let mut client = sluice.client().await;
    let mut admitted = 0;
    for _ in 0..7 {
        let ask = request("r", vec![descriptor(&[("envoy", "cluster")])]);
        admitted += usize::from(overall(&call(&mut client, ask).await) == Code::Ok);
    }
    assert_eq!(admitted, 5, "5 a minute");
    let (_, metrics) = sluice.http_get("/metrics");
    assert!(
        !metrics.contains("sluice_redis_pipelines_total"),
        "{metrics}"
    );
}

/// 400 calls at once, 50 on each of 8 connections to `sluice`, each on a key of its own
/// (`c<connection>-<i>`) with hits `hits(connection, i)`; each call's response.
async fn at_once(
    sluice: &Sluice,
    hits: fn(usize, usize) -> u64,
) -> Vec<(usize, usize, RateLimitResponse)> {
    let mut calls = tokio::task::JoinSet::new();
    for connection in 0..8usize {
        let client = sluice.client().await;
        for i in 0..50usize {
            // Clones share their HTTP/2 connection.
            let mut client = client.clone();
            calls.spawn(async move {
                let value = format!("c{connection}-{i}");
                let entries = [("fixed_window", value.as_str())];
                let ask = request(
                    "r",
                    vec![descriptor_with_hits(&entries, hits(connection, i))],
                );
                (connection, i, call(&mut client, ask).await)
            });
        }
    }
    let mut responses = Vec::new();
    while let Some(joined) = calls.join_next().await {
        responses.push(joined.expect("the call's task ends"));
    }
    responses
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn calls_sharing_the_connection_each_get_their_own_reply_in_order() {
    let redis = RedisServer::start(&[]);
    let sluice = sluice_on(&redis, &[]);
    // Every key starts from a count of its own, so that each reply tells its call apart.
    let before = |connection: usize, i: usize| 1 + ((connection * 50 + i) % 60) as u64;
    let then = |connection: usize, i: usize| 1 + ((connection + i) % 7) as u64;
    for (_, _, response) in at_once(&sluice, before).await {
        assert_eq!(overall(&response), Code::Ok);
    }
    for (connection, i, response) in at_once(&sluice, then).await {
        let status = &response.statuses[0];
        assert_eq!(code(status), Code::Ok);
        let used = before(connection, i) + then(connection, i);
        assert_eq!(
            u64::from(status.limit_remaining),
            100 - used,
            "call {i} on connection {connection} is answered with its own key's count"
        );
    }
    let (pipelines, calls) = pipelined(&sluice);
    assert!(
        calls > pipelines && pipelines >= 1.0,
        "calls at once share writes: {calls} calls in {pipelines}"
    );
}
