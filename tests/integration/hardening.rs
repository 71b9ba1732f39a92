//! What a hostile client, a careless operator or a faulty environment does must not stall the
//! server, over-admit or leak. Calls made while the server is under such a load must be
//! answered; how long they take is a benchmark's figure (BENCHMARKS.md), never asserted here.

use std::time::{Duration, Instant};

use crate::support::*;

const CONFIG: &str = include_str!("../fixtures/cases/hardening/config.yaml");

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
    let scrapes_by_then = scrapes_so_far(&stop, scrapers);
    eprintln!("slowest call before {before:?}, during {scrapes_by_then} scrapes {during:?}");
    // The 300 calls were answered while the registry was scraped over and over: a scrape
    // does not hold the calls up until it ends.
    assert!(scrapes_by_then > 0);
}

/// Stops the scraping threads and returns how many scrapes they made.
fn scrapes_so_far(
    stop: &std::sync::Arc<std::sync::atomic::AtomicBool>,
    scrapers: Vec<std::thread::JoinHandle<usize>>,
) -> usize {
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    scrapers.into_iter().map(|s| s.join().unwrap()).sum()
}

/// A valid config of about `bytes` bytes: one domain of many limits.
fn large_config(domain: &str, bytes: usize) -> String {
    let mut text = format!("domain: {domain}\ndescriptors:\n");
    let mut i = 0;
    while text.len() < bytes {
        text.push_str(&format!(
            "  - key: k{i}\n    rate_limit: {{unit: second, requests_per_unit: {}}}\n",
            i % 100 + 1
        ));
        i += 1;
    }
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_config_reloads_without_stalling_calls_and_sigterm_does_not_wait_for_it() {
    let mut sluice = Sluice::start(CONFIG, &[]);
    let mut client = sluice.client().await;
    let before = slowest_call(&mut client, 50).await;
    let dir = sluice.config_dir.path().to_path_buf();
    std::fs::write(dir.join("large.yaml"), large_config("large", 5_000_000)).unwrap();
    let started = Instant::now();
    let mut slowest = Duration::ZERO;
    let mut answered_during_reload = 0;
    while !sluice.log().contains("config reloaded") && started.elapsed() < Duration::from_secs(60) {
        slowest = slowest.max(slowest_call(&mut client, 10).await);
        answered_during_reload += 10;
    }
    assert!(sluice.log().contains("config reloaded"), "{}", sluice.log());
    eprintln!(
        "5 MB reload took {:?}; {answered_during_reload} calls answered meanwhile, slowest \
         {slowest:?} (before {before:?})",
        started.elapsed()
    );
    // The old configuration kept answering while the new one was compiled.
    assert!(answered_during_reload > 0);
    // A second large file: a shutdown asked for while it is parsed is acted on at once.
    std::fs::write(dir.join("larger.yaml"), large_config("larger", 8_000_000)).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let asked = Instant::now();
    assert_eq!(sluice.terminate(), Some(0), "{}", sluice.log());
    assert!(
        asked.elapsed() < Duration::from_secs(3),
        "exit took {:?}",
        asked.elapsed()
    );
}

#[tokio::test]
async fn a_flood_of_new_keys_cannot_reset_an_exhausted_limit() {
    let config = "domain: f\ndescriptors:\n  - key: user\n    rate_limit: {unit: day, requests_per_unit: 1000}\n";
    let sluice = Sluice::start(config, &["--memory-max-keys", "256"]);
    let mut client = sluice.client().await;
    let exhausted: Vec<String> = (0..10).map(|i| format!("drained{i}")).collect();
    for value in &exhausted {
        let drain = descriptor_with_hits(&[("user", value)], 1000);
        call(&mut client, request("f", vec![drain])).await;
    }
    // Anyone who controls a descriptor value floods new keys.
    let mut refused = 0;
    for i in 0..5000 {
        let value = format!("flood{i}");
        let answer = client
            .should_rate_limit(request("f", vec![descriptor(&[("user", &value)])]))
            .await;
        if let Err(status) = answer {
            assert_eq!(status.code(), tonic::Code::Unavailable, "{status}");
            refused += 1;
        }
    }
    assert!(refused > 4000, "{refused} new keys refused");
    for value in &exhausted {
        let again = call_one(&mut client, "f", &[("user", value)]).await;
        assert_eq!(overall(&again), Code::OverLimit, "{value} was reset");
    }
    let (_, metrics) = sluice.http_get("/metrics");
    assert!(
        series(&metrics, "sluice_memory_store_full_total") >= Some(4000.0),
        "{metrics}"
    );
    assert_eq!(sluice.log().matches("the memory store is full").count(), 1);
}

/// Whether the server closes `stream` within `limit`: reads (what the server says first, such
/// as HTTP/2's settings) until the end, an error, or the time is up.
fn closed_within(stream: &mut std::net::TcpStream, limit: Duration) -> bool {
    use std::io::Read;
    let deadline = Instant::now() + limit;
    let mut buffer = [0u8; 256];
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        stream
            .set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .unwrap();
        match stream.read(&mut buffer) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return false
            }
            Err(_) => return true,
        }
    }
    false
}

