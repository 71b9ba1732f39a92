//! The request path as a library, above the stores and below every service (the RLS service,
//! the HTTP `/json` endpoint, `simulate`, `replay`): one call, `Limiter::decide`, takes a
//! request through validation (`validate`), matching each descriptor to its limits and
//! overrides (`plan`), one store call for every hit of the request (`Store::charge`), the
//! binding limit of each descriptor, the statuses and the overall code (`response`), and the
//! headers and dynamic metadata (`extras`, with the tokens of `ticket`, and what each
//! modifier says). It
//! knows the `Store` trait, never which store; services translate protocols, record metrics
//! and write logs around it.

pub mod error;
pub mod extras;
pub mod plan;
pub mod response;
pub mod seen;
pub mod ticket;
pub mod validate;

use std::sync::Arc;

use smallvec::SmallVec;
use tracing::{Instrument, Span};

pub use error::DecisionError;
pub use extras::{HeaderForm, HeaderNames};
pub use response::{Applied, Verdict};
use sluice_config::overrides::{DescriptorOverrides, OverrideIndex};
use sluice_config::Config;
use sluice_core::algorithm::Mark;
use sluice_core::engine::Charging;
use sluice_core::lease::{LeaseTokens, LEASE_KEY};
use sluice_core::limit::{Decision, Hit};
use sluice_core::modifier::{MetaField, Modifiers, Said};
use sluice_proto::rate_limit_response::Code;
use sluice_proto::{RateLimitRequest, RateLimitResponse};
use sluice_store::{Clock, Store, SystemClock};

use seen::SeenCounters;
pub use validate::RequestBounds;

/// What each descriptor's limit decided on its own: admitted or not (a shadow-mode limit's
/// denial included, which its status hides), or `None` where no limit applied.
pub type LimitDecisions = SmallVec<[Option<bool>; 4]>;

/// Request-path behaviour that settings choose.
#[derive(Debug, Clone, Default)]
pub struct LimiterOptions {
    pub bounds: RequestBounds,
    /// `SHADOW_MODE`: the overall code is always OK; descriptor statuses stay truthful.
    pub shadow_mode: bool,
    /// `QUOTA_MODE`: every limit is in quota mode.
    pub quota_mode: bool,
    /// `LIMIT_RESPONSE_HEADERS_ENABLED`: the header names, or `None` for no headers.
    pub response_headers: Option<HeaderNames>,
    /// `RESPONSE_DYNAMIC_METADATA`.
    pub response_dynamic_metadata: bool,
    /// `TRACING_ENABLED`: spans of the calls, keeping this share of the calls without a
    /// caller span (`TRACING_SAMPLING_RATE`).
    pub tracing: Option<f64>,
    /// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`: whether a denied request charges nothing.
    pub charging: Charging,
}

/// What one request got: the response, what each descriptor's limit decided, whether
/// `SHADOW_MODE` turned a denial into OK, when the store decided it (its clock), and how long
/// the store call took.
#[derive(Debug, Clone)]
pub struct Decided {
    pub response: RateLimitResponse,
    pub limits: LimitDecisions,
    pub shadowed: bool,
    pub decided_at_us: Option<u64>,
    /// How long the store call took, in seconds (0 when the request charged nothing).
    pub store_seconds: f64,
    /// What the limits' modifiers said of the request (in the dynamic metadata too).
    pub said: SmallVec<[MetaField; 1]>,
    /// Whether the domain is a namespace of Limitador's limits files (its calls are counted
    /// in Limitador's series too).
    pub limitador: bool,
}

/// How a request is asked of the store: how its hits are charged, and a change every
/// configured limit it falls under takes (`plan::Shape`), either before its hits are made
/// (`shape`: what the change adds acts, a modifier's ticket opens or settles) or after
/// (`shape_hits`: the hits keep the change's keys and state but open nothing).
/// `Limiter::decide` asks as the settings say; a front end with terms of its own (Kuadrant's
/// check, report and holds) asks its way.
#[derive(Clone, Copy)]
pub struct Asking<'s> {
    pub charging: Charging,
    pub shape: Option<plan::Shape<'s>>,
    pub shape_hits: Option<plan::Shape<'s>>,
}

