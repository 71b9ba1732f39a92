//! Concurrency limits (docs/concurrency.md): leases taken by a request, released by
//! the call that carries its token back, freed at the end of their life; every release case,
//! all-or-nothing with the request's rates, shadow mode, several limits, unlimited and
//! `replaces`, on every store in-process; and, through the real binary with Envoy's protos,
//! 64 clients never holding more than N leases on the memory store, Redis, a Cluster and two
//! sluice processes sharing one Redis, read from the store's own state.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sluice_proto::rate_limit_response::Code as OurCode;
use sluice_proto::RateLimitResponse as OurResponse;

use sluice_core::algorithm::State;
use sluice_core::engine::Charging;
use sluice_core::lease::LEASE_KEY;
use sluice_core::limit::Hit;
use sluice_limiter::LimiterOptions;
use sluice_store::any::AnyStore;
use sluice_store::memory::MemoryStore;

use crate::support::redis::{cluster_flags, start_cluster, RedisServer};
use crate::support::stores::{every_store, InProcess};
use crate::support::*;

const CONFIG: &str = include_str!("../fixtures/cases/leases/config.yaml");
const SECOND: u64 = 1_000_000;

/// The lease token a response carries, if any.
fn token_in(response: &OurResponse) -> Option<String> {
    sluice_limiter::ticket::token_in(response, LEASE_KEY)
}

fn is_ok(response: &OurResponse) -> bool {
    response.overall_code == OurCode::Ok as i32
}

/// Acquires on `descriptor`; the token when admitted.
async fn acquire(service: &InProcess, descriptor: &str) -> Option<String> {
    let response = service.ask("api", &[descriptor]).await;
    assert_eq!(
        is_ok(&response),
        token_in(&response).is_some(),
        "{}: a token exactly when admitted",
        service.store
    );
    token_in(&response)
}

/// Releases `token` on `descriptor`; the free leases after it.
async fn release(service: &InProcess, descriptor: &str, token: &str) -> u32 {
    let response = service
        .ask("api", &[&format!("{descriptor},sluice.lease={token}")])
        .await;
    assert!(
        is_ok(&response),
        "{}: a release is always OK",
        service.store
    );
    assert_eq!(token_in(&response), None, "a release takes nothing");
    response.statuses[0].limit_remaining
}

/// The free leases of `descriptor`, read without taking one (cost 0).
async fn free(service: &InProcess, descriptor: &str) -> u32 {
    let response = service.ask("api", &[&format!("{descriptor}+0")]).await;
    response.statuses[0].limit_remaining
}

#[tokio::test]
async fn a_release_frees_only_the_lease_its_token_took_on_every_store() {
    let redis = RedisServer::start(&[]);
    for service in every_store(&redis.url(), CONFIG, &Default::default()).await {
        let store = service.store;
        let first = acquire(&service, "api_key=k").await.expect("first");
        service.clock.advance(10 * SECOND);
        let second = acquire(&service, "api_key=k").await.expect("second");
        assert_ne!(first, second, "{store}: every request its own token");
        let denied = service.ask("api", &["api_key=k"]).await;
        assert!(!is_ok(&denied) && token_in(&denied).is_none(), "{store}");
        let status = &denied.statuses[0];
        assert_eq!(status.limit_remaining, 0, "{store}");
        // The oldest lease ends 60 s after it was taken, 50 s from now.
        let reset = status.duration_until_reset.as_ref().map(|d| d.seconds);
        assert_eq!(reset, Some(50), "{store}");

        // A token no request here was given (a denied request's release, a forged one), and
        // a token of this key sent on another: nothing freed.
        assert_eq!(release(&service, "api_key=k", "00000000000000ab").await, 0);
        assert_eq!(release(&service, "api_key=other", &first).await, 2);
        assert_eq!(free(&service, "api_key=k").await, 0, "{store}");
        // The release of the first frees one; sent again (a duplicate), nothing more.
        assert_eq!(release(&service, "api_key=k", &first).await, 1, "{store}");
        assert_eq!(release(&service, "api_key=k", &first).await, 1, "{store}");
        service.clock.advance(20 * SECOND);
        let third = acquire(&service, "api_key=k").await.expect("third");

        // Past its life (60 s after it was taken, 10 s ago) a lease is gone without a release;
        // its release later frees nothing.
        service.clock.advance(45 * SECOND);
        assert_eq!(
            free(&service, "api_key=k").await,
            1,
            "{store}: second expired"
        );
        assert_eq!(release(&service, "api_key=k", &second).await, 1, "{store}");
        assert_eq!(release(&service, "api_key=k", &third).await, 2, "{store}");

        let labels = r#"{domain="api",key1="api_key"}"#;
        let series = |name: &str| service.series(&format!("{name}{labels}"));
        assert_eq!(series("sluice_leases_acquired_total"), 3.0, "{store}");
        assert_eq!(series("sluice_leases_refused_total"), 1.0, "{store}");
        assert_eq!(series("sluice_leases_released_total"), 2.0, "{store}");
        assert_eq!(series("sluice_leases_expired_total"), 1.0, "{store}");
        assert_eq!(series("sluice_leases_held"), 0.0, "{store}");
        // The reference's counters count the acquires alone, as hits.
        assert_eq!(
            series("ratelimit_service_rate_limit_total_hits"),
            4.0,
            "{store}"
        );
    }
}

