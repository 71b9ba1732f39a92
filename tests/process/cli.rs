//! The `sluice` command line: `check-config` (hostile YAML refused in bounded time among it),
//! refusals at startup, and `sluice simulate` (deterministic output and the admitted counts
//! worked out by hand).

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn sluice(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .env_remove("MERGE_DOMAIN_CONFIG")
        .output()
        .expect("run sluice")
}

fn fixture(path: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/config")
        .join(path)
        .display()
        .to_string()
}

#[test]
fn check_config_summarises_each_domain() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("config")
        .display()
        .to_string();
    let output = sluice(&["check-config", &example, &fixture("valid/nested.yaml")]);
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("domain edge_proxy:"), "{stdout}");
    assert!(stdout.contains("domain storefront: 10 limits"), "{stdout}");
}

#[test]
fn check_config_explains_a_penalty_and_places_each_refused_field() {
    let penalties = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/cases/penalties/config.yaml")
        .display()
        .to_string();
    let output = sluice(&["check-config", &penalties]);
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains(
            "auth.user: token_bucket: 5 per minute, burst 5, with a penalty: a client denied 2 \
             times within 1m is blocked: every request OVER_LIMIT until the block ends, the \
             limit not charged; blocks 1m, 2m, 3m (x2 each repeat, 3m at most); forgotten \
             after 10m without a denial"
        ),
        "{stdout}"
    );
    let dir = tempfile::tempdir().expect("temporary directory");
    let bad = dir.path().join("bad.yaml");
    let text = "domain: d\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: minute\n      requests_per_unit: 5\n      penalty:\n        block: 1m\n        factor: 0.5\n";
    std::fs::write(&bad, text).expect("write");
    let output = sluice(&["check-config", &bad.display().to_string()]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("bad.yaml:9:9: descriptors[0].rate_limit.penalty.factor: must be a number from 1 to 100"),
        "{stderr}"
    );
}

#[test]
fn check_config_says_a_concurrency_limit_is_leases_in_flight_not_a_rate() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("leases.yaml");
    let text = "domain: d\ndescriptors:\n  - key: job\n    rate_limit: {algorithm: concurrency, requests_per_unit: 3, unit: second, unit_multiplier: 2}\n";
    std::fs::write(&path, text).expect("write");
    let output = sluice(&["check-config", &path.display().to_string()]);
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains(
            "d.job: concurrency: 3 in flight, a lease lives at most 2 seconds: a count of \
             requests in flight, not a rate;"
        ),
        "{stdout}"
    );
    assert!(!stdout.contains("3 per 2 seconds"), "{stdout}");
}

#[test]
fn check_config_prints_every_error_and_exits_one() {
    let output = sluice(&[
        "check-config",
        &fixture("invalid/unknown_unit.yaml"),
        &fixture("invalid/empty_key.yaml"),
    ]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("unknown_unit.yaml:6:7:"), "{stderr}");
    assert!(stderr.contains("empty_key.yaml:3:5:"), "{stderr}");
}

#[test]
fn check_config_merges_domains_when_asked() {
    let files = [
        fixture("valid/split_first.yaml"),
        fixture("valid/split_second.yaml"),
    ];
    let refused = sluice(&["check-config", &files[0], &files[1]]);
    assert_eq!(refused.status.code(), Some(1));
    let merged = sluice(&[
        "check-config",
        "--merge-domain-config",
        &files[0],
        &files[1],
    ]);
    assert!(merged.status.success(), "{merged:?}");
}

#[test]
fn serve_refuses_a_broken_config_naming_file_and_line() {
    let output = sluice(&[
        "serve",
        "--config",
        &fixture("invalid/misspelled_rate_limit.yaml"),
        "--grpc-addr",
        "127.0.0.1:0",
    ]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("misspelled_rate_limit.yaml:5:5:"),
        "{stderr}"
    );
}

#[test]
fn serve_refuses_an_invalid_setting_before_listening() {
    let output = sluice(&["serve", "--grpc-addr", "not-an-address"]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("invalid setting"), "{stderr}");
    assert!(stderr.contains("not-an-address"), "{stderr}");
    assert!(!stderr.contains("listening"), "{stderr}");
}