/// What a request holds while the store decides: its plan, its hits and the tokens it
/// issued. On the heap, so that every future awaiting a decision stays a few hundred bytes
/// (moved, a future is copied whole: this was two kilobytes at each layer).
struct Pending<'a> {
    /// The domain has Limitador's limits.
    limitador: bool,
    planned: SmallVec<[plan::Planned<'a>; 2]>,
    hits: plan::Hits,
    tokens: plan::Tokens,
}

/// The request path over a store `S`.
pub struct Limiter<S> {
    store: Arc<S>,
    options: LimiterOptions,
    tokens: LeaseTokens,
    /// The admin overrides in force (docs/admin.md).
    overrides: Arc<OverrideIndex>,
    /// The counters of Limitador's limits asked about (`GET /counters/{namespace}`).
    seen: Arc<SeenCounters>,
}

impl<S: Store> Limiter<S> {
    pub fn new(store: Arc<S>, options: LimiterOptions) -> Limiter<S> {
        Limiter {
            store,
            options,
            tokens: LeaseTokens::new(),
            overrides: Arc::default(),
            seen: Arc::default(),
        }
    }

    /// The counters of Limitador's limits it has asked the store about.
    pub fn seen_counters(&self) -> &SeenCounters {
        &self.seen
    }

    /// The same limiter, with the admin overrides of `overrides` in place of the limits of
    /// their descriptors.
    pub fn with_overrides(mut self, overrides: Arc<OverrideIndex>) -> Self {
        self.overrides = overrides;
        self
    }

    /// The admin overrides it applies.
    pub fn overrides(&self) -> &Arc<OverrideIndex> {
        &self.overrides
    }

    /// The store it decides on.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The options it runs with.
    pub fn options(&self) -> &LimiterOptions {
        &self.options
    }

