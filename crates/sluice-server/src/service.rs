//! The gRPC RateLimitService. The request path reads top to bottom: validate the request, match
//! each descriptor to a limit, charge the store in one call, build the response. Knows the
//! `Store` trait, never which store.

mod error;
mod extras;
/// The lease token as a request carries it (kept at `crate::lease`, below the service and
/// the recorder that both read it).
pub use crate::lease;
use crate::reserve;
pub mod plan;
mod response;
mod validate;

use std::sync::Arc;
use std::time::Instant;

use arc_swap::ArcSwap;
use smallvec::SmallVec;
use tonic::{Request, Response, Status};
use tracing::Instrument;

use crate::metrics::{LimitOutcome, Metrics};
use crate::otel::spans;
use crate::record::Recorder;
pub use error::DecisionError;
pub use extras::{HeaderForm, HeaderNames};
pub use response::{Applied, Verdict};
use sluice_config::overrides::{DescriptorOverrides, OverrideIndex};
use sluice_config::Config;
use sluice_core::engine::Charging;
pub use sluice_core::limit::LeaseOutcome;
use sluice_core::limit::{Decision, Hit};
use sluice_core::modifier::penalty;
pub use sluice_core::modifier::penalty::{utc_text, METADATA_KEY as PENALTY_KEY};
use sluice_proto::rate_limit_response::Code;
use sluice_proto::rate_limit_service_server::RateLimitService;
use sluice_proto::{RateLimitRequest, RateLimitResponse};
use sluice_store::{Clock, Store, SystemClock};
pub use validate::RequestBounds;

/// What each descriptor's limit decided on its own (`RateLimiter::decide_with_limits`).
pub type LimitDecisions = SmallVec<[Option<bool>; 4]>;

/// Service-wide behaviour that settings choose.
#[derive(Debug, Clone, Default)]
pub struct ServiceOptions {
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

/// The rate limit service over a store `S` and the current config.
pub struct RateLimiter<S> {
    config: Arc<ArcSwap<Config>>,
    store: Arc<S>,
    options: ServiceOptions,
    metrics: Arc<Metrics>,
    tokens: lease::LeaseTokens,
    /// Where decided calls are recorded (`--record`), when they are.
    recorder: Option<Arc<Recorder>>,
    /// The admin overrides in force (docs/admin.md).
    overrides: Arc<OverrideIndex>,
}

impl<S: Store> RateLimiter<S> {
    pub fn new(
        config: Arc<ArcSwap<Config>>,
        store: Arc<S>,
        options: ServiceOptions,
        metrics: Arc<Metrics>,
    ) -> Self {
        RateLimiter {
            config,
            store,
            options,
            metrics,
            tokens: lease::LeaseTokens::new(),
            recorder: None,
            overrides: Arc::default(),
        }
    }

    /// The same service, with the admin overrides of `overrides` in place of the limits of
    /// their descriptors.
    pub fn with_overrides(mut self, overrides: Arc<OverrideIndex>) -> Self {
        self.overrides = overrides;
        self
    }

    /// The admin overrides it applies.
    pub fn overrides(&self) -> &Arc<OverrideIndex> {
        &self.overrides
    }

    /// The same service, recording every call it decides to `recorder`.
    pub fn with_recorder(mut self, recorder: Arc<Recorder>) -> Self {
        self.recorder = Some(recorder);
        self
    }

    /// The store it decides on (tools and tests read its state).
    pub fn store(&self) -> &S {
        &self.store
    }

    /// Decides one request; a failure is counted under its kind.
    pub async fn decide(
        &self,
        request: &RateLimitRequest,
    ) -> Result<RateLimitResponse, DecisionError> {
        self.decide_with_limits(request)
            .await
            .map(|(response, _)| response)
    }

    /// Decides one request, and says what each descriptor's limit decided on its own:
    /// admitted or not (a shadow-mode limit's denial included, which its status hides), or
    /// `None` where no limit applied (no match, `unlimited`, replaced). `sluice replay`
    /// counts rules by it.
    pub async fn decide_with_limits(
        &self,
        request: &RateLimitRequest,
    ) -> Result<(RateLimitResponse, LimitDecisions), DecisionError> {
        let decided = self.decide_uncounted(request).await;
        if let Err(error) = &decided {
            self.metrics.record_error(error.metric_label());
        }
        decided
    }

