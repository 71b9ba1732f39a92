//! The race reserved budgets exist for (docs/budgets.md, "The bound"): 64 clients each send
//! requests whose actual cost is drawn in [0, 2 x estimate] against one budget, each running
//! a few milliseconds between its request and its settle, on the memory store, Redis, a Redis
//! Cluster and two sluice replicas sharing one Redis. Read from the store's own state, the
//! holds never pass the limit, the charged total is exactly what the settles reported, and it
//! stays within the limit plus (requests in flight) x (actual - estimate); the same traffic
//! with check-then-charge (no reserve, as gateways do today) admits requests whose cost is a
//! multiple of the budget.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tonic::transport::Channel;

use sluice_core::algorithm::State;
use sluice_server::service::RateLimiter;
use sluice_store::any::AnyStore;

use crate::support::redis::{cluster_flags, start_cluster, RedisServer};
use crate::support::*;

/// The budget: 20,000 a day, each request holding 500 (its estimate) until it settles.
const LIMIT: u64 = 20_000;
const ESTIMATE: u64 = 500;
const CLIENTS: u64 = 64;
const ROUNDS: u64 = 8;

fn config(reserve: bool) -> String {
    // Without reserve, the costs reported at the end land even past the limit (debt): the
    // best check-then-charge can do.
    let reserve = if reserve {
        "\n    reserve: {amount: 500, max_hold: 60s}"
    } else {
        "\n    rate_limit_debt: true"
    };
    format!(
        "domain: ai\ndescriptors:\n  - key: budget\n    rate_limit: {{unit: day, requests_per_unit: {LIMIT}}}{reserve}\n"
    )
    .replace("}\n    rate_limit_debt: true", ", debt: true}")
}

/// A client of one setup: the server over gRPC with Envoy's protos, or the service in the
/// test's process (the memory store, whose state only it can read).
#[derive(Clone)]
enum Client {
    Grpc(RateLimitServiceClient<Channel>),
    InProcess(Arc<RateLimiter<AnyStore>>),
}

impl Client {
    /// One call on the budget: admitted, and the hold's token when one was opened.
    async fn ask(&mut self, entries: &[(&str, &str)], hits: u64) -> (bool, Option<String>) {
        match self {
            Client::Grpc(client) => {
                let response = call(
                    client,
                    request("ai", vec![descriptor_with_hits(entries, hits)]),
                )
                .await;
                let token = metadata_text(&response, "sluice.reserve");
                (response.overall_code == 1, token)
            }
            Client::InProcess(limiter) => {
                use sluice_proto::rate_limit_descriptor::Entry;
                let request = sluice_proto::RateLimitRequest {
                    domain: "ai".into(),
                    descriptors: vec![sluice_proto::RateLimitDescriptor {
                        entries: entries
                            .iter()
                            .map(|(key, value)| Entry {
                                key: (*key).into(),
                                value: (*value).into(),
                            })
                            .collect(),
                        hits_addend: Some(hits),
                        ..Default::default()
                    }],
                    hits_addend: 0,
                };
                let response = limiter.decide(&request).await.expect("decided");
                (
                    response.overall_code == 1,
                    sluice_limiter::ticket::token_in(
                        &response,
                        sluice_core::modifier::reserve::SETTLE_KEY,
                    ),
                )
            }
        }
    }
}

/// What one run saw.
#[derive(Debug, Default)]
struct Run {
    /// Requests admitted, and the sum of their actual costs (what they consumed).
    admitted: u64,
    consumed: u64,
    /// The most requests in flight at once.
    most_in_flight: u64,
    /// The most the store held in holds, and in used + held, at any sample.
    most_held: u64,
    most_used_and_held: u64,
}

