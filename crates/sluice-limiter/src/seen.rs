//! The counters of Limitador's limits this replica has asked the store about, so that
//! `GET /counters/{namespace}` can list them (docs/kuadrant.md): each by its store key, with
//! its namespace, its limit's identity and its variables' values. Bounded: a counter whose
//! window must have ended (one period after it was last seen) is dropped when room is needed
//! (at most one scan a second, so that a flood of new values costs a scan a second, not one
//! each), and past `capacity` live counters a new one is not listed.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use sluice_config::cel_limits::CelLimit;

/// How many counters are listed at most, across namespaces.
pub const DEFAULT_CAPACITY: usize = 100_000;

/// One counter as it was seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeenCounter {
    /// Its store key (the descriptor key its limit counts under).
    pub key: String,
    /// Its limit's identity among the namespace's (`CelLimit::identity`).
    pub identity: String,
    /// Its variables' values, in the order of the limit's variables.
    pub values: Vec<String>,
}

/// What is kept of one counter.
#[derive(Debug)]
struct Seen {
    namespace: String,
    identity: String,
    values: Vec<String>,
    /// When it was last asked about, and its limit's period (µs): it has ended by their sum.
    last_us: u64,
    period_us: u64,
}

impl Seen {
    fn ended_by(&self, now_us: u64) -> bool {
        self.last_us.saturating_add(self.period_us) <= now_us
    }
}

/// The counters seen, by store key, and when ended ones were last dropped to make room.
#[derive(Debug)]
pub struct SeenCounters {
    by_key: Mutex<(HashMap<String, Seen>, u64)>,
    capacity: usize,
}

/// The least time between two scans for ended counters when full.
const SWEEP_EVERY_US: u64 = 1_000_000;

impl Default for SeenCounters {
    fn default() -> Self {
        SeenCounters::with_capacity(DEFAULT_CAPACITY)
    }
}

impl SeenCounters {
    /// At most `capacity` counters listed.
    pub fn with_capacity(capacity: usize) -> SeenCounters {
        SeenCounters {
            by_key: Mutex::default(),
            capacity,
        }
    }

    fn locked(&self) -> MutexGuard<'_, (HashMap<String, Seen>, u64)> {
        // A panic while holding the map leaves it whole (each change is one insert or retain).
        self.by_key
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Notes that `limit`'s counter under `key`, of `values`, in `namespace`, was asked about
    /// at `now_us`.
    pub fn note(
        &self,
        key: &str,
        namespace: &str,
        limit: &CelLimit,
        values: &[String],
        now_us: u64,
    ) {
        let mut locked = self.locked();
        let (by_key, swept_at_us) = &mut *locked;
        if let Some(seen) = by_key.get_mut(key) {
            seen.last_us = seen.last_us.max(now_us);
            return;
        }
        if by_key.len() >= self.capacity {
            if now_us < swept_at_us.saturating_add(SWEEP_EVERY_US) {
                return;
            }
            *swept_at_us = now_us;
            by_key.retain(|_, seen| !seen.ended_by(now_us));
            if by_key.len() >= self.capacity {
                return;
            }
        }
        by_key.insert(
            key.to_string(),
            Seen {
                namespace: namespace.to_string(),
                identity: limit.identity.clone(),
                values: values.to_vec(),
                last_us: now_us,
                period_us: limit.limit.period_us(),
            },
        );
    }

    /// The counters of `namespace` that may still hold a count at `now_us`, by key.
    pub fn of_namespace(&self, namespace: &str, now_us: u64) -> Vec<SeenCounter> {
        let mut locked = self.locked();
        let by_key = &mut locked.0;
        by_key.retain(|_, seen| !seen.ended_by(now_us));
        let mut counters: Vec<SeenCounter> = by_key
            .iter()
            .filter(|(_, seen)| seen.namespace == namespace)
            .map(|(key, seen)| SeenCounter {
                key: key.clone(),
                identity: seen.identity.clone(),
                values: seen.values.clone(),
            })
            .collect();
        counters.sort_by(|a, b| a.key.cmp(&b.key));
        counters
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn limits() -> Vec<CelLimit> {
        let text = "\
- {namespace: a, max_value: 5, seconds: 10, variables: [\"descriptors[0]['u']\"]}
- {namespace: b, max_value: 5, seconds: 10}
";
        sluice_config::cel_limits::parse(Path::new("l.yaml"), text).expect("limits")
    }

    const S: u64 = 1_000_000;

    #[test]
    fn lists_a_namespaces_counters_until_their_window_must_have_ended() {
        let limits = limits();
        let seen = SeenCounters::default();
        seen.note("k1", "a", &limits[0], &["u1".into()], 0);
        seen.note("k2", "b", &limits[1], &[], 0);
        seen.note("k1", "a", &limits[0], &["u1".into()], 5 * S);
        let listed = seen.of_namespace("a", 14 * S);
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].values, ["u1"]);
        assert_eq!(listed[0].identity, limits[0].identity);
        assert!(
            seen.of_namespace("b", 10 * S).is_empty(),
            "ended 10 s after it was last seen"
        );
        assert!(seen.of_namespace("a", 15 * S).is_empty());
    }

    #[test]
    fn past_its_capacity_drops_ended_counters_and_then_lists_no_more() {
        let limits = limits();
        let seen = SeenCounters::with_capacity(2);
        seen.note("k1", "b", &limits[1], &[], 0);
        seen.note("k2", "b", &limits[1], &[], 0);
        seen.note("k3", "b", &limits[1], &[], S);
        assert_eq!(seen.of_namespace("b", S).len(), 2, "full: k3 is not listed");
        seen.note("k4", "b", &limits[1], &[], 10 * S);
        let keys: Vec<String> = seen
            .of_namespace("b", 10 * S)
            .into_iter()
            .map(|c| c.key)
            .collect();
        assert_eq!(keys, ["k4"], "the ended ones made room");
    }

    #[test]
    fn a_full_index_scans_for_room_at_most_once_a_second() {
        let limits = limits();
        let seen = SeenCounters::with_capacity(1);
        seen.note("k1", "b", &limits[1], &[], 0);
        // Full, and k1 lives to 10 s: a scan finds no room.
        seen.note("k2", "b", &limits[1], &[], 9_500_000);
        // k1 has ended, but the last scan was under a second ago: no scan, k3 not listed.
        seen.note("k3", "b", &limits[1], &[], 10_200_000);
        seen.note("k4", "b", &limits[1], &[], 10_600_000);
        let keys: Vec<String> = seen
            .of_namespace("b", 10_600_000)
            .into_iter()
            .map(|c| c.key)
            .collect();
        assert_eq!(keys, ["k4"], "the scan a second after the last made room");
    }
}
