//! Where limit state lives: the `Store` trait the service calls, the key layout (`key`), and
//! the embedded in-memory store (`memory`), the Redis store (`redis`), the local over-limit
//! cache that can sit in front of a remote store (`local_cache`), budget leasing in front of
//! it (`leasing`), limits held across regions in front of that (`regions`), the answer when
//! it fails (`on_failure`, with a replica's own share of its limits: `local_share`), the one
//! store value the server serves with (`any`), what the admin API asks of them (`admin`), and
//! which serving thread a call runs on (`lane`).

// The async body of `AnyStore::charge` (Redis Cluster's futures inside) is deeper than the
// compiler's default layout query depth.
#![recursion_limit = "256"]

pub mod admin;
pub mod any;
pub mod key;
pub mod lane;
pub mod leasing;
pub mod local_cache;
pub mod local_share;
pub mod memory;
pub mod on_failure;
pub mod quota_budget;
pub mod redis;
pub mod regions;
pub mod series;

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::series::Reporting;
use sluice_core::engine::Charging;
use sluice_core::limit::{Decision, Hit};

/// Charges hits and decides them. One call per request: a remote store makes one round trip.
/// A store writes its own series (keys held, script reloads, ...) at each scrape
/// (`Reporting`).
pub trait Store: Reporting + Send + Sync + 'static {
    /// The store's kind, as spans and logs name it (`memory`, `redis`).
    fn name(&self) -> &'static str;

    /// Decides every hit of one request, in order, each on the state the hits before it
    /// left, and charges them as `charging` says. A hit's decision never depends on a later
    /// hit.
    fn charge(
        &self,
        hits: &[Hit],
        charging: Charging,
    ) -> impl Future<Output = Result<Vec<Decision>, StoreError>> + Send;

    /// Whether the store answers now (for `/healthcheck`).
    fn healthy(&self) -> impl Future<Output = bool> + Send;

    /// The limits changed (a config reload): forget what was derived from the old ones.
    fn config_changed(&self);
}

/// A shared store is the store it shares (the server's layers and its admin API hold one).
impl<S: Store> Store for std::sync::Arc<S> {
    fn name(&self) -> &'static str {
        (**self).name()
    }

    fn charge(
        &self,
        hits: &[Hit],
        charging: Charging,
    ) -> impl Future<Output = Result<Vec<Decision>, StoreError>> + Send {
        (**self).charge(hits, charging)
    }

    fn healthy(&self) -> impl Future<Output = bool> + Send {
        (**self).healthy()
    }

    fn config_changed(&self) {
        (**self).config_changed();
    }
}

pub use sluice_core::lease::unique_process_id;

/// An error of a store's own, kept as the cause of a `StoreError`.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Why a store could not decide. A timeout, a store that cannot be reached and a store that
/// answered wrongly stay three things, up to the metric label (`kind`).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The store did not answer within the deadline.
    #[error("{store} did not answer within {} ms", .after.as_millis())]
    Timeout {
        store: &'static str,
        after: std::time::Duration,
    },
    /// The store cannot be reached: connection refused, reset or dropped.
    #[error("cannot reach {store}: {source}")]
    Unreachable {
        store: &'static str,
        #[source]
        source: BoxError,
    },
    /// The store answered, but with an error or a reply that makes no sense.
    #[error("{store} answered with an error: {source}")]
    Protocol {
        store: &'static str,
        #[source]
        source: BoxError,
    },
    /// The store is full of state that still matters: it cannot take a new key.
    #[error("{store} is full of state that still restricts clients")]
    Full { store: &'static str },
    /// The circuit breaker is open after calls failed in a row: the call was not sent.
    #[error("the circuit to {store} is open after failed calls: not sent")]
    CircuitOpen { store: &'static str },
    /// A file the store keeps could not be written (the memory store's journal).
    #[error("cannot write {store}: {source}")]
    Disk {
        store: &'static str,
        #[source]
        source: BoxError,
    },
}

impl StoreError {
    /// Every `kind`.
    pub const KINDS: [&'static str; 6] = [
        "timeout",
        "unreachable",
        "protocol",
        "full",
        "circuit_open",
        "disk",
    ];

    /// The kind, as a metric label: `timeout`, `unreachable`, `protocol`, `full`,
    /// `circuit_open` or `disk`.
    pub fn kind(&self) -> &'static str {
        match self {
            StoreError::Timeout { .. } => "timeout",
            StoreError::Unreachable { .. } => "unreachable",
            StoreError::Protocol { .. } => "protocol",
            StoreError::Full { .. } => "full",
            StoreError::CircuitOpen { .. } => "circuit_open",
            StoreError::Disk { .. } => "disk",
        }
    }
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

/// The wall clock, never reading the same microsecond twice (nor going back): two readings
/// are in the order they were taken. A recording server's memory store reads it under its
/// locks, so that the decisions on a key are in the order of their times.
#[derive(Debug, Default)]
pub struct StrictClock {
    last: AtomicU64,
}

impl Clock for StrictClock {
    fn now_us(&self) -> u64 {
        let now = SystemClock.now_us();
        let previous = self
            .last
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |last| {
                Some(now.max(last + 1))
            })
            .unwrap_or(now);
        now.max(previous + 1)
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
