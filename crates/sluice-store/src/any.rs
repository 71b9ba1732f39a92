//! The one store value the server serves with, whichever store the settings chose: the
//! memory store, Redis, or Redis behind the local over-limit cache. Dispatch stays static (a
//! `match`), so the request path pays no virtual call.

use super::local_cache::WithLocalCache;
use super::memory::MemoryStore;
use super::redis::RedisStore;
use super::{Store, StoreError};
use crate::series::{Reporting, Series};
use sluice_core::engine::Charging;
use sluice_core::limit::{Decision, Hit};

/// A store of any kind sluice serves with.
pub enum AnyStore {
    Memory(MemoryStore),
    Redis(RedisStore),
    /// Redis, with over-limit keys remembered in this process (`LOCAL_CACHE_SIZE_IN_BYTES`).
    CachedRedis(WithLocalCache<RedisStore>),
}

impl AnyStore {
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
            AnyStore::Redis(redis) => Some(redis),
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

impl Reporting for AnyStore {
    fn report(&self, series: &Series) {
        each_store!(self, store => store.report(series))
    }
}

impl Store for AnyStore {
    fn name(&self) -> &'static str {
        each_store!(self, store => store.name())
    }

    async fn charge(&self, hits: &[Hit], charging: Charging) -> Result<Vec<Decision>, StoreError> {
        each_store!(self, store => store.charge(hits, charging).await)
    }

    async fn healthy(&self) -> bool {
        each_store!(self, store => store.healthy().await)
    }

    fn config_changed(&self) {
        each_store!(self, store => store.config_changed())
    }
}
