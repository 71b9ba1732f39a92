//! How Redis has been answering, as the calls find it, named: normally, not in time,
//! unreachable, out of memory, a read-only replica, in a failover, refusing sluice's
//! credentials, or with other error replies. Each change is logged once, with a metric of the
//! current condition (`sluice_redis_condition`); the way back from error replies only after a
//! quiet spell, so that a Redis failing every other call is one line, not one per call.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::time::{Duration, Instant};

use metrics::Label;

use crate::series::Series;
use crate::StoreError;

/// How long without a failure before Redis counts as answering normally again.
const QUIET_SPELL: Duration = Duration::from_secs(5);

/// A condition: its metric label, and what its first failure logs.
struct Named {
    label: &'static str,
    says: &'static str,
}

/// Every condition, `NORMAL` first; the index is the state.
const CONDITIONS: [Named; 8] = [
    Named {
        label: "normal",
        says: "Redis is reachable again, answering normally",
    },
    Named {
        label: "timing_out",
        says: "Redis does not answer in time: calls fail until it does",
    },
    Named {
        label: "unreachable",
        says: "Redis is unreachable: calls fail until it is back",
    },
    Named {
        label: "out_of_memory",
        says: "Redis is out of memory (OOM, maxmemory): it refuses the scripts' writes; while it does, calls that need a write fail and those that need none (denials, cost 0) are answered read-only",
    },
    Named {
        label: "read_only_replica",
        says: "Redis is a read-only replica (READONLY): until sluice reaches a primary, calls that need a write fail and those that need none (denials, cost 0) are answered read-only",
    },
    Named {
        label: "failover",
        says: "Redis is in a failover or loading its data (MASTERDOWN, LOADING, CLUSTERDOWN, TRYAGAIN): calls fail until it is over",
    },
    Named {
        label: "authentication",
        says: "Redis refuses sluice's credentials (NOAUTH, WRONGPASS, NOPERM): calls fail until they are accepted",
    },
    Named {
        label: "error_replies",
        says: "Redis answers with errors: calls fail while it does",
    },
];
const NORMAL: u8 = 0;
const TIMING_OUT: u8 = 1;
const UNREACHABLE: u8 = 2;
const OUT_OF_MEMORY: u8 = 3;
const READ_ONLY: u8 = 4;
const FAILOVER: u8 = 5;
const AUTHENTICATION: u8 = 6;
const ERROR_REPLIES: u8 = 7;

/// The condition of one store's Redis.
pub struct Condition {
    state: AtomicU8,
    started: Instant,
    /// When the last call failed, in milliseconds since `started`.
    last_failure_ms: AtomicU64,
}

/// The condition `error` shows.
fn condition_of(error: &StoreError) -> u8 {
    fn redis(source: &crate::BoxError) -> Option<&redis::RedisError> {
        source.downcast_ref()
    }
    match error {
        StoreError::Timeout { .. } => TIMING_OUT,
        StoreError::Unreachable { source, .. } => match redis(source).map(|e| e.kind()) {
            Some(redis::ErrorKind::AuthenticationFailed) => AUTHENTICATION,
            _ => UNREACHABLE,
        },
        StoreError::Protocol { source, .. } => {
            redis(source).map_or(ERROR_REPLIES, condition_of_reply)
        }
        StoreError::Full { .. } | StoreError::Disk { .. } => ERROR_REPLIES,
        // Never noted: an open circuit sends nothing.
        StoreError::CircuitOpen { .. } => UNREACHABLE,
    }
}

/// The condition an error reply of Redis shows.
fn condition_of_reply(error: &redis::RedisError) -> u8 {
    match error.code() {
        Some("OOM") => OUT_OF_MEMORY,
        Some("READONLY") => READ_ONLY,
        Some("MASTERDOWN" | "LOADING" | "CLUSTERDOWN" | "TRYAGAIN") => FAILOVER,
        Some("NOAUTH" | "WRONGPASS" | "NOPERM") => AUTHENTICATION,
        None if error.kind() == redis::ErrorKind::AuthenticationFailed => AUTHENTICATION,
        _ => ERROR_REPLIES,
    }
}

/// Whether `error` is Redis refusing writes (out of memory, a read-only replica): a call that
/// needs no write can still be answered read-only.
pub fn refuses_writes(error: &redis::RedisError) -> bool {
    matches!(condition_of_reply(error), OUT_OF_MEMORY | READ_ONLY)
}

impl Condition {
    pub fn new() -> Condition {
        Condition {
            state: AtomicU8::new(NORMAL),
            started: Instant::now(),
            last_failure_ms: AtomicU64::new(0),
        }
    }

    /// Notes what a call found, logging a change of condition.
    pub fn note<T>(&self, result: &Result<T, StoreError>) {
        let error = match result {
            Ok(_) => {
                let state = self.state.load(Ordering::Relaxed);
                // The common case, read and nothing written: no clock, no shared write.
                if state == NORMAL {
                    return;
                }
                // Error replies come and go with what a call writes: only a quiet spell ends
                // them. A connection that answers again is back at once.
                let replies = !matches!(state, TIMING_OUT | UNREACHABLE);
                let now_ms = self.now_ms();
                let quiet = now_ms.saturating_sub(self.last_failure_ms.load(Ordering::Relaxed));
                let settled = !replies || quiet >= QUIET_SPELL.as_millis() as u64;
                if settled && self.state.swap(NORMAL, Ordering::Relaxed) != NORMAL {
                    tracing::info!("{}", CONDITIONS[usize::from(NORMAL)].says);
                }
                return;
            }
            Err(error) => error,
        };
        self.note_failure(condition_of(error), error, self.now_ms());
    }

    /// Notes a write Redis refused, whether or not the call was then answered read-only.
    pub fn note_refusal(&self, error: &redis::RedisError) {
        self.note_failure(condition_of_reply(error), error, self.now_ms());
    }

    /// Milliseconds since the condition was first noted.
    fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn note_failure(&self, state: u8, error: &dyn std::fmt::Display, now_ms: u64) {
        self.last_failure_ms.store(now_ms, Ordering::Relaxed);
        if self.state.swap(state, Ordering::Relaxed) != state {
            tracing::warn!(%error, "{}", CONDITIONS[usize::from(state)].says);
        }
    }

    /// Writes `sluice_redis_condition{condition}`: 1 for the current one, 0 for the others.
    pub fn report(&self, series: &Series) {
        let current = usize::from(self.state.load(Ordering::Relaxed));
        for (index, named) in CONDITIONS.iter().enumerate() {
            let labels = vec![Label::new("condition", named.label)];
            let value = if index == current { 1.0 } else { 0.0 };
            series.gauge("sluice_redis_condition", labels).set(value);
        }
    }
}
