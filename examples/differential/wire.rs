//! A generated request as Envoy's protos carry it, and an answer of either server in a form
//! that compares field by field: the overall code, each status (code, `current_limit` with its
//! name, `limit_remaining`, `duration_until_reset`), the response and request headers, and the
//! dynamic metadata as JSON (whitespace inside its strings collapsed: Go's text form of a
//! limit override spaces its fields at random, per build).

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::{value::Kind, Struct, UInt64Value, Value};

use crate::generate::Request;

/// The request as Envoy sends it.
pub fn request(request: &Request) -> RateLimitRequest {
    RateLimitRequest {
        domain: request.domain.clone(),
        hits_addend: request.hits_addend,
        descriptors: request
            .descriptors
            .iter()
            .map(|d| RateLimitDescriptor {
                entries: d
                    .entries
                    .iter()
                    .map(|(key, value)| Entry {
                        key: key.clone(),
                        value: value.clone(),
                    })
                    .collect(),
                limit: d.limit.map(|l| RateLimitOverride {
                    requests_per_unit: l.requests_per_unit,
                    unit: l.unit,
                }),
                hits_addend: d.hits_addend.map(|value| UInt64Value { value }),
                ..Default::default()
            })
            .collect(),
    }
}

/// A descriptor's status, as compared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub code: i32,
    /// `current_limit`: requests per unit, unit, name.
    pub limit: Option<(u32, i32, String)>,
    pub remaining: u32,
    /// `duration_until_reset` in whole seconds.
    pub reset: Option<i64>,
}

/// An answer, as compared.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub overall: i32,
    pub statuses: Vec<Status>,
    pub headers: Vec<(String, String)>,
    pub request_headers: Vec<(String, String)>,
    pub metadata: Option<serde_json::Value>,
}

/// A call's outcome: an answer, or a gRPC error (its code and message).
pub type Outcome = Result<Answer, (i32, String)>;

pub fn outcome(result: Result<tonic::Response<RateLimitResponse>, tonic::Status>) -> Outcome {
    match result {
        Ok(response) => Ok(answer(response.into_inner())),
        Err(status) => Err((status.code() as i32, status.message().to_string())),
    }
}

fn answer(response: RateLimitResponse) -> Answer {
    let pairs = |headers: Vec<envoy_types::pb::envoy::config::core::v3::HeaderValue>| {
        headers.into_iter().map(|h| (h.key, h.value)).collect()
    };
    Answer {
        overall: response.overall_code,
        statuses: response
            .statuses
            .into_iter()
            .map(|s| Status {
                code: s.code,
                limit: s
                    .current_limit
                    .map(|l| (l.requests_per_unit, l.unit, l.name)),
                remaining: s.limit_remaining,
                reset: s.duration_until_reset.map(|d| d.seconds),
            })
            .collect(),
        headers: pairs(response.response_headers_to_add),
        request_headers: pairs(response.request_headers_to_add),
        metadata: response.dynamic_metadata.map(structure),
    }
}

fn structure(s: Struct) -> serde_json::Value {
    serde_json::Value::Object(s.fields.into_iter().map(|(k, v)| (k, json(v))).collect())
}

fn json(value: Value) -> serde_json::Value {
    match value.kind {
        None | Some(Kind::NullValue(_)) => serde_json::Value::Null,
        Some(Kind::NumberValue(n)) => serde_json::json!(n),
        Some(Kind::StringValue(s)) => {
            serde_json::Value::String(s.split_whitespace().collect::<Vec<_>>().join(" "))
        }
        Some(Kind::BoolValue(b)) => serde_json::Value::Bool(b),
        Some(Kind::StructValue(s)) => structure(s),
        Some(Kind::ListValue(l)) => {
            serde_json::Value::Array(l.values.into_iter().map(json).collect())
        }
    }
}
