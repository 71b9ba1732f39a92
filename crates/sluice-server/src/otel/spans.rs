//! The spans of a decision: the server span of a `ShouldRateLimit` call (the child of the
//! caller's span when its headers carry W3C `traceparent` or B3), with what someone debugging
//! a 429 needs, and the store call beneath it. They are `tracing` spans of their own target,
//! which only the OpenTelemetry layer listens to.

use std::sync::LazyLock;

use opentelemetry::propagation::{TextMapCompositePropagator, TextMapPropagator};
use opentelemetry::trace::{Status, TraceContextExt};
use opentelemetry_http::HeaderExtractor;
use opentelemetry_propagator_b3::{B3Encoding, Propagator as B3Propagator};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator};
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use sluice_core::limit::Unit;
use sluice_proto::rate_limit_response::Code;
use sluice_proto::{RateLimitRequest, RateLimitResponse};

/// The `tracing` target of every span meant for export; the log output never shows it.
pub const TARGET: &str = sluice_store::redis::span::TARGET;

/// W3C trace context, then B3 (single `b3` header or `X-B3-*`): Envoy sends one or the other
/// depending on its tracer.
static PROPAGATOR: LazyLock<TextMapCompositePropagator> = LazyLock::new(|| {
    TextMapCompositePropagator::new(vec![
        Box::new(TraceContextPropagator::new()),
        Box::new(B3Propagator::with_encoding(
            B3Encoding::SingleAndMultiHeader,
        )),
    ])
});

/// The server span of one `ShouldRateLimit` call whose request headers are `headers`, or
/// `None` when the call is not sampled: a caller's sampled flag decides; a call without a
/// caller span is kept with probability `ratio`. Deciding here, before any span exists, makes
/// an unsampled call cost nothing more than reading its headers.
pub fn request_span(
    headers: &tonic::codegen::http::HeaderMap,
    request: &RateLimitRequest,
    ratio: f64,
) -> Option<Span> {
    let parent = PROPAGATOR.extract(&HeaderExtractor(headers));
    let caller = parent.span().span_context().clone();
    let sampled = if caller.is_valid() {
        caller.is_sampled()
    } else {
        sampled_at(ratio)
    };
    if !sampled {
        return None;
    }
    let span = tracing::info_span!(
        target: TARGET,
        "ShouldRateLimit",
        otel.name = "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
        otel.kind = "server",
        rpc.system = "grpc",
        rpc.service = "envoy.service.ratelimit.v3.RateLimitService",
        rpc.method = "ShouldRateLimit",
        ratelimit.domain = request.domain.as_str(),
        ratelimit.descriptors = request.descriptors.len(),
        ratelimit.hits_addend = request.hits_addend,
    );
    // Only a span the layer never saw refuses a parent: then it is a root, as without one.
    let _ = span.set_parent(parent);
    Some(span)
}

/// A draw that is true with probability `ratio` (always from 1, never at 0 or below).
fn sampled_at(ratio: f64) -> bool {
    if ratio >= 1.0 {
        return true;
    }
    if ratio <= 0.0 {
        return false;
    }
    let bits = RandomIdGenerator::default().new_span_id().to_bytes();
    let draw = u64::from_be_bytes(bits) >> 11; // 53 random bits
    (draw as f64) < ratio * (1u64 << 53) as f64
}

/// Records the answer on the request's span: the overall code, and the first descriptor that
/// was over its limit (its index, entries and limit); or the error.
pub fn record_answer<E: std::fmt::Display>(
    span: &Span,
    request: &RateLimitRequest,
    answer: Result<&RateLimitResponse, &E>,
) {
    let response = match answer {
        Ok(response) => response,
        Err(error) => {
            span.set_status(Status::error(error.to_string()));
            return;
        }
    };
    let overall = Code::try_from(response.overall_code).unwrap_or(Code::Unknown);
    span.set_attribute("ratelimit.overall_code", overall.as_str_name());
    let denied = response
        .statuses
        .iter()
        .enumerate()
        .filter(|(_, s)| s.code == Code::OverLimit as i32);
    let mut count = 0_i64;
    for (index, status) in denied {
        count += 1;
        if count > 1 {
            continue;
        }
        span.set_attribute("ratelimit.denied.index", index as i64);
        if let Some(descriptor) = request.descriptors.get(index) {
            let entries: Vec<String> = descriptor
                .entries
                .iter()
                .map(|e| format!("{}={}", e.key, e.value))
                .collect();
            span.set_attribute("ratelimit.denied.descriptor", entries.join(","));
        }
        if let Some(limit) = &status.current_limit {
            span.set_attribute(
                "ratelimit.denied.limit",
                format!(
                    "{}/{}",
                    limit.requests_per_unit,
                    Unit::from_proto_number(limit.unit).map_or("unknown", Unit::as_str)
                ),
            );
        }
    }
    span.set_attribute("ratelimit.denied.count", count);
}

/// The span of one store call deciding `hits` hits, beneath the current span; none outside a
/// traced call.
pub fn store_span(store: &'static str, hits: usize) -> Span {
    if Span::current().is_none() {
        return Span::none();
    }
    tracing::info_span!(
        target: TARGET,
        "store",
        otel.name = "sluice.store.charge",
        sluice.store = store,
        sluice.store.hits = hits,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_draw_keeps_about_the_ratio() {
        assert!(sampled_at(1.0));
        assert!(!sampled_at(0.0));
        let kept = (0..100_000).filter(|_| sampled_at(0.25)).count();
        // 25,000 expected, standard deviation 137.
        assert!((24_000..=26_000).contains(&kept), "{kept}");
    }
}
