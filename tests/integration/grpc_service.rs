//! ShouldRateLimit through the real binary, called with Envoy's own generated client.

use crate::support::*;
use tonic::Code as GrpcCode;

const CONFIG: &str = include_str!("../fixtures/cases/grpc_service/config.yaml");

fn server() -> Sluice {
    Sluice::start(CONFIG, &[])
}

#[tokio::test]
async fn a_limit_of_n_admits_exactly_n_then_over_limit() {
    let sluice = server();
    let mut client = sluice.client().await;
    for expected_remaining in [2, 1, 0] {
        let response = call_one(&mut client, "test", &[("counted", "a")]).await;
        assert_eq!(overall(&response), Code::Ok);
        let status = &response.statuses[0];
        assert_eq!(code(status), Code::Ok);
        assert_eq!(status.limit_remaining, expected_remaining);
        let limit = status.current_limit.as_ref().expect("current_limit");
        assert_eq!((limit.requests_per_unit, limit.unit), (3, Unit::Day as i32));
        let reset = status.duration_until_reset.expect("duration_until_reset");
        assert!(reset.seconds > 0 && reset.seconds <= 86_400, "{reset:?}");
    }
    let response = call_one(&mut client, "test", &[("counted", "a")]).await;
    assert_eq!(overall(&response), Code::OverLimit);
    assert_eq!(code(&response.statuses[0]), Code::OverLimit);
    assert_eq!(response.statuses[0].limit_remaining, 0);
    // Another value of the same key has its own counter.
    let response = call_one(&mut client, "test", &[("counted", "b")]).await;
    assert_eq!(response.statuses[0].limit_remaining, 2);
}

#[tokio::test]
async fn nested_descriptors_match_the_last_entry_without_parent_fallback() {
    let sluice = server();
    let mut client = sluice.client().await;
    let inner = call(
        &mut client,
        request(
            "test",
            vec![descriptor(&[("nested", "outer"), ("inner", "x")])],
        ),
    )
    .await;
    let limit = inner.statuses[0]
        .current_limit
        .as_ref()
        .expect("default inner limit");
    assert_eq!(limit.requests_per_unit, 2);
    let special = call(
        &mut client,
        request(
            "test",
            vec![descriptor(&[("nested", "outer"), ("inner", "special")])],
        ),
    )
    .await;
    let limit = special.statuses[0]
        .current_limit
        .as_ref()
        .expect("specific inner limit");
    assert_eq!(
        (limit.requests_per_unit, limit.unit),
        (5, Unit::Hour as i32)
    );
    // The parent alone has no limit, and a deeper descriptor does not fall back to it.
    for entries in [
        vec![("nested", "outer")],
        vec![("nested", "other"), ("inner", "x")],
        vec![("nested", "outer"), ("inner", "x"), ("deeper", "y")],
    ] {
        let response = call(&mut client, request("test", vec![descriptor(&entries)])).await;
        assert_eq!(response.statuses[0].current_limit, None, "{entries:?}");
        assert_eq!(code(&response.statuses[0]), Code::Ok);
    }
}

#[tokio::test]
async fn wildcard_values_match_and_count_per_value() {
    let sluice = server();
    let mut client = sluice.client().await;
    let first = call_one(&mut client, "test", &[("wild", "foobar")]).await;
    assert_eq!(code(&first.statuses[0]), Code::Ok);
    let second = call_one(&mut client, "test", &[("wild", "foobar")]).await;
    assert_eq!(code(&second.statuses[0]), Code::OverLimit);
    let other = call_one(&mut client, "test", &[("wild", "foobaz")]).await;
    assert_eq!(
        code(&other.statuses[0]),
        Code::Ok,
        "each value has its own counter"
    );
    let miss = call_one(&mut client, "test", &[("wild", "bar")]).await;
    assert_eq!(miss.statuses[0].current_limit, None);
}

#[tokio::test]
async fn share_threshold_makes_matching_values_share_one_counter() {
    let sluice = server();
    let mut client = sluice.client().await;
    let a = call_one(&mut client, "test", &[("shared", "files/a")]).await;
    assert_eq!(a.statuses[0].limit_remaining, 1);
    let b = call_one(&mut client, "test", &[("shared", "files/b")]).await;
    assert_eq!(b.statuses[0].limit_remaining, 0);
    let c = call_one(&mut client, "test", &[("shared", "files/c")]).await;
    assert_eq!(code(&c.statuses[0]), Code::OverLimit);
}