    async fn decide_uncounted(
        &self,
        request: &RateLimitRequest,
    ) -> Result<(RateLimitResponse, LimitDecisions), DecisionError> {
        validate::validate_request(request, &self.options.bounds)?;
        // One snapshot for the whole request: a reload never mixes two configs in one answer.
        let config = self.config.load_full();
        let domain = config.domain(&request.domain);
        let default_cost = u64::from(request.hits_addend.max(1));
        let found = self.overrides_of(request, domain);
        let now_us = if found.iter().any(Option::is_some) {
            SystemClock.now_us()
        } else {
            0
        };
        let mut planned: SmallVec<[plan::Planned<'_>; 4]> = request
            .descriptors
            .iter()
            .enumerate()
            .map(|(index, descriptor)| {
                let overrides = found.get(index).and_then(Option::as_deref);
                let in_force = overrides.map(|overrides| plan::InForce { overrides, now_us });
                plan::plan(domain, &request.domain, descriptor, default_cost, in_force)
            })
            .collect();
        plan::apply_replaces(&mut planned);
        if self.options.quota_mode {
            plan::all_in_quota_mode(&mut planned);
        }
        let (hits, tokens) = plan::hits(&mut planned, &self.tokens);
        let decisions = self.charge(&hits).await?;
        let decided_at_us = decisions.iter().map(|d| d.decided_at_us).max();
        let bound = plan::bind(planned, &decisions);
        let statuses: Vec<_> = bound
            .iter()
            .map(|s| response::status(&s.verdict, s.decision.as_ref()))
            .collect();
        let limits_decided: LimitDecisions = bound
            .iter()
            .map(|s| match (&s.verdict, s.decision) {
                (Verdict::Limited(_), Some(decision)) => Some(decision.admitted),
                _ => None,
            })
            .collect();
        let mut overall = response::overall_code(bound.iter().map(|s| &s.verdict), &statuses);
        // The store's veto: a denied request took no lease.
        let denied = overall == Code::OverLimit;
        self.record(&bound, denied);
        let block = extras::latest_block(&bound);
        let acquired = bound
            .iter()
            .filter_map(|s| s.lease)
            .any(|lease| lease.taken(denied));
        // A denied request holds nothing (its openings were taken back).
        let held = !denied && plan::opened_a_hold(&bound);
        let denied_by = bound
            .iter()
            .find_map(|s| s.denied_by.clone())
            .filter(|_| denied);
        let verdicts: SmallVec<[Verdict<'_>; 4]> = bound.into_iter().map(|s| s.verdict).collect();
        if overall == Code::OverLimit && self.options.shadow_mode {
            // `SHADOW_MODE`: the answer is OK; the statuses stay truthful.
            overall = Code::Ok;
            self.metrics.record_global_shadow_mode();
        }
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
            lease::add_token(dynamic_metadata.get_or_insert_with(Default::default), token);
        }
        // The token of the holds opened, for the settle to send back.
        if let (Some(token), true) = (tokens.hold, held) {
            reserve::add_token(dynamic_metadata.get_or_insert_with(Default::default), token);
        }
        // The limit that denied the request, by name.
        if let Some(name) = denied_by {
            extras::add_denied_by(dynamic_metadata.get_or_insert_with(Default::default), name);
        }
        // The block that denies the request (or would, in shadow mode).
        if let Some(block) = block {
            extras::add_unit_fields(
                dynamic_metadata.get_or_insert_with(Default::default),
                penalty::METADATA_KEY,
                penalty::metadata_fields(&block),
            );
        }
        let response = RateLimitResponse {
            overall_code: overall as i32,
            statuses,
            response_headers_to_add,
            dynamic_metadata,
            ..Default::default()
        };
        if let Some(recorder) = &self.recorder {
            // The store's time of the decision, so that a replay keeps the store's order.
            let t = decided_at_us
                .filter(|&t| t > 0)
                .unwrap_or_else(|| SystemClock.now_us());
            recorder.record(t, request, &response, &config);
        }
        Ok((response, limits_decided))
    }
}

impl<S: Store> RateLimiter<S> {
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
                    .filter(|e| lease::is_matched(&e.key) && reserve::is_matched(&e.key))
                    // An entry a modifier reads is not part of the descriptor.
                    .filter(|e| !domain.is_some_and(|d| d.reads_entry(&e.key)))
                    .map(|e| (e.key.as_str(), e.value.as_str()));
                self.overrides.get_entries(&request.domain, entries)
            })
            .collect()
    }

    /// Charges the store in one call, timed (a failure the store's layers could not answer
    /// fails the call).
    async fn charge(&self, hits: &[Hit]) -> Result<Vec<Decision>, DecisionError> {
        if hits.is_empty() {
            return Ok(Vec::new());
        }
        let started = Instant::now();
        let charged = self.store.charge(hits, self.options.charging);
        let result = if self.options.tracing.is_some() {
            charged
                .instrument(spans::store_span(self.store.name(), hits.len()))
                .await
        } else {
            charged.await
        };
        self.metrics
            .record_store_call(started.elapsed().as_secs_f64());
        Ok(result?)
    }

    /// Counts every charged descriptor's hits under its labels, as its binding limit decided,
    /// and what its lease limit did to its leases (a release counts only there; a
    /// request that was `denied` took none).
    fn record(&self, bound: &[plan::Bound<'_>], denied: bool) {
        for s in bound {
            if let Some(labels) = s.labels.as_deref() {
                for block in &s.blocks {
                    self.metrics.record_penalty(labels, block);
                }
                for reserved in &s.reserved {
                    self.metrics.record_reserve(labels, reserved, s.cost);
                }
            }
            if let (Some(lease), Some(labels)) = (s.lease, s.labels.as_deref()) {
                self.metrics.record_lease(labels, &lease, denied);
                if lease.releases {
                    continue;
                }
            }
            let (Verdict::Limited(applied), Some(decision), Some(labels)) =
                (&s.verdict, s.decision, s.labels.as_deref())
            else {
                continue;
            };
            let outcome = LimitOutcome {
                algorithm: applied.limit.algorithm(),
                capacity: applied.limit.capacity(),
                cost: s.cost,
                decision,
                shadow_mode: applied.shadow_mode,
                class: applied.limit.modifiers.class(),
            };
            self.metrics.record_limit(labels, &outcome);
        }
    }
}

#[tonic::async_trait]
impl<S: Store> RateLimitService for RateLimiter<S> {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let started = Instant::now();
        let span = self.options.tracing.and_then(|ratio| {
            spans::request_span(request.metadata().as_ref(), request.get_ref(), ratio)
        });
        let response = match span {
            Some(span) => {
                let response = self
                    .decide(request.get_ref())
                    .instrument(span.clone())
                    .await;
                spans::record_answer(&span, request.get_ref(), response.as_ref());
                response
            }
            None => self.decide(request.get_ref()).await,
        };
        self.metrics.record_request(started.elapsed().as_secs_f64());
        response.map(Response::new).map_err(Status::from)
    }
}
