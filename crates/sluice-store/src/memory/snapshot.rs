//! The memory store's snapshot: its state written to a file (on shutdown, and every
//! `--memory-snapshot-interval` when set) and read back at start, so that a restart does not
//! hand every client a fresh quota. Written whole to a temporary file beside the target,
//! synced, then renamed over it: a crash mid-write leaves the previous snapshot. Read whole
//! and checked before anything is loaded: a missing, foreign, truncated or corrupt file (or
//! one of another format version) is an error, and the store starts empty.
//!
//! Layout (integers little-endian), format version 2 (version 1, without the override
//! records, still reads):
//! - `sluice-memstore\n` (16 bytes), the version (`u32`), when it was written (µs, `u64`),
//!   the key ids' hash secret (two `u64`: ids are keyed hashes of the store keys, so the
//!   restored store must hash with the same secret), the file's length (`u64`) and its
//!   entry count (`u64`);
//! - the kinds of state, by tag: a count (`u8`), then each name (`u8` length, UTF-8);
//! - each entry: its id (two `u64`), when it expires (µs, `u64`), its tag (`u8`), its state's
//!   length (`u32`) and bytes (`algorithm::persist`);
//! - the admin API's override records: a count (`u64`), then each one's id and JSON, each a
//!   length (`u32`) and UTF-8 bytes;
//! - a SipHash-1-3 checksum (`u64`) of everything before it.
//!
//! An entry's id names its state's shape (algorithm, numbers, window), as it does while
//! serving: state of a limit that changed or went away while sluice was down is never read
//! by another limit, and goes when it expires, as after a reload. Expired state is skipped.

use std::fs::{self, File};
use std::hash::Hasher;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use siphasher::sip::SipHasher13;

use super::{KeyId, MemoryStore};
use sluice_core::algorithm::persist::Input;
use sluice_core::algorithm::State;
use sluice_core::modifier::Modifiers;

/// The first bytes of every snapshot.
const MAGIC: &[u8; 16] = b"sluice-memstore\n";

/// The format version this sluice writes (it reads this one and the one before).
pub const VERSION: u32 = 2;

/// The first version with override records.
const RECORDS_SINCE: u32 = 2;

/// The bytes before the kinds of state: magic, version, time, secret, length, count.
const HEADER_BYTES: usize = 16 + 4 + 8 + 16 + 8 + 8;

/// Where the file's length and entry count are written, once known.
const LENGTH_AT: usize = 16 + 4 + 8 + 16;

/// The checksum's fixed keys ("sluice", "snapshot").
const CHECKSUM_KEYS: (u64, u64) = (0x0000_736c_7569_6365, 0x0000_7370_6168_736e);

/// Where the memory store's snapshot goes and how often it is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshotting {
    /// `--memory-snapshot`.
    pub path: PathBuf,
    /// `--memory-snapshot-interval`; `None`: only on shutdown.
    pub interval: Option<Duration>,
}

/// Why a snapshot could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("no snapshot at {path}")]
    Missing { path: String },
    #[error("{path} is not a sluice memory store snapshot")]
    Foreign { path: String },
    #[error("{path} is a snapshot of format version {found}; this sluice reads versions 1 and {VERSION}")]
    Version { path: String, found: u32 },
    #[error("{path} is truncated: {found} bytes of {expected}")]
    Truncated {
        path: String,
        found: usize,
        expected: u64,
    },
    #[error("{path} is corrupt: {reason}")]
    Corrupt { path: String, reason: &'static str },
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write {path}: {source}")]
    Write {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// The snapshots a store wrote and failed to write, and the keys of the last one written
/// (`sluice_memory_store_snapshots_total`, `sluice_memory_store_snapshot_keys`).
#[derive(Debug, Default)]
pub struct Counts {
    pub written: AtomicU64,
    pub failed: AtomicU64,
    pub last_keys: AtomicU64,
}

/// A snapshot written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    pub keys: usize,
    pub bytes: usize,
    pub took: Duration,
}

/// A snapshot loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Loaded {
    /// Entries now held.
    pub keys: usize,
    /// Entries that expired while sluice was down.
    pub expired: usize,
    /// Entries of a kind of state this sluice does not have, or of another layout.
    pub unknown: usize,
    /// Entries beyond the store's bounds (`--memory-max-keys`, `--memory-max-bytes`).
    pub over_bound: usize,
    /// How long ago the snapshot was written (µs, by the store's clock).
    pub age_us: u64,
    /// The admin API's override records read back.
    pub overrides: usize,
}

