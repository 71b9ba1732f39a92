//! One client's RLQS stream: its domain (named by its first report), the buckets it has
//! subscribed to by reporting them, and what it was assigned. Reports are answered with
//! assignments; a quiet bucket is abandoned, a bucket the config no longer has is abandoned,
//! a changed limit is reassigned, and when sluice stops every assignment expires at once.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::Stream;
use tokio::sync::watch;
use tonic::{Status, Streaming};

use super::bucket::{self, Resolved};
use super::budget::{Ask, Budget};
use super::report;
use super::wire::{BucketQuotaUsage, UsageReports};
use super::{DefaultAction, Shared};
use sluice_config::Config;
use sluice_proto::envoy::r#type::v3::RateLimitStrategy;
use sluice_proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::{
    AbandonAction, BucketAction as Action, QuotaAssignmentAction,
};
use sluice_proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::BucketAction;
use sluice_proto::envoy::service::rate_limit_quota::v3::{BucketId, RateLimitQuotaResponse};
use sluice_store::{Clock, SystemClock};

/// How often quiet buckets and config changes are looked at.
const TICK: Duration = Duration::from_millis(250);

/// The longest time-to-live of an assignment.
const MAX_TTL: Duration = Duration::from_secs(600);

/// Most requests one report may count (more is not a real report).
const MAX_REPORTED: u64 = 1 << 50;

/// A bucket's pairs, sorted: the same bucket whatever order its map came in.
type Pairs = Vec<(String, String)>;

/// A bucket the client reports (its id is its pairs, the key it is kept under).
struct Subscribed {
    resolved: Resolved,
    last_report: Instant,
    /// Requests per period it wants, as last measured.
    demand: u64,
    ttl: Duration,
}

/// One answer on the stream: assignments, or the error that ends it.
pub(super) type Answer = Result<RateLimitQuotaResponse, Status>;

pub(super) struct ClientStream<B: Budget> {
    shared: Arc<Shared<B>>,
    client: String,
    domain: Option<String>,
    /// Boxed: a table slot is a key and a pointer, so the table's spare slots cost little.
    buckets: HashMap<Pairs, Box<Subscribed>>,
    config_seen: Arc<Config>,
}

/// A stream being answered: the client's state and the events it waits on.
struct Running<B: Budget> {
    client: ClientStream<B>,
    reports: Streaming<UsageReports>,
    tick: tokio::time::Interval,
    stopping: watch::Receiver<bool>,
    ended: bool,
}

impl<B: Budget> ClientStream<B> {
    pub(super) fn new(shared: Arc<Shared<B>>, client: String) -> ClientStream<B> {
        let config_seen = shared.config.load_full();
        ClientStream {
            shared,
            client,
            domain: None,
            buckets: HashMap::new(),
            config_seen,
        }
    }

    /// The answers to `reports`, until the client closes the stream, breaks it, sends
    /// something invalid, or sluice stops. The work is done as the client's connection
    /// reads the answers: a stream has no task or channel of its own, and between events it
    /// holds only what waits for the next one (each event's work is boxed while it runs).
    pub(super) fn answers(self, reports: Streaming<UsageReports>) -> impl Stream<Item = Answer> {
        let stopping = self.shared.stopping.clone();
        let running = Running {
            client: self,
            reports,
            tick: tokio::time::interval(TICK),
            stopping,
            ended: false,
        };
        futures_util::stream::unfold(running, |mut running| async move {
            let answer = running.next_answer().await?;
            Some((answer, running))
        })
    }

    /// The assignments a report calls for.
    async fn on_report(&mut self, report: UsageReports) -> Result<Vec<BucketAction>, Status> {
        let domain = match (&self.domain, report.domain.as_str()) {
            (None, "") => {
                return Err(Status::invalid_argument(
                    "domain: the first report of a stream must name its domain",
                ))
            }
            (None, given) => {
                self.domain = Some(given.to_string());
                given.to_string()
            }
            (Some(known), given) if given.is_empty() || given == known => known.clone(),
            (Some(known), given) => {
                return Err(Status::invalid_argument(format!(
                    "domain: this stream is for '{known}', not '{given}': open another stream"
                )))
            }
        };
        let mut reported: Vec<(Pairs, Subscribed)> = Vec::new();
        for usage in report.bucket_quota_usages {
            let new_ones = reported
                .iter()
                .filter(|(pairs, _)| !self.buckets.contains_key(pairs))
                .count();
            match self.on_usage(&domain, usage, new_ones) {
                Ok(bucket) => reported.push(bucket),
                Err(reason) => report::rejected(self.shared.metrics.series(), reason),
            }
        }
        // The report's buckets are claimed together: one round trip's wait on Redis, not one
        // per bucket.
        let claims = reported
            .iter()
            .map(|(pairs, bucket)| self.assign(&domain, pairs, bucket));
        let actions = futures_util::future::join_all(claims).await;
        for (pairs, bucket) in reported {
            self.buckets.insert(pairs, Box::new(bucket));
        }
        Ok(actions)
    }

