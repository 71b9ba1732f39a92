//! The real binary on `--store redis` against real `redis-server` processes: envoyproxy/ratelimit
//! key compatibility, exact limits under concurrency on one and on two sluice processes, and
//! faults (SCRIPT FLUSH under load, Redis stopped and restarted).

use std::time::{Duration, Instant};

use crate::support::redis::{script_calls, RedisServer};
use crate::support::*;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use tonic::Code as GrpcCode;

pub(crate) const CONFIG: &str = include_str!("../fixtures/cases/redis_store/config.yaml");

pub(crate) const ALGORITHMS: [&str; 5] = [
    "fixed_window",
    "sliding_window_log",
    "sliding_window_counter",
    "token_bucket",
    "leaky_bucket",
];

pub(crate) fn sluice_on(redis: &RedisServer, extra: &[&str]) -> Sluice {
    Sluice::on_redis_url(&[("config.yaml", CONFIG)], &redis.url(), extra, &[])
}

/// `clients` clients, each on its own connection to one of `servers`, fire `calls` each at
/// `key`; returns how many were admitted.
pub(crate) async fn admitted_by(
    servers: &[&Sluice],
    clients: usize,
    calls: usize,
    key: &str,
) -> usize {
    let mut tasks = Vec::new();
    for index in 0..clients {
        let mut client = servers[index % servers.len()].client().await;
        let key = key.to_string();
        tasks.push(tokio::spawn(async move {
            let mut admitted = 0;
            for _ in 0..calls {
                let response = call_one(&mut client, "r", &[(&key, "hot")]).await;
                admitted += usize::from(overall(&response) == Code::Ok);
            }
            admitted
        }));
    }
    let mut total = 0;
    for task in tasks {
        total += task.await.expect("client task");
    }
    total
}

#[tokio::test]
async fn check_writes_zero_key_in_the_reference_and_no_key_in_sluice() {
    let redis = RedisServer::start(&[]);
    let sluice = sluice_on(&redis, &["--cache-key-prefix", "ratelimit_"]);
    let mut client = sluice.client().await;
    // A check (hits_addend 0): the reference writes the key holding 0; sluice writes nothing.
    let check = request("r", vec![descriptor_with_hits(&[("envoy", "bob")], 0)]);
    let response = client.should_rate_limit(check).await.expect("answered");
    assert_eq!(overall(&response.into_inner()), Code::Ok);
    let keys = redis.cli(&["--scan", "--pattern", "ratelimit_r_envoy_bob_*"]);
    assert_eq!(keys.trim(), "", "no key written by a check");
    // A hit writes the key the reference writes.
    call_one(&mut client, "r", &[("envoy", "bob")]).await;
    let keys = redis.cli(&["--scan", "--pattern", "ratelimit_r_envoy_bob_*"]);
    assert_eq!(keys.lines().count(), 1, "{keys}");
}

