//! The overrides in force, by descriptor id, for the request path: a lookup hashes the
//! request's entries (no id is built) and takes a shard's read lock for one probe, and a
//! change (a put, a delete, a replica catching up) takes one shard's write lock, so a million
//! overrides load and change without stalling a call. Ids are held as a 128-bit keyed hash
//! (SipHash-1-3 with a secret of the process), not as strings: two descriptors share
//! overrides only if their hashes collide, for a million of them a chance of about 1 in 10^27
//! (the memory store names its keys alike).

use std::collections::HashMap;
use std::hash::Hasher;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use siphasher::sip128::{Hasher128, SipHasher13};
use smallvec::SmallVec;

use super::id::write_id;

/// A descriptor id's keyed 128-bit hash.
use sluice_core::keyed_id::{KeyedId as IdHash, KeyedMap};
use sluice_core::limit::Limit;

/// How many shards the index is split into.
const SHARDS: usize = 64;

/// One override, compiled: the limit (`None`: unlimited) that replaces the rule's limit
/// `name` (or all of them), shadow mode if it sets it, and when it expires (0: never).
#[derive(Debug, Clone, PartialEq)]
pub struct OverrideLimit {
    pub name: Option<String>,
    pub limit: Option<Limit>,
    pub shadow_mode: Option<bool>,
    pub expires_at_us: u64,
}

impl OverrideLimit {
    /// Whether it applies at `now_us`.
    pub fn in_force(&self, now_us: u64) -> bool {
        self.expires_at_us == 0 || now_us < self.expires_at_us
    }
}

/// The overrides of one descriptor: one for every limit of its rule, and one per limit
/// name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DescriptorOverrides {
    pub every: Option<OverrideLimit>,
    pub named: SmallVec<[OverrideLimit; 1]>,
}

impl DescriptorOverrides {
    /// The override of every limit, when in force at `now_us`.
    pub fn every_limit(&self, now_us: u64) -> Option<&OverrideLimit> {
        self.every.as_ref().filter(|o| o.in_force(now_us))
    }

    /// The override of the limit `name`, when in force at `now_us`.
    pub fn of_name(&self, name: &str, now_us: u64) -> Option<&OverrideLimit> {
        self.named
            .iter()
            .find(|o| o.name.as_deref() == Some(name) && o.in_force(now_us))
    }

    fn len(&self) -> usize {
        usize::from(self.every.is_some()) + self.named.len()
    }
}

type Shard = RwLock<KeyedMap<Arc<DescriptorOverrides>>>;

/// Every override in force, by descriptor id.
pub struct OverrideIndex {
    shards: Box<[Shard]>,
    /// The hash's secret.
    keys: (u64, u64),
    records: AtomicUsize,
}

impl Default for OverrideIndex {
    fn default() -> Self {
        let random = std::collections::hash_map::RandomState::new();
        let key = |n: u64| std::hash::BuildHasher::hash_one(&random, n);
        OverrideIndex {
            shards: (0..SHARDS).map(|_| Shard::default()).collect(),
            keys: (key(1), key(2)),
            records: AtomicUsize::new(0),
        }
    }
}

impl std::fmt::Debug for OverrideIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "OverrideIndex({} overrides)", self.len())
    }
}

impl OverrideIndex {
    /// How many overrides it holds (expired ones until they are deleted included).
    pub fn len(&self) -> usize {
        self.records.load(Ordering::Relaxed)
    }

    /// Whether it holds none: the request path then looks nothing up.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The hash of the id whose bytes `write` gives.
    fn hash_with(&self, write: impl FnOnce(&mut SipHasher13)) -> IdHash {
        let mut hasher = SipHasher13::new_with_keys(self.keys.0, self.keys.1);
        write(&mut hasher);
        let hash = hasher.finish128();
        IdHash(hash.h1, hash.h2)
    }

    fn hash_of(&self, descriptor_id: &str) -> IdHash {
        self.hash_with(|hasher| hasher.write(descriptor_id.as_bytes()))
    }

    fn shard(&self, id: IdHash) -> &Shard {
        &self.shards[(id.1 % SHARDS as u64) as usize]
    }

    fn find(&self, id: IdHash) -> Option<Arc<DescriptorOverrides>> {
        let shard = self
            .shard(id)
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        shard.get(&id).cloned()
    }

    /// The overrides of the descriptor `descriptor_id`.
    pub fn get(&self, descriptor_id: &str) -> Option<Arc<DescriptorOverrides>> {
        self.find(self.hash_of(descriptor_id))
    }

    /// The overrides of the descriptor of `entries` in `domain` (as `get` of its id, without
    /// building it).
    pub fn get_entries<'a>(
        &self,
        domain: &str,
        entries: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Option<Arc<DescriptorOverrides>> {
        let id = self.hash_with(|hasher| write_id(domain, entries, |bytes| hasher.write(bytes)));
        self.find(id)
    }

    /// Puts `limit` for `descriptor_id`, in place of the one of the same name.
    pub fn insert(&self, descriptor_id: &str, limit: OverrideLimit) {
        self.change(descriptor_id, |overrides| {
            match &limit.name {
                None => overrides.every = Some(limit),
                Some(name) => {
                    overrides.named.retain(|o| o.name.as_deref() != Some(name));
                    overrides.named.push(limit);
                }
            };
        });
    }

