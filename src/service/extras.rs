//! What a response carries beside the statuses, each behind a setting as in
//! envoyproxy/ratelimit: `RateLimit-*` headers (and `Retry-After`) from the most constrained
//! descriptor, and dynamic metadata describing the request and the matched limits.

use std::collections::BTreeMap;

use prost_types::value::Kind;
use prost_types::{ListValue, Struct, Value};

use crate::proto::envoy::config::core::v3::HeaderValue;
use crate::proto::rate_limit_response::{Code, DescriptorStatus};
use crate::proto::RateLimitRequest;
use crate::service::response::Verdict;

/// Names of the rate limit headers (`LIMIT_LIMIT_HEADER`, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderNames {
    pub limit: String,
    pub remaining: String,
    pub reset: String,
}

impl Default for HeaderNames {
    fn default() -> Self {
        HeaderNames {
            limit: "RateLimit-Limit".into(),
            remaining: "RateLimit-Remaining".into(),
            reset: "RateLimit-Reset".into(),
        }
    }
}

/// `RateLimit-Limit: L, L;w=W`, `RateLimit-Remaining`, `RateLimit-Reset` of the most
/// constrained descriptor (over limit first, then the least remaining), and `Retry-After` when
/// the response is over limit. No headers when no descriptor has a limit.
pub fn headers(
    names: &HeaderNames,
    verdicts: &[Verdict<'_>],
    statuses: &[DescriptorStatus],
    overall: Code,
) -> Vec<HeaderValue> {
    let constrained = verdicts
        .iter()
        .zip(statuses)
        .filter_map(|(verdict, status)| match verdict {
            Verdict::Limited(applied) => Some((applied, status)),
            _ => None,
        })
        .min_by_key(|(_, status)| {
            (
                status.code != Code::OverLimit as i32,
                status.limit_remaining,
            )
        });
    let Some((applied, status)) = constrained else {
        return Vec::new();
    };
    let reset = status.duration_until_reset.map_or(0, |d| d.seconds);
    let window = applied.limit.period_us() / 1_000_000;
    let limit = applied.limit.requests_per_unit;
    let mut headers = vec![
        header(&names.limit, format!("{limit}, {limit};w={window}")),
        header(&names.remaining, status.limit_remaining.to_string()),
        header(&names.reset, reset.to_string()),
    ];
    if overall == Code::OverLimit {
        headers.push(header("Retry-After", reset.to_string()));
    }
    headers
}

fn header(key: &str, value: String) -> HeaderValue {
    HeaderValue {
        key: key.to_string(),
        value,
        raw_value: Vec::new(),
    }
}

/// The request (`domain`, `descriptors`, `hitsAddend`) and the `metadata` of every matched
/// limit, merged, as a protobuf Struct.
pub fn dynamic_metadata(request: &RateLimitRequest, verdicts: &[Verdict<'_>]) -> Struct {
    let mut fields = BTreeMap::new();
    for verdict in verdicts {
        if let Verdict::Limited(applied) = verdict {
            if let Some(metadata) = applied.metadata {
                fields.extend(metadata.fields.clone());
            }
        }
    }
    let descriptors = request
        .descriptors
        .iter()
        .map(|descriptor| {
            let entries = descriptor
                .entries
                .iter()
                .map(|e| structure([("key", string(&e.key)), ("value", string(&e.value))]))
                .collect();
            structure([("entries", list(entries))])
        })
        .collect();
    fields.insert("domain".into(), string(&request.domain));
    fields.insert("descriptors".into(), list(descriptors));
    fields.insert(
        "hitsAddend".into(),
        number(f64::from(request.hits_addend.max(1))),
    );
    Struct { fields }
}

fn string(s: &str) -> Value {
    Value {
        kind: Some(Kind::StringValue(s.to_string())),
    }
}

fn number(n: f64) -> Value {
    Value {
        kind: Some(Kind::NumberValue(n)),
    }
}

fn list(values: Vec<Value>) -> Value {
    Value {
        kind: Some(Kind::ListValue(ListValue { values })),
    }
}

fn structure<const N: usize>(fields: [(&str, Value); N]) -> Value {
    Value {
        kind: Some(Kind::StructValue(Struct {
            fields: fields
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
        })),
    }
}
