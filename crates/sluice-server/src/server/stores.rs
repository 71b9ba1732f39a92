//! The store factory: the one store value the settings ask for, with the RLQS budget that goes
//! with it (`AnyBudget::for_store`), side by side, the memory store's sweeper, and its
//! snapshot: restored at start, written periodically and on shutdown (when leased budgets'
//! chunks are also given back). It lives in
//! the composition root because it reads `settings`, which already depends on `store`.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::server::ServerError;
use crate::settings::{GlobalSettings, RedisSettings, Settings, StoreSettings};
use sluice_store::any::AnyStore;
use sluice_store::memory::journal;
use sluice_store::memory::snapshot::{self, Snapshotting, Written};
use sluice_store::memory::MemoryStore;
use sluice_store::on_failure::WithFailureAnswer;
use sluice_store::quota_budget::AnyBudget;
use sluice_store::redis::{RedisStore, RedisTargets};
use sluice_store::regions::{RegionSettings, Regions, WithRegions};
use sluice_store::{Clock, StoreError, StrictClock, SystemClock};

/// How often the memory store drops the expired state of one of its shards: a whole pass
/// takes this times the shards (16 on 2 cores: 16 s). State that expired stays until then
/// unless its shard needs the room, which a write makes by dropping expired state first.
const SWEEP_INTERVAL: Duration = Duration::from_secs(1);

/// The stores a server runs on: the one built (which the admin API and snapshots use), the
/// same behind the failure layer (which requests are decided on), and RLQS's budget.
pub struct Stores {
    pub store: Arc<AnyStore>,
    pub served: Arc<Served>,
    pub budget: Arc<AnyBudget>,
}

/// The store requests are decided on (`Stores::served`): its global limits decided on their
/// region's allowance (with `--region`), its failures answered as `--failure-mode` and each
/// limit say, a shared store's on this replica's share.
pub type Served = WithRegions<WithFailureAnswer<Arc<AnyStore>>>;

impl Stores {
    /// The stores `settings` names, with the failure layer in front for the requests;
    /// `ordered` as `build` takes it.
    pub async fn build(settings: &Settings, ordered: bool) -> Result<Stores, ServerError> {
        let (store, budget) = build(&settings.store, ordered).await?;
        let regions = match &settings.store {
            StoreSettings::Redis(redis) => redis
                .global
                .as_ref()
                .map(|global| regions(global, redis, store.clone())),
            StoreSettings::Memory { .. } => None,
        };
        let served = Arc::new(WithRegions::new(
            WithFailureAnswer::over_any(store.clone(), settings.failure_mode),
            regions,
        ));
        Ok(Stores {
            store,
            served,
            budget,
        })
    }
}