/// 64 clients on `clients` (taken in turn), `ROUNDS` requests each: a check (hits_addend 0),
/// a few milliseconds in flight, then the actual cost in [0, 2 x estimate] sent back: a settle
/// by the token when a hold was opened, else a plain charge (check-then-charge). `state`
/// reads (used, held) from the store.
async fn race(clients: &[Client], state: impl Fn() -> (u64, u64) + Send + 'static) -> Run {
    // The budget counts per day: a race across its end would see it start again.
    clear_of_a_windows_end(Duration::from_secs(86_400), Duration::from_secs(30)).await;
    let stop = Arc::new(AtomicBool::new(false));
    let (most_held, most_both) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let watcher = {
        let (stop, most_held, most_both) = (stop.clone(), most_held.clone(), most_both.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                let (used, held) = state();
                most_held.fetch_max(held, Ordering::SeqCst);
                most_both.fetch_max(used + held, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(1));
            }
        })
    };
    let admitted = Arc::new(AtomicU64::new(0));
    let consumed = Arc::new(AtomicU64::new(0));
    let (in_flight, most_in_flight) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut tasks = Vec::new();
    for n in 0..CLIENTS {
        let mut client = clients[n as usize % clients.len()].clone();
        let (admitted, consumed) = (admitted.clone(), consumed.clone());
        let (in_flight, most_in_flight) = (in_flight.clone(), most_in_flight.clone());
        tasks.push(tokio::spawn(async move {
            // A generator of its own per client: the costs are the same every run.
            let mut seed = n.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
            for _ in 0..ROUNDS {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let actual = seed % (2 * ESTIMATE + 1);
                let (ok, token) = client.ask(&[("budget", "k")], 0).await;
                if !ok {
                    tokio::time::sleep(Duration::from_millis(3)).await;
                    continue;
                }
                admitted.fetch_add(1, Ordering::SeqCst);
                let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                most_in_flight.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(3)).await;
                consumed.fetch_add(actual, Ordering::SeqCst);
                let settled = match &token {
                    Some(token) => {
                        let entries = [("budget", "k"), ("sluice.reserve", token.as_str())];
                        client.ask(&entries, actual).await.0
                    }
                    // A charge at the end: denied once the budget is past (it lands all
                    // the same, in debt).
                    None => {
                        client.ask(&[("budget", "k")], actual).await;
                        true
                    }
                };
                in_flight.fetch_sub(1, Ordering::SeqCst);
                assert!(settled, "a settle is never denied");
            }
        }));
    }
    for task in tasks {
        task.await.expect("client");
    }
    stop.store(true, Ordering::SeqCst);
    watcher.join().expect("watcher");
    Run {
        admitted: admitted.load(Ordering::SeqCst),
        consumed: consumed.load(Ordering::SeqCst),
        most_in_flight: most_in_flight.load(Ordering::SeqCst),
        most_held: most_held.load(Ordering::SeqCst),
        most_used_and_held: most_both.load(Ordering::SeqCst),
    }
}

/// Reads the budget's count and the sum of its holds in one step (the keys share a slot).
const READ_BOTH: &str = "local used = tonumber(redis.call('GET', KEYS[1]) or '0') \
    local held = 0 \
    local holds = redis.call('GET', KEYS[2]) or '' \
    for amount in string.gmatch(holds, '%x+:(%d+):%d+') do held = held + tonumber(amount) end \
    return {used, held}";

/// The used count and the holds of the budget's key on Redis, read at one instant
/// (`ports`: every node; only the one holding the keys answers).
fn redis_state(ports: &[u16]) -> (u64, u64) {
    let now_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let counter = format!("{{ai_budget_k_}}{}", now_s - now_s % 86_400);
    for &port in ports {
        let reply = crate::support::redis::cli(
            port,
            &["EVAL", READ_BOTH, "2", &counter, "{ai_budget_k_}holds"],
        );
        let numbers: Vec<u64> = reply
            .lines()
            .filter_map(|line| line.trim().parse().ok())
            .collect();
        if let [used, held] = numbers[..] {
            return (used, held);
        }
    }
    (0, 0)
}