#[test]
fn log_format_json_writes_json_lines() {
    use std::io::{BufRead, BufReader};
    let config = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("config")
        .display()
        .to_string();
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args([
            "serve",
            "--config",
            &config,
            "--grpc-addr",
            "127.0.0.1:0",
            "--http-addr",
            "127.0.0.1:0",
        ])
        .env("LOG_FORMAT", "json")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start sluice");
    let stderr = child.stderr.take().expect("stderr");
    let line = BufReader::new(stderr)
        .lines()
        .map_while(Result::ok)
        .find(|l| l.contains("sluice listening"));
    let _ = child.kill();
    let _ = child.wait();
    let line = line.expect("a startup line");
    let json: serde_json::Value =
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
    assert_eq!(json["level"], "INFO");
    assert!(
        json["fields"]["grpc"]
            .as_str()
            .is_some_and(|a| a.starts_with("127.0.0.1:")),
        "{line}"
    );
}

/// Runs sluice with `args` and the environment `envs`.
fn sluice_with_env(args: &[&str], envs: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .env_remove("MERGE_DOMAIN_CONFIG")
        .envs(envs.iter().copied())
        .output()
        .expect("run sluice")
}

#[test]
fn a_config_file_with_a_byte_order_mark_loads() {
    let dir = tempfile::tempdir().unwrap();
    let text = "\u{feff}domain: bom\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n";
    std::fs::write(dir.path().join("bom.yaml"), text).unwrap();
    let output = sluice(&["check-config", &dir.path().display().to_string()]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(String::from_utf8_lossy(&output.stdout).contains("domain bom: 1 limits"));
}

#[test]
fn an_empty_config_says_loudly_that_nothing_is_limited() {
    let dir = tempfile::tempdir().unwrap();
    let output = sluice(&["check-config", &dir.path().display().to_string()]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success());
    assert!(stderr.contains("nothing is rate limited"), "{stderr}");
}

#[test]
fn help_never_shows_a_password_from_the_environment() {
    let output = sluice_with_env(
        &["serve", "--help"],
        &[
            ("REDIS_URL", "redis://user:hunter2@redis:6379"),
            ("REDIS_PERSECOND_URL", "redis://user:hunter3@fast:6379"),
            ("REDIS_AUTH", "hunter4"),
        ],
    );
    let help = String::from_utf8_lossy(&output.stdout);
    assert!(help.contains("REDIS_URL"), "{help}");
    for secret in ["hunter2", "hunter3", "hunter4"] {
        assert!(!help.contains(secret), "{secret} in: {help}");
    }
}

#[test]
fn a_security_setting_sluice_cannot_honour_stops_it() {
    for (name, value) in [
        ("GRPC_SERVER_USE_TLS", "true"),
        ("GRPC_SERVER_TLS_CERT", "/tls/cert.pem"),
        ("GRPC_CLIENT_TLS_CACERT", "/tls/ca.pem"),
    ] {
        let output = sluice_with_env(
            &[
                "serve",
                "--grpc-addr",
                "127.0.0.1:0",
                "--http-addr",
                "127.0.0.1:0",
            ],
            &[(name, value)],
        );
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{name}: {stderr}");
        assert!(stderr.contains(name), "{stderr}");
        assert!(!stderr.contains("listening"), "{stderr}");
    }
    // Off is off.
    let output = sluice_with_env(
        &["check-config", &fixture("valid/nested.yaml")],
        &[("GRPC_SERVER_USE_TLS", "false")],
    );
    assert!(output.status.success());
}

#[test]
fn check_config_explains_a_reserved_budget_and_its_bound() {
    let budgets = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/cases/budgets/config.yaml")
        .display()
        .to_string();
    let output = sluice(&["check-config", &budgets]);
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains(
            "ai.api_key: a reserved budget of 10000 per hour: a request is admitted only while \
             used + held + its estimate fit; it holds 2000 (or the descriptor's own \
             hits_addend), at most 5000, until its settle (a descriptor carrying sluice.reserve \
             with hits_addend the actual cost) or for 2m or its window's end, whichever comes \
             first, charging nothing if it lapses; a settle is never denied and charges once; \
             bound: the charged total stays within 10000 plus, for each request in flight when \
             the budget filled, its actual less its estimate"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains("ai.bucket: a reserved budget of 6000 per minute")
            && stdout.contains("or for 30s, charging nothing"),
        "a bucket has no window to end: {stdout}"
    );
}

#[test]
fn hostile_yaml_is_refused_in_bounded_time() {
    let dir = tempfile::tempdir().unwrap();
    // 200 KB of nested lists and 800 KB of nested flow maps: 17 s and 18 s of CPU before.
    let lists = format!(
        "domain: d\ndescriptors: {}{}\n",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let maps = format!(
        "domain: e\ndescriptors: [{}{}]\n",
        "{key: k, descriptors: [".repeat(32_000),
        "]}".repeat(32_000)
    );
    for (name, text) in [("lists.yaml", lists), ("maps.yaml", maps)] {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let started = Instant::now();
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
            .arg("check-config")
            .arg(&path)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains("nest deeper than 64 levels"), "{stderr}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{name}: {:?}",
            started.elapsed()
        );
    }
    // Over the size bound: refused before it is read whole.
    let huge = dir.path().join("huge.yaml");
    let file = std::fs::File::create(&huge).unwrap();
    file.set_len(17 * 1024 * 1024).unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("check-config")
        .arg(&huge)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("larger than 16777216 bytes"), "{stderr}");
}

