//! Where requests leave their calls for a connection's task: each request encodes its command
//! straight into the bytes of the next write, under a short lock, and wakes the task only when
//! it is the first call since the task last took them. Nothing a request allocates is freed by
//! the task, nor the other way round, but the reply's channel.

use std::sync::{Mutex, MutexGuard};
use std::task::Waker;
use std::time::Instant;

use futures_util::task::AtomicWaker;
use redis::{RedisError, RedisResult};

use crate::redis::command::Command;
use crate::redis::command::Integers;
use tokio::sync::oneshot;

/// Where a call's reply goes.
pub(super) type Reply = oneshot::Sender<RedisResult<Integers>>;

/// A call left for the task: where its reply goes, and when its caller stops waiting.
pub(super) struct Pending {
    pub(super) reply: Reply,
    pub(super) deadline: Instant,
}

/// The calls left for a connection's task.
#[derive(Default)]
pub(super) struct Queue {
    waiting: Mutex<Calls>,
    task: AtomicWaker,
}

/// Calls not yet taken: their bytes, in order, and where their replies go.
#[derive(Default)]
pub(super) struct Calls {
    pub(super) bytes: Vec<u8>,
    pub(super) replies: Vec<Pending>,
    /// No more calls are taken: the connection failed, or the store let it go.
    pub(super) closed: bool,
}

impl Queue {
    fn lock(&self) -> MutexGuard<'_, Calls> {
        self.waiting
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Leaves `command` for the task; its reply goes to `reply`, by `deadline` or as a
    /// timeout. `Err(reply)` when the connection takes no more calls.
    pub(super) fn push(
        &self,
        command: &impl Command,
        reply: Reply,
        deadline: Instant,
    ) -> Result<(), Reply> {
        let mut calls = self.lock();
        if calls.closed {
            return Err(reply);
        }
        command.write_resp(&mut calls.bytes);
        calls.replies.push(Pending { reply, deadline });
        let first = calls.replies.len() == 1;
        drop(calls);
        if first {
            self.task.wake();
        }
        Ok(())
    }

    /// Whether calls are still taken.
    pub(super) fn is_open(&self) -> bool {
        !self.lock().closed
    }

    /// Moves the calls left so far to the end of `bytes` and `replies`; `false` when the
    /// store let the connection go and none are left. The task is woken by the next call.
    pub(super) fn take(
        &self,
        task: &Waker,
        bytes: &mut Vec<u8>,
        replies: &mut Vec<Pending>,
    ) -> bool {
        self.task.register(task);
        let mut calls = self.lock();
        if calls.replies.is_empty() {
            return !calls.closed;
        }
        if bytes.is_empty() {
            std::mem::swap(bytes, &mut calls.bytes);
        } else {
            bytes.extend_from_slice(&calls.bytes);
            calls.bytes.clear();
        }
        replies.append(&mut calls.replies);
        true
    }

    /// Takes no more calls (the store let the connection go): the task ends once the calls
    /// on it are answered.
    pub(super) fn close(&self) {
        self.lock().closed = true;
        self.task.wake();
    }

    /// Takes no more calls, and fails those left with `error`.
    pub(super) fn fail(&self, error: &RedisError) {
        let replies = {
            let mut calls = self.lock();
            calls.closed = true;
            calls.bytes.clear();
            std::mem::take(&mut calls.replies)
        };
        for call in replies {
            let _ = call.reply.send(Err(error.clone()));
        }
    }
}
