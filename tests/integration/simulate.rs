//! `sluice simulate`: deterministic output and the admitted counts worked out by hand.

use std::path::Path;
use std::process::Command;

fn simulate(args: &[&str]) -> String {
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/demo.yaml");
    let output = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("simulate")
        .arg("--config")
        .arg(demo)
        .args(["--domain", "demo"])
        .args(args)
        .output()
        .expect("run sluice simulate");
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
    let output = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args([
            "simulate",
            "--domain",
            "demo",
            "--descriptor",
            "algorithm=fixed_window",
            "--rate",
            "fast",
        ])
        .output()
        .expect("run");
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("'fast' is not a rate"));
}
