//! The process's life: SIGHUP reloads, SIGTERM drains every call and exits 0, signals sent
//! the moment the ports are announced are handled, the reference's variables sluice ignores
//! are reported once at start (its expiry jitter among them), and a process out of file
//! descriptors backs off instead of spinning.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::*;

const CONFIG: &str = include_str!("../fixtures/cases/operations/config.yaml");

/// A limit of a minute, counted on Redis with the reference's expiry jitter asked for.
const JITTER: &str = "domain: jitter\ndescriptors:\n  - key: key\n    rate_limit: {unit: minute, requests_per_unit: 10}\n";

/// A config of plain limits, for the descriptor flood.
const HARDENING: &str = include_str!("../fixtures/cases/hardening/config.yaml");

fn signal(sluice: &Sluice, name: &str) {
    let status = Command::new("kill")
        .args([&format!("-{name}"), &sluice.pid().to_string()])
        .status();
    assert!(status.is_ok_and(|s| s.success()), "kill -{name}");
}

#[cfg(unix)]
#[tokio::test]
async fn sighup_reloads() {
    let sluice = Sluice::process(CONFIG, &["--watch-config", "false"]);
    let mut client = sluice.client().await;
    // With the watcher off, only SIGHUP can make this change take effect.
    std::fs::write(
        sluice.config_dir.path().join("config.yaml"),
        CONFIG.replace("requests_per_unit: 5", "requests_per_unit: 11"),
    )
    .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        limit_of(&mut client, "m", "api").await,
        Some(5),
        "not watched"
    );
    signal(&sluice, "HUP");
    eventually(&sluice, "the SIGHUP reload", async || {
        limit_of(&mut client, "m", "api").await == Some(11)
    })
    .await;
    assert!(sluice.wait_for_log("config reloaded"));
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_without_failing_a_call_and_exits_zero() {
    let mut sluice = Sluice::process(
        CONFIG,
        &["--shutdown-drain-delay", "1s", "--shutdown-grace", "5s"],
    );
    let (status, body) = sluice.http_get("/healthcheck");
    assert_eq!((status, body.as_str()), (200, "OK"));
    let mut client = sluice.client().await;
    let caller = tokio::spawn(async move {
        let mut failures = Vec::new();
        let mut calls = 0;
        let started = Instant::now();
        while started.elapsed() < Duration::from_millis(700) {
            match client
                .should_rate_limit(request("m", vec![descriptor(&[("user", "drain")])]))
                .await
            {
                Ok(_) => calls += 1,
                Err(status) => failures.push(status.to_string()),
            }
        }
        (calls, failures)
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    signal(&sluice, "TERM");
    let not_serving = tonic_health::pb::health_check_response::ServingStatus::NotServing as i32;
    assert!(sluice.wait_health((not_serving, 500)).await, "draining");
    let (calls, failures) = caller.await.expect("caller");
    assert!(calls > 0);
    assert!(
        failures.is_empty(),
        "calls failed during the drain: {failures:?}"
    );
    assert_eq!(
        sluice.wait_exit(Duration::from_secs(10)),
        Some(0),
        "{}",
        sluice.log()
    );
}

#[test]
fn signals_sent_as_soon_as_the_ports_are_announced_are_handled_not_fatal() {
    // SIGHUP's and SIGTERM's default actions kill the process: sluice must hold them from
    // before it announces its ports.
    for name in ["HUP", "TERM"] {
        let mut sluice = Sluice::process(CONFIG, &[]);
        signal(&sluice, name);
        if name == "HUP" {
            std::thread::sleep(Duration::from_millis(300));
            assert_eq!(sluice.http_get("/healthcheck").0, 200, "alive after SIGHUP");
            signal(&sluice, "TERM");
        }
        assert_eq!(
            sluice.wait_exit(Duration::from_secs(10)),
            Some(0),
            "SIG{name}: {}",
            sluice.log()
        );
    }
}

#[test]
fn reference_variables_sluice_ignores_are_reported_at_startup() {
    let envs = [
        ("DEBUG_PORT", "6070"),
        ("MEMCACHE_HOST_PORT", "memcached:11211"),
    ];
    let sluice = Sluice::process_with(&[("config.yaml", CONFIG)], &[], &envs);
    assert!(
        sluice.wait_for_log("MEMCACHE_HOST_PORT is set but ignored"),
        "{}",
        sluice.log()
    );
    let log = sluice.log();
    assert!(log.contains("DEBUG_PORT is set but ignored"), "{log}");
    assert!(
        log.contains("MEMCACHE_HOST_PORT is set but ignored"),
        "{log}"
    );
    assert_eq!(log.matches("DEBUG_PORT is set").count(), 1, "once");
}

/// CPU time of process `pid` so far, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

#[tokio::test]
async fn out_of_file_descriptors_the_server_backs_off_and_keeps_serving_open_connections() {
    let sluice = Sluice::process(HARDENING, &["--handshake-timeout", "30s"]);
    let mut client = sluice.client().await;
    call_one(&mut client, "h", &[("plain", "fd")]).await;
    let pid = sluice.pid().to_string();
    // A process that can open 64 descriptors, and 200 clients.
    let limited = std::process::Command::new("prlimit")
        .args(["--pid", &pid, "--nofile=64:64"])
        .status()
        .unwrap();
    assert!(limited.success());
    let _flood = idle_connections(sluice.grpc_addr, 200);
    std::thread::sleep(Duration::from_millis(300));
    let before = cpu_ticks(sluice.pid());
    let started = Instant::now();
    let mut answered = 0;
    while started.elapsed() < Duration::from_secs(1) {
        call_one(&mut client, "h", &[("plain", "fd")]).await;
        answered += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let used = cpu_ticks(sluice.pid()) - before;
    assert!(answered >= 20, "{answered} calls answered");
    // 100 ticks are a whole core for a second: the accept loop must not spin.
    assert!(used < 50, "{used} ticks of CPU in a second");
    let log = sluice.log();
    assert_eq!(log.matches("cannot accept connections").count(), 1, "{log}");
}

#[tokio::test]
async fn the_references_expiry_jitter_is_reported_ignored_and_keys_expire_with_their_window() {
    // The reference adds up to EXPIRATION_JITTER_MAX_SECONDS to each key's expiry; sluice's
    // keys expire when their window ends, reports the variable as ignored, and still counts.
    let redis = redis::RedisServer::start(&[]);
    let url = redis.url();
    let sluice = Sluice::process_with(
        &[("c.yaml", JITTER)],
        &["--store", "redis", "--redis-url", &url],
        &[("EXPIRATION_JITTER_MAX_SECONDS", "300")],
    );
    assert!(
        sluice.wait_for_log("EXPIRATION_JITTER_MAX_SECONDS"),
        "{}",
        sluice.log()
    );
    let mut client = sluice.client().await;
    call_one(&mut client, "jitter", &[("key", "value")]).await;
    let key = redis.cli(&["--scan"]);
    // In milliseconds: TTL rounds down, and reads 0 in a window's last second.
    let ttl_ms: i64 = redis.cli(&["PTTL", key.trim()]).trim().parse().unwrap();
    assert!((1..=60_001).contains(&ttl_ms), "{ttl_ms}");
}

/// How many of the process's threads serve the gRPC port (named `sluice-grpc-N`).
#[cfg(target_os = "linux")]
fn grpc_threads(sluice: &Sluice) -> usize {
    let tasks = std::fs::read_dir(format!("/proc/{}/task", sluice.pid())).expect("its threads");
    tasks
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .filter(|name| name.starts_with("sluice-grpc-"))
        .count()
}

/// The gRPC port is served on threads of its own, one a CPU, when the store keeps a call on
/// its thread (memory, a single Redis pipelined adaptively), as many as asked when asked, and
/// on the shared runtime when the store's connection runs there (redis-rs's, here with an
/// explicit pipelining window); calls are answered either way.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn the_grpc_port_gets_threads_of_its_own_when_the_store_keeps_calls_on_them() {
    let cpus = std::env::var("TOKIO_WORKER_THREADS")
        .ok()
        .and_then(|threads| threads.parse().ok())
        .or_else(|| std::thread::available_parallelism().ok().map(|n| n.get()))
        .expect("a count of CPUs");
    let redis = crate::support::redis::RedisServer::start(&[]);
    let url = redis.url();
    let cases: [(&[&str], usize); 4] = [
        (&[], cpus),
        (&["--grpc-threads", "3"], 3),
        (&["--store", "redis", "--redis-url", &url], cpus),
        (
            &[
                "--store",
                "redis",
                "--redis-url",
                &url,
                "--redis-pipeline-window",
                "150us",
            ],
            0,
        ),
    ];
    for (args, threads) in cases {
        let sluice = Sluice::process(CONFIG, args);
        let mut client = sluice.client().await;
        let answer = call_one(&mut client, "m", &[("api", "threads")]).await;
        assert_eq!(overall(&answer), Code::Ok, "{args:?}");
        assert_eq!(grpc_threads(&sluice), threads, "{args:?}");
    }
}