#[tokio::test]
async fn unlimited_is_always_ok_with_maximum_remaining() {
    let sluice = server();
    let mut client = sluice.client().await;
    for _ in 0..5 {
        let response = call_one(&mut client, "test", &[("free", "x")]).await;
        let status = &response.statuses[0];
        assert_eq!(code(status), Code::Ok);
        assert_eq!(status.limit_remaining, 4_294_967_295);
        assert_eq!(status.current_limit, None);
    }
}

#[tokio::test]
async fn a_replaced_limit_is_neither_applied_nor_charged() {
    let sluice = server();
    let mut client = sluice.client().await;
    for _ in 0..3 {
        let both = vec![
            descriptor(&[("general", "u")]),
            descriptor(&[("specific", "u")]),
        ];
        let response = call(&mut client, request("test", both)).await;
        assert_eq!(overall(&response), Code::Ok);
        assert_eq!(
            response.statuses[0].current_limit, None,
            "general is replaced"
        );
        let specific = response.statuses[1]
            .current_limit
            .as_ref()
            .expect("specific applies");
        assert_eq!(specific.name, "specific");
    }
    // `general` (1 per day) was never charged above: its first own request passes.
    let alone = call_one(&mut client, "test", &[("general", "u")]).await;
    assert_eq!(code(&alone.statuses[0]), Code::Ok);
    assert_eq!(
        alone.statuses[0]
            .current_limit
            .as_ref()
            .map(|l| l.name.as_str()),
        Some("general")
    );
    let again = call_one(&mut client, "test", &[("general", "u")]).await;
    assert_eq!(code(&again.statuses[0]), Code::OverLimit);
}

#[tokio::test]
async fn shadow_mode_limit_is_charged_but_never_denies() {
    let sluice = server();
    let mut client = sluice.client().await;
    call_one(&mut client, "test", &[("shadow", "x")]).await;
    let response = call_one(&mut client, "test", &[("shadow", "x")]).await;
    assert_eq!(overall(&response), Code::Ok);
    assert_eq!(code(&response.statuses[0]), Code::Ok);
    assert_eq!(response.statuses[0].limit_remaining, 0);
}

#[tokio::test]
async fn global_shadow_mode_forces_only_the_overall_code() {
    for (args, envs) in [
        (vec!["--shadow-mode"], vec![]),
        (vec![], vec![("SHADOW_MODE", "true")]),
    ] {
        let sluice = Sluice::start_with(&[("config.yaml", CONFIG)], &args, &envs);
        let mut client = sluice.client().await;
        call_times(&mut client, "test", &[("counted", "g")], 3).await;
        let response = call_one(&mut client, "test", &[("counted", "g")]).await;
        assert_eq!(overall(&response), Code::Ok, "{args:?} {envs:?}");
        assert_eq!(code(&response.statuses[0]), Code::OverLimit);
    }
}

#[tokio::test]
async fn quota_mode_is_over_only_when_every_quota_descriptor_is() {
    let sluice = server();
    let mut client = sluice.client().await;
    let both = || {
        request(
            "test",
            vec![descriptor(&[("quota", "a")]), descriptor(&[("quota", "b")])],
        )
    };
    assert_eq!(overall(&call(&mut client, both()).await), Code::Ok);
    let second = call(&mut client, both()).await;
    assert_eq!(code(&second.statuses[0]), Code::OverLimit);
    assert_eq!(overall(&second), Code::Ok, "b still has quota");
    let third = call(&mut client, both()).await;
    assert_eq!(
        overall(&third),
        Code::OverLimit,
        "all quota descriptors are over"
    );
}

#[tokio::test]
async fn hits_addend_from_the_request_and_the_descriptor() {
    let sluice = server();
    let mut client = sluice.client().await;
    // Request-level: 2 of 3, then 2 more do not fit (1 left) and charge nothing.
    let mut two = request("test", vec![descriptor(&[("counted", "h")])]);
    two.hits_addend = 2;
    assert_eq!(
        call(&mut client, two.clone()).await.statuses[0].limit_remaining,
        1
    );
    let denied = call(&mut client, two).await;
    assert_eq!(code(&denied.statuses[0]), Code::OverLimit);
    // A denial reports nothing left, as the reference does; the 1 left is still there.
    assert_eq!(denied.statuses[0].limit_remaining, 0);
    // Descriptor-level 0 only checks, twice, and charges nothing.
    for _ in 0..2 {
        let check = call(
            &mut client,
            request("test", vec![descriptor_with_hits(&[("counted", "h")], 0)]),
        )
        .await;
        assert_eq!(code(&check.statuses[0]), Code::Ok);
        assert_eq!(check.statuses[0].limit_remaining, 1);
    }
    // The descriptor's hits_addend wins over the request's.
    let mut precedence = request("test", vec![descriptor_with_hits(&[("counted", "h")], 1)]);
    precedence.hits_addend = 3;
    let response = call(&mut client, precedence).await;
    assert_eq!(code(&response.statuses[0]), Code::Ok);
    assert_eq!(response.statuses[0].limit_remaining, 0);
}

