//! Record and replay (docs/record-replay.md): a live server under load records its
//! calls and a replay under the same config gets exactly its decisions (rates, a shared
//! bucket, penalties, leases released by token); halving a limit newly denies what this test
//! counts on its own, and the gate fails on it; hashed values stay consistent within a file;
//! an unwritable file stops the server at start and a full disk is counted; a corrupt
//! recording is refused with its line; the picture holds the report's series; the converter
//! of a CSV writes a recording replay reads.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::Value;

use crate::support::*;

const CONFIG: &str = include_str!("../fixtures/cases/replay/config.yaml");

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/cases/replay")
        .join(name)
}

fn sluice_command(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .output()
        .expect("run sluice")
}

/// `sluice replay ARGS --json`: the exit code and the report.
fn replay_json(args: &[&str]) -> (Option<i32>, Value) {
    let mut all = vec!["replay", "--json"];
    all.extend_from_slice(args);
    let output = sluice_command(&all);
    let report = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    });
    (output.status.code(), report)
}

/// Sends SIGTERM and waits for the exit (the recording is written whole by then).
fn stop(mut sluice: Sluice) {
    let status = Command::new("kill")
        .args(["-TERM", &sluice.pid().to_string()])
        .status();
    assert!(status.is_ok_and(|s| s.success()));
    assert_eq!(sluice.wait_exit(Duration::from_secs(20)), Some(0));
}