#[tokio::test]
async fn leases_and_rates_of_one_request_are_taken_together_or_not_at_all_on_every_store() {
    let redis = RedisServer::start(&[]);
    for service in every_store(&redis.url(), CONFIG, &Default::default()).await {
        let store = service.store;
        // One in flight per tenant, three a minute: a request denied by the concurrency limit
        // charges no rate, so three can run one after another.
        let first = acquire(&service, "tenant=a").await.expect("first");
        assert_eq!(acquire(&service, "tenant=a").await, None, "{store}");
        assert_eq!(acquire(&service, "tenant=a").await, None, "{store}");
        release(&service, "tenant=a", &first).await;
        for n in 2..=3 {
            let token = acquire(&service, "tenant=a").await;
            let token = token.unwrap_or_else(|| panic!("{store}: request {n}"));
            release(&service, "tenant=a", &token).await;
        }
        // The fourth in the minute is denied by the rate, and takes no lease.
        let denied = service.ask("api", &["tenant=a"]).await;
        assert!(!is_ok(&denied), "{store}");
        assert_eq!(
            denied.statuses[0]
                .current_limit
                .as_ref()
                .map(|l| l.name.as_str()),
            Some("per_minute")
        );
        assert_eq!(
            free(&service, "tenant=a").await,
            0,
            "{store}: the rate binds at 0"
        );

        // A request whose rate descriptor is over takes no lease on its other descriptor.
        assert!(is_ok(&service.ask("api", &["rate_only=x"]).await));
        let both = service.ask("api", &["api_key=j", "rate_only=x"]).await;
        assert!(!is_ok(&both) && token_in(&both).is_none(), "{store}");
        assert_eq!(free(&service, "api_key=j").await, 2, "{store}");

        // A rule that replaces the concurrency limit leaves only the rate.
        let replaced = service.ask("api", &["tenant=b", "vip=x"]).await;
        assert!(is_ok(&replaced) && token_in(&replaced).is_none(), "{store}");
        // Unlimited: a release there is OK and frees nothing.
        assert_eq!(
            release(&service, "free=x", "00000000000000ab").await,
            u32::MAX
        );

        // Shadow mode: the second is over, answered OK, and holds nothing.
        let shadow = acquire(&service, "shadow_key=s").await.expect("shadow");
        let over = service.ask("api", &["shadow_key=s"]).await;
        assert!(is_ok(&over) && token_in(&over).is_none(), "{store}");
        let shadow_labels = r#"{domain="api",key1="shadow_key"}"#;
        let refused = service.series(&format!("sluice_leases_refused_total{shadow_labels}"));
        assert_eq!(refused, 1.0, "{store}");
        assert_eq!(release(&service, "shadow_key=s", &shadow).await, 1);
    }
}

