//! The task that owns one connection's socket: it writes the calls sent to it, gathered, and
//! hands each reply to its call, in order. One task does both, so that a call costs one
//! hand-off there and one back. While earlier calls wait on Redis, a write is put off as long
//! as putting it off lets more calls join it (the requests woken by the last replies send
//! theirs meanwhile); a call alone goes at once. A connection that fails, or leaves its oldest
//! call unanswered for far too long, fails every call on it; the next call opens another.

use std::collections::VecDeque;
use std::future::Future;
use std::io::ErrorKind;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use redis::{RedisError, RedisResult};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

use super::queue::{Queue, Reply};
use super::resp::next_reply;
use super::{closed_by_redis, io_error};
use crate::redis::pipeline::PipelineCounts;

/// The most bytes of calls one write gathers before it goes.
const MAX_WRITE: usize = 64 * 1024;

/// How much is read at once.
const READ_CHUNK: usize = 16 * 1024;

/// A call written and waiting for its reply.
struct Waiting {
    reply: Reply,
    written: Instant,
}

/// The connection task's state.
pub(super) struct Serving {
    stream: TcpStream,
    calls: Arc<Queue>,
    /// Bytes of calls not yet written.
    out: Vec<u8>,
    /// The calls whose bytes are in `out`, in order.
    unsent: Vec<Reply>,
    /// The calls written, in order: each reply is the first one's.
    waiting: VecDeque<Waiting>,
    /// Bytes read and not yet taken as replies: `input[taken..filled]`.
    input: Vec<u8>,
    taken: usize,
    filled: usize,
    /// A write left bytes behind (the socket was full): the next one goes as soon as it can.
    halfway: bool,
    /// The calls gathered when the write was last put off: it is put off again only while
    /// that grows.
    held: Option<usize>,
    /// How long the oldest call may wait on Redis before the connection counts as dead.
    give_up_after: Duration,
    /// Armed while calls wait: when the oldest of them is overdue.
    overdue: Pin<Box<Sleep>>,
    armed: bool,
    counts: Arc<PipelineCounts>,
}

impl Serving {
    /// The task of `stream`, with what was read past the greeting's replies.
    pub(super) fn new(
        stream: TcpStream,
        calls: Arc<Queue>,
        leftover: &[u8],
        give_up_after: Duration,
        counts: Arc<PipelineCounts>,
    ) -> Serving {
        let mut input = vec![0; READ_CHUNK.max(leftover.len() * 2)];
        input[..leftover.len()].copy_from_slice(leftover);
        Serving {
            stream,
            calls,
            out: Vec::with_capacity(4096),
            unsent: Vec::new(),
            waiting: VecDeque::new(),
            input,
            taken: 0,
            filled: leftover.len(),
            halfway: false,
            held: None,
            give_up_after,
            overdue: Box::pin(tokio::time::sleep(give_up_after)),
            armed: false,
            counts,
        }
    }

    /// Whether to put the write of the unsent calls off once more: while earlier calls wait
    /// on Redis, and the last time it was put off, more calls joined.
    fn hold(&mut self) -> bool {
        let gathered = self.unsent.len();
        let worth = !self.waiting.is_empty()
            && self.out.len() < MAX_WRITE
            && self.held.is_none_or(|before| gathered > before);
        self.held = worth.then_some(gathered);
        worth
    }

