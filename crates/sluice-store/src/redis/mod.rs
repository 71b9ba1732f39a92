//! The Redis store: every algorithm is a Lua script (`lua/`), joined into one script loaded once
//! with SCRIPT LOAD and run with EVALSHA, one call per request (on a Cluster, one per slot,
//! concurrently, and the charges of a denied request taken back). A NOSCRIPT reply (after
//! SCRIPT FLUSH, a restart or a failover) reloads the script and retries the call, invisibly
//! to the client. Per-second limits may live in a Redis of their own (`REDIS_PERSECOND`): a
//! request that spans both is decided like one that spans a Cluster's slots. With
//! `--store-circuit-failures`, a circuit breaker (`breaker`) stops calls after failures in a
//! row until a probe is answered, and the replica count a local share divides by is learnt
//! from heartbeats (`replicas`). No algorithm logic lives here.

mod admin;
mod args;
mod backend;
pub mod breaker;
mod call;
mod command;
mod condition;
mod connect;
mod counter;
mod pipeline;
pub mod regions;
pub mod replicas;
mod reports;
mod scripts;
mod shards;
pub mod span;
mod wire;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use redis::{RedisError, RedisResult};

pub use args::ScriptArgs;
use backend::Backend;
use breaker::{Breaker, BreakerSettings};
use call::{HitCall, Mode};
use condition::Condition;
pub use connect::{Connection, Pipelining, RedisKind, RedisTarget};
use pipeline::PipelineCounts;
use replicas::ReplicaCount;
use scripts::Script;

use crate::series::{Reporting, Series};
use crate::{key, Clock, Store, StoreError};
use sluice_core::algorithm::{Mark, Noted};
use sluice_core::engine::{descriptor_groups, Charging};
use sluice_core::limit::{Decision, Hit, LeaseCall, Unit};
use sluice_core::modifier::Modifiers;

/// Which clock the scripts read (`--redis-time`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeSource {
    /// Redis `TIME` inside the scripts: one clock for every sluice replica.
    Redis,
    /// sluice's clock, passed as an argument (for Redis services that refuse TIME).
    Sluice,
}

/// The Redis store.
pub struct RedisStore {
    /// The main Redis, then, with `REDIS_PERSECOND`, the one of per-second limits.
    backends: Vec<Backend>,
    script: Script,
    key_prefix: String,
    clock: Arc<dyn Clock>,
    time_source: TimeSource,
    command_timeout: Duration,
    nonce_prefix: String,
    nonce: AtomicU64,
    script_reloads: AtomicU64,
    /// Calls answered read-only while Redis refused writes.
    read_only_answers: AtomicU64,
    /// How Redis has been answering: changes are logged once, not per request.
    condition: Condition,
    /// The pipelines of implicit pipelining, and the calls they held.
    pipeline_counts: Arc<PipelineCounts>,
    /// Opens after calls fail in a row: calls then fail at once (`with_circuit`).
    breaker: Breaker,
    /// How many replicas share this Redis (given, or learnt from their heartbeats): what a
    /// replica's share of a limit divides it by when Redis cannot decide.
    replicas: ReplicaCount,
}

/// The circuit breaker's settings and the replica count the local shares divide by.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CircuitSettings {
    pub breaker: BreakerSettings,
    /// `--store-replicas`: the replica count, instead of learning it from Redis.
    pub replicas: Option<u32>,
    /// Whether to learn the count from Redis when it is not given (a heartbeat each second):
    /// only where a local share may be asked for (the breaker on, or `local-share` the
    /// failure mode), so that a replica that never divides writes nothing.
    pub learn_replicas: bool,
}

/// Where a store's limits live: one Redis, or per-second limits in a second one.
pub struct RedisTargets<'a> {
    pub main: &'a RedisTarget,
    pub per_second: Option<&'a RedisTarget>,
}

impl RedisStore {
    /// The connection to the main Redis (beside it, the RLQS budget keeps its claims).
    pub fn main_connection(&self) -> &Connection {
        &self.backends[0].connection
    }

    /// `CACHE_KEY_PREFIX`, which every key starts with.
    pub fn key_prefix(&self) -> &str {
        &self.key_prefix
    }

    /// How long a command may take.
    pub fn command_timeout(&self) -> Duration {
        self.command_timeout
    }

