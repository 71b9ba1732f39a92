//! Budget leasing (`budget_leasing`, docs/hot-keys.md): several replicas on one Redis (single,
//! Sentinel, Cluster) never admit past a window's limit, deny at most replicas x `max_chunk`
//! while budget remains, and call Redis at least 20 times less per admitted request than the
//! exact path; idle and stopping replicas give their chunks back; the combinations leasing
//! cannot bound are refused at load, and the bound is stated where an operator reads it. (One
//! replica against the exact path, call by call, is the store contract's: `store_contract::leasing`.)

use std::time::Duration;

use crate::support::redis::{
    cluster_flags, script_calls, sentinel_flags, single_flags, start_cluster, RedisServer,
};
use crate::support::{
    call, clear_of_a_windows_end, descriptor, descriptor_with_hits, overall, request, Sluice,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use sluice_config::{self as config, LoadOptions};

const CONFIG: &str = r#"
domain: hot
descriptors:
  - key: leased
    rate_limit:
      unit: hour
      requests_per_unit: 3000
      budget_leasing: {max_chunk: 50}
  - key: exact
    rate_limit:
      unit: hour
      requests_per_unit: 3000
"#;

/// What `calls` calls on descriptor `key=hot`, spread over `sluices` (four callers each, at
/// once), admitted.
async fn admitted_across(sluices: &[Sluice], key: &str, calls: usize) -> usize {
    let callers_each = 4;
    let per_caller = calls / (sluices.len() * callers_each);
    admitted_by_callers(sluices, key, callers_each, per_caller).await
}

/// What `per_caller` calls on descriptor `key=hot` by each of `callers_each` callers at each
/// of `sluices`, all at once, admitted.
async fn admitted_by_callers(
    sluices: &[Sluice],
    key: &str,
    callers_each: usize,
    per_caller: usize,
) -> usize {
    let mut tasks = Vec::new();
    for sluice in sluices {
        for _ in 0..callers_each {
            let mut client = sluice.client().await;
            let key = key.to_string();
            tasks.push(tokio::spawn(async move {
                let mut admitted = 0;
                for _ in 0..per_caller {
                    let ask = request("hot", vec![descriptor(&[(&key, "hot")])]);
                    admitted += usize::from(overall(&call(&mut client, ask).await) == Code::Ok);
                }
                admitted
            }));
        }
    }
    let mut admitted = 0;
    for task in tasks {
        admitted += task.await.expect("caller");
    }
    admitted
}

/// Script calls per admitted request on `key`, and the admitted count, for `calls` calls over
/// `sluices`, Redis's calls counted on `nodes`.
async fn cost_of(
    sluices: &[Sluice],
    nodes: &[&RedisServer],
    key: &str,
    calls: usize,
) -> (f64, usize) {
    let before: u64 = nodes.iter().map(|n| script_calls(n)).sum();
    let admitted = admitted_across(sluices, key, calls).await;
    let after: u64 = nodes.iter().map(|n| script_calls(n)).sum();
    ((after - before) as f64 / admitted.max(1) as f64, admitted)
}

/// `replicas` sluices on one Redis (`flags` name it) hammer a hot key, leased and exact, each
/// with twice its limit's demand within one window: the leased limit admits at most its limit
/// and at least the limit less replicas x max_chunk, at 20 times fewer script calls per
/// admitted request. (Limits of 1500: the bound is 30 chunks, twice the demand 3000 calls.)
async fn hot_key_across(replicas: usize, flags: &[String], nodes: &[&RedisServer]) {
    let args: Vec<&str> = flags.iter().map(String::as_str).collect();
    let config = CONFIG.replace("requests_per_unit: 3000", "requests_per_unit: 1500");
    let sluices: Vec<Sluice> = (0..replicas)
        .map(|_| Sluice::start_with(&[("config.yaml", &config)], &args, &[]))
        .collect();
    clear_of_a_windows_end(Duration::from_secs(3600), Duration::from_secs(40)).await;
    let (exact_cost, exact_admitted) = cost_of(&sluices, nodes, "exact", 3_000).await;
    let (leased_cost, leased_admitted) = cost_of(&sluices, nodes, "leased", 3_000).await;
    assert_eq!(exact_admitted, 1_500, "the exact path admits the limit");
    let bound = 1_500 - replicas * 50;
    assert!(
        (bound..=1_500).contains(&leased_admitted),
        "{replicas} replicas admitted {leased_admitted}: within [{bound}, 1500]"
    );
    assert!(
        exact_cost >= 20.0 * leased_cost,
        "{replicas} replicas: {exact_cost:.3} script calls per admitted request exact, {leased_cost:.3} leased"
    );
}

#[tokio::test]
async fn two_replicas_lease_a_hot_key_within_its_bound() {
    let redis = RedisServer::start(&[]);
    hot_key_across(2, &single_flags(&redis), &[&redis]).await;
}

#[tokio::test]
async fn four_replicas_lease_a_hot_key_within_its_bound() {
    let redis = RedisServer::start(&[]);
    hot_key_across(4, &single_flags(&redis), &[&redis]).await;
}

#[tokio::test]
async fn replicas_on_a_cluster_lease_a_hot_key_within_its_bound() {
    let nodes = start_cluster();
    let on: Vec<&RedisServer> = nodes.iter().collect();
    hot_key_across(2, &cluster_flags(&nodes), &on).await;
}

#[tokio::test]
async fn replicas_through_sentinel_lease_a_hot_key_within_its_bound() {
    let primary = RedisServer::start(&[]);
    let sentinel = RedisServer::start_sentinel("hotmaster", primary.port);
    let flags = sentinel_flags(&sentinel, "hotmaster");
    hot_key_across(2, &flags, &[&primary]).await;
}

/// The config error of `yaml` loaded with the reference's counting or not.
fn refusal(yaml: &str, every_hit: bool) -> String {
    let options = LoadOptions {
        every_hit,
        ..LoadOptions::default()
    };
    match config::load_str("leasing.yaml", yaml, options) {
        Ok(_) => String::new(),
        Err(error) => error.to_string(),
    }
}

#[test]
fn leasing_is_refused_where_its_bound_cannot_hold() {
    let with = |algorithm: &str, extra: &str| {
        format!(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: minute\n      requests_per_unit: 100\n      algorithm: {algorithm}\n{extra}      budget_leasing: {{max_chunk: 10}}\n"
        )
    };
    for (algorithm, extra, says) in [
        ("sliding_window_log", "", "leave the window early"),
        ("sliding_window_counter", "", "Redis's clock"),
        ("warm_up", "", "warm it early"),
        ("concurrency", "", "in flight"),
        ("fixed_window", "      debt: true\n", "debt"),
        (
            "token_bucket",
            "      penalty: {after: 3, within: 1m, block: 1m}\n",
            "strike",
        ),
    ] {
        let error = refusal(&with(algorithm, extra), false);
        assert!(
            error.contains("leasing.yaml:")
                && error.contains("budget_leasing")
                && error.contains(says),
            "{algorithm}: {error}"
        );
    }
    for algorithm in ["fixed_window", "token_bucket", "leaky_bucket"] {
        assert_eq!(refusal(&with(algorithm, ""), false), "", "{algorithm}");
    }
    let shared = refusal(&with("fixed_window", ""), true);
    assert!(
        shared.contains("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT")
            && shared.contains("envoyproxy/ratelimit"),
        "{shared}"
    );
}

#[test]
fn check_config_states_the_bound_of_a_leased_limit() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("hot.yaml");
    std::fs::write(&path, CONFIG).expect("write the config");
    let report = sluice::check::check(&[path], LoadOptions::default(), None);
    let text = report.out;
    assert!(report.passed, "{text}{}", report.err);
    assert!(
        text.contains("hot.leased: leased on Redis")
            && text.contains("a window never admits more than 3000")
            && text.contains("at most replicas x 50 is denied while budget remains"),
        "{text}"
    );
}