#[tokio::test]
async fn fixed_window_writes_the_key_envoyproxy_ratelimit_writes() {
    let redis = RedisServer::start(&[]);
    let sluice = sluice_on(&redis, &["--cache-key-prefix", "ratelimit_"]);
    let mut client = sluice.client().await;
    call_times(&mut client, "r", &[("envoy", "alice")], 3).await;
    // The reference: prefix + domain + "_" + key + "_" + value + "_" + window start in seconds.
    let keys = redis.cli(&["--scan", "--pattern", "ratelimit_r_envoy_alice_*"]);
    let keys: Vec<&str> = keys.lines().collect();
    assert_eq!(keys.len(), 1, "{keys:?}");
    let window: u64 = keys[0]
        .rsplit('_')
        .next()
        .unwrap()
        .parse()
        .expect("window start");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert_eq!(window % 60, 0, "a minute window starts on a whole minute");
    assert!(now - window < 61, "the current window");
    assert_eq!(
        redis.cli(&["GET", keys[0]]).trim(),
        "3",
        "the same integer counter"
    );
    let ttl: i64 = redis.cli(&["TTL", keys[0]]).trim().parse().unwrap();
    assert!((0..=61).contains(&ttl), "expires with its window: {ttl}");
    // A count written by the reference server is honoured.
    redis.cli(&["SET", keys[0], "5"]);
    let response = call_one(&mut client, "r", &[("envoy", "alice")]).await;
    assert_eq!(overall(&response), Code::OverLimit);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_clients_get_exactly_the_limit_for_every_algorithm() {
    let redis = RedisServer::start(&[]);
    let sluice = sluice_on(&redis, &[]);
    for algorithm in ALGORITHMS {
        let admitted = admitted_by(&[&sluice], 16, 10, algorithm).await;
        assert_eq!(admitted, 100, "{algorithm}: 160 calls on a limit of 100");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_sluice_processes_sharing_redis_admit_exactly_the_limit() {
    let redis = RedisServer::start(&[]);
    let first = sluice_on(&redis, &[]);
    let second = sluice_on(&redis, &[]);
    for algorithm in ALGORITHMS {
        let admitted = admitted_by(&[&first, &second], 16, 10, algorithm).await;
        assert_eq!(admitted, 100, "{algorithm} across two replicas");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn script_and_function_flushes_under_load_are_invisible_to_clients() {
    let redis = RedisServer::start(&[]);
    let sluice = sluice_on(&redis, &[]);
    assert!(sluice.wait_for_log("calls are FCALL"), "{}", sluice.log());
    let port = redis.port;
    let flusher = std::thread::spawn(move || {
        for _ in 0..10 {
            crate::support::redis::cli(port, &["FUNCTION", "FLUSH"]);
            crate::support::redis::cli(port, &["SCRIPT", "FLUSH"]);
            std::thread::sleep(Duration::from_millis(30));
        }
    });
    let mut tasks = Vec::new();
    for index in 0..8 {
        let mut client = sluice.client().await;
        tasks.push(tokio::spawn(async move {
            let mut errors = Vec::new();
            for call_index in 0..60 {
                let key = ALGORITHMS[(index + call_index) % ALGORITHMS.len()];
                let result = client
                    .should_rate_limit(request("r", vec![descriptor(&[(key, "flush")])]))
                    .await;
                if let Err(status) = result {
                    errors.push(status.to_string());
                }
            }
            errors
        }));
    }
    let mut errors = Vec::new();
    for task in tasks {
        errors.extend(task.await.expect("client task"));
    }
    flusher.join().expect("flusher");
    assert!(errors.is_empty(), "clients saw errors: {errors:?}");
    assert!(
        sluice.wait_for_log("Redis lost the scripts"),
        "the flushes were noticed and healed"
    );
}

/// Three calls in a row fail with UNAVAILABLE saying `reason` (in any case), each within 2 s.
pub(crate) async fn fails_fast(client: &mut Client, ask: &RateLimitRequest, reason: &str) {
    for _ in 0..3 {
        let started = Instant::now();
        let status = client
            .should_rate_limit(ask.clone())
            .await
            .expect_err("Redis is lost");
        assert_eq!(status.code(), GrpcCode::Unavailable, "{status}");
        let message = status.message().to_lowercase();
        assert!(message.contains(&reason.to_lowercase()), "{status}");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "failed in {:?}",
            started.elapsed()
        );
    }
}

/// The failed calls counted under `err_type` (0 when none were).
fn failures(sluice: &Sluice, err_type: &str) -> f64 {
    let (_, metrics) = sluice.http_get("/metrics");
    let name = format!(r#"ratelimit_service_should_rate_limit_error{{err_type="{err_type}"}}"#);
    series(&metrics, &name).unwrap_or(0.0)
}

#[tokio::test]
async fn a_redis_without_functions_is_called_with_evalsha() {
    // Redis before 7 has no FUNCTION command; renaming it away makes one.
    let redis = RedisServer::start(&["--rename-command", "FUNCTION", ""]);
    let sluice = sluice_on(&redis, &[]);
    assert!(sluice.wait_for_log("calls are EVALSHA"), "{}", sluice.log());
    let mut client = sluice.client().await;
    let ask = || request("r", vec![descriptor(&[("envoy", "old")])]);
    let mut admitted = 0;
    for round in 0..7 {
        if round == 3 {
            redis.cli(&["SCRIPT", "FLUSH"]);
        }
        admitted += usize::from(overall(&call(&mut client, ask()).await) == Code::Ok);
    }
    assert_eq!(admitted, 5, "5 a minute, across a flush");
    assert!(script_calls(&redis) >= 7);
}

/// Calls until one is answered OK, within 10 s; until then only UNAVAILABLE is allowed.
pub(crate) async fn recovers(client: &mut Client, ask: &RateLimitRequest) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match client.should_rate_limit(ask.clone()).await {
            Ok(response) => {
                assert_eq!(overall(&response.into_inner()), Code::Ok);
                return;
            }
            Err(status) if Instant::now() < deadline => {
                assert_eq!(status.code(), GrpcCode::Unavailable);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(status) => panic!("not recovered 10 s after Redis came back: {status}"),
        }
    }
}

#[tokio::test]
async fn a_lost_redis_fails_fast_and_recovers_without_a_restart() {
    let mut redis = RedisServer::start(&[]);
    let sluice = sluice_on(&redis, &["--redis-command-timeout", "300ms"]);
    let mut client = sluice.client().await;
    let ask = || request("r", vec![descriptor(&[("fixed_window", "down")])]);
    assert_eq!(overall(&call(&mut client, ask()).await), Code::Ok);
    redis.stop();
    fails_fast(&mut client, &ask(), "cannot reach Redis").await;
    assert!(failures(&sluice, "redis_error") >= 1.0);
    let (_, metrics) = sluice.http_get("/metrics");
    assert!(series(&metrics, r#"sluice_store_errors_total{kind="unreachable"}"#) >= Some(1.0));
    redis.restart();
    recovers(&mut client, &ask()).await;
    assert!(
        sluice.wait_for_log("Redis is reachable again"),
        "{}",
        sluice.log()
    );
    let log = sluice.log();
    assert_eq!(
        log.matches("Redis is unreachable").count(),
        1,
        "logged once, not per call: {log}"
    );
    assert_eq!(log.matches("Redis is reachable again").count(), 1, "{log}");
}

#[tokio::test]
async fn a_hung_redis_fails_calls_at_the_command_timeout_and_recovers() {
    let redis = RedisServer::start(&[]);
    let sluice = sluice_on(&redis, &["--redis-command-timeout", "300ms"]);
    let mut client = sluice.client().await;
    let ask = || request("r", vec![descriptor(&[("fixed_window", "hung")])]);
    assert_eq!(overall(&call(&mut client, ask()).await), Code::Ok);
    // Stopped, not killed: the connection stays open and no answer comes.
    redis.signal("STOP");
    fails_fast(&mut client, &ask(), "Redis did not answer within 300 ms").await;
    // Counted as the reference counts it; a timeout is told apart from a lost connection in
    // sluice's own counter.
    assert_eq!(failures(&sluice, "redis_error"), 3.0);
    let (_, metrics) = sluice.http_get("/metrics");
    assert_eq!(
        series(&metrics, r#"sluice_store_errors_total{kind="unreachable"}"#),
        Some(0.0),
        "{metrics}"
    );
    assert_eq!(
        series(&metrics, r#"sluice_store_errors_total{kind="timeout"}"#),
        Some(3.0),
        "{metrics}"
    );
    redis.signal("CONT");
    recovers(&mut client, &ask()).await;
}

#[tokio::test]
async fn failure_mode_answers_ok_or_over_limit_when_redis_is_lost() {
    let mut redis = RedisServer::start(&[]);
    let allow = sluice_on(
        &redis,
        &[
            "--failure-mode",
            "allow",
            "--redis-command-timeout",
            "300ms",
        ],
    );
    let deny = sluice_on(
        &redis,
        &["--failure-mode", "deny", "--redis-command-timeout", "300ms"],
    );
    redis.stop();
    let ask = || request("r", vec![descriptor(&[("token_bucket", "lost")])]);
    let mut client = allow.client().await;
    assert_eq!(overall(&call(&mut client, ask()).await), Code::Ok);
    let mut client = deny.client().await;
    assert_eq!(overall(&call(&mut client, ask()).await), Code::OverLimit);
}

#[tokio::test]
async fn startup_waits_for_redis() {
    let port = crate::support::redis::free_port();
    let url = format!("redis://127.0.0.1:{port}");
    let starter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(800));
        RedisServer::start_on(port, &[])
    });
    let sluice = Sluice::on_redis_url(
        &[("config.yaml", CONFIG)],
        &url,
        &["--redis-startup-wait", "15s"],
        &[],
    );
    let _redis = starter.join().expect("redis started");
    assert!(
        sluice.log().contains("waiting for Redis"),
        "{}",
        sluice.log()
    );
    let mut client = sluice.client().await;
    let response = call_one(&mut client, "r", &[("fixed_window", "late")]).await;
    assert_eq!(overall(&response), Code::Ok);
}

#[tokio::test]
async fn the_local_cache_answers_a_flood_on_an_over_limit_key_without_redis() {
    let redis = RedisServer::start(&[]);
    let url = redis.url();
    let sluice = Sluice::start_with(
        &[("config.yaml", CONFIG)],
        &["--store", "redis", "--redis-url", &url],
        &[("LOCAL_CACHE_SIZE_IN_BYTES", "1048576")],
    );
    let mut client = sluice.client().await;
    // An hourly limit: a minute's would reset if the test ran across a minute's end.
    let ask = || request("r", vec![descriptor(&[("flood", "f")])]);
    for _ in 0..6 {
        call(&mut client, ask()).await; // 5 admitted, the 6th denied and remembered
    }
    let before = script_calls(&redis);
    for _ in 0..200 {
        let response = call(&mut client, ask()).await;
        assert_eq!(overall(&response), Code::OverLimit);
        let reset = response.statuses[0].duration_until_reset.expect("a wait");
        assert!(reset.seconds >= 1 && reset.seconds <= 3600, "{reset:?}");
    }
    assert_eq!(
        script_calls(&redis),
        before,
        "the flood cost no Redis round trips"
    );
    // Another key still goes to Redis.
    call_one(&mut client, "r", &[("envoy", "other")]).await;
    assert_eq!(script_calls(&redis), before + 1);
}

#[tokio::test]
async fn a_reference_deployment_environment_selects_redis() {
    let redis = RedisServer::start(&[]);
    let address = format!("127.0.0.1:{}", redis.port);
    let envs = [
        ("BACKEND_TYPE", "redis"),
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", address.as_str()),
    ];
    let sluice = Sluice::start_with(&[("config.yaml", CONFIG)], &[], &envs);
    let mut client = sluice.client().await;
    call_one(&mut client, "r", &[("envoy", "env")]).await;
    assert_eq!(
        redis
            .cli(&["--scan", "--pattern", "r_envoy_env_*"])
            .lines()
            .count(),
        1
    );
}

#[tokio::test]
async fn healthcheck_follows_the_store_when_asked() {
    let mut redis = RedisServer::start(&[]);
    let sluice = sluice_on(
        &redis,
        &["--healthcheck-store", "--redis-command-timeout", "300ms"],
    );
    assert_eq!(sluice.http_get("/healthcheck"), (200, "OK".to_string()));
    redis.stop();
    let (status, body) = sluice.http_get("/healthcheck");
    assert_eq!(status, 500, "{body}");
    redis.restart();
    let deadline = Instant::now() + Duration::from_secs(10);
    while sluice.http_get("/healthcheck").0 != 200 {
        assert!(
            Instant::now() < deadline,
            "healthy again once Redis is back"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Without the setting, a lost store does not fail the health check.
    let plain = sluice_on(&redis, &[]);
    redis.stop();
    assert_eq!(plain.http_get("/healthcheck").0, 200);
}

#[tokio::test]
async fn redis_health_check_active_connection_makes_grpc_health_follow_redis() {
    use tonic_health::pb::health_check_response::ServingStatus;
    let (mut redis, sluice) = Sluice::on_own_redis(
        &[("config.yaml", CONFIG)],
        &["--redis-command-timeout", "300ms"],
        &[("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "true")],
    );
    let wait_for = |expected: ServingStatus| {
        let code = if expected == ServingStatus::Serving {
            200
        } else {
            500
        };
        sluice.wait_health((expected as i32, code))
    };
    assert!(wait_for(ServingStatus::Serving).await);
    redis.stop();
    assert!(
        wait_for(ServingStatus::NotServing).await,
        "{}",
        sluice.log()
    );
    assert_eq!(sluice.http_get("/healthcheck").0, 500);
    redis.restart();
    assert!(wait_for(ServingStatus::Serving).await, "{}", sluice.log());
}

#[tokio::test]
async fn redis_auth_applies_to_a_redis_url_without_credentials() {
    let redis = RedisServer::start(&[]);
    redis.cli(&["CONFIG", "SET", "requirepass", "s3cret"]);
    let url = redis.url();
    let sluice = Sluice::start_with(
        &[("config.yaml", CONFIG)],
        &["--store", "redis", "--redis-url", &url],
        &[("REDIS_AUTH", "s3cret")],
    );
    let mut client = sluice.client().await;
    let response = call_one(&mut client, "r", &[("envoy", "auth")]).await;
    assert_eq!(overall(&response), Code::Ok);
    assert!(!sluice.log().contains("s3cret"), "no secret in logs");
}

#[tokio::test]
async fn a_redis_refusing_writes_is_logged_once_as_answering_errors_not_as_unreachable() {
    let redis = RedisServer::start(&[]);
    let sluice = sluice_on(&redis, &[]);
    let mut client = sluice.client().await;
    call_one(&mut client, "r", &[("envoy", "warm")]).await;
    redis.cli(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    redis.cli(&["CONFIG", "SET", "maxmemory", "1"]);
    let mut failed = 0;
    for i in 0..40 {
        let value = format!("oom{i}");
        let answer = client
            .should_rate_limit(request("r", vec![descriptor(&[("envoy", &value)])]))
            .await;
        failed += usize::from(answer.is_err());
    }
    assert!(
        failed > 0,
        "an out-of-memory Redis refuses the scripts' writes"
    );
    let log = sluice.log();
    assert_eq!(
        log.matches("Redis is out of memory (OOM").count(),
        1,
        "{log}"
    );
    assert_eq!(log.matches("unreachable").count(), 0, "{log}");
    assert_eq!(log.matches("reachable again").count(), 0, "{log}");
    let (_, metrics) = sluice.http_get("/metrics");
    assert_eq!(
        series(&metrics, r#"sluice_store_errors_total{kind="protocol"}"#),
        Some(failed as f64),
        "{metrics}"
    );
    let condition = |name: &str| {
        series(
            &metrics,
            &format!("sluice_redis_condition{{condition=\"{name}\"}}"),
        )
    };
    assert_eq!(condition("out_of_memory"), Some(1.0), "{metrics}");
    assert_eq!(condition("normal"), Some(0.0), "{metrics}");
}

#[tokio::test]
async fn a_read_only_replica_is_named_as_one() {
    let primary = RedisServer::start(&[]);
    let replica = RedisServer::start(&[]);
    let sluice = sluice_on(&replica, &[]);
    let mut client = sluice.client().await;
    call_one(&mut client, "r", &[("envoy", "warm")]).await;
    replica.cli(&["REPLICAOF", "127.0.0.1", &primary.port.to_string()]);
    let mut failed = 0;
    for i in 0..20 {
        let value = format!("ro{i}");
        let answer = client
            .should_rate_limit(request("r", vec![descriptor(&[("envoy", &value)])]))
            .await;
        failed += usize::from(answer.is_err());
    }
    assert!(failed > 0, "a replica refuses the scripts' writes");
    let log = sluice.log();
    assert_eq!(
        log.matches("Redis is a read-only replica").count(),
        1,
        "{log}"
    );
    let (_, metrics) = sluice.http_get("/metrics");
    assert_eq!(
        series(
            &metrics,
            r#"sluice_redis_condition{condition="read_only_replica"}"#
        ),
        Some(1.0),
        "{metrics}"
    );
}

/// The names of the functions Redis ran, newest first, from its slow log (which a test's Redis
/// keeps for every command: `SLOW_LOG_ALL`).
fn functions_called(redis: &RedisServer) -> Vec<String> {
    redis
        .cli(&["SLOWLOG", "GET", "10000"])
        .lines()
        .map(str::trim)
        .filter(|word| word.starts_with("sluice_") && !word.contains(':'))
        .map(str::to_string)
        .collect()
}

/// A test Redis whose slow log keeps every command.
const SLOW_LOG_ALL: [&str; 4] = [
    "--slowlog-log-slower-than",
    "0",
    "--slowlog-max-len",
    "10000",
];

#[tokio::test]
async fn a_plain_counter_alone_in_its_request_is_one_counter_call_on_the_reference_key() {
    let redis = RedisServer::start(&SLOW_LOG_ALL);
    let sluice = sluice_on(&redis, &["--cache-key-prefix", "ratelimit_"]);
    assert!(sluice.wait_for_log("calls are FCALL"), "{}", sluice.log());
    let mut client = sluice.client().await;
    redis.cli(&["SLOWLOG", "RESET"]);
    // 5 a minute: five admitted, each told what remains, then two denied and not charged.
    for remaining in (0..5).rev() {
        let response = call_one(&mut client, "r", &[("envoy", "counted")]).await;
        assert_eq!(overall(&response), Code::Ok);
        assert_eq!(response.statuses[0].limit_remaining, remaining);
    }
    for _ in 0..2 {
        let response = call_one(&mut client, "r", &[("envoy", "counted")]).await;
        assert_eq!(overall(&response), Code::OverLimit);
        assert_eq!(response.statuses[0].limit_remaining, 0);
        let reset = response.statuses[0]
            .duration_until_reset
            .as_ref()
            .expect("a reset");
        assert!((0..=60).contains(&reset.seconds), "{reset:?}");
    }
    let called = functions_called(&redis);
    assert_eq!(called.len(), 7, "{called:?}");
    assert!(
        called.iter().all(|name| name.ends_with("_counter")),
        "{called:?}"
    );
    let keys = redis.cli(&["--scan", "--pattern", "ratelimit_r_envoy_counted_*"]);
    let key = keys.trim();
    assert_eq!(
        redis.cli(&["GET", key]).trim(),
        "5",
        "denials are not charged"
    );
    let ttl: i64 = redis.cli(&["PTTL", key]).trim().parse().expect("a ttl");
    assert!(
        (1..=60_001).contains(&ttl),
        "expires with its window: {ttl}"
    );

    // Several plain counters are one counter call, all or nothing: a descriptor over its
    // limit (envoy=counted spent its 5 above) vetoes the request, and the other's count is
    // left as it was.
    redis.cli(&["SLOWLOG", "RESET"]);
    let both = request(
        "r",
        vec![
            descriptor(&[("flood", "vetoing")]),
            descriptor(&[("envoy", "counted")]),
        ],
    );
    let response = call(&mut client, both).await;
    assert_eq!(overall(&response), Code::OverLimit);
    assert_eq!(response.statuses[0].code, Code::Ok as i32);
    assert_eq!(
        response.statuses[0].limit_remaining, 5,
        "what remains without it"
    );
    assert_eq!(response.statuses[1].code, Code::OverLimit as i32);
    let vetoing = redis.cli(&["--scan", "--pattern", "ratelimit_r_flood_vetoing_*"]);
    assert_eq!(vetoing.trim(), "", "a vetoed request writes nothing");
    let called = functions_called(&redis);
    assert_eq!(called.len(), 1, "{called:?}");
    assert!(called[0].ends_with("_counter"), "{called:?}");

    // A limit the counter cannot hold takes the general call, alone or beside a counter.
    redis.cli(&["SLOWLOG", "RESET"]);
    let mixed = request(
        "r",
        vec![
            descriptor(&[("envoy", "general")]),
            descriptor(&[("token_bucket", "general")]),
        ],
    );
    call(&mut client, mixed).await;
    call_one(&mut client, "r", &[("token_bucket", "general")]).await;
    let called = functions_called(&redis);
    assert_eq!(called.len(), 2, "{called:?}");
    assert!(
        called.iter().all(|name| !name.ends_with("_counter")),
        "{called:?}"
    );

    // A flushed library: the call that finds it gone is answered, and the library is back.
    redis.cli(&["FUNCTION", "FLUSH"]);
    redis.cli(&["SLOWLOG", "RESET"]);
    let response = call_one(&mut client, "r", &[("envoy", "healed")]).await;
    assert_eq!(response.statuses[0].limit_remaining, 4);
    let response = call_one(&mut client, "r", &[("envoy", "healed")]).await;
    assert_eq!(response.statuses[0].limit_remaining, 3);
    let called = functions_called(&redis);
    assert!(
        called
            .first()
            .is_some_and(|name| name.ends_with("_counter")),
        "the counter is called again after the flush: {called:?}"
    );
}

#[tokio::test]
async fn a_plain_counter_charges_denials_by_the_reference_counting() {
    let redis = RedisServer::start(&SLOW_LOG_ALL);
    let sluice = sluice_on(
        &redis,
        &[
            "--cache-key-prefix",
            "ratelimit_",
            "--stop-cache-key-increment-when-overlimit",
            "false",
        ],
    );
    assert!(sluice.wait_for_log("calls are FCALL"), "{}", sluice.log());
    let mut client = sluice.client().await;
    redis.cli(&["SLOWLOG", "RESET"]);
    let mut admitted = 0;
    for _ in 0..7 {
        let response = call_one(&mut client, "r", &[("flood", "every")]).await;
        admitted += usize::from(overall(&response) == Code::Ok);
    }
    assert_eq!(admitted, 5);
    let keys = redis.cli(&["--scan", "--pattern", "ratelimit_r_flood_every_*"]);
    let key = keys.trim();
    assert_eq!(redis.cli(&["GET", key]).trim(), "7", "every hit is charged");
    let ttl: i64 = redis.cli(&["PTTL", key]).trim().parse().expect("a ttl");
    assert!(
        (1..=3_600_001).contains(&ttl),
        "expires with its window: {ttl}"
    );
    let called = functions_called(&redis);
    assert_eq!(called.len(), 7, "{called:?}");
    assert!(
        called.iter().all(|name| name.ends_with("_counter")),
        "{called:?}"
    );
    // Two descriptors on one key in one call: each decided on what the one before it left.
    let twice = request(
        "r",
        vec![
            descriptor(&[("flood", "twice")]),
            descriptor(&[("flood", "twice")]),
        ],
    );
    let response = call(&mut client, twice).await;
    assert_eq!(response.statuses[0].limit_remaining, 4);
    assert_eq!(response.statuses[1].limit_remaining, 3);
    let keys = redis.cli(&["--scan", "--pattern", "ratelimit_r_flood_twice_*"]);
    assert_eq!(redis.cli(&["GET", keys.trim()]).trim(), "2");
    let ttl: i64 = redis
        .cli(&["PTTL", keys.trim()])
        .trim()
        .parse()
        .expect("a ttl");
    assert!(
        (1..=3_600_001).contains(&ttl),
        "expires with its window: {ttl}"
    );
}
