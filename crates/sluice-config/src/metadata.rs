//! The `metadata` of a rule as the protobuf Struct it is returned as in dynamic metadata,
//! converted once when the configuration is compiled, not on every request.

use prost_types::value::Kind;
use prost_types::{ListValue, Struct, Value};

/// The metadata map as a Struct; metadata that is not a map contributes no fields.
pub fn to_struct(metadata: &serde_yaml::Value) -> Struct {
    match yaml(metadata).kind {
        Some(Kind::StructValue(fields)) => fields,
        _ => Struct::default(),
    }
}

/// A YAML value as a protobuf Value (keys that are not strings are written as YAML).
fn yaml(value: &serde_yaml::Value) -> Value {
    use serde_yaml::Value as Y;
    let kind = match value {
        Y::Null => Kind::NullValue(0),
        Y::Bool(b) => Kind::BoolValue(*b),
        Y::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or_default()),
        Y::String(s) => Kind::StringValue(s.clone()),
        Y::Sequence(items) => Kind::ListValue(ListValue {
            values: items.iter().map(yaml).collect(),
        }),
        Y::Mapping(map) => Kind::StructValue(Struct {
            fields: map
                .iter()
                .map(|(k, v)| {
                    let key = match k {
                        Y::String(s) => s.clone(),
                        other => serde_yaml::to_string(other)
                            .unwrap_or_default()
                            .trim()
                            .to_string(),
                    };
                    (key, yaml(v))
                })
                .collect(),
        }),
        Y::Tagged(tagged) => return yaml(&tagged.value),
    };
    Value { kind: Some(kind) }
}