#[tokio::test]
async fn a_request_another_limit_denies_takes_no_lease_and_counts_none_in_both_modes() {
    let redis = RedisServer::start(&[]);
    let every_hit = LimiterOptions {
        charging: Charging::EveryHit,
        ..LimiterOptions::default()
    };
    for (mode, options) in [
        ("all or nothing", LimiterOptions::default()),
        ("every hit", every_hit),
    ] {
        for service in every_store(&redis.url(), CONFIG, &options).await {
            let place = format!("{} ({mode})", service.store);
            // The rate of `rate_only` is spent; a request holding it and a concurrency
            // limit is denied, and the concurrency limit holds nothing for it.
            assert!(
                is_ok(&service.ask("api", &["rate_only=x"]).await),
                "{place}"
            );
            for _ in 0..3 {
                let denied = service.ask("api", &["api_key=j", "rate_only=x"]).await;
                assert!(!is_ok(&denied) && token_in(&denied).is_none(), "{place}");
            }
            assert_eq!(
                free(&service, "api_key=j").await,
                2,
                "{place}: no lease held"
            );
            let labels = r#"{domain="api",key1="api_key"}"#;
            let series = |name: &str| service.series(&format!("{name}{labels}"));
            assert_eq!(series("sluice_leases_acquired_total"), 0.0, "{place}");
            assert_eq!(series("sluice_leases_refused_total"), 0.0, "{place}");
            assert_eq!(series("sluice_leases_held"), 0.0, "{place}");
            // An admitted one takes its lease and counts it.
            let token = acquire(&service, "api_key=j").await.expect("admitted");
            assert_eq!(series("sluice_leases_acquired_total"), 1.0, "{place}");
            assert_eq!(series("sluice_leases_held"), 1.0, "{place}");
            release(&service, "api_key=j", &token).await;
            assert_eq!(series("sluice_leases_held"), 0.0, "{place}");
        }
    }
}

#[tokio::test]
async fn a_release_whose_token_sluice_cannot_have_issued_is_refused_naming_the_field() {
    let sluice = Sluice::start(CONFIG, &[]);
    let mut client = sluice.client().await;
    let bad = request(
        "api",
        vec![descriptor(&[
            ("api_key", "k"),
            ("sluice.lease", "not-a-token"),
        ])],
    );
    let status = client.should_rate_limit(bad).await.expect_err("refused");
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(
        status.message().contains("descriptors[0].entries[1].value"),
        "{}",
        status.message()
    );
}

/// 64 clients acquiring and releasing on one key of `sluice` (N = 5) while `held` reads the
/// store's own count; returns (admitted, the most ever held).
async fn sixty_four_clients(
    sluice: &Sluice,
    held: impl Fn() -> u64 + Send + 'static,
) -> (u64, u64) {
    let stop = Arc::new(AtomicBool::new(false));
    let most = Arc::new(AtomicU64::new(0));
    let watcher = {
        let (stop, most) = (stop.clone(), most.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                most.fetch_max(held(), Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(1));
            }
        })
    };
    let admitted = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..64 {
        let mut client = sluice.client().await;
        let admitted = admitted.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..15 {
                let acquired = call(
                    &mut client,
                    request("api", vec![descriptor(&[("hot", "k")])]),
                )
                .await;
                let Some(token) = envoy_token(&acquired) else {
                    continue;
                };
                admitted.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(2)).await;
                let entries = [("hot", "k"), ("sluice.lease", token.as_str())];
                let released = call(&mut client, request("api", vec![descriptor(&entries)])).await;
                assert_eq!(overall(&released), Code::Ok);
            }
        }));
    }
    for task in tasks {
        task.await.expect("client");
    }
    stop.store(true, Ordering::SeqCst);
    watcher.join().expect("watcher");
    (admitted.load(Ordering::SeqCst), most.load(Ordering::SeqCst))
}

/// The token in a response of Envoy's protos.
fn envoy_token(response: &RateLimitResponse) -> Option<String> {
    match &response
        .dynamic_metadata
        .as_ref()?
        .fields
        .get("sluice.lease")?
        .kind
    {
        Some(envoy_types::pb::google::protobuf::value::Kind::StringValue(token)) => {
            Some(token.clone())
        }
        _ => None,
    }
}

const HOT: &str = "domain: api\ndescriptors:\n  - key: hot\n    rate_limit: {algorithm: concurrency, requests_per_unit: 5, unit: minute}\n";

/// The leases a Redis hash of leases holds now (`<units>:<expires>` per token).
fn held_in(redis: &[u16], key: &str) -> u64 {
    let mut units = 0;
    for &port in redis {
        // Only the node that holds the key answers with values (the others: MOVED).
        let reply = crate::support::redis::cli(port, &["HVALS", key]);
        units += reply
            .lines()
            // A lease is `units:end`; `_until` (the state's end) is not one.
            .filter_map(|value| value.split_once(':')?.0.trim().parse::<u64>().ok())
            .sum::<u64>();
    }
    units
}

