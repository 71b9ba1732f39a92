//! The `sluice` command line: `check-config` and refusals at startup.

use std::path::Path;
use std::process::{Command, Output};

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
