//! The request path's own connection to a single Redis over plain TCP, under the default
//! (adaptive) pipelining: the script calls go through one task that owns the socket (`serve`)
//! and read their replies without building redis-rs's values (`resp`). It does what redis-rs's
//! connection manager and the pipelining task did for these calls with two fewer hand-offs
//! a call. Everything else (loading the scripts, the admin API, health, TLS, Sentinel, a
//! Cluster, explicit pipelining windows) keeps redis-rs's connection.
//!
//! A connection that fails fails the calls on it; the next call opens another (one at a time,
//! and at most once per `RETRY_AFTER` while Redis cannot be reached, the calls in between
//! failing at once with the last attempt's error).

mod queue;
mod resp;
mod serve;

use std::future::Future;
use std::io::ErrorKind;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;
use redis::{Cmd, ConnectionAddr, IntoConnectionInfo, ProtocolVersion, RedisError, RedisResult};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;

use super::command::Command;
use super::command::Integers;
use super::pipeline::PipelineCounts;
use queue::{Queue, Reply};
use serve::Serving;

/// How long after a failed attempt to connect the next one is made.
const RETRY_AFTER: Duration = Duration::from_millis(50);

/// The request path's connection to one Redis node.
pub(super) struct Wire {
    address: String,
    /// `AUTH` and `SELECT`, sent first when the URL asks for them.
    greeting: Vec<Cmd>,
    connect_timeout: Duration,
    /// How long the oldest call on a connection may wait before the connection counts as
    /// dead (`dead_after`).
    give_up_after: Duration,
    counts: Arc<PipelineCounts>,
    open: ArcSwapOption<Open>,
    /// One attempt to connect at a time; the last failed one, to fail calls at once until
    /// `RETRY_AFTER` has passed.
    connecting: tokio::sync::Mutex<Option<(Instant, RedisError)>>,
}

/// An open connection: where its calls go. Let go, its task ends once its calls are
/// answered.
struct Open {
    calls: Arc<Queue>,
}

impl Drop for Open {
    fn drop(&mut self) {
        self.calls.close();
    }
}

impl Wire {
    /// The connection of `url`, when it is a plain TCP one speaking RESP2 (else `None`: the
    /// calls keep redis-rs's connection).
    pub(super) fn of(
        url: &str,
        connect_timeout: Duration,
        command_timeout: Duration,
        counts: Arc<PipelineCounts>,
    ) -> Option<Wire> {
        let info = url.into_connection_info().ok()?;
        let ConnectionAddr::Tcp(host, port) = info.addr() else {
            return None;
        };
        let settings = info.redis_settings();
        if settings.protocol() != ProtocolVersion::RESP2 {
            return None;
        }
        let mut greeting = Vec::new();
        match (settings.username(), settings.password()) {
            (Some(user), Some(password)) => {
                greeting.push(redis::cmd("AUTH").arg(user).arg(password).to_owned())
            }
            (None, Some(password)) => greeting.push(redis::cmd("AUTH").arg(password).to_owned()),
            _ => {}
        }
        if settings.db() != 0 {
            greeting.push(redis::cmd("SELECT").arg(settings.db()).to_owned());
        }
        Some(Wire {
            address: format!("{host}:{port}"),
            greeting,
            connect_timeout,
            give_up_after: dead_after(command_timeout),
            counts,
            open: ArcSwapOption::empty(),
            connecting: tokio::sync::Mutex::new(None),
        })
    }

