//! The one store value the server serves with, whichever store the settings chose: the
//! memory store, or Redis behind budget leasing (which passes every request through unless a
//! limit is leased), and that behind the local over-limit cache when it has a size. Dispatch stays static (a
//! `match`), so the request path pays no virtual call.

use super::admin::{AdminStore, Feed, Loaded, Page, Reading};
use super::leasing::WithLeasing;
use super::local_cache::WithLocalCache;
use super::memory::MemoryStore;
use super::redis::RedisStore;
use super::{Clock, Store, StoreError};
use crate::series::{Reporting, Series};
use sluice_core::engine::Charging;
use sluice_core::limit::{Decision, Hit};
use std::sync::Arc;

/// A store of any kind sluice serves with.
pub enum AnyStore {
    Memory(MemoryStore),
    Redis(WithLeasing<RedisStore>),
    /// Redis, with over-limit keys remembered in this process (`LOCAL_CACHE_SIZE_IN_BYTES`).
    CachedRedis(WithLocalCache<WithLeasing<RedisStore>>),
}

impl AnyStore {
    /// Redis behind budget leasing, and behind the local over-limit cache of `cache_bytes`
    /// when that is above 0, on `clock`.
    pub fn on_redis(store: RedisStore, cache_bytes: usize, clock: Arc<dyn Clock>) -> AnyStore {
        let leased = WithLeasing::new(store, clock.clone());
        match cache_bytes {
            0 => AnyStore::Redis(leased),
            size => AnyStore::CachedRedis(WithLocalCache::new(leased, size, clock)),
        }
    }

    /// The memory store, when it is the one.
    pub fn memory(&self) -> Option<&MemoryStore> {
        match self {
            AnyStore::Memory(memory) => Some(memory),
            _ => None,
        }
    }

    /// The Redis store, cached or not, when it is the one.
    pub fn redis(&self) -> Option<&RedisStore> {
        match self {
            AnyStore::Memory(_) => None,
            AnyStore::Redis(leased) => Some(leased.inner()),
            AnyStore::CachedRedis(cached) => Some(cached.inner().inner()),
        }
    }

    /// Whether a request's call to the store stays on the thread it was made on (`crate::lane`):
    /// always in memory; on Redis when every backend's script calls go on sluice's own
    /// connection a lane (a single node over plain TCP, pipelined adaptively: the default),
    /// not through redis-rs's, whose task wakes callers from another runtime.
    pub fn keeps_calls_on_their_thread(&self) -> bool {
        self.redis().is_none_or(RedisStore::calls_go_on_lanes)
    }

    /// The budget leases in front of Redis, when it is the store.
    pub fn leasing(&self) -> Option<&WithLeasing<RedisStore>> {
        match self {
            AnyStore::Memory(_) => None,
            AnyStore::Redis(leased) => Some(leased),
            AnyStore::CachedRedis(cached) => Some(cached.inner()),
        }
    }
}

/// Runs `$call` on whichever store `$any` holds.
macro_rules! each_store {
    ($any:expr, $store:ident => $call:expr) => {
        match $any {
            AnyStore::Memory($store) => $call,
            AnyStore::Redis($store) => $call,
            AnyStore::CachedRedis($store) => $call,
        }
    };
}

/// Runs `$call` on the store that holds `$any`'s records: behind the leases and the local
/// cache, Redis.
macro_rules! each_admin_store {
    ($any:expr, $store:ident => $call:expr) => {
        match $any {
            AnyStore::Memory($store) => $call,
            AnyStore::Redis(leased) => {
                let $store = leased.inner();
                $call
            }
            AnyStore::CachedRedis(cached) => {
                let $store = cached.inner().inner();
                $call
            }
        }
    };
}

impl Reporting for AnyStore {
    fn report(&self, series: &Series) {
        each_store!(self, store => store.report(series))
    }
}

impl Store for AnyStore {
    fn name(&self) -> &'static str {
        each_store!(self, store => store.name())
    }

    /// The Redis store's call is a future of several kilobytes (its shards, its pipelining):
    /// it is boxed, so that a request on the memory store, whose call is a few bytes, does
    /// not carry (and copy) that size in every future that holds it.
    async fn charge(&self, hits: &[Hit], charging: Charging) -> Result<Vec<Decision>, StoreError> {
        match self {
            AnyStore::Memory(store) => store.charge(hits, charging).await,
            AnyStore::Redis(store) => Box::pin(store.charge(hits, charging)).await,
            AnyStore::CachedRedis(store) => Box::pin(store.charge(hits, charging)).await,
        }
    }

    async fn healthy(&self) -> bool {
        each_store!(self, store => store.healthy().await)
    }

    fn config_changed(&self) {
        each_store!(self, store => store.config_changed())
    }
}

impl AnyStore {
    /// After a reset or a credit of `hits`: forgets what the local cache remembered (a key it
    /// saw over its limit may not be now) and this replica's chunks of them (a reset counter
    /// no longer counts them).
    fn forget_local(&self, hits: &[Hit]) {
        if let AnyStore::CachedRedis(cached) = self {
            cached.clear();
        }
        if let Some(leasing) = self.leasing() {
            for hit in hits {
                leasing.table().forget(&hit.key);
            }
        }
    }
}

/// The records and the counters of whichever store; a reset or a credit also forgets what
/// this replica holds of them (`forget_local`).
impl AdminStore for AnyStore {
    async fn reset(&self, hits: &[Hit], records: bool) -> Result<u64, StoreError> {
        let reset = each_admin_store!(self, store => store.reset(hits, records).await);
        self.forget_local(hits);
        reset
    }

    async fn credit(&self, hit: &Hit) -> Result<Decision, StoreError> {
        let credited = each_admin_store!(self, store => store.credit(hit).await);
        self.forget_local(std::slice::from_ref(hit));
        credited
    }

    async fn read(&self, hit: &Hit) -> Result<Reading, StoreError> {
        each_admin_store!(self, store => store.read(hit).await)
    }

    async fn put_override(&self, id: &str, json: &str) -> Result<Option<String>, StoreError> {
        each_admin_store!(self, store => store.put_override(id, json).await)
    }

    async fn delete_override(&self, id: &str) -> Result<Option<String>, StoreError> {
        each_admin_store!(self, store => store.delete_override(id).await)
    }

    async fn get_override(&self, id: &str) -> Result<Option<String>, StoreError> {
        each_admin_store!(self, store => store.get_override(id).await)
    }

    async fn list_overrides(
        &self,
        prefix: &str,
        token: &str,
        count: usize,
    ) -> Result<Page, StoreError> {
        each_admin_store!(self, store => store.list_overrides(prefix, token, count).await)
    }

    async fn all_overrides(&self) -> Result<Loaded, StoreError> {
        each_admin_store!(self, store => store.all_overrides().await)
    }

    async fn override_changes(&self, cursor: &str) -> Result<Feed, StoreError> {
        each_admin_store!(self, store => store.override_changes(cursor).await)
    }
}