    /// The bucket one usage reports, as it now stands, or why the bucket is refused;
    /// `new_ones` buckets of the same report are new to the stream.
    fn on_usage(
        &self,
        domain: &str,
        usage: BucketQuotaUsage,
        new_ones: usize,
    ) -> Result<(Pairs, Subscribed), &'static str> {
        let Some(id) = usage.bucket_id.filter(|id| !id.bucket.is_empty()) else {
            tracing::debug!(client = %self.client, "RLQS report without a bucket id");
            return Err("empty_bucket_id");
        };
        if id.bucket.iter().any(|(k, v)| k.is_empty() || v.is_empty()) {
            return Err("empty_bucket_pair");
        }
        let reported = usage
            .num_requests_allowed
            .checked_add(usage.num_requests_denied)
            .filter(|n| *n <= MAX_REPORTED)
            .ok_or("absurd_counts")?;
        let elapsed = match usage.time_elapsed {
            Some(d) if d.seconds < 0 || d.nanos < 0 => return Err("negative_time_elapsed"),
            Some(d) => Duration::new(d.seconds as u64, d.nanos as u32),
            None => Duration::ZERO,
        };
        // Exactly as long as the id: the stream keeps it for the bucket's life.
        let mut pairs: Pairs = Vec::with_capacity(id.bucket.len());
        pairs.extend(id.bucket);
        pairs.sort();
        let is_new = !self.buckets.contains_key(&pairs);
        if is_new && self.buckets.len() + new_ones >= self.shared.settings.max_buckets_per_stream {
            return Err("too_many_buckets");
        }
        let config = self.shared.config.load();
        let resolved = bucket::resolve(&config, domain, &pairs);
        let ttl = elapsed
            .saturating_mul(2)
            .min(MAX_TTL)
            .max(self.shared.settings.min_assignment_ttl);
        let demand = match &resolved {
            // Until a client has reported a while, it is taken to want the whole limit: it
            // gets an equal split.
            Resolved::Limited { limit, .. } if is_new || elapsed.is_zero() => {
                u64::from(limit.requests_per_unit)
            }
            Resolved::Limited { limit, .. } => {
                let per_period = u128::from(reported) * u128::from(limit.period_us())
                    / elapsed.as_micros().max(1);
                u64::try_from(per_period).unwrap_or(u64::MAX)
            }
            _ => 0,
        };
        if let Resolved::Limited { rule, .. } = &resolved {
            report::usage(
                self.shared.metrics.series(),
                domain,
                rule,
                usage.num_requests_allowed,
                usage.num_requests_denied,
            );
        }
        let subscribed = Subscribed {
            resolved,
            last_report: Instant::now(),
            demand,
            ttl,
        };
        Ok((pairs, subscribed))
    }

    /// The assignment of `bucket` now: its share of its limit, allow all, or the default.
    async fn assign(
        &self,
        domain: &str,
        pairs: &[(String, String)],
        bucket: &Subscribed,
    ) -> BucketAction {
        let strategy = match &bucket.resolved {
            Resolved::Unknown => {
                bucket::blanket(self.shared.settings.default_action == DefaultAction::Allow)
            }
            Resolved::Unlimited { .. } => bucket::blanket(true),
            Resolved::Limited {
                budget_key,
                rule,
                limit,
                strategy: kind,
            } => {
                let now = SystemClock.now_us();
                let ask = Ask {
                    bucket: budget_key,
                    client: &self.client,
                    demand: bucket.demand.min(u64::from(limit.requests_per_unit)),
                    limit: u64::from(limit.requests_per_unit),
                    now_us: now,
                    expires_at_us: now + bucket.ttl.as_micros() as u64,
                };
                match self.shared.budget.claim(&ask).await {
                    Ok((share, clients)) => {
                        let series = self.shared.metrics.series();
                        report::assignment(series, domain, rule, share, clients);
                        bucket::strategy(limit, *kind, share)
                    }
                    Err(error) => {
                        // No share can be known: the bucket gets the default action until
                        // the store answers again.
                        tracing::warn!(%error, bucket = %budget_key, "RLQS budget unavailable");
                        report::rejected(self.shared.metrics.series(), "store_error");
                        bucket::blanket(self.shared.settings.default_action == DefaultAction::Allow)
                    }
                }
            }
        };
        assignment(pairs, strategy, bucket.ttl)
    }

    /// Abandons quiet buckets; reassigns or abandons buckets a config change touched.
    async fn on_tick(&mut self) -> Vec<BucketAction> {
        let mut actions = Vec::new();
        let abandon_after = self.shared.settings.abandon_after;
        let quiet: Vec<Pairs> = self
            .buckets
            .iter()
            .filter(|(_, b)| b.last_report.elapsed() >= abandon_after)
            .map(|(pairs, _)| pairs.clone())
            .collect();
        for pairs in quiet {
            if let Some(bucket) = self.buckets.remove(&pairs) {
                self.release(&bucket.resolved).await;
                actions.push(abandon(&pairs));
            }
        }
        let config = self.shared.config.load_full();
        if !Arc::ptr_eq(&config, &self.config_seen) {
            self.config_seen = config.clone();
            if let Some(domain) = self.domain.clone() {
                actions.extend(self.on_config_change(&config, &domain).await);
            }
        }
        actions
    }

    /// The actions a new config calls for: abandon what it no longer limits, reassign what
    /// changed.
    async fn on_config_change(&mut self, config: &Config, domain: &str) -> Vec<BucketAction> {
        let mut actions = Vec::new();
        let pairs: Vec<Pairs> = self.buckets.keys().cloned().collect();
        for key in pairs {
            let resolved = bucket::resolve(config, domain, &key);
            let Some(bucket) = self.buckets.get(&key) else {
                continue;
            };
            if resolved == bucket.resolved {
                continue;
            }
            if resolved == Resolved::Unknown {
                if let Some(bucket) = self.buckets.remove(&key) {
                    self.release(&bucket.resolved).await;
                    actions.push(abandon(&key));
                }
                continue;
            }
            let Some(bucket) = self.buckets.get_mut(&key) else {
                continue;
            };
            let old = std::mem::replace(&mut bucket.resolved, resolved);
            self.release(&old).await;
            if let Some(bucket) = self.buckets.get(&key) {
                actions.push(self.assign(domain, &key, bucket).await);
            }
        }
        actions
    }

    /// Every assignment expires now (time-to-live 0): the client falls back to its own
    /// configured behaviour while sluice is away.
    fn expiries(&self) -> Vec<BucketAction> {
        self.buckets
            .keys()
            .map(|pairs| assignment(pairs, bucket::blanket(true), Duration::ZERO))
            .collect()
    }

    async fn release(&self, resolved: &Resolved) {
        if let Resolved::Limited { budget_key, .. } = resolved {
            self.shared.budget.release(budget_key, &self.client).await;
        }
    }

    async fn release_all(&mut self) {
        let held = self.take_held();
        give_back(&*self.shared.budget, &held, &self.client).await;
    }

    /// Takes every bucket off the stream: the budget keys it holds a share of.
    fn take_held(&mut self) -> Vec<String> {
        self.buckets
            .drain()
            .filter_map(|(_, bucket)| match bucket.resolved {
                Resolved::Limited { budget_key, .. } => Some(budget_key),
                _ => None,
            })
            .collect()
    }
}

