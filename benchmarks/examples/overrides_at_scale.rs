//! A million admin overrides (docs/admin.md): the resident memory they take (the memory
//! store's records, then the compiled index the request path reads), the time to load them,
//! a decision's latency with none and with all of them (calls for tenants with an override
//! and without, alternately, in rounds), and the longest call while they load again beside
//! the calls.
//!
//!   cargo run --profile dist --example overrides_at_scale -- 1000000

#![recursion_limit = "256"]

#[path = "resident.rs"]
mod resident;

use std::sync::Arc;

use resident::resident_bytes;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use hdrhistogram::Histogram;

use sluice_config::overrides::OverrideIndex;
use sluice_config::{self as config, LoadOptions};
use sluice_limiter::LimiterOptions;
use sluice_proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use sluice_proto::rate_limit_descriptor::Entry;
use sluice_proto::rate_limit_service_server::RateLimitServiceServer;
use sluice_proto::{RateLimitDescriptor, RateLimitRequest};
use sluice_server::admin::sync;
use sluice_server::metrics::Metrics;
use sluice_server::service::RateLimiter;
use sluice_store::admin::AdminStore;
use sluice_store::any::AnyStore;
use sluice_store::memory::MemoryStore;
use sluice_store::SystemClock;

const CONFIG: &str = "domain: tenants\ndescriptors:\n  - key: api_key\n    rate_limit: {unit: minute, requests_per_unit: 1000000}\n";

fn tenant(i: u64) -> String {
    format!("tenant-{i:08}")
}

fn request(i: u64) -> RateLimitRequest {
    RateLimitRequest {
        domain: "tenants".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "api_key".into(),
                value: tenant(i),
            }],
            limit: None,
            hits_addend: None,
        }],
        hits_addend: 0,
    }
}

/// A record as the admin API stores it.
fn record(i: u64) -> (String, String) {
    let doc = serde_json::json!({
        "domain": "tenants",
        "descriptor": [{"key": "api_key", "value": tenant(i)}],
        // A fixed window of the rule's period: the same key and the same work as the rule's,
        // so that the rounds differ by the lookup alone.
        "limit": {"unit": "minute", "requests_per_unit": 500_000 + i % 1000},
        "updated_by": "token:bench",
        "updated_at": "2026-12-03T16:00:00Z",
    });
    let id = config::overrides::descriptor_id("tenants", [("api_key", tenant(i).as_str())]);
    (id, doc.to_string())
}

/// A step of xorshift, for tenants in an order no cache predicts.
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// `calls` decisions of tenants among `2 * n` (half with an override), each timed, in ns.
async fn timed(limiter: &RateLimiter<AnyStore>, n: u64, calls: usize, seed: u64) -> Histogram<u64> {
    let mut histogram = Histogram::new(3).expect("a histogram");
    let mut state = seed;
    for _ in 0..calls {
        let request = request(next(&mut state) % (2 * n));
        let started = Instant::now();
        let _ = limiter.decide(&request).await;
        let _ = histogram.record(started.elapsed().as_nanos() as u64);
    }
    histogram
}

/// Serves `limiter` over gRPC on a free loopback port; its address.
async fn serve(limiter: Arc<RateLimiter<AnyStore>>) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("an address");
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(RateLimitServiceServer::from_arc(limiter))
            .serve_with_incoming(
                tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
            ),
    );
    addr
}

/// How many clients call in step through gRPC: few, so that the figure is a decision's, not
/// a queue's.
const CLIENTS: u64 = 2;

/// Calls per client and round through gRPC.
const GRPC_CALLS: usize = 40_000;

