//! Running in production: metrics, the HTTP endpoints, hot reload and graceful shutdown,
//! through the real binary.

use std::path::Path;

use crate::support::*;

const CONFIG: &str = include_str!("../fixtures/cases/operations/config.yaml");

#[tokio::test]
async fn metrics_count_every_hit_per_limit() {
    let sluice = Sluice::start(CONFIG, &[]);
    let mut client = sluice.client().await;
    call_times(&mut client, "m", &[("api", "any")], 6).await;
    call_times(&mut client, "m", &[("shadowed", "x")], 2).await;
    call_one(&mut client, "m", &[("route", "/v1/users")]).await;
    call_one(&mut client, "m", &[("user", "alice")]).await;
    let _ = client.should_rate_limit(request("", vec![])).await; // invalid
    let (status, text) = sluice.http_get("/metrics");
    assert_eq!(status, 200);
    let api = r#"{domain="m",key1="api"}"#;
    let value = |name: &str, labels: &str| series(&text, &format!("{name}{labels}"));
    assert_eq!(
        value("ratelimit_service_rate_limit_total_hits", api),
        Some(6.0),
        "{text}"
    );
    assert_eq!(
        value("ratelimit_service_rate_limit_within_limit", api),
        Some(5.0)
    );
    assert_eq!(
        value("ratelimit_service_rate_limit_near_limit", api),
        Some(1.0),
        "only the 5th passes 0.8 x 5"
    );
    assert_eq!(
        value("ratelimit_service_rate_limit_over_limit", api),
        Some(1.0)
    );
    let shadowed = r#"{domain="m",key1="shadowed"}"#;
    assert_eq!(
        value("ratelimit_service_rate_limit_total_hits", shadowed),
        Some(2.0)
    );
    assert_eq!(
        value("ratelimit_service_rate_limit_over_limit", shadowed),
        Some(1.0)
    );
    assert_eq!(
        value("ratelimit_service_rate_limit_shadow_mode", shadowed),
        Some(1.0)
    );
    // share_threshold: the pattern; detailed_metric: the request's value.
    assert_eq!(
        value(
            "ratelimit_service_rate_limit_total_hits",
            r#"{domain="m",key1="route_/v1/*"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            "ratelimit_service_rate_limit_total_hits",
            r#"{domain="m",key1="user_alice"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            "ratelimit_service_should_rate_limit_error",
            r#"{err_type="service_error"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        value("ratelimit_service_config_load_success", ""),
        Some(1.0)
    );
    assert_eq!(
        value(
            "ratelimit_service_response_time_seconds_count",
            r#"{grpc_method="ShouldRateLimit"}"#
        ),
        Some(11.0),
        "every call timed"
    );
    assert_eq!(
        value(
            "sluice_decisions_total",
            r#"{algorithm="fixed_window",code="OVER_LIMIT"}"#
        ),
        Some(1.0)
    );
    assert_eq!(value("sluice_memory_store_keys", ""), Some(4.0));
    assert!(value("sluice_store_duration_seconds_count", "").is_some());
}

#[tokio::test]
async fn limit_overrides_do_not_create_a_series_per_value() {
    let sluice = Sluice::start(CONFIG, &["--max-metric-series", "100"]);
    let mut client = sluice.client().await;
    for i in 0..20 {
        let value = format!("v{i}");
        let d = descriptor_with_limit(&[("anything", &value)], 10, Unit::Minute as i32);
        call(&mut client, request("m", vec![d])).await;
    }
    let (_, text) = sluice.http_get("/metrics");
    let total = series(
        &text,
        r#"ratelimit_service_rate_limit_total_hits{domain="m",key1="anything"}"#,
    );
    assert_eq!(total, Some(20.0), "{text}");
    assert!(!text.contains("v13"), "no value in any label");
}

#[test]
fn json_endpoint_answers_like_the_grpc_one() {
    let sluice = Sluice::start(CONFIG, &[]);
    let body = r#"{"domain":"m","descriptors":[{"entries":[{"key":"api","value":"j"}]}]}"#;
    for _ in 0..5 {
        let (status, text) = sluice.http_post("/json", body);
        assert_eq!(status, 200, "{text}");
        assert!(text.contains(r#""overallCode":"OK""#), "{text}");
        assert!(
            text.contains(r#""requestsPerUnit":5"#) && text.contains(r#""unit":"DAY""#),
            "{text}"
        );
    }
    let (status, text) = sluice.http_post("/json", body);
    assert_eq!(status, 429, "{text}");
    assert!(text.contains(r#""code":"OVER_LIMIT""#), "{text}");
    let (status, text) = sluice.http_post("/json", "{not json");
    assert_eq!(status, 400, "{text}");
    let (status, text) = sluice.http_post(
        "/json",
        r#"{"domain":"","descriptors":[{"entries":[{"key":"a"}]}]}"#,
    );
    assert_eq!(status, 400);
    assert!(text.contains("domain"), "{text}");
    // protobuf JSON's other spelling and a unit by name.
    let override_body = r#"{"domain":"m","hitsAddend":2,"descriptors":[{"entries":[{"key":"x","value":"y"}],"limit":{"requestsPerUnit":3,"unit":"HOUR"}}]}"#;
    let (status, text) = sluice.http_post("/json", override_body);
    assert_eq!(status, 200, "{text}");
    assert!(text.contains(r#""limitRemaining":1"#), "{text}");
}

#[test]
fn json_takes_protobufs_canonical_json_mapping() {
    let sluice = Sluice::start(CONFIG, &[]);
    // Integers as strings (how protobuf writes 64-bit ones), enums by number, null defaults.
    let body = r#"{"domain":"m","hitsAddend":"2","descriptors":[{"entries":[{"key":"x","value":"s"}],"hitsAddend":"1","limit":{"requestsPerUnit":"3","unit":3}}, {"entries":[{"key":"api","value":"s"}],"limit":null}]}"#;
    let (status, text) = sluice.http_post("/json", body);
    assert_eq!(status, 200, "{text}");
    let answer: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(answer["statuses"][0]["limitRemaining"], 2, "{text}");
    assert_eq!(answer["statuses"][0]["currentLimit"]["unit"], "HOUR");
    assert_eq!(
        answer["statuses"][1]["limitRemaining"], 3,
        "the request's 2 hits: {text}"
    );
    let (status, text) = sluice.http_post("/json", r#"{"domain":"m","hitsAddend":"two"}"#);
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("not an unsigned integer"), "{text}");
}

#[test]
fn rlconfig_lists_every_limit_sorted() {
    let sluice = Sluice::start(CONFIG, &[]);
    let (status, text) = sluice.http_get("/rlconfig");
    assert_eq!(status, 200);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    let mut sorted = lines.clone();
    sorted.sort();
    assert_eq!(lines, sorted);
    assert!(
        lines.contains(&"m.api: unit=DAY requests_per_unit=5, shadow_mode: false"),
        "{text}"
    );
    assert!(
        lines.contains(&"m.shadowed: unit=DAY requests_per_unit=1, shadow_mode: true"),
        "{text}"
    );
}

#[tokio::test]
async fn a_changed_file_reloads_and_a_broken_one_keeps_the_old_limits() {
    let sluice = Sluice::start(CONFIG, &[]);
    let path = sluice.config_dir.path().join("config.yaml");
    let mut client = sluice.client().await;
    assert_eq!(limit_of(&mut client, "m", "api").await, Some(5));
    std::fs::write(
        &path,
        CONFIG.replace("requests_per_unit: 5", "requests_per_unit: 7"),
    )
    .unwrap();
    eventually(&sluice, "the new limit", async || {
        limit_of(&mut client, "m", "api").await == Some(7)
    })
    .await;
    std::fs::write(
        &path,
        "domain: m\ndescriptors:\n  - key: api\n    ratelimit: {}\n",
    )
    .unwrap();
    eventually(&sluice, "the refusal logged", async || {
        sluice.log().contains("config refused")
    })
    .await;
    assert!(
        sluice.log().contains("config.yaml:4:5:"),
        "path and line logged: {}",
        sluice.log()
    );
    assert_eq!(
        limit_of(&mut client, "m", "api").await,
        Some(7),
        "the previous config keeps serving"
    );
    let (_, text) = sluice.http_get("/metrics");
    assert!(
        series(&text, "ratelimit_service_config_load_error").is_some_and(|v| v >= 1.0),
        "{text}"
    );
    assert!(
        series(&text, "ratelimit_service_config_load_success").is_some_and(|v| v >= 2.0),
        "{text}"
    );
}

#[cfg(unix)]
#[tokio::test]
async fn a_configmap_symlink_swap_reloads() {
    // The layout kubelet writes: config.yaml -> ..data/config.yaml, ..data -> ..<timestamp>.
    let mount = tempfile::tempdir().unwrap();
    let write_version = |name: &str, limit: u32| {
        let dir = mount.path().join(name);
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(
            dir.join("config.yaml"),
            CONFIG.replace(
                "requests_per_unit: 5",
                &format!("requests_per_unit: {limit}"),
            ),
        )
        .unwrap();
    };
    write_version("..2026_11_29_00_00_00.1", 5);
    std::os::unix::fs::symlink("..2026_11_29_00_00_00.1", mount.path().join("..data")).unwrap();
    std::os::unix::fs::symlink("..data/config.yaml", mount.path().join("config.yaml")).unwrap();
    let mount_path = mount.path().display().to_string();
    let sluice = Sluice::start_with(&[], &["--config", &mount_path], &[]);
    let mut client = sluice.client().await;
    assert_eq!(limit_of(&mut client, "m", "api").await, Some(5));
    // The update: a new timestamped directory, a new link beside ..data, renamed over it.
    write_version("..2026_11_29_00_01_00.2", 9);
    std::os::unix::fs::symlink("..2026_11_29_00_01_00.2", mount.path().join("..data_tmp")).unwrap();
    std::fs::rename(mount.path().join("..data_tmp"), mount.path().join("..data")).unwrap();
    std::fs::remove_dir_all(mount.path().join("..2026_11_29_00_00_00.1")).unwrap();
    eventually(&sluice, "the swapped limit", async || {
        limit_of(&mut client, "m", "api").await == Some(9)
    })
    .await;
    assert!(!Path::new(&mount_path)
        .join("..2026_11_29_00_00_00.1")
        .exists());
}

#[test]
fn json_and_rlconfig_can_be_turned_off() {
    let sluice = Sluice::start_with(
        &[("config.yaml", CONFIG)],
        &[],
        &[
            ("SLUICE_HTTP_JSON", "false"),
            ("SLUICE_HTTP_RLCONFIG", "false"),
        ],
    );
    let body = r#"{"domain":"m","descriptors":[{"entries":[{"key":"api","value":"j"}]}]}"#;
    assert_eq!(sluice.http_post("/json", body).0, 404);
    assert_eq!(sluice.http_get("/rlconfig").0, 404);
    assert_eq!(sluice.http_get("/healthcheck").0, 200);
    assert_eq!(sluice.http_get("/metrics").0, 200);
}

#[test]
fn use_prometheus_serves_the_metrics_on_their_own_listener() {
    let sluice = Sluice::start_with(
        &[("config.yaml", CONFIG)],
        &[],
        &[
            ("USE_PROMETHEUS", "true"),
            ("PROMETHEUS_ADDR", "127.0.0.1:0"),
            ("PROMETHEUS_PATH", "/stats/prometheus"),
        ],
    );
    assert!(sluice.wait_for_log("sluice listening"));
    let log = sluice.log();
    let addr: std::net::SocketAddr = log
        .split("prometheus=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|addr| addr.parse().ok())
        .unwrap_or_else(|| panic!("no prometheus address in: {log}"));
    let (status, text) = http_request(addr, "GET", "/stats/prometheus", "");
    assert_eq!(status, 200);
    assert!(
        text.contains("ratelimit_service_config_load_success"),
        "{text}"
    );
    // Only the metrics there; the HTTP port keeps its own.
    assert_eq!(http_request(addr, "GET", "/healthcheck", "").0, 404);
    assert_eq!(sluice.http_get("/metrics").0, 200);
}
