//! The gRPC RateLimitService. The request path reads top to bottom: validate the request, match
//! each descriptor to a limit, charge the store in one call, build the response. Knows the
//! `Store` trait, never which store.

mod error;
mod extras;
mod response;
mod validate;

use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use arc_swap::ArcSwap;
use tonic::{Request, Response, Status};

use crate::config::{Config, Domain};
use crate::labels::LimitLabels;
use crate::limit::{Charging, Decision, Hit, Limit, Unit};
use crate::metrics::{LimitOutcome, Metrics};
use crate::proto::rate_limit_service_server::RateLimitService;
use crate::proto::{RateLimitDescriptor, RateLimitRequest, RateLimitResponse};
use crate::store::{key, Store, StoreError};
pub use error::DecisionError;
pub use extras::HeaderNames;
pub use response::{Applied, Verdict};
pub use validate::RequestBounds;

/// Service-wide behaviour that settings choose.
#[derive(Debug, Clone, Default)]
pub struct ServiceOptions {
    pub bounds: RequestBounds,
    /// `SHADOW_MODE`: the overall code is always OK; descriptor statuses stay truthful.
    pub shadow_mode: bool,
    pub failure_mode: FailureMode,
    /// `LIMIT_RESPONSE_HEADERS_ENABLED`: the header names, or `None` for no headers.
    pub response_headers: Option<HeaderNames>,
    /// `RESPONSE_DYNAMIC_METADATA`.
    pub response_dynamic_metadata: bool,
    /// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`: whether a denied request charges nothing.
    pub charging: Charging,
}

/// What a call gets when the store cannot decide.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum FailureMode {
    /// gRPC UNAVAILABLE with the reason: Envoy's `failure_mode_deny` decides.
    #[default]
    Unavailable,
    /// Every charged descriptor is OK (fail open).
    Allow,
    /// Every charged descriptor is OVER_LIMIT (fail closed).
    Deny,
}

/// The rate limit service over a store `S` and the current config.
pub struct RateLimiter<S> {
    config: Arc<ArcSwap<Config>>,
    store: Arc<S>,
    options: ServiceOptions,
    metrics: Arc<Metrics>,
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
        }
    }

    /// Decides one request; a failure is counted under its kind.
    pub async fn decide(
        &self,
        request: &RateLimitRequest,
    ) -> Result<RateLimitResponse, DecisionError> {
        let decided = self.decide_uncounted(request).await;
        if let Err(error) = &decided {
            self.metrics.record_error(error.metric_label());
        }
        decided
    }

    async fn decide_uncounted(
        &self,
        request: &RateLimitRequest,
    ) -> Result<RateLimitResponse, DecisionError> {
        validate::validate_request(request, &self.options.bounds)?;
        // One snapshot for the whole request: a reload never mixes two configs in one answer.
        let config = self.config.load_full();
        let domain = config.domain(&request.domain);
        let default_cost = u64::from(request.hits_addend.max(1));
        let mut planned: Vec<Planned<'_>> = request
            .descriptors
            .iter()
            .map(|descriptor| plan(domain, &request.domain, descriptor, default_cost))
            .collect();
        apply_replaces(&mut planned);
        let hits: Vec<Hit> = planned.iter_mut().filter_map(|p| p.hit.take()).collect();
        let decisions = self.charge(&hits).await?;
        self.record(&planned, &hits, &decisions);
        let mut decisions = decisions.iter();
        let verdicts: Vec<Verdict<'_>> = planned.into_iter().map(|p| p.verdict).collect();
        let statuses: Vec<_> = verdicts
            .iter()
            .map(|verdict| {
                let decision = match verdict {
                    Verdict::Limited(_) => decisions.next(),
                    _ => None,
                };
                response::status(verdict, decision)
            })
            .collect();
        let overall = response::overall_code(&verdicts, &statuses, self.options.shadow_mode);
        let response_headers_to_add = match &self.options.response_headers {
            Some(names) => extras::headers(names, &verdicts, &statuses, overall),
            None => Vec::new(),
        };
        let dynamic_metadata = self
            .options
            .response_dynamic_metadata
            .then(|| extras::dynamic_metadata(request, &verdicts));
        Ok(RateLimitResponse {
            overall_code: overall as i32,
            statuses,
            response_headers_to_add,
            dynamic_metadata,
            ..Default::default()
        })
    }
}

impl<S: Store> RateLimiter<S> {
    /// Charges the store in one call, timed; a failure answers as `--failure-mode` says.
    async fn charge(&self, hits: &[Hit]) -> Result<Vec<Decision>, DecisionError> {
        if hits.is_empty() {
            return Ok(Vec::new());
        }
        let started = Instant::now();
        let result = self.store.charge(hits, self.options.charging).await;
        let seconds = started.elapsed().as_secs_f64();
        self.metrics
            .record_store_call(seconds, result.as_ref().err());
        match result {
            Ok(decisions) => Ok(decisions),
            Err(error) => self.on_store_failure(error, hits.len()),
        }
    }