/// Checks at start that a snapshot can be written at `path` (its directory exists and takes
/// a file): a setting that cannot be honoured must stop the server, not fail at shutdown.
pub fn check_writable(path: &Path) -> Result<(), SnapshotError> {
    let temporary = temporary_path(path);
    private_file(&temporary)
        .and_then(|_| fs::remove_file(&temporary))
        .map_err(|source| SnapshotError::Write {
            path: temporary.display().to_string(),
            source,
        })
}

/// A new file (or an emptied one) readable by its owner only: a snapshot holds the secret the
/// store's key ids are hashed with.
fn private_file(path: &Path) -> std::io::Result<File> {
    let mut options = fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)
}

/// The file a snapshot is written to before it is renamed over `path`: beside it, so that the
/// rename stays on one file system.
fn temporary_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    path.with_file_name(name)
}

impl MemoryStore {
    /// Writes every live entry to `path` (atomically: a temporary file, synced, renamed over
    /// it). Each shard is locked only while its entries are copied into the buffer.
    pub fn save_snapshot(&self, path: &Path) -> Result<Written, SnapshotError> {
        let written = self.write_snapshot(path);
        match &written {
            Ok(written) => {
                self.snapshots.written.fetch_add(1, Ordering::Relaxed);
                self.snapshots
                    .last_keys
                    .store(written.keys as u64, Ordering::Relaxed);
            }
            Err(_) => {
                self.snapshots.failed.fetch_add(1, Ordering::Relaxed);
            }
        }
        written
    }

    /// Writes the snapshot, then drops from the journal the changes it holds.
    fn write_snapshot(&self, path: &Path) -> Result<Written, SnapshotError> {
        let started = Instant::now();
        let ((bytes, keys), journalled) = match &self.journal {
            Some(journal) => {
                let (encoded, length) = journal.mark(|| self.encode());
                (encoded, Some((journal, length)))
            }
            None => (self.encode(), None),
        };
        let write_error = |source| SnapshotError::Write {
            path: path.display().to_string(),
            source,
        };
        let temporary = temporary_path(path);
        let mut file = private_file(&temporary).map_err(write_error)?;
        file.write_all(&bytes)
            .and_then(|()| file.sync_all())
            .map_err(write_error)?;
        drop(file);
        fs::rename(&temporary, path).map_err(write_error)?;
        if let Some((journal, length)) = journalled {
            // A journal not emptied only holds changes the snapshot has too: harmless.
            if let Err(error) = journal.compact(length) {
                tracing::warn!(%error, "the memory store's journal was not compacted after a snapshot");
            }
        }
        Ok(Written {
            keys,
            bytes: bytes.len(),
            took: started.elapsed(),
        })
    }

