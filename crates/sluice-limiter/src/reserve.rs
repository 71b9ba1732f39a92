//! A reserved budget at the request's edges (docs/budgets.md): the entries a descriptor names
//! a hold or a settle by (`sluice.hold`, `sluice.reserve`), and the token written into a
//! response's dynamic metadata (an opening) and read back from it, on Envoy's protos. The rules
//! and the hold ids are the core's (`sluice_core::modifier::reserve`).

pub use sluice_core::modifier::reserve::{hold_id, HOLD_KEY, SETTLE_KEY};

use prost_types::value::Kind;
use prost_types::{Struct, Value};
use sluice_proto::{RateLimitDescriptor, RateLimitResponse};

/// Why a descriptor entry cannot name a hold or a settle, when its key says it does one.
pub fn refused_entry(key: &str, value: &str) -> Option<&'static str> {
    ((key == SETTLE_KEY || key == HOLD_KEY) && value.is_empty()).then_some(
        "is empty: a hold is named by a token sluice issued or a value such as x-request-id",
    )
}

/// The value of the descriptor's entry under `key`, as a hold id.
fn entry_id(descriptor: &RateLimitDescriptor, key: &str) -> Option<u64> {
    descriptor
        .entries
        .iter()
        .find(|entry| entry.key == key)
        .map(|entry| hold_id(&entry.value))
}

/// The hold a descriptor settles: its `sluice.reserve` entry's.
pub fn settled_hold(descriptor: &RateLimitDescriptor) -> Option<u64> {
    entry_id(descriptor, SETTLE_KEY)
}

/// The hold a descriptor opens under a name of its own: its `sluice.hold` entry's.
pub fn named_hold(descriptor: &RateLimitDescriptor) -> Option<u64> {
    entry_id(descriptor, HOLD_KEY)
}

/// Whether an entry takes part in matching: every one but those naming a hold or a settle.
pub fn is_matched(key: &str) -> bool {
    key != SETTLE_KEY && key != HOLD_KEY
}

/// Adds the token of the holds a request opened (`sluice.reserve`), whether or not the
/// reference's metadata is on.
pub fn add_token(metadata: &mut Struct, token: u64) {
    let value = Value {
        kind: Some(Kind::StringValue(sluice_core::lease::format_token(token))),
    };
    metadata.fields.insert(SETTLE_KEY.into(), value);
}

/// The token a response carries (for clients of the library: `simulate`, tests).
pub fn token_in(response: &RateLimitResponse) -> Option<String> {
    let value = response.dynamic_metadata.as_ref()?.fields.get(SETTLE_KEY)?;
    match &value.kind {
        Some(Kind::StringValue(token)) => Some(token.clone()),
        _ => None,
    }
}