    /// Counts every charged descriptor's hits under its limit's labels.
    fn record(&self, planned: &[Planned<'_>], hits: &[Hit], decisions: &[Decision]) {
        let limited = planned.iter().filter_map(|p| match &p.verdict {
            Verdict::Limited(applied) => Some((applied, p.labels.as_deref())),
            _ => None,
        });
        for (((applied, labels), hit), decision) in limited.zip(hits).zip(decisions) {
            let Some(labels) = labels else { continue };
            let outcome = LimitOutcome {
                algorithm: applied.limit.algorithm,
                capacity: applied.limit.capacity(),
                cost: hit.cost,
                decision: *decision,
                shadow_mode: applied.shadow_mode,
            };
            self.metrics.record_limit(labels, &outcome);
        }
    }

    /// The answers for `count` hits the store could not decide, as `--failure-mode` says.
    fn on_store_failure(
        &self,
        error: StoreError,
        count: usize,
    ) -> Result<Vec<Decision>, DecisionError> {
        tracing::debug!(%error, "store failed");
        let admitted = match self.options.failure_mode {
            FailureMode::Unavailable => return Err(error.into()),
            FailureMode::Allow => true,
            FailureMode::Deny => false,
        };
        let decision = Decision {
            admitted,
            remaining: 0,
            reset_after_us: 0,
            retry_after_us: 0,
        };
        Ok(vec![decision; count])
    }
}

#[tonic::async_trait]
impl<S: Store> RateLimitService for RateLimiter<S> {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let started = Instant::now();
        let response = self.decide(request.get_ref()).await;
        self.metrics.record_request(started.elapsed().as_secs_f64());
        response.map(Response::new).map_err(Status::from)
    }
}

/// One descriptor after matching: its verdict, its hit when charged, and the limit names its
/// rule replaces.
struct Planned<'a> {
    verdict: Verdict<'a>,
    hit: Option<Hit>,
    replaces: &'a [String],
    /// The metric labels of the limit, when one is charged: the rule's own when fixed.
    labels: Option<Cow<'a, LimitLabels>>,
}

impl Planned<'_> {
    fn without_limit(verdict: Verdict<'_>) -> Planned<'_> {
        Planned {
            verdict,
            hit: None,
            replaces: &[],
            labels: None,
        }
    }
}

/// Matches one descriptor: the client's limit override if any, else the config's rule.
fn plan<'a>(
    domain: Option<&'a Domain>,
    domain_name: &str,
    descriptor: &'a RateLimitDescriptor,
    default_cost: u64,
) -> Planned<'a> {
    let Some(domain) = domain else {
        return Planned::without_limit(Verdict::NoLimit);
    };
    let cost = descriptor.hits_addend.unwrap_or(default_cost);
    let entries = descriptor
        .entries
        .iter()
        .map(|e| (e.key.as_str(), e.value.as_str()));
    if let Some(limit) = descriptor.limit {
        // Validated: the unit is a known one.
        let unit = Unit::from_proto_number(limit.unit).unwrap_or(Unit::Second);
        let applied = Applied {
            limit: Limit::fixed_window(limit.requests_per_unit, unit),
            name: "",
            shadow_mode: false,
            quota_mode: false,
            metadata: None,
        };
        let key = key::descriptor_key(domain_name, entries);
        let keys = descriptor.entries.iter().map(|e| e.key.as_str());
        let labels = LimitLabels::of_override(domain_name, keys);
        return Planned::charged(applied, key, cost, &[], Cow::Owned(labels));
    }
    let Some(matched) = domain.resolve(entries) else {
        return Planned::without_limit(Verdict::NoLimit);
    };
    let rule = matched.rule;
    let Some(limit) = rule.limit else {
        return Planned::without_limit(Verdict::Unlimited);
    };
    let applied = Applied {
        limit,
        name: rule.name.as_deref().unwrap_or_default(),
        shadow_mode: rule.shadow_mode,
        quota_mode: rule.quota_mode,
        metadata: rule.metadata.as_ref(),
    };
    let key = key::descriptor_key(domain_name, matched.counted_entries());
    let labels = match &rule.metric_labels {
        Some(labels) => Cow::Borrowed(labels),
        None => Cow::Owned(LimitLabels::of_match(
            domain_name,
            &matched.levels,
            rule.detailed_metric,
        )),
    };
    Planned::charged(applied, key, cost, &rule.replaces, labels)
}

impl<'a> Planned<'a> {
    fn charged(
        applied: Applied<'a>,
        key: String,
        cost: u64,
        replaces: &'a [String],
        labels: Cow<'a, LimitLabels>,
    ) -> Self {
        let hit = Hit {
            key,
            limit: applied.limit,
            cost,
            role: applied.role(),
            joins_previous: false,
        };
        Planned {
            verdict: Verdict::Limited(applied),
            hit: Some(hit),
            replaces,
            labels: Some(labels),
        }
    }
}

/// A matched limit whose name another matched limit of the request replaces is skipped.
fn apply_replaces(planned: &mut [Planned<'_>]) {
    let replaced: HashSet<&str> = planned
        .iter()
        .flat_map(|p| p.replaces.iter().map(String::as_str))
        .collect();
    if replaced.is_empty() {
        return;
    }
    for p in planned.iter_mut() {
        if let Verdict::Limited(applied) = &p.verdict {
            if !applied.name.is_empty() && replaced.contains(applied.name) {
                p.verdict = Verdict::NoLimit;
                p.hit = None;
                p.labels = None;
            }
        }
    }
}
