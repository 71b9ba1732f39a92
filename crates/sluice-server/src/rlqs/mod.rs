//! Envoy's quota-based global rate limiting: the Rate Limit Quota Service
//! (`envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas`). Each Envoy
//! keeps one stream open and reports per-bucket usage; sluice answers with quota assignments
//! (a token bucket of the client's fair share of the bucket's configured limit, with a
//! time-to-live) that Envoy enforces locally. `bucket` maps a bucket to a limit and a share to a
//! strategy, and `stream` runs one client's stream. Below the server: the reports' decoding
//! (`sluice_proto::wire`), the max-min fair split (`sluice_core::share`) and the claims every
//! client makes on a bucket (`sluice_store::quota_budget`, re-exported here as `budget`).

pub mod bucket;
/// Where the claims on buckets are kept: the store's side of RLQS.
pub use sluice_store::quota_budget as budget;
mod report;
mod stream;
/// The usage reports as they come over the wire (decoded in the proto crate).
pub use sluice_proto::wire;

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use futures_util::Stream;
use tokio::sync::watch;
use tonic::{Request, Response, Status, Streaming};

use crate::metrics::Metrics;
use budget::Budget;
use sluice_config::Config;
use sluice_proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_server::RateLimitQuotaService;
use wire::UsageReports;

/// What a bucket no rule matches gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DefaultAction {
    /// Allow all.
    #[default]
    Allow,
    /// Deny all.
    Deny,
}

/// How the service treats streams and buckets.
#[derive(Debug, Clone, Copy)]
pub struct RlqsSettings {
    pub default_action: DefaultAction,
    /// The shortest time-to-live of an assignment; it is otherwise twice the client's report
    /// interval.
    pub min_assignment_ttl: Duration,
    /// A bucket a client has not reported for this long is abandoned.
    pub abandon_after: Duration,
    /// Most buckets one stream may subscribe to.
    pub max_buckets_per_stream: usize,
}

impl Default for RlqsSettings {
    fn default() -> Self {
        RlqsSettings {
            default_action: DefaultAction::Allow,
            min_assignment_ttl: Duration::from_secs(2),
            abandon_after: Duration::from_secs(60),
            max_buckets_per_stream: 1000,
        }
    }
}

/// The RLQS service over the current config and a budget.
pub struct QuotaService<B> {
    shared: Arc<Shared<B>>,
}

/// What every stream of the service shares.
struct Shared<B> {
    config: Arc<ArcSwap<Config>>,
    budget: Arc<B>,
    settings: RlqsSettings,
    metrics: Arc<Metrics>,
    /// Turns true when sluice stops: every stream expires its assignments and ends.
    stopping: watch::Receiver<bool>,
    next_client: AtomicU64,
    /// This process, in client ids: ids stay unique across sluice replicas sharing a budget.
    process: String,
}

impl<B: Budget> QuotaService<B> {
    pub fn new(
        config: Arc<ArcSwap<Config>>,
        budget: Arc<B>,
        settings: RlqsSettings,
        metrics: Arc<Metrics>,
        stopping: watch::Receiver<bool>,
    ) -> QuotaService<B> {
        let process = format!("{:x}", sluice_store::unique_process_id());
        QuotaService {
            shared: Arc::new(Shared {
                config,
                budget,
                settings,
                metrics,
                stopping,
                next_client: AtomicU64::new(0),
                process,
            }),
        }
    }
}

#[tonic::async_trait]
impl<B: Budget> RateLimitQuotaService for QuotaService<B> {
    type StreamRateLimitQuotasStream = Pin<Box<dyn Stream<Item = stream::Answer> + Send>>;

    async fn stream_rate_limit_quotas(
        &self,
        request: Request<Streaming<UsageReports>>,
    ) -> Result<Response<Self::StreamRateLimitQuotasStream>, Status> {
        let number = self.shared.next_client.fetch_add(1, Ordering::Relaxed);
        let client = format!("{}-{number}", self.shared.process);
        let run = stream::ClientStream::new(self.shared.clone(), client);
        Ok(Response::new(Box::pin(run.answers(request.into_inner()))))
    }
}
