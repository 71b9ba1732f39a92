//! One Redis deployment the store's scripts run on (`Backend`): its connection, its pipelining
//! (adaptive: a call joins a batch only while another is in flight), the calls in flight, and
//! what sluice learnt of it (whether it took the function library).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use futures_util::future::Either;
use redis::{Cmd, RedisResult};

use super::command::{Command, Integers};
use super::connect::{Connection, Pipelining, RedisKind, RedisTarget};
use super::pipeline::{PipelineCounts, Pipeliner};
use super::wire::{past_deadline, Wire};

/// A reply on its way through redis-rs.
pub(super) type BoxedReply<'a> = Pin<Box<dyn Future<Output = RedisResult<Integers>> + Send + 'a>>;

/// One Redis deployment the scripts run on, and what sluice learnt of it.
pub(super) struct Backend {
    pub(super) connection: Connection,
    /// A single node over plain TCP without TLS files, pipelined adaptively (the default):
    /// the script calls' own connection.
    pub(super) wire: Option<Wire>,
    /// With implicit pipelining: where script calls wait for their batch.
    pub(super) pipeliner: Option<Pipeliner>,
    /// Calls join a batch only while another is in flight (`Pipelining::adaptive`).
    pub(super) adaptive: bool,
    /// Script calls in flight now.
    pub(super) in_flight: AtomicUsize,
    /// Whether it took the function library (Redis 7+): calls are FCALL, else EVALSHA.
    pub(super) functions: AtomicBool,
    /// Whether the scripts were ever loaded (the first load is logged either way).
    pub(super) loaded_once: AtomicBool,
    /// For logs: "main" or "per-second".
    pub(super) role: &'static str,
}

impl Backend {
    /// The backend of `connection`, its calls pipelined as `target` says (not on a Cluster,
    /// whose calls go to their slots' nodes).
    pub(super) fn new(
        connection: Connection,
        target: &RedisTarget,
        counts: &Arc<PipelineCounts>,
        role: &'static str,
    ) -> Backend {
        let pipelining = target.pipelining;
        let wire = match (&connection, target.urls.first()) {
            (Connection::Single(_), Some(url))
                if target.kind == RedisKind::Single
                    && pipelining == Pipelining::ADAPTIVE
                    && target.tls_ca_file.is_none()
                    && target.tls_client.is_none() =>
            {
                Wire::of(
                    url,
                    target.connect_timeout,
                    target.command_timeout,
                    counts.clone(),
                )
            }
            _ => None,
        };
        let pipeliner = match &connection {
            _ if wire.is_some() => None,
            // Adaptive batching is the default: a Cluster without it is nothing to report.
            Connection::Cluster(_) if pipelining.adaptive => None,
            Connection::Cluster(_) if pipelining.enabled() => {
                tracing::warn!(
                    redis = role,
                    "implicit pipelining is not applied on a Cluster: each call goes to its slot's node as it comes"
                );
                None
            }
            _ if pipelining.enabled() => Some(Pipeliner::start(
                connection.clone(),
                pipelining,
                target.command_timeout,
                counts.clone(),
            )),
            _ => None,
        };
        Backend {
            connection,
            wire,
            pipeliner,
            adaptive: pipelining.adaptive,
            in_flight: AtomicUsize::new(0),
            functions: AtomicBool::new(false),
            loaded_once: AtomicBool::new(false),
            role,
        }
    }

    /// Sends a script call, in the next pipeline when calls are pipelined (adaptively: only
    /// while another call is in flight), and waits for its reply until `deadline`
    /// (`past_deadline` then). On sluice's own connection the future holds little more than
    /// the reply's channel, and the connection keeps the deadline; redis-rs's path is boxed,
    /// so that those calls do not carry its size, and has a timer.
    pub(super) fn send(
        &self,
        command: impl Command,
        deadline: Instant,
    ) -> Either<impl Future<Output = RedisResult<Integers>> + Send + '_, BoxedReply<'_>> {
        match &self.wire {
            Some(wire) => Either::Left(wire.send(command, deadline)),
            None => Either::Right(Box::pin(
                self.send_through_redis_rs(command.into_cmd(), deadline),
            )),
        }
    }

    async fn send_through_redis_rs(
        &self,
        command: Cmd,
        deadline: Instant,
    ) -> RedisResult<Integers> {
        let call = InFlight::of(&self.in_flight);
        let reply = async {
            match &self.pipeliner {
                Some(pipeliner) if !self.adaptive || call.others > 0 => {
                    pipeliner.send(command).await
                }
                _ => self.connection.command(&command).await,
            }
        };
        match tokio::time::timeout_at(deadline.into(), reply).await {
            Ok(reply) => reply.map(Integers::from_vec),
            Err(_) => Err(past_deadline()),
        }
    }
}

/// A script call in flight on a backend, counted while it lives (a call given up at its
/// deadline is dropped, and uncounted, with it).
struct InFlight<'a> {
    count: &'a AtomicUsize,
    /// The calls in flight when this one started.
    others: usize,
}

impl<'a> InFlight<'a> {
    fn of(count: &'a AtomicUsize) -> InFlight<'a> {
        let others = count.fetch_add(1, Ordering::AcqRel);
        InFlight { count, others }
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::AcqRel);
    }
}
