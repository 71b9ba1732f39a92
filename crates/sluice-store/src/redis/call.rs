//! One script call of the Redis store: its hits' keys and arguments (`HitCall`), the command
//! that carries them (`script_call`), what the script does with them (`Mode`), the call
//! itself, healed after Redis lost the scripts (NOSCRIPT), and its read-only twin, asked when
//! Redis refuses writes (out of memory, a read-only replica).

use std::sync::atomic::Ordering;
use std::time::Instant;

use redis::{Cmd, RedisError, RedisResult};
use tracing::Instrument;

use smallvec::SmallVec;

use super::args::ScriptArgs;
use super::command::Integers;
use super::condition::refuses_writes;
use super::span as spans;
use super::{Backend, RedisStore};

impl RedisStore {
    /// Runs one script call of `calls` (a request's hits, or one shard's) on `backend` as
    /// `mode` says, by `deadline`: FCALL of the library, or EVALSHA of the script. When Redis
    /// lost them (a flush, a restart, a failover: "Function not found", NOSCRIPT), loads them
    /// again for the calls to come and sends the code itself (EVAL), which cannot be lost
    /// even if flushed again meanwhile.
    pub(super) async fn call(
        &self,
        backend: &Backend,
        calls: &[HitCall],
        mode: Mode,
        deadline: Instant,
    ) -> RedisResult<Integers> {
        let refused = match self.call_writing(backend, calls, mode, deadline).await {
            Err(error)
                if refuses_writes(&error) && !matches!(mode, Mode::Refund | Mode::Credit) =>
            {
                error
            }
            result => return result,
        };
        self.condition.note_refusal(&refused);
        // Boxed, as the healing below: rare paths must not grow every call's future.
        match Box::pin(self.call_read_only(backend, calls, mode, deadline)).await {
            // The last field: whether the answer needed a write.
            Ok(mut reply) if reply.last() == Some(&0) => {
                reply.pop();
                self.read_only_answers.fetch_add(1, Ordering::Relaxed);
                Ok(reply)
            }
            // It needs a write (or the read failed too): the refusal stands.
            _ => Err(refused),
        }
    }

    /// A dry run of `calls` (`Charging::Check`): the read-only twin decides them alike and
    /// writes nothing; its last field (whether a write was needed) says nothing here.
    pub(super) async fn call_checking(
        &self,
        backend: &Backend,
        calls: &[HitCall],
        mode: Mode,
        deadline: Instant,
    ) -> RedisResult<Integers> {
        let mut reply = self.call_read_only(backend, calls, mode, deadline).await?;
        reply.pop();
        Ok(reply)
    }

    /// The read-only twin of a call (`scripts`), for a Redis that refuses writes: FCALL_RO of
    /// the library's `_ro` function, else (Redis before 7, or a library lost) EVAL of the
    /// read-only script, which writes nothing either.
    async fn call_read_only(
        &self,
        backend: &Backend,
        calls: &[HitCall],
        mode: Mode,
        deadline: Instant,
    ) -> RedisResult<Integers> {
        if backend.functions.load(Ordering::Relaxed) {
            let function = self.script.read_only_function();
            let result = backend
                .send(script_call("FCALL_RO", function, calls, mode), deadline)
                .instrument(spans::redis_span("FCALL_RO", calls.len(), mode.as_str()))
                .await;
            if result.is_ok() {
                return result;
            }
        }
        backend
            .send(
                script_call("EVAL", self.script.read_only_code(), calls, mode),
                deadline,
            )
            .instrument(spans::redis_span("EVAL", calls.len(), mode.as_str()))
            .await
    }

    /// One script call as `mode` says, healed after NOSCRIPT (`call`).
    async fn call_writing(
        &self,
        backend: &Backend,
        calls: &[HitCall],
        mode: Mode,
        deadline: Instant,
    ) -> RedisResult<Integers> {
        let (command, script) = if backend.functions.load(Ordering::Relaxed) {
            ("FCALL", self.script.function())
        } else {
            ("EVALSHA", self.script.sha1())
        };
        let first = script_call(command, script, calls, mode);
        let result = backend
            .send(first, deadline)
            .instrument(spans::redis_span(command, calls.len(), mode.as_str()))
            .await;
        if !matches!(&result, Err(e) if lost(e)) {
            return result;
        }
        self.script_reloads.fetch_add(1, Ordering::Relaxed);
        tracing::info!(
            redis = backend.role,
            "Redis lost the scripts: loading them again"
        );
        if let Err(error) = Box::pin(self.load_scripts_by(backend, deadline)).await {
            // The retry below sends the code itself; the next calls will try again.
            tracing::warn!(%error, "cannot load the scripts into Redis");
        }
        let code = script_call("EVAL", self.script.code(), calls, mode);
        backend
            .send(code, deadline)
            .instrument(spans::redis_span("EVAL", calls.len(), mode.as_str()))
            .await
    }
}

/// Whether Redis lost the scripts (a flush, a restart, a failover: NOSCRIPT, "Function not
/// found").
pub(super) fn lost(error: &RedisError) -> bool {
    error.code() == Some("NOSCRIPT") || error.to_string().contains("Function not found")
}

/// One hit as a script call sees it: its key (and the keys of its modifiers' parts, which
/// share its slot, in the order of their arguments), its arguments and its backend.
#[derive(Debug, Clone)]
pub(super) struct HitCall {
    pub(super) key: String,
    pub(super) modifier_keys: SmallVec<[String; 2]>,
    pub(super) args: ScriptArgs,
    pub(super) backend: usize,
}

/// `command` (FCALL, EVALSHA or EVAL) of `script` (the function's name, the script's SHA1 or
/// its code) on `calls`, as `mode` says.
fn script_call(command: &str, script: &str, calls: &[HitCall], mode: Mode) -> Cmd {
    let keys_len: usize = calls.iter().map(|c| c.key.len()).sum();
    let mut cmd = Cmd::with_capacity(
        4 + calls.len() * (3 + ScriptArgs::NAMES.len()),
        command.len() + script.len() + keys_len + 64 * calls.len() + 16,
    );
    // KEYS: every hit's key, then each hit's modifiers' keys, hit by hit.
    let extra = calls.iter().map(|c| c.modifier_keys.len()).sum::<usize>();
    cmd.arg(command).arg(script).arg(calls.len() + extra);
    for call in calls {
        cmd.arg(&call.key);
    }
    for call in calls {
        for key in &call.modifier_keys {
            cmd.arg(key);
        }
    }
    cmd.arg(mode.as_str());
    let mut next_key = calls.len();
    for call in calls {
        call.args.append_to(&mut cmd, &mut next_key);
    }
    cmd
}

/// What the script does with a call's hits (`ARGV[1]`, see `lua/common.lua`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Charge only if no hit vetoes the request.
    All,
    /// Charge every hit, denied or not (the reference's counting).
    Every,
    /// Charge every admitted hit (one Cluster slot's share of a request).
    Any,
    /// Charge every hit, denied or not, but a lease's acquire only as `Any` does (one
    /// Cluster slot's share of a request under the reference's counting: sluice takes back
    /// the acquires of a request that turns out vetoed).
    EveryPart,
    /// Take back charges an earlier `Any` made.
    Refund,
    /// Give each hit's cost back to its state now (the admin API's credit).
    Credit,
    /// Read each hit's state, writing nothing (the admin API's read).
    Read,
}

impl Mode {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Mode::All => "all",
            Mode::Every => "every",
            Mode::Any => "any",
            Mode::EveryPart => "every_part",
            Mode::Refund => "refund",
            Mode::Credit => "credit",
            Mode::Read => "read",
        }
    }
}
