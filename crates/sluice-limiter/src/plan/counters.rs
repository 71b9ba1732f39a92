//! The counters of Limitador's limits that apply to a request (docs/kuadrant.md): each
//! limit of the domain tried against the request's descriptors, and each that applies planned
//! as one more entry of the request, charged with its other hits, all or nothing.

use sluice_config::cel_limits::{Bindings, CelLimit};
use sluice_config::Domain;
use sluice_core::identity;
use sluice_proto::{RateLimitDescriptor, RateLimitRequest};

use super::{Planned, Shape};
use crate::response::Applied;
use crate::seen::SeenCounters;
use crate::ticket;

/// The counters of Limitador's limits of `domain` that apply to `request` (docs/kuadrant.md),
/// each charged the request's cost: its descriptors' own `hits_addend` when the first
/// carries one, else `default_cost`; each noted in `seen` at `now_us`.
pub fn counters<'a>(
    domain: &'a Domain,
    request: &RateLimitRequest,
    default_cost: u64,
    shape: Option<Shape<'_>>,
    (seen, now_us): (&SeenCounters, u64),
) -> Vec<Planned<'a>> {
    let bindings = Bindings::of(request.descriptors.iter().map(|d| {
        d.entries
            .iter()
            .map(|entry| (entry.key.as_str(), entry.value.as_str()))
    }));
    let own_cost = request.descriptors.first().and_then(|d| d.hits_addend);
    let cost = (own_cost.unwrap_or(default_cost), own_cost);
    let tokens = RequestTokens::of(&request.descriptors);
    domain
        .cel_limits
        .iter()
        .filter_map(|limit| {
            let values = limit.counter(&bindings)?;
            let planned = counter(&request.domain, limit, &values, cost, tokens, shape);
            seen.note(&planned.key, &request.domain, limit, &values, now_us);
            Some(planned)
        })
        .collect()
}

/// The tokens a request's descriptors return or name (the first descriptor's that does), for
/// what applies to the request as a whole: Limitador's limits.
#[derive(Clone, Copy, Default)]
struct RequestTokens {
    returned: Option<(u8, u64)>,
    named: Option<(u8, u64)>,
}

impl RequestTokens {
    fn of(descriptors: &[RateLimitDescriptor]) -> RequestTokens {
        RequestTokens {
            returned: descriptors.iter().find_map(ticket::returned),
            named: descriptors.iter().find_map(ticket::named),
        }
    }
}

/// One counter of Limitador's `limit` in domain `domain_name`, named by its variables'
/// `values`, charged `cost` (its own when the request's descriptors carry one), changed by
/// `shape`; a request returning a token applies it only when the shaped limit takes that
/// token.
fn counter<'a>(
    domain_name: &str,
    limit: &'a CelLimit,
    values: &[String],
    (cost, own_cost): (u64, Option<u64>),
    tokens: RequestTokens,
    shape: Option<Shape<'_>>,
) -> Planned<'a> {
    let mut counted = limit.limit.clone();
    if let Some(shape) = shape {
        shape(&mut counted);
    }
    let returns_to = tokens.returned.map(|(row, _)| row);
    let applies =
        returns_to.is_none() || counted.modifiers.ticket().map(|(row, _)| row) == returns_to;
    let entries = std::iter::once(("limitador", limit.identity.as_str())).chain(
        limit
            .variable_sources()
            .zip(values.iter().map(String::as_str)),
    );
    Planned {
        unlimited: false,
        limits: applies
            .then(|| Applied {
                limit: counted,
                name: limit.name.as_deref().unwrap_or_default(),
                shadow_mode: false,
                quota_mode: false,
                metadata: None,
                slot: None,
                beside_passing_quota: false,
            })
            .into_iter()
            .collect(),
        key: identity::descriptor_key(domain_name, entries),
        cost,
        replaces: &[],
        labels: None,
        release: None,
        returned: tokens.returned,
        named: tokens.named,
        own_cost,
    }
}