/// One client's calls: its own limit with the shared bucket, now and then a user's login
/// (penalised) and a chat call holding a lease that it then releases with its token.
async fn client_calls(sluice: &Sluice, client: usize, calls: usize) -> usize {
    let mut grpc = sluice.client().await;
    let name = format!("c{client}");
    let mut made = 0;
    for n in 0..calls {
        let both = vec![
            descriptor(&[("client", &name)]),
            descriptor(&[("shared", "all")]),
        ];
        call(&mut grpc, request("app", both)).await;
        made += 1;
        if n % 5 == 0 {
            let user = format!("u{}", client % 3);
            call_one(&mut grpc, "app", &[("user", &user)]).await;
            made += 1;
        }
        let other = match n % 4 {
            // A check, then its cost reported after the response (into debt).
            0 => vec![descriptor_with_hits(&[("tokens", &name)], 0)],
            1 => vec![descriptor_with_hits(&[("tokens", &name)], 7)],
            2 => vec![
                descriptor(&[("api_key", &format!("k{}", client % 2))]),
                descriptor(&[("trial", &name)]),
            ],
            _ => vec![
                descriptor(&[("tier", &name)]),
                descriptor(&[("tier", &format!("t{}", client % 2))]),
            ],
        };
        call(&mut grpc, request("app", other)).await;
        made += 1;
        if n % 9 == 0 {
            // A reserved budget: a check holds 1,000, its settle sends the actual back.
            let budget = format!("b{}", client % 2);
            let opened = call(
                &mut grpc,
                request("app", vec![descriptor_with_hits(&[("budget", &budget)], 0)]),
            )
            .await;
            made += 1;
            let token = metadata_text(&opened, "sluice.reserve");
            if let Some(token) = token {
                let entries = [("budget", budget.as_str()), ("sluice.reserve", &token)];
                let actual = 400 + 300 * (n as u64 % 5);
                call(
                    &mut grpc,
                    request("app", vec![descriptor_with_hits(&entries, actual)]),
                )
                .await;
                made += 1;
            }
        }
        if n % 7 == 0 {
            let chat = format!("k{}", client % 2);
            let acquired = call_one(&mut grpc, "app", &[("chat", &chat)]).await;
            made += 1;
            let token = metadata_text(&acquired, "sluice.lease");
            if let Some(token) = token {
                call_one(
                    &mut grpc,
                    "app",
                    &[("chat", &chat), ("sluice.lease", &token)],
                )
                .await;
                made += 1;
            }
        }
    }
    made
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_recording_made_under_load_replays_to_exactly_its_own_decisions() {
    // The shadow-mode rule's denials are not in a recording (its status is OK either way): a
    // run across a minute's end would let the per-minute limits admit more, and the replay
    // would then find shadow denials the recording cannot show.
    clear_of_a_windows_end(Duration::from_secs(60), Duration::from_secs(30)).await;
    let dir = tempfile::tempdir().expect("temporary directory");
    let recording = dir.path().join("calls.jsonl");
    let path = recording.display().to_string();
    let sluice = Sluice::process(CONFIG, &["--record", &path]);
    let clients: Vec<_> = (0..8)
        .map(|client| client_calls(&sluice, client, 120))
        .collect();
    let made: usize = futures_util::future::join_all(clients)
        .await
        .into_iter()
        .sum();
    let config = fixture("config.yaml").display().to_string();
    stop(sluice);
    let (code, report) = replay_json(&["--config", &config, &path]);
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(report["calls"].as_u64(), Some(made as u64));
    assert!(
        report["before"]["denied"].as_u64().unwrap() > 100,
        "{report}"
    );
    assert_eq!(report["newly_denied"].as_u64(), Some(0), "{report}");
    assert_eq!(report["newly_admitted"].as_u64(), Some(0), "{report}");
    for rule in report["rules"].as_array().unwrap() {
        assert_eq!(rule["newly_denied"].as_u64(), Some(0), "{rule}");
        assert_eq!(rule["newly_admitted"].as_u64(), Some(0), "{rule}");
    }
    let rules: Vec<&str> = report["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["rule"].as_str().unwrap())
        .collect();
    assert_eq!(
        rules,
        [
            "app.api_key",
            "app.budget",
            "app.chat",
            "app.client",
            "app.shared_all",
            "app.tier",
            "app.tokens",
            "app.trial",
            "app.user"
        ]
    );
    // The rules that denied while recorded (the shared bucket vetoes most calls before a
    // client's own limit fills; shadow mode answers OK; two leases were never all taken).
    let denying = [
        "app.api_key",
        "app.budget",
        "app.shared_all",
        "app.tier",
        "app.tokens",
        "app.user",
    ];
    for rule in report["rules"].as_array().unwrap() {
        let name = rule["rule"].as_str().unwrap();
        if denying.contains(&name) {
            let denied = rule["before"]["denied"].as_u64().unwrap();
            assert!(denied > 0, "{name} denied nothing: {}", rule["before"]);
        }
    }
    assert_eq!(
        report["never_matched"][0].as_str(),
        Some("app.plan_free.client")
    );
}

/// Twenty requests on one reserved budget (10,000 a minute, 1,000 held each), one every
/// 0.5 s from a minute's start, as the server recorded them: the first ten opened holds
/// (their tokens recorded) and settled 1,000 each 10 s later; the other ten were denied.
fn budget_recording(dir: &Path) -> PathBuf {
    let start_us: u64 = 1_796_155_200_000_000;
    let mut text = String::from("{\"sluice_recording\":1}\n");
    let mut lines: Vec<(u64, String)> = Vec::new();
    for k in 0..20u64 {
        let t = start_us + k * 500_000;
        let token = format!("{k:016x}");
        let reserve = if k < 10 {
            format!(",\"reserve\":\"{token}\"")
        } else {
            String::new()
        };
        lines.push((
            t,
            format!(
                "{{\"t\":{t},\"domain\":\"app\",\"descriptors\":[{{\"entries\":[[\"budget\",\"x\"]],\"hits_addend\":0}}]{reserve}}}"
            ),
        ));
        if k < 10 {
            let t = t + 10_000_000;
            lines.push((
                t,
                format!(
                    "{{\"t\":{t},\"domain\":\"app\",\"descriptors\":[{{\"entries\":[[\"budget\",\"x\"],[\"sluice.reserve\",\"{token}\"]],\"hits_addend\":1000}}]}}"
                ),
            ));
        }
    }
    lines.sort();
    for (_, line) in lines {
        text.push_str(&line);
        text.push('\n');
    }
    let path = dir.join("budget.jsonl");
    std::fs::write(&path, text).expect("write");
    path
}

#[test]
fn a_budget_replays_with_its_reservations_and_without_them() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let recording = budget_recording(dir.path()).display().to_string();
    let config = fixture("config.yaml").display().to_string();
    // Without reservations every check fits a budget the running requests have not been
    // charged yet: all 20 are admitted, 20,000 tokens against 10,000. With them, ten.
    let (code, report) = replay_json(&["--config", &config, "--without-reserve", &recording]);
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(report["calls"].as_u64(), Some(30), "{report}");
    assert_eq!(
        report["releases"].as_u64(),
        Some(10),
        "the settles: {report}"
    );
    assert_eq!(report["before"]["denied"].as_u64(), Some(0), "{report}");
    assert_eq!(report["after"]["denied"].as_u64(), Some(10), "{report}");
    assert_eq!(report["newly_denied"].as_u64(), Some(10), "{report}");
    assert!(
        report["baseline"]
            .as_str()
            .is_some_and(|b| b.contains("without its reservations")),
        "{report}"
    );
    // Replayed under its own config, the recorded tokens pair each settle with its hold.
    let (_, report) = replay_json(&["--config", &config, "--baseline", &config, &recording]);
    assert_eq!(report["newly_denied"].as_u64(), Some(0), "{report}");
    assert_eq!(report["after"]["denied"].as_u64(), Some(10), "{report}");
}

/// Two clients, one call every 3 s each for three minutes from a minute's start, and one
/// call of a domain no config has.
fn steady_recording(dir: &Path) -> PathBuf {
    let start_us: u64 = 1_796_155_200_000_000;
    let mut text = String::from("{\"sluice_recording\":1}\n");
    for k in 0..60u64 {
        for client in ["a", "b"] {
            text.push_str(&format!(
                "{{\"t\":{},\"domain\":\"app\",\"descriptors\":[{{\"entries\":[[\"client\",\"{client}\"]]}}]}}\n",
                start_us + k * 3_000_000
            ));
        }
    }
    text.push_str(&format!(
        "{{\"t\":{},\"domain\":\"gone\",\"descriptors\":[{{\"entries\":[[\"k\",\"v\"]]}}]}}\n",
        start_us + 1
    ));
    let path = dir.join("steady.jsonl");
    std::fs::write(&path, text).expect("write");
    path
}

#[test]
fn halving_a_limit_newly_denies_what_the_calls_say_and_the_gate_fails_on_it() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let recording = steady_recording(dir.path());
    // Counted here: per client and minute, 20 calls; 10 a minute admits 10, 5 admits 5.
    let mut newly = 0;
    for _client in 0..2 {
        for _minute in 0..3 {
            let calls = 20;
            newly += calls.min(10) - calls.min(5);
        }
    }
    let (old, new) = (fixture("tenfold.yaml"), fixture("fivefold.yaml"));
    let args = |extra: &[&str]| {
        let mut all = vec![
            "--baseline".to_string(),
            old.display().to_string(),
            "--config".to_string(),
            new.display().to_string(),
        ];
        all.extend(extra.iter().map(|s| s.to_string()));
        all.push(recording.display().to_string());
        all
    };
    let svg = dir.path().join("replay.svg");
    let svg_arg = svg.display().to_string();
    let all = args(&["--svg", &svg_arg]);
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    let (code, report) = replay_json(&all);
    assert_eq!(code, Some(0));
    assert_eq!(report["calls"].as_u64(), Some(121));
    assert_eq!(report["newly_denied"].as_u64(), Some(newly));
    assert_eq!(report["newly_admitted"].as_u64(), Some(0));
    assert_eq!(report["unknown_domain"].as_u64(), Some(1));
    let rule = &report["rules"][0];
    assert_eq!(rule["rule"].as_str(), Some("app.client"));
    assert_eq!(rule["clients"][0]["client"].as_str(), Some("client=a"));
    assert_eq!(rule["clients"][0]["newly_denied"].as_u64(), Some(15));
    assert_eq!(report["never_matched"][0].as_str(), Some("app.unused"));
    assert_eq!(report["unmatched"].as_u64(), Some(1));
    // The picture: the rule's four series, each holding its side's counts.
    let text = std::fs::read_to_string(&svg).expect("the SVG");
    let document = roxmltree::Document::parse(&text).expect("the SVG parses");
    let series = |name: &str| -> u64 {
        let line = document
            .descendants()
            .find(|n| n.attribute("data-series") == Some(name))
            .unwrap_or_else(|| panic!("no {name}"));
        line.attribute("data-counts")
            .unwrap()
            .split(',')
            .map(|c| c.parse::<u64>().unwrap())
            .sum()
    };
    assert_eq!(series("before-admitted"), 60);
    assert_eq!(series("after-admitted"), 30);
    assert_eq!(series("after-denied"), 90);
    assert_eq!(series("before-denied"), 60);
    // The gate: 30 of 121 calls (24.8%), and 25% of the rule's.
    let gated = |extra: &[&str]| {
        let mut all = vec!["replay".to_string()];
        all.extend(args(extra));
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        sluice_command(&all)
    };
    let refused = gated(&["--max-newly-denied", "10"]);
    assert_eq!(refused.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("30 of 121 calls newly denied (24.8%, more than 10%)"),
        "{stderr}"
    );
    assert_eq!(gated(&["--max-newly-denied", "30"]).status.code(), Some(0));
    let per_rule = gated(&["--max-newly-denied-per-rule", "20"]);
    assert_eq!(per_rule.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&per_rule.stderr).contains("rule app.client: 30 of 120"));
    // The text report says the same, the same way every time.
    let text = gated(&[]);
    let again = gated(&[]);
    assert_eq!(text.stdout, again.stdout);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("newly denied 30 (24.8%)"), "{text}");
    assert!(
        text.contains(
            "most affected: client=a (+15 denied, +0 admitted), client=b (+15 denied, +0 admitted)"
        ),
        "{text}"
    );
}

