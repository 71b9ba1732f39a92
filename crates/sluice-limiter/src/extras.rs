//! What a response carries beside the statuses, each behind a setting as in
//! envoyproxy/ratelimit: `RateLimit-*` headers (and `Retry-After`) of one descriptor, and
//! dynamic metadata describing the request and the limits it passed; and sluice's own
//! metadata, always: the tokens of what a request took, what its limits' modifiers say of
//! it, the limit that denied it.

use prost_types::value::Kind;
use prost_types::{ListValue, Struct, Value};

use crate::response::Verdict;
use sluice_core::limit::Unit;
use sluice_core::modifier::MetaValue;
use sluice_proto::envoy::config::core::v3::HeaderValue;
use sluice_proto::rate_limit_response::{Code, DescriptorStatus};
use sluice_proto::{RateLimitDescriptor, RateLimitRequest};

/// The rate limit headers: their names (`LIMIT_LIMIT_HEADER`, ...) and their form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderNames {
    pub limit: String,
    pub remaining: String,
    pub reset: String,
    pub form: HeaderForm,
}

impl Default for HeaderNames {
    fn default() -> Self {
        HeaderNames {
            limit: "RateLimit-Limit".into(),
            remaining: "RateLimit-Remaining".into(),
            reset: "RateLimit-Reset".into(),
            form: HeaderForm::default(),
        }
    }
}

/// How `RateLimit-Limit` is written (`--response-headers-form`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum HeaderForm {
    /// `RateLimit-Limit: 10`, as envoyproxy/ratelimit writes it.
    #[default]
    Reference,
    /// `RateLimit-Limit: 10, 10;w=60`: the limit and its quota policy (the window in seconds,
    /// and the limit's `name` when it has one: `10, 10;w=60;name="per-user"`, as Limitador
    /// writes it), as the IETF RateLimit header fields draft describes.
    QuotaPolicy,
}

/// The descriptor whose limit the headers describe, chosen as envoyproxy/ratelimit chooses:
/// the last one denied by a limit in neither shadow nor quota mode, else the first with the
/// least remaining among those a limit was applied to.
fn described<'a>(
    verdicts: &[Verdict<'_>],
    statuses: &'a [DescriptorStatus],
) -> Option<&'a DescriptorStatus> {
    let denied = verdicts
        .iter()
        .zip(statuses)
        .rev()
        .find(|(verdict, status)| {
            matches!(verdict, Verdict::Limited(applied) if !applied.quota_mode)
                && status.code == Code::OverLimit as i32
        })
        .map(|(_, status)| status);
    denied.or_else(|| {
        statuses
            .iter()
            .filter(|status| status.current_limit.is_some())
            .min_by_key(|status| status.limit_remaining)
    })
}

/// The headers of the described descriptor, and `Retry-After` (a sluice addition) when the
/// response is over limit. No headers when no descriptor has a limit.
pub fn headers(
    names: &HeaderNames,
    verdicts: &[Verdict<'_>],
    statuses: &[DescriptorStatus],
    overall: Code,
) -> Vec<HeaderValue> {
    let Some(status) = described(verdicts, statuses) else {
        return Vec::new();
    };
    let Some(limit) = &status.current_limit else {
        return Vec::new();
    };
    let reset = status.duration_until_reset.map_or(0, |d| d.seconds);
    let requests = limit.requests_per_unit;
    let limit_value = match names.form {
        HeaderForm::Reference => requests.to_string(),
        // A lease limit has no window: its limit is leases in flight, with no policy.
        HeaderForm::QuotaPolicy => match policy_of(verdicts, statuses, status) {
            (Some(window), "") => format!("{requests}, {requests};w={window}"),
            // Limitador's parameter: the name, a `"` in it written `'`.
            (Some(window), name) => format!(
                "{requests}, {requests};w={window};name=\"{}\"",
                name.replace('"', "'")
            ),
            (None, _) => requests.to_string(),
        },
    };
    let mut headers = vec![
        header(&names.limit, limit_value),
        header(&names.remaining, status.limit_remaining.to_string()),
        header(&names.reset, reset.to_string()),
    ];
    if overall == Code::OverLimit {
        headers.push(header("Retry-After", reset.to_string()));
    }
    headers
}

/// The period, in seconds, of the limit behind `status` (`None` for a lease limit, whose
/// period is a lease's longest life, not a window), and its name ("" without one).
fn policy_of<'a>(
    verdicts: &'a [Verdict<'_>],
    statuses: &[DescriptorStatus],
    status: &DescriptorStatus,
) -> (Option<u64>, &'a str) {
    verdicts
        .iter()
        .zip(statuses)
        .find_map(|(verdict, s)| match verdict {
            Verdict::Limited(applied) if std::ptr::eq(s, status) => Some((
                (!applied.limit.algorithm().leases())
                    .then(|| applied.limit.period_us() / 1_000_000),
                applied.name,
            )),
            _ => None,
        })
        .unwrap_or((Some(0), ""))
}

fn header(key: &str, value: String) -> HeaderValue {
    HeaderValue {
        key: key.to_string(),
        value,
        raw_value: Vec::new(),
    }
}

