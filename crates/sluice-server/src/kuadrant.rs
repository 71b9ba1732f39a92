//! Kuadrant's rate limit protocol (`kuadrant.service.ratelimit.v1`, as Limitador serves it and
//! Kuadrant's wasm-shim calls it) on the gRPC port beside Envoy's (docs/kuadrant.md). Each
//! call is a request of the same limiter, asked on Limitador's terms: `CheckRateLimit` a dry
//! run of one hit, `Report` a charge of the request's hits that is never denied, `Reserve` a
//! hold on every limit the descriptors fall under (the holds a limit's `reserve` keeps, with
//! the call's amount and ttl), `Commit` the settle of that hold at the actual amount.

use std::sync::Arc;
use std::time::Duration;

use tonic::{Request, Response, Status};

use crate::metrics::limitador::CallOutcome;
use crate::metrics::Metrics;
use crate::service::{limiting_name, status_of, RateLimiter};
use sluice_core::engine::Charging;
use sluice_core::limit::Limit;
use sluice_core::modifier::reserve::policy::MAX_HOLDS;
use sluice_core::modifier::reserve::{Call, Policy, Reserved, SETTLE_KEY};
use sluice_limiter::plan::Bound;
use sluice_limiter::ticket::token_in;
use sluice_limiter::{Asking, Decided, DecisionError};
use sluice_proto::kuadrant::service::ratelimit::v1::rate_limit_service_server::RateLimitService;
use sluice_proto::kuadrant::service::ratelimit::v1::{
    CommitRequest, CommitResponse, ReserveRequest, ReserveResponse,
};
use sluice_proto::rate_limit_descriptor::Entry;
use sluice_proto::rate_limit_response::Code;
use sluice_proto::{RateLimitDescriptor, RateLimitRequest, RateLimitResponse};
use sluice_store::Store;

/// What Kuadrant's reservations may hold (`--max-reservation-fraction`,
/// `--max-reservation-ttl`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Holds {
    /// The largest share of a limit one reservation holds, in millionths.
    pub max_fraction_ppm: u32,
    /// The longest a hold lasts.
    pub max_ttl: Duration,
}

/// Who makes a call: Limitador counts the gRPC protocol's checks and reports in its series,
/// and its HTTP API's not at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    Grpc,
    Http,
}

/// Limitador's defaults: half a limit, for a minute.
const DEFAULT_RESERVATIONS: Holds = Holds {
    max_fraction_ppm: 500_000,
    max_ttl: Duration::from_secs(60),
};

/// Kuadrant's service over the RLS service's limiter; `reservations`: `None` when
/// `--disable-reservations` turned `Reserve` and `Commit` off.
pub struct KuadrantService<S> {
    limiter: Arc<RateLimiter<S>>,
    reservations: Option<Holds>,
    /// Where Limitador's series are counted.
    metrics: Arc<Metrics>,
}

impl<S: Store> KuadrantService<S> {
    pub fn new(
        limiter: Arc<RateLimiter<S>>,
        reservations: Option<Holds>,
        metrics: Arc<Metrics>,
    ) -> Self {
        KuadrantService {
            limiter,
            reservations,
            metrics,
        }
    }

    /// Counts a call in `namespace` in Limitador's series, or the store's failure: a report
    /// (`reported`: the hits it charged) is never limited; another call is limited by
    /// `limit_name`, or admitted having charged `hits`.
    fn count(
        &self,
        namespace: &str,
        decided: &Result<Decided, DecisionError>,
        (limit_name, hits, reported): (&str, Option<u64>, bool),
    ) {
        let Ok(decided) = decided else {
            self.metrics.record_limitador(namespace, None, 0.0);
            return;
        };
        let outcome = match (reported, decided.response.overall_code()) {
            (true, _) => CallOutcome::Reported {
                hits: hits.unwrap_or(0),
            },
            (false, Code::OverLimit) => CallOutcome::Limited { limit_name },
            (false, _) => CallOutcome::Authorized { hits },
        };
        self.metrics
            .record_limitador(namespace, Some(outcome), decided.store_seconds);
    }