    /// Writes `out`; the calls in it wait for their replies from now.
    fn write(&mut self, cx: &mut Context<'_>) -> Poll<RedisResult<()>> {
        if !self.unsent.is_empty() {
            let now = Instant::now();
            let calls = self.unsent.len() as u64;
            self.waiting
                .extend(self.unsent.drain(..).map(|reply| Waiting {
                    reply,
                    written: now,
                }));
            // A write of several calls is a pipeline, as implicit pipelining counts them.
            if calls > 1 {
                self.counts.pipelines.fetch_add(1, Ordering::Relaxed);
                self.counts.calls.fetch_add(calls, Ordering::Relaxed);
            }
        }
        let mut written = 0;
        while written < self.out.len() {
            match Pin::new(&mut self.stream).poll_write(cx, &self.out[written..]) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(closed_by_redis())),
                Poll::Ready(Ok(n)) => written += n,
                Poll::Ready(Err(error)) => return Poll::Ready(Err(error.into())),
                Poll::Pending => break,
            }
        }
        self.out.drain(..written);
        if self.out.is_empty() {
            Poll::Ready(Ok(()))
        } else {
            Poll::Pending
        }
    }

    /// Reads what Redis sent and hands out every whole reply; whether it read any (when
    /// not, the task is woken when there is more).
    fn read(&mut self, cx: &mut Context<'_>) -> RedisResult<bool> {
        let mut read_any = false;
        loop {
            if self.filled == self.input.len() {
                self.make_room();
            }
            let mut buffer = ReadBuf::new(&mut self.input[self.filled..]);
            match Pin::new(&mut self.stream).poll_read(cx, &mut buffer) {
                Poll::Ready(Ok(())) if buffer.filled().is_empty() => return Err(closed_by_redis()),
                Poll::Ready(Ok(())) => {
                    self.filled += buffer.filled().len();
                    read_any = true;
                    self.hand_out()?;
                }
                Poll::Ready(Err(error)) => return Err(error.into()),
                Poll::Pending => return Ok(read_any),
            }
        }
    }

    /// Room to read into: what is not taken moves to the front, and the buffer grows when a
    /// reply fills it.
    fn make_room(&mut self) {
        if self.taken > 0 {
            self.input.copy_within(self.taken..self.filled, 0);
            self.filled -= self.taken;
            self.taken = 0;
        } else {
            let grown = self.input.len() * 2;
            self.input.resize(grown, 0);
        }
    }

    /// Hands each whole reply read to the call that waits first.
    fn hand_out(&mut self) -> RedisResult<()> {
        while let Some((reply, length)) = next_reply(&self.input[self.taken..self.filled]) {
            self.taken += length;
            let Some(call) = self.waiting.pop_front() else {
                return Err(io_error(
                    ErrorKind::ConnectionAborted,
                    "Redis sent a reply no call asked for",
                ));
            };
            // A caller past its deadline has gone: its reply has no one to read it.
            let _ = call.reply.send(reply);
        }
        if self.taken == self.filled {
            self.taken = 0;
            self.filled = 0;
        }
        if self.waiting.is_empty() {
            self.armed = false;
        }
        Ok(())
    }

    /// Fails the connection when its oldest call has waited too long on Redis.
    fn watch(&mut self, cx: &mut Context<'_>) -> RedisResult<()> {
        let Some(oldest) = self.waiting.front() else {
            return Ok(());
        };
        let due = oldest.written + self.give_up_after;
        if !self.armed {
            self.overdue.as_mut().reset(due);
            self.armed = true;
        }
        while self.overdue.as_mut().poll(cx).is_ready() {
            let Some(oldest) = self.waiting.front() else {
                break;
            };
            let due = oldest.written + self.give_up_after;
            if due <= Instant::now() {
                return Err(io_error(
                    ErrorKind::TimedOut,
                    "Redis left a call unanswered for too long: the connection is replaced",
                ));
            }
            self.overdue.as_mut().reset(due);
        }
        Ok(())
    }

    /// Replies in, calls out, until there is nothing to do but wait; `Ready(Ok)` when the
    /// store is gone and no call waits.
    fn turn(&mut self, cx: &mut Context<'_>) -> Poll<RedisResult<()>> {
        loop {
            // Replies first: the requests they wake send their next calls into this write.
            let read_any = self.read(cx)?;
            // The calls left so far, into `out`; none, and the store let the connection go.
            let ended = !self.calls.take(cx.waker(), &mut self.out, &mut self.unsent);
            if ended && self.waiting.is_empty() && self.out.is_empty() {
                return Poll::Ready(Ok(()));
            }
            if !self.out.is_empty() {
                if !self.halfway && !ended && self.hold() {
                    // Behind the tasks ready to run: the requests just answered among them.
                    cx.waker().wake_by_ref();
                    self.watch(cx)?;
                    return Poll::Pending;
                }
                self.held = None;
                self.halfway = self.write(cx)?.is_pending();
            }
            self.watch(cx)?;
            if !read_any {
                return Poll::Pending;
            }
        }
    }

    /// Fails every call on the connection with `error`, and every call sent to it after.
    fn fail_all(&mut self, error: &RedisError) {
        let waiting = self.waiting.drain(..).map(|call| call.reply);
        for reply in waiting.chain(self.unsent.drain(..)) {
            let _ = reply.send(Err(error.clone()));
        }
        self.calls.fail(error);
    }
}

impl Future for Serving {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        match this.turn(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(())) => Poll::Ready(()),
            Poll::Ready(Err(error)) => {
                tracing::debug!(%error, "the connection to Redis failed");
                this.fail_all(&error);
                Poll::Ready(())
            }
        }
    }
}
