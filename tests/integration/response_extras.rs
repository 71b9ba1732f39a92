//! Response headers (`LIMIT_RESPONSE_HEADERS_ENABLED`) and dynamic metadata
//! (`RESPONSE_DYNAMIC_METADATA`), read with Envoy's own generated types.

use crate::support::*;
use envoy_types::pb::google::protobuf::value::Kind;

const CONFIG: &str = include_str!("../fixtures/cases/response_extras/config.yaml");

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

/// Seconds until the end of the current UTC day, as the reference's `RateLimit-Reset` of a
/// daily limit (one second either way, for a call across a second's boundary).
fn seconds_to_end_of_day() -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    86_400 - now % 86_400
}

#[tokio::test]
async fn headers_describe_the_descriptor_the_reference_picks_in_its_form() {
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
    // The least remaining: api (1 left of 2) rather than big (99 of 100).
    let first = call(&mut client, both()).await;
    assert_eq!(header(&first, "RateLimit-Limit"), Some("2"));
    assert_eq!(header(&first, "RateLimit-Remaining"), Some("1"));
    let reset: u64 = header(&first, "RateLimit-Reset").unwrap().parse().unwrap();
    assert!(seconds_to_end_of_day().abs_diff(reset) <= 1, "{reset}");
    assert_eq!(header(&first, "Retry-After"), None);
    call(&mut client, both()).await;
    let over = call(&mut client, both()).await;
    assert_eq!(overall(&over), Code::OverLimit);
    assert_eq!(header(&over, "RateLimit-Limit"), Some("2"));
    assert_eq!(header(&over, "RateLimit-Remaining"), Some("0"));
    // sluice's addition: Retry-After on a denial, the same seconds as RateLimit-Reset.
    assert_eq!(
        header(&over, "Retry-After"),
        header(&over, "RateLimit-Reset")
    );
    // A denial speaks even when another descriptor has as little left: of two denied
    // descriptors, the last one.
    let big = call(&mut client, request("h", vec![descriptor(&[("big", "c")])])).await;
    assert_eq!(header(&big, "RateLimit-Limit"), Some("100"));
    let ties = request(
        "h",
        vec![
            descriptor(&[("api", "a")]),
            descriptor(&[("big", "d")]),
            descriptor(&[("api", "a")]),
        ],
    );
    let denied_twice = call(&mut client, ties).await;
    assert_eq!(header(&denied_twice, "RateLimit-Limit"), Some("2"));
}

#[tokio::test]
async fn the_quota_policy_form_is_an_opt_in() {
    let sluice = Sluice::start_with(
        &[("config.yaml", CONFIG)],
        &[],
        &[
            ("LIMIT_RESPONSE_HEADERS_ENABLED", "true"),
            ("SLUICE_RESPONSE_HEADERS_FORM", "quota-policy"),
        ],
    );
    let mut client = sluice.client().await;
    let api = call(&mut client, request("h", vec![descriptor(&[("api", "a")])])).await;
    assert_eq!(header(&api, "RateLimit-Limit"), Some("2, 2;w=86400"));
    // w is the whole period: 5 minutes.
    let big = call(&mut client, request("h", vec![descriptor(&[("big", "c")])])).await;
    assert_eq!(header(&big, "RateLimit-Limit"), Some("100, 100;w=300"));
    // A named limit names itself in its policy (a `"` written `'`), as Limitador does.
    let named = call(
        &mut client,
        request("h", vec![descriptor(&[("named", "n")])]),
    )
    .await;
    assert_eq!(
        header(&named, "RateLimit-Limit"),
        Some("7, 7;w=3600;name=\"per 'team'\"")
    );
    // A concurrency limit has no window: leases in flight, with no policy.
    let jobs = call(
        &mut client,
        request("h", vec![descriptor(&[("jobs", "j")])]),
    )
    .await;
    assert_eq!(header(&jobs, "RateLimit-Limit"), Some("3"));
    assert_eq!(header(&jobs, "RateLimit-Remaining"), Some("2"));
}