    /// The snapshot's bytes and its entry count.
    fn encode(&self) -> (Vec<u8>, usize) {
        let now_us = self.clock.now_us();
        let mut out = Vec::with_capacity(HEADER_BYTES + 64 * self.key_count());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&now_us.to_le_bytes());
        out.extend_from_slice(&self.hash_keys.0.to_le_bytes());
        out.extend_from_slice(&self.hash_keys.1.to_le_bytes());
        out.extend_from_slice(&[0; 16]);
        let kept = Modifiers::kept_names();
        let names: Vec<&str> = State::PERSISTED_NAMES
            .iter()
            .chain(&kept)
            .copied()
            .collect();
        out.push(names.len() as u8);
        for name in &names {
            out.push(name.len() as u8);
            out.extend_from_slice(name.as_bytes());
        }
        let mut keys = 0_u64;
        for index in 0..self.shards.len() {
            let shard = self.lock(index);
            for (id, entry) in &shard.entries {
                if entry.expires_at_us <= now_us {
                    continue;
                }
                let Some(tag) = entry.state.persisted_tag(&kept) else {
                    continue;
                };
                out.extend_from_slice(&id.0.to_le_bytes());
                out.extend_from_slice(&id.1.to_le_bytes());
                out.extend_from_slice(&entry.expires_at_us.to_le_bytes());
                out.push(tag);
                let length_at = out.len();
                out.extend_from_slice(&[0; 4]);
                entry.state.persist(&mut out);
                let length = (out.len() - length_at - 4) as u32;
                out[length_at..length_at + 4].copy_from_slice(&length.to_le_bytes());
                keys += 1;
            }
        }
        let records = self.records.lock();
        out.extend_from_slice(&(records.len() as u64).to_le_bytes());
        for (id, json) in records.iter() {
            for text in [id, json] {
                out.extend_from_slice(&(text.len() as u32).to_le_bytes());
                out.extend_from_slice(text.as_bytes());
            }
        }
        drop(records);
        let length = (out.len() + 8) as u64;
        out[LENGTH_AT..LENGTH_AT + 8].copy_from_slice(&length.to_le_bytes());
        out[LENGTH_AT + 8..LENGTH_AT + 16].copy_from_slice(&keys.to_le_bytes());
        let checksum = checksum(&out);
        out.extend_from_slice(&checksum.to_le_bytes());
        (out, keys as usize)
    }

    /// Loads the snapshot at `path` into this (empty) store, adopting its hash secret; expired
    /// entries and entries beyond the bounds are skipped. On an error nothing is loaded.
    pub fn load_snapshot(&mut self, path: &Path) -> Result<Loaded, SnapshotError> {
        let shown = || path.display().to_string();
        let bytes = fs::read(path).map_err(|source| match source.kind() {
            std::io::ErrorKind::NotFound => SnapshotError::Missing { path: shown() },
            _ => SnapshotError::Read {
                path: shown(),
                source,
            },
        })?;
        let body = checked(&bytes).map_err(|fault| fault.at(shown()))?;
        self.restore(body).map_err(|reason| SnapshotError::Corrupt {
            path: shown(),
            reason,
        })
    }

    /// Loads checked snapshot bytes (without the checksum).
    fn restore(&mut self, body: &[u8]) -> Result<Loaded, &'static str> {
        let now_us = self.clock.now_us();
        let version = Input::new(&body[MAGIC.len()..]).u32().unwrap_or(VERSION);
        let mut input = Input::new(&body[MAGIC.len() + 4..]);
        let read = |value: Option<u64>| value.ok_or("the header is cut short");
        let written_at_us = read(input.u64())?;
        let hash_keys = (read(input.u64())?, read(input.u64())?);
        let (_length, count) = (read(input.u64())?, read(input.u64())?);
        let names = kinds(&mut input).ok_or("the kinds of state are cut short")?;
        let kept = Modifiers::kept_names();
        let mut loaded = Loaded {
            age_us: now_us.saturating_sub(written_at_us),
            ..Loaded::default()
        };
        for _ in 0..count {
            let Some((id, expires_at_us, tag, state)) = entry(&mut input) else {
                self.clear();
                return Err("an entry is cut short");
            };
            if expires_at_us <= now_us {
                loaded.expired += 1;
                continue;
            }
            let name = names.get(usize::from(tag)).map_or("", String::as_str);
            let Some(state) = State::restore(name, state, &kept) else {
                loaded.unknown += 1;
                continue;
            };
            if self.hold_restored(id, state, expires_at_us) {
                loaded.keys += 1;
            } else {
                loaded.over_bound += 1;
            }
        }
        if version >= RECORDS_SINCE {
            let Some(records) = records(&mut input) else {
                self.clear();
                return Err("the override records are cut short");
            };
            loaded.overrides = records.len();
            *self.records.lock() = records;
        }
        if !input.is_empty() {
            self.clear();
            return Err("bytes follow the last entry");
        }
        self.hash_keys = hash_keys;
        Ok(loaded)
    }

    /// Holds a restored entry when its shard has room for it.
    fn hold_restored(&self, id: KeyId, state: State, expires_at_us: u64) -> bool {
        let (id, index) = self.placed(id);
        let mut shard = self.lock(index);
        let (new_keys, bytes) = shard.needs(&id, &state);
        let fits = shard.entries.len() + new_keys <= self.keys_per_shard
            && shard.bytes() + bytes <= self.bytes_per_shard;
        if fits {
            shard.write(id, false, state, expires_at_us);
        }
        fits
    }

    /// Drops every entry (a load that failed half-way leaves nothing).
    fn clear(&self) {
        for index in 0..self.shards.len() {
            let mut shard = self.lock(index);
            shard.entries.clear();
            shard.state_bytes = 0;
        }
    }
}

