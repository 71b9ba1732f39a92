//! The JSON forms of `/json`: envoyproxy/ratelimit's (protobuf JSON) RateLimitRequest in, and
//! RateLimitResponse out, in protobuf's canonical JSON mapping as the reference reads and
//! writes it: field names in both spellings (`hits_addend` and `hitsAddend`), integers as
//! numbers or strings (`"5"`), units by name (`MINUTE`) or number, `null` for a default.

use serde::Deserialize;
use serde_json::{json, Map, Value};

use sluice_core::limit::Unit;
use sluice_proto::rate_limit_descriptor::{Entry, RateLimitOverride};
use sluice_proto::rate_limit_response::Code;
use sluice_proto::{RateLimitDescriptor, RateLimitRequest, RateLimitResponse};

/// A RateLimitRequest as JSON.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonRequest {
    #[serde(default)]
    domain: String,
    #[serde(default)]
    descriptors: Vec<JsonDescriptor>,
    #[serde(default, alias = "hitsAddend", deserialize_with = "uint32")]
    hits_addend: u32,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonDescriptor {
    #[serde(default)]
    entries: Vec<JsonEntry>,
    #[serde(default)]
    limit: Option<JsonOverride>,
    #[serde(default, alias = "hitsAddend", deserialize_with = "optional_uint64")]
    hits_addend: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonEntry {
    #[serde(default)]
    key: String,
    #[serde(default)]
    value: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonOverride {
    #[serde(default, alias = "requestsPerUnit", deserialize_with = "uint32")]
    requests_per_unit: u32,
    #[serde(default)]
    unit: JsonUnit,
}

/// An unsigned integer as protobuf's JSON mapping writes it: a number or a decimal string.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum JsonUInt {
    Number(u64),
    Text(String),
}

impl JsonUInt {
    fn value<E: serde::de::Error>(self) -> Result<u64, E> {
        match self {
            JsonUInt::Number(number) => Ok(number),
            JsonUInt::Text(text) => text
                .parse()
                .map_err(|_| E::custom(format!("'{text}' is not an unsigned integer"))),
        }
    }
}

/// A uint32 field: a number, a string of one, or null (0).
fn uint32<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<u32, D::Error> {
    use serde::de::Error;
    match Option::<JsonUInt>::deserialize(deserializer)? {
        None => Ok(0),
        Some(value) => {
            let value = value.value::<D::Error>()?;
            u32::try_from(value).map_err(|_| D::Error::custom(format!("{value} is above 2^32")))
        }
    }
}

/// An optional uint64 field (a wrapper): a number, a string of one, or null (absent).
fn optional_uint64<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<u64>, D::Error> {
    Option::<JsonUInt>::deserialize(deserializer)?
        .map(JsonUInt::value::<D::Error>)
        .transpose()
}

/// A unit by name or by number.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum JsonUnit {
    Name(String),
    Number(i32),
}

impl Default for JsonUnit {
    fn default() -> Self {
        JsonUnit::Number(0)
    }
}

impl JsonUnit {
    /// Envoy's enum number; an unknown name is 0 (UNKNOWN), which the request checks refuse.
    fn number(&self) -> i32 {
        match self {
            JsonUnit::Number(number) => *number,
            JsonUnit::Name(name) => Unit::parse(name).map_or(0, Unit::proto_number),
        }
    }
}

impl From<JsonRequest> for RateLimitRequest {
    fn from(json: JsonRequest) -> Self {
        RateLimitRequest {
            domain: json.domain,
            hits_addend: json.hits_addend,
            descriptors: json
                .descriptors
                .into_iter()
                .map(|d| RateLimitDescriptor {
                    entries: d
                        .entries
                        .into_iter()
                        .map(|e| Entry {
                            key: e.key,
                            value: e.value,
                        })
                        .collect(),
                    limit: d.limit.map(|l| RateLimitOverride {
                        requests_per_unit: l.requests_per_unit,
                        unit: l.unit.number(),
                    }),
                    hits_addend: d.hits_addend,
                })
                .collect(),
        }
    }
}

/// A RateLimitResponse as protobuf JSON (enums by name, durations as `"60s"`).
pub fn response(response: &RateLimitResponse) -> Value {
    let statuses: Vec<Value> = response
        .statuses
        .iter()
        .map(|status| {
            let mut out = Map::new();
            out.insert("code".into(), json!(code_name(status.code)));
            if let Some(limit) = &status.current_limit {
                let mut current = Map::new();
                if !limit.name.is_empty() {
                    current.insert("name".into(), json!(limit.name));
                }
                current.insert("requestsPerUnit".into(), json!(limit.requests_per_unit));
                let unit = Unit::from_proto_number(limit.unit).map_or("UNKNOWN", Unit::proto_name);
                current.insert("unit".into(), json!(unit));
                out.insert("currentLimit".into(), Value::Object(current));
            }
            // protojson leaves out a field at its zero value, as the reference's /json does.
            if status.limit_remaining != 0 {
                out.insert("limitRemaining".into(), json!(status.limit_remaining));
            }
            if let Some(duration) = &status.duration_until_reset {
                out.insert(
                    "durationUntilReset".into(),
                    json!(format!("{}s", duration.seconds)),
                );
            }
            Value::Object(out)
        })
        .collect();
    let mut out = Map::new();
    out.insert(
        "overallCode".into(),
        json!(code_name(response.overall_code)),
    );
    out.insert("statuses".into(), Value::Array(statuses));
    if !response.response_headers_to_add.is_empty() {
        let headers: Vec<Value> = response
            .response_headers_to_add
            .iter()
            .map(|h| json!({"key": h.key, "value": h.value}))
            .collect();
        out.insert("responseHeadersToAdd".into(), Value::Array(headers));
    }
    if let Some(metadata) = &response.dynamic_metadata {
        out.insert("dynamicMetadata".into(), struct_json(metadata));
    }
    Value::Object(out)
}

fn code_name(code: i32) -> &'static str {
    Code::try_from(code).map_or("UNKNOWN", |c| c.as_str_name())
}

/// A protobuf Struct as the JSON object it stands for.
fn struct_json(fields: &prost_types::Struct) -> Value {
    Value::Object(
        fields
            .fields
            .iter()
            .map(|(name, value)| (name.clone(), value_json(value)))
            .collect(),
    )
}

fn value_json(value: &prost_types::Value) -> Value {
    use prost_types::value::Kind;
    match &value.kind {
        None | Some(Kind::NullValue(_)) => Value::Null,
        Some(Kind::NumberValue(n)) => json!(n),
        Some(Kind::StringValue(s)) => json!(s),
        Some(Kind::BoolValue(b)) => json!(b),
        Some(Kind::StructValue(fields)) => struct_json(fields),
        Some(Kind::ListValue(list)) => Value::Array(list.values.iter().map(value_json).collect()),
    }
}
