//! Faults of real Redis deployments, kept as tests, each under load from four clients through
//! the binary: a Sentinel failover (the primary killed, and `SENTINEL FAILOVER`), a Cluster
//! primary failover (killed, and `CLUSTER FAILOVER` on its replica), slots moved under load
//! (requests whose keys are in moving slots, several keys of one slot, all or nothing across
//! slots), and a Redis that stops answering without closing its connections (SIGSTOP). For
//! each: no call waits past its timeout, the failure mode (UNAVAILABLE) applies meanwhile and
//! only then, calls are steady again within the bound stated, a limit exhausted before the
//! fault stays exhausted, and the admissions that the fault lost (asynchronous replication)
//! are measured and bounded by those of the last second before it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::admin::{self, admin, put_body, put_override, state_of, AdminFlags};
use crate::support::redis::{cluster_flags, start_cluster, start_cluster_of, RedisServer};
use crate::support::*;

/// `--redis-command-timeout`.
const TIMEOUT_MS: u64 = 500;
/// What scheduling on a loaded 2-core machine (the whole suite running at once) may add to a
/// call's wait: a hang would be many times this.
const SLACK_MS: u64 = 1500;
/// Values of each descriptor key the load spreads over.
const KEYS: usize = 8;
/// The limit of `capped`, exhausted in the first second of load.
const CAPPED: u64 = 20;

const CONFIG: &str = r#"
domain: f
descriptors:
  - key: tenant
    rate_limit: { unit: hour, requests_per_unit: 100000000 }
  - key: capped
    rate_limit: { unit: hour, requests_per_unit: 20 }
  # A penalized limit's key and its record's share a Cluster slot: a call of two keys.
  - key: login
    rate_limit:
      unit: hour
      requests_per_unit: 100000000
      penalty: { after: 100, block: 1m }
"#;

/// What a call asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Tenant,
    Capped,
    /// `tenant` and `capped` together: all or nothing, vetoed once `capped` is exhausted.
    Pair,
    Login,
}

/// One call: when it started and how long it took (ms since the load began), what it asked,
/// of which value, and the overall code or the gRPC error.
#[derive(Debug, Clone)]
struct Call {
    at_ms: u64,
    took_ms: u64,
    kind: Kind,
    key: usize,
    outcome: Result<Code, tonic::Code>,
}

impl Call {
    fn admitted(&self) -> bool {
        self.outcome == Ok(Code::Ok)
    }

    /// Whether the call, admitted, charged `tenant`.
    fn charged_tenant(&self) -> bool {
        self.admitted() && matches!(self.kind, Kind::Tenant | Kind::Pair)
    }
}

fn descriptors(kind: Kind, key: usize) -> Vec<RateLimitDescriptor> {
    let tenant = || descriptor(&[("tenant", &format!("t{key}"))]);
    let capped = || descriptor(&[("capped", &format!("c{key}"))]);
    match kind {
        Kind::Tenant => vec![tenant()],
        Kind::Capped => vec![capped()],
        Kind::Pair => vec![tenant(), capped()],
        Kind::Login => vec![descriptor(&[("login", &format!("l{key}"))])],
    }
}

type RateLimitDescriptor =
    envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;

