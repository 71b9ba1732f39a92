//! What a tier costs per call (docs/tiers.md): a plain limit's call against the same limit
//! shared by tiers, called as its top tier (no headroom: one decision) and as a lower tier
//! (a headroom: the decision of cost + headroom, then the charge), through the service
//! (matching, the store, the response; no gRPC transport) on one thread, on the memory store
//! and, when `REDIS_URL` is set, on Redis (with Redis's own CPU per script call).
//!
//!   cargo run --release --example tier_cost                   # memory store
//!   REDIS_URL=redis://127.0.0.1:6379 cargo run --release --example tier_cost
//!   cargo run --release --example tier_cost -- memory batch 20000    # one kind, for callgrind

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
  - key: tiered
    rate_limit: {unit: hour, requests_per_unit: 1000000000}
    tiers: {from: priority, ceilings: {critical: 1.0, batch: 0.5}, otherwise: batch}
";

/// The kinds of call: (name, descriptor key, tier entry).
const KINDS: [(&str, &str, Option<&str>); 3] = [
    ("plain", "plain", None),
    ("critical", "tiered", Some("critical")),
    ("batch", "tiered", Some("batch")),
];

/// A request of one descriptor `key=v<n % 64>`, in `tier` when given.
fn request(key: &str, n: usize, tier: Option<&str>) -> RateLimitRequest {
    let mut entries = vec![Entry {
        key: key.into(),
        value: format!("v{}", n % 64),
    }];
    if let Some(tier) = tier {
        entries.push(Entry {
            key: "priority".into(),
            value: tier.into(),
        });
    }
    RateLimitRequest {
        domain: "bench".into(),
        descriptors: vec![RateLimitDescriptor {
            entries,
            ..Default::default()
        }],
        hits_addend: 1,
    }
}

/// Per kind: the time a call took, in µs, and Redis's own CPU in it (0 on memory), over
/// `calls` of each in batches of 64, Redis's counters read between the batches.
async fn cost(
    limiter: &RateLimiter<AnyStore>,
    redis_url: Option<&str>,
    calls: usize,
    kinds: &[&str],
) -> Result<Vec<(&'static str, f64, f64)>, Box<dyn std::error::Error>> {
    let mut sums = KINDS.map(|_| (Duration::ZERO, 0u64, 0u64));
    let mut done = 0;
    while done < calls {
        let batch = 64.min(calls - done);
        for ((name, key, tier), sum) in KINDS.iter().zip(sums.iter_mut()) {
            if !kinds.contains(name) {
                continue;
            }
            let before = match redis_url {
                Some(url) => redis_cost::script_cpu(url).await?,
                None => (0, 0),
            };
            let started = Instant::now();
            for n in 0..batch {
                let _ = limiter.decide(&request(key, n, *tier)).await;
            }
            sum.0 += started.elapsed();
            if let Some(url) = redis_url {
                let after = redis_cost::script_cpu(url).await?;
                sum.1 += after.0 - before.0;
                sum.2 += after.1 - before.1;
            }
        }
        done += batch;
    }
    Ok(KINDS
        .iter()
        .zip(sums)
        .filter(|((name, ..), _)| kinds.contains(name))
        .map(|((name, ..), (wall, script_calls, usec))| {
            let wall_us = wall.as_secs_f64() * 1e6 / calls as f64;
            (*name, wall_us, usec as f64 / script_calls.max(1) as f64)
        })
        .collect())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let only_store = args.first().map(String::as_str);
    let kinds: Vec<&str> = match args.get(1).map(String::as_str) {
        Some(kind) => vec![kind],
        None => KINDS.iter().map(|(name, ..)| *name).collect(),
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
    let print = |store: &str, costs: &[(&str, f64, f64)]| {
        for (name, wall_us, redis_us) in costs {
            println!("{store}: {name} {wall_us:.2} µs a call (Redis {redis_us:.2} µs)");
        }
    };
    if only_store.is_none_or(|s| s == "memory") {
        let store = MemoryStore::new(1 << 20, Arc::new(SystemClock));
        let limiter = RateLimiter::new(
            config.clone(),
            Arc::new(AnyStore::Memory(store)),
            LimiterOptions::default(),
            Arc::new(Metrics::new(0.8, 10_000)),
        );
        // Every key and series seen first: the steady state is measured.
        runtime.block_on(cost(&limiter, None, 1_000, &kinds))?;
        print(
            "memory",
            &runtime.block_on(cost(&limiter, None, calls, &kinds))?,
        );
    }
    if let (Ok(url), true) = (
        std::env::var("REDIS_URL"),
        only_store.is_none_or(|s| s == "redis"),
    ) {
        let limiter = runtime.block_on(redis_cost::limiter(&url, &config))?;
        runtime.block_on(cost(&limiter, Some(&url), 1_000, &kinds))?;
        print(
            "redis",
            &runtime.block_on(cost(&limiter, Some(&url), calls, &kinds))?,
        );
    }
    Ok(())
}
