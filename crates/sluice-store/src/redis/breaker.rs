//! The circuit breaker between sluice and Redis. After `failures` calls in a row fail (an
//! error or a timeout), the circuit opens: a call fails at once with `StoreError::CircuitOpen`
//! and waits on nothing, and the failure layer in front of the store answers it
//! (`crate::on_failure`). While open, a probe (a
//! PING of every backend, within the command timeout) runs every `probe_interval`; the first
//! that is answered closes the circuit. Each transition is logged once and counted.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use metrics::Label;

use super::connect::Connection;
use crate::series::Series;
use crate::StoreError;

/// When the circuit opens, and how often an open one is probed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerSettings {
    /// Calls failed in a row that open the circuit; 0: it never opens.
    pub failures: u32,
    /// How often an open circuit probes Redis.
    pub probe_interval: Duration,
}

impl Default for BreakerSettings {
    /// Off: every call goes to Redis, as before the breaker.
    fn default() -> Self {
        BreakerSettings {
            failures: 0,
            probe_interval: Duration::from_millis(200),
        }
    }
}

/// The breaker of one store; its state is shared with the probe while it runs.
pub struct Breaker {
    settings: BreakerSettings,
    state: Arc<State>,
}

#[derive(Default)]
struct State {
    failed_in_a_row: AtomicU32,
    open: AtomicBool,
    opened: AtomicU64,
    closed: AtomicU64,
}

impl State {
    /// Closes the circuit, once.
    fn close(&self) {
        if self.open.swap(false, Ordering::SeqCst) {
            self.failed_in_a_row.store(0, Ordering::SeqCst);
            self.closed.fetch_add(1, Ordering::Relaxed);
            tracing::info!("store circuit closed: Redis answers again, calls go to it");
        }
    }
}

impl Breaker {
    pub fn new(settings: BreakerSettings) -> Breaker {
        Breaker {
            settings,
            state: Arc::default(),
        }
    }

    /// Whether the circuit is open: calls fail at once.
    pub fn is_open(&self) -> bool {
        self.state.open.load(Ordering::Relaxed)
    }

    /// `Err(CircuitOpen)` while the circuit is open.
    pub fn check(&self) -> Result<(), StoreError> {
        if self.is_open() {
            Err(StoreError::CircuitOpen {
                store: super::STORE,
            })
        } else {
            Ok(())
        }
    }

    /// Counts a call's result; `true` when this failure opened the circuit (the caller then
    /// starts the probe).
    pub fn note<T>(&self, result: &Result<T, StoreError>) -> bool {
        match result {
            Ok(_) => {
                // Written only when it changes: every call on every thread reads it, and a
                // write each call would move its cache line between cores.
                if self.state.failed_in_a_row.load(Ordering::Relaxed) != 0 {
                    self.state.failed_in_a_row.store(0, Ordering::Relaxed);
                }
                false
            }
            Err(StoreError::Full { .. } | StoreError::CircuitOpen { .. }) => false,
            Err(error) if self.settings.failures > 0 => {
                let failed = self.state.failed_in_a_row.fetch_add(1, Ordering::SeqCst) + 1;
                if failed < self.settings.failures || self.state.open.swap(true, Ordering::SeqCst) {
                    return false;
                }
                self.state.opened.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    %error,
                    failed_in_a_row = failed,
                    "store circuit open: calls no longer wait on Redis, each limit gets its answer for a failed store until a probe is answered"
                );
                true
            }
            Err(_) => false,
        }
    }

    /// Probes `connections` every `probe_interval` (each within `timeout`) until all answer,
    /// then closes the circuit.
    pub fn probe(&self, connections: Vec<Connection>, timeout: Duration) {
        let state = self.state.clone();
        let interval = self.settings.probe_interval;
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            loop {
                tokio::time::sleep(interval).await;
                let pings = join_all(connections.iter().map(super::ping));
                let answered = tokio::time::timeout(timeout, pings)
                    .await
                    .is_ok_and(|answers| answers.into_iter().all(|ok| ok));
                if answered {
                    state.close();
                    return;
                }
            }
        });
    }

    /// The circuit's state and transitions.
    pub fn report(&self, series: &Series) {
        if self.settings.failures == 0 {
            return;
        }
        series.level("sluice_store_circuit_open", u64::from(self.is_open()));
        for (to, count) in [("open", &self.state.opened), ("closed", &self.state.closed)] {
            let labels = vec![Label::new("to", to)];
            series
                .counter("sluice_store_circuit_transitions_total", labels)
                .absolute(count.load(Ordering::Relaxed));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure() -> Result<(), StoreError> {
        Err(StoreError::Timeout {
            store: "Redis",
            after: Duration::from_millis(1),
        })
    }

    #[test]
    fn opens_after_the_failures_in_a_row_and_a_success_starts_the_count_again() {
        let breaker = Breaker::new(BreakerSettings {
            failures: 3,
            ..BreakerSettings::default()
        });
        assert!(!breaker.note(&failure()));
        assert!(!breaker.note(&failure()));
        assert!(!breaker.note(&Ok(())));
        assert!(!breaker.note(&failure()));
        assert!(!breaker.note(&failure()));
        assert!(breaker.check().is_ok());
        assert!(breaker.note(&failure()), "the third in a row opens it");
        assert!(!breaker.note(&failure()), "it opens once");
        assert!(matches!(
            breaker.check(),
            Err(StoreError::CircuitOpen { .. })
        ));
        breaker.state.close();
        assert!(breaker.check().is_ok());
        assert_eq!(breaker.state.opened.load(Ordering::Relaxed), 1);
        assert_eq!(breaker.state.closed.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_breaker_of_no_failures_never_opens() {
        let breaker = Breaker::new(BreakerSettings::default());
        for _ in 0..100 {
            assert!(!breaker.note(&failure()));
        }
        assert!(breaker.check().is_ok());
    }
}
