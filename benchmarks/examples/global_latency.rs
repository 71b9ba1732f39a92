//! What a global limit costs a call (docs/regions.md): the latency of a call decided in a far
//! region, whose home is behind a link adding 50 ms each way (the tests' proxy), against the
//! same limit held in the region alone; and the calls across the link per admitted call.
//! Two `redis-server`s on free ports (one the region's, one home), the store as the server
//! serves with, one caller after another. Prints a markdown table for BENCHMARKS.md.
//!
//! ```sh
//! PATH=$PWD/target/tools:$PATH cargo run --profile dist --example global_latency
//! ```

// The tests' proxy (only its delay is used here) and their `redis-server`s.
#[allow(dead_code)]
#[path = "../../tests/integration/support/link.rs"]
mod link;
#[allow(dead_code)]
#[path = "../../tests/integration/support/redis.rs"]
mod redis_server;

use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use redis_server::RedisServer;
use sluice_core::engine::Charging;
use sluice_core::limit::{Hit, Limit, Role, Unit};
use sluice_core::modifier::global::Policy;
use sluice_store::any::AnyStore;
use sluice_store::redis::{RedisStore, RedisTarget, RedisTargets, TimeSource};
use sluice_store::regions::{RegionSettings, Regions, WithRegions};
use sluice_store::series::{Reporting, Series};
use sluice_store::{Store, SystemClock};

const CALLS: usize = 20_000;
const PACE: Duration = Duration::from_micros(250);

async fn connect(url: &str, timeout: Duration) -> RedisStore {
    let target = RedisTarget::single(url, timeout);
    let targets = RedisTargets {
        main: &target,
        per_second: None,
    };
    RedisStore::connect(
        targets,
        Duration::from_secs(5),
        String::new(),
        TimeSource::Sluice,
        Arc::new(SystemClock),
    )
    .await
    .expect("Redis answers")
}

/// A hit of `tenant=hot` on a limit of a million a minute, global or not.
fn hit_of(global: Option<Policy>) -> Hit {
    let mut limit = Limit::fixed_window(1_000_000, Unit::Minute);
    limit.modifiers.global = global;
    Hit {
        key: "bench_tenant_hot_".into(),
        limit,
        cost: 1,
        role: Role::Enforced,
        joins_previous: false,
        lease: None,
    }
}

/// Latencies of `CALLS` calls of `hit` on `store`, one every `PACE`, and how many were admitted.
async fn run<S: Store>(store: &S, hit: &Hit) -> (Histogram<u64>, usize) {
    let mut latencies = Histogram::<u64>::new(3).expect("a histogram");
    let mut admitted = 0;
    for _ in 0..CALLS {
        let started = Instant::now();
        let decided = store
            .charge(std::slice::from_ref(hit), Charging::AllOrNothing)
            .await
            .expect("decided");
        let _ = latencies.record(started.elapsed().as_micros() as u64);
        admitted += usize::from(decided[0].admitted);
        tokio::time::sleep(PACE).await;
    }
    (latencies, admitted)
}

fn row(name: &str, latencies: &Histogram<u64>, link_calls: Option<f64>, admitted: usize) {
    let per = |q: f64| latencies.value_at_quantile(q) as f64 / 1000.0;
    let across = link_calls.map_or("-".to_string(), |calls| {
        format!("{:.4}", calls / admitted.max(1) as f64)
    });
    println!(
        "| {name} | {:.2} | {:.2} | {:.2} | {:.2} | {across} |",
        per(0.5),
        per(0.99),
        per(0.999),
        latencies.max() as f64 / 1000.0
    );
}

#[tokio::main]
async fn main() {
    let (home, region) = (RedisServer::start(&[]), RedisServer::start(&[]));
    let home_addr = format!("127.0.0.1:{}", home.port)
        .parse()
        .expect("an address");
    let link = link::Link::start(home_addr, Duration::from_millis(50));
    let regional = hit_of(None);
    let global = hit_of(Some(Policy {
        chunk: 500,
        regions: 3,
        cut_off_share: None,
    }));

    let store = Arc::new(AnyStore::on_redis(
        connect(&region.url(), Duration::from_secs(1)).await,
        0,
        Arc::new(SystemClock),
    ));
    let settings = RegionSettings {
        name: "far".into(),
        home: RedisTarget::single(&link.url(), Duration::from_secs(1)),
        key_prefix: String::new(),
    };
    let regions = Regions::start(settings, store.clone(), Arc::new(SystemClock));
    // Home is connected to in the background: a call before would count as cut off.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let served = WithRegions::new(store.clone(), Some(regions.clone()));

    println!("| limit, in a region 50 ms each way from home | p50 ms | p99 ms | p99.9 ms | max ms | calls to home per admitted call |");
    println!("|---|---|---|---|---|---|");
    let (latencies, admitted) = run(&served, &regional).await;
    row("regional", &latencies, None, admitted);
    let (latencies, admitted) = run(&served, &global).await;
    let series = Series::new();
    regions.report(&series);
    let text = series.render();
    let calls: f64 = text
        .lines()
        .filter(|l| l.starts_with("sluice_global_link_calls_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    row("global (`chunk: 500`)", &latencies, Some(calls), admitted);
}