/// What is wrong with a file's outer layout, before its path is known.
enum Fault {
    Foreign,
    Version(u32),
    Truncated { found: usize, expected: u64 },
    Corrupt(&'static str),
}

impl Fault {
    fn at(self, path: String) -> SnapshotError {
        match self {
            Fault::Foreign => SnapshotError::Foreign { path },
            Fault::Version(found) => SnapshotError::Version { path, found },
            Fault::Truncated { found, expected } => SnapshotError::Truncated {
                path,
                found,
                expected,
            },
            Fault::Corrupt(reason) => SnapshotError::Corrupt { path, reason },
        }
    }
}

/// The bytes before the checksum, once the magic, the version, the length and the checksum
/// are right.
fn checked(bytes: &[u8]) -> Result<&[u8], Fault> {
    if bytes.len() < MAGIC.len() || &bytes[..MAGIC.len()] != MAGIC {
        return Err(if MAGIC.starts_with(bytes) && !bytes.is_empty() {
            Fault::Truncated {
                found: bytes.len(),
                expected: HEADER_BYTES as u64,
            }
        } else {
            Fault::Foreign
        });
    }
    let short_header = || Fault::Truncated {
        found: bytes.len(),
        expected: HEADER_BYTES as u64,
    };
    let version = Input::new(&bytes[MAGIC.len()..])
        .u32()
        .ok_or_else(short_header)?;
    if version != VERSION && version != RECORDS_SINCE - 1 {
        return Err(Fault::Version(version));
    }
    let length = Input::new(bytes.get(LENGTH_AT..LENGTH_AT + 8).unwrap_or_default())
        .u64()
        .ok_or_else(short_header)?;
    if (bytes.len() as u64) < length {
        return Err(Fault::Truncated {
            found: bytes.len(),
            expected: length,
        });
    }
    if bytes.len() as u64 != length || length < (HEADER_BYTES + 8) as u64 {
        return Err(Fault::Corrupt("its length is not the one it states"));
    }
    let (body, stated) = bytes.split_at(bytes.len() - 8);
    if Input::new(stated).u64() != Some(checksum(body)) {
        return Err(Fault::Corrupt("its checksum does not match"));
    }
    Ok(body)
}

/// The kinds of state named in the file, by tag.
fn kinds(input: &mut Input<'_>) -> Option<Vec<String>> {
    let count = input.u8()?;
    (0..count)
        .map(|_| {
            let length = input.u8()?;
            let name = input.bytes(usize::from(length))?;
            Some(String::from_utf8_lossy(name).into_owned())
        })
        .collect()
}

/// The override records, by id.
fn records(input: &mut Input<'_>) -> Option<std::collections::BTreeMap<String, String>> {
    let count = input.u64()?;
    let mut text = || {
        let length = input.u32()? as usize;
        String::from_utf8(input.bytes(length)?.to_vec()).ok()
    };
    (0..count).map(|_| Some((text()?, text()?))).collect()
}

/// One entry: its id, expiry, tag and state bytes.
fn entry<'a>(input: &mut Input<'a>) -> Option<(KeyId, u64, u8, &'a [u8])> {
    let id = KeyId(input.u64()?, input.u64()?);
    let expires_at_us = input.u64()?;
    let tag = input.u8()?;
    let length = input.u32()? as usize;
    Some((id, expires_at_us, tag, input.bytes(length)?))
}