    /// Decides `request` under `config` (one snapshot for the whole request: a reload never
    /// mixes two configs in one answer). `observe` sees each descriptor bound to its limit,
    /// and whether the request was denied, before the response is written: the metrics'
    /// view of the decision.
    pub async fn decide(
        &self,
        config: &Config,
        request: &RateLimitRequest,
        observe: impl FnOnce(&[plan::Bound<'_>], bool),
    ) -> Result<Decided, DecisionError> {
        let asking = Asking {
            charging: self.options.charging,
            shape: None,
            shape_hits: None,
        };
        self.decide_asking(config, request, asking, observe).await
    }

    /// `decide`, asking the store as `asking` says.
    pub async fn decide_asking(
        &self,
        config: &Config,
        request: &RateLimitRequest,
        asking: Asking<'_>,
        observe: impl FnOnce(&[plan::Bound<'_>], bool),
    ) -> Result<Decided, DecisionError> {
        validate::validate_request(request, &self.options.bounds)?;
        let domain = config.domain(&request.domain);
        let found = self.overrides_of(request, domain);
        let mut pending = self.prepare(domain, request, &found, asking.shape);
        if let Some(shape) = asking.shape_hits {
            pending
                .hits
                .iter_mut()
                .for_each(|hit| shape(&mut hit.limit));
        }
        let started = std::time::Instant::now();
        let decisions = self.charge(&pending.hits, asking.charging).await?;
        let store_seconds = started.elapsed().as_secs_f64();
        Ok(self.answer(request, pending, &decisions, store_seconds, observe))
    }

    /// What a valid request asks of the store: each descriptor matched to its limits in
    /// `domain` and its overrides (`found`), shaped by `shape`, and the hits to charge.
    fn prepare<'a>(
        &self,
        domain: Option<&'a sluice_config::Domain>,
        request: &'a RateLimitRequest,
        found: &'a [Option<Arc<DescriptorOverrides>>],
        shape: Option<plan::Shape<'_>>,
    ) -> Box<Pending<'a>> {
        let default_cost = u64::from(request.hits_addend.max(1));
        let now_us = if found.iter().any(Option::is_some) {
            SystemClock.now_us()
        } else {
            0
        };
        let limitador = domain.is_some_and(|d| !d.cel_limits.is_empty());
        // Built in its box: a request's plan is moved once, not again into the box.
        let mut pending = Box::new(Pending {
            limitador,
            planned: SmallVec::new(),
            hits: plan::Hits::new(),
            tokens: plan::Tokens::default(),
        });
        let Pending {
            planned,
            hits,
            tokens,
            ..
        } = &mut *pending;
        planned.extend(
            request
                .descriptors
                .iter()
                .enumerate()
                .map(|(index, descriptor)| {
                    let overrides = found.get(index).and_then(Option::as_deref);
                    let in_force = overrides.map(|overrides| plan::InForce { overrides, now_us });
                    plan::plan(
                        domain,
                        &request.domain,
                        descriptor,
                        default_cost,
                        in_force,
                        shape,
                    )
                }),
        );
        if let Some(domain) = domain.filter(|_| limitador) {
            let seen = (self.seen.as_ref(), SystemClock.now_us());
            planned.extend(plan::counters(domain, request, default_cost, shape, seen));
        }
        plan::apply_replaces(planned);
        if self.options.quota_mode {
            plan::all_in_quota_mode(planned);
        }
        *tokens = plan::hits(planned, &self.tokens, hits);
        pending
    }

    /// The answer to `request` once the store decided its hits: the binding limit of each
    /// descriptor, the statuses and the overall code, the headers and dynamic metadata.
    fn answer<'a>(
        &self,
        request: &'a RateLimitRequest,
        pending: Box<Pending<'a>>,
        decisions: &[Decision],
        store_seconds: f64,
        observe: impl FnOnce(&[plan::Bound<'_>], bool),
    ) -> Decided {
        let Pending {
            limitador,
            planned,
            tokens,
            ..
        } = *pending;
        let decided_at_us = decisions.iter().map(|d| d.decided_at_us).max();
        let bound = plan::bind(planned, decisions);
        let statuses: Vec<_> = bound
            .iter()
            .map(|s| response::status(&s.verdict, s.decision().as_ref()))
            .collect();
        let limits_decided: LimitDecisions = bound
            .iter()
            .map(|s| match (&s.verdict, s.decision()) {
                (Verdict::Limited(_), Some(decision)) => Some(decision.admitted),
                _ => None,
            })
            .collect();
        let mut overall = response::overall_code(bound.iter().map(|s| &s.verdict), &statuses);
        // The store's veto: a denied request took no lease.
        let denied = overall == Code::OverLimit;
        observe(&bound, denied);
        let said = said(&bound);
        let acquired = bound
            .iter()
            .filter_map(plan::Bound::lease)
            .any(|lease| lease.taken(denied));
        // A denied request holds nothing (its openings were taken back).
        let opened = tokens
            .ticket
            .filter(|(ticket, _)| !denied && plan::opened(&bound, ticket));
        let denied_by = bound
            .iter()
            .find_map(|s| s.denied_by.clone())
            .filter(|_| denied);
        let verdicts: SmallVec<[Verdict<'_>; 2]> = bound.into_iter().map(|s| s.verdict).collect();
        if overall == Code::OverLimit && self.options.shadow_mode {
            // `SHADOW_MODE`: the answer is OK; the statuses stay truthful.
            overall = Code::Ok;
        }
        let shadowed = overall == Code::Ok && denied;
        let response_headers_to_add = match &self.options.response_headers {
            Some(names) => extras::headers(names, &verdicts, &statuses, overall),
            None => Vec::new(),
        };
        let mut dynamic_metadata = self
            .options
            .response_dynamic_metadata
            .then(|| extras::dynamic_metadata(request, &verdicts, &statuses));
        // The token of the leases taken, for the release to send back.
        if let (Some(token), true) = (tokens.lease, acquired) {
            ticket::add_token(
                dynamic_metadata.get_or_insert_with(Default::default),
                LEASE_KEY,
                token,
            );
        }
        // The token of what a modifier opened, for the return to send back.
        if let Some((ticket, token)) = opened {
            ticket::add_token(
                dynamic_metadata.get_or_insert_with(Default::default),
                ticket.key,
                token,
            );
        }
        // The limit that denied the request, by name.
        if let Some(name) = denied_by {
            extras::add_denied_by(dynamic_metadata.get_or_insert_with(Default::default), name);
        }
        // What each modifier says of the request.
        for (key, fields) in &said {
            extras::add_unit_fields(
                dynamic_metadata.get_or_insert_with(Default::default),
                key,
                fields,
            );
        }
        // Limitador's counters are the request's, not a descriptor's: they have no status.
        let mut statuses = statuses;
        statuses.truncate(request.descriptors.len());
        let response = RateLimitResponse {
            overall_code: overall as i32,
            statuses,
            response_headers_to_add,
            dynamic_metadata,
            ..Default::default()
        };
        let mut limits_decided = limits_decided;
        limits_decided.truncate(request.descriptors.len());
        Decided {
            response,
            limits: limits_decided,
            shadowed,
            decided_at_us,
            store_seconds,
            said,
            limitador,
        }
    }

    /// The admin overrides of each descriptor of `request` (none looked up when there are
    /// none at all, nor for a descriptor with its own `limit`, which comes first). A release,
    /// a settle or a named hold is looked up without its token's entry, and every descriptor
    /// without the entries the domain's modifiers read.
    fn overrides_of(
        &self,
        request: &RateLimitRequest,
        domain: Option<&sluice_config::Domain>,
    ) -> SmallVec<[Option<Arc<DescriptorOverrides>>; 4]> {
        if self.overrides.is_empty() {
            return SmallVec::new();
        }
        request
            .descriptors
            .iter()
            .map(|descriptor| {
                if descriptor.limit.is_some() {
                    return None;
                }
                let entries = descriptor
                    .entries
                    .iter()
                    .filter(|e| ticket::is_matched(&e.key))
                    // An entry a modifier reads is not part of the descriptor.
                    .filter(|e| !domain.is_some_and(|d| d.reads_entry(&e.key)))
                    .map(|e| (e.key.as_str(), e.value.as_str()));
                self.overrides.get_entries(&request.domain, entries)
            })
            .collect()
    }

    /// Charges the store in one call (a failure the store's layers could not answer fails
    /// the call).
    async fn charge(
        &self,
        hits: &[Hit],
        charging: Charging,
    ) -> Result<Vec<Decision>, DecisionError> {
        if hits.is_empty() {
            return Ok(Vec::new());
        }
        let charged = self.store.charge(hits, charging);
        let result = if self.options.tracing.is_some() {
            charged
                .instrument(store_span(self.store.name(), hits.len()))
                .await
        } else {
            charged.await
        };
        Ok(result?)
    }
}

/// The span of a store call, inside the request's (none without one).
fn store_span(store: &'static str, hits: usize) -> Span {
    if Span::current().is_none() {
        return Span::none();
    }
    tracing::info_span!(
        target: sluice_store::redis::span::TARGET,
        "store",
        otel.name = "sluice.store.charge",
        sluice.store = store,
        sluice.store.hits = hits,
    )
}

/// What the modifiers say of a request, from the decisions of its limits that a modifier
/// noted (each with its descriptor's binding limit's name and shadow mode).
fn said(bound: &[plan::Bound<'_>]) -> SmallVec<[MetaField; 1]> {
    let noted = |decision: &Decision| matches!(decision.mark, Mark::Noted(_));
    // Most requests carry no note: nothing to gather, nothing said.
    if !bound.iter().flat_map(|s| &s.taken).any(|(d, _)| noted(d)) {
        return SmallVec::new();
    }
    let decisions: SmallVec<[Said<'_>; 4]> = bound
        .iter()
        .enumerate()
        .flat_map(|(descriptor, s)| {
            let (limit_name, shadow_mode) = match &s.verdict {
                Verdict::Limited(applied) => (applied.name, applied.shadow_mode),
                _ => ("", false),
            };
            s.taken
                .iter()
                .filter(|(d, _)| noted(d))
                .map(move |(decision, _)| Said {
                    descriptor,
                    decision: *decision,
                    limit_name,
                    shadow_mode,
                })
        })
        .collect();
    Modifiers::said(&decisions)
}