    /// Connects to the targets (waiting up to `startup_wait`) and loads the scripts.
    pub async fn connect(
        targets: RedisTargets<'_>,
        startup_wait: Duration,
        key_prefix: String,
        time_source: TimeSource,
        clock: Arc<dyn Clock>,
    ) -> Result<RedisStore, StoreError> {
        let pipeline_counts = Arc::new(PipelineCounts::default());
        let main = connect_to(targets.main, startup_wait).await?;
        let mut backends = vec![Backend::new(main, targets.main, &pipeline_counts, "main")];
        if let Some(per_second) = targets.per_second {
            let connection = connect_to(per_second, startup_wait).await?;
            backends.push(Backend::new(
                connection,
                per_second,
                &pipeline_counts,
                "per-second",
            ));
        }
        let store = RedisStore {
            backends,
            script: Script::new(),
            key_prefix,
            time_source,
            // A request spanning both Redis waits for the slower one's answer.
            command_timeout: targets
                .per_second
                .map_or(targets.main.command_timeout, |per_second| {
                    per_second.command_timeout.max(targets.main.command_timeout)
                }),
            nonce_prefix: format!("{:x}", super::unique_process_id() as u32),
            nonce: AtomicU64::new(0),
            script_reloads: AtomicU64::new(0),
            read_only_answers: AtomicU64::new(0),
            condition: Condition::new(),
            pipeline_counts,
            breaker: Breaker::new(BreakerSettings::default()),
            replicas: ReplicaCount::fixed(1),
            clock,
        };
        for backend in &store.backends {
            store.load_scripts_in_time(backend).await?;
        }
        Ok(store)
    }

    /// The store with a circuit breaker as `circuit` says, and the replica count given there
    /// or learnt from Redis (a heartbeat every second), else 1.
    pub fn with_circuit(mut self, circuit: CircuitSettings) -> RedisStore {
        self.breaker = Breaker::new(circuit.breaker);
        let replicas = match circuit.replicas {
            Some(replicas) => ReplicaCount::fixed(replicas),
            None if !circuit.learn_replicas => ReplicaCount::fixed(1),
            None => replicas::learnt(
                self.main_connection().clone(),
                key::replicas_key(&self.key_prefix),
                self.clock.clone(),
                self.command_timeout,
            ),
        };
        self.replicas = replicas;
        self
    }

    /// The replica count now.
    pub fn replicas(&self) -> u32 {
        self.replicas.get()
    }

    /// The clock it decides by.
    pub fn clock(&self) -> Arc<dyn Clock> {
        self.clock.clone()
    }

    /// The replica count, kept up to date for as long as it is held.
    pub fn replica_count(&self) -> ReplicaCount {
        self.replicas.clone()
    }

    /// Whether the circuit is open (calls fail at once).
    pub fn circuit_open(&self) -> bool {
        self.breaker.is_open()
    }

    /// Whether every backend's script calls go on sluice's own connection, one a serving lane
    /// (`wire`), rather than through redis-rs's.
    pub fn calls_go_on_lanes(&self) -> bool {
        self.backends.iter().all(|backend| backend.wire.is_some())
    }

    /// The backend of `hit`: per-second limits go to the per-second Redis when there is one.
    fn backend_of(&self, hit: &Hit) -> usize {
        usize::from(self.backends.len() > 1 && hit.limit.unit == Unit::Second)
    }

    /// How many times the scripts were loaded again after a NOSCRIPT reply.
    pub fn script_reloads(&self) -> u64 {
        self.script_reloads.load(Ordering::Relaxed)
    }

    /// `load_scripts` within the command timeout.
    async fn load_scripts_in_time(&self, backend: &Backend) -> Result<(), StoreError> {
        self.load_scripts_by(backend, Instant::now() + self.command_timeout)
            .await
    }

    /// `load_scripts` by `deadline`.
    async fn load_scripts_by(
        &self,
        backend: &Backend,
        deadline: Instant,
    ) -> Result<(), StoreError> {
        match tokio::time::timeout_at(deadline.into(), self.load_scripts(backend)).await {
            Ok(loaded) => loaded.map_err(store_error),
            Err(_) => Err(self.timed_out()),
        }
    }