// `sluice simulate`.

/// `sluice simulate` of `config/demo.yaml`'s domain `demo` with `args`; what it prints.
fn simulate(args: &[&str]) -> String {
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/demo.yaml");
    let demo = demo.display().to_string();
    let mut all = vec!["simulate", "--config", demo.as_str(), "--domain", "demo"];
    all.extend_from_slice(args);
    let output = sluice(&all);
    assert!(output.status.success(), "{output:?}");
    String::from_utf8(output.stdout).expect("utf-8")
}

/// Traffic of the test: 8 per second for 8 s (64 requests) and 30 more at once at 3 s.
const PATTERN: [&str; 6] = ["--rate", "8/s", "--burst-at", "3s:30", "--duration", "8s"];

fn admitted(algorithm: &str) -> usize {
    let descriptor = format!("algorithm={algorithm}");
    let mut args = vec!["--descriptor", descriptor.as_str()];
    args.extend(PATTERN);
    let text = simulate(&args);
    let summary = text.lines().nth(1).expect("summary line");
    assert!(summary.contains("94 requests"), "{summary}");
    summary
        .split(", ")
        .find_map(|part| part.strip_suffix(" admitted"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no admitted count in {summary}"))
}

#[test]
fn each_algorithm_admits_what_its_rules_say() {
    // Every limit is 10 per second; the steady 8/s always fits, so the algorithms differ only
    // in second 3, where 31 requests arrive at 3.0 s and 7 more at 3.125 s ... 3.875 s.
    // fixed window: window [3, 4) takes 10 of the 38 -> 7 x 8 + 10.
    assert_eq!(admitted("fixed_window"), 66);
    // log: (2, 3] holds the 7 steady requests from 2.125 s: 3 of the 31 fit; after that each
    // steady request replaces one leaving the window -> 56 + 3 + 7.
    assert_eq!(admitted("sliding_window_log"), 66);
    // counter: at 3.0 s the previous window (8) weighs fully: 2 fit; then the weight drops by
    // exactly 1 every 0.125 s, so each steady request fits -> 56 + 2 + 7.
    assert_eq!(admitted("sliding_window_counter"), 65);
    // token bucket, burst 20: full at 3.0 s (8/s < 10/s refill): 20 of the 31; the 7 after
    // find a token each -> 56 + 20 + 7.
    assert_eq!(admitted("token_bucket"), 83);
    // leaky bucket, burst 5, one per 0.1 s: 5 of the 31; at 0.125 s spacing each later
    // request finds room (level 5 - 1.25 + 1 <= 5) -> 56 + 5 + 7.
    assert_eq!(admitted("leaky_bucket"), 68);
}

#[test]
fn warm_up_ramps_from_cold_along_the_trapezoid_then_holds_the_stable_rate() {
    // 10 per second, a 2 s warm-up, cold factor 3, under 100 requests a second from a cold
    // start: the 10 permits above the threshold take 290, 270, ..., 110 ms (the trapezoid's
    // slices, 2 s in all), then one every 100 ms.
    let text = simulate(&[
        "--descriptor",
        "algorithm=warm_up",
        "--rate",
        "100/s",
        "--duration",
        "4s",
        "--csv",
    ]);
    let admitted: Vec<u64> = text
        .lines()
        .filter(|line| line.contains(",OK,"))
        .filter_map(|line| line.split(',').nth(1)?.parse().ok())
        .collect();
    let intervals: Vec<u64> = admitted.windows(2).map(|p| (p[1] - p[0]) / 1000).collect();
    assert_eq!(
        intervals[..10],
        [290, 270, 250, 230, 210, 190, 170, 150, 130, 110],
        "{intervals:?}"
    );
    assert_eq!(admitted[10], 2_000_000, "the ramp takes the warm-up period");
    assert!(
        intervals[intervals.len() - 10..]
            .iter()
            .all(|&ms| ms == 100),
        "{intervals:?}"
    );
    assert!(
        text.contains("algorithm=warm_up,0,OK,0,"),
        "a cold start admits at once"
    );
}

#[test]
fn output_is_deterministic_and_csv_has_every_decision() {
    let mut args = vec![
        "--descriptor",
        "algorithm=token_bucket",
        "--descriptor",
        "algorithm=fixed_window",
    ];
    args.extend(PATTERN);
    assert_eq!(simulate(&args), simulate(&args));
    args.push("--csv");
    let csv = simulate(&args);
    let mut lines = csv.lines();
    assert_eq!(
        lines.next(),
        Some("descriptor,time_us,code,limit_remaining,duration_until_reset_s")
    );
    assert_eq!(lines.count(), 2 * 94);
    assert!(
        csv.contains("algorithm=fixed_window,3000000,OVER_LIMIT,0,1"),
        "{csv}"
    );
}

#[test]
fn a_bad_pattern_is_refused_clearly() {
    let output = sluice(&[
        "simulate",
        "--domain",
        "demo",
        "--descriptor",
        "algorithm=fixed_window",
        "--rate",
        "fast",
    ]);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("'fast' is not a rate"));
}

/// The summary line of `descriptor`'s run in `text`.
fn summary_of<'a>(text: &'a str, descriptor: &str) -> &'a str {
    let mut lines = text.lines();
    lines
        .find(|line| line.starts_with(&format!("{descriptor}:")))
        .and_then(|_| lines.next())
        .unwrap_or_else(|| panic!("no run of {descriptor} in {text}"))
}

