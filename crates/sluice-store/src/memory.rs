//! The embedded store: state in a sharded map in this process. No lock is held across an
//! `.await` (there is none inside `charge`), expired state is swept by `sweep_expired`, and
//! what is held is bounded, in keys and in bytes (what the map's table and each state's heap
//! block take, as `footprint` counts them): at a bound, only state that no longer matters
//! (expired) is dropped to make room, by a sweep of the shard at most every
//! `ROOM_SWEEP_EVERY_US`; state that still restricts a client is never dropped. When no room
//! can be made, the request fails with `StoreError::Full` (the service answers it as
//! `--failure-mode` says), counted, and logged once.
//!
//! Keys are held as a 128-bit keyed hash of the store key, not the key itself: 16 bytes
//! instead of a heap string, so an entry is 56 bytes in the map's table. Two distinct keys
//! share state only if their 128-bit hashes collide: for a million keys, a chance of about
//! 1 in 10^27.
//!
//! With `--memory-snapshot`, the state is written to a file on shutdown (and periodically)
//! and read back at start (`snapshot`).

mod admin;
mod decide;
pub mod journal;
use decide::at_time;
mod footprint;
pub mod snapshot;

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use siphasher::sip128::{Hasher128, SipHasher13};

use sluice_core::algorithm::{Kept, State};
/// A store key's 128-bit keyed hash.
use sluice_core::keyed_id::{KeyedId as KeyId, KeyedMap};

use crate::key::Shape;
use crate::series::{Reporting, Series};
use crate::{Clock, Store, StoreError};
use sluice_core::engine::{Charging, Of, Part};
use sluice_core::limit::{Decision, Hit};

/// A shard's entries: state by key id, hashed by the id itself (it is already a keyed hash).
type Entries = KeyedMap<Entry>;

/// A shard: its entries, the heap bytes of their states, and when it last dropped expired
/// ones for room.
#[derive(Default)]
struct Shard {
    entries: Entries,
    state_bytes: usize,
    room_swept_at_us: u64,
}

/// The most often a full shard is swept for expired entries (µs): a flood of new keys into a
/// store full of live state costs one shard scan per this time, not one per key.
const ROOM_SWEEP_EVERY_US: u64 = 100_000;

/// The least bytes a shard may hold: the largest state one key can have (a sliding log of
/// 10,000 entries, 128 KiB as held) fits twice.
const MIN_SHARD_BYTES: usize = 256 * 1024;

/// The in-memory store.
pub struct MemoryStore {
    shards: Box<[ShardLock]>,
    /// The secret key of the keyed 128-bit hash that turns store keys into ids.
    hash_keys: (u64, u64),
    keys_per_shard: usize,
    bytes_per_shard: usize,
    clock: Arc<dyn Clock>,
    /// Requests that found no room: the store full of state that still matters.
    full: AtomicU64,
    full_logged: AtomicBool,
    snapshots: snapshot::Counts,
    /// The admin API's override records (`admin`).
    records: admin::Records,
    /// Where each change of the records is synced before it is answered (`journal`), with a
    /// snapshot.
    journal: Option<journal::Journal>,
}

struct Entry {
    state: State,
    expires_at_us: u64,
}

/// Whether `entry`, the state of `hit`, still reads as what it holds at `now_us`. A fixed
/// window's id names its window's start, which limits of other periods may share (as the
/// reference's keys do): such a state is read for as long as it is held, whichever limit's
/// window end set its expiry, as a Redis key shared so is. Any other state reads as absent
/// once expired (it no longer matters then).
fn readable(entry: &Entry, holds_window: bool, now_us: u64) -> bool {
    entry.expires_at_us > now_us || holds_window
}

