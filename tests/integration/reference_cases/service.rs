//! `test/service/ratelimit_test.go`, the cases that need the binary: reloads, metadata
//! through the wire, health and store failures. Its decision and header cases (overall code
//! from the statuses, shadow and quota modes, unlimited, replaces, rate limit headers) are rows
//! of the in-process table (`rules.rs`, `SERVICE_CASES`), run on every store.

use super::*;
use std::time::Duration;

const CONFIG: &str = include_str!("../../fixtures/cases/reference_cases_service/config.yaml");

/// Sends `descriptors` (entries) as one request in `test-domain`.
async fn ask(s: &Sluice, descriptors: &[&[(&str, &str)]]) -> RateLimitResponse {
    let mut client = s.client().await;
    let descriptors = descriptors
        .iter()
        .map(|entries| descriptor(entries))
        .collect();
    call(&mut client, request("test-domain", descriptors)).await
}

/// The codes of a response: overall, then each status.
fn codes(response: &RateLimitResponse) -> (Code, Vec<Code>) {
    (
        overall(response),
        response.statuses.iter().map(code).collect(),
    )
}

#[tokio::test]
async fn test_service() {
    for on in on_both_stores(&[("config.yaml", CONFIG)], &[], &[]) {
        let s = &on.sluice;
        // The case spans one minute window of `one`: it starts early in one.
        clear_of_a_windows_end(Duration::from_secs(60), Duration::from_secs(20)).await;
        let first = ask(s, &[&[("hello", "world")]]).await;
        assert_eq!(codes(&first), (Code::Ok, vec![Code::Ok]), "{}", on.store);
        assert_eq!(first.statuses[0].current_limit, None);
        assert_eq!(first.statuses[0].limit_remaining, 0);
        ask(s, &[&[("one", "a")]]).await;
        let over = ask(s, &[&[("one", "a")], &[("hello", "world")]]).await;
        assert_eq!(
            codes(&over),
            (Code::OverLimit, vec![Code::OverLimit, Code::Ok])
        );
        let limit = over.statuses[0].current_limit.clone().expect("the limit");
        assert_eq!(
            (limit.requests_per_unit, limit.name.as_str()),
            (1, "key_name")
        );
        assert_eq!(over.statuses[0].limit_remaining, 0);
        // A config that fails to load leaves the last good one serving; order does not matter.
        std::fs::write(s.config_dir.path().join("config.yaml"), "domain: [broken\n").unwrap();
        assert!(s.wait_for_log("config refused"), "{}", s.log());
        let again = ask(s, &[&[("hello", "world")], &[("one", "a")]]).await;
        assert_eq!(
            codes(&again),
            (Code::OverLimit, vec![Code::Ok, Code::OverLimit])
        );
        assert_eq!(counter(s, "ratelimit_service_config_load_success", ""), 1.0);
        assert!(counter(s, "ratelimit_service_config_load_error", "") >= 1.0);
        assert_eq!(counter(s, "ratelimit_service_global_shadow_mode", ""), 0.0);
        let calls = r#"{grpc_method="ShouldRateLimit"}"#;
        assert_eq!(counter(s, "ratelimit_service_total_requests", calls), 4.0);
        assert_eq!(
            counter(s, "ratelimit_service_response_time_seconds_count", calls),
            4.0
        );
    }
}

#[tokio::test]
async fn test_empty_domain() {
    // The reference answers an error (gRPC UNKNOWN); sluice says which field is wrong.
    let sluice = Sluice::start(CONFIG, &[]);
    let mut client = sluice.client().await;
    let error = client
        .should_rate_limit(request("", vec![descriptor(&[("one", "a")])]))
        .await
        .expect_err("refused");
    assert_eq!(error.code(), tonic::Code::InvalidArgument);
    assert!(error.message().contains("domain"), "{}", error.message());
    assert_eq!(
        counter(
            &sluice,
            "ratelimit_service_should_rate_limit_error",
            r#"{err_type="service_error"}"#
        ),
        1.0
    );
}

#[tokio::test]
async fn test_empty_descriptors() {
    let sluice = Sluice::start(CONFIG, &[]);
    let mut client = sluice.client().await;
    let error = client
        .should_rate_limit(request("test-domain", vec![]))
        .await
        .expect_err("refused");
    assert_eq!(error.code(), tonic::Code::InvalidArgument);
    assert!(
        error.message().contains("descriptors"),
        "{}",
        error.message()
    );
}

#[tokio::test]
async fn test_cache_error() {
    let (mut redis, sluice) = Sluice::on_own_redis(
        &[("config.yaml", CONFIG)],
        &["--redis-command-timeout", "300ms"],
        &[],
    );
    redis.stop();
    let mut client = sluice.client().await;
    let error = client
        .should_rate_limit(request("test-domain", vec![descriptor(&[("ten", "x")])]))
        .await
        .expect_err("the store failed");
    assert_eq!(error.code(), tonic::Code::Unavailable);
    assert_eq!(
        counter(
            &sluice,
            "ratelimit_service_should_rate_limit_error",
            r#"{err_type="redis_error"}"#
        ),
        1.0
    );
}

