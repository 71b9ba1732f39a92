//! The history of configuration loads that Limitador's `/status` reports: when the server
//! started, when the last good configuration was applied, how many have been, and how many
//! loads have failed since.

use std::sync::atomic::{AtomicU64, Ordering};

/// Loads so far, updated at each (lock-free: read by `/status` at any time).
#[derive(Debug)]
pub struct ConfigLoads {
    started_us: u64,
    applied_us: AtomicU64,
    version: AtomicU64,
    failed_since: AtomicU64,
}

/// What `ConfigLoads` holds at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadsNow {
    /// Microseconds since the epoch.
    pub started_us: u64,
    pub applied_us: u64,
    /// Good configurations applied.
    pub version: u64,
    /// Loads refused since the last good one.
    pub failed_since: u64,
}

impl ConfigLoads {
    pub fn new() -> ConfigLoads {
        let now = now_us();
        ConfigLoads {
            started_us: now,
            applied_us: AtomicU64::new(now),
            version: AtomicU64::new(0),
            failed_since: AtomicU64::new(0),
        }
    }

    /// A load, applied when `success`.
    pub fn note(&self, success: bool) {
        if success {
            self.applied_us.store(now_us(), Ordering::Relaxed);
            self.version.fetch_add(1, Ordering::Relaxed);
            self.failed_since.store(0, Ordering::Relaxed);
        } else {
            self.failed_since.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn now(&self) -> LoadsNow {
        LoadsNow {
            started_us: self.started_us,
            applied_us: self.applied_us.load(Ordering::Relaxed),
            version: self.version.load(Ordering::Relaxed),
            failed_since: self.failed_since.load(Ordering::Relaxed),
        }
    }
}

impl Default for ConfigLoads {
    fn default() -> Self {
        ConfigLoads::new()
    }
}

fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_counts_until_the_next_good_load() {
        let loads = ConfigLoads::new();
        loads.note(true);
        loads.note(false);
        loads.note(false);
        assert_eq!((loads.now().version, loads.now().failed_since), (1, 2));
        loads.note(true);
        assert_eq!((loads.now().version, loads.now().failed_since), (2, 0));
        assert!(loads.now().applied_us >= loads.now().started_us);
    }
}