/// `client` gives its shares of the `held` budget keys back.
async fn give_back<B: Budget>(budget: &B, held: &[String], client: &str) {
    for bucket in held {
        budget.release(bucket, client).await;
    }
}

impl<B: Budget> Running<B> {
    /// The next answer, once some event calls for one; `None` when the stream has ended.
    async fn next_answer(&mut self) -> Option<Answer> {
        loop {
            if self.ended {
                return None;
            }
            let actions = tokio::select! {
                report = self.reports.message() => match report {
                    Ok(Some(report)) => match Box::pin(self.client.on_report(report)).await {
                        Ok(actions) => actions,
                        Err(status) => {
                            self.end().await;
                            return Some(Err(status));
                        }
                    },
                    Ok(None) | Err(_) => {
                        self.end().await;
                        return None;
                    }
                },
                _ = self.tick.tick() => Box::pin(self.client.on_tick()).await,
                changed = self.stopping.changed() => {
                    if changed.is_err() || *self.stopping.borrow() {
                        let actions = self.client.expiries();
                        self.end().await;
                        actions
                    } else {
                        Vec::new()
                    }
                }
            };
            if !actions.is_empty() {
                return Some(Ok(RateLimitQuotaResponse {
                    bucket_action: actions,
                }));
            }
        }
    }

    /// Gives every share back; the stream answers nothing more.
    async fn end(&mut self) {
        self.ended = true;
        Box::pin(self.client.release_all()).await;
    }
}

impl<B: Budget> Drop for ClientStream<B> {
    /// A stream dropped before it ended (its client reset it, or its connection broke)
    /// still gives its shares back, on a task of their own.
    fn drop(&mut self) {
        let held = self.take_held();
        if held.is_empty() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let budget = self.shared.budget.clone();
        let client = std::mem::take(&mut self.client);
        runtime.spawn(async move { give_back(&*budget, &held, &client).await });
    }
}

/// The id of the bucket `pairs` name, as the client sent it.
fn bucket_id(pairs: &[(String, String)]) -> BucketId {
    BucketId {
        bucket: pairs.iter().cloned().collect(),
    }
}

fn assignment(
    pairs: &[(String, String)],
    strategy: RateLimitStrategy,
    ttl: Duration,
) -> BucketAction {
    BucketAction {
        bucket_id: Some(bucket_id(pairs)),
        bucket_action: Some(Action::QuotaAssignmentAction(QuotaAssignmentAction {
            assignment_time_to_live: Some(bucket::duration(ttl)),
            rate_limit_strategy: Some(strategy),
        })),
    }
}

fn abandon(pairs: &[(String, String)]) -> BucketAction {
    BucketAction {
        bucket_id: Some(bucket_id(pairs)),
        bucket_action: Some(Action::AbandonAction(AbandonAction {})),
    }
}
