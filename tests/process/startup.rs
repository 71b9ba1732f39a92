//! Settings that cannot be honoured stop `sluice serve` before it serves, with the exit code
//! and a message naming the setting: the admin port without authentication, TLS without its
//! files, tracing it cannot export as asked, a DogStatsD mogrifier without its pattern, a
//! snapshot path where nothing can be written.

use std::process::Output;

/// A config any of these starts would serve.
const CONFIG: &str =
    "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n";

/// Runs `sluice serve` on `CONFIG` with `args` and `envs`, on free ports, until it exits, as
/// a user would; its output.
fn serve_until_exit(args: &[&str], envs: &[(&str, &str)]) -> Output {
    let dir = tempfile::tempdir().expect("a directory");
    std::fs::write(dir.path().join("config.yaml"), CONFIG).expect("write the config");
    std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["serve", "--config"])
        .arg(dir.path())
        .args(["--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"])
        .args(args)
        .envs(envs.iter().copied())
        .output()
        .expect("run sluice")
}

/// What `sluice serve` with `args` and `envs` says on stderr as it stops with `code`.
fn stopped_with(code: i32, args: &[&str], envs: &[(&str, &str)]) -> String {
    let output = serve_until_exit(args, envs);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(code), "{stderr}");
    stderr
}

#[test]
fn the_admin_port_does_not_open_without_authentication() {
    let log = stopped_with(2, &["--admin-addr", "127.0.0.1:0"], &[]);
    assert!(log.contains("never opens without authentication"), "{log}");
}

#[test]
fn more_heavy_hitters_told_than_a_sketch_holds_stops_sluice() {
    let log = stopped_with(
        2,
        &["--heavy-hitters-capacity", "8"],
        &[("SLUICE_HEAVY_HITTERS_TOP", "9")],
    );
    assert!(log.contains("SLUICE_HEAVY_HITTERS_TOP"), "{log}");
    assert!(log.contains("sketches of 8 counters"), "{log}");
}

#[test]
fn tls_asked_for_without_its_files_stops_sluice() {
    let stderr = stopped_with(2, &[], &[("GRPC_SERVER_USE_TLS", "true")]);
    assert!(stderr.contains("GRPC_SERVER_TLS_CERT"), "{stderr}");
    let missing = serve_until_exit(
        &[],
        &[
            ("GRPC_SERVER_USE_TLS", "true"),
            ("GRPC_SERVER_TLS_CERT", "/nonexistent/cert.pem"),
            ("GRPC_SERVER_TLS_KEY", "/nonexistent/key.pem"),
        ],
    );
    assert!(!missing.status.success());
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(stderr.contains("/nonexistent/cert.pem"), "{stderr}");
}

#[test]
fn tracing_settings_that_cannot_be_honoured_stop_sluice() {
    let traced = |more: &[(&str, &str)]| {
        let mut envs = vec![("TRACING_ENABLED", "true")];
        envs.extend_from_slice(more);
        stopped_with(2, &[], &envs)
    };
    let stderr = traced(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector:4318")]);
    assert!(
        stderr.contains("TRACING_EXPORTER_PROTOCOL=grpc"),
        "{stderr}"
    );
    let stderr = traced(&[("TRACING_EXPORTER_PROTOCOL", "thrift")]);
    assert!(stderr.contains("TRACING_EXPORTER_PROTOCOL"), "{stderr}");
    let stderr = traced(&[
        ("TRACING_EXPORTER_PROTOCOL", "grpc"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector:4317"),
        ("OTEL_EXPORTER_OTLP_CERTIFICATE", "/nonexistent/ca.pem"),
    ]);
    assert!(stderr.contains("/nonexistent/ca.pem"), "{stderr}");
}

#[test]
fn a_mogrifier_without_its_pattern_stops_sluice() {
    let stderr = stopped_with(
        2,
        &[],
        &[
            ("USE_DOG_STATSD", "true"),
            ("USE_DOG_STATSD_MOGRIFIERS", "DOMAIN"),
        ],
    );
    assert!(
        stderr.contains("DOG_STATSD_MOGRIFIER_DOMAIN_PATTERN"),
        "{stderr}"
    );
}

#[test]
fn a_snapshot_path_that_cannot_be_written_stops_the_server() {
    let output = serve_until_exit(&["--memory-snapshot", "/nonexistent/state.snapshot"], &[]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("cannot write /nonexistent/state.snapshot.tmp"),
        "{stderr}"
    );
}
