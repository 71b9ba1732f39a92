//! Who is being limited (docs/heavy-hitters.md), through the admin port and /metrics: each
//! limit's heaviest values by hits and by denials, one value's counts and state, the bounded
//! Prometheus series, the lists merged across two replicas on one Redis, a reload, and no
//! answer without credentials.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::admin::{admin, admin_call, admitted, block_on, AdminFlags, TOKEN};
use crate::support::redis::RedisServer;
use crate::support::{call, descriptor, http_request_with, request, Sluice};

pub const CONFIG: &str = r#"
domain: tenants
descriptors:
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: path
    rate_limit: {unit: hour, requests_per_unit: 1000}
"#;

/// `calls` calls of `tenant=value` on `sluice`.
pub fn drive(sluice: &Sluice, value: &str, calls: usize) {
    block_on(admitted(sluice, &[("tenant", value)], calls));
}

fn top(sluice: &Sluice, query: &str) -> Value {
    let (status, body) = admin(sluice, "GET", &format!("/v1/top?{query}"), Value::Null);
    assert_eq!(status, 200, "{body}");
    body
}

/// The values of a top list with their counts, in order.
fn listed(top: &Value) -> Vec<(String, u64)> {
    top["values"]
        .as_array()
        .map(|values| {
            values
                .iter()
                .map(|v| {
                    let value = v["value"].as_str().unwrap_or_default().to_string();
                    (value, v["count"].as_u64().unwrap_or(0))
                })
                .collect()
        })
        .unwrap_or_default()
}

fn on_each_store(test: impl Fn(&Sluice)) {
    let flags = AdminFlags::new();
    let memory = Sluice::start(CONFIG, &flags.args());
    test(&memory);
    drop(memory);
    let (_redis, on_redis) = Sluice::on_own_redis(&[("config.yaml", CONFIG)], &flags.args(), &[]);
    test(&on_redis);
}

#[test]
fn the_top_lists_name_the_heaviest_values_by_hits_and_by_denials() {
    on_each_store(|sluice| {
        drive(sluice, "a", 2);
        drive(sluice, "b", 4);
        drive(sluice, "c", 12);
        let (status, limits) = admin(sluice, "GET", "/v1/top", Value::Null);
        assert_eq!(status, 200, "{limits}");
        assert_eq!(
            limits["limits"],
            json!([{"domain": "tenants", "limit": "tenants.tenant"}])
        );
        let hits = top(sluice, "domain=tenants&limit=tenants.tenant");
        assert_eq!(
            listed(&hits),
            [
                ("tenant=c".into(), 12),
                ("tenant=b".into(), 4),
                ("tenant=a".into(), 2)
            ]
        );
        assert_eq!(hits["total"], 18);
        assert_eq!(hits["bound"], 0, "three values fit the sketch: exact");
        assert_eq!(hits["window"], "1m");
        assert_eq!(
            hits["values"][0]["descriptor"],
            json!([{"key": "tenant", "value": "c"}])
        );
        // Only c went past its 5 an hour: 7 denials, over the last minute and the last hour.
        for window in ["1m", "1h"] {
            let denials = top(
                sluice,
                &format!("domain=tenants&limit=tenants.tenant&by=denials&window={window}"),
            );
            assert_eq!(listed(&denials), [("tenant=c".into(), 7)], "{window}");
        }
        let one = top(sluice, "domain=tenants&limit=tenants.tenant&k=1");
        assert_eq!(listed(&one), [("tenant=c".into(), 12)]);
    });
}

#[test]
fn one_value_tells_its_counts_its_limit_in_force_and_whether_it_is_denied_now() {
    on_each_store(|sluice| {
        drive(sluice, "a", 2);
        drive(sluice, "c", 8);
        let value = |v: &str| {
            let path =
                format!("/v1/top/value?domain=tenants&limit=tenants.tenant&value=tenant%3D{v}");
            let (status, body) = admin(sluice, "GET", &path, Value::Null);
            assert_eq!(status, 200, "{body}");
            body
        };
        let c = value("c");
        assert_eq!(c["denied_now"], true);
        assert_eq!(c["windows"]["1m"]["hits"]["count"], 8);
        assert_eq!(c["windows"]["1h"]["denials"]["count"], 3);
        assert_eq!(c["state"]["limits"][0]["requests_per_unit"], 5);
        assert_eq!(c["state"]["limits"][0]["used"], 5);
        assert_eq!(c["state"]["limits"][0]["remaining"], 0);
        let a = value("a");
        assert_eq!(a["denied_now"], false);
        assert_eq!(a["windows"]["1m"]["denials"]["count"], 0);
        assert_eq!(a["state"]["limits"][0]["remaining"], 3);
    });
}