/// The leases a memory store holds for `hit`, read from its state.
fn held_in_memory(store: &MemoryStore, hit: &Hit) -> u64 {
    match store.state_of(hit) {
        Some(State::Concurrency(leases)) => leases.0.iter().map(|l| l.units).sum(),
        _ => 0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_clients_never_hold_more_than_the_limit_on_the_memory_store() {
    let (limiter, hit) = crate::support::stores::memory_limiter(HOT, "api", &[("hot", "k")]);
    let most = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (limiter, most, stop) = (limiter.clone(), most.clone(), stop.clone());
        let hit = hit.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                let AnyStore::Memory(store) = limiter.store() else {
                    return;
                };
                most.fetch_max(held_in_memory(store, &hit), Ordering::SeqCst);
                std::thread::yield_now();
            }
        })
    };
    let admitted = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..64 {
        let (limiter, admitted) = (limiter.clone(), admitted.clone());
        tasks.push(tokio::spawn(async move {
            let ask = |entries: Vec<(&str, &str)>| sluice_proto::RateLimitRequest {
                domain: "api".into(),
                descriptors: vec![sluice_proto::RateLimitDescriptor {
                    entries: entries
                        .into_iter()
                        .map(|(key, value)| sluice_proto::rate_limit_descriptor::Entry {
                            key: key.into(),
                            value: value.into(),
                        })
                        .collect(),
                    ..Default::default()
                }],
                hits_addend: 0,
            };
            for _ in 0..30 {
                let acquired = limiter
                    .decide(&ask(vec![("hot", "k")]))
                    .await
                    .expect("acquire");
                let Some(token) = token_in(&acquired) else {
                    tokio::task::yield_now().await;
                    continue;
                };
                admitted.fetch_add(1, Ordering::SeqCst);
                tokio::task::yield_now().await;
                let release = ask(vec![("hot", "k"), ("sluice.lease", token.as_str())]);
                assert!(is_ok(&limiter.decide(&release).await.expect("release")));
            }
        }));
    }
    for task in tasks {
        task.await.expect("client");
    }
    stop.store(true, Ordering::SeqCst);
    watcher.join().expect("watcher");
    let most = most.load(Ordering::SeqCst);
    let admitted = admitted.load(Ordering::SeqCst);
    assert!(most <= 5, "held {most} at once");
    assert!(
        most >= 1 && admitted >= 5,
        "held {most}, admitted {admitted}"
    );
    let AnyStore::Memory(store) = limiter.store() else {
        unreachable!("a memory store")
    };
    assert_eq!(held_in_memory(store, &hit), 0, "every lease released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_clients_never_hold_more_than_the_limit_on_redis_and_two_replicas() {
    let redis = RedisServer::start(&[]);
    let port = redis.port;
    let files = [("config.yaml", HOT)];
    let one = Sluice::on_redis_url(&files, &redis.url(), &[], &[]);
    let (admitted, most) =
        sixty_four_clients(&one, move || held_in(&[port], "concurrency_api_hot_k_")).await;
    assert!(
        most <= 5 && admitted >= 5,
        "held {most}, admitted {admitted}"
    );
    assert_eq!(held_in(&[port], "concurrency_api_hot_k_"), 0);

    // Two sluice processes sharing the Redis: clients split between them.
    let two = Sluice::on_redis_url(&files, &redis.url(), &[], &[]);
    let (a, b) = tokio::join!(
        sixty_four_clients(&one, move || held_in(&[port], "concurrency_api_hot_k_")),
        sixty_four_clients(&two, move || held_in(&[port], "concurrency_api_hot_k_")),
    );
    assert!(a.1 <= 5 && b.1 <= 5, "held {} and {}", a.1, b.1);
    assert_eq!(held_in(&[port], "concurrency_api_hot_k_"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_clients_never_hold_more_than_the_limit_on_a_cluster() {
    let nodes = start_cluster();
    let ports: Vec<u16> = nodes.iter().map(|n| n.port).collect();
    let flags = cluster_flags(&nodes);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let sluice = Sluice::start(HOT, &flags);
    let watched = ports.clone();
    let (admitted, most) =
        sixty_four_clients(&sluice, move || held_in(&watched, "concurrency_api_hot_k_")).await;
    assert!(
        most <= 5 && admitted >= 5,
        "held {most}, admitted {admitted}"
    );
    assert_eq!(held_in(&ports, "concurrency_api_hot_k_"), 0);
}