/// The checksum of a snapshot's bytes: integrity against a torn or altered file, not a
/// secret (fixed keys).
fn checksum(bytes: &[u8]) -> u64 {
    let mut hasher = SipHasher13::new_with_keys(CHECKSUM_KEYS.0, CHECKSUM_KEYS.1);
    hasher.write(bytes);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Clock, ManualClock, Store};
    use sluice_core::algorithm::{Algorithm, LeaseCall};
    use sluice_core::engine::{Charging, Of};
    use sluice_core::limit::{Counting, Hit, Limit, Role, Unit};
    use sluice_core::modifier::penalty::Policy;
    use std::sync::Arc;

    const START_US: u64 = 1_700_000_000_000_000;

    fn hit(key: &str, algorithm: Algorithm, limit: u32) -> Hit {
        Hit {
            key: key.to_string(),
            limit: Limit::new(Counting::of(algorithm), limit, Unit::Minute),
            cost: 1,
            role: Role::Enforced,
            joins_previous: false,
            lease: (algorithm == Algorithm::Concurrency).then_some(LeaseCall::Acquire(7)),
        }
    }

    /// One hit of every algorithm, and one on a penalized limit.
    fn every_kind() -> Vec<Hit> {
        let mut hits: Vec<Hit> = Algorithm::ALL
            .iter()
            .map(|&algorithm| hit(&format!("k_{algorithm}_"), algorithm, 3))
            .collect();
        let mut penalized = hit("login_", Algorithm::FixedWindow, 1);
        penalized.limit.modifiers.penalty = Some(Policy {
            after: 2,
            within_us: 600_000_000,
            block_ms: 60_000,
            factor_milli: 2_000,
            max_block_ms: 3_600_000,
            forget_us: 86_400_000_000,
        });
        hits.push(penalized);
        hits
    }

    fn store(max_keys: usize) -> (MemoryStore, Arc<ManualClock>) {
        let clock = Arc::new(ManualClock::at(START_US));
        (MemoryStore::new(max_keys, clock.clone()), clock)
    }

    fn path(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("sluice-snapshot-{}", std::process::id()));
        let _ = fs::create_dir_all(&dir);
        dir.join(name)
    }

    async fn charge_each(store: &MemoryStore, hits: &[Hit], times: usize) {
        for _ in 0..times {
            for hit in hits {
                store
                    .charge(std::slice::from_ref(hit), Charging::EveryHit)
                    .await
                    .unwrap();
            }
        }
    }

    #[tokio::test]
    async fn every_kind_of_state_reads_back_in_a_new_process_store() {
        let (before, clock) = store(1000);
        let hits = every_kind();
        charge_each(&before, &hits, 2).await;
        let file = path("every-kind");
        let written = before.save_snapshot(&file).unwrap();
        assert_eq!(written.keys, before.key_count());
        // A new store has a secret of its own until it loads the snapshot's.
        let (mut after, after_clock) = store(1000);
        after_clock.set(clock.now_us() + 1_000_000);
        assert!(hits.iter().all(|h| after.state_of(h).is_none()));
        let loaded = after.load_snapshot(&file).unwrap();
        assert_eq!(loaded.keys, written.keys);
        assert_eq!(loaded.age_us, 1_000_000);
        clock.set(after_clock.now_us());
        for hit in &hits {
            assert!(before.state_of(hit).is_some(), "{}", hit.key);
            assert_eq!(after.state_of(hit), before.state_of(hit), "{}", hit.key);
        }
        let record = Of::Kept { row: 0, part: 0 };
        assert!(after.kept_of(&hits[hits.len() - 1], record).is_some());
        assert_eq!(after.key_count(), before.key_count());
        // And they decide the same from there.
        for hit in &hits {
            let one = std::slice::from_ref(hit);
            let a = before.charge(one, Charging::EveryHit).await.unwrap();
            let b = after.charge(one, Charging::EveryHit).await.unwrap();
            assert_eq!(a, b, "{}", hit.key);
        }
    }

    #[tokio::test]
    async fn state_that_expired_while_down_is_skipped() {
        let (before, clock) = store(1000);
        let second = Hit {
            limit: Limit::fixed_window(5, Unit::Second),
            ..hit("short_", Algorithm::FixedWindow, 5)
        };
        let hour = Hit {
            limit: Limit::fixed_window(5, Unit::Hour),
            ..hit("long_", Algorithm::FixedWindow, 5)
        };
        charge_each(&before, &[second, hour.clone()], 1).await;
        let file = path("expired");
        assert_eq!(before.save_snapshot(&file).unwrap().keys, 2);
        let (mut after, after_clock) = store(1000);
        after_clock.set(clock.now_us() + 2_000_000);
        let loaded = after.load_snapshot(&file).unwrap();
        assert_eq!((loaded.keys, loaded.expired), (1, 1));
        assert!(after.state_of(&hour).is_some());
    }

    #[tokio::test]
    async fn a_store_smaller_than_the_snapshot_keeps_what_fits() {
        let (before, _) = store(10_000);
        let hits: Vec<Hit> = (0..1000)
            .map(|i| hit(&format!("k{i}_"), Algorithm::TokenBucket, 5))
            .collect();
        charge_each(&before, &hits, 1).await;
        let file = path("bounded");
        before.save_snapshot(&file).unwrap();
        let (mut small, _) = store(100);
        let loaded = small.load_snapshot(&file).unwrap();
        assert_eq!(loaded.keys + loaded.over_bound, 1000);
        assert!(
            small.key_count() <= 100 + small.shards.len(),
            "{}",
            small.key_count()
        );
        assert_eq!(small.key_count(), loaded.keys);
    }

    fn error_of(bytes: &[u8], name: &str) -> SnapshotError {
        let file = path(name);
        fs::write(&file, bytes).unwrap();
        let (mut store, _) = store(100);
        let error = store.load_snapshot(&file).unwrap_err();
        assert_eq!(store.key_count(), 0, "nothing loaded from {name}");
        error
    }

    #[tokio::test]
    async fn a_missing_foreign_truncated_corrupt_or_newer_file_is_refused_whole() {
        let (before, _) = store(1000);
        charge_each(&before, &every_kind(), 1).await;
        let (good, _) = before.encode();
        let (mut missing, _) = store(10);
        assert!(matches!(
            missing.load_snapshot(&path("absent")),
            Err(SnapshotError::Missing { .. })
        ));
        assert!(matches!(
            error_of(b"{\"not\": \"a snapshot\"}", "foreign"),
            SnapshotError::Foreign { .. }
        ));
        assert!(matches!(
            error_of(b"", "empty"),
            SnapshotError::Foreign { .. }
        ));
        for cut in [8, HEADER_BYTES - 1, HEADER_BYTES + 3, good.len() - 1] {
            let error = error_of(&good[..cut], "truncated");
            assert!(
                matches!(error, SnapshotError::Truncated { .. }),
                "cut at {cut}: {error}"
            );
        }
        let mut flipped = good.clone();
        let middle = flipped.len() / 2 + 5;
        flipped[middle] ^= 0x40;
        let error = error_of(&flipped, "corrupt");
        assert!(error.to_string().contains("checksum"), "{error}");
        let mut longer = good.clone();
        longer.extend_from_slice(b"more");
        assert!(matches!(
            error_of(&longer, "longer"),
            SnapshotError::Corrupt { .. }
        ));
        let mut newer = good.clone();
        newer[16..20].copy_from_slice(&(VERSION + 1).to_le_bytes());
        let error = error_of(&newer, "newer");
        assert!(error.to_string().contains("format version 3"), "{error}");
    }

    #[tokio::test]
    async fn override_records_read_back_and_a_version_1_file_still_reads() {
        use crate::admin::AdminStore;
        let (before, _) = store(1000);
        charge_each(&before, &[hit("a_", Algorithm::FixedWindow, 5)], 1).await;
        before
            .put_override("rl\u{1f}k\u{1e}v", "{\"x\":1}")
            .await
            .unwrap();
        let file = path("records");
        before.save_snapshot(&file).unwrap();
        let (mut after, _) = store(1000);
        let loaded = after.load_snapshot(&file).unwrap();
        assert_eq!((loaded.keys, loaded.overrides), (1, 1));
        let all = after.all_overrides().await.unwrap();
        assert_eq!(
            all.records,
            vec![("rl\u{1f}k\u{1e}v".to_string(), "{\"x\":1}".to_string())]
        );

        // Version 1: the same layout without the records' section.
        let (bytes, _) = store(1000).0.encode();
        let mut old = bytes[..bytes.len() - 16].to_vec();
        old[16..20].copy_from_slice(&1_u32.to_le_bytes());
        let length = (old.len() + 8) as u64;
        old[LENGTH_AT..LENGTH_AT + 8].copy_from_slice(&length.to_le_bytes());
        let sum = checksum(&old);
        old.extend_from_slice(&sum.to_le_bytes());
        let file = path("version1");
        fs::write(&file, &old).unwrap();
        let (mut reader, _) = store(10);
        assert_eq!(reader.load_snapshot(&file).unwrap().overrides, 0);
    }

    #[tokio::test]
    async fn a_kind_of_state_this_build_does_not_have_is_skipped() {
        let (before, _) = store(1000);
        charge_each(&before, &[hit("a_", Algorithm::FixedWindow, 5)], 1).await;
        let (mut bytes, _) = before.encode();
        // Rename the kind `fixed_window` (same length) and fix the checksum.
        let at = bytes
            .windows(12)
            .position(|w| w == b"fixed_window")
            .unwrap();
        bytes[at..at + 12].copy_from_slice(b"future_thing");
        let body = bytes.len() - 8;
        let sum = checksum(&bytes[..body]);
        bytes[body..].copy_from_slice(&sum.to_le_bytes());
        let file = path("unknown-kind");
        fs::write(&file, &bytes).unwrap();
        let (mut after, _) = store(100);
        let loaded = after.load_snapshot(&file).unwrap();
        assert_eq!((loaded.keys, loaded.unknown), (0, 1));
    }

    #[tokio::test]
    async fn a_snapshot_replaces_the_previous_one_whole() {
        let (store, _) = store(1000);
        let file = path("replaced");
        charge_each(&store, &[hit("a_", Algorithm::FixedWindow, 5)], 1).await;
        store.save_snapshot(&file).unwrap();
        charge_each(&store, &[hit("b_", Algorithm::FixedWindow, 5)], 1).await;
        assert_eq!(store.save_snapshot(&file).unwrap().keys, 2);
        assert!(!temporary_path(&file).exists());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(&file).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "{mode:o}");
        }
        assert!(check_writable(&file).is_ok());
        assert!(check_writable(Path::new("/nonexistent-dir/snapshot")).is_err());
    }
}
