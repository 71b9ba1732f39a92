//! envoyproxy/ratelimit's xDS configuration resource (`RateLimitConfig`, one domain) turned
//! into the documents a YAML file gives, so that configurations from files and from a
//! management server are compiled, validated and refused by the same code, with the same
//! messages.

use crate::file::{DescriptorDoc, FileDoc, RateLimitDoc, ReplacesDoc};
use sluice_proto::ratelimit::config::ratelimit::v3 as xds;

/// The document of one resource.
pub fn to_doc(config: &xds::RateLimitConfig) -> FileDoc {
    FileDoc {
        domain: Some(config.domain.clone()),
        descriptors: Some(config.descriptors.iter().map(descriptor).collect()),
    }
}

fn descriptor(node: &xds::RateLimitDescriptor) -> DescriptorDoc {
    DescriptorDoc {
        key: Some(node.key.clone()),
        value: Some(node.value.clone()).filter(|value| !value.is_empty()),
        rate_limit: node.rate_limit.as_ref().map(policy),
        rate_limits: None,
        descriptors: Some(node.descriptors.iter().map(descriptor).collect()),
        shadow_mode: node.shadow_mode,
        quota_mode: node.quota_mode,
        detailed_metric: node.detailed_metric,
        metadata: node.metadata.as_ref().map(struct_yaml),
        ..DescriptorDoc::default()
    }
}

fn policy(policy: &xds::RateLimitPolicy) -> RateLimitDoc {
    // UNKNOWN (0) is no unit: refused unless the limit is unlimited, as in the reference.
    let unit = xds::RateLimitUnit::try_from(policy.unit)
        .ok()
        .filter(|unit| *unit != xds::RateLimitUnit::Unknown)
        .map(|unit| unit.as_str_name().to_ascii_lowercase());
    RateLimitDoc {
        unit,
        requests_per_unit: Some(policy.requests_per_unit),
        unlimited: policy.unlimited,
        name: Some(policy.name.clone()).filter(|name| !name.is_empty()),
        replaces: Some(
            policy
                .replaces
                .iter()
                .map(|r| ReplacesDoc {
                    name: Some(r.name.clone()),
                })
                .collect(),
        )
        .filter(|replaces: &Vec<ReplacesDoc>| !replaces.is_empty()),
        ..RateLimitDoc::default()
    }
}

/// A protobuf Struct as the YAML map a file would hold.
fn struct_yaml(fields: &prost_types::Struct) -> serde_yaml::Value {
    serde_yaml::Value::Mapping(
        fields
            .fields
            .iter()
            .map(|(name, value)| (serde_yaml::Value::String(name.clone()), value_yaml(value)))
            .collect(),
    )
}

fn value_yaml(value: &prost_types::Value) -> serde_yaml::Value {
    use prost_types::value::Kind;
    use serde_yaml::Value as Y;
    match &value.kind {
        None | Some(Kind::NullValue(_)) => Y::Null,
        Some(Kind::NumberValue(n)) => Y::Number(serde_yaml::Number::from(*n)),
        Some(Kind::StringValue(s)) => Y::String(s.clone()),
        Some(Kind::BoolValue(b)) => Y::Bool(*b),
        Some(Kind::StructValue(s)) => struct_yaml(s),
        Some(Kind::ListValue(list)) => Y::Sequence(list.values.iter().map(value_yaml).collect()),
    }
}