/// grpcurl (by reflection) calling `method` of the admin service of `sluice` with `data`.
fn grpc(sluice: &Sluice, method: &str, data: &str) -> Value {
    let (answer, stderr) = grpc_call(sluice, method, data);
    answer.unwrap_or_else(|| panic!("{method}: {stderr}"))
}

/// The same, its answer's JSON when it succeeds, and what grpcurl says on stderr.
fn grpc_call(sluice: &Sluice, method: &str, data: &str) -> (Option<Value>, String) {
    let addr = sluice.admin_addr.expect("the admin port").to_string();
    let bearer = format!("authorization: Bearer {TOKEN}");
    let output = std::process::Command::new("grpcurl")
        .args(["-plaintext", "-H", &bearer, "-d", data, &addr])
        .arg(format!("sluice.admin.v1.Admin/{method}"))
        .output()
        .expect("grpcurl runs (scripts/test builds it)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let answer = output
        .status
        .success()
        .then(|| serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}")));
    (answer, stderr)
}

#[test]
fn the_grpc_face_answers_as_the_json_one() {
    let flags = AdminFlags::new();
    let sluice = Sluice::start(CONFIG, &flags.args());
    drive(&sluice, "b", 2);
    drive(&sluice, "c", 8);
    let limits = grpc(&sluice, "TrackedLimits", r#"{"domain":"tenants"}"#);
    assert_eq!(
        limits["limits"],
        json!([{"domain": "tenants", "limit": "tenants.tenant"}])
    );
    let top = grpc(
        &sluice,
        "Top",
        r#"{"domain":"tenants","limit":"tenants.tenant","by":"denials","window":"1h"}"#,
    );
    assert_eq!(top["values"][0]["value"], "tenant=c", "{top}");
    assert_eq!(top["values"][0]["count"], "3", "{top}");
    assert_eq!(
        top["values"][0]["descriptor"],
        json!([{"key": "tenant", "value": "c"}])
    );
    assert_eq!(
        (top["by"].as_str(), top["window"].as_str()),
        (Some("denials"), Some("1h"))
    );
    let value = grpc(
        &sluice,
        "TopValue",
        r#"{"domain":"tenants","limit":"tenants.tenant","value":"tenant=b"}"#,
    );
    assert_eq!(value["windows"]["1m"]["hits"]["count"], "2", "{value}");
    assert!(value.get("deniedNow").is_none(), "b is not denied: {value}");
    assert_eq!(value["state"]["limits"][0]["remaining"], "3", "{value}");
    // A wrong `by` is INVALID_ARGUMENT naming it.
    let (answer, stderr) = grpc_call(
        &sluice,
        "Top",
        r#"{"domain":"tenants","limit":"tenants.tenant","by":"most"}"#,
    );
    assert!(answer.is_none());
    assert!(
        stderr.contains("InvalidArgument") && stderr.contains("by"),
        "{stderr}"
    );
}

#[test]
fn errors_name_the_field_and_an_untracked_limit_is_not_found() {
    let flags = AdminFlags::new();
    let sluice = Sluice::start(CONFIG, &flags.args());
    drive(&sluice, "a", 1);
    let (status, body) = admin(
        &sluice,
        "GET",
        "/v1/top?domain=tenants&limit=tenants.tenant&by=most",
        Value::Null,
    );
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["code"], "INVALID_ARGUMENT");
    let (status, body) = admin(
        &sluice,
        "GET",
        "/v1/top?domain=tenants&limit=tenants.tenant&k=100000",
        Value::Null,
    );
    assert_eq!((status, body["field"].as_str()), (400, Some("k")), "{body}");
    let (status, body) = admin(&sluice, "GET", "/v1/top?limit=tenants.tenant", Value::Null);
    assert_eq!(
        (status, body["field"].as_str()),
        (400, Some("domain")),
        "{body}"
    );
    let (status, body) = admin(
        &sluice,
        "GET",
        "/v1/top?domain=tenants&limit=tenants.path",
        Value::Null,
    );
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["code"], "NOT_FOUND");
}

