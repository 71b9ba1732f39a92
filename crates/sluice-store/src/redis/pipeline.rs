//! Implicit pipelining (`REDIS_PIPELINE_WINDOW`, `REDIS_PIPELINE_LIMIT`, as the reference's
//! radix client does it): the script calls of concurrent requests are gathered by one task for
//! up to a window of time, or up to a number of calls, and sent as one redis-rs pipeline: one
//! hand-off to the connection, one write and one reply to wait for per batch instead of per
//! call. Each call keeps its own reply, error included (a NOSCRIPT is the caller's to handle).
//! A batch that Redis does not answer within half as long again as the command timeout fails
//! (its callers have given up at their own deadline, and say so), so a hung Redis leaves no
//! batches piling up behind them.
//!
//! tokio's timers tick in milliseconds: a window under 1 ms is waited by yielding to the
//! requests being served (which is how their calls join the batch), and closes early when a
//! yield brought no call (none is coming soon: waiting on would only add latency and spin);
//! a longer one is waited by a timer.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::{Cmd, Pipeline, RedisResult};
use tokio::sync::mpsc::error::TryRecvError;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::connect::{Connection, Pipelining};

/// How many pipelines were sent and how many calls they held, for the batch sizes reached.
#[derive(Debug, Default)]
pub struct PipelineCounts {
    pub pipelines: AtomicU64,
    pub calls: AtomicU64,
}

/// One call waiting for its batch.
struct Queued {
    command: Cmd,
    reply: oneshot::Sender<RedisResult<Vec<i64>>>,
}

/// The handle requests send their calls through; the gathering task ends when it is dropped.
pub struct Pipeliner {
    queue: mpsc::Sender<Queued>,
}

/// Calls that may wait for a batch at once; past them, callers wait for room (within their
/// own deadline).
const QUEUE_CAPACITY: usize = 4096;

impl Pipeliner {
    /// Starts the task that gathers calls for `connection` as `pipelining` says; a batch
    /// not answered within 1.5 x `command_timeout` fails.
    pub fn start(
        connection: Connection,
        pipelining: Pipelining,
        command_timeout: Duration,
        counts: Arc<PipelineCounts>,
    ) -> Pipeliner {
        let (queue, calls) = mpsc::channel(QUEUE_CAPACITY);
        let sender = BatchSender {
            connection,
            timeout: command_timeout + command_timeout / 2,
        };
        tokio::spawn(gather_and_send(calls, sender, pipelining, counts));
        Pipeliner { queue }
    }

    /// Sends `command` in the next batch and waits for its own reply.
    pub async fn send(&self, command: Cmd) -> RedisResult<Vec<i64>> {
        let (reply, answer) = oneshot::channel();
        self.queue
            .send(Queued { command, reply })
            .await
            .map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}

/// The error of a call whose batch was never answered (the runtime is shutting down).
fn stopped() -> redis::RedisError {
    redis::RedisError::from((redis::ErrorKind::Io, "the Redis pipelining task stopped"))
}

/// The gathering task: a batch opens with a call and closes when the window has passed or
/// the limit is reached; it is then sent on a task of its own, so the next batch gathers
/// while this one is answered.
async fn gather_and_send(
    mut calls: mpsc::Receiver<Queued>,
    sender: BatchSender,
    pipelining: Pipelining,
    counts: Arc<PipelineCounts>,
) {
    while let Some(first) = calls.recv().await {
        let batch = gather(&mut calls, first, pipelining).await;
        counts.pipelines.fetch_add(1, Ordering::Relaxed);
        counts
            .calls
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        tokio::spawn(sender.clone().send(batch));
    }
}

/// `first` and the calls that join it within the window, up to the limit.
async fn gather(
    calls: &mut mpsc::Receiver<Queued>,
    first: Queued,
    pipelining: Pipelining,
) -> Vec<Queued> {
    let max = pipelining.max_batch();
    let mut batch = vec![first];
    let closes = Instant::now() + pipelining.window;
    // Sub-millisecond windows: the size of the batch when this task last yielded.
    let mut before_yield = 0;
    while batch.len() < max {
        match calls.try_recv() {
            Ok(call) => batch.push(call),
            Err(TryRecvError::Disconnected) => break,
            Err(TryRecvError::Empty) => {
                if Instant::now() >= closes {
                    break;
                }
                if pipelining.window < Duration::from_millis(1) {
                    // Every request ready to run has run during a yield: when none of them
                    // joined, none is coming soon, and waiting longer only adds latency.
                    if batch.len() == before_yield {
                        break;
                    }
                    before_yield = batch.len();
                    tokio::task::yield_now().await;
                } else {
                    match tokio::time::timeout_at(closes, calls.recv()).await {
                        Ok(Some(call)) => batch.push(call),
                        Ok(None) | Err(_) => break,
                    }
                }
            }
        }
    }
    batch
}

/// Where batches go, and how long Redis has to answer one.
#[derive(Clone)]
struct BatchSender {
    connection: Connection,
    timeout: Duration,
}

impl BatchSender {
    /// Sends `batch` as one pipeline and hands each call its own reply; a failure of the
    /// whole pipeline (the connection, the timeout) is every call's.
    async fn send(self, batch: Vec<Queued>) {
        let mut pipeline = Pipeline::with_capacity(batch.len());
        pipeline.ignore_errors();
        let mut replies = Vec::with_capacity(batch.len());
        for Queued { command, reply } in batch {
            pipeline.add_command(command);
            replies.push(reply);
        }
        let sent = self.connection.pipeline(&pipeline);
        let answered: RedisResult<Vec<RedisResult<Vec<i64>>>> =
            match tokio::time::timeout(self.timeout, sent).await {
                Ok(answered) => answered,
                Err(_) => Err(redis::RedisError::from((
                    redis::ErrorKind::Io,
                    "Redis did not answer a pipeline in time",
                ))),
            };
        hand_out(answered, replies);
    }
}

/// Hands each call of a batch its reply from `answered`.
fn hand_out(
    answered: RedisResult<Vec<RedisResult<Vec<i64>>>>,
    replies: Vec<oneshot::Sender<RedisResult<Vec<i64>>>>,
) {
    let error = match answered {
        Ok(answers) if answers.len() == replies.len() => {
            for (reply, answer) in replies.into_iter().zip(answers) {
                // A caller past its deadline has gone: its reply has no one to read it.
                let _ = reply.send(answer);
            }
            return;
        }
        Ok(answers) => redis::RedisError::from((
            redis::ErrorKind::Parse,
            "a pipeline's replies do not match its calls",
            format!("{} replies for {} calls", answers.len(), replies.len()),
        )),
        Err(error) => error,
    };
    for reply in replies {
        let _ = reply.send(Err(error.clone()));
    }
}
