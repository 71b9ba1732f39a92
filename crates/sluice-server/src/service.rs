//! The gRPC RateLimitService: each call decided by the request path of `sluice_limiter`, with
//! what only a server does around it: the metrics, the recording of decided calls, the
//! tracing spans, and the gRPC status of a failure.

use std::sync::Arc;
use std::time::Instant;

use arc_swap::ArcSwap;
use tonic::{Request, Response, Status};
use tracing::Instrument;

use crate::metrics::limitador::CallOutcome;
use crate::metrics::{LimitOutcome, Metrics};
use crate::otel::spans;
use crate::record::Recorder;
use sluice_config::overrides::OverrideIndex;
use sluice_config::Config;
use sluice_core::engine::Charging;
use sluice_limiter::plan::Bound;
use sluice_limiter::{
    Asking, Decided, DecisionError, LimitDecisions, Limiter, LimiterOptions, Verdict,
};
use sluice_proto::rate_limit_response::Code;
use sluice_proto::rate_limit_service_server::RateLimitService;
use sluice_proto::{RateLimitRequest, RateLimitResponse};
use sluice_store::{Clock, Store, SystemClock};

/// The rate limit service over a store `S` and the current config.
pub struct RateLimiter<S> {
    config: Arc<ArcSwap<Config>>,
    limiter: Limiter<S>,
    metrics: Arc<Metrics>,
    /// Where decided calls are recorded (`--record`), when they are.
    recorder: Option<Arc<Recorder>>,
}

impl<S: Store> RateLimiter<S> {
    pub fn new(
        config: Arc<ArcSwap<Config>>,
        store: Arc<S>,
        options: LimiterOptions,
        metrics: Arc<Metrics>,
    ) -> Self {
        RateLimiter {
            config,
            limiter: Limiter::new(store, options),
            metrics,
            recorder: None,
        }
    }

    /// The same service, with the admin overrides of `overrides` in place of the limits of
    /// their descriptors.
    pub fn with_overrides(mut self, overrides: Arc<OverrideIndex>) -> Self {
        self.limiter = self.limiter.with_overrides(overrides);
        self
    }

    /// The admin overrides it applies.
    pub fn overrides(&self) -> &Arc<OverrideIndex> {
        self.limiter.overrides()
    }

    /// The same service, recording every call it decides to `recorder`.
    pub fn with_recorder(mut self, recorder: Arc<Recorder>) -> Self {
        self.recorder = Some(recorder);
        self
    }

    /// The counters of Limitador's limits it has asked the store about.
    pub fn seen_counters(&self) -> &sluice_limiter::seen::SeenCounters {
        self.limiter.seen_counters()
    }