#[test]
fn a_request_of_several_descriptors_charges_none_when_one_denies() {
    // 4/s for 10 s: burst=tight admits 2 a second, so 20 of the 40 requests pass, and only
    // those are charged to plan=free (30 a minute): 10 remain.
    let text = simulate(&[
        "--descriptor",
        "plan=free",
        "--descriptor",
        "burst=tight",
        "--together",
        "--rate",
        "4/s",
        "--duration",
        "10s",
    ]);
    assert!(
        text.starts_with("requests of every descriptor together: 40 requests, 20 admitted"),
        "{text}"
    );
    assert!(
        summary_of(&text, "plan=free").contains("40 admitted, 0 rejected, 10 remaining at the end"),
        "{text}"
    );
    assert!(
        summary_of(&text, "burst=tight").contains("20 admitted, 20 rejected"),
        "{text}"
    );
}

#[test]
fn costs_reported_after_the_response_put_the_limit_in_debt() {
    // Checks of cost 0 every second; 700 reported at 2 s, 500 at 4 s, on a token bucket of
    // 1000 a minute: the second report is denied but charged, leaving 333 - 500 = -167
    // tokens, refilled at 1000/60 a second: exactly 0 again at 14 s. Admitted: the checks of
    // 0-4 s, the first report, and the checks of 14-19 s.
    let text = simulate(&[
        "--descriptor",
        "tokens=gpt",
        "--cost",
        "0",
        "--rate",
        "1/s",
        "--report-at",
        "2s:700",
        "--report-at",
        "4s:500",
        "--duration",
        "20s",
    ]);
    assert!(
        summary_of(&text, "tokens=gpt").contains("22 requests, 12 admitted, 10 rejected"),
        "{text}"
    );
    let row = |second: &str| {
        text.lines()
            .find(|line| line.trim_start().starts_with(&format!("{second} ")))
            .unwrap_or_else(|| panic!("no row {second} in {text}"))
            .split_whitespace()
            .skip(1)
            .take(2)
            .collect::<Vec<_>>()
    };
    assert_eq!(row("13s"), ["0", "1"], "still in debt at 13 s");
    assert_eq!(row("14s"), ["1", "0"], "repaid at 14 s");
}

