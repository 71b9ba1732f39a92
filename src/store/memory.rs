//! The embedded store: state in a sharded map in this process. No lock is held across an
//! `.await` (there is none inside `check`), expired state is swept by `sweep_expired`, and the
//! number of keys is bounded: at the bound, storing a new key first evicts one existing key of
//! the same shard (its count restarts), so a flood of new keys cannot exhaust memory and new
//! keys are never refused. Evictions are counted.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::algorithm::{self, State};
use crate::limit::{Decision, Hit};
use crate::store::{Clock, Store, StoreError, StoreStats};

/// The in-memory store.
pub struct MemoryStore {
    shards: Box<[Mutex<HashMap<String, Entry>>]>,
    hasher: RandomState,
    keys_per_shard: usize,
    clock: Arc<dyn Clock>,
    evictions: AtomicU64,
}

struct Entry {
    state: State,
    expires_at_us: u64,
}

impl MemoryStore {
    /// A store holding at most about `max_keys` keys, reading time from `clock`.
    pub fn new(max_keys: usize, clock: Arc<dyn Clock>) -> MemoryStore {
        let shard_count = (std::thread::available_parallelism().map_or(4, |n| n.get()) * 8)
            .next_power_of_two()
            .min(max_keys.max(1).next_power_of_two());
        let shards = (0..shard_count).map(|_| Mutex::default()).collect();
        MemoryStore {
            shards,
            hasher: RandomState::new(),
            keys_per_shard: max_keys.div_ceil(shard_count).max(1),
            clock,
            evictions: AtomicU64::new(0),
        }
    }

    /// Drops every state whose time has passed; returns how many.
    pub fn sweep_expired(&self) -> usize {
        let now_us = self.clock.now_us();
        let mut removed = 0;
        for index in 0..self.shards.len() {
            let mut shard = self.lock(index);
            let before = shard.len();
            shard.retain(|_, entry| entry.expires_at_us > now_us);
            removed += before - shard.len();
        }
        removed
    }

    /// How many keys are held.
    pub fn key_count(&self) -> usize {
        (0..self.shards.len()).map(|i| self.lock(i).len()).sum()
    }

    /// How many live keys were evicted to stay within the bound.
    pub fn evictions(&self) -> u64 {
        self.evictions.load(Ordering::Relaxed)
    }

    fn lock(&self, index: usize) -> MutexGuard<'_, HashMap<String, Entry>> {
        // A panic while holding a shard cannot leave a half-written entry (entries are
        // replaced whole), so a poisoned shard is still consistent.
        self.shards[index]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn check_one(&self, hit: &Hit, now_us: u64) -> Decision {
        let index = (self.hasher.hash_one(&hit.key) as usize) & (self.shards.len() - 1);
        let mut shard = self.lock(index);
        let state = shard
            .get(&hit.key)
            .filter(|entry| entry.expires_at_us > now_us)
            .map(|entry| &entry.state);
        let outcome = algorithm::check(state, &hit.limit, hit.cost, now_us);
        if let Some((state, expires_at_us)) = outcome.new_state {
            let entry = Entry {
                state,
                expires_at_us,
            };
            if let Some(slot) = shard.get_mut(&hit.key) {
                *slot = entry;
            } else {
                self.make_room(&mut shard, now_us);
                shard.insert(hit.key.clone(), entry);
            }
        }
        outcome.decision
    }

    /// Keeps a shard under its bound before an insert: expired entries go first, then any.
    fn make_room(&self, shard: &mut HashMap<String, Entry>, now_us: u64) {
        if shard.len() < self.keys_per_shard {
            return;
        }
        shard.retain(|_, entry| entry.expires_at_us > now_us);
        if shard.len() < self.keys_per_shard {
            return;
        }
        let victim = shard.keys().next().cloned();
        if let Some(victim) = victim {
            shard.remove(&victim);
            self.evictions.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Store for MemoryStore {
    async fn check(&self, hits: &[Hit]) -> Result<Vec<Decision>, StoreError> {
        let now_us = self.clock.now_us();
        Ok(hits.iter().map(|hit| self.check_one(hit, now_us)).collect())
    }

    async fn healthy(&self) -> bool {
        true
    }

    fn stats(&self) -> StoreStats {
        StoreStats {
            keys: Some(self.key_count() as u64),
            evictions: Some(self.evictions()),
            ..StoreStats::default()
        }
    }

    /// State is keyed by descriptor and shaped by algorithm: a changed limit reads it as such.
    fn config_changed(&self) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limit::{Limit, Unit};
    use crate::store::ManualClock;

    fn hit(key: &str, limit: u32, cost: u64) -> Hit {
        Hit {
            key: key.to_string(),
            limit: Limit::fixed_window(limit, Unit::Second),
            cost,
        }
    }

    fn store(max_keys: usize) -> (MemoryStore, Arc<ManualClock>) {
        let clock = Arc::new(ManualClock::at(5_000_000));
        (MemoryStore::new(max_keys, clock.clone()), clock)
    }

    #[tokio::test]
    async fn counts_per_key_and_denials_do_not_consume() {
        let (store, _) = store(100);
        let hits = [
            hit("a", 2, 1),
            hit("a", 2, 1),
            hit("a", 2, 1),
            hit("b", 2, 1),
        ];
        let admitted: Vec<bool> = store
            .check(&hits)
            .await
            .unwrap()
            .iter()
            .map(|d| d.admitted)
            .collect();
        assert_eq!(admitted, [true, true, false, true]);
        assert_eq!(store.key_count(), 2);
    }

    #[tokio::test]
    async fn sweep_drops_expired_windows() {
        let (store, clock) = store(100);
        store.check(&[hit("a", 5, 1)]).await.unwrap();
        assert_eq!(store.sweep_expired(), 0);
        clock.set(6_000_000);
        assert_eq!(store.sweep_expired(), 1);
        assert_eq!(store.key_count(), 0);
    }

    #[tokio::test]
    async fn key_count_stays_within_the_bound_under_a_flood() {
        let (store, _) = store(64);
        for i in 0..10_000 {
            store.check(&[hit(&format!("k{i}"), 5, 1)]).await.unwrap();
        }
        assert!(store.key_count() <= 64, "{} keys", store.key_count());
        assert!(store.evictions() >= 10_000 - 64);
    }

    #[tokio::test]
    async fn cost_zero_stores_nothing() {
        let (store, _) = store(10);
        let d = store.check(&[hit("a", 3, 0)]).await.unwrap();
        assert_eq!(d[0].remaining, 3);
        assert_eq!(store.key_count(), 0);
    }
}