/// Writes `state` over `entry`, in its block where it fits, keeping the shard's
/// `state_bytes`.
fn overwrite(
    entry: &mut Entry,
    state_bytes: &mut usize,
    holds_window: bool,
    state: State,
    expires_at_us: u64,
) {
    let before = footprint::heap_bytes(&entry.state);
    footprint::hold(&mut entry.state, state);
    *state_bytes = *state_bytes - before + footprint::heap_bytes(&entry.state);
    entry.expires_at_us = kept_until(entry, holds_window, expires_at_us);
}

/// When `entry`, rewritten with a state that matters until `expires_at_us`, may go: a fixed
/// window shared by limits of several periods stays until the longest one's end.
fn kept_until(entry: &Entry, holds_window: bool, expires_at_us: u64) -> u64 {
    if holds_window {
        expires_at_us.max(entry.expires_at_us)
    } else {
        expires_at_us
    }
}

/// The state under `id` in `shard`, if it still reads as held at `now_us`.
fn live<'s>(shard: &'s Shard, id: &KeyId, holds_window: bool, now_us: u64) -> Option<&'s State> {
    shard
        .entries
        .get(id)
        .filter(|entry| readable(entry, holds_window, now_us))
        .map(|entry| &entry.state)
}

/// A shard's lock on a cache line of its own: threads working on neighbouring shards do not
/// take the line from each other.
#[repr(align(128))]
#[derive(Default)]
struct ShardLock(Mutex<Shard>);

impl Shard {
    /// The bytes the shard holds: its table and its states' heap blocks.
    fn bytes(&self) -> usize {
        footprint::table_bytes(self.entries.capacity()) + self.state_bytes
    }

    /// What storing `state` under `id` takes: a new key (0 or 1), and heap bytes more.
    fn needs(&self, id: &KeyId, state: &State) -> (usize, usize) {
        match self.entries.get(id) {
            Some(entry) => {
                let held = footprint::heap_bytes(&entry.state);
                let after = footprint::heap_bytes_held(Some(&entry.state), state);
                (0, after.saturating_sub(held))
            }
            None => (1, footprint::heap_bytes_held(None, state)),
        }
    }

    /// Stores `state` under `id`, in place when the key is held, keeping the byte count.
    fn write(&mut self, id: KeyId, holds_window: bool, state: State, expires_at_us: u64) {
        match self.entries.get_mut(&id) {
            Some(entry) => overwrite(
                entry,
                &mut self.state_bytes,
                holds_window,
                state,
                expires_at_us,
            ),
            None => {
                let state = footprint::fresh(state);
                self.state_bytes += footprint::heap_bytes(&state);
                self.entries.insert(
                    id,
                    Entry {
                        state,
                        expires_at_us,
                    },
                );
            }
        }
    }

    /// Drops the entries expired at `now_us`; returns how many.
    fn drop_expired(&mut self, now_us: u64) -> usize {
        let before = self.entries.len();
        let mut freed = 0;
        self.entries.retain(|_, entry| {
            let keep = entry.expires_at_us > now_us;
            if !keep {
                freed += footprint::heap_bytes(&entry.state);
            }
            keep
        });
        self.state_bytes -= freed;
        before - self.entries.len()
    }

    /// Gives back a table left mostly empty (by the background sweep only: making room on
    /// the request path must not reallocate a table it is about to fill).
    fn shrink_if_sparse(&mut self) {
        let len = self.entries.len();
        if self.entries.capacity() > 64 && len * 4 < self.entries.capacity() {
            self.entries.shrink_to(len * 2);
        }
    }
}