#[test]
fn two_limits_on_one_descriptor_bind_on_the_tighter() {
    // 4/s never reaches 5 a second, but 20 a minute is spent in 5 s.
    let text = simulate(&[
        "--descriptor",
        "api_key=demo",
        "--rate",
        "4/s",
        "--duration",
        "20s",
    ]);
    assert!(
        text.contains("api_key=demo: fixed_window: 5 per second and fixed_window: 20 per minute"),
        "{text}"
    );
    assert!(
        summary_of(&text, "api_key=demo").contains("80 requests, 20 admitted, 60 rejected"),
        "{text}"
    );
}

/// With `--hold`, each admitted request releases its lease that long after: at most 3 of
/// config/demo.yaml's concurrency limit run at once, and every one that ends makes room.
#[test]
fn a_concurrency_limit_admits_as_requests_end_with_hold() {
    let args = [
        "--descriptor",
        "algorithm=concurrency",
        "--rate",
        "2/s",
        "--duration",
        "10s",
        "--csv",
    ];
    let admitted_at = |text: &str| -> Vec<u64> {
        text.lines()
            .skip(1)
            .filter(|line| line.contains(",OK,"))
            .filter_map(|line| line.split(',').nth(1)?.parse().ok())
            .collect()
    };
    // Without releases, 3 leases for the whole minute.
    assert_eq!(admitted_at(&simulate(&args)).len(), 3);
    let mut held = args.to_vec();
    held.extend(["--hold", "2500ms"]);
    let admitted = admitted_at(&simulate(&held));
    for &at in &admitted {
        let running = admitted
            .iter()
            .filter(|&&start| start <= at && at < start + 2_500_000)
            .count();
        assert!(running <= 3, "{running} running at {at} µs");
    }
    // 2 a second, each running 2.5 s: 3 start, then one whenever one ends.
    assert_eq!(admitted.len(), 12, "{admitted:?}");
}

#[test]
fn a_brute_force_on_the_login_is_blocked_longer_each_time_it_comes_back() {
    // One try a second for half an hour on 5 a minute: each time the minute's five are gone,
    // the third denial (3 within 10 minutes) blocks, for 1, 2, 4, 8, then 16 minutes. A block
    // ends inside a new minute: its five are admitted, then the next three denials block.
    let text = simulate(&[
        "--descriptor",
        "login=mallory",
        "--rate",
        "1/s",
        "--duration",
        "30m",
    ]);
    let blocks: Vec<&str> = text
        .lines()
        .filter(|line| line.trim_start().starts_with("blocked at"))
        .map(str::trim)
        .collect();
    assert_eq!(
        blocks,
        [
            "blocked at 7s: offence 1, for 1m",
            "blocked at 74s: offence 2, for 2m",
            "blocked at 201s: offence 3, for 4m",
            "blocked at 448s: offence 4, for 8m",
            "blocked at 935s: offence 5, for 16m",
        ],
        "{text}"
    );
    assert!(text.contains("1800 requests, 25 admitted"), "{text}");
    assert!(
        text.contains("(after 3 denials within 10m: blocked 1m, x2 each repeat up to 1h"),
        "{text}"
    );
}

#[test]
fn a_reserved_budget_admits_what_it_can_pay_for_and_without_reserve_overspends() {
    let args = [
        "--descriptor",
        "budget=llm",
        "--cost",
        "0",
        "--rate",
        "2/s",
        "--hold",
        "10s",
        "--actual",
        "1000",
        "--duration",
        "60s",
        "--csv",
    ];
    let admitted = |text: &str| text.lines().filter(|line| line.contains(",OK,")).count();
    // 10,000 a minute, 1,000 held by each request: ten run, and nothing more until the minute
    // ends (those that ended settled 1,000 each: the budget is spent).
    let reserved = simulate(&args);
    assert_eq!(admitted(&reserved), 10, "{reserved}");
    // Without the reservations every request is checked against a budget its running
    // requests have not yet been charged: the first 10 s admit 20 requests, 20,000 tokens,
    // twice the budget, before the first charge lands; and the budget is never reached
    // again (its charges past it are refused, and a check of cost 0 always fits).
    let mut without = args.to_vec();
    without.push("--without-reserve");
    let unreserved = simulate(&without);
    assert_eq!(admitted(&unreserved), 120, "{unreserved}");
}
