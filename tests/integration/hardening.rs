//! What a hostile client, a careless operator or a faulty environment does must not stall the
//! server, over-admit or leak: each case measured against a generous bound.

use std::time::{Duration, Instant};

use crate::support::*;

const CONFIG: &str = r#"
domain: h
descriptors:
  - key: user
    detailed_metric: true
    rate_limit: {unit: hour, requests_per_unit: 1000000}
  - key: plain
    rate_limit: {unit: hour, requests_per_unit: 1000000}
"#;

/// The slowest of `calls` sequential calls, each on `client`.
async fn slowest_call(client: &mut Client, calls: usize) -> Duration {
    let mut slowest = Duration::ZERO;
    for _ in 0..calls {
        let started = Instant::now();
        call(client, request("h", vec![descriptor(&[("plain", "p")])])).await;
        slowest = slowest.max(started.elapsed());
    }
    slowest
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scrapes_of_a_full_metrics_registry_do_not_stall_decisions() {
    let sluice = Sluice::start(CONFIG, &[]);
    let mut client = sluice.client().await;
    // 10,000 request-valued label sets: what any client can create.
    for batch in 0..10 {
        let descriptors: Vec<_> = (0..1000)
            .map(|i| descriptor(&[("user", &format!("u{batch}-{i}"))]))
            .collect();
        call(&mut client, request("h", descriptors)).await;
    }
    let (_, text) = sluice.http_get("/metrics");
    assert!(
        text.matches("ratelimit_service_rate_limit_total_hits{")
            .count()
            >= 10_000
    );
    let before = slowest_call(&mut client, 100).await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let scrapers: Vec<_> = (0..4)
        .map(|_| {
            let (stop, addr) = (stop.clone(), sluice.http_addr);
            std::thread::spawn(move || {
                let mut scrapes = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    http_request(addr, "GET", "/metrics", "");
                    scrapes += 1;
                }
                scrapes
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let during = slowest_call(&mut client, 300).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let scrapes: usize = scrapers.into_iter().map(|s| s.join().unwrap()).sum();
    eprintln!("slowest call before {before:?}, during {scrapes} scrapes {during:?}");
    assert!(scrapes > 0);
    assert!(
        during < Duration::from_millis(150),
        "a call waited {during:?} while /metrics was scraped (before: {before:?})"
    );
}
