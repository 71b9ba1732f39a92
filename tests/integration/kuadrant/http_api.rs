//! Limitador's HTTP API on the HTTP port (docs/kuadrant.md): `/status`, `/limits`, the
//! checks and reports, `/counters` read from the store on both stores (and counted alike by
//! Envoy's call), and Limitador's series by namespace and limit name.

use std::collections::BTreeMap;

use super::{serving, should, Kuadrant, CONFIG, LIMITS};
use crate::support::redis::RedisServer;
use crate::support::*;

#[tokio::test]
async fn limitadors_http_api_checks_reports_and_lists_on_the_http_port() {
    let files = [("config.yaml", CONFIG), ("limits.yaml", LIMITS)];
    let sluice = Sluice::start_with(&files, &[], &[]);
    let (code, status) = sluice.http_get("/status");
    assert_eq!(code, 200, "{status}");
    let status: serde_json::Value = serde_json::from_str(&status).expect("JSON");
    assert_eq!(status["config_version"], 1, "{status}");
    assert_eq!(status["config_err_since"], 0, "{status}");
    assert!(status["started_at"].is_string(), "{status}");
    // The twin of the per-user limit (same period, conditions, variables) is not kept.
    let (code, limits) = sluice.http_get("/limits/lim");
    assert_eq!(code, 200);
    let limits: serde_json::Value = serde_json::from_str(&limits).expect("JSON");
    let names: Vec<&str> = limits
        .as_array()
        .expect("a list")
        .iter()
        .map(|l| l["name"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(names, ["per-user", "namespace-wide"], "{limits}");
    assert_eq!(limits[0]["max_value"], 2);
    assert_eq!(limits[0]["variables"][0], "descriptors[0]['user_id']");
    let body = |user: &str, delta: u64| {
        format!(
            r#"{{"namespace":"lim","values":{{"req.method":"GET","user_id":"{user}"}},"delta":{delta}}}"#
        )
    };
    assert_eq!(
        sluice.http_post("/check_and_report", &body("h1", 1)),
        (200, "null".into())
    );
    assert_eq!(sluice.http_post("/check_and_report", &body("h1", 1)).0, 200);
    assert_eq!(
        sluice.http_post("/check_and_report", &body("h1", 1)),
        (429, "null".into())
    );
    // A check charges nothing; a report is never refused.
    assert_eq!(sluice.http_post("/check", &body("h2", 2)).0, 200);
    assert_eq!(sluice.http_post("/check", &body("h2", 3)).0, 429);
    assert_eq!(sluice.http_post("/report", &body("h2", 2)).0, 200);
    assert_eq!(sluice.http_post("/check", &body("h2", 1)).0, 429);
    assert_eq!(sluice.http_post("/report", &body("h2", 1)).0, 200);
    assert_eq!(sluice.http_get("/limits/nothing-here"), (200, "[]".into()));
    let (_, rlconfig) = sluice.http_get("/rlconfig");
    assert!(
        rlconfig.contains("lim namespace-wide: 5 per 60s"),
        "{rlconfig}"
    );
    assert_eq!(sluice.http_post("/check", "{\"namespace\":\"lim\"}").0, 400);
    // As Limitador's (the side-by-side run found it): only /check_and_report is counted.
    let (_, text) = sluice.http_get("/metrics");
    let ns = "{limitador_namespace=\"lim\"}";
    assert_eq!(
        series(&text, &format!("authorized_calls{ns}")),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        series(&text, &format!("authorized_hits{ns}")),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        series(&text, &format!("limited_calls{ns}")),
        Some(1.0),
        "{text}"
    );
}

/// `/counters/{namespace}`'s counters, by the value of their variable (none: the namespace's).
fn counters_by_user(sluice: &Sluice) -> BTreeMap<String, serde_json::Value> {
    let (code, text) = sluice.http_get("/counters/lim");
    assert_eq!(code, 200, "{text}");
    let listed: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    listed
        .as_array()
        .expect("a list")
        .iter()
        .map(|counter| {
            let user = counter["set_variables"]["descriptors[0]['user_id']"]
                .as_str()
                .unwrap_or("")
                .to_string();
            (user, counter.clone())
        })
        .collect()
}

#[tokio::test]
async fn limitadors_counters_list_what_each_counter_holds_on_every_store() {
    let redis = RedisServer::start(&[]);
    let files = [("config.yaml", CONFIG), ("limits.yaml", LIMITS)];
    for (store, sluice) in serving(&redis, &files, &[]) {
        let body = |user: &str, delta: u64| {
            format!(
                r#"{{"namespace":"lim","values":{{"req.method":"GET","user_id":"{user}"}},"delta":{delta}}}"#
            )
        };
        sluice.http_post("/check_and_report", &body("c1", 1));
        // A report past the limit: nothing remains (not a count below zero).
        sluice.http_post("/report", &body("c2", 3));
        // A check charges nothing, so it makes no counter.
        sluice.http_post("/check", &body("c3", 1));
        let counters = counters_by_user(&sluice);
        let users: Vec<&str> = counters.keys().map(String::as_str).collect();
        assert_eq!(users, ["", "c1", "c2"], "{store}: {counters:?}");
        assert_eq!(counters["c1"]["remaining"], 1, "{store}");
        assert_eq!(counters["c2"]["remaining"], 0, "{store}");
        assert_eq!(
            counters[""]["remaining"], 1,
            "{store}: 4 of the namespace's 5"
        );
        // Envoy's call counts on the same counters as Kuadrant's and the HTTP API's.
        let get = [("req.method", "GET"), ("user_id", "c1")];
        assert_eq!(should(&sluice, &get).await, Code::Ok as i32, "{store}");
        let counters = counters_by_user(&sluice);
        assert_eq!(counters["c1"]["remaining"], 0, "{store}: {counters:?}");
        assert_eq!(counters[""]["remaining"], 0, "{store}");
        assert_eq!(counters["c1"]["limit"]["name"], "per-user", "{store}");
        assert_eq!(counters[""]["limit"]["max_value"], 5, "{store}");
        let expires = counters["c1"]["expires_in_seconds"]
            .as_u64()
            .expect("seconds");
        assert!(
            (58..=59).contains(&expires),
            "{store}: {expires} s of a window of 60 s"
        );
        assert_eq!(
            sluice.http_get("/counters/nothing-here"),
            (200, "[]".into())
        );
    }
}

#[tokio::test]
async fn limitadors_series_count_calls_by_namespace_and_limit_name() {
    let files = [("config.yaml", CONFIG), ("limits.yaml", LIMITS)];
    let sluice = Sluice::start_with(&files, &["--limit-name-in-labels"], &[]);
    let get = [("req.method", "GET"), ("user_id", "m1")];
    for _ in 0..3 {
        should(&sluice, &get).await;
    }
    let mut kuadrant = Kuadrant::connect(&sluice).await;
    let report = RateLimitRequest {
        hits_addend: 2,
        ..request("lim", vec![descriptor(&[("req.method", "POST")])])
    };
    kuadrant.report(report).await;
    let check = RateLimitRequest {
        hits_addend: 0,
        ..request("lim", vec![descriptor(&[("req.method", "POST")])])
    };
    kuadrant.check(check).await;
    let (_, text) = sluice.http_get("/metrics");
    let of = |series_name: &str| series(&text, series_name);
    assert_eq!(of("limitador_up"), Some(1.0), "{text}");
    assert_eq!(of("datastore_partitioned"), Some(0.0), "{text}");
    // Two admitted GETs (a hit each) and a check (4 of 5 used, one more fits); the
    // report's two hits.
    let ns = "{limitador_namespace=\"lim\"}";
    assert_eq!(of(&format!("authorized_calls{ns}")), Some(3.0), "{text}");
    assert_eq!(of(&format!("authorized_hits{ns}")), Some(4.0), "{text}");
    let limited = "limited_calls{limitador_namespace=\"lim\",limit_name=\"per-user\"}";
    assert_eq!(of(limited), Some(1.0), "{text}");
    assert!(
        of("datastore_latency_count").is_some_and(|n| n >= 5.0),
        "{text}"
    );
    // A report past the limit is counted as hits, never as a limited call.
    let past = RateLimitRequest {
        hits_addend: 10,
        ..request("lim", vec![descriptor(&[("req.method", "POST")])])
    };
    kuadrant.report(past).await;
    let (_, after) = sluice.http_get("/metrics");
    assert_eq!(
        series(&after, &format!("authorized_hits{ns}")),
        Some(14.0),
        "{after}"
    );
    assert_eq!(series(&after, limited), Some(1.0), "{after}");
    assert!(!after.contains("limit_name=\"namespace-wide\""), "{after}");
    // A domain of sluice's own YAML is not a namespace of Limitador's: not counted there.
    let mut client = sluice.client().await;
    call(
        &mut client,
        request("ns", vec![descriptor(&[("user", "x")])]),
    )
    .await;
    let (_, text) = sluice.http_get("/metrics");
    assert!(!text.contains("limitador_namespace=\"ns\""), "{text}");
}