    /// The store it decides on (tools and tests read its state).
    pub fn store(&self) -> &S {
        self.limiter.store()
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

    /// Decides one request, and says what each descriptor's limit decided on its own
    /// (`sluice replay` counts rules by it).
    pub async fn decide_with_limits(
        &self,
        request: &RateLimitRequest,
    ) -> Result<(RateLimitResponse, LimitDecisions), DecisionError> {
        let config = self.config.load_full();
        let mut limit_name = String::new();
        let decided = self
            .limiter
            .decide(&config, request, |bound, denied| {
                self.record(request, bound, denied);
                // Named only where Limitador's series name it: no work for other calls.
                if denied && self.metrics.names_limits() {
                    limit_name = limiting_name(bound);
                }
            })
            .await;
        let decided = self.counted(decided)?;
        if decided.limitador {
            let outcome = match decided.response.overall_code() {
                Code::OverLimit => CallOutcome::Limited {
                    limit_name: &limit_name,
                },
                _ => CallOutcome::Authorized {
                    hits: Some(u64::from(request.hits_addend.max(1))),
                },
            };
            let seconds = decided.store_seconds;
            self.metrics
                .record_limitador(&request.domain, Some(outcome), seconds);
        }
        if let Some(recorder) = &self.recorder {
            // The store's time of the decision, so that a replay keeps the store's order.
            let t = decided
                .decided_at_us
                .filter(|&t| t > 0)
                .unwrap_or_else(|| SystemClock.now_us());
            recorder.record(t, request, &decided.response, &config);
        }
        Ok((decided.response, decided.limits))
    }

    /// Decides one request asked as `asking` says (a front end's own terms: Kuadrant's),
    /// counting what it charged (a dry run charges and counts nothing); `inspect` sees each
    /// descriptor bound to its limit. Not recorded for replay: a replay asks as the RLS does.
    pub async fn decide_asking(
        &self,
        request: &RateLimitRequest,
        asking: Asking<'_>,
        inspect: impl FnOnce(&[Bound<'_>]),
    ) -> Result<Decided, DecisionError> {
        let config = self.config.load_full();
        let charges = asking.charging != Charging::Check;
        let decided = self
            .limiter
            .decide_asking(&config, request, asking, |bound, denied| {
                if charges {
                    self.record(request, bound, denied);
                }
                inspect(bound);
            })
            .await;
        self.counted(decided)
    }

    /// `decided`, its store call and its failure counted.
    fn counted(&self, decided: Result<Decided, DecisionError>) -> Result<Decided, DecisionError> {
        let decided = decided.inspect_err(|error| {
            self.metrics.record_error(error.metric_label());
        })?;
        self.metrics.record_store_call(decided.store_seconds);
        if decided.shadowed {
            self.metrics.record_global_shadow_mode();
        }
        Ok(decided)
    }

    /// Counts every charged descriptor's hits under its labels, as its binding limit decided,
    /// and what its lease limit did to its leases (a release counts only there; a
    /// request that was `denied` took none). Each descriptor's entries go to its limit's heavy
    /// hitters (Limitador's counters, past the descriptors, have none).
    fn record(&self, request: &RateLimitRequest, bound: &[Bound<'_>], denied: bool) {
        for (index, s) in bound.iter().enumerate() {
            if let Some(labels) = s.labels.as_deref() {
                for (decision, cost) in &s.taken {
                    self.metrics.record_modifiers(labels, decision, *cost);
                }
            }
            if let (Some(lease), Some(labels)) = (s.lease(), s.labels.as_deref()) {
                self.metrics.record_lease(labels, &lease, denied);
                if lease.releases {
                    continue;
                }
            }
            let (Verdict::Limited(applied), Some(decision), Some(labels)) =
                (&s.verdict, s.decision(), s.labels.as_deref())
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
                entries: request
                    .descriptors
                    .get(index)
                    .map_or(&[], |d| d.entries.as_slice()),
            };
            self.metrics.record_limit(labels, &outcome);
        }
    }
}

/// The name of the limit that denied a request ("" when none did, or it has none).
pub fn limiting_name(bound: &[Bound<'_>]) -> String {
    bound
        .iter()
        .find_map(|s| match (&s.verdict, s.decision()) {
            (Verdict::Limited(applied), Some(decision)) if !decision.admitted => {
                Some(applied.name.to_string())
            }
            _ => None,
        })
        .unwrap_or_default()
}

/// INVALID_ARGUMENT naming the field, or UNAVAILABLE with the store's reason, so that Envoy's
/// `failure_mode_deny` decides.
pub fn status_of(error: DecisionError) -> Status {
    match &error {
        DecisionError::InvalidRequest { .. } => Status::invalid_argument(error.to_string()),
        DecisionError::Store(_) => Status::unavailable(error.to_string()),
    }
}

#[tonic::async_trait]
impl<S: Store> RateLimitService for RateLimiter<S> {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let started = Instant::now();
        // The headers and extensions go before the store is waited on: only the message is
        // read after it, and what a call frees while it is still in the cache costs less.
        let (metadata, extensions, request) = request.into_parts();
        let span = self
            .limiter
            .options()
            .tracing
            .and_then(|ratio| spans::request_span(metadata.as_ref(), &request, ratio));
        drop((metadata, extensions));
        let response = match span {
            Some(span) => {
                let response = self.decide(&request).instrument(span.clone()).await;
                spans::record_answer(&span, &request, response.as_ref());
                response
            }
            None => self.decide(&request).await,
        };
        self.metrics.record_request(started.elapsed().as_secs_f64());
        response.map(Response::new).map_err(status_of)
    }
}