/// Builds the store `settings` names (connecting to Redis and loading its scripts when it is
/// Redis) and the RLQS budget beside it. `ordered`: the memory store's decisions are on a
/// `StrictClock` (a recording replays them in the order they were made).
async fn build(
    settings: &StoreSettings,
    ordered: bool,
) -> Result<(Arc<AnyStore>, Arc<AnyBudget>), ServerError> {
    let store = match settings {
        StoreSettings::Memory {
            memory_max_keys,
            memory_max_bytes,
            snapshot,
        } => {
            let clock: Arc<dyn Clock> = if ordered {
                Arc::new(StrictClock::default())
            } else {
                Arc::new(SystemClock)
            };
            let mut memory =
                MemoryStore::new(*memory_max_keys, clock).with_max_bytes(*memory_max_bytes);
            if let Some(snapshot) = snapshot {
                memory = restored(memory, snapshot).await?;
            }
            AnyStore::Memory(memory)
        }
        StoreSettings::Redis(redis) => redis_store(redis).await?,
    };
    let budget = Arc::new(AnyBudget::for_store(&store));
    let store = Arc::new(store);
    if store.memory().is_some() {
        tokio::spawn(sweep_memory_store(Arc::downgrade(&store)));
    }
    if let StoreSettings::Memory {
        snapshot: Some(snapshot),
        ..
    } = settings
    {
        if let Some(every) = snapshot.interval {
            tokio::spawn(snapshot_memory_store(
                Arc::downgrade(&store),
                snapshot.path.clone(),
                every,
            ));
        }
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
    .await?
    .with_circuit(redis.circuit);
    tracing::info!(redis = %redis.target.describe(), "Redis connected, scripts loaded");
    let cache_bytes = redis.local_cache_size_in_bytes;
    Ok(AnyStore::on_redis(
        store,
        cache_bytes,
        Arc::new(SystemClock),
    ))
}

/// The region `global` names, asking its home Redis (connected to in the background, as the
/// region's own Redis is named, with the link's timeout), for the global limits decided on
/// `store`.
fn regions(global: &GlobalSettings, redis: &RedisSettings, store: Arc<AnyStore>) -> Arc<Regions> {
    tracing::info!(region = %global.region, home = %global.home.describe(), "global limits: home is");
    let settings = RegionSettings {
        name: global.region.clone(),
        home: global.home.clone(),
        key_prefix: redis.cache_key_prefix.clone(),
    };
    Regions::start(settings, store, Arc::new(SystemClock))
}

/// Drops the expired state of one memory-store shard every `SWEEP_INTERVAL`, shard after
/// shard, on the blocking pool (a shard of 600,000 keys takes milliseconds), until the store
/// is gone.
async fn sweep_memory_store(store: std::sync::Weak<AnyStore>) {
    let mut ticks = tokio::time::interval(SWEEP_INTERVAL);
    for shard in 0usize.. {
        ticks.tick().await;
        let Some(store) = store.upgrade() else { return };
        let swept = tokio::task::spawn_blocking(move || {
            if let Some(memory) = store.memory() {
                memory.sweep_expired_shard(shard);
            }
        });
        if swept.await.is_err() {
            return;
        }
    }
}

/// `memory` with the snapshot's state, read off the runtime. A snapshot that cannot be read
/// starts the store empty, with one warning; a path where none can be written stops the
/// server (it would fail only at shutdown, losing the state it was asked to keep).
async fn restored(
    memory: MemoryStore,
    snapshot: &Snapshotting,
) -> Result<MemoryStore, ServerError> {
    snapshot::check_writable(&snapshot.path)?;
    let path = snapshot.path.clone();
    let (memory, loaded) = tokio::task::spawn_blocking(move || {
        let mut memory = memory;
        let loaded = memory.load_snapshot(&path);
        (memory, loaded)
    })
    .await
    .map_err(|e| ServerError::Task(e.to_string()))?;
    let journal = journal::path_of(&snapshot.path);
    let (memory, replayed) =
        memory
            .with_journal(&journal)
            .map_err(|source| ServerError::Journal {
                path: journal.display().to_string(),
                source,
            })?;
    if replayed > 0 {
        tracing::info!(
            path = %journal.display(),
            changes = replayed,
            "override changes since the snapshot read back from its journal"
        );
    }
    match loaded {
        Ok(loaded) => tracing::info!(
            path = %snapshot.path.display(),
            keys = loaded.keys,
            expired = loaded.expired,
            unknown = loaded.unknown,
            over_bound = loaded.over_bound,
            age_s = loaded.age_us / 1_000_000,
            "memory store restored from its snapshot"
        ),
        Err(error) => tracing::warn!("{error}: the memory store starts empty"),
    }
    Ok(memory)
}

/// Writes the memory store's snapshot (off the runtime); a failure is logged when it starts
/// and when writing works again, not at every attempt.
async fn save_memory_snapshot(
    store: Arc<AnyStore>,
    path: PathBuf,
    failing: &AtomicBool,
) -> Option<Written> {
    let shown = path.display().to_string();
    let written =
        tokio::task::spawn_blocking(move || store.memory().map(|m| m.save_snapshot(&path))).await;
    match written {
        Ok(Some(Ok(written))) => {
            if failing.swap(false, Ordering::Relaxed) {
                tracing::info!(path = %shown, "the memory store's snapshot is written again");
            }
            Some(written)
        }
        Ok(Some(Err(error))) => {
            if !failing.swap(true, Ordering::Relaxed) {
                tracing::warn!("memory store snapshot: {error}");
            }
            None
        }
        Ok(None) => None,
        Err(error) => {
            tracing::warn!("memory store snapshot: {error}");
            None
        }
    }
}

/// On shutdown, once the last call is decided: the chunks of leased budgets given back to
/// Redis, and the memory store's last snapshot.
pub async fn save_on_shutdown(store: Arc<AnyStore>, settings: &StoreSettings) {
    if let Some(leasing) = store.leasing() {
        leasing.give_back_all().await;
    }
    let StoreSettings::Memory {
        snapshot: Some(snapshot),
        ..
    } = settings
    else {
        return;
    };
    let failing = AtomicBool::new(false);
    if let Some(written) = save_memory_snapshot(store, snapshot.path.clone(), &failing).await {
        tracing::info!(
            path = %snapshot.path.display(),
            keys = written.keys,
            bytes = written.bytes,
            took_ms = written.took.as_millis() as u64,
            "memory store snapshot written"
        );
    }
}

/// Writes the memory store's snapshot every `every` until the store is gone.
async fn snapshot_memory_store(store: std::sync::Weak<AnyStore>, path: PathBuf, every: Duration) {
    let failing = AtomicBool::new(false);
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick is now: the store has just been loaded.
    ticks.tick().await;
    loop {
        ticks.tick().await;
        let Some(store) = store.upgrade() else { return };
        save_memory_snapshot(store, path.clone(), &failing).await;
    }
}
