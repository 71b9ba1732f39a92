//! The load tools of BENCHMARKS.md against a real sluice: `sluice-load` and the h2load request
//! script, run through real h2load. Their figures are only worth something if every call they
//! count was a real, decoded ShouldRateLimit call.

use std::path::Path;
use std::process::Command;

use crate::support::*;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use prost::Message;

const CONFIG: &str = include_str!("../fixtures/cases/load_tools/config.yaml");

/// Runs sluice-load against `sluice` with `args` (separated by spaces) and parses its
/// `--json` line.
fn sluice_load(sluice: &Sluice, args: &str) -> serde_json::Value {
    let output = Command::new(env!("CARGO_BIN_EXE_sluice-load"))
        .args([
            "--target",
            &sluice.grpc_addr.to_string(),
            "--domain",
            "load",
        ])
        .args(args.split_whitespace())
        .arg("--json")
        .output()
        .expect("run sluice-load");
    assert!(output.status.success(), "{output:?}");
    serde_json::from_slice(&output.stdout).expect("one JSON object")
}

/// The hits the server counted under `key1` of domain `load`, from its /metrics.
fn counted(sluice: &Sluice, key1: &str, counter: &str) -> Option<f64> {
    let (_, metrics) = sluice.http_get("/metrics");
    let name = format!("ratelimit_service_rate_limit_{counter}{{domain=\"load\",key1=\"{key1}\"}}");
    series(&metrics, &name)
}

fn number(report: &serde_json::Value, field: &str) -> f64 {
    report[field]
        .as_f64()
        .unwrap_or_else(|| panic!("{field} in {report}"))
}

#[test]
fn sluice_load_counts_every_call_by_its_code() {
    let sluice = Sluice::start(CONFIG, &[]);
    let args = "--calls 40 --connections 2 --in-flight 4 --key hot --value x";
    let report = sluice_load(&sluice, args);
    assert_eq!(number(&report, "calls"), 40.0, "{report}");
    assert_eq!(number(&report, "ok"), 5.0, "{report}");
    assert_eq!(number(&report, "over_limit"), 35.0, "{report}");
    assert_eq!(number(&report, "errors"), 0.0, "{report}");
    let percentiles =
        ["p50_us", "p90_us", "p99_us", "p999_us", "max_us"].map(|f| number(&report, f));
    assert!(percentiles[0] >= 1.0, "{report}");
    assert!(percentiles.windows(2).all(|w| w[0] <= w[1]), "{report}");
    // The server counted the same calls.
    assert_eq!(counted(&sluice, "hot", "total_hits"), Some(40.0));
}

#[test]
fn sluice_load_sends_several_descriptors_over_many_keys() {
    let sluice = Sluice::start(CONFIG, &[]);
    let args = "--calls 30 --connections 1 --in-flight 3 --key wide --keys 500 --distribution zipf --descriptors 4";
    let report = sluice_load(&sluice, args);
    assert_eq!(number(&report, "ok"), 30.0, "{report}");
    assert_eq!(counted(&sluice, "wide", "total_hits"), Some(120.0));
}

#[test]
fn sluice_load_at_a_rate_paces_its_calls() {
    let sluice = Sluice::start(CONFIG, &[]);
    // Two callers at 100 calls/s in all: each sends every 20 ms, so 20 calls take at least
    // 9 periods of the slower caller (180 ms), however fast the server answers.
    let args = "--calls 20 --connections 1 --in-flight 2 --rate 100 --key wide --value paced";
    let report = sluice_load(&sluice, args);
    assert_eq!(number(&report, "calls"), 20.0, "{report}");
    assert!(number(&report, "seconds") >= 0.18, "{report}");
}

#[test]
fn the_h2load_script_writes_a_request_sluice_decodes() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let output = Command::new("python3")
        .arg(root.join("benchmarks/h2load-request.py"))
        .args(["--domain", "load", "--descriptor", "hot=h2load"])
        .output()
        .expect("run benchmarks/h2load-request.py");
    assert!(output.status.success(), "{output:?}");
    let framed = output.stdout;
    // gRPC framing: no compression, then the message length, big-endian.
    assert_eq!(framed[0], 0);
    let length = u32::from_be_bytes([framed[1], framed[2], framed[3], framed[4]]) as usize;
    assert_eq!(length, framed.len() - 5);
    // Envoy's own protos read what the script wrote.
    let request = RateLimitRequest::decode(&framed[5..]).expect("a RateLimitRequest");
    assert_eq!(request.domain, "load");
    let entry = &request.descriptors[0].entries[0];
    assert_eq!(
        (entry.key.as_str(), entry.value.as_str()),
        ("hot", "h2load")
    );

    // h2load sends it as the script's command line says; sluice counts every call.
    let sluice = Sluice::start(CONFIG, &[]);
    let dir = tempfile::tempdir().expect("temporary directory");
    let body = dir.path().join("request.bin");
    std::fs::write(&body, &framed).expect("write the request");
    let url = format!(
        "http://{}/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
        sluice.grpc_addr
    );
    let h2load = Command::new("h2load")
        .args(["-n", "50", "-c", "2", "-m", "4"])
        .args([
            "-H",
            "content-type: application/grpc",
            "-H",
            "te: trailers",
            "-d",
        ])
        .arg(&body)
        .arg(&url)
        .output()
        .expect("run h2load (Debian: nghttp2-client)");
    let stdout = String::from_utf8_lossy(&h2load.stdout);
    assert!(stdout.contains("50 succeeded"), "{stdout}");
    assert_eq!(counted(&sluice, "hot", "total_hits"), Some(50.0));
    assert_eq!(counted(&sluice, "hot", "over_limit"), Some(45.0));
}

#[test]
fn sluice_quota_load_prints_the_shares_over_time_and_the_reports_the_server_counted() {
    let config = "domain: edge_quota\ndescriptors:\n  - key: api\n    value: search\n    rate_limit: {unit: minute, requests_per_unit: 10000}\n";
    let sluice = Sluice::start(config, &[]);
    let output = Command::new(env!("CARGO_BIN_EXE_sluice-quota-load"))
        .args(["--target", &sluice.grpc_addr.to_string()])
        .args(["--clients", "5", "--demand", "20,40,100,150,200"])
        .args(["--interval", "200ms", "--duration", "3s"])
        .output()
        .expect("run sluice-quota-load");
    assert!(output.status.success(), "{output:?}");
    let text = String::from_utf8_lossy(&output.stdout);
    // Demands of 1,200, 2,400, 6,000, 9,000 and 12,000 a minute of 10,000: the first met,
    // 8,800 split four ways (2,400 is more than a fourth).
    let last_row = text
        .lines()
        .rfind(|line| line.contains(" = "))
        .expect("a row of shares");
    assert!(
        last_row.ends_with("1200 2200 2200 2200 2200 = 10000"),
        "{text}"
    );
    let summary = text.lines().last().unwrap_or_default();
    let reports: u64 = summary
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(summary.contains("0 errors"), "{text}");
    let (_, metrics) = sluice.http_get("/metrics");
    let assigned = series(
        &metrics,
        "sluice_rlqs_assignments_total{domain=\"edge_quota\",rule=\"edge_quota.api_search\"}",
    )
    .unwrap_or(0.0);
    assert!(
        reports > 0 && assigned >= reports as f64,
        "{reports} reports, {assigned} assignments"
    );
}