#[tokio::test]
async fn a_limit_override_replaces_the_configured_limit() {
    let sluice = server();
    let mut client = sluice.client().await;
    let hour = Unit::Hour as i32;
    let first = call(
        &mut client,
        request(
            "test",
            vec![descriptor_with_limit(&[("unconfigured", "x")], 1, hour)],
        ),
    )
    .await;
    let limit = first.statuses[0]
        .current_limit
        .as_ref()
        .expect("override applies");
    assert_eq!((limit.requests_per_unit, limit.unit), (1, hour));
    let second = call(
        &mut client,
        request(
            "test",
            vec![descriptor_with_limit(&[("unconfigured", "x")], 1, hour)],
        ),
    )
    .await;
    assert_eq!(code(&second.statuses[0]), Code::OverLimit);
    // On a configured key too (3 per day configured, 10 per hour sent).
    let over = call(
        &mut client,
        request(
            "test",
            vec![descriptor_with_limit(&[("counted", "o")], 10, hour)],
        ),
    )
    .await;
    assert_eq!(over.statuses[0].limit_remaining, 9);
}

#[tokio::test]
async fn an_unknown_domain_or_descriptor_is_ok_without_a_limit() {
    let sluice = server();
    let mut client = sluice.client().await;
    let response = call_one(&mut client, "nowhere", &[("counted", "a")]).await;
    assert_eq!(overall(&response), Code::Ok);
    assert_eq!(response.statuses.len(), 1);
    assert_eq!(response.statuses[0].current_limit, None);
    let response = call_one(&mut client, "test", &[("unknown", "a")]).await;
    assert_eq!(response.statuses[0].current_limit, None);
    assert_eq!(code(&response.statuses[0]), Code::Ok);
}

#[tokio::test]
async fn statuses_come_in_request_order() {
    let sluice = server();
    let mut client = sluice.client().await;
    let descriptors = vec![
        descriptor(&[("free", "x")]),
        descriptor(&[("unknown", "y")]),
        descriptor(&[("counted", "order")]),
    ];
    let response = call(&mut client, request("test", descriptors)).await;
    assert_eq!(response.statuses[0].limit_remaining, u32::MAX);
    assert_eq!(response.statuses[1].current_limit, None);
    assert_eq!(response.statuses[2].limit_remaining, 2);
}

#[tokio::test]
async fn malformed_requests_are_invalid_argument_naming_the_field() {
    let sluice = Sluice::start(
        CONFIG,
        &[
            "--max-descriptors",
            "2",
            "--max-entries",
            "2",
            "--max-key-bytes",
            "8",
            "--max-value-bytes",
            "16",
        ],
    );
    let mut client = sluice.client().await;
    let long_key = "k".repeat(9);
    let long_value = "v".repeat(17);
    let cases = vec![
        (request("", vec![descriptor(&[("a", "b")])]), "domain"),
        (request("test", vec![]), "descriptors"),
        (
            request("test", vec![descriptor(&[("a", "b")]); 3]),
            "descriptors: 3 descriptors exceed the maximum of 2",
        ),
        (
            request(
                "test",
                vec![descriptor(&[("a", "b"), ("c", "d"), ("e", "f")])],
            ),
            "descriptors[0].entries: 3 entries",
        ),
        (
            request("test", vec![descriptor(&[(&long_key, "b")])]),
            "descriptors[0].entries[0].key: 9 bytes",
        ),
        (
            request("test", vec![descriptor(&[("a", &long_value)])]),
            "descriptors[0].entries[0].value: 17 bytes",
        ),
        (
            request("test", vec![descriptor_with_limit(&[("a", "b")], 5, 0)]),
            "descriptors[0].limit.unit",
        ),
        (
            request("test", vec![descriptor_with_limit(&[("a", "b")], 5, 99)]),
            "descriptors[0].limit.unit",
        ),
    ];
    for (request, field) in cases {
        let status = client.should_rate_limit(request).await.expect_err(field);
        assert_eq!(status.code(), GrpcCode::InvalidArgument, "{field}");
        assert!(
            status.message().contains(field),
            "{field}: {}",
            status.message()
        );
    }
    // The server is still serving after all of them.
    let response = call_one(&mut client, "test", &[("counted", "z")]).await;
    assert_eq!(overall(&response), Code::Ok);
}

