//! Response headers (`LIMIT_RESPONSE_HEADERS_ENABLED`) and dynamic metadata
//! (`RESPONSE_DYNAMIC_METADATA`), read with Envoy's own generated types.

use crate::support::*;
use envoy_types::pb::google::protobuf::value::Kind;

const CONFIG: &str = r#"
domain: h
descriptors:
  - key: api
    rate_limit: {unit: day, requests_per_unit: 2}
    metadata:
      team: payments
      tier: {name: gold}
  - key: big
    rate_limit: {unit: minute, unit_multiplier: 5, requests_per_unit: 100}
"#;

fn header<'a>(
    response: &'a envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse,
    name: &str,
) -> Option<&'a str> {
    response
        .response_headers_to_add
        .iter()
        .find(|h| h.key.eq_ignore_ascii_case(name))
        .map(|h| h.value.as_str())
}

#[tokio::test]
async fn no_headers_unless_enabled() {
    let sluice = Sluice::start(CONFIG, &[]);
    let mut client = sluice.client().await;
    let response = call(&mut client, request("h", vec![descriptor(&[("api", "a")])])).await;
    assert!(response.response_headers_to_add.is_empty());
    assert!(response.dynamic_metadata.is_none());
}

#[tokio::test]
async fn headers_come_from_the_most_constrained_descriptor() {
    let sluice = Sluice::start_with(
        &[("config.yaml", CONFIG)],
        &[],
        &[("LIMIT_RESPONSE_HEADERS_ENABLED", "true")],
    );
    let mut client = sluice.client().await;
    let both = || {
        request(
            "h",
            vec![descriptor(&[("big", "b")]), descriptor(&[("api", "a")])],
        )
    };
    let first = call(&mut client, both()).await;
    assert_eq!(header(&first, "RateLimit-Limit"), Some("2, 2;w=86400"));
    assert_eq!(header(&first, "RateLimit-Remaining"), Some("1"));
    let reset: u64 = header(&first, "RateLimit-Reset").unwrap().parse().unwrap();
    assert!(reset > 0 && reset <= 86_400);
    assert_eq!(header(&first, "Retry-After"), None);
    call(&mut client, both()).await;
    let over = call(&mut client, both()).await;
    assert_eq!(overall(&over), Code::OverLimit);
    assert_eq!(header(&over, "RateLimit-Remaining"), Some("0"));
    assert_eq!(
        header(&over, "Retry-After"),
        header(&over, "RateLimit-Reset")
    );
    // Alone, the 5-minute limit speaks: w is the whole period.
    let big = call(&mut client, request("h", vec![descriptor(&[("big", "c")])])).await;
    assert_eq!(header(&big, "RateLimit-Limit"), Some("100, 100;w=300"));
}

#[tokio::test]
async fn header_names_are_settable_as_in_the_reference() {
    let envs = [
        ("LIMIT_RESPONSE_HEADERS_ENABLED", "true"),
        ("LIMIT_LIMIT_HEADER", "X-RateLimit-Limit"),
        ("LIMIT_REMAINING_HEADER", "X-RateLimit-Remaining"),
        ("LIMIT_RESET_HEADER", "X-RateLimit-Reset"),
    ];
    let sluice = Sluice::start_with(&[("config.yaml", CONFIG)], &[], &envs);
    let mut client = sluice.client().await;
    let response = call(&mut client, request("h", vec![descriptor(&[("api", "n")])])).await;
    assert_eq!(header(&response, "X-RateLimit-Remaining"), Some("1"));
    assert_eq!(header(&response, "RateLimit-Remaining"), None);
}

#[tokio::test]
async fn dynamic_metadata_describes_the_request_and_the_matched_limits() {
    let sluice = Sluice::start_with(
        &[("config.yaml", CONFIG)],
        &[],
        &[("RESPONSE_DYNAMIC_METADATA", "true")],
    );
    let mut client = sluice.client().await;
    let mut ask = request("h", vec![descriptor(&[("api", "m")])]);
    ask.hits_addend = 1;
    let response = call(&mut client, ask).await;
    let fields = response.dynamic_metadata.expect("dynamic metadata").fields;
    let text = |name: &str| match fields.get(name).and_then(|v| v.kind.clone()) {
        Some(Kind::StringValue(s)) => s,
        other => panic!("{name}: {other:?}"),
    };
    assert_eq!(text("domain"), "h");
    assert_eq!(text("team"), "payments");
    assert!(
        matches!(fields.get("hitsAddend").and_then(|v| v.kind.clone()), Some(Kind::NumberValue(n)) if n == 1.0)
    );
    let Some(Kind::StructValue(tier)) = fields.get("tier").and_then(|v| v.kind.clone()) else {
        panic!("tier")
    };
    assert!(
        matches!(tier.fields.get("name").and_then(|v| v.kind.clone()), Some(Kind::StringValue(s)) if s == "gold")
    );
    let Some(Kind::ListValue(descriptors)) = fields.get("descriptors").and_then(|v| v.kind.clone())
    else {
        panic!("descriptors")
    };
    assert_eq!(descriptors.values.len(), 1);
}

#[tokio::test]
async fn headers_and_metrics_follow_the_binding_limit_of_a_descriptor() {
    let config = r#"
domain: m
descriptors:
  - key: api_key
    rate_limits:
      - {unit: hour, requests_per_unit: 3, name: hourly}
      - {unit: day, requests_per_unit: 100, name: daily}
"#;
    let sluice = Sluice::start_with(
        &[("config.yaml", config)],
        &[],
        &[("LIMIT_RESPONSE_HEADERS_ENABLED", "true")],
    );
    let mut client = sluice.client().await;
    let ask = || request("m", vec![descriptor(&[("api_key", "k")])]);
    let first = call(&mut client, ask()).await;
    assert_eq!(
        header(&first, "RateLimit-Limit"),
        Some("3, 3;w=3600"),
        "the hourly limit binds"
    );
    assert_eq!(header(&first, "RateLimit-Remaining"), Some("2"));
    for _ in 0..3 {
        call(&mut client, ask()).await;
    }
    let (_, metrics) = sluice.http_get("/metrics");
    let count = |name: &str| {
        series(&metrics, &format!(r#"{name}{{domain="m",key1="api_key"}}"#)).unwrap_or(0.0)
    };
    assert_eq!(
        count("ratelimit_service_rate_limit_total_hits"),
        4.0,
        "{metrics}"
    );
    assert_eq!(
        count("ratelimit_service_rate_limit_over_limit"),
        1.0,
        "{metrics}"
    );
    assert_eq!(
        count("ratelimit_service_rate_limit_near_limit"),
        1.0,
        "{metrics}"
    );
    assert_eq!(
        count("ratelimit_service_rate_limit_within_limit"),
        3.0,
        "{metrics}"
    );
}