#[test]
fn nothing_is_told_without_credentials_and_a_browser_s_basic_credentials_are_taken() {
    let flags = AdminFlags::new();
    let sluice = Sluice::start(CONFIG, &flags.args());
    drive(&sluice, "secret-tenant", 1);
    let addr = sluice.admin_addr.expect("the admin port");
    for path in [
        "/dashboard",
        "/v1/dashboard",
        "/v1/top",
        "/v1/top/value?domain=tenants&limit=tenants.tenant&value=tenant%3Dsecret-tenant",
    ] {
        let (status, body) = admin_call(addr, None, "GET", path, &Value::Null);
        assert_eq!(status, 401, "{path}: {body}");
        let (status, _) = admin_call(
            addr,
            Some("not-the-token-0123456789"),
            "GET",
            path,
            &Value::Null,
        );
        assert_eq!(status, 401, "{path}");
    }
    let basic = |password: &str| {
        use base64::Engine;
        let encoded = base64::engine::general_purpose::STANDARD.encode(format!("ops:{password}"));
        let header = format!("Basic {encoded}");
        http_request_with(
            addr,
            "GET",
            "/v1/top",
            &[("Authorization", header.as_str())],
            "",
        )
    };
    assert_eq!(basic(TOKEN).0, 200);
    assert_eq!(basic("wrong-token-0123456789").0, 401);
    let (status, page) = http_request_with(
        addr,
        "GET",
        "/dashboard",
        &[("Authorization", &format!("Bearer {TOKEN}"))],
        "",
    );
    assert_eq!(status, 200);
    assert!(page.contains("who is being limited"), "{page}");
    for elsewhere in ["src=\"http", "href=\"http", "@import", "url(http"] {
        assert!(
            !page.contains(elsewhere),
            "the page loads nothing from elsewhere: {elsewhere}"
        );
    }
}

#[test]
fn prometheus_carries_no_value_unless_asked_to() {
    let sluice = Sluice::start(CONFIG, &[]);
    drive(&sluice, "secret-tenant", 3);
    let (_, text) = sluice.http_get("/metrics");
    assert!(!text.contains("secret-tenant"), "{text}");
    assert!(!text.contains("sluice_heavy_hitter"), "{text}");
}

#[test]
fn prometheus_carries_at_most_top_values_a_limit_with_their_ranks() {
    let flags = AdminFlags::new();
    let mut args = flags.args();
    args.extend(["--heavy-hitters-top", "2", "--heavy-hitters-metrics"]);
    let sluice = Sluice::start(CONFIG, &args);
    drive(&sluice, "a", 1);
    drive(&sluice, "b", 3);
    drive(&sluice, "c", 9);
    let (_, text) = sluice.http_get("/metrics");
    let series: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("sluice_heavy_hitter_hits{") && l.contains("window=\"1m\""))
        .collect();
    assert_eq!(
        series,
        [
            r#"sluice_heavy_hitter_hits{domain="tenants",limit="tenants.tenant",window="1m",rank="1",value="tenant=c"} 9"#,
            r#"sluice_heavy_hitter_hits{domain="tenants",limit="tenants.tenant",window="1m",rank="2",value="tenant=b"} 3"#,
        ]
    );
    assert!(text.contains(
        r#"sluice_heavy_hitter_denials{domain="tenants",limit="tenants.tenant",window="1h",rank="1",value="tenant=c"} 4"#
    ));
    assert!(text.contains(
        r#"sluice_heavy_hitter_error_bound{domain="tenants",limit="tenants.tenant",window="1m",by="hits"} 0"#
    ));
}

