//! A concurrency limit's lease at the request's edges: the token in a request's descriptor
//! (a release), written into a response's dynamic metadata (an acquire) and read back from
//! it, on Envoy's protos. The token
//! itself, its format and the entry's key are the core's (`sluice_core::lease`).

pub use sluice_core::lease::*;

use prost_types::value::Kind;
use prost_types::{Struct, Value};
use sluice_proto::{RateLimitDescriptor, RateLimitResponse};

/// Why a descriptor entry cannot be a release's token, when its key says it is one.
pub fn refused_entry(key: &str, value: &str) -> Option<&'static str> {
    (key == LEASE_KEY && parse_token(value).is_none())
        .then_some("is not a lease token sluice issued (16 hex digits)")
}

/// The token a descriptor releases: its `sluice.lease` entry's (validated before).
pub fn released_token(descriptor: &RateLimitDescriptor) -> Option<u64> {
    descriptor
        .entries
        .iter()
        .find(|entry| entry.key == LEASE_KEY)
        .and_then(|entry| parse_token(&entry.value))
}

/// The token a response carries (for clients of the library: `simulate`, tests).
pub fn token_in(response: &RateLimitResponse) -> Option<String> {
    let value = response.dynamic_metadata.as_ref()?.fields.get(LEASE_KEY)?;
    match &value.kind {
        Some(Kind::StringValue(token)) => Some(token.clone()),
        _ => None,
    }
}

/// Adds the token of the leases a request took (`sluice.lease`, docs/concurrency.md), whether
/// or not the reference's metadata is on.
pub fn add_token(metadata: &mut Struct, token: u64) {
    let value = Value {
        kind: Some(Kind::StringValue(format_token(token))),
    };
    metadata.fields.insert(LEASE_KEY.into(), value);
}