/// A minute of ten jobs, each acquired and released, and ten calls of one user.
fn jobs_recording(dir: &Path) -> PathBuf {
    let start_us: u64 = 1_796_155_200_000_000;
    let mut text = String::from("{\"sluice_recording\":1}\n");
    for k in 0..10u64 {
        let (t, token) = (start_us + k * 1_000_000, format!("{:016x}", 0xa0 + k));
        text.push_str(&format!(
            "{{\"t\":{t},\"domain\":\"app\",\"descriptors\":[{{\"entries\":[[\"job\",\"a\"]]}}],\"lease\":\"{token}\"}}\n"
        ));
        text.push_str(&format!(
            "{{\"t\":{},\"domain\":\"app\",\"descriptors\":[{{\"entries\":[[\"job\",\"a\"],[\"sluice.lease\",\"{token}\"]]}}]}}\n",
            t + 500_000
        ));
        text.push_str(&format!(
            "{{\"t\":{},\"domain\":\"app\",\"descriptors\":[{{\"entries\":[[\"user\",\"u\"]]}}]}}\n",
            t + 600_000
        ));
    }
    let path = dir.join("jobs.jsonl");
    std::fs::write(&path, text).expect("write");
    path
}

#[test]
fn the_gate_counts_calls_that_ask_and_each_rule_counts_what_it_decided() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let recording = jobs_recording(dir.path()).display().to_string();
    let old = dir.path().join("old.yaml");
    let new = dir.path().join("new.yaml");
    std::fs::write(
        &old,
        "domain: app\ndescriptors:\n  - key: job\n    rate_limit: {algorithm: concurrency, requests_per_unit: 100, unit: minute}\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 100}\n",
    )
    .expect("write");
    // Jobs get a rate of 8 a minute; the user's limit drops to 5, in shadow mode.
    std::fs::write(
        &new,
        "domain: app\ndescriptors:\n  - key: job\n    rate_limits:\n      - {algorithm: concurrency, requests_per_unit: 100, unit: minute}\n      - {unit: minute, requests_per_unit: 8}\n  - key: user\n    shadow_mode: true\n    rate_limit: {unit: minute, requests_per_unit: 5}\n",
    )
    .expect("write");
    let (old, new) = (old.display().to_string(), new.display().to_string());
    let replay = |extra: &[&str]| {
        let mut all = vec!["replay", "--baseline", &old, "--config", &new];
        all.extend_from_slice(extra);
        all.push(&recording);
        sluice_command(&all)
    };
    let (code, report) = replay_json(&["--baseline", &old, "--config", &new, &recording]);
    assert_eq!(code, Some(0));
    assert_eq!(report["calls"].as_u64(), Some(30));
    assert_eq!(report["releases"].as_u64(), Some(10));
    // Two of the twenty calls that ask: the releases are never denied, never counted.
    assert_eq!(report["newly_denied"].as_u64(), Some(2));
    let refused = replay(&["--max-newly-denied", "9"]);
    assert_eq!(refused.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("2 of 20 calls newly denied (10.0%, more than 9%)"),
        "{stderr}"
    );
    // Each rule counts what it decided: the shadow-mode rule's denials, which its status
    // hides, and the jobs' acquires without their releases.
    let rule = |name: &str| {
        report["rules"]
            .as_array()
            .and_then(|rules| rules.iter().find(|r| r["rule"].as_str() == Some(name)))
            .cloned()
            .unwrap_or_else(|| panic!("rule {name}: {report}"))
    };
    assert_eq!(rule("app.user")["calls"].as_u64(), Some(10));
    assert_eq!(rule("app.user")["newly_denied"].as_u64(), Some(5));
    assert_eq!(rule("app.job")["calls"].as_u64(), Some(10));
    assert_eq!(rule("app.job")["newly_denied"].as_u64(), Some(2));
}