/// The figures a run is held to, printed for the docs: with reserve, the holds never pass the
/// limit, every settle charged exactly its actual, and the total stays within the bound;
/// `baseline` (check-then-charge) shows what the same traffic consumes without it.
fn assert_bound(setup: &str, reserved: &Run, used: u64, baseline: Option<&Run>) {
    println!("{setup}: with reserve {reserved:?}, charged {used}; without: {baseline:?}");
    assert!(
        reserved.most_held <= LIMIT,
        "{setup}: held {}",
        reserved.most_held
    );
    assert_eq!(used, reserved.consumed, "{setup}: each settle charged once");
    let bound = LIMIT + reserved.most_in_flight * ESTIMATE;
    assert!(used <= bound, "{setup}: charged {used}, bound {bound}");
    assert!(
        reserved.most_used_and_held <= bound,
        "{setup}: used + held reached {}",
        reserved.most_used_and_held
    );
    assert!(
        reserved.admitted >= LIMIT / (2 * ESTIMATE),
        "{setup}: {reserved:?}"
    );
    if let Some(baseline) = baseline {
        // Every request in flight when the budget filled had been checked against a budget
        // its neighbours had not been charged yet.
        assert!(
            baseline.consumed > LIMIT && baseline.consumed > used,
            "{setup}: check-then-charge consumed {} of {LIMIT}",
            baseline.consumed
        );
    }
}

/// The service on a fresh memory store with `config`, and what the budget's key holds.
fn in_process(
    config: &str,
) -> (
    Arc<RateLimiter<AnyStore>>,
    impl Fn() -> (u64, u64) + Send + Sync + 'static,
) {
    let (limiter, hit) = crate::support::stores::memory_limiter(config, "ai", &[("budget", "k")]);
    let reader = limiter.clone();
    let state = move || {
        let AnyStore::Memory(store) = reader.store() else {
            return (0, 0);
        };
        let used = match store.state_of(&hit) {
            Some(State::FixedWindow(window)) => window.count,
            _ => 0,
        };
        (used, store.held_of(&hit))
    };
    (limiter, state)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_clients_never_overspend_a_reserved_budget_on_the_memory_store() {
    let (limiter, state) = in_process(&config(true));
    let state = Arc::new(state);
    let watched = state.clone();
    let reserved = race(&[Client::InProcess(limiter)], move || watched()).await;
    let (unreserved, _) = in_process(&config(false));
    let baseline = race(&[Client::InProcess(unreserved)], || (0, 0)).await;
    assert_bound("memory", &reserved, state().0, Some(&baseline));
}

/// The race on `sluice` (and `other`, a second replica, when given) with the budget of
/// `config`, the store read from `ports`.
async fn race_on(sluices: &[&Sluice], ports: Vec<u16>) -> (Run, u64) {
    let mut clients = Vec::new();
    for sluice in sluices {
        clients.push(Client::Grpc(sluice.client().await));
    }
    let watched = ports.clone();
    let run = race(&clients, move || redis_state(&watched)).await;
    (run, redis_state(&ports).0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_clients_never_overspend_a_reserved_budget_on_redis_and_two_replicas() {
    let redis = RedisServer::start(&[]);
    let files = [("config.yaml", config(true))];
    let files: Vec<(&str, &str)> = files.iter().map(|(n, t)| (*n, t.as_str())).collect();
    let one = Sluice::on_redis_url(&files, &redis.url(), &[], &[]);
    let (reserved, used) = race_on(&[&one], vec![redis.port]).await;
    assert_bound("redis", &reserved, used, None);

    // Two sluice processes sharing the Redis, the clients split between them.
    redis.cli(&["FLUSHALL"]);
    let two = Sluice::on_redis_url(&files, &redis.url(), &[], &[]);
    let (reserved, used) = race_on(&[&one, &two], vec![redis.port]).await;

    let plain = RedisServer::start(&[]);
    let unreserved = [("config.yaml", config(false))];
    let unreserved: Vec<(&str, &str)> = unreserved.iter().map(|(n, t)| (*n, t.as_str())).collect();
    let three = Sluice::on_redis_url(&unreserved, &plain.url(), &[], &[]);
    let four = Sluice::on_redis_url(&unreserved, &plain.url(), &[], &[]);
    let (baseline, _) = race_on(&[&three, &four], vec![plain.port]).await;
    assert_bound(
        "two replicas on one Redis",
        &reserved,
        used,
        Some(&baseline),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_clients_never_overspend_a_reserved_budget_on_a_cluster() {
    let nodes = start_cluster();
    let ports: Vec<u16> = nodes.iter().map(|n| n.port).collect();
    let flags = cluster_flags(&nodes);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let sluice = Sluice::start(&config(true), &flags);
    let (reserved, used) = race_on(&[&sluice], ports).await;
    assert_bound("cluster", &reserved, used, None);
}