impl MemoryStore {
    /// A store holding at most about `max_keys` keys (and 1 KiB per key in bytes: see
    /// `with_max_bytes`), reading time from `clock`.
    pub fn new(max_keys: usize, clock: Arc<dyn Clock>) -> MemoryStore {
        let shard_count = (std::thread::available_parallelism().map_or(4, |n| n.get()) * 8)
            .next_power_of_two()
            .min(max_keys.max(1).next_power_of_two());
        let shards = (0..shard_count).map(|_| ShardLock::default()).collect();
        // Two outputs of std's randomly keyed hasher: a fresh secret per store.
        let secret = RandomState::new();
        MemoryStore {
            shards,
            hash_keys: (secret.hash_one(0_u8), secret.hash_one(1_u8)),
            keys_per_shard: max_keys.div_ceil(shard_count).max(1),
            bytes_per_shard: max_keys
                .saturating_mul(1024)
                .div_ceil(shard_count)
                .max(MIN_SHARD_BYTES),
            clock,
            full: AtomicU64::new(0),
            full_logged: AtomicBool::new(false),
            snapshots: Default::default(),
            records: Default::default(),
            journal: None,
        }
    }

    /// The same store, journalling every change of its override records at `path` (read
    /// first: the changes it holds are applied over what the store holds now, which is what
    /// a snapshot restored); how many changes it held. A path that cannot be opened is an
    /// error: the durability asked for cannot be given.
    pub fn with_journal(
        mut self,
        path: &std::path::Path,
    ) -> Result<(MemoryStore, usize), StoreError> {
        let (journal, replayed) = journal::Journal::open(path, &self.records)?;
        self.journal = Some(journal);
        Ok((self, replayed))
    }

    /// The journal's length in bytes (0 without one): what the next snapshot compacts.
    pub fn journal_bytes(&self) -> u64 {
        self.journal.as_ref().map_or(0, journal::Journal::len)
    }

    /// The same store, holding at most about `max_bytes` bytes of state (and at least 256 KiB
    /// per shard, so that any one key's state fits).
    pub fn with_max_bytes(mut self, max_bytes: usize) -> MemoryStore {
        self.bytes_per_shard = max_bytes.div_ceil(self.shards.len()).max(MIN_SHARD_BYTES);
        self
    }

    /// Drops every state whose time has passed; returns how many.
    pub fn sweep_expired(&self) -> usize {
        (0..self.shards.len())
            .map(|index| self.sweep_expired_shard(index))
            .sum()
    }

    /// Drops the expired state of one shard (`index` modulo the shards); returns how many.
    /// The background sweep goes one shard at a time: a pass over every key each second was
    /// a tenth of a core at 10,000,000 keys, and held each shard's lock for its whole scan
    /// (BENCHMARKS.md, "How does the cost hold as rules, keys, descriptors and clients grow?").
    pub fn sweep_expired_shard(&self, index: usize) -> usize {
        let now_us = self.clock.now_us();
        let mut shard = self.lock(index % self.shards.len());
        let removed = shard.drop_expired(now_us);
        shard.shrink_if_sparse();
        removed
    }

    /// How many keys are held.
    pub fn key_count(&self) -> usize {
        (0..self.shards.len())
            .map(|i| self.lock(i).entries.len())
            .sum()
    }

    /// The bytes held, as the store counts them.
    pub fn bytes_held(&self) -> usize {
        (0..self.shards.len()).map(|i| self.lock(i).bytes()).sum()
    }

    /// The state `hit` would be decided on now (what the store holds for it), for tools and
    /// tests that look at the store itself.
    pub fn state_of(&self, hit: &Hit) -> Option<State> {
        let now_us = self.clock.now_us();
        let (id, index) = self.locate(hit, now_us);
        let shard = self.lock(index);
        let entry = shard.entries.get(&id)?;
        readable(entry, hit.limit.key_holds_window(), now_us).then(|| entry.state.clone())
    }

    /// What `hit`'s modifiers keep now as part `of` (`Of::Kept`), for tools and tests.
    pub fn kept_of(&self, hit: &Hit, of: Of) -> Option<Kept> {
        let now_us = self.clock.now_us();
        let (id, index) = self.hashed_part(std::slice::from_ref(hit), Part { hit: 0, of });
        let shard = self.lock(index);
        match live(&shard, &id, false, now_us) {
            Some(State::Kept(kept)) => Some(kept.clone()),
            _ => None,
        }
    }