#[tokio::test]
async fn idle_connections_are_bounded_and_closed_after_the_handshake_timeout() {
    let args = [
        "--max-connections",
        "20",
        "--http-max-connections",
        "20",
        "--handshake-timeout",
        "1s",
    ];
    let sluice = Sluice::start(CONFIG, &args);
    let mut idle = idle_connections(sluice.grpc_addr, 100);
    // Every place is taken by a connection that says nothing; a real client is served as soon
    // as the handshake timeout frees them.
    let started = Instant::now();
    let mut client = sluice.client().await;
    call_one(&mut client, "h", &[("plain", "p")]).await;
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
    let first = idle.first_mut().unwrap();
    assert!(
        closed_within(first, Duration::from_secs(3)),
        "an idle connection stays open"
    );
    // The HTTP port alike.
    let mut idle_http = idle_connections(sluice.http_addr, 50);
    let started = Instant::now();
    assert_eq!(sluice.http_get("/healthcheck").0, 200);
    assert!(started.elapsed() < Duration::from_secs(8));
    assert!(closed_within(&mut idle_http[0], Duration::from_secs(3)));
}

#[test]
fn a_slowloris_client_is_closed_at_the_header_read_timeout() {
    use std::io::Write;
    let sluice = Sluice::start(CONFIG, &["--http-header-read-timeout", "1s"]);
    let mut slow = std::net::TcpStream::connect(sluice.http_addr).unwrap();
    slow.write_all(b"GET /healthcheck HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    let started = Instant::now();
    let mut closed = false;
    while started.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(200));
        if slow.write_all(b"X-Slow: 1\r\n").is_err() {
            closed = true;
            break;
        }
        if closed_within(&mut slow, Duration::from_millis(5)) {
            closed = true;
            break;
        }
    }
    assert!(
        closed,
        "a trickle of headers kept the connection for {:?}",
        started.elapsed()
    );
    assert!(started.elapsed() < Duration::from_secs(4));
    assert_eq!(sluice.http_get("/healthcheck").0, 200);
}

/// A TCP proxy on a free port that sends each new connection to the next of `backends`
/// (round robin), as a Kubernetes Service spreads connections; `backends` may grow. Also
/// how many connections it has taken.
async fn round_robin_proxy(
    backends: std::sync::Arc<std::sync::Mutex<Vec<std::net::SocketAddr>>>,
) -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let taken = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = taken.clone();
    tokio::spawn(async move {
        let mut next = 0;
        while let Ok((mut inbound, _)) = listener.accept().await {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let backend = {
                let backends = backends.lock().unwrap();
                next += 1;
                backends[next % backends.len()]
            };
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(backend).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    (addr, taken)
}

/// A client on one channel through `round_robin_proxy` to `backends`, and how many
/// connections the proxy has taken.
async fn client_through_proxy(
    backends: std::sync::Arc<std::sync::Mutex<Vec<std::net::SocketAddr>>>,
) -> (Client, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let (proxy, connections) = round_robin_proxy(backends).await;
    let channel = tonic::transport::Channel::from_shared(format!("http://{proxy}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    (Client::new(channel), connections)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_max_connection_age_one_client_reaches_replicas_added_later() {
    let args = [
        "--grpc-max-connection-age",
        "500ms",
        "--grpc-max-connection-age-grace",
        "500ms",
    ];
    let replicas: Vec<Sluice> = (0..3).map(|_| Sluice::start(CONFIG, &args)).collect();
    let backends = std::sync::Arc::new(std::sync::Mutex::new(vec![replicas[0].grpc_addr]));
    // One long-lived client, as an Envoy is: it reconnects when told to go away.
    let (mut client, _) = client_through_proxy(backends.clone()).await;
    call_one(&mut client, "h", &[("plain", "age")]).await;
    // The autoscaler adds two replicas.
    backends
        .lock()
        .unwrap()
        .extend([replicas[1].grpc_addr, replicas[2].grpc_addr]);
    let served = || -> Vec<f64> {
        replicas
            .iter()
            .map(|r| {
                let (_, metrics) = r.http_get("/metrics");
                series(
                    &metrics,
                    r#"ratelimit_service_total_requests{grpc_method="ShouldRateLimit"}"#,
                )
                .unwrap_or(0.0)
            })
            .collect()
    };
    let started = Instant::now();
    let (mut calls, mut failures) = (0, 0);
    while started.elapsed() < Duration::from_secs(15) {
        for _ in 0..50 {
            let ask = request("h", vec![descriptor(&[("plain", "age")])]);
            failures += usize::from(client.should_rate_limit(ask).await.is_err());
            calls += 1;
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if served().iter().all(|&n| n > 0.0) {
            break;
        }
    }
    let served = served();
    assert!(
        served.iter().all(|&n| n > 0.0),
        "calls per replica: {served:?}"
    );
    // A call racing a GOAWAY may fail (Envoy retries those): rarely.
    assert!(
        failures * 20 <= calls,
        "{failures} of {calls} calls failed while connections moved"
    );
}

/// gRPC's connection age: a connection is told to go away (GOAWAY) at its age, and the client
/// moves to a new one then, not only when the grace after it runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_is_told_to_go_away_at_its_age_not_at_the_end_of_its_grace() {
    let args = [
        "--grpc-max-connection-age",
        "300ms",
        "--grpc-max-connection-age-grace",
        "60s",
    ];
    let sluice = Sluice::start(CONFIG, &args);
    let backends = std::sync::Arc::new(std::sync::Mutex::new(vec![sluice.grpc_addr]));
    let (mut client, connections) = client_through_proxy(backends).await;
    let started = Instant::now();
    let (mut calls, mut failures) = (0, 0);
    while started.elapsed() < Duration::from_secs(2) {
        let ask = request("h", vec![descriptor(&[("plain", "age")])]);
        failures += usize::from(client.should_rate_limit(ask).await.is_err());
        calls += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Six ages in 2 s: a client told at each age has opened a few connections by now.
    let opened = connections.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        opened >= 3,
        "{opened} connections in 2 s at an age of 300 ms"
    );
    assert!(
        failures * 20 <= calls,
        "{failures} of {calls} calls failed while connections moved"
    );
}
