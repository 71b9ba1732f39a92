//! Where limit state lives: the `Store` trait the service calls, the key layout (`key`), and
//! the embedded in-memory store (`memory`), the Redis store (`redis`), and the local
//! over-limit cache that can sit in front of a remote store (`local_cache`).

pub mod key;
pub mod local_cache;
pub mod memory;
pub mod redis;

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::limit::{Decision, Hit};

/// Charges hits and decides them. One call per request: a remote store makes one round trip.
pub trait Store: Send + Sync + 'static {
    /// Decides every hit, in order. A hit's decision never depends on a later hit.
    fn check(&self, hits: &[Hit])
        -> impl Future<Output = Result<Vec<Decision>, StoreError>> + Send;

    /// Whether the store answers now (for `/healthcheck`).
    fn healthy(&self) -> impl Future<Output = bool> + Send;

    /// The store's own numbers, for `/metrics`.
    fn stats(&self) -> StoreStats;

    /// The limits changed (a config reload): forget what was derived from the old ones.
    fn config_changed(&self);
}

/// What a store can tell about itself; `None` where it has no such thing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreStats {
    pub keys: Option<u64>,
    pub evictions: Option<u64>,
    pub script_reloads: Option<u64>,
    pub local_cache_hits: Option<u64>,
}

/// Why a store could not decide.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The store cannot be reached or did not answer in time.
    #[error("store unavailable: {0}")]
    Unavailable(String),
}

/// The time source of a store, in microseconds since the Unix epoch.
pub trait Clock: Send + Sync + 'static {
    fn now_us(&self) -> u64;
}

/// A clock that moves only when told: simulations and tests drive time with it.
#[derive(Debug, Default)]
pub struct ManualClock(AtomicU64);

impl ManualClock {
    /// A clock reading `now_us`.
    pub fn at(now_us: u64) -> ManualClock {
        ManualClock(AtomicU64::new(now_us))
    }

    /// Sets the time.
    pub fn set(&self, now_us: u64) {
        self.0.store(now_us, Ordering::SeqCst);
    }

    /// Moves the time forward by `us`.
    pub fn advance(&self, us: u64) {
        self.0.fetch_add(us, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_us(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// The machine's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_us(&self) -> u64 {
        // A clock before 1970 is a broken machine; treat it as the epoch rather than fail.
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
    }
}