#[tokio::test]
async fn rlconfig_states_the_bound_of_a_leased_limit() {
    let sluice = Sluice::start(CONFIG, &[]);
    let (_, rlconfig) = sluice.http_get("/rlconfig");
    assert!(
        rlconfig.contains(
            "hot.leased: unit=HOUR requests_per_unit=3000, shadow_mode: false, budget_leasing: max_chunk 50, max_hold 1s (bound: never admits more than the limit; denies at most replicas x 50 while budget remains)"
        ),
        "{rlconfig}"
    );
}

/// What Redis counts of `key=hot` on a leased limit, read by a check (cost 0 goes to Redis).
async fn counted(sluice: &Sluice, key: &str, limit: u32) -> u32 {
    let mut client = sluice.client().await;
    let check = descriptor_with_hits(&[(key, "hot")], 0);
    let answer = call(&mut client, request("hot", vec![check])).await;
    limit - answer.statuses[0].limit_remaining
}

/// Makes `calls` calls on `key=hot`, one after another.
async fn spend(sluice: &Sluice, key: &str, calls: usize) {
    let mut client = sluice.client().await;
    for _ in 0..calls {
        let ask = request("hot", vec![descriptor(&[(key, "hot")])]);
        assert_eq!(overall(&call(&mut client, ask).await), Code::Ok);
    }
}

/// Spends at least `calls` calls on `key=hot` at `sluice`, and more until it holds part of a
/// chunk unspent (a chunk may end exactly at a call); how many calls it made.
async fn spend_holding(sluice: &Sluice, key: &str, calls: usize) -> u32 {
    spend(sluice, key, calls).await;
    let mut made = calls;
    let unspent = || {
        let metrics = sluice.http_get("/metrics").1;
        crate::support::series(&metrics, "sluice_budget_lease_unspent").unwrap_or(0.0)
    };
    while unspent() == 0.0 {
        assert!(made < calls + 10, "no chunk held after {made} calls");
        spend(sluice, key, 1).await;
        made += 1;
    }
    u32::try_from(made).unwrap_or(u32::MAX)
}