    /// `request` decided as `charging` says, every limit holding as `policy` says: with
    /// `acts`, its hits open or settle holds; without, they count on the same keys and hold
    /// nothing (so that every call of the protocol counts one counter per limit on every
    /// store). `inspect` sees each descriptor bound to its limit.
    async fn ask(
        &self,
        request: &RateLimitRequest,
        charging: Charging,
        (policy, acts): (Policy, bool),
        inspect: impl FnOnce(&[Bound<'_>]),
    ) -> Result<Decided, DecisionError> {
        let shape = holding(policy);
        let asking = Asking {
            charging,
            shape: acts.then_some(&shape as _),
            shape_hits: (!acts).then_some(&shape as _),
        };
        self.limiter.decide_asking(request, asking, inspect).await
    }

    /// The reservations served, or UNIMPLEMENTED (Limitador's answer when they are off).
    fn reservations(&self) -> Result<Holds, Status> {
        self.reservations.ok_or_else(|| {
            Status::unimplemented("reservations are disabled (--disable-reservations)")
        })
    }

    /// The hold of a call that opens none: the keys and state every call shares.
    fn passive(&self) -> (Policy, bool) {
        let limits = self.reservations.unwrap_or(DEFAULT_RESERVATIONS);
        (hold_policy(limits, 1, None), false)
    }

    /// Whether `cost` more on every limit `descriptors` fall under in `domain` would be
    /// limited now (OK or OVER_LIMIT); charges nothing (Limitador's check).
    pub async fn check(
        &self,
        domain: String,
        descriptors: Vec<RateLimitDescriptor>,
        cost: u64,
        caller: Caller,
    ) -> Result<Code, DecisionError> {
        let counted = caller == Caller::Grpc;
        self.decide(domain, descriptors, cost, Charging::Check, counted)
            .await
    }

    /// Charges `cost` on every limit of `descriptors` in `domain`, never denied (a Report, or
    /// a Commit without a hold to settle).
    pub async fn report(
        &self,
        domain: String,
        descriptors: Vec<RateLimitDescriptor>,
        cost: u64,
        caller: Caller,
    ) -> Result<(), DecisionError> {
        let counted = caller == Caller::Grpc;
        self.decide(domain, descriptors, cost, Charging::EveryHit, counted)
            .await
            .map(|_| ())
    }

    /// Charges `cost` on every limit of `descriptors` in `domain` if all admit it, else
    /// nothing (Limitador's check and report in one).
    pub async fn check_and_report(
        &self,
        domain: String,
        descriptors: Vec<RateLimitDescriptor>,
        cost: u64,
    ) -> Result<Code, DecisionError> {
        self.decide(domain, descriptors, cost, Charging::AllOrNothing, true)
            .await
    }

    /// The code of `cost` on every limit of `descriptors`, charged as `charging` says (OK
    /// when there is no descriptor), `counted` in Limitador's series.
    async fn decide(
        &self,
        domain: String,
        descriptors: Vec<RateLimitDescriptor>,
        cost: u64,
        charging: Charging,
        counted: bool,
    ) -> Result<Code, DecisionError> {
        if descriptors.is_empty() {
            return Ok(Code::Ok);
        }
        let request = kuadrant_request(domain, descriptors, cost);
        let mut limit_name = String::new();
        let decided = self
            .ask(&request, charging, self.passive(), |bound| {
                if self.metrics.names_limits() {
                    limit_name = limiting_name(bound);
                }
            })
            .await;
        if counted {
            let counted = match charging {
                Charging::Check => (limit_name.as_str(), None, false),
                Charging::EveryHit => ("", Some(cost), true),
                Charging::AllOrNothing => (limit_name.as_str(), Some(cost), false),
            };
            self.count(&request.domain, &decided, counted);
        }
        Ok(decided?.response.overall_code())
    }
}

/// An answer of `code` alone, as Limitador gives (no statuses, no headers).
fn answer(code: Code) -> Response<RateLimitResponse> {
    Response::new(RateLimitResponse {
        overall_code: code as i32,
        ..RateLimitResponse::default()
    })
}

/// Envoy's request for a Kuadrant call: the descriptors as they are, but each costing `cost`
/// and without a client's own limit, which Limitador does not read.
fn kuadrant_request(
    domain: String,
    descriptors: Vec<RateLimitDescriptor>,
    cost: u64,
) -> RateLimitRequest {
    let descriptors = descriptors
        .into_iter()
        .map(|descriptor| RateLimitDescriptor {
            limit: None,
            hits_addend: Some(cost),
            ..descriptor
        })
        .collect();
    RateLimitRequest {
        domain,
        descriptors,
        hits_addend: 1,
    }
}

/// The hold a reservation of `amount` for `ttl` takes on each limit: at most the server's
/// share of the limit, for at most its longest ttl (and never past its window's end).
fn hold_policy(reservations: Holds, amount: u64, ttl: Option<Duration>) -> Policy {
    let ttl = ttl.map_or(reservations.max_ttl, |ttl| ttl.min(reservations.max_ttl));
    Policy {
        // A hold of 0 holds the least sluice holds: 1.
        amount: amount.clamp(1, u64::from(u32::MAX)),
        max_fraction_ppm: reservations.max_fraction_ppm,
        max_hold_us: u64::try_from(ttl.as_micros()).unwrap_or(u64::MAX).max(1),
        max_holds: MAX_HOLDS,
    }
}

/// A limit as a reservation holds on it: with `policy`'s hold (a limit of leases holds its
/// own leases, never an estimate).
fn holding(policy: Policy) -> impl Fn(&mut Limit) + Sync {
    move |limit: &mut Limit| {
        if !limit.algorithm().leases() {
            limit.modifiers.reserve = Some(policy);
        }
    }
}

/// The ttl a Reserve names, when it names a valid one.
fn ttl_of(ttl: Option<prost_types::Duration>) -> Option<Duration> {
    ttl.and_then(|ttl| Duration::try_from(ttl).ok())
}

/// Whether a settle of the request dropped a live hold.
fn released(bound: &[Bound<'_>]) -> bool {
    bound
        .iter()
        .flat_map(|s| &s.taken)
        .filter_map(|(decision, _)| Reserved::of(decision))
        .any(|reserved| reserved.call == Call::Settled)
}

/// The request when it names a domain (Limitador answers one without a domain UNKNOWN).
fn with_domain(request: Request<RateLimitRequest>) -> Option<RateLimitRequest> {
    Some(request.into_inner()).filter(|request| !request.domain.is_empty())
}

#[tonic::async_trait]
impl<S: Store> RateLimitService for KuadrantService<S> {
    async fn check_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let Some(request) = with_domain(request) else {
            return Ok(answer(Code::Unknown));
        };
        // Limitador checks one hit, whatever the request's hits_addend.
        let code = self
            .check(request.domain, request.descriptors, 1, Caller::Grpc)
            .await
            .map_err(status_of)?;
        Ok(answer(code))
    }

    async fn report(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let Some(request) = with_domain(request) else {
            return Ok(answer(Code::Unknown));
        };
        // A hits_addend of 0 counts as 1, as Limitador counts it.
        let cost = u64::from(request.hits_addend.max(1));
        let (domain, descriptors) = (request.domain, request.descriptors);
        KuadrantService::report(self, domain, descriptors, cost, Caller::Grpc)
            .await
            .map_err(status_of)?;
        Ok(answer(Code::Ok))
    }

    async fn reserve(
        &self,
        request: Request<ReserveRequest>,
    ) -> Result<Response<ReserveResponse>, Status> {
        let reservations = self.reservations()?;
        let request = request.into_inner();
        if request.domain.is_empty() {
            return Ok(Response::new(ReserveResponse {
                code: Code::Unknown as i32,
                reservation_id: String::new(),
            }));
        }
        if request.descriptors.is_empty() {
            return Ok(Response::new(ReserveResponse {
                code: Code::Ok as i32,
                reservation_id: String::new(),
            }));
        }
        let policy = hold_policy(reservations, request.amount, ttl_of(request.ttl));
        let asked = kuadrant_request(request.domain, request.descriptors, policy.amount);
        let mut limit_name = String::new();
        let decided = self
            .ask(&asked, Charging::AllOrNothing, (policy, true), |bound| {
                if self.metrics.names_limits() {
                    limit_name = limiting_name(bound);
                }
            })
            .await;
        self.count(&asked.domain, &decided, (&limit_name, None, false));
        let decided = decided.map_err(status_of)?;
        let code = decided.response.overall_code();
        let reservation_id = match code {
            Code::Ok => token_in(&decided.response, SETTLE_KEY).unwrap_or_default(),
            _ => String::new(),
        };
        Ok(Response::new(ReserveResponse {
            code: code as i32,
            reservation_id,
        }))
    }

    async fn commit(
        &self,
        request: Request<CommitRequest>,
    ) -> Result<Response<CommitResponse>, Status> {
        let reservations = self.reservations()?;
        let request = request.into_inner();
        let not_released = Response::new(CommitResponse {
            reservation_released: false,
        });
        if request.domain.is_empty() || request.descriptors.is_empty() {
            return Ok(not_released);
        }
        if request.reservation_id.is_empty() {
            // No hold to settle: the actual is reported (RFC 0021).
            let (domain, descriptors) = (request.domain, request.descriptors);
            let actual = request.actual_amount;
            KuadrantService::report(self, domain, descriptors, actual, Caller::Grpc)
                .await
                .map_err(status_of)?;
            return Ok(not_released);
        }
        let policy = hold_policy(reservations, 1, None);
        let settle = Entry {
            key: SETTLE_KEY.into(),
            value: request.reservation_id,
        };
        let descriptors = request
            .descriptors
            .into_iter()
            .map(|mut descriptor| {
                descriptor.entries.push(settle.clone());
                descriptor
            })
            .collect();
        let asked = kuadrant_request(request.domain, descriptors, request.actual_amount);
        let mut reservation_released = false;
        let decided = self
            .ask(&asked, Charging::AllOrNothing, (policy, true), |bound| {
                reservation_released = released(bound);
            })
            .await;
        let actual = request.actual_amount;
        self.count(&asked.domain, &decided, ("", Some(actual), true));
        decided.map_err(status_of)?;
        Ok(Response::new(CommitResponse {
            reservation_released,
        }))
    }
}
