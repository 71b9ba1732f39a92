//! How a request of several descriptors is charged, through the real binary on every store:
//! a denied request charges none of its descriptors (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT,
//! true by default), or, set to false, every descriptor that admits it, as the reference does.

use crate::support::redis::{script_calls, start_cluster, RedisServer};
use crate::support::*;

const CONFIG: &str = r#"
domain: acct
descriptors:
  - key: a
    rate_limit: {unit: day, requests_per_unit: 5}
  - key: b
    rate_limit: {unit: day, requests_per_unit: 1}
  - key: shadowed
    shadow_mode: true
    rate_limit: {unit: day, requests_per_unit: 1}
  - key: open
    rate_limit: {unit: day, requests_per_unit: 1000}
  - key: scarce
    rate_limit: {unit: day, requests_per_unit: 10}
"#;

fn both() -> RateLimitRequest {
    request(
        "acct",
        vec![descriptor(&[("a", "x")]), descriptor(&[("b", "y")])],
    )
}

/// `a`'s remaining, as a request of `a` alone at cost 0 reads it.
async fn remaining_of_a(client: &mut Client) -> u32 {
    let response = call(
        client,
        request("acct", vec![descriptor_with_hits(&[("a", "x")], 0)]),
    )
    .await;
    response.statuses[0].limit_remaining
}

/// Four requests of `a` and `b`: `a`'s remaining after each, and the overall codes.
async fn four_requests(sluice: &Sluice) -> (Vec<u32>, Vec<Code>) {
    let mut client = sluice.client().await;
    let (mut remaining, mut codes) = (Vec::new(), Vec::new());
    for _ in 0..4 {
        let response = call(&mut client, both()).await;
        assert_eq!(code(&response.statuses[0]), Code::Ok, "a admits by itself");
        remaining.push(response.statuses[0].limit_remaining);
        codes.push(overall(&response));
    }
    assert_eq!(
        remaining_of_a(&mut client).await,
        *remaining.last().unwrap_or(&0)
    );
    (remaining, codes)
}

fn redis_args(redis: &RedisServer) -> Vec<String> {
    ["--store", "redis", "--redis-url", &redis.url()]
        .map(str::to_string)
        .to_vec()
}

#[tokio::test]
async fn a_denied_request_charges_none_of_its_descriptors_on_every_store() {
    let redis = RedisServer::start(&[]);
    let args = redis_args(&redis);
    let on_redis: Vec<&str> = args.iter().map(String::as_str).collect();
    for store_args in [&[][..], &on_redis[..]] {
        let sluice = Sluice::start(CONFIG, store_args);
        let (remaining, codes) = four_requests(&sluice).await;
        assert_eq!(remaining, [4, 4, 4, 4], "{store_args:?}");
        let over = [Code::Ok, Code::OverLimit, Code::OverLimit, Code::OverLimit];
        assert_eq!(codes, over, "{store_args:?}");
        // A shadow-mode descriptor over its limit denies nothing, so the request is charged.
        let mut client = sluice.client().await;
        let shadowed = || {
            request(
                "acct",
                vec![descriptor(&[("a", "x")]), descriptor(&[("shadowed", "s")])],
            )
        };
        call(&mut client, shadowed()).await;
        let response = call(&mut client, shadowed()).await;
        assert_eq!(overall(&response), Code::Ok);
        assert_eq!(response.statuses[0].limit_remaining, 2, "{store_args:?}");
    }
}

#[tokio::test]
async fn stop_cache_key_increment_when_overlimit_false_charges_as_the_reference() {
    let redis = RedisServer::start(&[]);
    let args = redis_args(&redis);
    let mut on_redis: Vec<&str> = args.iter().map(String::as_str).collect();
    for flag in [vec![], std::mem::take(&mut on_redis)] {
        let env = [("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "false")];
        let sluice = Sluice::start_with(&[("config.yaml", CONFIG)], &flag, &env);
        let (remaining, _) = four_requests(&sluice).await;
        assert_eq!(remaining, [4, 3, 2, 1], "{flag:?}");
    }
}

#[tokio::test]
async fn a_request_is_one_script_call_on_a_single_redis() {
    let redis = RedisServer::start(&[]);
    let args = redis_args(&redis);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let sluice = Sluice::start(CONFIG, &args);
    let mut client = sluice.client().await;
    let eight = request(
        "acct",
        (0..8)
            .map(|i| descriptor(&[("open", &format!("v{i}"))]))
            .collect(),
    );
    let before = script_calls(&redis);
    for _ in 0..10 {
        assert_eq!(overall(&call(&mut client, eight.clone()).await), Code::Ok);
    }
    assert_eq!(
        script_calls(&redis) - before,
        10,
        "one call per request, not per descriptor"
    );
}

/// 64 clients send requests of `open` and `scarce` (10 a day) at once; returns how many were
/// admitted and how much of `open` was charged.
async fn sixty_four_clients(sluice: &Sluice) -> (u32, u32) {
    let mut tasks = Vec::new();
    for _ in 0..64 {
        let mut client = sluice.client().await;
        tasks.push(tokio::spawn(async move {
            let mut admitted = 0;
            for _ in 0..5 {
                let pair = request(
                    "acct",
                    vec![descriptor(&[("open", "o")]), descriptor(&[("scarce", "s")])],
                );
                admitted += u32::from(overall(&call(&mut client, pair).await) == Code::Ok);
            }
            admitted
        }));
    }
    let mut admitted = 0;
    for task in tasks {
        admitted += task.await.expect("client task");
    }
    let mut client = sluice.client().await;
    let read = request("acct", vec![descriptor_with_hits(&[("open", "o")], 0)]);
    let remaining = call(&mut client, read).await.statuses[0].limit_remaining;
    (admitted, 1000 - remaining)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_one_descriptor_exhausted_the_other_is_charged_exactly_what_was_admitted() {
    let memory = Sluice::start(CONFIG, &[]);
    let redis = RedisServer::start(&[]);
    let args = redis_args(&redis);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let single = Sluice::start(CONFIG, &args);
    let nodes = start_cluster();
    let urls: Vec<String> = nodes.iter().map(|n| n.url()).collect();
    let urls = urls.join(",");
    let cluster_args = [
        "--store",
        "redis",
        "--redis-type",
        "cluster",
        "--redis-url",
        &urls,
    ];
    let cluster = Sluice::start(CONFIG, &cluster_args);
    for (store, sluice) in [
        ("memory", &memory),
        ("redis", &single),
        ("cluster", &cluster),
    ] {
        let (admitted, charged) = sixty_four_clients(sluice).await;
        assert_eq!(admitted, 10, "{store}: 320 requests on a limit of 10");
        assert_eq!(
            charged, admitted,
            "{store}: open charged once per admitted request"
        );
    }
}