    /// The error of a command Redis did not answer in time.
    fn timed_out(&self) -> StoreError {
        StoreError::Timeout {
            store: STORE,
            after: self.command_timeout,
        }
    }

    /// SCRIPT LOAD of the script, and FUNCTION LOAD of the library where Redis takes it (on
    /// a Cluster, on every primary). A Redis without functions (before 7) is called with
    /// EVALSHA.
    async fn load_scripts(&self, backend: &Backend) -> RedisResult<()> {
        let connection = &backend.connection;
        let _: redis::Value = connection.command(&self.script.load_command()).await?;
        let loaded: RedisResult<redis::Value> = connection
            .command(&self.script.load_library_command())
            .await;
        let functions = loaded.is_ok();
        let first = !backend.loaded_once.swap(true, Ordering::Relaxed);
        if backend.functions.swap(functions, Ordering::Relaxed) != functions || first {
            let redis = backend.role;
            match loaded {
                Ok(_) => tracing::info!(redis, "Redis takes functions: calls are FCALL"),
                Err(error) => {
                    tracing::info!(redis, %error, "Redis takes no functions: calls are EVALSHA")
                }
            }
        }
        Ok(())
    }

    /// Whether the script call of `hit` is given sluice's clock. A key that names its window
    /// was built with sluice's clock (as envoyproxy/ratelimit does for fixed windows): the
    /// script must use the same one. A window from the first hit opens at sluice's clock
    /// too, so that the plain counter call can take it.
    fn gives_its_clock(&self, hit: &Hit) -> bool {
        hit.limit.key_holds_window()
            || hit.limit.from_first_hit()
            || self.time_source == TimeSource::Sluice
    }

    /// The script arguments of `hit` at `now_us`, in the group starting at hit `group`.
    fn script_args(&self, hit: &Hit, group: usize, now_us: u64) -> ScriptArgs {
        let algorithm = hit.limit.algorithm();
        let rate = hit.limit.rate();
        let sluice_clock = self.gives_its_clock(hit);
        ScriptArgs {
            algorithm: algorithm.as_str(),
            requests_per_unit: hit.limit.requests_per_unit,
            period_us: hit.limit.period_us(),
            cost: hit.cost,
            capacity: hit.limit.capacity(),
            now_us: sluice_clock.then_some(now_us),
            nonce: algorithm.needs_nonce().then(|| {
                let nonce = self.nonce.fetch_add(1, Ordering::Relaxed);
                format!("{}-{nonce}", self.nonce_prefix)
            }),
            role: hit.role,
            debt: hit.limit.debt,
            group,
            lease: hit.lease,
            headroom: hit.limit.modifiers.headroom(hit.limit.capacity()),
            modifiers: hit
                .limit
                .modifiers
                .script_args(hit.lease, hit.limit.window_end_us(now_us).unwrap_or(0)),
            own: hit.limit.counting.script_args(&rate, now_us),
            own_count: algorithm.own_script_args().len(),
        }
    }

    /// The script call of `hit`, of the descriptor group starting at `group_start`, at `now_us`.
    fn hit_call(&self, hit: &Hit, group_start: usize, now_us: u64) -> HitCall {
        let args = self.script_args(hit, group_start, now_us);
        let token = hit.lease.map(LeaseCall::token);
        let modifier_keys = args
            .modifiers
            .iter()
            .flatten()
            .flat_map(|arg| arg.parts.iter().flatten())
            .map(|part| {
                let token = token.filter(|_| part.per_token);
                key::kept_key(&self.key_prefix, hit, part.name, token)
            })
            .collect();
        HitCall {
            key: key::redis_key(&self.key_prefix, hit, now_us),
            modifier_keys,
            args,
            backend: self.backend_of(hit),
        }
    }

