//! How Redis has been answering, as the calls find it: normally, not in time, not at all, or
//! with error replies (a Redis out of memory refuses writes). Each change is logged once; the
//! way back from error replies only after a quiet spell, so that a Redis failing every other
//! call is one line, not one per call.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::time::{Duration, Instant};

use crate::store::StoreError;

/// How long without a failure before Redis counts as answering normally again.
const QUIET_SPELL: Duration = Duration::from_secs(5);

const NORMAL: u8 = 0;
const TIMING_OUT: u8 = 1;
const UNREACHABLE: u8 = 2;
const ERROR_REPLIES: u8 = 3;

/// The condition of one store's Redis.
pub struct Condition {
    state: AtomicU8,
    started: Instant,
    /// When the last call failed, in milliseconds since `started`.
    last_failure_ms: AtomicU64,
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
        let now_ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let error = match result {
            Ok(_) => {
                let state = self.state.load(Ordering::Relaxed);
                // Error replies come and go with what a call writes: only a quiet spell ends
                // them. A connection that answers again is back at once.
                let quiet = now_ms.saturating_sub(self.last_failure_ms.load(Ordering::Relaxed));
                let settled = state != ERROR_REPLIES || quiet >= QUIET_SPELL.as_millis() as u64;
                if state != NORMAL
                    && settled
                    && self.state.swap(NORMAL, Ordering::Relaxed) != NORMAL
                {
                    tracing::info!("Redis is reachable again, answering normally");
                }
                return;
            }
            Err(error) => error,
        };
        self.last_failure_ms.store(now_ms, Ordering::Relaxed);
        let state = match error {
            StoreError::Timeout { .. } => TIMING_OUT,
            StoreError::Unreachable { .. } => UNREACHABLE,
            StoreError::Protocol { .. } | StoreError::Full { .. } => ERROR_REPLIES,
        };
        if self.state.swap(state, Ordering::Relaxed) == state {
            return;
        }
        match state {
            TIMING_OUT => {
                tracing::warn!(%error, "Redis does not answer in time: calls fail until it does")
            }
            UNREACHABLE => {
                tracing::warn!(%error, "Redis is unreachable: calls fail until it is back")
            }
            _ => tracing::warn!(%error, "Redis answers with errors: calls fail while it does"),
        }
    }
}
