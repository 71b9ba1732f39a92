//! The admin operations on the memory store: a limit's state cleared or credited under its
//! shard's lock, and the override records, kept in this process (and in the snapshot) in id
//! order. One process is every replica there is, so the feed of changes is always empty.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use super::{footprint, live, MemoryStore};
use crate::admin::{AdminStore, Feed, Loaded, Page, Reading};
use crate::StoreError;
use sluice_core::engine::Of;
use sluice_core::limit::{Decision, Hit};

/// The override records, by id; shared with the blocking task that journals a change.
#[derive(Default, Clone)]
pub struct Records(Arc<Mutex<BTreeMap<String, String>>>);

impl Records {
    pub(super) fn lock(&self) -> MutexGuard<'_, BTreeMap<String, String>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Puts the record `id` (`None`: deletes it); its previous JSON.
    pub(super) fn apply(&self, id: &str, json: Option<&str>) -> Option<String> {
        let mut records = self.lock();
        match json {
            Some(json) => records.insert(id.to_string(), json.to_string()),
            None => records.remove(id),
        }
    }

    /// The record `id`.
    pub(super) fn get(&self, id: &str) -> Option<String> {
        self.lock().get(id).cloned()
    }
}

impl MemoryStore {
    /// What `hit`'s modifiers set aside of its limit now (`ModifierPolicy::held`).
    pub fn held_of(&self, hit: &Hit) -> u64 {
        let now_us = self.clock.now_us();
        hit.limit
            .modifiers
            .layers()
            .into_iter()
            .map(|(row, layer)| {
                let kept = |part| self.kept_of(hit, Of::Kept { row, part });
                layer.held(&kept, now_us)
            })
            .sum()
    }

    /// Removes `hit`'s limit state as of `now_us` (and with `records` the parts its
    /// modifiers keep that a reset clears); how many there were.
    fn clear_hit(&self, hit: &Hit, records: bool, now_us: u64) -> u64 {
        let mut ids = vec![self.locate(hit, now_us)];
        if records {
            for part in hit.limit.modifiers.reset_parts() {
                ids.push(self.locate_kept(hit, part.name, None));
            }
        }
        let mut removed = 0;
        for (id, index) in ids {
            let mut shard = self.lock(index);
            if let Some(entry) = shard.entries.remove(&id) {
                shard.state_bytes -= footprint::heap_bytes(&entry.state);
                removed += u64::from(entry.expires_at_us > now_us);
            }
        }
        removed
    }

    /// Puts (`Some`) or deletes the record `id`: with a journal, applied and synced to disk
    /// on the blocking pool before this returns (a crash after the answer loses nothing).
    async fn change_record(
        &self,
        id: &str,
        json: Option<&str>,
    ) -> Result<Option<String>, StoreError> {
        let Some(journal) = self.journal.clone() else {
            return Ok(self.records.apply(id, json));
        };
        let records = self.records.clone();
        let (id, json) = (id.to_string(), json.map(str::to_string));
        tokio::task::spawn_blocking(move || journal.record(&records, &id, json.as_deref()))
            .await
            .map_err(|error| StoreError::Disk {
                store: "the memory store's journal",
                source: error.into(),
            })?
    }
}

impl AdminStore for MemoryStore {
    async fn reset(&self, hits: &[Hit], records: bool) -> Result<u64, StoreError> {
        let now_us = self.clock.now_us();
        Ok(hits
            .iter()
            .map(|hit| self.clear_hit(hit, records, now_us))
            .sum())
    }

    async fn credit(&self, hit: &Hit) -> Result<Decision, StoreError> {
        let now_us = self.clock.now_us();
        let holds_window = hit.limit.key_holds_window();
        let (id, index) = self.locate(hit, now_us);
        let mut shard = self.lock(index);
        let stored = live(&shard, &id, holds_window, now_us).cloned();
        let (credited, expires_at_us) = hit
            .limit
            .credit(stored.as_ref(), hit.cost, now_us)
            .map_err(|reason| StoreError::Protocol {
                store: "the memory store",
                source: reason.into(),
            })?;
        let (new_keys, bytes) = shard.needs(&id, &credited);
        if !self.room(&mut shard, new_keys, bytes, now_us) {
            return Err(self.no_room());
        }
        let decision = hit.limit.decide(Some(&credited), 0, now_us).decision;
        shard.write(id, holds_window, credited, expires_at_us);
        Ok(Decision {
            decided_at_us: now_us,
            ..decision
        })
    }

