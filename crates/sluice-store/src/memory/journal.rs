//! The memory store's journal of override changes (`--memory-snapshot FILE` keeps it at
//! `FILE.journal`): each put or delete of an admin record is applied and appended, one line,
//! and synced to disk before the admin API answers, so that a crash right after an answer
//! loses nothing. At start it is read after the snapshot, in order; a line cut short by a
//! crash mid-write (never answered) ends the reading. A snapshot that holds the journal's
//! changes empties it (`compact`), so the journal holds only what came after the last one.
//!
//! A line is a JSON array: `["put", id, json]` or `["delete", id]` (JSON strings hold no
//! raw newline). Replaying a change a snapshot already holds leaves the record as it was, so
//! the journal may safely hold more than the snapshot lacks.

use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use super::admin::Records;
use crate::StoreError;

/// How the store names itself in a journal's errors.
const STORE: &str = "the memory store's journal";

/// The journal of one memory store, shared with the blocking tasks that write it.
#[derive(Clone)]
pub struct Journal(Arc<Mutex<Open>>);

/// The journal's file, open for appending, and where it is.
struct Open {
    path: PathBuf,
    file: File,
}

/// The path of the journal of the snapshot at `snapshot`: beside it, `FILE.journal`.
pub fn path_of(snapshot: &Path) -> PathBuf {
    let mut name = snapshot.file_name().unwrap_or_default().to_os_string();
    name.push(".journal");
    snapshot.with_file_name(name)
}

/// A journal change as its line holds it.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(untagged)]
enum Line {
    Put(String, String, String),
    Delete(String, String),
}

impl Line {
    fn of(id: &str, json: Option<&str>) -> Line {
        match json {
            Some(json) => Line::Put("put".into(), id.into(), json.into()),
            None => Line::Delete("delete".into(), id.into()),
        }
    }

    /// The change: the record's id and its JSON (`None`: deleted); `None` for a line of
    /// another shape.
    fn change(self) -> Option<(String, Option<String>)> {
        match self {
            Line::Put(op, id, json) if op == "put" => Some((id, Some(json))),
            Line::Delete(op, id) if op == "delete" => Some((id, None)),
            _ => None,
        }
    }
}

/// An I/O failure of the journal, as a store error.
fn disk_error(source: std::io::Error) -> StoreError {
    StoreError::Disk {
        store: STORE,
        source: source.into(),
    }
}

