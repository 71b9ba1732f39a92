//! The admin API's requests and answers as JSON (the HTTP side; the gRPC side converts its
//! messages to and from these): field names are the proto's, so both read alike.

use serde::{Deserialize, Serialize};

use sluice_config::overrides::EntryDoc;

/// `PUT /v1/overrides`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PutOverride {
    pub domain: String,
    pub descriptor: Vec<EntryDoc>,
    #[serde(default)]
    pub name: Option<String>,
    pub limit: serde_json::Value,
    #[serde(default)]
    pub shadow_mode: Option<bool>,
    #[serde(default)]
    pub expires_at: Option<String>,
    #[serde(default)]
    pub ttl: Option<String>,
}

/// A descriptor, and optionally one of its limits by name.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DescriptorRef {
    pub domain: String,
    pub descriptor: Vec<EntryDoc>,
    #[serde(default)]
    pub name: Option<String>,
}

/// `POST /v1/descriptors/reset`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reset {
    pub domain: String,
    pub descriptor: Vec<EntryDoc>,
    #[serde(default)]
    pub name: Option<String>,
    /// Clear the records the limits' modifiers keep of a client too (their parts that a
    /// reset may clear); the field is named for the first of them, the penalty's.
    #[serde(default, rename = "penalties")]
    pub records: bool,
}

impl Reset {
    /// The reset a gRPC call asks for, its descriptor already read.
    pub fn of_grpc(
        request: sluice_proto::sluice::admin::v1::ResetRequest,
        descriptor: Vec<EntryDoc>,
    ) -> Reset {
        Reset {
            domain: request.domain,
            descriptor,
            name: Some(request.name),
            records: request.penalties,
        }
    }
}

/// `POST /v1/descriptors/credit`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Credit {
    pub domain: String,
    pub descriptor: Vec<EntryDoc>,
    #[serde(default)]
    pub name: Option<String>,
    pub amount: u64,
}

/// One limit in force and its counters.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct LimitState {
    pub name: String,
    pub source: &'static str,
    pub limit: String,
    pub algorithm: &'static str,
    pub requests_per_unit: u32,
    pub unit: String,
    pub unit_multiplier: u32,
    pub shadow_mode: bool,
    pub used: u64,
    pub remaining: u64,
    pub held: u64,
    pub reset_at: String,
    pub reset_after_ms: u64,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub expires_at: String,
}

/// What applies to a descriptor, and its counters.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct DescriptorState {
    pub domain: String,
    pub descriptor: Vec<EntryDoc>,
    pub rule: String,
    pub unlimited: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unlimited_source: Option<&'static str>,
    pub limits: Vec<LimitState>,
}

/// A reset's answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ResetOutcome {
    pub cleared: u64,
    pub kept: Vec<String>,
    pub state: DescriptorState,
}
