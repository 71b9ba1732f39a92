//! OpenTelemetry traces (`TRACING_ENABLED`), received by an OTLP collector run inside the test
//! (the trace service of the `opentelemetry-proto` definitions, over gRPC; and its HTTP form):
//! a call joins its caller's trace (W3C or B3), the store call is its child, sampling follows
//! the ratio for root calls and the caller's flag otherwise, and a collector that hangs costs
//! the calls nothing while dropped spans are counted.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

use crate::support::redis::RedisServer;
use crate::support::*;

const CONFIG: &str =
    "domain: t\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 1}\n";
const SERVER_SPAN: &str = "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN_ID: &str = "00f067aa0ba902b7";

/// What the collector received, and the resource attributes of the first export.
#[derive(Clone, Default)]
struct Received {
    spans: Arc<Mutex<Vec<Span>>>,
    resource: Arc<Mutex<Vec<(String, String)>>>,
}

impl Received {
    fn take(&self, request: ExportTraceServiceRequest) {
        for resource_spans in request.resource_spans {
            if let Some(resource) = resource_spans.resource {
                let mut known = self.resource.lock().unwrap();
                if known.is_empty() {
                    *known = resource
                        .attributes
                        .iter()
                        .map(|kv| (kv.key.clone(), text(kv.value.as_ref())))
                        .collect();
                }
            }
            for scope in resource_spans.scope_spans {
                self.spans.lock().unwrap().extend(scope.spans);
            }
        }
    }

    /// The spans received so far named `name`.
    fn named(&self, name: &str) -> Vec<Span> {
        let spans = self.spans.lock().unwrap();
        spans.iter().filter(|s| s.name == name).cloned().collect()
    }

    /// Waits until `count` spans named `name` have arrived (up to 10 s), and returns them.
    async fn wait_for(&self, name: &str, count: usize) -> Vec<Span> {
        self.wait_for_spans(|s| s.name == name, count).await
    }

