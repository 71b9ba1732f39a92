//! Request checks before any matching: every violation is INVALID_ARGUMENT naming the field.
//! Only what no limit could answer is refused: an empty domain or descriptor list, an unknown
//! unit in a limit override, a release whose lease token sluice cannot have issued, and sizes
//! beyond the bounds.

use crate::ticket;
use crate::DecisionError;
use sluice_core::lease::LEASE_KEY;
use sluice_core::limit::Unit;
use sluice_proto::RateLimitRequest;

/// Size bounds of a request; anything larger is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestBounds {
    pub max_descriptors: usize,
    pub max_entries: usize,
    pub max_key_bytes: usize,
    pub max_value_bytes: usize,
}

/// The defaults cover anything Envoy sends: a header-valued entry carries up to the 60 KiB
/// of Envoy's default `max_request_headers_kb`, and the reference answers requests of 100
/// descriptors of 20 entries. They bound abuse (a gRPC message is at most 4 MiB), not traffic.
impl Default for RequestBounds {
    fn default() -> Self {
        RequestBounds {
            max_descriptors: 1024,
            max_entries: 256,
            max_key_bytes: 65_536,
            max_value_bytes: 65_536,
        }
    }
}

/// Checks `request` against the protocol's rules and `bounds`. Allocates only to report.
pub fn validate_request(
    request: &RateLimitRequest,
    bounds: &RequestBounds,
) -> Result<(), DecisionError> {
    for (field, size, bound, unit) in [
        (
            "domain",
            request.domain.len(),
            bounds.max_value_bytes,
            "bytes",
        ),
        (
            "descriptors",
            request.descriptors.len(),
            bounds.max_descriptors,
            "descriptors",
        ),
    ] {
        if size == 0 {
            return invalid(field, "must not be empty");
        }
        check_size(|| field.into(), size, bound, unit)?;
    }
    for (index, descriptor) in request.descriptors.iter().enumerate() {
        // A descriptor without entries, or an entry with an empty key, matches no limit and
        // is answered OK, as the reference answers it.
        let entries = || format!("descriptors[{index}].entries");
        check_size(
            entries,
            descriptor.entries.len(),
            bounds.max_entries,
            "entries",
        )?;
        for (entry_index, entry) in descriptor.entries.iter().enumerate() {
            let field = |name: &str| format!("descriptors[{index}].entries[{entry_index}].{name}");
            check_size(
                || field("key"),
                entry.key.len(),
                bounds.max_key_bytes,
                "bytes",
            )?;
            check_size(
                || field("value"),
                entry.value.len(),
                bounds.max_value_bytes,
                "bytes",
            )?;
            let refused = ticket::refused_entry(&entry.key, &entry.value);
            if let Some(reason) = refused {
                return invalid(&field("value"), reason);
            }
        }
        let names = |key: &str| descriptor.entries.iter().any(|e| e.key == key);
        if names(LEASE_KEY) && ticket::returns_any(descriptor) {
            let reason = "a descriptor releases leases or settles a hold, not both: send each its own descriptor";
            return invalid(&entries(), reason);
        }
        if let Some(limit) = &descriptor.limit {
            if Unit::from_proto_number(limit.unit).is_none() {
                let reason = format!("{} is not a unit of time", limit.unit);
                return invalid(&format!("descriptors[{index}].limit.unit"), &reason);
            }
        }
    }
    Ok(())
}

/// Refuses a size over `max`; `field` names it, built only then.
fn check_size(
    field: impl FnOnce() -> String,
    size: usize,
    max: usize,
    what: &str,
) -> Result<(), DecisionError> {
    if size > max {
        return invalid(
            &field(),
            &format!("{size} {what} exceed the maximum of {max}"),
        );
    }
    Ok(())
}

fn invalid(field: &str, reason: &str) -> Result<(), DecisionError> {
    Err(DecisionError::invalid(field, reason))
}