#[tokio::test]
async fn test_initial_load_error() {
    // The reference starts and fails every call; sluice refuses to start, unless asked to
    // start without a config.
    let broken = [("config.yaml", "domain: [broken\n")];
    let (loaded, text) = check_config(&broken, &[]);
    assert!(!loaded, "{text}");
    let sluice = Sluice::start_with(
        &broken,
        &[],
        &[("FORCE_START_WITHOUT_INITIAL_CONFIG", "true")],
    );
    let response = ask(&sluice, &[&[("one", "a")]]).await;
    assert_eq!(codes(&response), (Code::Ok, vec![Code::Ok]));
    assert_eq!(response.statuses[0].current_limit, None);
    assert_eq!(
        counter(&sluice, "ratelimit_service_config_load_error", ""),
        1.0
    );
}

#[tokio::test]
async fn test_service_health_status() {
    use tonic_health::pb::health_check_response::ServingStatus;
    let sluice = Sluice::start(CONFIG, &[]);
    assert_eq!(sluice.grpc_health().await, ServingStatus::Serving as i32);
    assert_eq!(sluice.http_get("/healthcheck").0, 200);
    // Draining, as on SIGTERM (with a delay to observe it), reports NOT_SERVING.
    let mut draining = Sluice::start_with(
        &[("config.yaml", CONFIG)],
        &["--shutdown-drain-delay", "2s"],
        &[],
    );
    let channel = draining.channel().await;
    draining.begin_shutdown();
    // Within the drain delay: polled on the connection opened before the signal.
    let mut status = grpc_health_on(channel.clone()).await;
    for _ in 0..30 {
        if status == ServingStatus::NotServing as i32 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        status = grpc_health_on(channel.clone()).await;
    }
    assert_eq!(status, ServingStatus::NotServing as i32);
    assert_eq!(draining.http_get("/healthcheck").0, 500);
}

#[tokio::test]
async fn test_service_health_status_at_least_one_config_loaded() {
    use tonic_health::pb::health_check_response::ServingStatus;
    let envs = [("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "true")];
    let empty = Sluice::start_with(&[], &[], &envs);
    let not_serving = (ServingStatus::NotServing as i32, 500);
    assert!(empty.wait_health(not_serving).await, "{}", empty.log());
    let loaded = Sluice::start_with(&[("config.yaml", CONFIG)], &[], &envs);
    let serving = (ServingStatus::Serving as i32, 200);
    assert!(loaded.wait_health(serving).await, "{}", loaded.log());
}

/// The dynamic metadata's `metadata` field as JSON (`null` when absent).
fn passed_metadata(response: &RateLimitResponse) -> serde_json::Value {
    use envoy_types::pb::google::protobuf::value::Kind;
    let Some(fields) = &response.dynamic_metadata else {
        return serde_json::Value::Null;
    };
    match fields.fields.get("metadata").and_then(|v| v.kind.clone()) {
        Some(Kind::StructValue(s)) => s
            .fields
            .iter()
            .map(|(k, v)| match &v.kind {
                Some(Kind::StringValue(text)) => (k.clone(), serde_json::json!(text)),
                other => (k.clone(), serde_json::json!(format!("{other:?}"))),
            })
            .collect(),
        _ => serde_json::Value::Null,
    }
}

const METADATA_CONFIG: &str =
    include_str!("../../fixtures/cases/reference_cases_service/metadata_config.yaml");

#[tokio::test]
async fn test_metadata_returned_for_passed_descriptors() {
    let envs = [("RESPONSE_DYNAMIC_METADATA", "true")];
    for on in on_both_stores(&[("config.yaml", METADATA_CONFIG)], &[], &envs) {
        let s = &on.sluice;
        ask(s, &[&[("a", "x")]]).await;
        let response = ask(s, &[&[("a", "x")], &[("b", "x")]]).await;
        assert_eq!(
            passed_metadata(&response),
            serde_json::json!({"from": "b", "only_b": "yes"}),
            "{}",
            on.store
        );
    }
}

#[tokio::test]
async fn test_metadata_returned_for_all_passed_descriptors() {
    let envs = [("RESPONSE_DYNAMIC_METADATA", "true")];
    for on in on_both_stores(&[("config.yaml", METADATA_CONFIG)], &[], &envs) {
        let s = &on.sluice;
        let response = ask(s, &[&[("b", "y")], &[("a", "y")]]).await;
        assert_eq!(
            passed_metadata(&response),
            serde_json::json!({"from": "b", "only_a": "yes", "only_b": "yes"}),
            "{}",
            on.store
        );
    }
}

#[tokio::test]
async fn test_overlapping_metadata_returns_the_first_value() {
    let envs = [("RESPONSE_DYNAMIC_METADATA", "true")];
    for on in on_both_stores(&[("config.yaml", METADATA_CONFIG)], &[], &envs) {
        let s = &on.sluice;
        let response = ask(s, &[&[("a", "z")], &[("b", "z")]]).await;
        assert_eq!(passed_metadata(&response)["from"], "a", "{}", on.store);
    }
}
