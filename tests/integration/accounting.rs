//! How a request of several descriptors is charged, through the real binary on every store:
//! a denied request charges none of its descriptors (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT,
//! true by default), or, set to false, every hit of every descriptor, as the reference does.

use crate::support::redis::{cluster_flags, script_calls, start_cluster, RedisServer};
use crate::support::*;

const CONFIG: &str = include_str!("../fixtures/cases/accounting/config.yaml");

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

/// A sluice on `config` for each store: memory, and Redis on `redis`.
fn on_every_store(config: &str, redis: &RedisServer) -> [(&'static str, Sluice); 2] {
    let args = redis_args(redis);
    let on_redis: Vec<&str> = args.iter().map(String::as_str).collect();
    [
        ("memory", Sluice::start(config, &[])),
        ("redis", Sluice::start(config, &on_redis)),
    ]
}

fn redis_args(redis: &RedisServer) -> Vec<String> {
    ["--store", "redis", "--redis-url", &redis.url()]
        .map(str::to_string)
        .to_vec()
}

#[tokio::test]
async fn a_denied_request_charges_none_of_its_descriptors_on_every_store() {
    let redis = RedisServer::start(&[]);
    for (store, sluice) in on_every_store(CONFIG, &redis) {
        let (remaining, codes) = four_requests(&sluice).await;
        assert_eq!(remaining, [4, 4, 4, 4], "{store}");
        let over = [Code::Ok, Code::OverLimit, Code::OverLimit, Code::OverLimit];
        assert_eq!(codes, over, "{store}");
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
        assert_eq!(response.statuses[0].limit_remaining, 2, "{store}");
    }
}

#[tokio::test]
async fn stop_cache_key_increment_when_overlimit_false_charges_as_the_reference() {
    let redis = RedisServer::start(&[]);
    let nodes = start_cluster();
    let (single, cluster) = (redis_args(&redis), cluster_flags(&nodes));
    let stores: [Vec<&str>; 3] = [
        vec![],
        single.iter().map(String::as_str).collect(),
        cluster.iter().map(String::as_str).collect(),
    ];
    for flag in stores {
        let env = [("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "false")];
        let sluice = Sluice::start_with(&[("config.yaml", CONFIG)], &flag, &env);
        let (remaining, _) = four_requests(&sluice).await;
        assert_eq!(remaining, [4, 3, 2, 1], "{flag:?}");
        // b's denied hits were counted too (4 of 1): a read of it is over.
        let mut client = sluice.client().await;
        let b = call(
            &mut client,
            request("acct", vec![descriptor_with_hits(&[("b", "y")], 0)]),
        )
        .await;
        assert_eq!(code(&b.statuses[0]), Code::OverLimit, "{flag:?}");
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

/// 64 clients send requests of `metered` (cost 7, taking debt) and `scarce` at once; returns
/// the seconds until `metered` admits again, and how many seconds the total of 2240 reported
/// (1240 in debt, at 1000 a day: 86.4 s a token) says.
async fn sixty_four_clients_reporting(sluice: &Sluice) -> (i64, i64) {
    let mut tasks = Vec::new();
    for _ in 0..64 {
        let mut client = sluice.client().await;
        tasks.push(tokio::spawn(async move {
            for _ in 0..5 {
                let pair = request(
                    "acct",
                    vec![
                        descriptor_with_hits(&[("metered", "m")], 7),
                        descriptor_with_hits(&[("scarce", "r")], 1),
                    ],
                );
                call(&mut client, pair).await;
            }
        }));
    }
    for task in tasks {
        task.await.expect("client task");
    }
    let mut client = sluice.client().await;
    let read = request("acct", vec![descriptor_with_hits(&[("metered", "m")], 0)]);
    let status = call(&mut client, read).await.statuses[0].clone();
    let wait = status.duration_until_reset.map_or(0, |d| d.seconds);
    (wait, 1240 * 864 / 10)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_one_descriptor_exhausted_the_other_is_charged_exactly_what_was_admitted() {
    let memory = Sluice::start(CONFIG, &[]);
    let redis = RedisServer::start(&[]);
    let args = redis_args(&redis);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let single = Sluice::start(CONFIG, &args);
    let nodes = start_cluster();
    let flags = cluster_flags(&nodes);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let cluster = Sluice::start(CONFIG, &flags);
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
        // Debt is charged even by the requests scarce denies: every report lands. One report
        // lost or doubled would move the wait by 7 x 86.4 = 605 s; the test's own seconds
        // refill a few.
        let (wait, expected) = sixty_four_clients_reporting(sluice).await;
        assert!(
            (expected - 60..=expected).contains(&wait),
            "{store}: waits {wait} s, the total reported says {expected} s"
        );
    }
}

const DEBT_CONFIG: &str = include_str!("../fixtures/cases/accounting/debt_config.yaml");

/// A request of one descriptor of `cost`.
fn costing(key: &str, cost: u64) -> RateLimitRequest {
    request("ai", vec![descriptor_with_hits(&[(key, "k")], cost)])
}

#[tokio::test]
async fn costs_reported_after_the_response_land_in_debt_on_every_store() {
    let redis = RedisServer::start(&[]);
    for (store, sluice) in on_every_store(DEBT_CONFIG, &redis) {
        let mut client = sluice.client().await;
        assert_eq!(
            overall(&call(&mut client, costing("tokens", 900)).await),
            Code::Ok
        );
        let over = call(&mut client, costing("tokens", 300)).await;
        assert_eq!(overall(&over), Code::OverLimit, "{store}");
        assert_eq!(over.statuses[0].limit_remaining, 0);
        let wait = over.statuses[0]
            .duration_until_reset
            .map_or(0, |d| d.seconds);
        assert!(
            wait > 0 && wait <= 3600,
            "{store}: told when cost 1 fits: {wait}"
        );
        let check = call(&mut client, costing("tokens", 0)).await;
        assert_eq!(
            overall(&check),
            Code::OverLimit,
            "{store}: 1200 of 1000 used"
        );
        // Without debt the report that does not fit is not counted.
        call(&mut client, costing("plain", 900)).await;
        call(&mut client, costing("plain", 300)).await;
        let check = call(&mut client, costing("plain", 0)).await;
        assert_eq!(overall(&check), Code::Ok, "{store}");
        assert_eq!(check.statuses[0].limit_remaining, 100);
    }
}

#[tokio::test]
async fn debt_for_every_limit_with_a_setting_unless_a_limit_says_otherwise() {
    let sluice = Sluice::start(DEBT_CONFIG, &["--debt"]);
    let mut client = sluice.client().await;
    call(&mut client, costing("plain", 1200)).await;
    call(&mut client, costing("opted_out", 1200)).await;
    let plain = call(&mut client, costing("plain", 0)).await;
    assert_eq!(
        overall(&plain),
        Code::OverLimit,
        "--debt: the report of 1200 landed"
    );
    let opted_out = call(&mut client, costing("opted_out", 0)).await;
    assert_eq!(
        overall(&opted_out),
        Code::Ok,
        "debt: false in the file wins"
    );
}

#[tokio::test]
async fn several_limits_on_one_descriptor_bind_and_charge_together_on_every_store() {
    let redis = RedisServer::start(&[]);
    for (store, sluice) in on_every_store(DEBT_CONFIG, &redis) {
        let mut client = sluice.client().await;
        let mut seen = Vec::new();
        for _ in 0..5 {
            let response = call(&mut client, costing("api_key", 1)).await;
            let status = &response.statuses[0];
            let limit = status.current_limit.as_ref().expect("a limit");
            seen.push((code(status), status.limit_remaining, limit.name.clone()));
        }
        let hourly = |code, remaining| (code, remaining, "hourly".to_string());
        assert_eq!(
            seen,
            [
                hourly(Code::Ok, 2),
                hourly(Code::Ok, 1),
                hourly(Code::Ok, 0),
                hourly(Code::OverLimit, 0),
                hourly(Code::OverLimit, 0),
            ],
            "{store}: the hourly limit binds"
        );
        // The denials charged neither limit: the daily one took 3 of its 5.
        if store == "redis" {
            let keys = redis.cli(&["--scan", "--pattern", "ai_api_key_k_#1_*"]);
            let key = keys
                .lines()
                .next()
                .expect("the daily limit's key")
                .to_string();
            assert_eq!(redis.cli(&["GET", &key]).trim(), "3");
        }
    }
}

#[tokio::test]
async fn several_limits_in_different_slots_of_a_cluster_charge_together() {
    let nodes = start_cluster();
    let flags = cluster_flags(&nodes);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let sluice = Sluice::start(DEBT_CONFIG, &flags);
    let mut client = sluice.client().await;
    let mut codes = Vec::new();
    for _ in 0..5 {
        codes.push(overall(&call(&mut client, costing("api_key", 1)).await));
    }
    assert_eq!(codes.iter().filter(|&&c| c == Code::Ok).count(), 3);
    // The daily limit's key, wherever its slot is: charged by the 3 admitted calls only.
    let daily: Vec<String> = nodes
        .iter()
        .flat_map(|node| {
            let keys = node.cli(&["--scan", "--pattern", "ai_api_key_k_#1_*"]);
            keys.lines()
                .map(|key| node.cli(&["GET", key]).trim().to_string())
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(daily, ["3"], "the denied calls charged neither limit");
}
