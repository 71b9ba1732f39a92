//! Where limit state is kept: `--store` (or the reference's `BACKEND_TYPE`, or a Redis URL in
//! the environment), the memory store's bounds and snapshot, the Redis flags (`redis`), and whether health
//! follows the store.

use std::path::PathBuf;
use std::time::Duration;

use clap::builder::FalseyValueParser;
use clap::{ArgAction, Args, ValueEnum};

use super::redis::{RedisArgs, RedisSettings};
use super::SettingsError;
use sluice_core::duration;
use sluice_store::memory::snapshot::Snapshotting;

/// The flags of the store.
#[derive(Debug, Clone, Args)]
pub struct StoreArgs {
    /// Where limit state is kept: memory (the default) or redis. Unset, envoyproxy/ratelimit's
    /// BACKEND_TYPE=redis, or a REDIS_URL in the environment, choose redis.
    #[arg(long, env = "SLUICE_STORE", value_enum)]
    pub store: Option<StoreKind>,
    #[arg(long, env = "BACKEND_TYPE", hide = true)]
    pub backend_type: Option<String>,
    #[command(flatten)]
    pub redis: RedisArgs,
    /// Most keys the memory store holds; at the bound only expired state makes room.
    #[arg(long, env = "SLUICE_MEMORY_MAX_KEYS", default_value_t = 1_000_000)]
    pub memory_max_keys: usize,
    /// Most bytes of state the memory store holds: its map's table as allocated, and each
    /// state's heap block (docs/memory-store.md). At either bound only expired state is
    /// dropped to make room; when none is, a request needing a new key gets --failure-mode.
    #[arg(long, env = "SLUICE_MEMORY_MAX_BYTES", default_value_t = 256 * 1024 * 1024)]
    pub memory_max_bytes: usize,
    /// Where the memory store keeps its state across restarts: written there on shutdown
    /// (and every --memory-snapshot-interval), read back at start. Unset: state lives only in
    /// the process, and a restart starts every client afresh.
    #[arg(long, env = "SLUICE_MEMORY_SNAPSHOT")]
    pub memory_snapshot: Option<PathBuf>,
    /// How often the snapshot is also written while serving, so that a crash loses at most
    /// this much; 0s: only on shutdown.
    #[arg(long, env = "SLUICE_MEMORY_SNAPSHOT_INTERVAL", default_value = "0s", value_parser = duration::parse)]
    pub memory_snapshot_interval: Duration,
    /// `/healthcheck` answers 500 while the store does not answer.
    #[arg(long, env = "SLUICE_HEALTHCHECK_STORE", action = ArgAction::SetTrue, value_parser = FalseyValueParser::new())]
    pub healthcheck_store: bool,
    /// envoyproxy/ratelimit's name of --healthcheck-store.
    #[arg(long, env = "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", hide = true, action = ArgAction::SetTrue, value_parser = FalseyValueParser::new())]
    pub redis_health_check_active_connection: bool,
}

/// Which store keeps the limit state (`--store`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StoreKind {
    /// Embedded, in this process: one sluice instance.
    Memory,
    /// Redis: any number of sluice replicas share the state.
    Redis,
}

/// The store and its own settings: a Redis store without Redis settings cannot be built.
#[derive(Debug, Clone)]
pub enum StoreSettings {
    Memory {
        /// `--memory-max-keys`.
        memory_max_keys: usize,
        /// `--memory-max-bytes`.
        memory_max_bytes: usize,
        /// `--memory-snapshot` and its interval.
        snapshot: Option<Snapshotting>,
    },
    Redis(Box<RedisSettings>),
}

impl StoreArgs {
    /// The store chosen, with its settings validated.
    pub fn into_settings(self) -> Result<StoreSettings, SettingsError> {
        Ok(match self.store_kind()? {
            StoreKind::Redis => StoreSettings::Redis(Box::new(self.redis.into_settings()?)),
            StoreKind::Memory => StoreSettings::Memory {
                memory_max_keys: super::at_least_one("--memory-max-keys", self.memory_max_keys)?,
                memory_max_bytes: super::at_least_one("--memory-max-bytes", self.memory_max_bytes)?,
                snapshot: self.memory_snapshot.map(|path| Snapshotting {
                    path,
                    interval: (!self.memory_snapshot_interval.is_zero())
                        .then_some(self.memory_snapshot_interval),
                }),
            },
        })
    }

    /// Whether health follows the store (`--healthcheck-store`, or the reference's name).
    pub fn checks_health(&self) -> bool {
        self.healthcheck_store || self.redis_health_check_active_connection
    }

    /// `--store`, else the reference's BACKEND_TYPE, else redis when a Redis URL is given
    /// (REDIS_URL, the reference's default backend, or `--redis-url`), else memory.
    fn store_kind(&self) -> Result<StoreKind, SettingsError> {
        if let Some(store) = self.store {
            return Ok(store);
        }
        match self
            .backend_type
            .as_deref()
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            Some("redis") => Ok(StoreKind::Redis),
            Some(other) if !other.is_empty() => Err(SettingsError::Backend(other.to_string())),
            _ if !self.redis.redis_url.is_empty() => Ok(StoreKind::Redis),
            _ => Ok(StoreKind::Memory),
        }
    }
}