/// Four clients calling until `stop`, each on its own connection, a call every 2 ms.
async fn load(
    sluice: &Sluice,
    started: Instant,
    stop: Arc<AtomicBool>,
    kinds: &'static [Kind],
) -> Vec<Call> {
    let mut clients = Vec::new();
    for client in 0..4 {
        let mut grpc = sluice.client().await;
        let stop = stop.clone();
        clients.push(tokio::spawn(async move {
            let mut calls = Vec::new();
            let mut n = client;
            while !stop.load(Ordering::Relaxed) {
                let kind = kinds[n % kinds.len()];
                let key = (n / kinds.len()) % KEYS;
                let at = started.elapsed();
                let answer = grpc
                    .should_rate_limit(request("f", descriptors(kind, key)))
                    .await;
                calls.push(Call {
                    at_ms: at.as_millis() as u64,
                    took_ms: (started.elapsed() - at).as_millis() as u64,
                    kind,
                    key,
                    outcome: answer
                        .map(|a| overall(&a.into_inner()))
                        .map_err(|status| status.code()),
                });
                n += 4;
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            calls
        }));
    }
    let mut all = Vec::new();
    for client in clients {
        all.extend(client.await.expect("a load client"));
    }
    all.sort_by_key(|c| c.at_ms);
    all
}

/// Runs the load, applies `fault` (on a blocking thread) `fault_at_ms` into it, and keeps the
/// load on for `after_ms` once the fault is done (a failover's fault is done when the
/// promotion is seen). Returns the calls, and when the fault began
/// and ended.
async fn under_load(
    sluice: &Sluice,
    kinds: &'static [Kind],
    fault_at_ms: u64,
    after_ms: u64,
    fault: impl FnOnce() + Send + 'static,
) -> (Vec<Call>, Fault) {
    // The limits count per hour: a run across the hour's end would see them start again.
    let run = Duration::from_millis(fault_at_ms + after_ms + 30_000);
    clear_of_a_windows_end(Duration::from_secs(3_600), run).await;
    let started = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let faulting = {
        let stop = stop.clone();
        tokio::task::spawn_blocking(move || {
            std::thread::sleep(Duration::from_millis(fault_at_ms));
            let at_ms = started.elapsed().as_millis() as u64;
            fault();
            let done_ms = started.elapsed().as_millis() as u64;
            std::thread::sleep(Duration::from_millis(after_ms));
            stop.store(true, Ordering::Relaxed);
            Fault { at_ms, done_ms }
        })
    };
    let calls = load(sluice, started, stop, kinds).await;
    (calls, faulting.await.expect("the fault"))
}

/// When a fault began and ended (ms since the load began).
#[derive(Debug, Clone, Copy)]
struct Fault {
    at_ms: u64,
    done_ms: u64,
}

/// The counters of `tenant` on `primaries` (the fixed windows' plain values).
fn tenant_counters(primaries: &[&RedisServer]) -> u64 {
    let mut total = 0;
    for node in primaries {
        for key in node.cli(&["--scan", "--pattern", "f_tenant_*"]).lines() {
            total += node.cli(&["GET", key]).trim().parse::<u64>().unwrap_or(0);
        }
    }
    total
}

/// What a fault did, as the calls saw it.
#[derive(Debug)]
struct Seen {
    calls: usize,
    failed: usize,
    /// From the fault's end to the last failed call (ms).
    recovered_after_ms: u64,
    longest_call_ms: u64,
    /// Admissions of `tenant` that Redis does not hold (lost), and charges it holds that no
    /// admission answered (a call that failed after Redis took it).
    lost: u64,
    unanswered_charges: u64,
    /// Admissions of `tenant` in the second before the fault.
    admitted_last_second: u64,
}

/// Checks the calls against the promises every fault keeps, and returns what they saw:
/// each call within the timeout, failures only UNAVAILABLE and only from the fault to
/// `bound_ms` after it ended, calls after that, `capped` never admitted past its limit, and
/// `tenant` losing at most what it admitted in the `lost_within_s` seconds before the fault.
fn check(name: &str, calls: &[Call], fault: Fault, bounds: (u64, u64), counters: u64) -> Seen {
    let (bound_ms, lost_within_s) = bounds;
    let fault_at_ms = fault.at_ms;
    let failed: Vec<&Call> = calls.iter().filter(|c| c.outcome.is_err()).collect();
    for call in &failed {
        assert_eq!(
            call.outcome,
            Err(tonic::Code::Unavailable),
            "{name}: {call:?}"
        );
        assert!(
            call.at_ms + call.took_ms >= fault_at_ms,
            "{name}: failed before the fault: {call:?}"
        );
    }
    let last_failure_ms = failed
        .iter()
        .map(|c| c.at_ms + c.took_ms)
        .max()
        .unwrap_or(fault_at_ms);
    let recovered_after_ms = last_failure_ms.saturating_sub(fault.done_ms);
    let longest_call_ms = calls.iter().map(|c| c.took_ms).max().unwrap_or(0);
    let steady = calls
        .iter()
        .filter(|c| c.at_ms > fault.done_ms + bound_ms)
        .count();
    let mut admitted_capped = [0_u64; KEYS];
    for call in calls
        .iter()
        .filter(|c| c.admitted() && c.kind != Kind::Tenant && c.kind != Kind::Login)
    {
        admitted_capped[call.key] += 1;
    }
    let admitted: u64 = calls.iter().filter(|c| c.charged_tenant()).count() as u64;
    let admitted_last_second = calls
        .iter()
        .filter(|c| c.charged_tenant() && c.at_ms + 1000 >= fault_at_ms && c.at_ms <= fault_at_ms)
        .count() as u64;
    let seen = Seen {
        calls: calls.len(),
        failed: failed.len(),
        recovered_after_ms,
        longest_call_ms,
        lost: admitted.saturating_sub(counters),
        unanswered_charges: counters.saturating_sub(admitted),
        admitted_last_second,
    };
    eprintln!("{name}: {seen:?}");
    assert!(
        seen.longest_call_ms <= TIMEOUT_MS + SLACK_MS,
        "{name}: {seen:?}"
    );
    assert!(
        seen.recovered_after_ms <= bound_ms,
        "{name}: not steady within {bound_ms} ms: {seen:?}"
    );
    assert!(steady > 100, "{name}: {steady} calls after the bound");
    for (key, admitted) in admitted_capped.iter().enumerate() {
        assert!(
            *admitted <= CAPPED,
            "{name}: capped c{key} admitted {admitted} times"
        );
    }
    assert!(
        seen.lost <= lost_within_s * seen.admitted_last_second,
        "{name}: lost more than {lost_within_s} s of admissions: {seen:?}"
    );
    assert!(
        seen.unanswered_charges <= failed.len() as u64,
        "{name}: {seen:?}"
    );
    seen
}

const MIXED: &[Kind] = &[Kind::Tenant, Kind::Capped, Kind::Pair];
const MIXED_WITH_LOGINS: &[Kind] = &[Kind::Tenant, Kind::Capped, Kind::Pair, Kind::Login];

/// sluice on the Sentinel of `sentinel` (monitoring `mymaster`), all or nothing.
fn sluice_through(sentinel: &RedisServer) -> Sluice {
    let url = format!("mymaster,127.0.0.1:{}", sentinel.port);
    Sluice::start_with(
        &[("config.yaml", CONFIG)],
        &["--store", "redis", "--redis-command-timeout", "500ms"],
        &[
            ("REDIS_TYPE", "SENTINEL"),
            ("REDIS_URL", &url),
            ("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true"),
        ],
    )
}

/// A primary with one replica and a Sentinel that fails over after 1 s, once the Sentinel
/// knows the replica.
pub(crate) fn sentinel_deployment() -> (RedisServer, RedisServer, RedisServer) {
    let primary = RedisServer::start(&[]);
    let replica = RedisServer::start(&["--replicaof", "127.0.0.1", &primary.port.to_string()]);
    let sentinel = RedisServer::start_sentinel_with("mymaster", primary.port, 1000);
    let replica_port = replica.port.to_string();
    wait_for("the Sentinel to see the replica", || {
        sentinel
            .cli(&["SENTINEL", "REPLICAS", "mymaster"])
            .contains(&replica_port)
            && replica
                .cli(&["INFO", "replication"])
                .contains("master_link_status:up")
    });
    (primary, replica, sentinel)
}

/// `SENTINEL FAILOVER` with the old primary left up: waits until the Sentinel names the replica,
/// then turns the old primary into its replica, as the Sentinel itself does once it has seen
/// the old primary report its role for 8 s. From then on the old primary takes no writes (a
/// write it took before would be lost with it: Redis's own window of loss, docs/redis.md).
pub(crate) fn failover_on_command(
    primary: &RedisServer,
    replica: &RedisServer,
    sentinel: &RedisServer,
) {
    sentinel.cli(&["SENTINEL", "FAILOVER", "mymaster"]);
    sentinel_promoted(sentinel.port, replica.port);
    primary.cli(&["REPLICAOF", "127.0.0.1", &replica.port.to_string()]);
    wait_for("the old primary to become a replica", || {
        primary.cli(&["ROLE"]).starts_with("slave")
    });
}

/// The port Sentinel names as the primary now.
pub(crate) fn primary_port(sentinel: &RedisServer) -> String {
    primary_port_at(sentinel.port)
}

/// The port the Sentinel on `port` names as the primary now.
fn primary_port_at(port: u16) -> String {
    crate::support::redis::cli(port, &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", "mymaster"])
        .lines()
        .nth(1)
        .unwrap_or_default()
        .trim()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_failover_after_the_primary_is_killed() {
    let (mut primary, replica, sentinel) = sentinel_deployment();
    let sluice = sluice_through(&sentinel);
    let pid = pid_of(&primary);
    let (port, replica_port) = (sentinel.port, replica.port);
    let (calls, fault) = under_load(&sluice, MIXED, 2000, 4500, move || {
        kill(pid);
        sentinel_promoted(port, replica_port);
    })
    .await;
    primary.stop();
    assert_eq!(
        primary_port(&sentinel),
        replica.port.to_string(),
        "promoted"
    );
    assert!(
        replica.cli(&["FUNCTION", "LIST"]).contains("sluice_"),
        "the scripts are on the new primary"
    );
    check(
        "sentinel, primary killed",
        &calls,
        fault,
        (3000, 1),
        tenant_counters(&[&replica]),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_failover_on_command() {
    let (primary, replica, sentinel) = sentinel_deployment();
    let sluice = sluice_through(&sentinel);
    let (port, replica_port) = (sentinel.port, replica.port);
    let (calls, fault) = under_load(&sluice, MIXED, 2000, 4500, move || {
        crate::support::redis::cli(port, &["SENTINEL", "FAILOVER", "mymaster"]);
        sentinel_promoted(port, replica_port);
    })
    .await;
    assert_eq!(
        primary_port(&sentinel),
        replica.port.to_string(),
        "promoted"
    );
    let seen = check(
        "sentinel, SENTINEL FAILOVER",
        &calls,
        fault,
        (3000, 4),
        tenant_counters(&[&replica]),
    );
    drop(primary);
    assert!(seen.calls > 1000);
}

/// The pid of a server (to signal it from the fault's thread).
fn pid_of(server: &RedisServer) -> String {
    server
        .cli(&["INFO", "server"])
        .lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// Sends `signal` (`-KILL`, `-STOP`, `-CONT`) to the process `pid`.
fn signal(pid: &str, signal: &str) {
    let status = std::process::Command::new("kill")
        .args([signal, pid])
        .status();
    assert!(status.is_ok_and(|s| s.success()), "kill {signal} {pid}");
}

fn kill(pid: String) {
    signal(&pid, "-KILL");
}

/// Whether the Redis on `port` is a primary now.
fn is_primary(port: u16) -> bool {
    crate::support::redis::cli(port, &["ROLE"]).lines().next() == Some("master")
}

/// Waits (on a blocking thread) until `done` holds, for at most 30 s. A fault ends when its
/// failover is seen, so the load after it is measured from the promotion, not from a guess
/// at its length.
fn wait_for(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "waited 30 s for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until the Sentinel on `sentinel_port` names the replica on `replica_port` primary.
fn sentinel_promoted(sentinel_port: u16, replica_port: u16) {
    let replica_port = replica_port.to_string();
    wait_for("the Sentinel to promote its replica", || {
        primary_port_at(sentinel_port) == replica_port
    });
}

/// The nodes of `nodes` that are primaries now.
fn primaries(nodes: &[RedisServer]) -> Vec<&RedisServer> {
    nodes
        .iter()
        .filter(|n| n.cli(&["ROLE"]).lines().next() == Some("master"))
        .collect()
}

/// The replica of the primary on `port` among `nodes`.
fn replica_of(nodes: &[RedisServer], port: u16) -> &RedisServer {
    let line = format!("master_port:{port}");
    nodes
        .iter()
        .find(|n| n.cli(&["INFO", "replication"]).contains(&line))
        .expect("a replica of the primary")
}

fn sluice_on_cluster(nodes: &[RedisServer]) -> Sluice {
    let flags = cluster_flags(&nodes[..3]);
    let mut args: Vec<&str> = flags.iter().map(String::as_str).collect();
    args.extend(["--redis-command-timeout", "500ms"]);
    Sluice::start_with(
        &[("config.yaml", CONFIG)],
        &args,
        &[("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true")],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_primary_killed_fails_over_to_its_replica() {
    let nodes = start_cluster_of(1, "1000");
    let sluice = sluice_on_cluster(&nodes);
    let replica = replica_of(&nodes, nodes[0].port).port;
    let pid = pid_of(&nodes[0]);
    let (calls, fault) = under_load(&sluice, MIXED, 2000, 4500, move || {
        kill(pid);
        wait_for("the replica's promotion", || is_primary(replica));
    })
    .await;
    let now = primaries(&nodes);
    assert!(
        now.iter().any(|n| n.port == replica),
        "the replica took over"
    );
    check(
        "cluster, primary killed",
        &calls,
        fault,
        (3000, 1),
        tenant_counters(&now),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_failover_on_command() {
    let nodes = start_cluster_of(1, "1000");
    let sluice = sluice_on_cluster(&nodes);
    let replica = replica_of(&nodes, nodes[0].port).port;
    let (calls, fault) = under_load(&sluice, MIXED, 2000, 4500, move || {
        crate::support::redis::cli(replica, &["CLUSTER", "FAILOVER"]);
        wait_for("the replica's promotion", || is_primary(replica));
    })
    .await;
    let now = primaries(&nodes);
    assert!(
        now.iter().any(|n| n.port == replica),
        "the replica took over"
    );
    let seen = check(
        "cluster, CLUSTER FAILOVER",
        &calls,
        fault,
        (3000, 0),
        tenant_counters(&now),
    );
    assert_eq!(
        seen.lost, 0,
        "a manual failover waits for the replica: {seen:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slots_moved_under_load_lose_nothing_and_stay_all_or_nothing() {
    let nodes = start_cluster();
    let sluice = sluice_on_cluster(&nodes);
    let id = |node: &RedisServer| node.cli(&["CLUSTER", "MYID"]).trim().to_string();
    let (from, to) = (id(&nodes[0]), id(&nodes[1]));
    let port = nodes[0].port.to_string();
    let (calls, fault) = under_load(&sluice, MIXED_WITH_LOGINS, 2000, 3000, move || {
        let output = std::process::Command::new("redis-cli")
            .args(["--cluster", "reshard", &format!("127.0.0.1:{port}")])
            .args(["--cluster-from", &from, "--cluster-to", &to])
            .args([
                "--cluster-slots",
                "3000",
                "--cluster-yes",
                "--cluster-pipeline",
                "10",
            ])
            .output()
            .expect("redis-cli --cluster reshard");
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    })
    .await;
    let moved = nodes[1].cli(&["CLUSTER", "NODES"]);
    assert!(moved.contains("myself"), "{moved}");
    let counters = tenant_counters(&primaries(&nodes));
    let seen = check(
        "cluster, 3000 slots moved",
        &calls,
        fault,
        (1000, 0),
        counters,
    );
    // Moving slots loses no key: every admission is held, and a vetoed request (a pair whose
    // capped descriptor is exhausted) took back what it charged in the other slot.
    assert_eq!(seen.lost, 0, "{seen:?}");
    assert!(seen.unanswered_charges <= seen.failed as u64, "{seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_stops_answering_costs_the_timeout_not_a_hang() {
    let redis = RedisServer::start(&[]);
    let sluice = Sluice::on_redis_url(
        &[("config.yaml", CONFIG)],
        &redis.url(),
        &["--redis-command-timeout", "500ms"],
        &[("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true")],
    );
    let pid = pid_of(&redis);
    let (calls, fault) = under_load(&sluice, MIXED, 2000, 4000, move || {
        signal(&pid, "-STOP");
        std::thread::sleep(Duration::from_secs(3));
        signal(&pid, "-CONT");
    })
    .await;
    // Stopped 3 s: calls fail each within the timeout, and are steady within 1 s of CONT.
    let seen = check(
        "redis stopped (SIGSTOP) 3 s",
        &calls,
        fault,
        (1000, 0),
        tenant_counters(&[&redis]),
    );
    assert!(seen.failed > 0, "{seen:?}");
    assert_eq!(seen.lost, 0, "nothing is lost: {seen:?}");
}

/// The admin API's tests' config (tests/integration/admin.rs).
const ADMIN_CONFIG: &str = admin::CONFIG;

/// sluice with the admin port on the Sentinel of `sentinel`, serving `files`.
fn admin_through_sentinel(sentinel: &RedisServer, flags: &AdminFlags) -> Sluice {
    let url = format!("mymaster,127.0.0.1:{}", sentinel.port);
    let mut args = vec!["--store", "redis"];
    args.extend(flags.args());
    Sluice::start_with(
        &[("config.yaml", ADMIN_CONFIG)],
        &args,
        &[("REDIS_TYPE", "SENTINEL"), ("REDIS_URL", &url)],
    )
}

#[test]
fn an_override_survives_a_sentinel_failover() {
    let (primary, replica, sentinel) = sentinel_deployment();
    let flags = AdminFlags::new();
    let before = admin_through_sentinel(&sentinel, &flags);
    put_override(
        &before,
        &[("api_key", "failover")],
        None,
        serde_json::json!({"unit": "minute", "requests_per_unit": 9}),
    );
    // Replicated before the failover (a write not yet on the replica is Redis's to lose).
    primary.cli(&["WAIT", "1", "2000"]);
    failover_on_command(&primary, &replica, &sentinel);
    let after = admin_through_sentinel(&sentinel, &flags);
    assert_eq!(
        state_of(&after, &[("api_key", "failover")])["limits"][0]["requests_per_unit"],
        9
    );
    // The replica that was serving follows the new primary, and changes go on.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, _) = admin(
            &before,
            "PUT",
            "/v1/overrides",
            put_body(
                "tenants",
                &[("api_key", "later")],
                None,
                serde_json::json!({"unlimited": true}),
            ),
        );
        if status == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "no put after the failover");
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        state_of(&after, &[("api_key", "later")])["unlimited"],
        true,
        "seen by the other replica"
    );
}
