//! The Rate Limit Quota Service, played against by clients generated from Envoy's protos
//! (`envoy-types`), as Envoy's `rate_limit_quota` filter would: each opens a stream, reports
//! per-bucket usage, and reads the assignments.

use std::collections::HashMap;
use std::time::Duration;

use envoy_types::pb::envoy::r#type::v3::rate_limit_strategy::{BlanketRule, Strategy};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::BucketAction as Action;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_client::RateLimitQuotaServiceClient;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use envoy_types::pb::google::protobuf::Duration as ProtoDuration;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;

use crate::support::*;

const CONFIG: &str = "domain: quota
descriptors:
  - key: api
    value: search
    rate_limit: {unit: minute, requests_per_unit: 1000}
  - key: api
    value: free
    rate_limit: {unlimited: true}
  - key: api
    value: report
    rlqs_strategy: requests_per_time_unit
    rate_limit: {unit: minute, requests_per_unit: 600}
";

/// One Envoy's stream: reports go out through `reports`, assignments come in on `answers`.
struct QuotaClient {
    reports: mpsc::Sender<RateLimitQuotaUsageReports>,
    answers: Streaming<RateLimitQuotaResponse>,
    first: bool,
}

impl QuotaClient {
    async fn open(sluice: &Sluice) -> QuotaClient {
        QuotaClient::open_on(sluice.channel().await).await
    }

    /// A stream on `channel`, a connection of the test's choosing.
    async fn open_on(channel: tonic::transport::Channel) -> QuotaClient {
        let mut client = RateLimitQuotaServiceClient::new(channel);
        let (reports, outgoing) = mpsc::channel(16);
        let answers = client
            .stream_rate_limit_quotas(ReceiverStream::new(outgoing))
            .await
            .expect("open the RLQS stream")
            .into_inner();
        QuotaClient {
            reports,
            answers,
            first: true,
        }
    }

    /// Reports `requests` on bucket `api=<value>` over the last `elapsed` (the first report
    /// of the stream names the domain).
    async fn report(&mut self, value: &str, requests: u64, elapsed: Duration) {
        let usage = BucketQuotaUsage {
            bucket_id: Some(bucket(value)),
            time_elapsed: Some(ProtoDuration {
                seconds: elapsed.as_secs() as i64,
                nanos: elapsed.subsec_nanos() as i32,
            }),
            num_requests_allowed: requests,
            num_requests_denied: 0,
        };
        let domain = if self.first { "quota" } else { "" };
        self.first = false;
        self.reports
            .send(RateLimitQuotaUsageReports {
                domain: domain.into(),
                bucket_quota_usages: vec![usage],
            })
            .await
            .expect("sluice takes reports");
    }

    /// The next response (within 5 s).
    async fn answer(&mut self) -> RateLimitQuotaResponse {
        tokio::time::timeout(Duration::from_secs(5), self.answers.message())
            .await
            .expect("an answer within 5 s")
            .expect("a healthy stream")
            .expect("the stream stays open")
    }

    /// Reports, and returns the assigned action of that bucket.
    async fn share(&mut self, value: &str, requests: u64, elapsed: Duration) -> Action {
        self.report(value, requests, elapsed).await;
        action(&self.answer().await)
    }
}

fn bucket(value: &str) -> BucketId {
    BucketId {
        bucket: HashMap::from([("api".to_string(), value.to_string())]),
    }
}

/// The one action of `response`.
fn action(response: &RateLimitQuotaResponse) -> Action {
    assert_eq!(response.bucket_action.len(), 1, "{response:?}");
    response.bucket_action[0].bucket_action.expect("an action")
}

/// The share per minute an assignment gives (0 for deny all), and its time-to-live.
fn tokens(action: &Action) -> (u64, Duration) {
    let (bucket, ttl) = token_bucket(action);
    // The interval is rounded up to a microsecond: the share, to the nearest request.
    let share = bucket.map_or(0, |(fill, interval)| {
        (fill as f64 * 60.0 / interval.as_secs_f64()).round() as u64
    });
    (share, ttl)
}