    async fn read(&self, hit: &Hit) -> Result<Reading, StoreError> {
        let now_us = self.clock.now_us();
        // Read before the limit's shard is locked: a kept part may live in that shard.
        let held = self.held_of(hit);
        let (id, index) = self.locate(hit, now_us);
        let shard = self.lock(index);
        let stored = live(&shard, &id, hit.limit.key_holds_window(), now_us);
        let decision = hit.limit.decide(stored, 0, now_us).decision;
        Ok(Reading {
            decision: Decision {
                decided_at_us: now_us,
                ..decision
            },
            used: hit.limit.used(stored, now_us),
            held,
        })
    }

    async fn put_override(&self, id: &str, json: &str) -> Result<Option<String>, StoreError> {
        self.change_record(id, Some(json)).await
    }

    async fn delete_override(&self, id: &str) -> Result<Option<String>, StoreError> {
        self.change_record(id, None).await
    }

    async fn get_override(&self, id: &str) -> Result<Option<String>, StoreError> {
        Ok(self.records.get(id))
    }

    /// The page token is the id of the last record of the page before.
    async fn list_overrides(
        &self,
        prefix: &str,
        token: &str,
        count: usize,
    ) -> Result<Page, StoreError> {
        let records = self.records.lock();
        let after = std::ops::Bound::Excluded(token.to_string());
        let from = if token.is_empty() || token < prefix {
            std::ops::Bound::Included(prefix.to_string())
        } else {
            after
        };
        let mut page: Vec<(String, String)> = records
            .range((from, std::ops::Bound::Unbounded))
            .take_while(|(id, _)| id.starts_with(prefix))
            .take(count.max(1) + 1)
            .map(|(id, json)| (id.clone(), json.clone()))
            .collect();
        let more = page.len() > count.max(1);
        page.truncate(count.max(1));
        let next = more
            .then(|| page.last().map(|(id, _)| id.clone()))
            .flatten();
        Ok(Page {
            records: page,
            next,
        })
    }

    async fn all_overrides(&self) -> Result<Loaded, StoreError> {
        let records = self.records.lock();
        Ok(Loaded {
            records: records
                .iter()
                .map(|(id, json)| (id.clone(), json.clone()))
                .collect(),
            cursor: String::new(),
        })
    }

    async fn override_changes(&self, cursor: &str) -> Result<Feed, StoreError> {
        Ok(Feed::Changes {
            changes: Vec::new(),
            cursor: cursor.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SystemClock;
    use std::sync::Arc;

    /// Puts from many tasks while snapshots are written beside them (each one emptying the
    /// journal of what it holds): a store restored from the last snapshot and the journal
    /// holds every put that was answered, whatever the interleaving.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_answered_put_survives_snapshots_written_beside_it() {
        let dir = tempfile::tempdir().expect("a directory");
        let snapshot = dir.path().join("state.snapshot");
        let journal = dir.path().join("state.snapshot.journal");
        let (store, _) = MemoryStore::new(1000, Arc::new(SystemClock))
            .with_journal(&journal)
            .expect("a journal");
        let store = Arc::new(store);
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = {
            let (store, snapshot, done) = (store.clone(), snapshot.clone(), done.clone());
            tokio::task::spawn_blocking(move || {
                let mut written = 0;
                while !done.load(std::sync::atomic::Ordering::SeqCst) || written == 0 {
                    store.save_snapshot(&snapshot).expect("a snapshot");
                    written += 1;
                }
                written
            })
        };
        let mut tasks = Vec::new();
        for task in 0..8 {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0..25 {
                    let id = format!("t{task}-{i}");
                    store.put_override(&id, "{}").await.expect("a put");
                    if i % 5 == 0 {
                        store.delete_override(&id).await.expect("a delete");
                    }
                }
            }));
        }
        for task in tasks {
            task.await.expect("a task");
        }
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        let written = writer.await.expect("the snapshots");
        assert!(written >= 2, "{written} snapshots beside the puts");
        let mut restored = MemoryStore::new(1000, Arc::new(SystemClock));
        restored
            .load_snapshot(&snapshot)
            .expect("the last snapshot");
        let (restored, _) = restored.with_journal(&journal).expect("the journal");
        let held = restored.all_overrides().await.expect("the records").records;
        let expected = store.all_overrides().await.expect("the records").records;
        assert_eq!(held.len(), 8 * 20, "5 of each task's 25 were deleted");
        assert_eq!(held, expected);
    }
}
