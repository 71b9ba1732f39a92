//! Heavy hitters across a crash (docs/heavy-hitters.md#across-replicas): two `sluice serve`
//! processes on one Redis share their lists; one killed with SIGKILL still counts in the
//! other's answers until its lists age out, and once restarted it counts only what it sees
//! from then on: nothing is counted twice.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::admin::{admin, admitted, AdminFlags};
use crate::support::redis::RedisServer;
use crate::support::*;

const CONFIG: &str = "domain: tenants\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: hour, requests_per_unit: 100}\n";

/// `tenant=c`'s hits over the last minute, as `sluice`'s admin port answers.
fn hits_of_c(sluice: &Sluice) -> Option<u64> {
    let (status, body) = admin(
        sluice,
        "GET",
        "/v1/top?domain=tenants&limit=tenants.tenant",
        Value::Null,
    );
    assert_eq!(status, 200, "{body}");
    body["values"]
        .as_array()?
        .iter()
        .find(|v| v["value"] == "tenant=c")?["count"]
        .as_u64()
}

fn eventually(sluice: &Sluice, want: u64, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let got = hits_of_c(sluice);
        if got == Some(want) {
            return;
        }
        assert!(Instant::now() < deadline, "c: {got:?}, not {want}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_replica_s_lists_age_out_and_its_restart_counts_nothing_twice() {
    let redis = RedisServer::start(&[]);
    let flags = AdminFlags::new();
    let url = redis.url();
    let mut args = flags.args();
    args.extend(["--store", "redis", "--redis-url", url.as_str()]);
    let files = [("config.yaml", CONFIG)];
    let first = Sluice::process_with(&files, &args, &[]);
    let second = Sluice::process_with(&files, &args, &[]);
    admitted(&first, &[("tenant", "c")], 4).await;
    admitted(&second, &[("tenant", "c")], 6).await;
    eventually(&first, 10, Duration::from_secs(10));
    let status = Command::new("kill")
        .args(["-KILL", &second.pid().to_string()])
        .status();
    assert!(status.is_ok_and(|s| s.success()));
    drop(second);
    // Its last lists stand for up to 10 seconds, then leave.
    eventually(&first, 4, Duration::from_secs(20));
    let restarted = Sluice::process_with(&files, &args, &[]);
    admitted(&restarted, &[("tenant", "c")], 1).await;
    // The restart counts the one call it saw, not the six before the crash.
    eventually(&first, 5, Duration::from_secs(10));
    eventually(&restarted, 5, Duration::from_secs(10));
}