    /// How many requests found the store full of state that still matters.
    pub fn full_count(&self) -> u64 {
        self.full.load(Ordering::Relaxed)
    }

    fn lock(&self, index: usize) -> MutexGuard<'_, Shard> {
        // A panic while holding a shard cannot leave a half-written entry (entries are
        // replaced whole), so a poisoned shard is still consistent.
        self.shards[index]
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The id of `hit`'s state at `now_us` (its key and its `Shape`, as the Redis store names
    /// it), and the shard it lives in. A fixed window's start is folded into the key's keyed
    /// hash as it is (the same key in two windows never shares an id, and two keys do only if
    /// their hashes collide; hashing it as well cost 76 instructions a hit); any other shape is
    /// hashed with the key.
    fn locate(&self, hit: &Hit, now_us: u64) -> (KeyId, usize) {
        let (id, shard) = self.hashed(hit);
        (at_time(id, hit, now_us), shard)
    }

    /// `locate` before the time is known: the id without a fixed window's start (`at_time`
    /// folds it in), and the shard, which the time never changes.
    fn hashed(&self, hit: &Hit) -> (KeyId, usize) {
        let mut hasher = SipHasher13::new_with_keys(self.hash_keys.0, self.hash_keys.1);
        hasher.write(hit.key.as_bytes());
        if !hit.limit.key_holds_window() {
            // Any shape but a window is the same at every time.
            Shape::of(&hit.limit, 0).hash(&mut hasher);
        }
        let hash = hasher.finish128();
        self.placed(KeyId(hash.h1, hash.h2))
    }

    /// The id of the part `name` of what `hit`'s modifiers keep (for a part kept per token,
    /// `token`'s), whatever the limit's shape or window, and its shard.
    fn locate_kept(&self, hit: &Hit, name: &str, token: Option<u64>) -> (KeyId, usize) {
        let mut hasher = SipHasher13::new_with_keys(self.hash_keys.0, self.hash_keys.1);
        hasher.write(hit.key.as_bytes());
        // No descriptor key holds a NUL, so no limit's state hashes this.
        hasher.write(b"\0");
        hasher.write(name.as_bytes());
        if let Some(token) = token {
            hasher.write_u64(token);
        }
        let hash = hasher.finish128();
        self.placed(KeyId(hash.h1, hash.h2))
    }

    /// `id` and its shard: the map uses the first half; the shard comes from the second.
    fn placed(&self, id: KeyId) -> (KeyId, usize) {
        (id, (id.1 as usize) & (self.shards.len() - 1))
    }

    /// Where `part` of `hits` lives, before the time is known (`hashed`).
    fn hashed_part(&self, hits: &[Hit], part: Part) -> (KeyId, usize) {
        let hit = &hits[part.hit];
        match part.of.kept_part(hit) {
            None => self.hashed(hit),
            Some((name, token)) => self.locate_kept(hit, name, token),
        }
    }

    /// Whether `shard` can take `new_keys` more keys and `bytes` more bytes, dropping its
    /// expired entries to make room (at most every `ROOM_SWEEP_EVERY_US`: the background sweep
    /// does the rest). Live state is never dropped.
    fn room(&self, shard: &mut Shard, new_keys: usize, bytes: usize, now_us: u64) -> bool {
        let fits = |shard: &Shard| {
            let len = shard.entries.len() + new_keys;
            let table =
                footprint::table_bytes(footprint::capacity_for(shard.entries.capacity(), len));
            len <= self.keys_per_shard && table + shard.state_bytes + bytes <= self.bytes_per_shard
        };
        if fits(shard) {
            return true;
        }
        if now_us.saturating_sub(shard.room_swept_at_us) < ROOM_SWEEP_EVERY_US {
            return false;
        }
        shard.room_swept_at_us = now_us;
        shard.drop_expired(now_us);
        fits(shard)
    }