#[test]
fn two_replicas_on_one_redis_answer_with_the_merged_lists() {
    let flags = AdminFlags::new();
    let redis = RedisServer::start(&[]);
    let files = [("config.yaml", CONFIG)];
    let first = Sluice::on_redis_url(&files, &redis.url(), &flags.args(), &[]);
    let second = Sluice::on_redis_url(&files, &redis.url(), &flags.args(), &[]);
    drive(&first, "c", 4);
    drive(&second, "c", 6);
    drive(&second, "b", 3);
    drive(&first, "a", 1);
    // Each replica shares its lists every 2 seconds.
    let deadline = Instant::now() + Duration::from_secs(10);
    let want = vec![
        ("tenant=c".to_string(), 10),
        ("tenant=b".to_string(), 3),
        ("tenant=a".to_string(), 1),
    ];
    for sluice in [&first, &second] {
        loop {
            let hits = top(sluice, "domain=tenants&limit=tenants.tenant");
            if listed(&hits) == want {
                assert_eq!(hits["total"], 14);
                break;
            }
            assert!(Instant::now() < deadline, "never merged: {hits}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    // c is denied past 5 across both: 5 denials, merged.
    let denials = top(&first, "domain=tenants&limit=tenants.tenant&by=denials");
    assert_eq!(listed(&denials), [("tenant=c".into(), 5)]);
    // A replica that stops is left out once its lists are older than 10 seconds; until then
    // its counts stand. Its lists are gone from Redis after that.
    drop(second);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let hits = top(&first, "domain=tenants&limit=tenants.tenant");
        if listed(&hits) == [("tenant=c".into(), 4), ("tenant=a".into(), 1)] {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the stopped replica stayed: {hits}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn many_concurrent_clients_are_each_counted_exactly() {
    let flags = AdminFlags::new();
    let sluice = Sluice::start(CONFIG, &flags.args());
    block_on(async {
        let mut clients = Vec::new();
        for client in 0..16usize {
            let mut connection = sluice.client().await;
            clients.push(tokio::spawn(async move {
                // Tenant t<client % 8>: two clients each, 30 calls a client.
                let tenant = format!("t{}", client % 8);
                for _ in 0..30 {
                    call(
                        &mut connection,
                        request("tenants", vec![descriptor(&[("tenant", &tenant)])]),
                    )
                    .await;
                }
            }));
        }
        for client in clients {
            client.await.expect("a client");
        }
    });
    let hits = top(&sluice, "domain=tenants&limit=tenants.tenant&k=20");
    assert_eq!(hits["total"], 480);
    let counts: Vec<u64> = listed(&hits).iter().map(|(_, count)| *count).collect();
    assert_eq!(counts, [60; 8], "{hits}");
    // Each tenant: 5 admitted of 60.
    let denials = top(
        &sluice,
        "domain=tenants&limit=tenants.tenant&by=denials&k=20",
    );
    assert_eq!(denials["total"], 440, "{denials}");
}

#[test]
fn the_dashboard_s_data_tells_the_circuit_reservations_overrides_and_the_replay_report() {
    let flags = AdminFlags::new();
    let dir = tempfile::tempdir().expect("a directory");
    let report = dir.path().join("replay.json");
    let report_path = report.display().to_string();
    let mut args = flags.args();
    args.extend(["--admin-replay-report", report_path.as_str()]);
    args.extend(["--store-circuit-failures", "3"]);
    let config = format!(
        "{CONFIG}  - key: llm\n    rate_limit: {{unit: hour, requests_per_unit: 100, reserve: {{amount: 40}}}}\n"
    );
    let (_redis, sluice) = Sluice::on_own_redis(&[("config.yaml", &config)], &args, &[]);
    drive(&sluice, "a", 1);
    block_on(async {
        let mut client = sluice.client().await;
        call(
            &mut client,
            request("tenants", vec![descriptor(&[("llm", "team")])]),
        )
        .await;
    });
    let dashboard = || {
        let (status, body) = admin(&sluice, "GET", "/v1/dashboard", Value::Null);
        assert_eq!(status, 200, "{body}");
        body
    };
    let body = dashboard();
    let gauge = |body: &Value, name: &str| {
        body["gauges"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|g| g["name"] == name)
            .map(|g| {
                (
                    g["labels"].as_str().unwrap_or_default().to_string(),
                    g["value"].clone(),
                )
            })
    };
    assert_eq!(
        gauge(&body, "sluice_store_circuit_open").map(|(_, v)| v),
        Some(json!("0"))
    );
    let (labels, held) = gauge(&body, "sluice_reserve_held").expect("the reservation held");
    assert!(labels.contains("llm"), "{labels}");
    assert_eq!(held, json!("40"));
    assert!(
        body["replay_error"]
            .as_str()
            .is_some_and(|e| e.contains("replay.json")),
        "{body}"
    );
    std::fs::write(
        &report,
        r#"{"baseline": "recorded", "calls": 10, "before": {"admitted": 9, "denied": 1}, "after": {"admitted": 7, "denied": 3}, "newly_denied": 2, "newly_admitted": 0}"#,
    )
    .expect("written");
    let body = dashboard();
    assert_eq!(body["replay"]["newly_denied"], 2, "{body}");
    assert!(body["replay"]["written_at"].is_string());
    assert_eq!(
        body["limits"][0]["in_force"],
        json!(["fixed_window: 5 per hour"])
    );
}

#[test]
fn a_reload_keeps_what_was_counted() {
    let flags = AdminFlags::new();
    let sluice = Sluice::start(CONFIG, &flags.args());
    drive(&sluice, "c", 7);
    let raised = CONFIG.replace("requests_per_unit: 5", "requests_per_unit: 6");
    std::fs::write(sluice.config_dir.path().join("config.yaml"), raised).expect("written");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !sluice.log().contains("config reloaded") {
        assert!(Instant::now() < deadline, "no reload");
        std::thread::sleep(Duration::from_millis(50));
    }
    drive(&sluice, "c", 1);
    let hits = top(&sluice, "domain=tenants&limit=tenants.tenant");
    assert_eq!(listed(&hits), [("tenant=c".into(), 8)]);
    let denials = top(&sluice, "domain=tenants&limit=tenants.tenant&by=denials");
    // 5 admitted and 2 denied before; the raised limit admits the 8th: still 2.
    assert_eq!(listed(&denials), [("tenant=c".into(), 2)]);
}