#[tokio::test]
async fn request_shapes_the_reference_answers_are_answered_not_refused() {
    let sluice = Sluice::start(CONFIG, &[]);
    let mut client = sluice.client().await;
    let big_value = "v".repeat(60 * 1024);
    let long_key = "k".repeat(300);
    let many: Vec<(String, String)> = (0..20)
        .map(|i| (format!("k{i}"), format!("v{i}")))
        .collect();
    let many: Vec<(&str, &str)> = many.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut descriptors = vec![
        descriptor(&[]),
        descriptor(&[("", "b")]),
        descriptor(&[(&long_key, "b")]),
        descriptor(&[("counted", &big_value)]),
    ];
    descriptors.extend(std::iter::repeat_n(descriptor(&many), 96));
    assert_eq!(descriptors.len(), 100);
    let response = call(&mut client, request("test", descriptors.clone())).await;
    assert_eq!(response.statuses.len(), 100);
    assert_eq!(overall(&response), Code::Ok);
    for (index, status) in response.statuses.iter().enumerate() {
        assert_eq!(code(status), Code::Ok, "descriptor {index}");
        // Only the 60 KiB value falls under a limit, and it is counted.
        assert_eq!(
            status.current_limit.is_some(),
            index == 3,
            "descriptor {index}"
        );
    }
    let again = call(&mut client, request("test", descriptors)).await;
    assert_eq!(
        again.statuses[3].limit_remaining + 1,
        response.statuses[3].limit_remaining
    );
}

/// A codec that sends and receives raw bytes, to put on the wire what no generated client
/// would send.
#[derive(Clone, Copy)]
struct RawBytes;

impl tonic::codec::Codec for RawBytes {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = RawBytes;
    type Decoder = RawBytes;
    fn encoder(&mut self) -> RawBytes {
        RawBytes
    }
    fn decoder(&mut self) -> RawBytes {
        RawBytes
    }
}

impl tonic::codec::Encoder for RawBytes {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn encode(
        &mut self,
        item: Vec<u8>,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        prost::bytes::BufMut::put_slice(dst, &item);
        Ok(())
    }
}

impl tonic::codec::Decoder for RawBytes {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<Vec<u8>>, tonic::Status> {
        use prost::bytes::Buf;
        let bytes = src.chunk().to_vec();
        src.advance(bytes.len());
        Ok(Some(bytes))
    }
}

/// Sends `body` as a ShouldRateLimit request; the status it gets.
async fn raw_call(sluice: &Sluice, body: Vec<u8>) -> tonic::Status {
    raw_call_to(
        sluice,
        "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
        body,
    )
    .await
}

/// Sends `body` to `path`; the status it gets.
async fn raw_call_to(sluice: &Sluice, path: &'static str, body: Vec<u8>) -> tonic::Status {
    let mut grpc = tonic::client::Grpc::new(sluice.channel().await);
    grpc.ready().await.expect("ready");
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(path);
    grpc.unary(tonic::Request::new(body), path, RawBytes)
        .await
        .expect_err("refused")
}

/// ShouldRateLimit has a way in of its own, ahead of the router (`server/rls_route.rs`): the
/// service's other names, and other services' paths, still get the router's answers.
#[tokio::test]
async fn paths_beside_should_rate_limit_are_answered_as_grpc_says() {
    let sluice = server();
    for path in [
        "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimitTwice",
        "/envoy.service.ratelimit.v3.RateLimitService/",
        "/envoy.service.ratelimit.v2.RateLimitService/ShouldRateLimit",
        "/no.such.Service/Call",
    ] {
        let refused = raw_call_to(&sluice, path, Vec::new()).await;
        assert_eq!(refused.code(), GrpcCode::Unimplemented, "{path}: {refused}");
    }
    // An empty ShouldRateLimit is decided, and refused for its missing domain.
    let empty = raw_call(&sluice, Vec::new()).await;
    assert_eq!(empty.code(), GrpcCode::InvalidArgument, "{empty}");
}