#[tokio::test]
async fn a_recording_is_bounded_by_its_size_and_samples_whole_clients() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("calls.jsonl");
    let file = path.display().to_string();
    let sluice = Sluice::process(
        CONFIG,
        &[
            "--record",
            &file,
            "--record-max-bytes",
            "4096",
            "--record-sample",
            "0.5",
        ],
    );
    let mut grpc = sluice.client().await;
    for _ in 0..4 {
        for client in 0..60 {
            call_one(&mut grpc, "app", &[("client", &format!("c{client}"))]).await;
        }
    }
    let (_, metrics) = sluice.http_get("/metrics");
    stop(sluice);
    assert!(series(&metrics, "sluice_record_rotations_total").unwrap_or(0.0) >= 1.0);
    let aside = dir.path().join("calls.jsonl.1");
    let mut clients: std::collections::BTreeSet<String> = Default::default();
    for file in [&aside, &path] {
        let text = std::fs::read_to_string(file).expect("both files");
        assert!(text.len() <= 4096, "{} bytes", text.len());
        assert!(
            text.starts_with("{\"sluice_recording\":1"),
            "each file has its header"
        );
        for line in text.lines().skip(1) {
            let call: Value = serde_json::from_str(line).expect("a call");
            clients.insert(
                call["descriptors"][0]["entries"][0][1]
                    .as_str()
                    .unwrap()
                    .to_string(),
            );
        }
    }
    // About half the 60 clients are sampled; each of the others never appears.
    let sampled = clients.len();
    assert!((10..=50).contains(&sampled), "{sampled} clients");
    // Together the two files replay (the calls before them are gone: bounded).
    let (code, report) = replay_json(&[
        "--config",
        &fixture("config.yaml").display().to_string(),
        &aside.display().to_string(),
        &file,
    ]);
    assert_eq!(code, Some(0));
    assert!(report["calls"].as_u64().unwrap() < 240);
}

