//! The memory store across a restart (`--memory-snapshot`), through the binary: an exhausted
//! limit stays exhausted after a drain and a restart, and after a crash when snapshots are
//! periodic; a limit that changed meanwhile starts afresh while the others keep their state; a
//! foreign or corrupt file starts an empty store with one warning; an override put through the
//! admin API outlives a kill -9 the moment it is answered (its journal).

use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::admin::{
    admin, entry_list, put_override, state_of, AdminFlags, CONFIG as ADMIN_CONFIG,
};
use crate::support::redis::RedisServer;
use crate::support::*;
use serde_json::{json, Value};

const CONFIG: &str = r#"
domain: snap
descriptors:
  - key: user
    rate_limit: { unit: hour, requests_per_unit: 3 }
  - key: api
    rate_limit: { unit: hour, requests_per_unit: 3, algorithm: token_bucket }
"#;

/// `CONFIG` with the token bucket's rate changed (3 to 5 an hour).
fn changed() -> String {
    CONFIG.replace(
        "requests_per_unit: 3, algorithm",
        "requests_per_unit: 5, algorithm",
    )
}

fn start(config: &str, snapshot: &std::path::Path, more: &[&str]) -> Sluice {
    let path = snapshot.display().to_string();
    let mut args = vec!["--memory-snapshot", path.as_str()];
    args.extend_from_slice(more);
    Sluice::process_with(&[("config.yaml", config)], &args, &[])
}

async fn code_of(sluice: &Sluice, key: &str, value: &str) -> Code {
    let mut client = sluice.client().await;
    let response = call(
        &mut client,
        request("snap", vec![descriptor(&[(key, value)])]),
    )
    .await;
    overall(&response)
}

/// Uses up both limits of `alice`.
async fn exhaust(sluice: &Sluice) {
    for key in ["user", "api"] {
        for _ in 0..3 {
            assert_eq!(code_of(sluice, key, "alice").await, Code::Ok);
        }
        assert_eq!(code_of(sluice, key, "alice").await, Code::OverLimit);
    }
}