#[tokio::test]
async fn undecodable_and_oversized_requests_are_the_callers_fault() {
    let sluice = server();
    // Field 1 (domain), a string holding invalid UTF-8.
    let invalid = raw_call(&sluice, vec![0x0a, 0x02, 0xff, 0xfe]).await;
    assert_eq!(invalid.code(), GrpcCode::InvalidArgument, "{invalid}");
    // Field 1, a wrong wire type (fixed64 where a string is expected).
    let wrong_type = raw_call(&sluice, vec![0x09, 1, 2, 3, 4, 5, 6, 7, 8]).await;
    assert_eq!(wrong_type.code(), GrpcCode::InvalidArgument, "{wrong_type}");
    // 5 MiB: over the 4 MiB a request may be.
    let mut big = vec![0x0a, 0x80, 0x80, 0xc0, 0x02];
    big.resize(big.len() + 5 * 1024 * 1024, b'a');
    let oversized = raw_call(&sluice, big).await;
    assert_eq!(oversized.code(), GrpcCode::ResourceExhausted, "{oversized}");
    // The server still answers.
    let mut client = sluice.client().await;
    let fine = call_one(&mut client, "test", &[("counted", "r")]).await;
    assert_eq!(overall(&fine), Code::Ok);
}

/// Under load the gRPC port's writes wait a turn to carry several answers at once
/// (`server/accept.rs`): every call on one connection still gets its own answer, whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_calls_at_once_on_one_connection_each_get_their_own_answer() {
    let sluice = server();
    let client = sluice.client().await;
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..600usize {
        // A channel's clones share its one HTTP/2 connection.
        let mut client = client.clone();
        calls.spawn(async move {
            let value = format!("v{}", i % 200);
            let entries = if i % 2 == 0 {
                [("counted", value.as_str())]
            } else {
                [("free", value.as_str())]
            };
            (i, call_one(&mut client, "test", &entries).await)
        });
    }
    let mut admitted_per_value = std::collections::HashMap::<String, usize>::new();
    while let Some(joined) = calls.join_next().await {
        let (i, response) = joined.expect("the call's task ends");
        let status = &response.statuses[0];
        if i % 2 == 0 {
            let limit = status.current_limit.as_ref().expect("the counted limit");
            assert_eq!(limit.requests_per_unit, 3, "call {i} answered as its own");
            if code(status) == Code::Ok {
                *admitted_per_value
                    .entry(format!("v{}", i % 200))
                    .or_default() += 1;
            }
        } else {
            assert_eq!(status.current_limit, None, "call {i} answered as its own");
            assert_eq!(status.limit_remaining, 4_294_967_295);
        }
    }
    // 300 counted calls over 100 values, 3 each: every one admitted, each counted once.
    assert_eq!(admitted_per_value.len(), 100);
    assert!(admitted_per_value.values().all(|&n| n == 3));
}

/// A call to `ShouldRateLimit` at `addr` by a bare HTTP/2 client that sends the deadline
/// `grpc_timeout` and does not keep it itself (tonic's client would): the answer's
/// `grpc-status` and `grpc-message`.
async fn call_with_deadline(
    addr: std::net::SocketAddr,
    ask: RateLimitRequest,
    grpc_timeout: &str,
) -> (String, String) {
    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .expect("connected");
    let (mut sender, connection) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .expect("an HTTP/2 connection");
    tokio::spawn(connection);
    let message = prost::Message::encode_to_vec(&ask);
    let mut frame = vec![0u8];
    frame.extend_from_slice(&u32::try_from(message.len()).expect("small").to_be_bytes());
    frame.extend(message);
    // A short request of ASCII names is valid UTF-8: a String is a body hyper takes as is.
    let body = String::from_utf8(frame).expect("an ASCII request");
    let request = tonic::codegen::http::Request::post(format!(
        "http://{addr}/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
    ))
    .header("content-type", "application/grpc")
    .header("te", "trailers")
    .header("grpc-timeout", grpc_timeout)
    .body(body)
    .expect("a request");
    let response = sender.send_request(request).await.expect("an answer");
    let header = |name: &str| {
        let value = response
            .headers()
            .get(name)
            .map(|v| v.to_str().expect("ASCII"));
        value.unwrap_or_default().to_string()
    };
    (header("grpc-status"), header("grpc-message"))
}