    /// The error of a request that found no room, counted, and logged the first time.
    fn no_room(&self) -> StoreError {
        self.full.fetch_add(1, Ordering::Relaxed);
        if !self.full_logged.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                "the memory store is full of state that still restricts clients: requests that need a new key get --failure-mode until some expires (raise --memory-max-keys or --memory-max-bytes)"
            );
        }
        StoreError::Full {
            store: "the memory store",
        }
    }
}

impl Reporting for MemoryStore {
    /// Keys and bytes held, and the requests that found no room.
    fn report(&self, series: &Series) {
        series.level("sluice_memory_store_keys", self.key_count() as u64);
        series.level("sluice_memory_store_bytes", self.bytes_held() as u64);
        series.total("sluice_memory_store_full_total", self.full_count());
        let load = |n: &AtomicU64| n.load(Ordering::Relaxed);
        let snapshots = &self.snapshots;
        let (written, failed, keys) = (
            load(&snapshots.written),
            load(&snapshots.failed),
            load(&snapshots.last_keys),
        );
        if written + failed > 0 {
            for (result, count) in [("written", written), ("failed", failed)] {
                series
                    .counter(
                        "sluice_memory_store_snapshots_total",
                        vec![metrics::Label::new("result", result)],
                    )
                    .absolute(count);
            }
            series.level("sluice_memory_store_snapshot_keys", keys);
        }
    }
}

