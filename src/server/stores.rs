//! The store factory: the one store value the settings ask for, with the RLQS budget that goes
//! with it (`AnyBudget::for_store`), side by side, and the memory store's sweeper. It lives in
//! the composition root because it reads `settings`, which already depends on `store`.

use std::sync::Arc;
use std::time::Duration;

use crate::rlqs::budget::AnyBudget;
use crate::settings::{RedisSettings, StoreSettings};
use crate::store::any::AnyStore;
use crate::store::local_cache::WithLocalCache;
use crate::store::memory::MemoryStore;
use crate::store::redis::{RedisStore, RedisTargets};
use crate::store::{Clock, StoreError, StrictClock, SystemClock};

/// How often the memory store drops expired state.
const SWEEP_INTERVAL: Duration = Duration::from_secs(1);

/// Builds the store `settings` names (connecting to Redis and loading its scripts when it is
/// Redis) and the RLQS budget beside it. `ordered`: the memory store's decisions are on a
/// `StrictClock` (a recording replays them in the order they were made).
pub async fn build(
    settings: &StoreSettings,
    ordered: bool,
) -> Result<(Arc<AnyStore>, Arc<AnyBudget>), StoreError> {
    let store = match settings {
        StoreSettings::Memory {
            memory_max_keys,
            memory_max_bytes,
        } => {
            let clock: Arc<dyn Clock> = if ordered {
                Arc::new(StrictClock::default())
            } else {
                Arc::new(SystemClock)
            };
            AnyStore::Memory(
                MemoryStore::new(*memory_max_keys, clock).with_max_bytes(*memory_max_bytes),
            )
        }
        StoreSettings::Redis(redis) => redis_store(redis).await?,
    };
    let budget = Arc::new(AnyBudget::for_store(&store));
    let store = Arc::new(store);
    if store.memory().is_some() {
        tokio::spawn(sweep_memory_store(Arc::downgrade(&store)));
    }
    Ok((store, budget))
}

/// The Redis store, behind the local over-limit cache when it has a size.
async fn redis_store(redis: &RedisSettings) -> Result<AnyStore, StoreError> {
    tracing::info!(redis = %redis.target.describe(), "connecting to Redis");
    if let Some(per_second) = &redis.per_second {
        tracing::info!(redis = %per_second.describe(), "per-second limits in their own Redis");
    }
    let targets = RedisTargets {
        main: &redis.target,
        per_second: redis.per_second.as_ref(),
    };
    let store = RedisStore::connect(
        targets,
        redis.redis_startup_wait,
        redis.cache_key_prefix.clone(),
        redis.redis_time,
        Arc::new(SystemClock),
    )
    .await?;
    tracing::info!(redis = %redis.target.describe(), "Redis connected, scripts loaded");
    Ok(match redis.local_cache_size_in_bytes {
        0 => AnyStore::Redis(store),
        size => AnyStore::CachedRedis(WithLocalCache::new(store, size, Arc::new(SystemClock))),
    })
}

/// Drops expired memory-store state every `SWEEP_INTERVAL` until the store is gone.
async fn sweep_memory_store(store: std::sync::Weak<AnyStore>) {
    let mut ticks = tokio::time::interval(SWEEP_INTERVAL);
    loop {
        ticks.tick().await;
        let Some(store) = store.upgrade() else { return };
        if let Some(memory) = store.memory() {
            memory.sweep_expired();
        }
    }
}