#[tokio::test]
async fn an_idle_replica_gives_its_chunk_back() {
    let redis = RedisServer::start(&[]);
    let sluice = Sluice::start(CONFIG, &["--store", "redis", "--redis-url", &redis.url()]);
    clear_of_a_windows_end(Duration::from_secs(3600), Duration::from_secs(20)).await;
    let made = spend_holding(&sluice, "leased", 200).await;
    let held = counted(&sluice, "leased", 3000).await;
    assert!(
        held > made,
        "Redis counts {held} for {made} calls: the chunk is charged up front"
    );
    until_redis_counts(&sluice, made).await;
    let metrics = sluice.http_get("/metrics").1;
    let value = |name: &str| crate::support::series(&metrics, name).unwrap_or(0.0);
    assert!(
        value("sluice_budget_lease_chunks_total") >= 1.0,
        "{metrics}"
    );
    assert!(
        value("sluice_budget_lease_served_total") >= 150.0,
        "{metrics}"
    );
    assert!(
        value("sluice_budget_lease_given_back_total") >= 1.0,
        "{metrics}"
    );
    assert_eq!(value("sluice_budget_lease_unspent"), 0.0, "{metrics}");
}

/// Two replicas serving `config` on a Redis of their own, with `run` before the hour's
/// window ends (every count of these tests is of one window).
async fn two_replicas(config: &str, run: Duration) -> (RedisServer, Sluice, Sluice) {
    let redis = RedisServer::start(&[]);
    let args = ["--store", "redis", "--redis-url", &redis.url()];
    let (first, second) = (Sluice::start(config, &args), Sluice::start(config, &args));
    clear_of_a_windows_end(Duration::from_secs(3600), run).await;
    (redis, first, second)
}

#[tokio::test]
async fn a_replica_that_stops_gives_its_chunk_back() {
    let config = CONFIG.replace("{max_chunk: 50}", "{max_chunk: 50, max_hold: 1m}");
    let (_redis, stopping, staying) = two_replicas(&config, Duration::from_secs(20)).await;
    let made = spend_holding(&stopping, "leased", 200).await;
    assert!(counted(&staying, "leased", 3000).await > made);
    drop(stopping);
    until_redis_counts(&staying, made).await;
}

/// Waits (at most 5 s) until Redis counts `leased` as exactly the `made` calls spent: every
/// unspent chunk given back.
async fn until_redis_counts(sluice: &Sluice, made: u32) {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while counted(sluice, "leased", 3000).await != made {
        assert!(
            std::time::Instant::now() < deadline,
            "the chunk was not given back"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_gives_every_chunk_back_for_the_other_replica_to_spend() {
    let config = CONFIG.replace("{max_chunk: 50}", "{max_chunk: 200, max_hold: 30s}");
    let (_redis, reloading, other) = two_replicas(&config, Duration::from_secs(40)).await;
    let made = spend_holding(&reloading, "leased", 400).await;
    assert!(
        counted(&other, "leased", 3000).await > made,
        "a chunk is held"
    );
    // The reload runs on the loader's own thread, as a SIGHUP's or a ConfigMap swap's does.
    let file = reloading.config_dir.path().join("config.yaml");
    std::fs::write(&file, format!("{config}# reloaded\n")).expect("rewrite the config");
    until_redis_counts(&other, made).await;
    let metrics = reloading.http_get("/metrics").1;
    let given_back = crate::support::series(&metrics, "sluice_budget_lease_given_back_total");
    assert!(given_back.unwrap_or(0.0) >= 1.0, "{metrics}");
    // The other replica spends what is left, exactly: the window admits its 3000 whole.
    let left = 3000 - made as usize;
    let admitted = admitted_across(std::slice::from_ref(&other), "leased", left + 96).await;
    assert_eq!(admitted, left, "{made} spent before the reload");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_two_callers_on_one_replica_hold_one_chunk_at_most() {
    let config = CONFIG.replace(
        "requests_per_unit: 3000\n      budget_leasing: {max_chunk: 50}",
        "requests_per_unit: 1000\n      budget_leasing: {max_chunk: 200, max_hold: 30s}",
    );
    let (_redis, busy, other) = two_replicas(&config, Duration::from_secs(40)).await;
    // 32 callers at once, 13 calls each: concurrent misses, each of which once took a chunk.
    let made = admitted_by_callers(std::slice::from_ref(&busy), "leased", 32, 13).await;
    assert_eq!(made, 416, "all within the limit");
    let held = counted(&other, "leased", 1000).await - 416;
    println!("held by the replica after 416 calls from 32 callers: {held}");
    assert!(held <= 200, "{held} held: past max_chunk");
    // The other replica is denied nothing of what is left but what the first one holds.
    let admitted = admitted_by_callers(std::slice::from_ref(&other), "leased", 4, 200).await;
    assert_eq!(admitted, 1000 - 416 - held as usize);
}
