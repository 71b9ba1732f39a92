//! The gRPC RateLimitService. The request path reads top to bottom: check the request, match
//! each descriptor to a limit, charge the store in one call, build the response. Knows the
//! `Store` trait, never which store.

mod response;
mod validate;

use std::collections::HashSet;
use std::sync::Arc;

use arc_swap::ArcSwap;
use tonic::{Request, Response, Status};

use crate::config::{Config, Domain};
use crate::limit::{Decision, Hit, Limit, Unit};
use crate::proto::rate_limit_service_server::RateLimitService;
use crate::proto::{RateLimitDescriptor, RateLimitRequest, RateLimitResponse};
use crate::store::{key, Store, StoreError};
pub use response::{Applied, Verdict};
pub use validate::RequestBounds;

/// Service-wide behaviour that settings choose.
#[derive(Debug, Clone, Copy, Default)]
pub struct ServiceOptions {
    pub bounds: RequestBounds,
    /// `SHADOW_MODE`: the overall code is always OK; descriptor statuses stay truthful.
    pub global_shadow_mode: bool,
    pub failure_mode: FailureMode,
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
}

impl<S: Store> RateLimiter<S> {
    pub fn new(config: Arc<ArcSwap<Config>>, store: Arc<S>, options: ServiceOptions) -> Self {
        RateLimiter {
            config,
            store,
            options,
        }
    }

    /// Decides one request.
    pub async fn decide(&self, request: &RateLimitRequest) -> Result<RateLimitResponse, Status> {
        validate::check(request, &self.options.bounds)?;
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
        let decisions = match self.store.check(&hits).await {
            Ok(decisions) => decisions,
            Err(error) => self.on_store_failure(&error, hits.len())?,
        };
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
        let overall = response::overall_code(&verdicts, &statuses, self.options.global_shadow_mode);
        Ok(RateLimitResponse {
            overall_code: overall as i32,
            statuses,
            ..Default::default()
        })
    }
}

impl<S> RateLimiter<S> {
    /// The answers for `count` hits the store could not decide, as `--failure-mode` says.
    fn on_store_failure(&self, error: &StoreError, count: usize) -> Result<Vec<Decision>, Status> {
        tracing::debug!(%error, "store failed");
        let admitted = match self.options.failure_mode {
            FailureMode::Unavailable => return Err(Status::unavailable(error.to_string())),
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
        self.decide(request.get_ref()).await.map(Response::new)
    }
}

/// One descriptor after matching: its verdict, its hit when charged, and the limit names its
/// rule replaces.
struct Planned<'a> {
    verdict: Verdict<'a>,
    hit: Option<Hit>,
    replaces: &'a [String],
}

impl Planned<'_> {
    fn without_limit(verdict: Verdict<'_>) -> Planned<'_> {
        Planned {
            verdict,
            hit: None,
            replaces: &[],
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
        };
        let key = key::descriptor_key(domain_name, entries);
        return Planned::charged(applied, key, cost, &[]);
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
    };
    let key = key::descriptor_key(domain_name, matched.counted_entries);
    Planned::charged(applied, key, cost, &rule.replaces)
}

impl<'a> Planned<'a> {
    fn charged(applied: Applied<'a>, key: String, cost: u64, replaces: &'a [String]) -> Self {
        let hit = Hit {
            key,
            limit: applied.limit,
            cost,
        };
        Planned {
            verdict: Verdict::Limited(applied),
            hit: Some(hit),
            replaces,
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
            }
        }
    }
}
