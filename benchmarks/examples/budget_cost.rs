//! What a reserved budget costs per call (docs/budgets.md): a plain limit's call against a
//! reserve's opening and its settle, through the service (matching, the store, the response;
//! no gRPC transport) on one thread, on the memory store and, when `REDIS_URL` is set, on
//! Redis (with Redis's own CPU per call from `INFO commandstats`, read between batches of 64
//! calls of one kind). A key holds one hold at most: the steady state of a budget whose
//! requests end.
//!
//!   cargo run --release --example budget_cost                 # memory store
//!   REDIS_URL=redis://127.0.0.1:6379 cargo run --release --example budget_cost
//!   cargo run --release --example budget_cost -- memory plain 20000   # one kind, for callgrind

// The service on `AnyStore` nests deep futures.
#![recursion_limit = "256"]

#[path = "support/redis_cost.rs"]
mod redis_cost;

use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use sluice_config::{load_str, LoadOptions};
use sluice_limiter::LimiterOptions;
use sluice_proto::rate_limit_descriptor::Entry;
use sluice_proto::{RateLimitDescriptor, RateLimitRequest};
use sluice_server::metrics::Metrics;
use sluice_server::service::RateLimiter;
use sluice_store::any::AnyStore;
use sluice_store::memory::MemoryStore;
use sluice_store::SystemClock;

const CONFIG: &str = "domain: bench
descriptors:
  - key: plain
    rate_limit: {unit: hour, requests_per_unit: 1000000000}
  - key: budget
    rate_limit: {unit: hour, requests_per_unit: 1000000000}
    reserve: {amount: 4000, max_hold: 60s}
";

/// A request of one descriptor `key=v<n % 64>` of cost `hits`, with `extra` entries.
fn request(key: &str, n: usize, hits: u64, extra: Option<(&str, &str)>) -> RateLimitRequest {
    let mut entries = vec![Entry {
        key: key.into(),
        value: format!("v{}", n % 64),
    }];
    if let Some((key, value)) = extra {
        entries.push(Entry {
            key: key.into(),
            value: value.into(),
        });
    }
    RateLimitRequest {
        domain: "bench".into(),
        descriptors: vec![RateLimitDescriptor {
            entries,
            hits_addend: Some(hits),
            ..Default::default()
        }],
        hits_addend: 0,
    }
}

/// Time spent in plain calls, in openings and in settles, over `calls` of each.
struct Spent {
    plain: Duration,
    open: Duration,
    settle: Duration,
}

async fn run(limiter: &RateLimiter<AnyStore>, calls: usize, kinds: &[&str]) -> Spent {
    let mut spent = Spent {
        plain: Duration::ZERO,
        open: Duration::ZERO,
        settle: Duration::ZERO,
    };
    for n in 0..calls {
        if kinds.contains(&"plain") {
            let started = Instant::now();
            let _ = limiter.decide(&request("plain", n, 1, None)).await;
            spent.plain += started.elapsed();
        }
        if kinds.contains(&"reserve") {
            let started = Instant::now();
            let opened = limiter.decide(&request("budget", n, 0, None)).await;
            spent.open += started.elapsed();
            let token = opened.ok().and_then(|r| {
                sluice_limiter::ticket::token_in(&r, sluice_core::modifier::reserve::SETTLE_KEY)
            });
            let token = token.unwrap_or_default();
            let started = Instant::now();
            let settle = request("budget", n, 3000, Some(("sluice.reserve", &token)));
            let _ = limiter.decide(&settle).await;
            spent.settle += started.elapsed();
        }
    }
    spent
}

/// Per kind (plain, opening, settle): the time a call took and Redis's own CPU in it, in µs,
/// over `calls` of each, in batches of 64 (one per key: an opening finds no other hold), with
/// Redis's counters read between the batches.
async fn redis_cost(
    limiter: &RateLimiter<AnyStore>,
    url: &str,
    calls: usize,
) -> Result<[(f64, f64); 3], Box<dyn std::error::Error>> {
    // Per kind: wall time, script calls and script µs.
    let mut sums = [(Duration::ZERO, 0u64, 0u64); 3];
    let mut done = 0;
    while done < calls {
        let batch = 64.min(calls - done);
        let mut tokens = Vec::with_capacity(batch);
        for (kind, sum) in sums.iter_mut().enumerate() {
            let before = redis_cost::script_cpu(url).await?;
            let started = Instant::now();
            for n in 0..batch {
                match kind {
                    0 => {
                        let _ = limiter.decide(&request("plain", n, 1, None)).await;
                    }
                    1 => {
                        let opened = limiter.decide(&request("budget", n, 0, None)).await;
                        let token = opened.ok().and_then(|r| {
                            sluice_limiter::ticket::token_in(
                                &r,
                                sluice_core::modifier::reserve::SETTLE_KEY,
                            )
                        });
                        tokens.push(token.unwrap_or_default());
                    }
                    _ => {
                        let token = Some(("sluice.reserve", tokens[n].as_str()));
                        let _ = limiter.decide(&request("budget", n, 3000, token)).await;
                    }
                }
            }
            sum.0 += started.elapsed();
            let after = redis_cost::script_cpu(url).await?;
            sum.1 += after.0 - before.0;
            sum.2 += after.1 - before.1;
        }
        done += batch;
    }
    Ok(sums.map(|(wall, script_calls, usec)| {
        (
            wall.as_secs_f64() * 1e6 / calls as f64,
            usec as f64 / script_calls.max(1) as f64,
        )
    }))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let only_store = args.first().map(String::as_str);
    let kinds: Vec<&str> = match args.get(1).map(String::as_str) {
        Some(kind) => vec![kind],
        None => vec!["plain", "reserve"],
    };
    let calls: usize = args.get(2).and_then(|n| n.parse().ok()).unwrap_or(20_000);
    let config = Arc::new(ArcSwap::from_pointee(load_str(
        "bench.yaml",
        CONFIG,
        LoadOptions::default(),
    )?));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let per_call = |spent: Duration| spent.as_secs_f64() * 1e6 / calls as f64;
    if only_store.is_none_or(|s| s == "memory") {
        let limiter = RateLimiter::new(
            config.clone(),
            Arc::new(AnyStore::Memory(MemoryStore::new(
                1 << 20,
                Arc::new(SystemClock),
            ))),
            LimiterOptions::default(),
            Arc::new(Metrics::new(0.8, 10_000)),
        );
        // Every key and series seen first: the steady state is measured.
        runtime.block_on(run(&limiter, 1_000, &kinds));
        let spent = runtime.block_on(run(&limiter, calls, &kinds));
        println!(
            "memory: plain {:.2} µs, opening {:.2} µs, settle {:.2} µs a call",
            per_call(spent.plain),
            per_call(spent.open),
            per_call(spent.settle)
        );
    }
    if let (Ok(url), true) = (
        std::env::var("REDIS_URL"),
        only_store.is_none_or(|s| s == "redis"),
    ) {
        let limiter = runtime.block_on(redis_cost::limiter(&url, &config))?;
        runtime.block_on(run(&limiter, 1_000, &["plain", "reserve"]));
        let cost = runtime.block_on(redis_cost(&limiter, &url, calls))?;
        println!(
            "redis: plain {:.1} µs (Redis {:.2} µs), opening {:.1} µs (Redis {:.2} µs), \
             settle {:.1} µs (Redis {:.2} µs) a call",
            cost[0].0, cost[0].1, cost[1].0, cost[1].1, cost[2].0, cost[2].1
        );
    }
    Ok(())
}