/// A sluice on a Redis of its own that waits 10 s on Redis before it gives a call up.
fn on_redis_slow_to_fail() -> (crate::support::redis::RedisServer, Sluice) {
    let args = ["--redis-command-timeout", "10s"];
    Sluice::on_own_redis(&[("config.yaml", CONFIG)], &args, &[])
}

/// The client's deadline (`grpc-timeout`) is kept by the server: a call still waiting on
/// Redis then is dropped and answered CANCELLED at that deadline, not at the store's longer
/// command timeout.
#[tokio::test]
async fn a_call_still_waiting_at_its_clients_deadline_is_answered_cancelled_then() {
    let (redis, sluice) = on_redis_slow_to_fail();
    let mut client = sluice.client().await;
    let ask = || request("test", vec![descriptor(&[("counted", "deadline")])]);
    assert_eq!(overall(&call(&mut client, ask()).await), Code::Ok);
    redis.signal("STOP");
    let started = std::time::Instant::now();
    let (status, message) = call_with_deadline(sluice.grpc_addr, ask(), "300m").await;
    let waited = started.elapsed();
    redis.signal("CONT");
    assert_eq!(
        status,
        (GrpcCode::Cancelled as i32).to_string(),
        "{message}"
    );
    assert_eq!(message, "Timeout%20expired");
    assert!(
        waited >= std::time::Duration::from_millis(300)
            && waited < std::time::Duration::from_secs(5),
        "answered after {waited:?}"
    );
    // Redis back, the next call is decided as before.
    assert_eq!(overall(&call(&mut client, ask()).await), Code::Ok);
}

/// A connection's calls are served in its one task (`server/connection.rs`): a call waiting on
/// Redis holds up none of the calls beside it on the same connection.
#[tokio::test]
async fn a_call_waiting_on_redis_holds_up_no_other_call_on_its_connection() {
    let (redis, sluice) = on_redis_slow_to_fail();
    let channel = sluice.channel().await;
    let mut waiting = Client::new(channel.clone());
    let ask = || request("test", vec![descriptor(&[("counted", "beside")])]);
    assert_eq!(overall(&call(&mut waiting, ask()).await), Code::Ok);
    redis.signal("STOP");
    let held = tokio::spawn(async move { waiting.should_rate_limit(ask()).await });
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel.clone());
    for _ in 0..3 {
        let check = tonic_health::pb::HealthCheckRequest::default();
        let answered = tokio::time::timeout(std::time::Duration::from_secs(2), health.check(check));
        assert!(
            answered.await.is_ok_and(|answer| answer.is_ok()),
            "the health check beside the waiting call was answered"
        );
    }
    assert!(!held.is_finished(), "the call on Redis still waits");
    redis.signal("CONT");
    let answer = held.await.expect("the held call").expect("answered");
    assert_eq!(overall(&answer.into_inner()), Code::Ok);
}

/// The gRPC port's connections are spread over its serving threads (`--grpc-threads`), the next
/// to the thread with the fewest open; each thread calls Redis on a connection of its own, and
/// the threads stop, with those connections, when the server does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_are_spread_over_the_serving_threads_each_calling_redis_on_its_own() {
    let files = [("config.yaml", CONFIG)];
    let (redis, mut sluice) = Sluice::on_own_redis(&files, &["--grpc-threads", "3"], &[]);
    // The connections to Redis that request calls went out on.
    let calling = || {
        let clients = redis.cli(&["CLIENT", "LIST"]);
        let count = clients.lines().filter(|c| c.contains("cmd=fcall")).count();
        (count, clients)
    };
    let mut clients = Vec::new();
    for i in 0..4 {
        let mut client = sluice.client().await;
        let value = format!("thread{i}");
        let answer = call_one(&mut client, "test", &[("counted", &value)]).await;
        assert_eq!(overall(&answer), Code::Ok);
        clients.push(client);
    }
    // One connection to Redis a thread: the fourth gRPC connection went to a thread with one.
    let (count, list) = calling();
    assert_eq!(count, 3, "{list}");
    drop(clients);
    assert_eq!(sluice.terminate(), Some(0));
    let started = std::time::Instant::now();
    while calling().0 > 0 && started.elapsed() < std::time::Duration::from_secs(5) {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let (count, list) = calling();
    assert_eq!(
        count, 0,
        "the threads' connections closed with them: {list}"
    );
}
