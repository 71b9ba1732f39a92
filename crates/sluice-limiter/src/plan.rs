//! Matching each descriptor of a request to what applies to it (`plan`): the client's limit
//! override, or the configured rule's limits less those another limit `replaces`; the hits
//! they make (`hits`); and, once the store has decided, the limit that binds each descriptor
//! (`settle`): the one that denies, or else the one with the least remaining. An admin
//! override of the descriptor stands in for the rule's limits (`limits_in_force`).

mod counters;

use std::collections::HashSet;

use smallvec::SmallVec;

use crate::response::{Applied, Verdict};
use crate::ticket;
pub use counters::counters;
use sluice_config::overrides::DescriptorOverrides;
use sluice_config::{Domain, NamedLimit, Rule};
use sluice_core::engine;
use sluice_core::identity;
use sluice_core::labels::LimitLabels;
use sluice_core::lease::LeaseTokens;
use sluice_core::limit::{Decision, Hit, LeaseCall, LeaseOutcome, Limit, Unit};
use sluice_core::modifier::Ticket;
use sluice_proto::RateLimitDescriptor;

/// One descriptor after matching.
pub struct Planned<'a> {
    /// What applies when no limit does (no match, unlimited, all replaced).
    unlimited: bool,
    /// The limits to charge; all must admit a hit.
    limits: SmallVec<[Applied<'a>; 1]>,
    /// The descriptor's store key.
    key: String,
    cost: u64,
    replaces: &'a [String],
    /// The metric labels of the limits: the rule's own when fixed.
    labels: Option<Labels<'a>>,
    /// The token the descriptor releases (its `sluice.lease` entry): only its lease
    /// limits apply, each freeing what the token holds.
    release: Option<u64>,
    /// The token the descriptor returns to a modifier's ticket (with the modifier's registry
    /// row): only the limits carrying that modifier apply, each closing what the token holds
    /// at the cost.
    returned: Option<(u8, u64)>,
    /// The token the descriptor names for what it opens (with the modifier's row).
    named: Option<(u8, u64)>,
    /// The descriptor's own `hits_addend` (a modifier may make it the cost of an opening).
    own_cost: Option<u64>,
}

/// A change every configured limit a request falls under takes before it is applied (a front
/// end's own terms for the request: Kuadrant's holds apply to every limit).
pub type Shape<'s> = &'s (dyn Fn(&mut Limit) + Sync);