#[tokio::test]
async fn a_quota_mode_or_shadow_mode_denial_does_not_pick_the_headers() {
    let config = include_str!("../fixtures/cases/response_extras/a_quota_mode_or_shadow_mode_denial_does_not_pick_the_headers.yaml");
    let sluice = Sluice::start_with(
        &[("config.yaml", config)],
        &[],
        &[("LIMIT_RESPONSE_HEADERS_ENABLED", "true")],
    );
    let mut client = sluice.client().await;
    let ask = || {
        request(
            "q",
            vec![
                descriptor(&[("roomy", "r")]),
                descriptor(&[("quota", "q")]),
                descriptor(&[("shadow", "s")]),
            ],
        )
    };
    call(&mut client, ask()).await;
    let second = call(&mut client, ask()).await;
    // The quota descriptor is over (0 left) but does not force its way in: it is the first
    // with the least remaining, so it is described, as in the reference.
    assert_eq!(header(&second, "RateLimit-Limit"), Some("1"));
    assert_eq!(header(&second, "RateLimit-Remaining"), Some("0"));
    assert_eq!(
        overall(&second),
        Code::OverLimit,
        "every quota descriptor is over"
    );
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

/// The dynamic metadata of a response as JSON, to compare whole.
fn metadata_json(response: &RateLimitResponse) -> serde_json::Value {
    fn value(v: &envoy_types::pb::google::protobuf::Value) -> serde_json::Value {
        match &v.kind {
            Some(Kind::StringValue(s)) => serde_json::json!(s),
            Some(Kind::NumberValue(n)) => serde_json::json!(n),
            Some(Kind::BoolValue(b)) => serde_json::json!(b),
            Some(Kind::StructValue(s)) => object(s),
            Some(Kind::ListValue(l)) => l.values.iter().map(value).collect(),
            Some(Kind::NullValue(_)) | None => serde_json::Value::Null,
        }
    }
    fn object(s: &envoy_types::pb::google::protobuf::Struct) -> serde_json::Value {
        s.fields
            .iter()
            .map(|(k, v)| (k.clone(), value(v)))
            .collect()
    }
    object(
        response
            .dynamic_metadata
            .as_ref()
            .expect("dynamic metadata"),
    )
}

const METADATA_CONFIG: &str =
    include_str!("../fixtures/cases/response_extras/metadata_config.yaml");

#[tokio::test]
async fn dynamic_metadata_has_the_reference_shape_and_only_passed_descriptors_metadata() {
    let sluice = Sluice::start_with(
        &[("config.yaml", METADATA_CONFIG)],
        &[],
        &[("RESPONSE_DYNAMIC_METADATA", "true")],
    );
    let mut client = sluice.client().await;
    let ask = |hits_addend: u32| {
        let mut ask = request(
            "h",
            vec![descriptor(&[("api", "m")]), descriptor(&[("other", "o")])],
        );
        ask.hits_addend = hits_addend;
        ask
    };
    // Both pass: the first value of a name wins, maps merge name by name.
    let first = call(&mut client, ask(0)).await;
    assert_eq!(
        metadata_json(&first),
        serde_json::json!({
            "domain": "h",
            "descriptors": [{"entries": ["api=m"]}, {"entries": ["other=o"]}],
            "metadata": {"team": "payments", "region": "eu", "tier": {"name": "gold", "level": 2.0}},
        })
    );
    // `other` is denied: its metadata is left out; hitsAddend appears once set.
    let second = call(&mut client, ask(1)).await;
    assert_eq!(
        metadata_json(&second),
        serde_json::json!({
            "domain": "h",
            "descriptors": [{"entries": ["api=m"]}, {"entries": ["other=o"]}],
            "hitsAddend": 1.0,
            "metadata": {"team": "payments", "tier": {"name": "gold"}},
        })
    );
    // Every descriptor denied: no metadata at all.
    let denied = call_one(&mut client, "h", &[("other", "o")]).await;
    assert_eq!(
        metadata_json(&denied),
        serde_json::json!({"domain": "h", "descriptors": [{"entries": ["other=o"]}]})
    );
    // A descriptor's own limit override and hits_addend are described with it.
    let mut overridden = descriptor_with_hits(&[("other", "o")], 3);
    overridden.limit = descriptor_with_limit(&[], 7, Unit::Minute as i32).limit;
    let described = call(&mut client, request("h", vec![overridden])).await;
    assert_eq!(
        metadata_json(&described)["descriptors"],
        serde_json::json!([{"entries": ["other=o"], "limit": "requests_per_unit:7 unit:MINUTE", "hitsAddend": 3.0}])
    );
}

#[tokio::test]
async fn json_answers_carry_the_same_dynamic_metadata() {
    let sluice = Sluice::start_with(
        &[("config.yaml", METADATA_CONFIG)],
        &[],
        &[("RESPONSE_DYNAMIC_METADATA", "true")],
    );
    let (status, body) = sluice.http_post(
        "/json",
        r#"{"domain": "h", "descriptors": [{"entries": [{"key": "api", "value": "j"}]}]}"#,
    );
    assert_eq!(status, 200, "{body}");
    let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        answer["dynamicMetadata"],
        serde_json::json!({
            "domain": "h",
            "descriptors": [{"entries": ["api=j"]}],
            "metadata": {"team": "payments", "tier": {"name": "gold"}},
        })
    );
}

#[tokio::test]
async fn headers_and_metrics_follow_the_binding_limit_of_a_descriptor() {
    let config = include_str!("../fixtures/cases/response_extras/headers_and_metrics_follow_the_binding_limit_of_a_descriptor.yaml");
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
        Some("3"),
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
