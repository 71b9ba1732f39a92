//! The memory store across a restart (`--memory-snapshot`), through the binary: an exhausted
//! limit stays exhausted after a drain and a restart, and after a crash when snapshots are
//! periodic; a limit that changed meanwhile starts afresh while the others keep their state; a
//! foreign or corrupt file starts an empty store with one warning; a path where nothing can be
//! written stops the server at start.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::*;

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

#[test]
fn a_snapshot_path_that_cannot_be_written_stops_the_server() {
    let dir = tempfile::tempdir().expect("temporary directory");
    std::fs::write(dir.path().join("config.yaml"), CONFIG).expect("write");
    let output = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["serve", "--config"])
        .arg(dir.path())
        .args(["--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"])
        .args(["--memory-snapshot", "/nonexistent/state.snapshot"])
        .output()
        .expect("run sluice");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("cannot write /nonexistent/state.snapshot.tmp"),
        "{stderr}"
    );
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