#[tokio::test]
async fn hashed_values_stay_consistent_within_a_file_and_replay_alike() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("hashed.jsonl").display().to_string();
    let sluice = Sluice::process(CONFIG, &["--record", &path, "--record-hash-values"]);
    let mut grpc = sluice.client().await;
    for client in ["alice", "bob", "alice"] {
        call_one(&mut grpc, "app", &[("client", client)]).await;
    }
    call_one(&mut grpc, "app", &[("plan", "free"), ("client", "alice")]).await;
    let config = fixture("config.yaml").display().to_string();
    stop(sluice);
    let text = std::fs::read_to_string(&path).expect("the recording");
    assert!(!text.contains("alice") && !text.contains("bob"), "{text}");
    let calls: Vec<Value> = text
        .lines()
        .skip(1)
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let value = |call: usize, entry: usize| {
        calls[call]["descriptors"][0]["entries"][entry][1]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert!(value(0, 0).starts_with('#') && value(0, 0).len() == 17);
    assert_eq!(value(0, 0), value(2, 0), "alice twice");
    assert_ne!(value(0, 0), value(1, 0), "alice and bob");
    assert_eq!(value(3, 0), "free", "a value the config names is kept");
    assert_eq!(value(3, 1), value(0, 0));
    let (code, report) = replay_json(&["--config", &config, &path]);
    assert_eq!(code, Some(0));
    assert_eq!(report["newly_denied"].as_u64(), Some(0));
    assert_eq!(report["newly_admitted"].as_u64(), Some(0));
}