    /// Sends `command` and waits for its reply, a list of integers. The command is written
    /// into the next write before the future is first polled; what the future holds while it
    /// waits is the reply's channel (and, when a connection has to be opened first, a box of
    /// that rarer wait).
    pub(super) fn send(
        &self,
        command: impl Command,
    ) -> impl Future<Output = RedisResult<Integers>> + Send + '_ {
        let (reply, answer) = oneshot::channel();
        let pushed = match &*self.open.load() {
            Some(open) => open.calls.push(&command, reply),
            None => Err(reply),
        };
        // No connection, or the one there just failed.
        let opening = pushed
            .err()
            .map(|reply| Box::pin(self.push_on_new(command.into_cmd(), reply)));
        async move {
            if let Some(opening) = opening {
                opening.await?;
            }
            answer.await.map_err(|_| gone())?
        }
    }

    /// Pushes `command` on the open connection, opened now if needed.
    async fn push_on_new(&self, command: Cmd, reply: Reply) -> RedisResult<()> {
        let open = self.connect().await?;
        open.calls.push(&command, reply).map_err(|_| gone())
    }

    /// The open connection, opened now if there is none (or another call just opened it).
    async fn connect(&self) -> RedisResult<Arc<Open>> {
        let mut last_failure = self.connecting.lock().await;
        if let Some(open) = self.open.load_full() {
            if open.calls.is_open() {
                return Ok(open);
            }
        }
        if let Some((at, error)) = &*last_failure {
            if at.elapsed() < RETRY_AFTER {
                return Err(error.clone());
            }
        }
        match self.open().await {
            Ok(open) => {
                *last_failure = None;
                let open = Arc::new(open);
                self.open.store(Some(open.clone()));
                Ok(open)
            }
            Err(error) => {
                *last_failure = Some((Instant::now(), error.clone()));
                Err(error)
            }
        }
    }

    /// Opens a connection, greets Redis and starts its task.
    async fn open(&self) -> RedisResult<Open> {
        let opening = async {
            let mut stream = TcpStream::connect(&self.address).await?;
            stream.set_nodelay(true)?;
            let mut leftover = Vec::new();
            for command in &self.greeting {
                stream.write_all(&command.get_packed_command()).await?;
                read_one_reply(&mut stream, &mut leftover).await?;
            }
            Ok::<_, RedisError>((stream, leftover))
        };
        let (stream, leftover) = tokio::time::timeout(self.connect_timeout, opening)
            .await
            .map_err(|_| io_error(ErrorKind::TimedOut, "connecting to Redis timed out"))??;
        let calls = Arc::new(Queue::default());
        tokio::spawn(Serving::new(
            stream,
            calls.clone(),
            &leftover,
            self.give_up_after,
            self.counts.clone(),
        ));
        Ok(Open { calls })
    }
}

/// How long a connection may leave its oldest call unanswered before it is replaced: long
/// past the callers' own deadline (each gives up at `command_timeout` and says Redis did not
/// answer in time), so that a Redis paused for a while is waited for on the same connection,
/// while one that will never answer on it (a peer gone without a word) is left.
fn dead_after(command_timeout: Duration) -> Duration {
    (command_timeout * 5).max(Duration::from_secs(2))
}

/// Reads the reply to one greeting command off `buffer` (what was read and not yet taken)
/// and the stream: an error reply fails the connection with its code (WRONGPASS, NOAUTH).
async fn read_one_reply(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> RedisResult<()> {
    let mut chunk = [0u8; 512];
    loop {
        if let Some(length) = resp::frame_end(buffer) {
            let value = redis::parse_redis_value(&buffer[..length]);
            buffer.drain(..length);
            value?.extract_error()?;
            return Ok(());
        }
        let read = stream.read(&mut chunk).await?;
        if read == 0 {
            return Err(closed_by_redis());
        }
        buffer.extend_from_slice(&chunk[..read]);
    }
}

/// The error of a call whose connection went away before it was answered.
fn gone() -> RedisError {
    io_error(
        ErrorKind::ConnectionAborted,
        "the connection to Redis was lost",
    )
}

/// The error of a connection Redis closed.
fn closed_by_redis() -> RedisError {
    io_error(ErrorKind::ConnectionAborted, "Redis closed the connection")
}

/// A failure of the connection itself, as redis-rs reports one (an I/O error: the store
/// counts Redis unreachable).
fn io_error(kind: ErrorKind, what: &'static str) -> RedisError {
    RedisError::from(std::io::Error::new(kind, what))
}