    /// Decides the hits: in one script call on a single node or Sentinel (atomic, as
    /// `charging` says); across a Cluster's slots or the two Redis of `REDIS_PERSECOND`, one
    /// call per shard, concurrently.
    async fn decide(
        &self,
        hits: &[Hit],
        charging: Charging,
        now_us: u64,
        deadline: Instant,
    ) -> Result<Vec<Decision>, StoreError> {
        if charging != Charging::Check {
            let counted = self.decide_counted(hits, charging, now_us, deadline);
            if let Some(decided) = counted.await {
                return decided;
            }
        }
        let mut calls: Vec<HitCall> = Vec::with_capacity(hits.len());
        for group in descriptor_groups(hits) {
            for hit in &hits[group.clone()] {
                calls.push(self.hit_call(hit, group.start, now_us));
            }
        }
        if charging == Charging::Check {
            return Box::pin(self.check_each_shard(calls, deadline)).await;
        }
        let backend = calls.first().map_or(0, |call| call.backend);
        let one_backend = calls.iter().all(|call| call.backend == backend);
        let on_cluster = matches!(self.backends[backend].connection, Connection::Cluster(_));
        if (!one_backend || on_cluster) && charging == Charging::EveryHit {
            return Box::pin(self.decide_every_hit_across_shards(hits, calls, deadline)).await;
        }
        if !one_backend || on_cluster {
            return Box::pin(self.decide_across_shards(hits, calls, deadline)).await;
        }
        let mode = match charging {
            Charging::EveryHit => Mode::Every,
            Charging::AllOrNothing | Charging::Check => Mode::All,
        };
        // Boxed: the plain counter call above is the common case, and every layer above
        // the store moves this future whole, at its largest.
        let reply = Box::pin(self.call(&self.backends[backend], &calls, mode, deadline))
            .await
            .map_err(store_error)?;
        Ok(decisions(&reply, calls.len(), mode)?
            .into_iter()
            .map(|(decision, _)| decision)
            .collect())
    }
}

/// Connects to `target`, waiting up to `startup_wait`.
async fn connect_to(
    target: &RedisTarget,
    startup_wait: Duration,
) -> Result<Connection, StoreError> {
    target
        .connect_waiting(startup_wait)
        .await
        .map_err(|error| StoreError::Unreachable {
            store: STORE,
            source: format!("{}: {error}", target.describe()).into(),
        })
}

/// PING of `connection`.
async fn ping(connection: &Connection) -> bool {
    let mut ping = redis::cmd("PING");
    let reply: RedisResult<String> = match connection {
        Connection::Single(manager) => ping.query_async(&mut manager.clone()).await,
        Connection::Cluster(cluster) => ping.arg("sluice").query_async(&mut cluster.clone()).await,
        Connection::Sentinel(sentinel) => ping.query_async(&mut sentinel.primary()).await,
    };
    reply.is_ok()
}

impl Reporting for RedisStore {
    /// Script reloads after NOSCRIPT, how Redis has been answering, and with implicit
    /// pipelining its pipelines and calls.
    fn report(&self, series: &Series) {
        series.total("sluice_redis_script_reloads_total", self.script_reloads());
        series.total(
            "sluice_redis_read_only_answers_total",
            self.read_only_answers.load(Ordering::Relaxed),
        );
        self.condition.report(series);
        self.breaker.report(series);
        series.level("sluice_store_replicas", u64::from(self.replicas()));
        if self
            .backends
            .iter()
            .any(|b| b.pipeliner.is_some() || b.wire.is_some())
        {
            let counts = &self.pipeline_counts;
            let pipelines = counts.pipelines.load(Ordering::Relaxed);
            series.total("sluice_redis_pipelines_total", pipelines);
            let calls = counts.calls.load(Ordering::Relaxed);
            series.total("sluice_redis_pipelined_calls_total", calls);
        }
    }
}

