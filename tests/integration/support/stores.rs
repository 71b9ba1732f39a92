//! Every store in this process, each on a manual clock: the memory store, Redis (a real
//! `redis-server` the caller started), and Redis behind the local over-limit cache, each under
//! the service exactly as the server runs it (`RateLimiter` with its metrics, the store
//! reporting its own series). The tables of behaviour cases run on these, row by row,
//! as Limitador's `test_with_all_storage_impls!` runs its cases on every storage.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use sluice_config::{self as config, LoadOptions};
use sluice_core::limit::Unit;
use sluice_limiter::LimiterOptions;
use sluice_proto::rate_limit_descriptor::{Entry, RateLimitOverride};
use sluice_proto::{RateLimitDescriptor, RateLimitRequest, RateLimitResponse};
use sluice_server::metrics::Metrics;
use sluice_server::service::RateLimiter;
use sluice_store::any::AnyStore;
use sluice_store::memory::MemoryStore;
use sluice_store::redis::{RedisStore, RedisTarget, RedisTargets, TimeSource};
use sluice_store::ManualClock;

/// Where the manual clocks start: a time well inside a day, an hour and a minute.
pub const START_US: u64 = 1_700_000_000_123_456;

/// The Redis store on `url`, under `prefix`, reading `clock` (the scripts take sluice's time).
pub async fn redis_store(url: &str, prefix: String, clock: Arc<ManualClock>) -> RedisStore {
    let target = RedisTarget::single(url, Duration::from_secs(5));
    let targets = RedisTargets {
        main: &target,
        per_second: None,
    };
    RedisStore::connect(
        targets,
        Duration::from_secs(5),
        prefix,
        TimeSource::Sluice,
        clock,
    )
    .await
    .expect("connect to the test Redis")
}

/// A key prefix no other case on the same Redis has.
fn unique_prefix() -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    format!("case{}_", NEXT.fetch_add(1, Ordering::SeqCst))
}

/// The service on one store, with its clock and its metrics.
pub struct InProcess {
    pub store: &'static str,
    /// Redis behind the local over-limit cache.
    pub cached: bool,
    pub limiter: RateLimiter<AnyStore>,
    pub clock: Arc<ManualClock>,
    pub metrics: Arc<Metrics>,
}

impl InProcess {
    /// Asks `domain` about `descriptors` (`k=v,k2=v2` each) as one request.
    pub async fn ask(&self, domain: &str, descriptors: &[&str]) -> RateLimitResponse {
        let request = RateLimitRequest {
            domain: domain.to_string(),
            descriptors: descriptors.iter().map(|d| parsed(d)).collect(),
            hits_addend: 0,
        };
        self.limiter
            .decide(&request)
            .await
            .unwrap_or_else(|e| panic!("{}: {descriptors:?}: {e}", self.store))
    }

    /// The value of the series `name_and_labels` on `/metrics`; 0 when absent.
    pub fn series(&self, name_and_labels: &str) -> f64 {
        super::series(&self.metrics.render(), name_and_labels).unwrap_or(0.0)
    }
}

/// `k=v,k2=v2` (an entry without `=` has an empty value) as a descriptor; a trailing
/// `+N` sets its hits (`k=v+3`), an `@N/unit` before it the request's limit override
/// (`k=v@42/hour`).
fn parsed(text: &str) -> RateLimitDescriptor {
    let (entries, hits) = match text.rsplit_once('+') {
        Some((entries, hits)) => (entries, Some(hits.parse().expect("hits"))),
        None => (text, None),
    };
    let (entries, limit) = match entries.split_once('@') {
        Some((entries, limit)) => (entries, Some(limit_override(limit))),
        None => (entries, None),
    };
    RateLimitDescriptor {
        limit,
        entries: entries
            .split(',')
            .map(|entry| {
                let (key, value) = entry.split_once('=').unwrap_or((entry, ""));
                Entry {
                    key: key.to_string(),
                    value: value.to_string(),
                }
            })
            .collect(),
        hits_addend: hits,
    }
}

/// `N/unit` as a request's limit override.
fn limit_override(text: &str) -> RateLimitOverride {
    let (requests, unit) = text.split_once('/').expect("N/unit");
    RateLimitOverride {
        requests_per_unit: requests.parse().expect("a number of requests"),
        unit: Unit::parse(unit).expect("a unit").proto_number(),
    }
}

/// The service with `config` (YAML) and `options` on every store: the memory store, Redis at
/// `redis_url`, and Redis behind the local cache, each under a key prefix of its own and on its
/// own clock at `START_US`.
pub async fn every_store(
    redis_url: &str,
    config: &str,
    options: &LimiterOptions,
) -> Vec<InProcess> {
    let config = config::load_str("case.yaml", config, LoadOptions::default())
        .unwrap_or_else(|e| panic!("the case's config: {e}"));
    let config = Arc::new(ArcSwap::from_pointee(config));
    let clocks: [Arc<ManualClock>; 3] =
        std::array::from_fn(|_| Arc::new(ManualClock::at(START_US)));
    let redis = |clock: &Arc<ManualClock>| redis_store(redis_url, unique_prefix(), clock.clone());
    let stores = [
        (
            "memory",
            AnyStore::Memory(MemoryStore::new(10_000, clocks[0].clone())),
        ),
        (
            "redis",
            AnyStore::on_redis(redis(&clocks[1]).await, 0, clocks[1].clone()),
        ),
        (
            "redis behind the local cache",
            AnyStore::on_redis(redis(&clocks[2]).await, 1 << 20, clocks[2].clone()),
        ),
    ];
    stores
        .into_iter()
        .zip(clocks)
        .map(|((name, store), clock)| {
            let metrics = Arc::new(Metrics::new(0.8, 10_000));
            let store = Arc::new(store);
            metrics.series().add_reporter(store.clone());
            InProcess {
                store: name,
                cached: matches!(*store, AnyStore::CachedRedis(_)),
                limiter: RateLimiter::new(config.clone(), store, options.clone(), metrics.clone()),
                clock,
                metrics,
            }
        })
        .collect()
}

/// The service on a fresh memory store (on the system clock) with `config` (YAML, one domain
/// `domain`), and the hit of the first limit that `entries` match there: what a test reads the
/// store's own state by (`MemoryStore::state_of`).
pub fn memory_limiter(
    config: &str,
    domain: &str,
    entries: &[(&str, &str)],
) -> (Arc<RateLimiter<AnyStore>>, sluice_core::limit::Hit) {
    let config = config::load_str("case.yaml", config, LoadOptions::default())
        .unwrap_or_else(|e| panic!("the case's config: {e}"));
    let limit = config
        .domain(domain)
        .and_then(|d| d.resolve(entries.iter().copied()))
        .and_then(|m| m.rule.limits[0].limit.clone())
        .expect("the limit");
    let key = sluice_core::identity::descriptor_key(domain, entries.iter().copied());
    let limiter = Arc::new(RateLimiter::new(
        Arc::new(ArcSwap::from_pointee(config)),
        Arc::new(AnyStore::Memory(MemoryStore::new(
            1000,
            Arc::new(sluice_store::SystemClock),
        ))),
        LimiterOptions::default(),
        Arc::new(Metrics::new(0.8, 100)),
    ));
    let hit = sluice_core::limit::Hit {
        key,
        limit,
        cost: 1,
        role: Default::default(),
        joins_previous: false,
        lease: None,
    };
    (limiter, hit)
}
