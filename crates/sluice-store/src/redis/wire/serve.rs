//! The task that owns one connection's socket: it writes the calls sent to it, gathered, and
//! hands each reply to its call, in order. One task does both, so that a call costs one
//! hand-off there and one back. While earlier calls wait on Redis, a write is put off as long
//! as putting it off lets more calls join it (the requests woken by the last replies send
//! theirs meanwhile); a call alone goes at once.
//!
//! The task also keeps its calls' deadlines, with one timer for all of them: a call whose
//! deadline passes is told it timed out, and its reply, when it comes, is read and dropped.
//! (Calls are answered in order, so the next deadline is almost always the oldest waiting
//! call's.) A connection that fails, or leaves its oldest call unanswered for far too long,
//! fails every call on it; the next call opens another.

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

use super::queue::{Pending, Queue, Reply};
use super::resp::next_reply;
use super::{closed_by_redis, gone, io_error, past_deadline};
use crate::redis::pipeline::PipelineCounts;

/// The most bytes of calls one write gathers before it goes.
const MAX_WRITE: usize = 64 * 1024;

/// How much is read at once.
const READ_CHUNK: usize = 16 * 1024;

/// A call written and waiting for its reply.
struct Waiting {
    /// Where the reply goes; `None` once the caller was told its deadline passed.
    reply: Option<Reply>,
    deadline: Instant,
    written: Instant,
}

impl Waiting {
    /// Tells the caller its deadline passed, if it was not told yet.
    fn tell_timed_out(&mut self) {
        if let Some(caller) = self.reply.take() {
            let _ = caller.send(Err(past_deadline()));
        }
    }
}

/// The sooner of `soonest` so far, if any, and `deadline`.
fn sooner(soonest: Option<Instant>, deadline: Instant) -> Instant {
    soonest.map_or(deadline, |soonest| soonest.min(deadline))
}

/// The connection task's state.
pub(super) struct Serving {
    stream: TcpStream,
    calls: Arc<Queue>,
    /// Bytes of calls not yet written.
    out: Vec<u8>,
    /// The calls whose bytes are in `out`, in order.
    unsent: Vec<Pending>,
    /// The calls written, in order: each reply is the first one's.
    waiting: VecDeque<Waiting>,
    /// How many of the first `waiting` calls were told their deadline passed.
    expired: usize,
    /// The latest deadline of the calls written so far.
    latest: Instant,
    /// The soonest deadline of the calls written after one with a later deadline (a retry,
    /// or a request that sent its call a moment after one that started later), not yet
    /// told: they are not in deadline order, so they are looked for.
    straggler: Option<Instant>,
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
    /// Set while calls wait: the next deadline, or when the oldest call is overdue.
    overdue: Pin<Box<Sleep>>,
    /// When `overdue` is set to fire (`None` once it fired).
    due: Option<Instant>,
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
            expired: 0,
            latest: Instant::now(),
            straggler: None,
            input,
            taken: 0,
            filled: leftover.len(),
            halfway: false,
            held: None,
            give_up_after,
            overdue: Box::pin(tokio::time::sleep(give_up_after)),
            due: None,
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
            for call in self.unsent.drain(..) {
                let deadline = Instant::from_std(call.deadline);
                if deadline < self.latest {
                    self.straggler = Some(sooner(self.straggler, deadline));
                } else {
                    self.latest = deadline;
                }
                self.waiting.push_back(Waiting {
                    reply: Some(call.reply),
                    deadline,
                    written: now,
                });
            }
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
            self.expired = self.expired.saturating_sub(1);
            // A caller past its deadline was told so: its reply has no one to read it.
            if let Some(caller) = call.reply {
                let _ = caller.send(reply);
            }
        }
        if self.taken == self.filled {
            self.taken = 0;
            self.filled = 0;
        }
        Ok(())
    }

    /// Tells the calls whose deadline passed so, and fails the connection when its oldest
    /// call has waited too long on Redis.
    fn watch(&mut self, cx: &mut Context<'_>) -> RedisResult<()> {
        loop {
            // Nothing waits: the timer is left as it is, to be set when something is due
            // sooner than it fires.
            let Some(next) = self.next_due() else {
                return Ok(());
            };
            // Set again only when something is due sooner: most often the timer is left to
            // fire early, at a deadline of calls answered since, and set then.
            if self.due.is_none_or(|due| next < due) {
                self.overdue.as_mut().reset(next);
                self.due = Some(next);
            }
            if self.overdue.as_mut().poll(cx).is_pending() {
                return Ok(());
            }
            self.due = None;
            let now = Instant::now();
            self.expire(now);
            if let Some(oldest) = self.waiting.front() {
                if oldest.written + self.give_up_after <= now {
                    return Err(io_error(
                        ErrorKind::TimedOut,
                        "Redis left a call unanswered for too long: the connection is replaced",
                    ));
                }
            }
        }
    }

    /// When the calls waiting must next be looked at: the first deadline not yet passed (in
    /// order, or a straggler's), or when the oldest call makes the connection count as
    /// dead, whichever is sooner.
    fn next_due(&self) -> Option<Instant> {
        let oldest = self.waiting.front()?;
        let mut due = oldest.written + self.give_up_after;
        if let Some(next) = self.waiting.get(self.expired) {
            due = due.min(next.deadline);
        }
        if let Some(straggler) = self.straggler {
            due = due.min(straggler);
        }
        Some(due)
    }

    /// Tells each call past its deadline that it timed out: those in order, oldest first,
    /// then, when one is due, the stragglers among the rest.
    fn expire(&mut self, now: Instant) {
        while let Some(call) = self.waiting.get_mut(self.expired) {
            if call.deadline > now {
                break;
            }
            call.tell_timed_out();
            self.expired += 1;
        }
        if self.straggler.is_none_or(|straggler| straggler > now) {
            return;
        }
        // Rare: a look at every call not yet told, and the soonest left out of order.
        self.straggler = None;
        let mut latest: Option<Instant> = None;
        for call in self.waiting.iter_mut().skip(self.expired) {
            if call.reply.is_none() {
                continue;
            }
            if call.deadline <= now {
                call.tell_timed_out();
                continue;
            }
            if latest.is_some_and(|latest| call.deadline < latest) {
                self.straggler = Some(sooner(self.straggler, call.deadline));
            }
            latest = Some(latest.map_or(call.deadline, |latest| latest.max(call.deadline)));
        }
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
        let waiting = self.waiting.drain(..).filter_map(|call| call.reply);
        let unsent = self.unsent.drain(..).map(|call| call.reply);
        for reply in waiting.chain(unsent) {
            let _ = reply.send(Err(error.clone()));
        }
        self.calls.fail(error);
    }
}

/// A task dropped before it ended (its runtime shut down: a serving lane's, with its server)
/// takes no more calls, so that the lane's next call opens another connection; the calls it
/// held are told their connection was lost.
impl Drop for Serving {
    fn drop(&mut self) {
        self.calls.fail(&gone());
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
