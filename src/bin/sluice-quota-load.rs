//! `sluice-quota-load`: plays N Envoys against sluice's RLQS service, each on its own stream
//! reporting B buckets every interval with a demand of its own, and prints, second by second,
//! the share each client holds of the first bucket (its per-period rate) and how many reports
//! went through.
//!
//!   sluice-quota-load --target 127.0.0.1:8081 --domain edge_quota --key api --value search \
//!                     --clients 5 --demand 1,2,10,15,20 --interval 1s --duration 10s

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use sluice_proto::envoy::r#type::v3::rate_limit_strategy::Strategy;
use sluice_proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::BucketAction;
use sluice_proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_client::RateLimitQuotaServiceClient;
use sluice_proto::envoy::service::rate_limit_quota::v3::{BucketId, RateLimitQuotaResponse};
use sluice_server::rlqs::wire::{BucketQuotaUsage, UsageReports};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Channel, Endpoint};

#[derive(Parser)]
#[command(name = "sluice-quota-load", about = "RLQS clients for sluice")]
struct Args {
    /// host:port of the gRPC server.
    #[arg(long, default_value = "127.0.0.1:8081")]
    target: String,
    #[arg(long, default_value = "edge_quota")]
    domain: String,
    /// The bucket's key.
    #[arg(long, default_value = "api")]
    key: String,
    /// The first bucket's value; more buckets are `<value>-1`, `<value>-2`, ...
    #[arg(long, default_value = "search")]
    value: String,
    /// Clients, each on its own stream.
    #[arg(long, default_value_t = 5)]
    clients: usize,
    /// Connections the streams share (0: one per client, as separate Envoys have).
    #[arg(long, default_value_t = 0)]
    connections: usize,
    /// Buckets each client reports.
    #[arg(long, default_value_t = 1)]
    buckets: usize,
    /// Requests per second each client wants, comma-separated, reused in turn.
    #[arg(long, default_value = "10", value_delimiter = ',')]
    demand: Vec<f64>,
    /// How often each client reports.
    #[arg(long, default_value = "1s", value_parser = sluice_core::duration::parse)]
    interval: Duration,
    #[arg(long, default_value = "10s", value_parser = sluice_core::duration::parse)]
    duration: Duration,
}

/// What the clients share with the printer.
#[derive(Default)]
struct Seen {
    reports: AtomicU64,
    errors: AtomicU64,
    /// Set once the last row is printed: clients report until then, so none leaves (and
    /// frees its share to the others) while the printer still reads the shares.
    stop: AtomicBool,
    /// Client -> its share of the first bucket, per period.
    shares: Mutex<HashMap<usize, u64>>,
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args = Arc::new(Args::parse());
    let seen = Arc::new(Seen::default());
    let started = Instant::now();
    let shared = if args.connections == 0 {
        Vec::new()
    } else {
        let mut channels = Vec::new();
        for _ in 0..args.connections {
            channels.push(connect(&args.target).await?);
        }
        channels
    };
    let mut tasks = Vec::new();
    for client in 0..args.clients {
        let (args, seen) = (args.clone(), seen.clone());
        let channel = shared.get(client % shared.len().max(1)).cloned();
        tasks.push(tokio::spawn(async move {
            let channel = match channel {
                Some(channel) => Ok(channel),
                None => connect(&args.target).await,
            };
            let run = match channel {
                Ok(channel) => run_client(client, channel, &args, &seen).await,
                Err(error) => Err(error),
            };
            if let Err(error) = run {
                seen.errors.fetch_add(1, Ordering::Relaxed);
                eprintln!("client {client}: {error}");
            }
        }));
    }
    println!(
        "  time  reports  shares of {}={} per minute, by client, and their sum",
        args.key, args.value
    );
    let mut last = 0;
    while started.elapsed() < args.duration {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let reports = seen.reports.load(Ordering::Relaxed);
        let shares = seen.shares.lock().map(|s| s.clone()).unwrap_or_default();
        let mut by_client: Vec<(usize, u64)> = shares.into_iter().collect();
        by_client.sort();
        let listed: Vec<String> = by_client
            .iter()
            .take(8)
            .map(|(_, s)| s.to_string())
            .collect();
        let sum: u64 = by_client.iter().map(|(_, s)| s).sum();
        println!(
            "{:>5}s {:>8}  {} = {sum}",
            started.elapsed().as_secs(),
            reports - last,
            listed.join(" ")
        );
        last = reports;
    }
    seen.stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.abort();
    }
    let reports = seen.reports.load(Ordering::Relaxed);
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "{reports} reports of {} buckets each in {seconds:.1} s: {:.0} reports/s, {} errors",
        args.buckets,
        reports as f64 / seconds,
        seen.errors.load(Ordering::Relaxed)
    );
    Ok(())
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