#[tokio::test]
async fn an_unwritable_recording_stops_the_server_and_a_full_disk_is_counted() {
    let dir = tempfile::tempdir().expect("temporary directory");
    std::fs::write(dir.path().join("config.yaml"), CONFIG).expect("write");
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["serve", "--config"])
        .arg(dir.path())
        .args(["--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"])
        .args(["--record", "/nonexistent/calls.jsonl"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start sluice");
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "sluice did not stop"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(!status.success());
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(
        stderr.contains("cannot record to /nonexistent/calls.jsonl"),
        "{stderr}"
    );

    // /dev/full takes the file but refuses every write: counted, and calls go on.
    let sluice = Sluice::process(CONFIG, &["--record", "/dev/full"]);
    let mut grpc = sluice.client().await;
    for _ in 0..50 {
        let response = call_one(&mut grpc, "app", &[("client", "c")]).await;
        assert_eq!(response.statuses.len(), 1);
    }
    let mut failed = 0.0;
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(100));
        let (_, text) = sluice.http_get("/metrics");
        failed = series(
            &text,
            r#"sluice_record_dropped_total{reason="write_failed"}"#,
        )
        .unwrap_or(0.0);
        if failed > 0.0 {
            break;
        }
    }
    assert!(failed > 0.0, "the failed writes are counted");
    assert!(sluice.wait_for_log("cannot write the recording"));
    stop(sluice);
}

#[test]
fn a_truncated_or_corrupt_recording_is_refused_with_its_line() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let config = fixture("tenfold.yaml").display().to_string();
    let good = r#"{"t":1,"domain":"app","descriptors":[{"entries":[["client","a"]]}],"code":"OK","statuses":[{"code":"OK","limit":"","remaining":9}]}"#;
    for (name, text, expected) in [
        (
            "cut.jsonl",
            format!("{{\"sluice_recording\":1}}\n{good}\n{{\"t\":2,\"dom"),
            "cut.jsonl:3: not a call",
        ),
        (
            "junk.jsonl",
            format!("{{\"sluice_recording\":1}}\n{good}\nhello\n{good}\n"),
            "junk.jsonl:3: not a call",
        ),
        (
            "version.jsonl",
            "{\"sluice_recording\":2}\n".to_string(),
            "version.jsonl:1: format version 2",
        ),
        (
            "other.jsonl",
            "{\"hello\":1}\n".to_string(),
            "other.jsonl:1: not a sluice recording header",
        ),
    ]
    .map(|(name, text, expected)| (name, text.into_bytes(), expected))
    .into_iter()
    .chain([(
        "latin1.jsonl",
        [
            &b"{\"sluice_recording\":1}\n"[..],
            good.as_bytes(),
            b"\n{\"t\":2,\"domain\":\"caf\xe9\"}\n",
        ]
        .concat(),
        "latin1.jsonl:3: not UTF-8",
    )]) {
        let path = dir.path().join(name);
        std::fs::write(&path, text).expect("write");
        let output = sluice_command(&["replay", "--config", &config, &path.display().to_string()]);
        assert_eq!(output.status.code(), Some(1), "{name}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(expected), "{name}: {stderr}");
    }
}