    /// Removes the override of `descriptor_id` named `name` (of every limit: `None`);
    /// whether there was one.
    pub fn remove(&self, descriptor_id: &str, name: Option<&str>) -> bool {
        let mut removed = false;
        self.change(descriptor_id, |overrides| match name {
            None => removed = overrides.every.take().is_some(),
            Some(name) => {
                let before = overrides.named.len();
                overrides.named.retain(|o| o.name.as_deref() != Some(name));
                removed = overrides.named.len() < before;
            }
        });
        removed
    }

    /// Applies `edit` to the overrides of `descriptor_id` under its shard's lock, keeping
    /// the count.
    fn change(&self, descriptor_id: &str, edit: impl FnOnce(&mut DescriptorOverrides)) {
        let id = self.hash_of(descriptor_id);
        let mut shard = self
            .shard(id)
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut overrides = shard
            .get(&id)
            .map(|o| DescriptorOverrides::clone(o))
            .unwrap_or_default();
        let before = overrides.len();
        edit(&mut overrides);
        let after = overrides.len();
        if after == 0 {
            shard.remove(&id);
        } else {
            shard.insert(id, Arc::new(overrides));
        }
        if after > before {
            self.records.fetch_add(after - before, Ordering::Relaxed);
        } else {
            self.records.fetch_sub(before - after, Ordering::Relaxed);
        }
    }

    /// Replaces every override with `all` (descriptor id, override): each shard is swapped
    /// whole under its lock, so a lookup sees the old set or the new one, never none.
    pub fn replace_all(&self, all: impl IntoIterator<Item = (String, OverrideLimit)>) {
        let mut fresh: Vec<HashMap<IdHash, DescriptorOverrides>> =
            (0..self.shards.len()).map(|_| HashMap::new()).collect();
        for (descriptor_id, limit) in all {
            let id = self.hash_of(&descriptor_id);
            let overrides = fresh[(id.1 % SHARDS as u64) as usize]
                .entry(id)
                .or_default();
            match &limit.name {
                None => overrides.every = Some(limit),
                Some(name) => {
                    overrides.named.retain(|o| o.name.as_deref() != Some(name));
                    overrides.named.push(limit);
                }
            }
        }
        for (shard, map) in self.shards.iter().zip(fresh) {
            let held: usize = map.values().map(DescriptorOverrides::len).sum();
            let map: KeyedMap<Arc<DescriptorOverrides>> =
                map.into_iter().map(|(id, o)| (id, Arc::new(o))).collect();
            let mut shard = shard
                .write()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            let before: usize = shard.values().map(|o| o.len()).sum();
            *shard = map;
            drop(shard);
            self.records.fetch_add(held, Ordering::Relaxed);
            self.records.fetch_sub(before, Ordering::Relaxed);
        }
    }

    /// Removes every override.
    pub fn clear(&self) {
        for shard in self.shards.iter() {
            let mut shard = shard
                .write()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            let held: usize = shard.values().map(|o| o.len()).sum();
            shard.clear();
            self.records.fetch_sub(held, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::limit::Unit;

    fn limit(name: Option<&str>, requests: u32) -> OverrideLimit {
        OverrideLimit {
            name: name.map(str::to_string),
            limit: Some(Limit::fixed_window(requests, Unit::Minute)),
            shadow_mode: None,
            expires_at_us: 0,
        }
    }

    #[test]
    fn a_put_replaces_the_override_of_the_same_name_and_counts_once() {
        let index = OverrideIndex::default();
        index.insert("d", limit(None, 1));
        index.insert("d", limit(None, 2));
        index.insert("d", limit(Some("a"), 3));
        assert_eq!(index.len(), 2);
        let found = index.get("d").unwrap();
        assert_eq!(
            found
                .every_limit(0)
                .unwrap()
                .limit
                .as_ref()
                .unwrap()
                .requests_per_unit,
            2
        );
        assert_eq!(
            found
                .of_name("a", 0)
                .unwrap()
                .limit
                .as_ref()
                .unwrap()
                .requests_per_unit,
            3
        );
        assert!(index.remove("d", Some("a")));
        assert!(!index.remove("d", Some("a")));
        assert!(index.remove("d", None));
        assert!(index.get("d").is_none());
        assert!(index.is_empty());
    }

    #[test]
    fn a_lookup_by_entries_finds_what_a_put_by_id_put() {
        let index = OverrideIndex::default();
        let id = crate::overrides::descriptor_id("rl", [("k", "v"), ("x", "y")]);
        index.insert(&id, limit(None, 1));
        assert!(index.get_entries("rl", [("k", "v"), ("x", "y")]).is_some());
        assert!(index.get_entries("rl", [("k", "v")]).is_none());
        assert!(index.get_entries("rl", [("kv", ""), ("x", "y")]).is_none());
    }

    #[test]
    fn a_reload_replaces_the_set_and_its_count() {
        let index = OverrideIndex::default();
        index.insert("a", limit(None, 1));
        index.insert("b", limit(None, 1));
        index.replace_all([
            ("b".to_string(), limit(None, 2)),
            ("c".to_string(), limit(Some("x"), 3)),
        ]);
        assert!(index.get("a").is_none());
        assert_eq!(
            index
                .get("b")
                .unwrap()
                .every_limit(0)
                .unwrap()
                .limit
                .as_ref()
                .unwrap()
                .requests_per_unit,
            2
        );
        assert_eq!(index.len(), 2);
    }

    #[test]
    fn an_expired_override_is_not_in_force() {
        let mut expiring = limit(None, 1);
        expiring.expires_at_us = 100;
        let index = OverrideIndex::default();
        index.insert("d", expiring);
        let found = index.get("d").unwrap();
        assert!(found.every_limit(99).is_some());
        assert!(found.every_limit(100).is_none());
    }
}