/// An assignment's token bucket (tokens per fill, fill interval; `None` for deny all), and
/// its time-to-live. Its bucket holds one fill.
fn token_bucket(action: &Action) -> (Option<(u64, Duration)>, Duration) {
    let Action::QuotaAssignmentAction(assignment) = action else {
        panic!("not an assignment: {action:?}");
    };
    let ttl = assignment
        .assignment_time_to_live
        .map(|d| Duration::new(d.seconds as u64, d.nanos as u32))
        .expect("a time-to-live");
    let strategy = assignment
        .rate_limit_strategy
        .and_then(|s| s.strategy)
        .expect("a strategy");
    let bucket = match strategy {
        Strategy::TokenBucket(bucket) => {
            let fill = bucket.tokens_per_fill.map(|t| t.value).expect("a fill");
            assert_eq!(bucket.max_tokens, fill, "the bucket holds one fill");
            let interval = bucket.fill_interval.expect("a fill interval");
            let interval = Duration::new(interval.seconds as u64, interval.nanos as u32);
            Some((u64::from(fill), interval))
        }
        Strategy::BlanketRule(rule) if rule == BlanketRule::DenyAll as i32 => None,
        other => panic!("not a share: {other:?}"),
    };
    (bucket, ttl)
}

fn blanket(action: &Action) -> BlanketRule {
    let Action::QuotaAssignmentAction(assignment) = action else {
        panic!("not an assignment: {action:?}");
    };
    match assignment.rate_limit_strategy.and_then(|s| s.strategy) {
        Some(Strategy::BlanketRule(rule)) => BlanketRule::try_from(rule).expect("a blanket rule"),
        other => panic!("not a blanket rule: {other:?}"),
    }
}

const SECOND: Duration = Duration::from_secs(1);