/// envoyproxy/ratelimit's dynamic metadata: `domain`; `descriptors`, one per descriptor of
/// the request, its entries written `key=value` (with the client's `limit` override and
/// `hitsAddend` when it carries them); the request's `hitsAddend` when set; and `metadata`,
/// the rules' metadata of the descriptors that passed (not denied, not unlimited), merged
/// with the first value of a name winning (maps merged name by name).
pub fn dynamic_metadata(
    request: &RateLimitRequest,
    verdicts: &[Verdict<'_>],
    statuses: &[DescriptorStatus],
) -> Struct {
    let mut fields = std::collections::BTreeMap::new();
    fields.insert("domain".into(), string(request.domain.clone()));
    let descriptors = request.descriptors.iter().map(descriptor_value).collect();
    fields.insert("descriptors".into(), list(descriptors));
    if request.hits_addend != 0 {
        fields.insert("hitsAddend".into(), number(request.hits_addend.into()));
    }
    let mut passed = Struct::default();
    for (verdict, status) in verdicts.iter().zip(statuses) {
        if let Verdict::Limited(applied) = verdict {
            if status.code != Code::OverLimit as i32 {
                if let Some(metadata) = applied.metadata {
                    merge_first_wins(&mut passed, metadata);
                }
            }
        }
    }
    if !passed.fields.is_empty() {
        fields.insert("metadata".into(), structure(passed));
    }
    Struct { fields }
}

fn descriptor_value(descriptor: &RateLimitDescriptor) -> Value {
    let mut fields = std::collections::BTreeMap::new();
    let entries = descriptor
        .entries
        .iter()
        .map(|e| string(format!("{}={}", e.key, e.value)))
        .collect();
    fields.insert("entries".into(), list(entries));
    if let Some(limit) = &descriptor.limit {
        fields.insert("limit".into(), string(override_text(limit)));
    }
    if let Some(hits) = descriptor.hits_addend {
        // The reference reports it as a number (a double): exact below 2^53.
        #[allow(clippy::cast_precision_loss)]
        fields.insert("hitsAddend".into(), number(hits as f64));
    }
    structure(Struct { fields })
}

/// Go's text form of a limit override, as the reference writes it: each field `name:value`,
/// a field holding its zero value left out (proto3's text form omits it).
fn override_text(limit: &sluice_proto::rate_limit_descriptor::RateLimitOverride) -> String {
    let mut fields = Vec::with_capacity(2);
    if limit.requests_per_unit != 0 {
        fields.push(format!("requests_per_unit:{}", limit.requests_per_unit));
    }
    if limit.unit != 0 {
        let unit = Unit::from_proto_number(limit.unit).map_or("UNKNOWN", Unit::proto_name);
        fields.push(format!("unit:{unit}"));
    }
    fields.join(" ")
}

/// Adds a unit's field `key` to the dynamic metadata: a map of the plain values it gives.
pub fn add_unit_fields(metadata: &mut Struct, key: &str, given: &[(&'static str, MetaValue)]) {
    let fields = given
        .iter()
        .map(|(name, value)| {
            let value = match value {
                MetaValue::Text(text) => string(text.clone()),
                MetaValue::Number(n) => number(*n),
                MetaValue::Flag(b) => boolean(*b),
            };
            (name.to_string(), value)
        })
        .collect();
    metadata
        .fields
        .insert(key.into(), structure(Struct { fields }));
}

/// Adds `from`'s fields to `into`, keeping a value `into` already has; two maps of the same
/// name merge in turn.
fn merge_first_wins(into: &mut Struct, from: &Struct) {
    for (name, value) in &from.fields {
        match into.fields.get_mut(name) {
            None => {
                into.fields.insert(name.clone(), value.clone());
            }
            Some(Value {
                kind: Some(Kind::StructValue(existing)),
            }) => {
                if let Some(Kind::StructValue(more)) = &value.kind {
                    merge_first_wins(existing, more);
                }
            }
            Some(_) => {}
        }
    }
}

fn string(s: String) -> Value {
    Value {
        kind: Some(Kind::StringValue(s)),
    }
}

fn number(n: f64) -> Value {
    Value {
        kind: Some(Kind::NumberValue(n)),
    }
}

fn boolean(b: bool) -> Value {
    Value {
        kind: Some(Kind::BoolValue(b)),
    }
}

fn list(values: Vec<Value>) -> Value {
    Value {
        kind: Some(Kind::ListValue(ListValue { values })),
    }
}

fn structure(fields: Struct) -> Value {
    Value {
        kind: Some(Kind::StructValue(fields)),
    }
}

/// The dynamic metadata field naming the limit that denied a request.
pub const DENIED_BY_KEY: &str = "sluice.denied_by";

/// Names the limit that denied the request (`sluice.denied_by`: its `name`, else
/// its stats key), whether or not the reference's metadata is on.
pub fn add_denied_by(metadata: &mut Struct, name: String) {
    metadata.fields.insert(DENIED_BY_KEY.into(), string(name));
}