/// Matches one descriptor: the client's limit override if any, else the config's rule, with
/// the admin overrides of the descriptor (`overrides`, those in force) in place of its limits,
/// each changed by `shape` when given.
pub fn plan<'a>(
    domain: Option<&'a Domain>,
    domain_name: &str,
    descriptor: &'a RateLimitDescriptor,
    default_cost: u64,
    overrides: Option<InForce<'a>>,
    shape: Option<Shape<'_>>,
) -> Planned<'a> {
    // Most descriptors carry no token: nothing to look for.
    let tokens = ticket::carries_token(descriptor);
    let mut planned = Planned {
        unlimited: false,
        limits: SmallVec::new(),
        key: String::new(),
        cost: descriptor.hits_addend.unwrap_or(default_cost),
        replaces: &[],
        labels: None,
        release: tokens.then(|| ticket::released_lease(descriptor)).flatten(),
        returned: tokens.then(|| ticket::returned(descriptor)).flatten(),
        named: tokens.then(|| ticket::named(descriptor)).flatten(),
        own_cost: descriptor.hits_addend,
    };
    let Some(domain) = domain else {
        return planned;
    };
    let entries = descriptor
        .entries
        .iter()
        .map(|e| (e.key.as_str(), e.value.as_str()));
    if let Some(limit) = descriptor.limit {
        if planned.release.is_some() || planned.returned.is_some() {
            // An override is a plain rate: a release or a return frees nothing there.
            return planned;
        }
        // Validated: the unit is a known one.
        let unit = Unit::from_proto_number(limit.unit).unwrap_or(Unit::Second);
        planned.limits.push(Applied {
            limit: Limit::fixed_window(limit.requests_per_unit, unit),
            name: "",
            shadow_mode: false,
            quota_mode: false,
            metadata: None,
            slot: None,
            beside_passing_quota: false,
        });
        planned.key = identity::descriptor_key(domain_name, entries);
        let keys = descriptor.entries.iter().map(|e| e.key.as_str());
        planned.labels = Some(Labels::Made(Box::new(LimitLabels::of_override(
            domain_name,
            keys,
        ))));
        return planned;
    }
    let set_aside =
        planned.release.is_some() || planned.returned.is_some() || planned.named.is_some();
    // A release, a return or a named opening matches without its token.
    let pairs: SmallVec<[(&str, &str); 8]> = entries
        .filter(|(key, _)| !set_aside || ticket::is_matched(key))
        .collect();
    let matched = domain.resolve_reading(&pairs);
    let Some(matched) = matched else {
        return planned;
    };
    let rule = matched.rule;
    // An unlimited rule's `replaces` still applies, as in the reference.
    planned.replaces = &rule.replaces;
    let releases = planned.release.is_some();
    let returns_to = planned.returned.map(|(row, _)| row);
    let limits = &mut planned.limits;
    let limited = limits_in_force(rule, overrides, |mut named| {
        if let Some(shape) = shape {
            shape(&mut named.limit);
        }
        let returned_to = || named.limit.modifiers.ticket().map(|(row, _)| row);
        if (releases && !named.limit.algorithm().leases())
            || (returns_to.is_some() && returned_to() != returns_to)
        {
            return;
        }
        // What the limit's modifiers read of the descriptor.
        named.limit.modifiers.take_entries(pairs.iter().copied());
        limits.push(Applied {
            limit: named.limit,
            name: named.name,
            shadow_mode: named.shadow_mode,
            quota_mode: rule.quota_mode,
            metadata: rule.metadata.as_ref(),
            slot: named.slot,
            beside_passing_quota: false,
        });
    });
    if !limited {
        planned.unlimited = true;
        return planned;
    }
    planned.key = identity::descriptor_key(domain_name, matched.counted_entries());
    planned.labels = Some(match &rule.metric_labels {
        Some(labels) => Labels::Rule(labels),
        None => Labels::Made(Box::new(LimitLabels::of_match(
            domain_name,
            &matched.levels,
            rule.detailed_metric,
        ))),
    });
    planned
}

/// A descriptor's metric labels: its rule's own, or made for the request (boxed, so that a
/// plan borrowing its rule's, the common case, stays small as it is moved).
pub enum Labels<'a> {
    Rule(&'a LimitLabels),
    Made(Box<LimitLabels>),
}

impl std::ops::Deref for Labels<'_> {
    type Target = LimitLabels;

    fn deref(&self) -> &LimitLabels {
        match self {
            Labels::Rule(labels) => labels,
            Labels::Made(labels) => labels,
        }
    }
}

/// The admin overrides of a descriptor, and the time they are in force at.
#[derive(Clone, Copy)]
pub struct InForce<'a> {
    pub overrides: &'a DescriptorOverrides,
    pub now_us: u64,
}

/// One limit to apply, as the rule or an override gives it, with its slot among several
/// (`None`: the descriptor's own key).
struct Named<'a> {
    slot: Option<usize>,
    limit: Limit,
    name: &'a str,
    shadow_mode: bool,
}

/// Gives `each` the limits that apply to a descriptor under `rule`, in order; false when it
/// is unlimited. An override of every limit replaces them all with its one, counted under the
/// descriptor's own key (named as the rule's limit when it has one); an override of a name
/// replaces that limit in its slot.
fn limits_in_force<'a>(
    rule: &'a Rule,
    overrides: Option<InForce<'a>>,
    mut each: impl FnMut(Named<'a>),
) -> bool {
    let several = rule.limits.len() > 1;
    let name_of = |named: &'a NamedLimit| named.name.as_deref().unwrap_or_default();
    if let Some(every) = overrides.and_then(|o| o.overrides.every_limit(o.now_us)) {
        let Some(limit) = every.limit.clone() else {
            return false;
        };
        let name = match rule.limits.as_slice() {
            [only] => name_of(only),
            _ => "",
        };
        let shadow_mode = every.shadow_mode.unwrap_or(rule.shadow_mode);
        each(Named {
            slot: None,
            limit,
            name,
            shadow_mode,
        });
        return true;
    }
    if rule.is_unlimited() {
        return false;
    }
    for (slot, named) in rule.limits.iter().enumerate() {
        let name = name_of(named);
        let replaced = overrides
            .filter(|_| !name.is_empty())
            .and_then(|o| o.overrides.of_name(name, o.now_us));
        let (limit, shadow_mode) = match replaced {
            Some(o) => (o.limit.clone(), o.shadow_mode.unwrap_or(rule.shadow_mode)),
            None => (named.limit.clone(), rule.shadow_mode),
        };
        if let Some(limit) = limit {
            each(Named {
                slot: several.then_some(slot),
                limit,
                name,
                shadow_mode,
            });
        }
    }
    true
}