impl Store for RedisStore {
    fn name(&self) -> &'static str {
        "redis"
    }

    /// Every backend answers a PING in time (at once `false` while the circuit is open).
    async fn healthy(&self) -> bool {
        if self.breaker.is_open() {
            return false;
        }
        let pings = join_all(self.backends.iter().map(|b| ping(&b.connection)));
        tokio::time::timeout(self.command_timeout, pings)
            .await
            .is_ok_and(|answers| answers.into_iter().all(|answered| answered))
    }

    /// Redis state is keyed by descriptor and shaped by algorithm; nothing is derived here.
    fn config_changed(&self) {}

    async fn charge(&self, hits: &[Hit], charging: Charging) -> Result<Vec<Decision>, StoreError> {
        if hits.is_empty() {
            return Ok(Vec::new());
        }
        self.breaker.check()?;
        let now_us = self.clock.now_us();
        // Every Redis call of the decision gets the one deadline (on sluice's own connection
        // its task keeps it, so that a call costs no timer); a failure once it passed is the
        // timeout, whatever the call that was cut short reported.
        let deadline = Instant::now() + self.command_timeout;
        let result = match self.decide(hits, charging, now_us, deadline).await {
            Err(_) if Instant::now() >= deadline => Err(self.timed_out()),
            result => result,
        };
        self.condition.note(&result);
        if self.breaker.note(&result) {
            let connections = self.backends.iter().map(|b| b.connection.clone()).collect();
            self.breaker.probe(connections, self.command_timeout);
        }
        // Decided at sluice's time of the call (the scripts may have read Redis TIME).
        result.map(|decisions| {
            decisions
                .into_iter()
                .map(|d| Decision {
                    decided_at_us: now_us,
                    ..d
                })
                .collect()
        })
    }
}

/// A script's reply for `count` hits called as `mode` says: each hit's decision, and the
/// time it was decided at (0 where the mode does not reply it).
fn decisions(reply: &[i64], count: usize, mode: Mode) -> Result<Vec<(Decision, u64)>, StoreError> {
    // A decision's fields, and the time for the calls of a Cluster.
    let fields = if matches!(
        mode,
        Mode::Any | Mode::EveryPart | Mode::Refund | Mode::Credit
    ) {
        DECISION_FIELDS + 1
    } else {
        DECISION_FIELDS
    };
    if reply.len() != count * fields {
        return Err(protocol(&format!(
            "{} numbers in a script reply for {count} hits",
            reply.len()
        )));
    }
    let non_negative = |v: i64| u64::try_from(v).unwrap_or(0);
    Ok(reply
        .chunks_exact(fields)
        .map(|fields| {
            let decision = Decision {
                admitted: fields[0] == 1,
                remaining: u32::try_from(non_negative(fields[1])).unwrap_or(u32::MAX),
                reset_after_us: non_negative(fields[2]),
                retry_after_us: non_negative(fields[3]),
                mark: reply_mark(fields),
                decided_at_us: 0,
            };
            let at = fields
                .get(DECISION_FIELDS)
                .map_or(0, |&at| non_negative(at));
            (decision, at)
        })
        .collect())
}

/// The fields of a decision in a script's reply (`decision` in `lua/common.lua`).
pub(super) const DECISION_FIELDS: usize = 12;

/// What a hit's reply says beside the common answer: a modifier's note (field 6 its place
/// among `Modifiers::SCRIPTED`, from 1; fields 7 to 11 its numbers), else a lease limit's
/// released and expired leases (fields 4 and 5).
fn reply_mark(fields: &[i64]) -> Mark {
    let number = |v: i64| u64::try_from(v).unwrap_or(0);
    let count = |v: i64| u32::try_from(number(v)).unwrap_or(u32::MAX);
    let by = usize::try_from(fields[6])
        .ok()
        .and_then(|place| place.checked_sub(1));
    if let Some(by) = by.and_then(|at| Modifiers::SCRIPTED.get(at)) {
        let mut values = [0; Noted::VALUES];
        for (value, field) in values.iter_mut().zip(&fields[7..]) {
            *value = number(*field);
        }
        return Mark::Noted(Noted { by, values });
    }
    Mark::leases(count(fields[4]), count(fields[5]))
}

/// A reply that makes no sense.
fn protocol(what: &str) -> StoreError {
    StoreError::Protocol {
        store: STORE,
        source: what.to_string().into(),
    }
}

/// The store's name in errors.
pub(crate) const STORE: &str = "Redis";

/// A Redis error by kind: a connection that failed, else an error reply. (Timeouts are the
/// store's own deadline, `timed_out`.)
pub(crate) fn store_error(error: RedisError) -> StoreError {
    let unreachable = error.is_io_error()
        || error.is_connection_refusal()
        || error.is_connection_dropped()
        || error.is_timeout()
        || error.is_unrecoverable_error();
    if unreachable {
        StoreError::Unreachable {
            store: STORE,
            source: Box::new(error),
        }
    } else {
        StoreError::Protocol {
            store: STORE,
            source: Box::new(error),
        }
    }
}