impl Store for MemoryStore {
    fn name(&self) -> &'static str {
        "memory"
    }

    async fn charge(&self, hits: &[Hit], charging: Charging) -> Result<Vec<Decision>, StoreError> {
        // One hit vetoes exactly when it is denied: all-or-nothing is the hit alone (unless
        // a modifier keeps state beside it). A dry run takes the request's path, which plans
        // no write for it.
        if let [hit] = hits {
            if !hit.limit.modifiers.keep_state() && charging != Charging::Check {
                return Ok(vec![self.charge_one(hit, charging)?]);
            }
        }
        self.charge_request(hits, charging)
    }

    async fn healthy(&self) -> bool {
        true
    }

    /// State is named by descriptor and shape (`key::Shape`): a changed limit never reads
    /// state of another shape.
    fn config_changed(&self) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ManualClock;
    use sluice_core::algorithm::State;
    use sluice_core::limit::{Algorithm, Counting, Limit, Role, Unit};

    fn hit(key: &str, limit: u32, cost: u64) -> Hit {
        Hit {
            key: key.to_string(),
            limit: Limit::fixed_window(limit, Unit::Second),
            cost,
            role: Role::Enforced,
            joins_previous: false,
            lease: None,
        }
    }

    fn store(max_keys: usize) -> (MemoryStore, Arc<ManualClock>) {
        let clock = Arc::new(ManualClock::at(5_000_000));
        (MemoryStore::new(max_keys, clock.clone()), clock)
    }

    #[tokio::test]
    async fn counts_per_key_and_the_reference_counting_charges_denied_hits_in_their_window() {
        let (store, clock) = store(100);
        let hits = [
            hit("a", 2, 1),
            hit("a", 2, 1),
            hit("a", 2, 1),
            hit("b", 2, 1),
        ];
        let decided = store.charge(&hits, Charging::EveryHit).await.unwrap();
        let admitted: Vec<bool> = decided.iter().map(|d| d.admitted).collect();
        assert_eq!(admitted, [true, true, false, true]);
        assert_eq!(decided[2].remaining, 0, "what remained before the denial");
        assert_eq!(store.key_count(), 2);
        // The denied hit was counted: a is at 3 of 2, so even cost 0 is over, until the
        // window ends; the next window starts empty (nothing carries).
        let read = store
            .charge(&[hit("a", 2, 0)], Charging::EveryHit)
            .await
            .unwrap();
        assert!(!read[0].admitted);
        clock.advance(1_000_000);
        let next = store
            .charge(&[hit("a", 2, 2)], Charging::EveryHit)
            .await
            .unwrap();
        assert!(next[0].admitted && next[0].remaining == 0);
    }

    #[tokio::test]
    async fn a_vetoed_request_charges_none_of_its_hits() {
        let (store, _) = store(100);
        // b allows 1: the second request is vetoed by b, and a keeps what it had.
        let request = [hit("a", 5, 1), hit("b", 1, 1)];
        let first = store
            .charge(&request, Charging::AllOrNothing)
            .await
            .unwrap();
        assert_eq!((first[0].remaining, first[1].remaining), (4, 0));
        for _ in 0..3 {
            let denied = store
                .charge(&request, Charging::AllOrNothing)
                .await
                .unwrap();
            assert!(denied[0].admitted && !denied[1].admitted);
            assert_eq!(
                denied[0].remaining, 4,
                "a reports what remains: nothing was taken"
            );
        }
        let alone = store
            .charge(&[hit("a", 5, 1)], Charging::AllOrNothing)
            .await
            .unwrap();
        assert_eq!(alone[0].remaining, 3);
        // A shadow-mode hit never vetoes; a quota hit vetoes only with every other quota hit.
        let mut shadow = hit("b", 1, 1);
        shadow.role = Role::Shadow;
        let charged = store
            .charge(&[hit("a", 5, 1), shadow], Charging::AllOrNothing)
            .await
            .unwrap();
        assert_eq!(charged[0].remaining, 2);
        let (mut quota_b, mut quota_c) = (hit("b", 1, 1), hit("c", 1, 1));
        quota_b.role = Role::Quota;
        quota_c.role = Role::Quota;
        let charged = store
            .charge(
                &[hit("a", 5, 1), quota_b.clone(), quota_c],
                Charging::AllOrNothing,
            )
            .await
            .unwrap();
        assert_eq!(
            charged[0].remaining, 1,
            "c admitted: the quota hits do not veto"
        );
        let vetoed = store
            .charge(&[hit("a", 5, 1), quota_b], Charging::AllOrNothing)
            .await
            .unwrap();
        assert_eq!(vetoed[0].remaining, 1, "every quota hit denied: vetoed");
    }

    #[tokio::test]
    async fn hits_on_one_key_see_each_other_and_a_veto_undoes_them_all() {
        let (store, _) = store(100);
        let twice = [hit("a", 3, 2), hit("a", 3, 2)];
        let decided = store.charge(&twice, Charging::AllOrNothing).await.unwrap();
        assert!(decided[0].admitted && !decided[1].admitted);
        let again = store
            .charge(&[hit("a", 3, 3)], Charging::AllOrNothing)
            .await
            .unwrap();
        assert!(again[0].admitted, "the vetoed request left all 3");
    }

    #[tokio::test]
    async fn sweep_drops_expired_windows() {
        let (store, clock) = store(100);
        store
            .charge(&[hit("a", 5, 1)], Charging::AllOrNothing)
            .await
            .unwrap();
        assert_eq!(store.sweep_expired(), 0);
        clock.set(6_000_000);
        assert_eq!(store.sweep_expired(), 1);
        assert_eq!(store.key_count(), 0);
    }

    #[tokio::test]
    async fn a_sweep_gives_back_what_expired_state_held() {
        let (store, clock) = store(100_000);
        for i in 0..20_000 {
            store
                .charge(&[hit(&format!("k{i}"), 5, 1)], Charging::AllOrNothing)
                .await
                .unwrap();
        }
        let full = store.bytes_held();
        assert!(full >= 20_000 * 65, "{full} bytes for 20,000 keys");
        clock.advance(1_000_000);
        assert_eq!(store.sweep_expired(), 20_000);
        assert!(
            store.bytes_held() < full / 10,
            "{} bytes left",
            store.bytes_held()
        );
    }

    fn hourly(key: &str, limit: u32, cost: u64) -> Hit {
        Hit {
            limit: Limit::fixed_window(limit, Unit::Hour),
            ..hit(key, limit, cost)
        }
    }

    #[tokio::test]
    async fn a_flood_of_new_keys_never_resets_a_limit_that_still_restricts() {
        let (store, _) = store(64);
        let exhaust = [hourly("victim", 5, 5)];
        store
            .charge(&exhaust, Charging::AllOrNothing)
            .await
            .unwrap();
        let mut refused = 0;
        for i in 0..10_000 {
            let new_key = [hourly(&format!("k{i}"), 5, 1)];
            match store.charge(&new_key, Charging::AllOrNothing).await {
                Ok(_) => {}
                Err(StoreError::Full { .. }) => refused += 1,
                Err(other) => panic!("{other}"),
            }
        }
        assert!(store.key_count() <= 64, "{} keys", store.key_count());
        assert!(refused >= 10_000 - 64, "{refused} refused");
        assert_eq!(store.full_count(), refused);
        let again = store
            .charge(&[hourly("victim", 5, 1)], Charging::AllOrNothing)
            .await;
        assert!(
            !again.unwrap()[0].admitted,
            "the exhausted limit still holds"
        );
    }

    #[tokio::test]
    async fn expired_state_makes_room_for_new_keys() {
        let (store, clock) = store(64);
        let mut refused = None;
        for i in 0..1000 {
            let key = format!("k{i}");
            if store
                .charge(&[hit(&key, 5, 1)], Charging::AllOrNothing)
                .await
                .is_err()
            {
                refused = Some(key);
                break;
            }
        }
        let refused = refused.expect("a full shard refuses a new key");
        // The second-long windows end: their state no longer matters.
        clock.advance(1_000_000);
        let room = store
            .charge(&[hit(&refused, 5, 1)], Charging::AllOrNothing)
            .await;
        assert!(room.is_ok_and(|d| d[0].admitted));
    }

    #[tokio::test]
    async fn a_sliding_log_is_bounded_by_its_bytes() {
        let clock = Arc::new(ManualClock::at(5_000_000));
        // The least a store may hold: 256 KiB per shard.
        let store = MemoryStore::new(1000, clock.clone()).with_max_bytes(0);
        // Logs of up to 10,000 entries on 200 keys: their bytes, not their keys, fill it.
        let log = |key: String| Hit {
            limit: Limit::new(
                Counting::of(Algorithm::SlidingWindowLog),
                10_000,
                Unit::Hour,
            ),
            ..hit(&key, 10_000, 1)
        };
        let mut admitted = 0;
        let mut refused = false;
        for i in 0..2_000_000 {
            clock.advance(1);
            let hits = [log(format!("log{}", i % 200))];
            match store.charge(&hits, Charging::AllOrNothing).await {
                Ok(d) => admitted += usize::from(d[0].admitted),
                Err(StoreError::Full { .. }) => {
                    refused = true;
                    break;
                }
                Err(other) => panic!("{other}"),
            }
        }
        assert!(refused, "the logs' blocks count against the bound");
        let bound = MIN_SHARD_BYTES * store.shards.len();
        assert!(store.bytes_held() <= bound, "{} bytes", store.bytes_held());
        assert!(store.key_count() <= 200);
        assert!(admitted >= 4096, "{admitted}");
    }

    #[test]
    fn an_entry_stays_small() {
        // The per-key cost docs/memory-store.md and BENCHMARKS.md quote rests on these sizes.
        assert_eq!(std::mem::size_of::<State>(), 32);
        assert_eq!(std::mem::size_of::<(KeyId, Entry)>(), 56);
    }

    #[tokio::test]
    async fn cost_zero_stores_nothing() {
        let (store, _) = store(10);
        let d = store
            .charge(&[hit("a", 3, 0)], Charging::AllOrNothing)
            .await
            .unwrap();
        assert_eq!(d[0].remaining, 3);
        assert_eq!(store.key_count(), 0);
    }
}