    /// Waits until `count` spans that `matches` have arrived (up to 10 s), and returns them.
    async fn wait_for_spans(&self, matches: impl Fn(&Span) -> bool, count: usize) -> Vec<Span> {
        let started = Instant::now();
        loop {
            let found: Vec<Span> = {
                let spans = self.spans.lock().unwrap();
                spans.iter().filter(|s| matches(s)).cloned().collect()
            };
            if found.len() >= count || started.elapsed() > Duration::from_secs(10) {
                return found;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

#[tonic::async_trait]
impl TraceService for Received {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.take(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// An OTLP/gRPC collector on a free port; its address and what it receives.
async fn grpc_collector() -> (String, Received) {
    let received = Received::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(received.clone()))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    (endpoint, received)
}

/// An OTLP/HTTP collector (protobuf bodies on `/v1/traces`) on a free port.
async fn http_collector() -> (String, Received) {
    let received = Received::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let sink = received.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: axum::body::Bytes| {
            let sink = sink.clone();
            async move {
                match ExportTraceServiceRequest::decode(body) {
                    Ok(request) => {
                        sink.take(request);
                        (
                            axum::http::StatusCode::OK,
                            ExportTraceServiceResponse::default().encode_to_vec(),
                        )
                    }
                    Err(_) => (axum::http::StatusCode::BAD_REQUEST, Vec::new()),
                }
            }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    (endpoint, received)
}

/// sluice with tracing on towards `endpoint` over `protocol`, exporting every 50 ms, with
/// `more` variables.
fn traced_sluice(protocol: &str, endpoint: &str, args: &[&str], more: &[(&str, &str)]) -> Sluice {
    let mut envs = vec![
        ("TRACING_ENABLED", "true"),
        ("TRACING_EXPORTER_PROTOCOL", protocol),
        ("TRACING_SERVICE_NAME", "rate-limit-test"),
        ("TRACING_SERVICE_NAMESPACE", "gateway"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint),
        ("OTEL_BSP_SCHEDULE_DELAY", "50"),
    ];
    envs.extend_from_slice(more);
    Sluice::process_with(&[("config.yaml", CONFIG)], args, &envs)
}

/// A request for `user` carrying the request headers `headers`.
fn with_headers(user: &str, headers: &[(&'static str, &str)]) -> tonic::Request<RateLimitRequest> {
    let mut request = tonic::Request::new(request("t", vec![descriptor(&[("user", user)])]));
    for (name, value) in headers {
        request
            .metadata_mut()
            .insert(*name, value.parse().expect("an ASCII header value"));
    }
    request
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn text(value: Option<&opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
    match value.and_then(|v| v.value.as_ref()) {
        Some(Value::StringValue(s)) => s.clone(),
        Some(Value::IntValue(i)) => i.to_string(),
        Some(Value::BoolValue(b)) => b.to_string(),
        Some(Value::DoubleValue(d)) => d.to_string(),
        _ => String::new(),
    }
}

/// The attribute `key` of `span`, as text.
fn attribute(span: &Span, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .map(|kv| text(kv.value.as_ref()))
}

/// The only span named `name` whose parent is `parent`.
fn child_of(received: &Received, name: &str, parent: &Span) -> Span {
    let children: Vec<Span> = received
        .named(name)
        .into_iter()
        .filter(|s| s.parent_span_id == parent.span_id)
        .collect();
    assert_eq!(children.len(), 1, "one {name} span beneath the call");
    children.into_iter().next().unwrap()
}

#[tokio::test]
async fn a_call_with_traceparent_is_a_child_span_with_the_store_call_beneath_it() {
    let (endpoint, received) = grpc_collector().await;
    let sluice = traced_sluice("grpc", &endpoint, &[], &[]);
    let mut client = sluice.client().await;
    let traceparent = format!("00-{TRACE_ID}-{CALLER_SPAN_ID}-01");
    for _ in 0..2 {
        let request = with_headers("alice", &[("traceparent", &traceparent)]);
        client.should_rate_limit(request).await.unwrap();
    }
    let calls = received.wait_for(SERVER_SPAN, 2).await;
    assert_eq!(calls.len(), 2, "{:?}", received.spans.lock().unwrap());
    for call in &calls {
        assert_eq!(hex(&call.trace_id), TRACE_ID);
        assert_eq!(hex(&call.parent_span_id), CALLER_SPAN_ID);
        assert_eq!(call.kind, SpanKind::Server as i32);
        assert_eq!(attribute(call, "ratelimit.domain").as_deref(), Some("t"));
        assert_eq!(
            attribute(call, "ratelimit.descriptors").as_deref(),
            Some("1")
        );
        assert_eq!(attribute(call, "rpc.system").as_deref(), Some("grpc"));
        let store = child_of(&received, "sluice.store.charge", call);
        assert_eq!(hex(&store.trace_id), TRACE_ID);
        assert_eq!(attribute(&store, "sluice.store").as_deref(), Some("memory"));
        assert_eq!(attribute(&store, "sluice.store.hits").as_deref(), Some("1"));
    }
    // The first is within its limit of 1 an hour, the second over it: the span says which.
    let codes: Vec<Option<String>> = calls
        .iter()
        .map(|c| attribute(c, "ratelimit.overall_code"))
        .collect();
    assert!(codes.contains(&Some("OK".into())), "{codes:?}");
    assert!(codes.contains(&Some("OVER_LIMIT".into())), "{codes:?}");
    let denied = calls
        .iter()
        .find(|c| attribute(c, "ratelimit.overall_code").as_deref() == Some("OVER_LIMIT"))
        .unwrap();
    assert_eq!(
        attribute(denied, "ratelimit.denied.descriptor").as_deref(),
        Some("user=alice")
    );
    assert_eq!(
        attribute(denied, "ratelimit.denied.index").as_deref(),
        Some("0")
    );
    assert_eq!(
        attribute(denied, "ratelimit.denied.limit").as_deref(),
        Some("1/hour")
    );
    let resource = received.resource.lock().unwrap().clone();
    assert!(resource.contains(&("service.name".into(), "rate-limit-test".into())));
    assert!(resource.contains(&("service.namespace".into(), "gateway".into())));
    assert!(resource
        .iter()
        .any(|(k, v)| k == "service.instance.id" && v.len() == 36));
}

#[tokio::test]
async fn b3_headers_join_the_callers_zipkin_trace() {
    let (endpoint, received) = grpc_collector().await;
    let sluice = traced_sluice("grpc", &endpoint, &[], &[]);
    let mut client = sluice.client().await;
    let multi = [
        ("x-b3-traceid", TRACE_ID),
        ("x-b3-spanid", CALLER_SPAN_ID),
        ("x-b3-sampled", "1"),
    ];
    client
        .should_rate_limit(with_headers("bob", &multi))
        .await
        .unwrap();
    let single_trace = "80f198ee56343ba864fe8b2a57d3eff7";
    let single = format!("{single_trace}-e457b5a2e4d86bd1-1");
    client
        .should_rate_limit(with_headers("carol", &[("b3", &single)]))
        .await
        .unwrap();
    let calls = received.wait_for(SERVER_SPAN, 2).await;
    let parents: Vec<(String, String)> = calls
        .iter()
        .map(|c| (hex(&c.trace_id), hex(&c.parent_span_id)))
        .collect();
    assert!(
        parents.contains(&(TRACE_ID.into(), CALLER_SPAN_ID.into())),
        "{parents:?}"
    );
    assert!(
        parents.contains(&(single_trace.into(), "e457b5a2e4d86bd1".into())),
        "{parents:?}"
    );
}

#[tokio::test]
async fn the_redis_round_trip_is_a_child_of_the_store_call() {
    let redis = RedisServer::start(&[]);
    let (endpoint, received) = grpc_collector().await;
    let url = redis.url();
    let sluice = traced_sluice(
        "grpc",
        &endpoint,
        &["--store", "redis", "--redis-url", &url],
        &[],
    );
    let mut client = sluice.client().await;
    let two = request(
        "t",
        vec![
            descriptor(&[("user", "dan")]),
            descriptor(&[("user", "erin")]),
        ],
    );
    client.should_rate_limit(two).await.unwrap();
    let call = received.wait_for(SERVER_SPAN, 1).await.remove(0);
    let store = child_of(&received, "sluice.store.charge", &call);
    assert_eq!(attribute(&store, "sluice.store").as_deref(), Some("redis"));
    // Redis 7 runs the scripts as a function (FCALL); older ones with EVALSHA.
    let beneath = |s: &Span| s.parent_span_id == store.span_id;
    let round_trips = received.wait_for_spans(beneath, 1).await;
    assert_eq!(round_trips.len(), 1, "one round trip for the request");
    let round_trip = &round_trips[0];
    assert!(matches!(round_trip.name.as_str(), "EVALSHA" | "FCALL"));
    assert_eq!(round_trip.kind, SpanKind::Client as i32);
    assert_eq!(attribute(round_trip, "db.system").as_deref(), Some("redis"));
    // Both descriptors' scripts in one call: one round trip for the request.
    assert_eq!(
        attribute(round_trip, "sluice.redis.scripts").as_deref(),
        Some("2")
    );
}

#[tokio::test]
async fn the_ratio_samples_root_calls_and_the_caller_decides_for_its_own() {
    let (endpoint, received) = grpc_collector().await;
    let sluice = traced_sluice("grpc", &endpoint, &[], &[("TRACING_SAMPLING_RATE", "0.1")]);
    let mut client = sluice.client().await;
    for i in 0..2000 {
        let request = with_headers(&format!("u{i}"), &[]);
        client.should_rate_limit(request).await.unwrap();
    }
    // A sampled caller's calls are all kept, an unsampled caller's none, whatever the ratio.
    for (i, flags) in ["01", "00"].iter().cycle().take(100).enumerate() {
        let parent = format!("00-{TRACE_ID}-{CALLER_SPAN_ID}-{flags}");
        let request = with_headers(&format!("p{i}"), &[("traceparent", &parent)]);
        client.should_rate_limit(request).await.unwrap();
    }
    // Wait for the 50 sampled children and whatever roots were kept, then a little more.
    received.wait_for(SERVER_SPAN, 250).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let calls = received.named(SERVER_SPAN);
    let (children, roots): (Vec<&Span>, Vec<&Span>) =
        calls.iter().partition(|s| hex(&s.trace_id) == TRACE_ID);
    assert_eq!(children.len(), 50, "every call of the sampled caller");
    // 2,000 roots at 0.1: 200 expected, with a standard deviation of 13.4.
    assert!(
        (130..=270).contains(&roots.len()),
        "{} of 2000 root calls kept at 0.1",
        roots.len()
    );
}

#[tokio::test]
async fn the_http_exporter_reaches_an_otlp_http_collector() {
    let (endpoint, received) = http_collector().await;
    let sluice = traced_sluice("http", &endpoint, &[], &[]);
    let mut client = sluice.client().await;
    let traceparent = format!("00-{TRACE_ID}-{CALLER_SPAN_ID}-01");
    client
        .should_rate_limit(with_headers("fay", &[("traceparent", &traceparent)]))
        .await
        .unwrap();
    let calls = received.wait_for(SERVER_SPAN, 1).await;
    assert_eq!(calls.len(), 1);
    assert_eq!(hex(&calls[0].parent_span_id), CALLER_SPAN_ID);
}

#[tokio::test]
async fn a_hung_collector_costs_the_calls_nothing_and_drops_are_counted() {
    // A collector that accepts connections and never answers: every export waits for its
    // timeout while the calls go on.
    let hung = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", hung.local_addr().unwrap());
    let held = Arc::new(Mutex::new(Vec::new()));
    let holder = held.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = hung.accept().await {
            holder.lock().unwrap().push(stream);
        }
    });
    let sluice = traced_sluice(
        "grpc",
        &endpoint,
        &["--tracing-max-queue-size", "100"],
        &[("OTEL_EXPORTER_OTLP_TIMEOUT", "5000")],
    );
    let mut client = sluice.client().await;
    let mut slowest = Duration::ZERO;
    for i in 0..2000 {
        let started = Instant::now();
        let response = client
            .should_rate_limit(with_headers(&format!("h{i}"), &[]))
            .await
            .unwrap();
        slowest = slowest.max(started.elapsed());
        assert_eq!(overall(response.get_ref()), Code::Ok);
    }
    // A call that waited for the collector would take its 5 s timeout.
    assert!(
        slowest < Duration::from_secs(1),
        "the slowest call took {slowest:?}"
    );
    let (_, metrics) = sluice.http_get("/metrics");
    let dropped = series(
        &metrics,
        "sluice_trace_spans_dropped_total{reason=\"queue_full\"}",
    );
    // Two spans a call, at most 100 waiting: nearly all of the 4,000 are dropped, counted.
    assert!(
        dropped.is_some_and(|d| d >= 3000.0),
        "dropped: {dropped:?}\n{metrics}"
    );
}

#[tokio::test]
async fn a_stopped_collector_loses_the_spans_counted_and_nothing_else() {
    // A port nothing listens on: every export is refused.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let sluice = traced_sluice("grpc", &endpoint, &[], &[]);
    let mut client = sluice.client().await;
    for i in 0..200 {
        let response = client
            .should_rate_limit(with_headers(&format!("s{i}"), &[]))
            .await
            .unwrap();
        assert_eq!(overall(response.get_ref()), Code::Ok);
    }
    let started = Instant::now();
    let failed = loop {
        let (_, metrics) = sluice.http_get("/metrics");
        let failed = series(
            &metrics,
            "sluice_trace_spans_dropped_total{reason=\"export_failed\"}",
        );
        if failed.is_some_and(|f| f >= 400.0) || started.elapsed() > Duration::from_secs(10) {
            break failed;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(failed, Some(400.0), "two spans a call, all refused");
    assert!(
        sluice.wait_for_log("cannot export spans"),
        "{}",
        sluice.log()
    );
}

#[tokio::test]
async fn with_the_default_schedule_the_first_export_comes_one_delay_after_start_not_two() {
    let (endpoint, received) = grpc_collector().await;
    let started = Instant::now();
    let envs = [
        ("TRACING_ENABLED", "true"),
        ("TRACING_EXPORTER_PROTOCOL", "grpc"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
    ];
    let sluice = Sluice::process_with(&[("config.yaml", CONFIG)], &[], &envs);
    let mut client = sluice.client().await;
    // A call 2 s after start, as an operator's first traffic: with OTEL_BSP_SCHEDULE_DELAY at
    // its default of 5 s its span leaves 5 s after start (the SDK alone sent it at 10 s).
    tokio::time::sleep_until((started + Duration::from_secs(2)).into()).await;
    client
        .should_rate_limit(with_headers("gil", &[]))
        .await
        .unwrap();
    assert!(
        received.named(SERVER_SPAN).is_empty(),
        "not before the schedule"
    );
    let spans = received.wait_for(SERVER_SPAN, 1).await;
    let arrived = started.elapsed();
    assert_eq!(spans.len(), 1, "exported within 12 s of start");
    assert!(
        arrived >= Duration::from_millis(4_900) && arrived < Duration::from_secs(9),
        "the first export came {arrived:?} after start; the schedule says 5 s"
    );
}