#[test]
fn a_csv_of_requests_converts_to_a_recording_replay_reads() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let mut csv = String::from("timestamp,client\n");
    for k in 0..30 {
        csv.push_str(&format!("2026-12-01T20:00:{k:02}Z,a\n"));
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/csv-to-recording");
    let mut child = Command::new("python3")
        .arg(script)
        .args(["--domain", "app"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs the converter");
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), csv.as_bytes()).unwrap();
    let output = child.wait_with_output().expect("the converter ends");
    assert!(output.status.success());
    let path = dir.path().join("from.csv.jsonl");
    std::fs::write(&path, &output.stdout).expect("write");
    let path = path.display().to_string();
    // Without recorded decisions, replay needs a baseline.
    let alone = sluice_command(&[
        "replay",
        "--config",
        &fixture("fivefold.yaml").display().to_string(),
        &path,
    ]);
    assert_eq!(alone.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&alone.stderr).contains("compare with --baseline"));
    let (code, report) = replay_json(&[
        "--baseline",
        &fixture("tenfold.yaml").display().to_string(),
        "--config",
        &fixture("fivefold.yaml").display().to_string(),
        &path,
    ]);
    assert_eq!(code, Some(0));
    assert_eq!(report["calls"].as_u64(), Some(30));
    // 30 calls in one minute: 10 admitted before, 5 after.
    assert_eq!(report["newly_denied"].as_u64(), Some(5));
}

#[test]
fn a_replay_applies_a_file_of_admin_overrides_and_check_config_counts_them() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let recording = steady_recording(dir.path());
    let overrides = dir.path().join("overrides.yaml");
    std::fs::write(
        &overrides,
        "- domain: app\n  descriptor: [{key: client, value: a}]\n  limit: {unit: minute, requests_per_unit: 5}\n",
    )
    .expect("write the overrides");
    let (config, overrides_arg) = (
        fixture("tenfold.yaml").display().to_string(),
        overrides.display().to_string(),
    );
    let recording_arg = recording.display().to_string();
    let (code, report) = replay_json(&[
        "--baseline",
        &config,
        "--config",
        &config,
        "--overrides",
        &overrides_arg,
        &recording_arg,
    ]);
    assert_eq!(code, Some(0));
    // Client a's 20 calls a minute for 3 minutes: 10 admitted before, 5 with its override.
    assert_eq!(report["newly_denied"].as_u64(), Some(15), "{report}");
    assert_eq!(
        report["rules"][0]["clients"][0]["client"].as_str(),
        Some("client=a")
    );

    let checked = sluice_command(&["check-config", &config, "--overrides", &overrides_arg]);
    assert!(checked.status.success());
    let out = String::from_utf8_lossy(&checked.stdout);
    assert!(out.contains("overrides: 1 in force"), "{out}");
    std::fs::write(
        &overrides,
        "- domain: app\n  descriptor: [{key: nobody, value: a}]\n  limit: {unit: minute, requests_per_unit: 5}\n",
    )
    .expect("write the overrides");
    let refused = sluice_command(&["check-config", &config, "--overrides", &overrides_arg]);
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("overrides[0].descriptor: no rule"), "{err}");
    let replayed = sluice_command(&[
        "replay",
        "--config",
        &config,
        "--overrides",
        &overrides_arg,
        &recording_arg,
    ]);
    assert_eq!(
        replayed.status.code(),
        Some(1),
        "a refused override refuses the replay"
    );
    assert!(String::from_utf8_lossy(&replayed.stderr).contains("overrides[0].descriptor"));
}