#[tokio::test]
async fn five_clients_converge_to_max_min_fair_shares_that_never_exceed_the_limit() {
    let sluice = Sluice::start(CONFIG, &[]);
    let mut clients = Vec::new();
    for _ in 0..5 {
        clients.push(QuotaClient::open(&sluice).await);
    }
    // Demands per minute (requests per second x 60): 60, 120, 600, 900, 1200 of 1000 a
    // minute. Max-min fair: 60 and 120 met, 820 split three ways.
    let per_second = [1, 2, 10, 15, 20];
    let mut latest = [0u64; 5];
    for round in 0..4 {
        for (i, client) in clients.iter_mut().enumerate() {
            let (share, ttl) = tokens(&client.share("search", per_second[i], SECOND).await);
            latest[i] = share;
            assert!(ttl >= Duration::from_secs(2), "{ttl:?}");
            let total: u64 = latest.iter().sum();
            assert!(total <= 1000, "round {round}: {latest:?} add up to {total}");
        }
    }
    assert_eq!(latest, [60, 120, 274, 273, 273], "max-min fair shares");
    let (_, metrics) = sluice.http_get("/metrics");
    assert_eq!(
        series(
            &metrics,
            "sluice_rlqs_active_clients{domain=\"quota\",rule=\"quota.api_search\"}"
        ),
        Some(5.0),
        "{metrics}"
    );
    assert!(
        series(
            &metrics,
            "sluice_rlqs_reported_requests_total{domain=\"quota\",rule=\"quota.api_search\",decision=\"allowed\"}"
        )
        .is_some_and(|n| n > 0.0),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_client_that_goes_quiet_gives_its_share_back_after_its_time_to_live() {
    let sluice = Sluice::start(CONFIG, &["--rlqs-min-assignment-ttl", "1s"]);
    let (mut a, mut b) = (
        QuotaClient::open(&sluice).await,
        QuotaClient::open(&sluice).await,
    );
    let short = Duration::from_millis(200);
    tokens(&a.share("search", 100, short).await);
    tokens(&b.share("search", 100, short).await);
    assert_eq!(tokens(&a.share("search", 100, short).await).0, 500);
    // b stops reporting (its stream stays open): its 1 s claim lapses, and a gets it all.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(tokens(&a.share("search", 100, short).await).0, 1000);
    // b comes back; a client that closes its stream gives its share back at once.
    tokens(&b.share("search", 100, short).await);
    assert_eq!(tokens(&a.share("search", 100, short).await).0, 500);
    drop(b);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(tokens(&a.share("search", 100, short).await).0, 1000);
}

/// A connection to `target` through a link the test can cut as a killed client's is cut:
/// its sockets close with no end of stream and no GOAWAY sent. The link carries one
/// connection; aborting the task cuts it.
async fn cuttable_link(
    target: std::net::SocketAddr,
) -> (tonic::transport::Channel, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("an address");
    let link = tokio::spawn(async move {
        if let Ok((mut inbound, _)) = listener.accept().await {
            if let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await {
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            }
        }
    });
    let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
        .expect("valid uri")
        .connect()
        .await
        .expect("connect through the link");
    (channel, link)
}

#[tokio::test]
async fn an_envoy_that_dies_gives_its_share_back_at_once_not_after_its_time_to_live() {
    // Assignments live 30 s: only the dead client's connection ending can return its share.
    let sluice = Sluice::start(CONFIG, &["--rlqs-min-assignment-ttl", "30s"]);
    let mut a = QuotaClient::open(&sluice).await;
    let short = Duration::from_millis(200);
    tokens(&a.share("search", 100, short).await);
    let (channel, link) = cuttable_link(sluice.grpc_addr).await;
    let mut dying = QuotaClient::open_on(channel).await;
    tokens(&dying.share("search", 100, short).await);
    assert_eq!(tokens(&a.share("search", 100, short).await).0, 500);
    // Killed: no end of stream is sent; the connection just goes.
    link.abort();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(tokens(&a.share("search", 100, short).await).0, 1000);
    drop(dying);
}

#[tokio::test]
async fn unlimited_and_unknown_buckets_get_blanket_rules() {
    let allow = Sluice::start(CONFIG, &[]);
    let mut client = QuotaClient::open(&allow).await;
    assert_eq!(
        blanket(&client.share("free", 5, SECOND).await),
        BlanketRule::AllowAll
    );
    assert_eq!(
        blanket(&client.share("nowhere", 5, SECOND).await),
        BlanketRule::AllowAll,
        "the default action"
    );
    let deny = Sluice::start(CONFIG, &["--rlqs-default-action", "deny"]);
    let mut client = QuotaClient::open(&deny).await;
    assert_eq!(
        blanket(&client.share("nowhere", 5, SECOND).await),
        BlanketRule::DenyAll
    );
}

#[tokio::test]
async fn a_rule_can_assign_requests_per_time_unit() {
    let sluice = Sluice::start(CONFIG, &[]);
    let (mut a, mut b) = (
        QuotaClient::open(&sluice).await,
        QuotaClient::open(&sluice).await,
    );
    a.share("report", 20, SECOND).await;
    b.share("report", 20, SECOND).await;
    let Action::QuotaAssignmentAction(assignment) = a.share("report", 20, SECOND).await else {
        panic!("not an assignment");
    };
    match assignment.rate_limit_strategy.and_then(|s| s.strategy) {
        Some(Strategy::RequestsPerTimeUnit(per_unit)) => {
            assert_eq!(per_unit.requests_per_time_unit, 300, "half of 600 a minute");
            assert_eq!(
                per_unit.time_unit,
                envoy_types::pb::envoy::r#type::v3::RateLimitUnit::Minute as i32
            );
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn quiet_buckets_and_buckets_the_config_drops_are_abandoned() {
    let sluice = Sluice::start(CONFIG, &["--rlqs-abandon-after", "1s"]);
    let mut client = QuotaClient::open(&sluice).await;
    tokens(&client.share("search", 5, SECOND).await);
    let abandoned = client.answer().await;
    assert!(matches!(action(&abandoned), Action::AbandonAction(_)));
    // Subscribed again, then the config no longer has the bucket.
    tokens(&client.share("search", 5, SECOND).await);
    std::fs::write(
        sluice.config_dir.path().join("config.yaml"),
        "domain: quota\ndescriptors:\n  - key: api\n    value: free\n    rate_limit: {unlimited: true}\n",
    )
    .unwrap();
    let dropped = client.answer().await;
    assert!(
        matches!(action(&dropped), Action::AbandonAction(_)),
        "{dropped:?}"
    );
}

#[tokio::test]
async fn on_shutdown_every_assignment_expires_at_once() {
    let mut sluice = Sluice::start(CONFIG, &["--shutdown-drain-delay", "0s"]);
    let mut client = QuotaClient::open(&sluice).await;
    tokens(&client.share("search", 5, SECOND).await);
    sluice.begin_shutdown();
    let expired = client.answer().await;
    let Action::QuotaAssignmentAction(assignment) = action(&expired) else {
        panic!("{expired:?}");
    };
    assert_eq!(
        assignment.assignment_time_to_live,
        Some(ProtoDuration {
            seconds: 0,
            nanos: 0
        })
    );
}

#[tokio::test]
async fn bad_reports_are_refused_clearly_and_counted() {
    let sluice = Sluice::start(CONFIG, &[]);
    // A first report without a domain ends the stream with INVALID_ARGUMENT naming it.
    let mut client = QuotaClient::open(&sluice).await;
    client.first = false;
    client.report("search", 1, SECOND).await;
    let status = tokio::time::timeout(Duration::from_secs(5), client.answers.message())
        .await
        .expect("an answer")
        .expect_err("a stream error");
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(status.message().contains("domain"), "{status:?}");
    // An empty bucket id is refused and counted; the stream goes on.
    let mut client = QuotaClient::open(&sluice).await;
    client
        .reports
        .send(RateLimitQuotaUsageReports {
            domain: "quota".into(),
            bucket_quota_usages: vec![BucketQuotaUsage::default()],
        })
        .await
        .unwrap();
    client.first = false;
    tokens(&client.share("search", 5, SECOND).await);
    // An absurd time elapsed (i64::MAX seconds) is answered, its time-to-live capped.
    let (_, ttl) = tokens(
        &client
            .share("search", 5, Duration::from_secs(i64::MAX as u64))
            .await,
    );
    assert_eq!(ttl, Duration::from_secs(600));
    let (_, metrics) = sluice.http_get("/metrics");
    assert_eq!(
        series(
            &metrics,
            "sluice_rlqs_rejected_buckets_total{reason=\"empty_bucket_id\"}"
        ),
        Some(1.0),
        "{metrics}"
    );
}

#[tokio::test]
async fn two_sluice_processes_on_one_redis_assign_from_one_budget() {
    let redis = crate::support::redis::RedisServer::start(&[]);
    let url = redis.url();
    let args = ["--store", "redis", "--redis-url", url.as_str()];
    let (one, two) = (Sluice::start(CONFIG, &args), Sluice::start(CONFIG, &args));
    let mut clients = [
        QuotaClient::open(&one).await,
        QuotaClient::open(&two).await,
        QuotaClient::open(&two).await,
    ];
    // 600, 1200 and 1200 a minute wanted of 1000: a third each, across both processes.
    let per_second = [10, 20, 20];
    let mut latest = [0u64; 3];
    for _ in 0..4 {
        for (i, client) in clients.iter_mut().enumerate() {
            latest[i] = tokens(&client.share("search", per_second[i], SECOND).await).0;
            let total: u64 = latest.iter().sum();
            assert!(total <= 1000, "{latest:?} add up to {total}");
        }
    }
    assert_eq!(latest, [334, 333, 333]);
    // The claims live in Redis, one hash for the bucket.
    let claims = redis.cli(&["HLEN", "rlqs_quota_api_search"]);
    assert_eq!(claims.trim(), "3", "{claims}");
}

/// A client's local enforcement, as Envoy's filter does it: a token bucket from the
/// assignment (a new, full bucket when the assignment changes), refilled continuously.
struct Enforcer {
    bucket: Option<(u64, Duration)>,
    tokens: f64,
}

impl Enforcer {
    fn apply(&mut self, bucket: Option<(u64, Duration)>) {
        if bucket != self.bucket {
            self.bucket = bucket;
            self.tokens = bucket.map_or(0.0, |(fill, _)| fill as f64);
        }
    }

    fn refill(&mut self, elapsed: Duration) {
        if let Some((fill, interval)) = self.bucket {
            let added = fill as f64 * elapsed.as_secs_f64() / interval.as_secs_f64();
            self.tokens = (self.tokens + added).min(fill as f64);
        }
    }

    fn admit(&mut self) -> bool {
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            return true;
        }
        false
    }
}

#[tokio::test]
async fn clients_enforcing_their_assignments_stay_within_the_limit_in_any_minute() {
    // Five Envoys wanting 60, 120, 600, 900 and 1,200 requests a minute of one 1,000 a
    // minute bucket, enforcing what they are assigned and reporting every 5 s, for 5 minutes
    // of virtual time (10 ms steps); the reports go to the real server.
    let sluice = Sluice::start(CONFIG, &[]);
    let rates = [1.0, 2.0, 10.0, 15.0, 20.0];
    let mut clients = Vec::new();
    for _ in 0..rates.len() {
        clients.push(QuotaClient::open(&sluice).await);
    }
    let mut enforcers: Vec<Enforcer> = (0..rates.len())
        .map(|_| Enforcer {
            bucket: None,
            tokens: 0.0,
        })
        .collect();
    let step = Duration::from_millis(10);
    let report_every = 500; // steps: 5 s
    let steps = 30_000; // 5 minutes
    let mut owed = vec![0.0f64; rates.len()];
    let mut usage = vec![(0u64, 0u64); rates.len()];
    let mut admitted_at = vec![0u64; steps];
    let mut changes = 0;
    for (t, admitted_now) in admitted_at.iter_mut().enumerate() {
        if t % report_every == 0 {
            let elapsed = if t == 0 {
                step
            } else {
                step * report_every as u32
            };
            for (i, client) in clients.iter_mut().enumerate() {
                let (allowed, denied) = std::mem::take(&mut usage[i]);
                client
                    .reports
                    .send(RateLimitQuotaUsageReports {
                        domain: if client.first {
                            "quota".into()
                        } else {
                            String::new()
                        },
                        bucket_quota_usages: vec![BucketQuotaUsage {
                            bucket_id: Some(bucket("search")),
                            time_elapsed: Some(ProtoDuration {
                                seconds: elapsed.as_secs() as i64,
                                nanos: elapsed.subsec_nanos() as i32,
                            }),
                            num_requests_allowed: allowed,
                            num_requests_denied: denied,
                        }],
                    })
                    .await
                    .unwrap();
                client.first = false;
                let (bucket, _) = token_bucket(&action(&client.answer().await));
                if bucket != enforcers[i].bucket {
                    changes += 1;
                }
                enforcers[i].apply(bucket);
            }
        }
        for (i, enforcer) in enforcers.iter_mut().enumerate() {
            enforcer.refill(step);
            owed[i] += rates[i] * step.as_secs_f64();
            while owed[i] >= 1.0 {
                owed[i] -= 1.0;
                if enforcer.admit() {
                    usage[i].0 += 1;
                    *admitted_now += 1;
                } else {
                    usage[i].1 += 1;
                }
            }
        }
    }
    // The most admitted in any minute, from the start and once the shares have settled
    // (after two report intervals).
    let minute = 6_000;
    let window = |from: usize| {
        (from..=steps - minute)
            .map(|start| admitted_at[start..start + minute].iter().sum::<u64>())
            .max()
            .unwrap_or(0)
    };
    let (any, settled) = (window(0), window(2 * report_every));
    // Each assignment's bucket holds a tenth of its share: a settled minute admits at most
    // 1,100; a change of assignment starts a full bucket, a tenth of a share more each.
    assert!(settled <= 1100, "{settled} admitted in a settled minute");
    assert!(
        any <= 1100 + changes * 100,
        "{any} admitted in a minute with {changes} changes of assignment"
    );
    assert!(settled >= 900, "the limit is used: {settled} in a minute");
}