impl Planned<'_> {
    /// The cost a hit of `limit` carries: what its modifiers make an opening cost, else the
    /// descriptor's cost.
    fn cost_of(&self, limit: &Limit) -> u64 {
        if self.returned.is_some() {
            return self.cost;
        }
        limit
            .modifiers
            .opening_cost(self.own_cost, limit.requests_per_unit)
            .unwrap_or(self.cost)
    }

    /// Whether no limit applies to the descriptor (no match, or every limit replaced); an
    /// `unlimited` rule is not this.
    pub fn has_no_limit(&self) -> bool {
        !self.unlimited && self.limits.is_empty()
    }
}

/// Puts every limit of the request in quota mode (`QUOTA_MODE`). As in the reference, a
/// descriptor no limit applies to then counts as a quota descriptor that passed: the
/// request's quota limits can no longer all be over, so none of them denies it.
pub fn all_in_quota_mode(planned: &mut [Planned<'_>]) {
    let beside_passing_quota = planned.iter().any(Planned::has_no_limit);
    for applied in planned.iter_mut().flat_map(|p| p.limits.iter_mut()) {
        applied.quota_mode = true;
        applied.beside_passing_quota = beside_passing_quota;
    }
}

/// A matched limit whose name another matched limit of the request replaces is skipped; a
/// descriptor whose every limit is skipped has none.
pub fn apply_replaces(planned: &mut [Planned<'_>]) {
    let replaced: HashSet<&str> = planned
        .iter()
        .flat_map(|p| p.replaces.iter().map(String::as_str))
        .collect();
    if replaced.is_empty() {
        return;
    }
    for p in planned.iter_mut() {
        p.limits
            .retain(|applied| applied.name.is_empty() || !replaced.contains(applied.name));
    }
}

/// The hits of a request: up to two (most requests) take no allocation; a request's future
/// holds them across the store's call, so a larger inline size would be copied with it.
pub type Hits = SmallVec<[Hit; 2]>;

/// The tokens a request's hits were given: the one its leases are taken under, and the one
/// a modifier's ticket opens under (issued, or the request's own name for it).
#[derive(Debug, Clone, Copy, Default)]
pub struct Tokens {
    pub lease: Option<u64>,
    pub ticket: Option<(Ticket, u64)>,
}

/// The hits of the request: one per limit of each descriptor, a descriptor's limits after
/// its first joining it, each under its own key (a rule with one limit keeps the key
/// envoyproxy/ratelimit uses, moved out of the plan: nothing reads it after; the limits of a
/// rule of several add their slot). A lease limit's hit releases the descriptor's
/// token, or acquires under the request's, issued by `tokens` when the first is needed; the
/// hit of a limit whose modifier has a ticket returns the descriptor's token at the cost, or
/// opens under the descriptor's own name for it or the request's token.
/// They are added to `hits`; returns the tokens given.
pub fn hits(planned: &mut [Planned<'_>], tokens: &LeaseTokens, hits: &mut Hits) -> Tokens {
    let mut issued = None;
    let mut given = Tokens::default();
    for p in planned {
        for (index, applied) in p.limits.iter().enumerate() {
            let key = match applied.slot {
                Some(slot) => identity::limit_key(&p.key, slot),
                None => std::mem::take(&mut p.key),
            };
            let cost = p.cost_of(&applied.limit);
            let lease = if applied.limit.algorithm().leases() {
                Some(match p.release {
                    Some(token) => LeaseCall::Release(token),
                    None => {
                        let token = *issued.get_or_insert_with(|| tokens.issue());
                        given.lease = Some(token);
                        LeaseCall::Acquire(token)
                    }
                })
            } else if let Some((row, ticket)) = applied.limit.modifiers.ticket() {
                let own = |of: Option<(u8, u64)>| of.filter(|(r, _)| *r == row).map(|(_, t)| t);
                Some(match own(p.returned) {
                    Some(token) => LeaseCall::Release(token),
                    None => {
                        let token = own(p.named)
                            .unwrap_or_else(|| *issued.get_or_insert_with(|| tokens.issue()));
                        given.ticket.get_or_insert((ticket, token));
                        LeaseCall::Acquire(token)
                    }
                })
            } else {
                None
            };
            hits.push(Hit {
                key,
                limit: applied.limit.clone(),
                cost,
                role: applied.role(),
                joins_previous: index > 0,
                lease,
            });
        }
    }
    given
}

/// What each descriptor got: its verdict, the cost, the metric labels, and the decision of
/// each of its limits with the cost each was asked (what its modifiers noted, for the metrics
/// and the response); the binding limit's decision and its lease limit's (the first, when it
/// has several) are places among them, read by `decision` and `lease` (so that a descriptor
/// moved from one step to the next stays small).
pub struct Bound<'a> {
    pub verdict: Verdict<'a>,
    pub cost: u64,
    pub labels: Option<Labels<'a>>,
    pub taken: SmallVec<[(Decision, u64); 1]>,
    /// The name the binding limit that denied the descriptor goes by (`name`, else its
    /// stats key), when its modifiers name their denials.
    pub denied_by: Option<String>,
    binding: Option<u8>,
    lease_at: Option<u8>,
    releases: bool,
}

impl Bound<'_> {
    /// The binding limit's decision (none when no limit applied).
    pub fn decision(&self) -> Option<Decision> {
        self.binding
            .and_then(|at| self.taken.get(usize::from(at)))
            .map(|(decision, _)| *decision)
    }

    /// What its lease limit did, when it has one.
    pub fn lease(&self) -> Option<LeaseOutcome> {
        let (decision, _) = self.taken.get(usize::from(self.lease_at?))?;
        Some(LeaseOutcome {
            decision: *decision,
            cost: self.cost,
            releases: self.releases,
            descriptor_denied: self.taken.iter().any(|(d, _)| !d.admitted),
        })
    }
}

/// Whether a decision of the request opened what `ticket` gives a token for (a request that
/// was vetoed opened nothing: its decisions carry no mark).
pub fn opened(bound: &[Bound<'_>], ticket: &Ticket) -> bool {
    bound
        .iter()
        .flat_map(|s| &s.taken)
        .any(|(decision, _)| (ticket.opened)(decision))
}

/// Pairs each descriptor with its binding limit and that limit's decision, given the store's
/// `decisions` for `hits(planned)`, in order.
pub fn bind<'a>(
    planned: impl IntoIterator<Item = Planned<'a>>,
    decisions: &[Decision],
) -> SmallVec<[Bound<'a>; 2]> {
    let mut decisions = decisions.iter();
    planned
        .into_iter()
        .map(|p| {
            let taken: SmallVec<[(Decision, u64); 1]> = p
                .limits
                .iter()
                .zip(decisions.by_ref())
                .map(|(applied, decision)| (*decision, p.cost_of(&applied.limit)))
                .collect();
            let lease_at = p
                .limits
                .iter()
                .take(taken.len())
                .position(|applied| applied.limit.algorithm().leases())
                .and_then(|at| u8::try_from(at).ok());
            let binding = if taken.len() == 1 {
                Some(0)
            } else {
                let only: SmallVec<[Decision; 2]> = taken.iter().map(|(d, _)| *d).collect();
                engine::binding(&only)
            };
            let bound = binding.and_then(|index| {
                let (decision, cost) = *taken.get(index)?;
                let applied = p.limits.into_iter().nth(index)?;
                Some((applied, decision, cost, u8::try_from(index).ok()?))
            });
            match bound {
                Some((applied, decision, cost, at)) => Bound {
                    cost,
                    denied_by: denied_by(&applied, &decision, p.labels.as_deref()),
                    verdict: Verdict::Limited(applied),
                    labels: p.labels,
                    taken,
                    binding: Some(at),
                    lease_at,
                    releases: p.release.is_some(),
                },
                None => Bound {
                    verdict: if p.unlimited {
                        Verdict::Unlimited
                    } else {
                        Verdict::NoLimit
                    },
                    cost: p.cost,
                    labels: None,
                    taken,
                    denied_by: None,
                    binding: None,
                    lease_at: None,
                    releases: false,
                },
            }
        })
        .collect()
}

/// What `sluice.denied_by` says of the binding limit that denied a descriptor: its `name`,
/// else its stats key, with the class its modifiers put the request in (`name/batch`).
/// Named where a modifier names its denials and for a limit shared by classes; other
/// denials answer as the reference's.
fn denied_by(
    applied: &Applied<'_>,
    decision: &Decision,
    labels: Option<&LimitLabels>,
) -> Option<String> {
    let modifiers = &applied.limit.modifiers;
    let class = modifiers.class();
    if decision.admitted || (!modifiers.names_denial() && class.is_none()) {
        return None;
    }
    let mut name = match applied.name {
        "" => labels.map(|l| l.stats_key.clone()).unwrap_or_default(),
        name => name.to_string(),
    };
    if let Some(class) = class {
        name.push('/');
        name.push_str(class.name);
    }
    Some(name)
}

/// One limit in force for a descriptor, as the admin API reads and changes it: its name, the
/// limit, its shadow mode, whether an override gave it, and the hit of cost 0 a request would
/// make on it (its key; no lease, no hold).
#[derive(Debug, Clone)]
pub struct LimitInForce {
    pub name: String,
    pub limit: Limit,
    pub shadow_mode: bool,
    pub overridden: bool,
    pub hit: Hit,
}

/// What applies to one descriptor, for the admin API.
#[derive(Debug, Clone)]
pub enum DescriptorInForce {
    /// No rule of the domain matches it.
    NoRule,
    /// Nothing limits it: `unlimited: true` (`overridden`: by an override).
    Unlimited { rule: String, overridden: bool },
    /// These limits apply (none, when every limit is in another descriptor's `replaces`).
    Limits {
        rule: String,
        limits: Vec<LimitInForce>,
    },
}

/// What applies to `descriptor` of `domain_name` under `domain` and its overrides, as a
/// request would find it (its keys included).
pub fn in_force(
    domain: &Domain,
    domain_name: &str,
    descriptor: &RateLimitDescriptor,
    overrides: Option<InForce<'_>>,
) -> DescriptorInForce {
    let entries: SmallVec<[(&str, &str); 8]> = descriptor
        .entries
        .iter()
        .map(|e| (e.key.as_str(), e.value.as_str()))
        .collect();
    let Some(matched) = domain.resolve_reading(&entries) else {
        return DescriptorInForce::NoRule;
    };
    let rule = matched.rule.full_key.clone();
    let every = overrides.and_then(|o| o.overrides.every_limit(o.now_us));
    let planned = plan(Some(domain), domain_name, descriptor, 0, overrides, None);
    if planned.unlimited {
        return DescriptorInForce::Unlimited {
            rule,
            overridden: every.is_some(),
        };
    }
    let limits = planned
        .limits
        .iter()
        .map(|applied| {
            let key = match applied.slot {
                Some(slot) => identity::limit_key(&planned.key, slot),
                None => planned.key.clone(),
            };
            let overridden = every.is_some()
                || overrides
                    .filter(|_| !applied.name.is_empty())
                    .is_some_and(|o| o.overrides.of_name(applied.name, o.now_us).is_some());
            LimitInForce {
                name: applied.name.to_string(),
                limit: applied.limit.clone(),
                shadow_mode: applied.shadow_mode,
                overridden,
                hit: Hit {
                    key,
                    limit: applied.limit.clone(),
                    cost: 0,
                    role: applied.role(),
                    joins_previous: false,
                    lease: None,
                },
            }
        })
        .collect();
    DescriptorInForce::Limits { rule, limits }
}
