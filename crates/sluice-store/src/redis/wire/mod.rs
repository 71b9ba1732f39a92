//! The request path's own connection to a single Redis over plain TCP, under the default
//! (adaptive) pipelining: the script calls go through one task that owns the socket (`serve`)
//! and read their replies without building redis-rs's values (`resp`). It does what redis-rs's
//! connection manager and the pipelining task did for these calls with two fewer hand-offs
//! a call. Everything else (loading the scripts, the admin API, health, TLS, Sentinel, a
//! Cluster, explicit pipelining windows) keeps redis-rs's connection.
//!
//! There is one connection a serving lane (`crate::lane`): a call goes on its thread's own,
//! which that thread opened and whose task it runs, so that the calls of a lane never wake a
//! task on another core. Lanes past `LANES` share.
//!
//! A connection that fails fails the calls on it; the lane's next call opens another (one at a
//! time, and at most once per `RETRY_AFTER` while Redis cannot be reached, the calls in
//! between failing at once with the last attempt's error).

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

/// The lanes with a connection of their own; a lane past them shares lane `lane % LANES`'s.
const LANES: usize = 64;

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
    lanes: Box<[Lane]>,
}

/// One lane's connection.
#[derive(Default)]
struct Lane {
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
            lanes: (0..LANES).map(|_| Lane::default()).collect(),
        })
    }

    /// The current thread's lane.
    fn lane(&self) -> &Lane {
        &self.lanes[crate::lane::current() % self.lanes.len()]
    }

    /// Sends `command` and waits for its reply, a list of integers, until `deadline`
    /// (`past_deadline` then). The command is written into the next write before the future
    /// is first polled; what the future holds while it waits is the reply's channel (and,
    /// when a connection has to be opened first, a box of that rarer wait). The connection's
    /// task keeps the deadline, so that a call costs no timer of its own.
    pub(super) fn send(
        &self,
        command: impl Command,
        deadline: Instant,
    ) -> impl Future<Output = RedisResult<Integers>> + Send + '_ {
        let (reply, answer) = oneshot::channel();
        let lane = self.lane();
        let pushed = match &*lane.open.load() {
            Some(open) => open.calls.push(&command, reply, deadline),
            None => Err(reply),
        };
        // No connection, or the one there just failed.
        let opening = pushed
            .err()
            .map(|reply| Box::pin(self.push_on_new(lane, command.into_cmd(), reply, deadline)));
        async move {
            if let Some(opening) = opening {
                opening.await?;
            }
            answer.await.map_err(|_| gone())?
        }
    }

    /// Pushes `command` on `lane`'s open connection, opened now if needed, by `deadline`.
    async fn push_on_new(
        &self,
        lane: &Lane,
        command: Cmd,
        reply: Reply,
        deadline: Instant,
    ) -> RedisResult<()> {
        let pushed = async {
            let open = self.connect(lane).await?;
            open.calls
                .push(&command, reply, deadline)
                .map_err(|_| gone())
        };
        tokio::time::timeout_at(deadline.into(), pushed)
            .await
            .map_err(|_| past_deadline())?
    }

    /// `lane`'s open connection, opened now if there is none (or another call just opened
    /// it). Its task runs on the current thread's runtime: the lane's.
    async fn connect(&self, lane: &Lane) -> RedisResult<Arc<Open>> {
        let mut last_failure = lane.connecting.lock().await;
        if let Some(open) = lane.open.load_full() {
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
                lane.open.store(Some(open.clone()));
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

/// The error of a call whose deadline passed before Redis answered it (the store reports
/// its own timeout for it).
pub(super) fn past_deadline() -> RedisError {
    io_error(
        ErrorKind::TimedOut,
        "Redis did not answer before the deadline",
    )
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

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    /// The command timeout of the tests' connections (they are given up after 2 s).
    const COMMAND_TIMEOUT: Duration = Duration::from_millis(150);

    /// A connection to a Redis the test plays (a listener that hands over what it accepts),
    /// opened at the first call.
    async fn wire_to_played_redis() -> (Wire, tokio::task::JoinHandle<std::io::Result<TcpStream>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
        let url = format!("redis://{}", listener.local_addr().expect("its address"));
        let counts = Arc::new(PipelineCounts::default());
        let wire = Wire::of(&url, Duration::from_secs(1), COMMAND_TIMEOUT, counts).expect("TCP");
        let accepted = tokio::spawn(async move { listener.accept().await.map(|(s, _)| s) });
        (wire, accepted)
    }

    /// Sends a PING due in `COMMAND_TIMEOUT` that Redis does not answer: it times out, and is
    /// told so within a second (not when the connection is given up); how long it waited.
    async fn unanswered_call(wire: &Wire) -> Duration {
        let started = Instant::now();
        let reply = wire
            .send(redis::cmd("PING"), started + COMMAND_TIMEOUT)
            .await;
        let waited = started.elapsed();
        assert!(reply.is_err_and(|e| e.is_timeout()), "the call timed out");
        assert!(waited < Duration::from_secs(1), "told in {waited:?}");
        waited
    }

    /// Reads from `redis` until it has been sent `calls` PINGs in all.
    async fn read_pings(redis: &mut TcpStream, calls: usize, seen: &mut Vec<u8>) {
        let mut chunk = [0u8; 256];
        while seen.windows(4).filter(|w| w == b"PING").count() < calls {
            let read = redis.read(&mut chunk).await.expect("a read");
            assert!(read > 0, "the connection closed");
            seen.extend_from_slice(&chunk[..read]);
        }
    }

    #[tokio::test]
    async fn each_call_is_told_at_its_own_deadline_and_late_replies_go_to_no_one() {
        let (wire, accepted) = wire_to_played_redis().await;
        // Redis reads the call and says nothing: the caller is told at its deadline.
        let waited = unanswered_call(&wire).await;
        assert!(waited >= COMMAND_TIMEOUT, "told early, in {waited:?}");
        let mut redis = accepted.await.expect("accepted").expect("a connection");
        let mut seen = Vec::new();
        read_pings(&mut redis, 1, &mut seen).await;

        // A call sent after the first expired has its own deadline, on the same connection,
        // long before the connection itself would be given up (2 s).
        unanswered_call(&wire).await;

        // Redis answers both at last, then the next call: each reply goes to its own call.
        let third = tokio::spawn(async move {
            let reply = wire
                .send(redis::cmd("PING"), Instant::now() + Duration::from_secs(5))
                .await;
            (reply, wire)
        });
        read_pings(&mut redis, 3, &mut seen).await;
        redis
            .write_all(b"*1\r\n:1\r\n*1\r\n:2\r\n*1\r\n:3\r\n")
            .await
            .expect("replies written");
        let (third, _wire) = third.await.expect("the third call");
        assert_eq!(third.expect("answered").as_slice(), [3]);
    }

    #[tokio::test]
    async fn a_call_sent_behind_a_later_deadline_is_still_told_at_its_own() {
        let (wire, accepted) = wire_to_played_redis().await;
        let wire = Arc::new(wire);
        // A call with a distant deadline first (Redis reads it and says nothing)...
        let far = {
            let wire = wire.clone();
            tokio::spawn(async move {
                let deadline = Instant::now() + Duration::from_millis(1800);
                wire.send(redis::cmd("PING"), deadline).await
            })
        };
        let mut redis = accepted.await.expect("accepted").expect("a connection");
        read_pings(&mut redis, 1, &mut Vec::new()).await;
        // ...then one with a near one, as a retry of an earlier request sends.
        unanswered_call(&wire).await;
        assert!(!far.is_finished(), "the distant call still waits");
        far.abort();
    }

    /// A Redis the test plays on a thread of its own, answering each PING with `:1`; how many
    /// connections it has taken.
    fn answering_redis() -> (String, Arc<std::sync::atomic::AtomicUsize>) {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
        let url = format!("redis://{}", listener.local_addr().expect("its address"));
        let taken = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = taken.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                std::thread::spawn(move || {
                    let mut chunk = [0u8; 512];
                    while let Ok(read) = stream.read(&mut chunk) {
                        let pings = chunk[..read].windows(4).filter(|w| w == b"PING").count();
                        if read == 0 || stream.write_all(&b"*1\r\n:1\r\n".repeat(pings)).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (url, taken)
    }

    /// A PING sent on lane `lane` from a thread and runtime of its own, which are gone once it
    /// is answered (with the task of any connection the call opened).
    fn ping_on_lane(wire: &Arc<Wire>, lane: usize) -> RedisResult<Integers> {
        let wire = wire.clone();
        std::thread::spawn(move || {
            crate::lane::enter(lane);
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            let deadline = Instant::now() + Duration::from_secs(1);
            // Bounded here too: a call pushed where no task serves would wait for ever.
            let call = wire.send(redis::cmd("PING"), deadline);
            runtime
                .block_on(async { tokio::time::timeout(Duration::from_secs(2), call).await })
                .unwrap_or_else(|_| Err(past_deadline()))
        })
        .join()
        .expect("the lane's thread")
    }

    #[test]
    fn each_lane_opens_its_own_connection_and_one_whose_runtime_is_gone_opens_another() {
        let (url, taken) = answering_redis();
        let counts = Arc::new(PipelineCounts::default());
        let wire =
            Arc::new(Wire::of(&url, Duration::from_secs(1), COMMAND_TIMEOUT, counts).expect("TCP"));
        assert_eq!(ping_on_lane(&wire, 1).expect("lane 1").as_slice(), [1]);
        assert_eq!(ping_on_lane(&wire, 2).expect("lane 2").as_slice(), [1]);
        assert_eq!(
            taken.load(std::sync::atomic::Ordering::SeqCst),
            2,
            "a connection a lane"
        );
        // Lane 1's runtime, and its connection's task with it, is gone: its next call opens
        // another connection rather than waiting on one no task serves.
        assert_eq!(
            ping_on_lane(&wire, 1).expect("lane 1 again").as_slice(),
            [1]
        );
        assert_eq!(taken.load(std::sync::atomic::Ordering::SeqCst), 3);
    }
}
