//! The recorder's thread: turns queued calls into lines (hashing values when asked), writes
//! them buffered, flushes when the queue is idle, moves the file to `<path>.1` when it would
//! pass its bound, and counts what it could not write instead of failing.

use std::collections::HashSet;

/// The (key, value) pairs a config names exactly.
type NamedValues = HashSet<(String, String)>;
use std::borrow::Cow;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use siphasher::sip::SipHasher13;

use super::format::{Header, Line, LineDescriptor, Override};
use super::{Message, Pending, RecordCounts, RecordError, RecordSettings};
use sluice_config::Config;
use sluice_limiter::ticket;

/// How long the writer sleeps when the queue is empty (after flushing what it wrote).
const IDLE_SLEEP: Duration = Duration::from_millis(10);
/// After a failed write, how long before the file is opened again.
const REOPEN_AFTER: Duration = Duration::from_secs(1);

/// The file being written.
pub(super) struct Output {
    path: PathBuf,
    header: String,
    max_bytes: u64,
    file: Option<BufWriter<File>>,
    bytes: u64,
    failed_at: Option<Instant>,
    counts: Arc<RecordCounts>,
}

impl Output {
    /// Moves an existing file aside and starts a new one with `header`.
    pub(super) fn open(
        settings: &RecordSettings,
        header: &Header,
        counts: Arc<RecordCounts>,
    ) -> Result<Output, RecordError> {
        let header = serde_json::to_string(header).unwrap_or_default() + "\n";
        let mut output = Output {
            path: settings.path.clone(),
            header,
            max_bytes: settings.max_bytes,
            file: None,
            bytes: 0,
            failed_at: None,
            counts,
        };
        output.start_file().map_err(|source| RecordError {
            path: settings.path.clone(),
            source,
        })?;
        Ok(output)
    }

    /// `<path>.1`: where a full file goes.
    fn aside(&self) -> PathBuf {
        let mut name = self.path.clone().into_os_string();
        name.push(".1");
        PathBuf::from(name)
    }

    /// Moves the file aside when it holds calls, and starts a new one with the header.
    fn start_file(&mut self) -> std::io::Result<()> {
        if let Some(mut file) = self.file.take() {
            file.flush()?;
        }
        if std::fs::metadata(&self.path).is_ok_and(|m| m.len() > 0) {
            std::fs::rename(&self.path, self.aside())?;
            self.counts.rotations.fetch_add(1, Ordering::Relaxed);
        }
        let mut file = BufWriter::with_capacity(64 * 1024, File::create(&self.path)?);
        file.write_all(self.header.as_bytes())?;
        self.bytes = self.header.len() as u64;
        self.file = Some(file);
        Ok(())
    }

