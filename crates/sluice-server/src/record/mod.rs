//! Recording decided calls (`serve --record FILE`, docs/record-replay.md): a sample of the
//! calls, each with what it got, handed off the request path through a bounded queue (a full
//! queue drops the call and counts it, never waits) to a thread that writes `format` lines,
//! moving the file aside when it grows past its bound. `sluice replay` reads them back.

pub mod format;
mod writer;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use metrics::Label;
use siphasher::sip::SipHasher13;

use format::{Code, Header, RecordedOptions, Status};
use sluice_config::Config;
use sluice_proto::rate_limit_response::Code as ProtoCode;
use sluice_proto::{RateLimitRequest, RateLimitResponse};
use sluice_store::series::{Reporting, Series};

/// How to record.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordSettings {
    pub path: PathBuf,
    /// The share of calls recorded, 0 to 1; a client's calls are kept or dropped whole.
    pub sample: f64,
    /// The file moves to `<path>.1` when it would grow past this.
    pub max_bytes: u64,
    /// Descriptor values become keyed hashes (those the config names stay).
    pub hash_values: bool,
    /// The hashes' secret; without one, a random key per process (stable within its files).
    pub hash_key: Option<String>,
    /// Calls waiting to be written at most; past it a call is dropped and counted.
    pub queue: usize,
    /// How the server decides, written in the header.
    pub options: RecordedOptions,
}

/// Why recording cannot start.
#[derive(Debug, thiserror::Error)]
#[error("cannot record to {path}: {source}")]
pub struct RecordError {
    pub path: PathBuf,
    pub source: std::io::Error,
}

/// What the recorder has done, for its metrics.
#[derive(Debug, Default)]
pub struct RecordCounts {
    pub recorded: AtomicU64,
    pub queue_full: AtomicU64,
    pub write_failed: AtomicU64,
    pub bytes: AtomicU64,
    pub rotations: AtomicU64,
}

/// A call on its way to the file.
pub(crate) enum Message {
    Call(Box<Pending>),
    /// Write what is queued, then stop.
    Stop,
}

/// A call and what it got, as the request path hands it over.
pub(crate) struct Pending {
    pub t: u64,
    pub code: Code,
    pub request: RateLimitRequest,
    pub statuses: Vec<Status>,
    pub lease: Option<String>,
    /// The token a modifier's ticket gave (`format::Call::ticket`).
    pub ticket: Option<String>,
    /// The config it was decided under, when values are hashed (those it names stay).
    pub config: Option<Arc<Config>>,
}

/// The recorder of a server.
pub struct Recorder {
    queue: SyncSender<Message>,
    /// A client is recorded when the hash of its descriptors falls below this.
    threshold: u64,
    hashes: bool,
    counts: Arc<RecordCounts>,
    writer: Mutex<Option<JoinHandle<()>>>,
}

impl Recorder {
    /// Opens the file (moving an existing one aside) and starts the writer; an error when
    /// the file cannot be written.
    pub fn start(settings: &RecordSettings) -> Result<Recorder, RecordError> {
        let header = Header {
            sluice_recording: format::VERSION,
            hashed_values: settings.hash_values,
            options: settings.options,
        };
        let counts = Arc::new(RecordCounts::default());
        let output = writer::Output::open(settings, &header, counts.clone())?;
        let (queue, receiver) = sync_channel(settings.queue.max(1));
        let hashing = settings
            .hash_values
            .then(|| writer::Hashing::new(settings.hash_key.as_deref()));
        let thread = std::thread::Builder::new()
            .name("sluice-record".into())
            .spawn(move || writer::run(&receiver, output, hashing))
            .map_err(|source| RecordError {
                path: settings.path.clone(),
                source,
            })?;
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss
        )]
        let threshold = if settings.sample >= 1.0 {
            u64::MAX
        } else {
            (settings.sample.max(0.0) * u64::MAX as f64) as u64
        };
        Ok(Recorder {
            queue,
            threshold,
            hashes: settings.hash_values,
            counts,
            writer: Mutex::new(Some(thread)),
        })
    }

    /// Hands `request` and what it got (`response`, decided at `t` µs under `config`) to the
    /// writer, when its client is in the sample; a full queue drops it.
    pub fn record(
        &self,
        t: u64,
        request: &RateLimitRequest,
        response: &RateLimitResponse,
        config: &Arc<Config>,
    ) {
        if self.threshold != u64::MAX && sample_hash(request) > self.threshold {
            return;
        }
        let statuses = response
            .statuses
            .iter()
            .map(|status| Status {
                code: if status.code == ProtoCode::OverLimit as i32 {
                    Code::OverLimit
                } else {
                    Code::Ok
                },
                limit: status.current_limit.as_ref().map(|l| l.name.clone()),
                remaining: status.limit_remaining,
            })
            .collect();
        let code = if response.overall_code == ProtoCode::OverLimit as i32 {
            Code::OverLimit
        } else {
            Code::Ok
        };
        let pending = Pending {
            t,
            code,
            request: request.clone(),
            statuses,
            lease: sluice_limiter::ticket::token_in(response, sluice_core::lease::LEASE_KEY),
            ticket: sluice_core::modifier::Modifiers::tickets()
                .iter()
                .find_map(|(_, ticket)| sluice_limiter::ticket::token_in(response, ticket.key)),
            config: self.hashes.then(|| config.clone()),
        };
        match self.queue.try_send(Message::Call(Box::new(pending))) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.counts.queue_full.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Writes what is queued and stops the writer (at shutdown).
    pub fn finish(&self) {
        let _ = self.queue.send(Message::Stop);
        let thread = self
            .writer
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        if let Some(thread) = thread {
            let _ = thread.join();
        }
    }
}

/// The sample's hash of a request: its domain and descriptors' entries, with a fixed key, so
/// every replica keeps the same clients.
fn sample_hash(request: &RateLimitRequest) -> u64 {
    use std::hash::Hasher;
    let mut hasher = SipHasher13::new_with_keys(0x736c_7569_6365, 0x7265_636f_7264);
    hasher.write(request.domain.as_bytes());
    for descriptor in &request.descriptors {
        for entry in &descriptor.entries {
            hasher.write(entry.key.as_bytes());
            hasher.write_u8(0);
            hasher.write(entry.value.as_bytes());
            hasher.write_u8(0);
        }
    }
    hasher.finish()
}

impl Reporting for Recorder {
    /// Calls recorded, dropped (by reason), bytes written and files moved aside.
    fn report(&self, series: &Series) {
        let counts = &self.counts;
        series.total(
            "sluice_record_calls_total",
            counts.recorded.load(Ordering::Relaxed),
        );
        for (reason, count) in [
            ("queue_full", &counts.queue_full),
            ("write_failed", &counts.write_failed),
        ] {
            series
                .counter(
                    "sluice_record_dropped_total",
                    vec![Label::new("reason", reason)],
                )
                .absolute(count.load(Ordering::Relaxed));
        }
        series.total(
            "sluice_record_bytes_total",
            counts.bytes.load(Ordering::Relaxed),
        );
        series.total(
            "sluice_record_rotations_total",
            counts.rotations.load(Ordering::Relaxed),
        );
    }
}
