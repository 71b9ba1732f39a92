//! Matching each descriptor of a request to what applies to it (`plan`): the client's limit
//! override, or the configured rule's limits less those another limit `replaces`; the hits
//! they make (`hits`); and, once the store has decided, the limit that binds each descriptor
//! (`settle`): the one that denies, or else the one with the least remaining.

use std::borrow::Cow;
use std::collections::HashSet;

use smallvec::SmallVec;

use crate::lease::{self, LeaseTokens};
use crate::service::response::{Applied, Verdict};
use sluice_config::Domain;
use sluice_core::engine;
use sluice_core::labels::LimitLabels;
use sluice_core::limit::{Decision, Hit, LeaseCall, LeaseOutcome, Limit, Unit};
use sluice_proto::RateLimitDescriptor;
use sluice_store::key;

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
    labels: Option<Cow<'a, LimitLabels>>,
    /// The token the descriptor releases (its `sluice.lease` entry): only its concurrency
    /// limits apply, each freeing what the token holds.
    release: Option<u64>,
}

/// Matches one descriptor: the client's limit override if any, else the config's rule.
pub fn plan<'a>(
    domain: Option<&'a Domain>,
    domain_name: &str,
    descriptor: &'a RateLimitDescriptor,
    default_cost: u64,
) -> Planned<'a> {
    let mut planned = Planned {
        unlimited: false,
        limits: SmallVec::new(),
        key: String::new(),
        cost: descriptor.hits_addend.unwrap_or(default_cost),
        replaces: &[],
        labels: None,
        release: lease::released_token(descriptor),
    };
    let Some(domain) = domain else {
        return planned;
    };
    let entries = descriptor
        .entries
        .iter()
        .map(|e| (e.key.as_str(), e.value.as_str()));
    if let Some(limit) = descriptor.limit {
        if planned.release.is_some() {
            // An override is a rate: a release frees nothing there.
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
        planned.key = key::descriptor_key(domain_name, entries);
        let keys = descriptor.entries.iter().map(|e| e.key.as_str());
        planned.labels = Some(Cow::Owned(LimitLabels::of_override(domain_name, keys)));
        return planned;
    }
    let matched = if planned.release.is_some() {
        // A release matches without its token.
        let kept: SmallVec<[(&str, &str); 8]> =
            entries.filter(|(key, _)| lease::is_matched(key)).collect();
        domain.resolve(kept.into_iter())
    } else {
        domain.resolve(entries)
    };
    let Some(matched) = matched else {
        return planned;
    };
    let rule = matched.rule;
    // An unlimited rule's `replaces` still applies, as in the reference.
    planned.replaces = &rule.replaces;
    if rule.is_unlimited() {
        planned.unlimited = true;
        return planned;
    }
    let releases = planned.release.is_some();
    let several = rule.limits.len() > 1;
    planned.limits = rule
        .limits
        .iter()
        .enumerate()
        .filter(|(_, named)| !releases || named.limit.is_some_and(|l| l.algorithm().leases()))
        .filter_map(|(slot, named)| {
            Some(Applied {
                limit: named.limit?,
                name: named.name.as_deref().unwrap_or_default(),
                shadow_mode: rule.shadow_mode,
                quota_mode: rule.quota_mode,
                metadata: rule.metadata.as_ref(),
                slot: several.then_some(slot),
                beside_passing_quota: false,
            })
        })
        .collect();
    planned.key = key::descriptor_key(domain_name, matched.counted_entries());
    planned.labels = Some(match &rule.metric_labels {
        Some(labels) => Cow::Borrowed(labels),
        None => Cow::Owned(LimitLabels::of_match(
            domain_name,
            &matched.levels,
            rule.detailed_metric,
        )),
    });
    planned
}

impl Planned<'_> {
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

/// The hits of a request: a few descriptors take no allocation.
pub type Hits = SmallVec<[Hit; 4]>;

/// The hits of the request: one per limit of each descriptor, a descriptor's limits after
/// its first joining it, each under its own key (a rule with one limit keeps the key
/// envoyproxy/ratelimit uses, moved out of the plan: nothing reads it after; the limits of a
/// rule of several add their slot). A concurrency
/// limit's hit releases the descriptor's token, or acquires under the request's, issued by
/// `tokens` when the first is needed; returns that token too.
pub fn hits(planned: &mut [Planned<'_>], tokens: &LeaseTokens) -> (Hits, Option<u64>) {
    let mut hits = Hits::with_capacity(planned.len());
    let mut issued = None;
    for p in planned {
        for (index, applied) in p.limits.iter().enumerate() {
            let key = match applied.slot {
                Some(slot) => key::limit_key(&p.key, slot),
                None => std::mem::take(&mut p.key),
            };
            let lease = applied.limit.algorithm().leases().then(|| match p.release {
                Some(token) => LeaseCall::Release(token),
                None => LeaseCall::Acquire(*issued.get_or_insert_with(|| tokens.issue())),
            });
            hits.push(Hit {
                key,
                limit: applied.limit,
                cost: p.cost,
                role: applied.role(),
                joins_previous: index > 0,
                lease,
            });
        }
    }
    (hits, issued)
}

/// What each descriptor got: its verdict, the binding limit's decision, the cost, the
/// metric labels, its concurrency limit's decision (the first, when it has several), and the
/// decisions of its limits that a penalty's block denied.
pub struct Settled<'a> {
    pub verdict: Verdict<'a>,
    pub decision: Option<Decision>,
    pub cost: u64,
    pub labels: Option<Cow<'a, LimitLabels>>,
    pub lease: Option<LeaseOutcome>,
    pub blocks: SmallVec<[Decision; 1]>,
}

/// Pairs each descriptor with its binding limit and that limit's decision, given the store's
/// `decisions` for `hits(planned)`, in order.
pub fn settle<'a>(
    planned: impl IntoIterator<Item = Planned<'a>>,
    decisions: &[Decision],
) -> SmallVec<[Settled<'a>; 4]> {
    let mut decisions = decisions.iter();
    planned
        .into_iter()
        .map(|p| {
            let taken: SmallVec<[Decision; 1]> =
                decisions.by_ref().take(p.limits.len()).copied().collect();
            let lease = p
                .limits
                .iter()
                .zip(&taken)
                .find(|(applied, _)| applied.limit.algorithm().leases())
                .map(|(_, decision)| LeaseOutcome {
                    decision: *decision,
                    cost: p.cost,
                    releases: p.release.is_some(),
                    descriptor_denied: taken.iter().any(|d| !d.admitted),
                });
            let blocks = taken
                .iter()
                .filter(|d| d.penalty().until_us > 0)
                .copied()
                .collect();
            let bound = engine::binding(&taken).and_then(|index| {
                let applied = p.limits.into_iter().nth(index)?;
                Some((applied, *taken.get(index)?))
            });
            match bound {
                Some((applied, decision)) => Settled {
                    verdict: Verdict::Limited(applied),
                    decision: Some(decision),
                    cost: p.cost,
                    labels: p.labels,
                    lease,
                    blocks,
                },
                None => Settled {
                    verdict: if p.unlimited {
                        Verdict::Unlimited
                    } else {
                        Verdict::NoLimit
                    },
                    decision: None,
                    cost: p.cost,
                    labels: None,
                    lease: None,
                    blocks,
                },
            }
        })
        .collect()
}