    /// Writes one line, moving the file aside first when it would pass its bound; a failure
    /// drops the line, counted, and the file is opened again a second later.
    fn write(&mut self, line: &[u8]) {
        if let Some(failed_at) = self.failed_at {
            if failed_at.elapsed() < REOPEN_AFTER {
                self.counts.write_failed.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
        let written = (|| {
            if self.file.is_none() || self.bytes + line.len() as u64 > self.max_bytes {
                self.start_file()?;
            }
            match self.file.as_mut() {
                Some(file) => file.write_all(line),
                None => Err(std::io::Error::other("no file")),
            }
        })();
        match written {
            Ok(()) => {
                if self.failed_at.take().is_some() {
                    tracing::info!(path = %self.path.display(), "recording again");
                }
                self.bytes += line.len() as u64;
                self.counts.recorded.fetch_add(1, Ordering::Relaxed);
                self.counts
                    .bytes
                    .fetch_add(line.len() as u64, Ordering::Relaxed);
            }
            Err(error) => self.failed(&error),
        }
    }

    fn flush(&mut self) {
        if let Some(file) = self.file.as_mut() {
            if let Err(error) = file.flush() {
                self.failed(&error);
            }
        }
    }

    /// A write that failed: counted, logged when the failures start, the file dropped.
    fn failed(&mut self, error: &std::io::Error) {
        self.counts.write_failed.fetch_add(1, Ordering::Relaxed);
        if self.failed_at.is_none() {
            tracing::warn!(path = %self.path.display(), %error, "cannot write the recording: calls are dropped (sluice_record_dropped_total) until it can");
        }
        self.failed_at = Some(Instant::now());
        self.file = None;
    }
}

/// Keyed hashes of descriptor values, keeping those the config names exactly.
pub(super) struct Hashing {
    keys: (u64, u64),
    /// The config last seen, and the (key, value) pairs it names.
    named: Option<(Arc<Config>, NamedValues)>,
}

impl Hashing {
    /// Hashing under `secret`, or a random key of this process.
    pub(super) fn new(secret: Option<&str>) -> Hashing {
        use std::hash::{BuildHasher, Hasher};
        let keys = match secret {
            Some(secret) => {
                let half = |seed: u64| {
                    let mut hasher = SipHasher13::new_with_keys(seed, !seed);
                    hasher.write(secret.as_bytes());
                    hasher.finish()
                };
                (half(1), half(2))
            }
            None => {
                let random = std::collections::hash_map::RandomState::new();
                (random.hash_one(1_u8), random.hash_one(2_u8))
            }
        };
        Hashing { keys, named: None }
    }

    /// `value` of `key` as recorded: kept when `config` names it (or it is a token: a replay
    /// pairs a release or a return with its opening by it), else `#` and 16 hex digits.
    fn value(&mut self, config: &Arc<Config>, key: &str, value: &str) -> String {
        let token = !ticket::is_matched(key);
        if token || self.names(config, key, value) {
            return value.to_string();
        }
        use std::hash::Hasher;
        let mut hasher = SipHasher13::new_with_keys(self.keys.0, self.keys.1);
        hasher.write(key.as_bytes());
        hasher.write_u8(0);
        hasher.write(value.as_bytes());
        format!("#{:016x}", hasher.finish())
    }

    fn names(&mut self, config: &Arc<Config>, key: &str, value: &str) -> bool {
        let current = self
            .named
            .as_ref()
            .is_some_and(|(seen, _)| Arc::ptr_eq(seen, config));
        if !current {
            // One config at a time: a reload replaces the set.
            self.named = Some((config.clone(), config.named_values()));
        }
        self.named
            .as_ref()
            .is_some_and(|(_, named)| named.contains(&(key.to_string(), value.to_string())))
    }
}

/// Appends the line of `pending` to `out`.
fn line(pending: &Pending, hashing: &mut Option<Hashing>, out: &mut Vec<u8>) {
    let descriptors = pending
        .request
        .descriptors
        .iter()
        .map(|d| LineDescriptor {
            entries: d
                .entries
                .iter()
                .map(|e| {
                    let value = match (hashing.as_mut(), &pending.config) {
                        (Some(hashing), Some(config)) => {
                            Cow::Owned(hashing.value(config, &e.key, &e.value))
                        }
                        _ => Cow::Borrowed(e.value.as_str()),
                    };
                    (e.key.as_str(), value)
                })
                .collect(),
            hits_addend: d.hits_addend,
            limit: d.limit.map(|l| Override {
                requests_per_unit: l.requests_per_unit,
                unit: l.unit,
            }),
        })
        .collect();
    let line = Line {
        t: pending.t,
        domain: &pending.request.domain,
        hits_addend: pending.request.hits_addend,
        descriptors,
        code: pending.code,
        statuses: &pending.statuses,
        lease: pending.lease.as_deref(),
        ticket: pending.ticket.as_deref(),
    };
    if serde_json::to_writer(&mut *out, &line).is_ok() {
        out.push(b'\n');
    }
}

/// Writes the calls `receiver` brings until it says stop (or every sender is gone): whatever
/// is queued, then, the queue empty, a flush and a short sleep. The writer never blocks on
/// the queue, so a call handed over never has to wake it.
pub(super) fn run(receiver: &Receiver<Message>, mut output: Output, mut hashing: Option<Hashing>) {
    let mut buffer = Vec::with_capacity(512);
    let mut unflushed = false;
    loop {
        match receiver.try_recv() {
            Ok(Message::Call(pending)) => {
                buffer.clear();
                line(&pending, &mut hashing, &mut buffer);
                output.write(&buffer);
                unflushed = true;
            }
            Ok(Message::Stop) | Err(TryRecvError::Disconnected) => {
                output.flush();
                return;
            }
            Err(TryRecvError::Empty) => {
                if unflushed {
                    output.flush();
                    unflushed = false;
                }
                std::thread::sleep(IDLE_SLEEP);
            }
        }
    }
}