async fn connect(target: &str) -> Result<Channel, BoxError> {
    Ok(Endpoint::from_shared(format!("http://{target}"))?
        .connect()
        .await?)
}

/// One client: reports its buckets every interval and reads the assignments.
async fn run_client(
    client: usize,
    channel: Channel,
    args: &Args,
    seen: &Seen,
) -> Result<(), BoxError> {
    let mut rlqs = RateLimitQuotaServiceClient::new(channel);
    let (reports, outgoing) = mpsc::channel(4);
    let mut answers = rlqs
        .stream_rate_limit_quotas(ReceiverStream::new(outgoing))
        .await?
        .into_inner();
    let per_second = args.demand[client % args.demand.len().max(1)];
    let first = bucket(&args.key, &args.value);
    let mut every = tokio::time::interval(args.interval);
    let mut domain = args.domain.clone();
    // Fractions of a request carry over to the next report.
    let mut owed = 0.0;
    while !seen.stop.load(Ordering::Relaxed) {
        every.tick().await;
        owed += per_second * args.interval.as_secs_f64();
        let requests = owed.floor() as u64;
        owed -= requests as f64;
        let usages = (0..args.buckets)
            .map(|b| {
                let value = if b == 0 {
                    args.value.clone()
                } else {
                    format!("{}-{b}", args.value)
                };
                BucketQuotaUsage {
                    bucket_id: Some(bucket(&args.key, &value)),
                    time_elapsed: Some(prost_types::Duration {
                        seconds: args.interval.as_secs() as i64,
                        nanos: args.interval.subsec_nanos() as i32,
                    }),
                    num_requests_allowed: requests,
                    num_requests_denied: 0,
                    last_report: None,
                }
            })
            .collect();
        reports
            .send(UsageReports {
                domain: std::mem::take(&mut domain),
                bucket_quota_usages: usages,
            })
            .await?;
        let Some(answer) = answers.message().await? else {
            return Ok(());
        };
        seen.reports.fetch_add(1, Ordering::Relaxed);
        if let Some(share) = share_of(&answer, &first) {
            if let Ok(mut shares) = seen.shares.lock() {
                shares.insert(client, share);
            }
        }
    }
    Ok(())
}

fn bucket(key: &str, value: &str) -> BucketId {
    BucketId {
        bucket: HashMap::from([(key.to_string(), value.to_string())]),
    }
}

/// The per-period share `answer` assigns `bucket` (0 for deny all), from its token bucket.
fn share_of(answer: &RateLimitQuotaResponse, bucket: &BucketId) -> Option<u64> {
    let action = answer
        .bucket_action
        .iter()
        .find(|a| a.bucket_id.as_ref() == Some(bucket))?;
    let Some(BucketAction::QuotaAssignmentAction(assignment)) = &action.bucket_action else {
        return None;
    };
    match assignment.rate_limit_strategy.as_ref()?.strategy.as_ref()? {
        Strategy::TokenBucket(tokens) => {
            let interval = tokens.fill_interval?;
            let interval = interval.seconds as f64 + f64::from(interval.nanos) / 1e9;
            let fill = f64::from(tokens.tokens_per_fill.unwrap_or(tokens.max_tokens));
            // Per period: the fills a period holds; the period is not in the answer, so the
            // share is given per minute.
            Some((fill * 60.0 / interval).round() as u64)
        }
        Strategy::BlanketRule(_) => Some(0),
        Strategy::RequestsPerTimeUnit(r) => Some(r.requests_per_time_unit),
    }
}
