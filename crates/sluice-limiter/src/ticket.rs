//! The tokens a request carries at its edges, on Envoy's protos: a concurrency limit's lease
//! (`sluice.lease`, whose token and format are the core's `sluice_core::lease`) and the
//! tickets of the modifiers that keep something for a request in flight (holds on a budget).
//! Here are the descriptor entries that return a token or name one (left out of matching),
//! and the token written into a response's dynamic metadata and read back from it. Which
//! entries a ticket reads, and what its token is, are each modifier's own
//! (`sluice_core::modifier::Ticket`); nothing here names a modifier.

use prost_types::value::Kind;
use prost_types::{Struct, Value};
use sluice_core::lease::{self, LEASE_KEY};
use sluice_core::modifier::{Modifiers, Ticket};
use sluice_proto::{RateLimitDescriptor, RateLimitResponse};

/// What every entry that returns or names a token starts with (a lease's, each ticket's: a
/// test holds them to it), so that a descriptor without one is known at a glance.
pub const TOKEN_PREFIX: &str = "sluice.";

/// Whether a descriptor may carry a token: an entry under a key of `TOKEN_PREFIX`.
pub fn carries_token(descriptor: &RateLimitDescriptor) -> bool {
    descriptor
        .entries
        .iter()
        .any(|entry| entry.key.starts_with(TOKEN_PREFIX))
}

/// Why a descriptor entry cannot return or name a token, when its key says it does.
pub fn refused_entry(key: &str, value: &str) -> Option<&'static str> {
    if key == LEASE_KEY {
        return lease::parse_token(value)
            .is_none()
            .then_some("is not a lease token sluice issued (16 hex digits)");
    }
    Modifiers::tickets()
        .into_iter()
        .find(|(_, ticket)| ticket.reads(key))
        .filter(|(_, ticket)| (ticket.id)(value).is_none())
        .map(|(_, ticket)| ticket.refusal)
}

/// The token under `key` in `descriptor`, as `ticket` reads it.
fn entry_token(descriptor: &RateLimitDescriptor, ticket: &Ticket, key: &str) -> Option<u64> {
    descriptor
        .entries
        .iter()
        .find(|entry| entry.key == key)
        .and_then(|entry| (ticket.id)(&entry.value))
}

/// The token a descriptor returns, with the registry row of the modifier it returns it to.
pub fn returned(descriptor: &RateLimitDescriptor) -> Option<(u8, u64)> {
    Modifiers::tickets().into_iter().find_map(|(row, ticket)| {
        entry_token(descriptor, &ticket, ticket.key).map(|token| (row, token))
    })
}

/// The token a descriptor names for what it opens, with the modifier's registry row.
pub fn named(descriptor: &RateLimitDescriptor) -> Option<(u8, u64)> {
    Modifiers::tickets().into_iter().find_map(|(row, ticket)| {
        let key = ticket.named_key?;
        entry_token(descriptor, &ticket, key).map(|token| (row, token))
    })
}

/// Whether a descriptor returns a token to any modifier.
pub fn returns_any(descriptor: &RateLimitDescriptor) -> bool {
    let tickets = Modifiers::tickets();
    descriptor
        .entries
        .iter()
        .any(|entry| tickets.iter().any(|(_, ticket)| entry.key == ticket.key))
}

/// The lease token a descriptor releases: its `sluice.lease` entry's (validated before).
pub fn released_lease(descriptor: &RateLimitDescriptor) -> Option<u64> {
    descriptor
        .entries
        .iter()
        .find(|entry| entry.key == LEASE_KEY)
        .and_then(|entry| lease::parse_token(&entry.value))
}

/// Whether an entry takes part in matching: every one but a lease's or a ticket's.
pub fn is_matched(key: &str) -> bool {
    lease::is_matched(key)
        && !Modifiers::tickets()
            .iter()
            .any(|(_, ticket)| ticket.reads(key))
}

/// Adds the token of what a request opened (its leases under `sluice.lease`, docs/concurrency.md,
/// or a ticket's holds under the ticket's key) to its dynamic metadata, whether or not the
/// reference's metadata is on.
pub fn add_token(metadata: &mut Struct, key: &str, token: u64) {
    let value = Value {
        kind: Some(Kind::StringValue(lease::format_token(token))),
    };
    metadata.fields.insert(key.into(), value);
}

/// The token a response carries under `key` (for clients of the library: `simulate`,
/// `replay`, tests).
pub fn token_in(response: &RateLimitResponse, key: &str) -> Option<String> {
    let value = response.dynamic_metadata.as_ref()?.fields.get(key)?;
    match &value.kind {
        Some(Kind::StringValue(token)) => Some(token.clone()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_token_s_entry_starts_with_the_prefix() {
        assert!(LEASE_KEY.starts_with(TOKEN_PREFIX));
        for (_, ticket) in Modifiers::tickets() {
            assert!(ticket.key.starts_with(TOKEN_PREFIX), "{}", ticket.key);
            if let Some(named) = ticket.named_key {
                assert!(named.starts_with(TOKEN_PREFIX), "{named}");
            }
        }
    }
}