fn stop(mut sluice: Sluice, signal: &str) {
    let status = Command::new("kill")
        .args([&format!("-{signal}"), &sluice.pid().to_string()])
        .status();
    assert!(status.is_ok_and(|s| s.success()));
    assert!(sluice.wait_exit(Duration::from_secs(20)).is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exhausted_limit_stays_exhausted_across_a_drain_and_a_restart() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let snapshot = dir.path().join("state.snapshot");
    let first = start(CONFIG, &snapshot, &[]);
    exhaust(&first).await;
    stop(first, "TERM");
    assert!(snapshot.exists(), "written on shutdown");
    let second = start(CONFIG, &snapshot, &[]);
    assert!(second.wait_for_log("memory store restored from its snapshot"));
    assert!(second.log().contains("keys=2"), "{}", second.log());
    for key in ["user", "api"] {
        assert_eq!(
            code_of(&second, key, "alice").await,
            Code::OverLimit,
            "{key}"
        );
        assert_eq!(code_of(&second, key, "bob").await, Code::Ok, "{key}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_loses_at_most_the_snapshot_interval() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let snapshot = dir.path().join("state.snapshot");
    let first = start(CONFIG, &snapshot, &["--memory-snapshot-interval", "1s"]);
    exhaust(&first).await;
    let started = Instant::now();
    loop {
        let (_, metrics) = first.http_get("/metrics");
        let written = series(
            &metrics,
            "sluice_memory_store_snapshots_total{result=\"written\"}",
        );
        let keys = series(&metrics, "sluice_memory_store_snapshot_keys");
        if written >= Some(1.0) && keys == Some(2.0) {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "{metrics}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop(first, "KILL");
    let second = start(CONFIG, &snapshot, &[]);
    assert_eq!(code_of(&second, "user", "alice").await, Code::OverLimit);
    assert_eq!(code_of(&second, "api", "alice").await, Code::OverLimit);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limit_changed_while_down_starts_afresh_and_the_others_keep_their_state() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let snapshot = dir.path().join("state.snapshot");
    let first = start(CONFIG, &snapshot, &[]);
    exhaust(&first).await;
    stop(first, "TERM");
    let second = start(&changed(), &snapshot, &[]);
    assert_eq!(code_of(&second, "user", "alice").await, Code::OverLimit);
    for _ in 0..5 {
        assert_eq!(
            code_of(&second, "api", "alice").await,
            Code::Ok,
            "a bucket of 5"
        );
    }
    assert_eq!(code_of(&second, "api", "alice").await, Code::OverLimit);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_or_corrupt_snapshot_starts_an_empty_store_with_one_warning() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let snapshot = dir.path().join("state.snapshot");
    std::fs::write(&snapshot, "domain: not a snapshot\n").expect("write");
    let sluice = start(CONFIG, &snapshot, &[]);
    let warning = "is not a sluice memory store snapshot: the memory store starts empty";
    assert!(sluice.wait_for_log(warning));
    assert_eq!(sluice.log().matches(warning).count(), 1);
    exhaust(&sluice).await;
    stop(sluice, "TERM");
    // The good snapshot written on shutdown, cut short by a torn copy.
    let bytes = std::fs::read(&snapshot).expect("read");
    std::fs::write(&snapshot, &bytes[..bytes.len() - 3]).expect("write");
    let sluice = start(CONFIG, &snapshot, &[]);
    assert!(sluice.wait_for_log("is truncated"));
    assert_eq!(code_of(&sluice, "user", "alice").await, Code::Ok);
}

/// A budget's call: `budget=alice` at `hits`, settling `token` when given; the answer.
async fn budget_call(sluice: &Sluice, hits: u64, token: Option<&str>) -> RateLimitResponse {
    let mut entries = vec![("budget", "alice")];
    if let Some(token) = token {
        entries.push(("sluice.reserve", token));
    }
    let mut client = sluice.client().await;
    call(
        &mut client,
        request("snap", vec![descriptor_with_hits(&entries, hits)]),
    )
    .await
}

fn hold_token(response: &RateLimitResponse) -> String {
    metadata_text(response, "sluice.reserve").expect("a hold's token")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_keeps_its_holds_and_settled_tokens_across_a_restart() {
    let config = format!(
        "{CONFIG}  - key: budget\n    rate_limit: {{ unit: hour, requests_per_unit: 1000 }}\n    reserve: {{ amount: 300 }}\n"
    );
    let dir = tempfile::tempdir().expect("temporary directory");
    let snapshot = dir.path().join("state.snapshot");
    let first = start(&config, &snapshot, &[]);
    let a = hold_token(&budget_call(&first, 0, None).await);
    let b = hold_token(&budget_call(&first, 0, None).await);
    let settled = budget_call(&first, 200, Some(&a)).await;
    assert_eq!(
        settled.statuses[0].limit_remaining, 500,
        "1,000 - 200 - 300 held"
    );
    stop(first, "TERM");
    let second = start(&config, &snapshot, &[]);
    assert!(second.wait_for_log("memory store restored from its snapshot"));
    // The settled token stays settled, the open hold stays held.
    let again = budget_call(&second, 200, Some(&a)).await;
    assert_eq!(
        again.statuses[0].limit_remaining, 500,
        "a duplicate charges nothing"
    );
    let last = budget_call(&second, 100, Some(&b)).await;
    assert_eq!(
        last.statuses[0].limit_remaining, 700,
        "its hold freed, 100 charged"
    );
}

/// The limit `entries` have on `sluice`, as the admin API reads it (`null`: unlimited).
fn requests_per_unit(sluice: &Sluice, entries: &[(&str, &str)]) -> Value {
    state_of(sluice, entries)["limits"][0]["requests_per_unit"].clone()
}

#[test]
fn a_put_answered_survives_a_kill_9_at_once_on_the_memory_store_and_redis() {
    let flags = AdminFlags::new();
    let dir = tempfile::tempdir().expect("a directory");
    let snapshot = dir.path().join("snapshot").display().to_string();
    let mut args = flags.args();
    args.extend(["--memory-snapshot", &snapshot]);
    let start = || Sluice::process_with(&[("config.yaml", ADMIN_CONFIG)], &args, &[]);
    // Each change is killed (SIGKILL) the moment it is answered, before any snapshot.
    let mut sluice = start();
    for round in 1..=5_u32 {
        put_override(
            &sluice,
            &[("api_key", "kept")],
            None,
            json!({"unit": "minute", "requests_per_unit": 10 + round}),
        );
        drop(sluice);
        sluice = start();
        assert_eq!(
            requests_per_unit(&sluice, &[("api_key", "kept")]),
            json!(10 + round),
            "round {round}: the answered put outlived the kill"
        );
    }
    // A delete likewise; then a drain writes the snapshot, which empties the journal, and a
    // put after it is kept beside what the snapshot holds.
    put_override(
        &sluice,
        &[("api_key", "other")],
        None,
        json!({"unit": "minute", "requests_per_unit": 9}),
    );
    let target = json!({"domain": "tenants", "descriptor": entry_list(&[("api_key", "kept")])});
    assert_eq!(admin(&sluice, "DELETE", "/v1/overrides", target).0, 200);
    drop(sluice);
    let mut sluice = start();
    assert_eq!(requests_per_unit(&sluice, &[("api_key", "kept")]), json!(2));
    assert_eq!(
        requests_per_unit(&sluice, &[("api_key", "other")]),
        json!(9)
    );
    sluice.terminate();
    let journal = format!("{snapshot}.journal");
    assert_eq!(
        std::fs::metadata(&journal).map(|m| m.len()).ok(),
        Some(0),
        "the snapshot holds every change: the journal is emptied"
    );
    let sluice = start();
    put_override(
        &sluice,
        &[("api_key", "late")],
        None,
        json!({"unit": "minute", "requests_per_unit": 8}),
    );
    drop(sluice);
    let sluice = start();
    assert_eq!(
        requests_per_unit(&sluice, &[("api_key", "other")]),
        json!(9)
    );
    assert_eq!(requests_per_unit(&sluice, &[("api_key", "late")]), json!(8));
    drop(sluice);

    let redis = RedisServer::start(&[]);
    let files = [("config.yaml", ADMIN_CONFIG)];
    let before = Sluice::on_redis_url(&files, &redis.url(), &flags.args(), &[]);
    put_override(
        &before,
        &[("api_key", "kept")],
        None,
        json!({"unit": "minute", "requests_per_unit": 7}),
    );
    drop(before);
    let after = Sluice::on_redis_url(&files, &redis.url(), &flags.args(), &[]);
    assert_eq!(
        state_of(&after, &[("api_key", "kept")])["limits"][0]["requests_per_unit"],
        7
    );
}