/// `CLIENTS` clients, `calls` each, in step, on the server at `addr`; the p99 of a call, in ns.
async fn through_grpc(addr: std::net::SocketAddr, n: u64, calls: usize, round: u64) -> u64 {
    let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
        .expect("a URI")
        .connect()
        .await
        .expect("connect");
    let mut clients = Vec::new();
    for client in 0..CLIENTS {
        let mut grpc = RateLimitServiceClient::new(channel.clone());
        clients.push(tokio::spawn(async move {
            let mut histogram = Histogram::<u64>::new(3).expect("a histogram");
            let mut state = 1 + client * 7919 + round * 104_729;
            for _ in 0..calls {
                let request = request(next(&mut state) % (2 * n));
                let started = Instant::now();
                let _ = grpc.should_rate_limit(request).await;
                let _ = histogram.record(started.elapsed().as_nanos() as u64);
            }
            histogram
        }));
    }
    let mut all = Histogram::<u64>::new(3).expect("a histogram");
    for client in clients {
        let _ = all.add(client.await.expect("a client"));
    }
    all.value_at_quantile(0.99)
}

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(1_000_000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let options = LoadOptions::default();
    let config = Arc::new(ArcSwap::from_pointee(
        config::load_str("bench.yaml", CONFIG, options).expect("the config"),
    ));
    let store = Arc::new(AnyStore::Memory(MemoryStore::new(
        4 * n as usize,
        Arc::new(SystemClock),
    )));
    let records: Vec<(String, String)> = (0..n).map(record).collect();
    let json_bytes: usize = records.iter().map(|(id, json)| id.len() + json.len()).sum();

    let before = resident_bytes();
    runtime.block_on(async {
        for (id, json) in &records {
            store.put_override(id, json).await.expect("a record");
        }
    });
    drop(records);
    let with_records = resident_bytes();
    let overrides = Arc::new(OverrideIndex::default());
    let started = Instant::now();
    runtime
        .block_on(sync::load(&store, &overrides, options))
        .expect("loaded");
    let load_time = started.elapsed();
    let with_index = resident_bytes();
    println!(
        "{} overrides ({:.0} bytes of JSON each)",
        overrides.len(),
        json_bytes as f64 / n as f64
    );
    println!(
        "resident memory: records {:.0} bytes an override, index {:.0} bytes an override",
        with_records.saturating_sub(before) as f64 / n as f64,
        with_index.saturating_sub(with_records) as f64 / n as f64
    );
    println!(
        "loading them into the index: {:.2} s",
        load_time.as_secs_f64()
    );

    // The lookup alone, as the request path makes it.
    let mut state = 3;
    let started = Instant::now();
    let mut found = 0;
    for _ in 0..1_000_000 {
        let value = tenant(next(&mut state) % (2 * n));
        found += usize::from(
            overrides
                .get_entries("tenants", [("api_key", value.as_str())])
                .is_some(),
        );
    }
    println!(
        "a lookup alone: {:.0} ns ({found} of 1,000,000 found)",
        started.elapsed().as_nanos() as f64 / 1e6
    );

    let metrics = || Arc::new(Metrics::new(0.8, 0));
    let none = RateLimiter::new(
        config.clone(),
        store.clone(),
        LimiterOptions::default(),
        metrics(),
    );
    let all = RateLimiter::new(
        config.clone(),
        store.clone(),
        LimiterOptions::default(),
        metrics(),
    )
    .with_overrides(overrides.clone());
    let calls = 200_000;
    let (mut p99_none, mut p99_all, mut p50_none, mut p50_all) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    runtime.block_on(async {
        // Warm: every tenant's key exists before the rounds.
        timed(&none, n, calls, 1).await;
        for round in 0..6u64 {
            let a = timed(&none, n, calls, 7 + round).await;
            let b = timed(&all, n, calls, 7 + round).await;
            p50_none.push(a.value_at_quantile(0.5));
            p99_none.push(a.value_at_quantile(0.99));
            p50_all.push(b.value_at_quantile(0.5));
            p99_all.push(b.value_at_quantile(0.99));
        }
    });
    fn median(v: &mut [u64]) -> u64 {
        v.sort_unstable();
        v[v.len() / 2]
    }
    let (a50, a99, b50, b99) = (
        median(&mut p50_none),
        median(&mut p99_none),
        median(&mut p50_all),
        median(&mut p99_all),
    );
    println!(
        "decision, no override:       p50 {:.2} us, p99 {:.2} us (median of 6 rounds of {calls})",
        a50 as f64 / 1e3,
        a99 as f64 / 1e3
    );
    println!(
        "decision, {n} overrides: p50 {:.2} us, p99 {:.2} us ({:.3}x at p99)",
        b50 as f64 / 1e3,
        b99 as f64 / 1e3,
        b99 as f64 / a99 as f64
    );

    // Through gRPC on loopback, as a client sees a decision: 16 clients in step.
    let (none, all) = (Arc::new(none), Arc::new(all));
    let (none_addr, all_addr) =
        runtime.block_on(async { (serve(none.clone()).await, serve(all.clone()).await) });
    let (mut g_none, mut g_all) = (Vec::new(), Vec::new());
    runtime.block_on(async {
        for round in 0..7u64 {
            g_none.push(through_grpc(none_addr, n, GRPC_CALLS, round).await);
            g_all.push(through_grpc(all_addr, n, GRPC_CALLS, round).await);
        }
    });
    let (c99, d99) = (median(&mut g_none), median(&mut g_all));
    println!(
        "through gRPC ({CLIENTS} clients): p99 {:.1} us with none, {:.1} us with {n} overrides ({:.3}x; median of 7 rounds of {} calls)",
        c99 as f64 / 1e3,
        d99 as f64 / 1e3,
        d99 as f64 / c99 as f64,
        GRPC_CALLS as u64 * CLIENTS
    );
    let all = Arc::try_unwrap(all).unwrap_or_else(|shared| {
        RateLimiter::new(
            config.clone(),
            store.clone(),
            LimiterOptions::default(),
            Arc::new(Metrics::new(0.8, 0)),
        )
        .with_overrides(shared.overrides().clone())
    });

    // The longest call while every override loads again beside the calls.
    let loading = {
        let (store, overrides) = (store.clone(), overrides.clone());
        runtime.spawn(async move {
            let started = Instant::now();
            sync::load(&store, &overrides, options)
                .await
                .expect("reloaded");
            started.elapsed()
        })
    };
    let during = runtime.block_on(async {
        let mut histogram = Histogram::<u64>::new(3).expect("a histogram");
        let mut state = 99;
        while !loading.is_finished() {
            let request = request(next(&mut state) % (2 * n));
            let started = Instant::now();
            let _ = all.decide(&request).await;
            let _ = histogram.record(started.elapsed().as_nanos() as u64);
        }
        histogram
    });
    let reload = runtime.block_on(loading).unwrap_or(Duration::ZERO);
    println!(
        "while they load again ({:.2} s): {} calls, p99 {:.2} us, longest {:.2} ms",
        reload.as_secs_f64(),
        during.len(),
        during.value_at_quantile(0.99) as f64 / 1e3,
        during.max() as f64 / 1e6
    );
}