impl Journal {
    /// Opens (or creates, readable by its owner only) the journal at `path`, applies the
    /// changes it holds to `records` in order, and keeps it open for appending; how many
    /// changes it held.
    pub fn open(path: &Path, records: &Records) -> Result<(Journal, usize), StoreError> {
        let mut options = OpenOptions::new();
        options.read(true).append(true).create(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let file = options.open(path).map_err(disk_error)?;
        let mut replayed = 0;
        let mut valid_bytes = 0_u64;
        let mut reader = BufReader::new(&file);
        let mut line = String::new();
        loop {
            line.clear();
            let read = reader.read_line(&mut line).map_err(disk_error)?;
            // A line without its newline was cut short by a crash: it was never answered.
            if read == 0 || !line.ends_with('\n') {
                break;
            }
            let Some((id, json)) = serde_json::from_str::<Line>(&line)
                .ok()
                .and_then(Line::change)
            else {
                break;
            };
            records.apply(&id, json.as_deref());
            replayed += 1;
            valid_bytes += read as u64;
        }
        drop(reader);
        // What follows the last whole line goes, so that the next change starts a line.
        if file.metadata().map_err(disk_error)?.len() != valid_bytes {
            file.set_len(valid_bytes).map_err(disk_error)?;
        }
        let open = Open {
            path: path.to_path_buf(),
            file,
        };
        Ok((Journal(Arc::new(Mutex::new(open))), replayed))
    }

    fn lock(&self) -> MutexGuard<'_, Open> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Applies a change to `records` and appends it, synced, under the journal's lock (a
    /// snapshot's `mark` sees both or neither); the record's previous JSON. When the journal
    /// cannot be written, the change is undone and the error returned: nothing half-applied.
    pub fn record(
        &self,
        records: &Records,
        id: &str,
        json: Option<&str>,
    ) -> Result<Option<String>, StoreError> {
        let mut text =
            serde_json::to_string(&Line::of(id, json)).map_err(|e| StoreError::Disk {
                store: STORE,
                source: e.into(),
            })?;
        text.push('\n');
        let mut open = self.lock();
        let before = records.apply(id, json);
        let written = open
            .file
            .write_all(text.as_bytes())
            .and_then(|()| open.file.sync_data());
        if let Err(error) = written {
            records.apply(id, before.as_deref());
            return Err(disk_error(error));
        }
        Ok(before)
    }

    /// Runs `encode` (a snapshot encoding the records) under the journal's lock, and returns
    /// what it returns with the journal's length then: every change before that length is in
    /// what `encode` saw.
    pub fn mark<T>(&self, encode: impl FnOnce() -> T) -> (T, u64) {
        let open = self.lock();
        let length = open.file.metadata().map(|m| m.len()).unwrap_or(0);
        (encode(), length)
    }

    /// After a snapshot marked at `length` is on disk: drops the changes before `length`,
    /// keeping any made since (rewritten to a new file, synced, renamed over the journal).
    pub fn compact(&self, length: u64) -> std::io::Result<()> {
        let mut open = self.lock();
        let total = open.file.metadata()?.len();
        if total == length {
            open.file.set_len(0)?;
            return open.file.sync_data();
        }
        let mut rest = Vec::with_capacity((total.saturating_sub(length)) as usize);
        let mut reader = File::open(&open.path)?;
        reader.seek(SeekFrom::Start(length))?;
        reader.read_to_end(&mut rest)?;
        let mut temporary_name = open.path.file_name().unwrap_or_default().to_os_string();
        temporary_name.push(".tmp");
        let temporary = open.path.with_file_name(temporary_name);
        let mut options = OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut file = options.open(&temporary)?;
        file.write_all(&rest)?;
        file.sync_all()?;
        fs::rename(&temporary, &open.path)?;
        open.file = OpenOptions::new()
            .read(true)
            .append(true)
            .open(&open.path)?;
        Ok(())
    }

    /// The journal's length in bytes (what a snapshot would compact).
    pub fn len(&self) -> u64 {
        self.lock().file.metadata().map(|m| m.len()).unwrap_or(0)
    }

    /// Whether the journal holds no change.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_read_back_in_order_and_a_torn_line_ends_the_reading() {
        let dir = tempfile::tempdir().expect("a directory");
        let path = dir.path().join("s.journal");
        let records = Records::default();
        let (journal, replayed) = Journal::open(&path, &records).expect("open");
        assert_eq!(replayed, 0);
        journal
            .record(&records, "a", Some("{\"n\":1}"))
            .expect("put");
        journal
            .record(&records, "b", Some("two\nlines"))
            .expect("put");
        journal.record(&records, "a", None).expect("delete");
        drop(journal);
        let mut torn = OpenOptions::new().append(true).open(&path).expect("open");
        torn.write_all(b"[\"put\",\"c\",\"cut sho").expect("write");
        drop(torn);
        let again = Records::default();
        let (journal, replayed) = Journal::open(&path, &again).expect("reopen");
        assert_eq!(replayed, 3);
        assert_eq!(again.get("a"), None);
        assert_eq!(again.get("b").as_deref(), Some("two\nlines"));
        assert_eq!(again.get("c"), None, "a torn line was never answered");
        journal
            .record(&again, "d", Some("{}"))
            .expect("put after a torn line");
        let third = Records::default();
        let (_, replayed) = Journal::open(&path, &third).expect("reopen");
        assert_eq!((replayed, third.get("d").as_deref()), (4, Some("{}")));
    }

    #[test]
    fn compaction_keeps_only_changes_after_the_mark() {
        let dir = tempfile::tempdir().expect("a directory");
        let path = dir.path().join("s.journal");
        let records = Records::default();
        let (journal, _) = Journal::open(&path, &records).expect("open");
        journal.record(&records, "a", Some("1")).expect("put");
        let ((), length) = journal.mark(|| ());
        journal.record(&records, "b", Some("2")).expect("put");
        journal.compact(length).expect("compact");
        let read = Records::default();
        let (journal, replayed) = Journal::open(&path, &read).expect("reopen");
        assert_eq!(replayed, 1);
        assert_eq!((read.get("a"), read.get("b").as_deref()), (None, Some("2")));
        let ((), length) = journal.mark(|| ());
        journal.compact(length).expect("compact");
        assert!(journal.is_empty());
    }
}
