//! The Redis store: every algorithm is a Lua script (`lua/`), loaded once with SCRIPT LOAD and
//! run with EVALSHA, one per hit; all hits of a request go in one pipelined round trip (on a
//! Cluster, concurrently to their slots' primaries). A NOSCRIPT reply (after SCRIPT FLUSH, a
//! restart or a failover) reloads the scripts and retries the failed hits, invisibly to the
//! client. No algorithm logic lives here.

mod args;
mod connect;
mod scripts;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::{Pipeline, RedisError, RedisResult};

pub use args::ScriptArgs;
pub use connect::{Connection, RedisKind, RedisTarget};
use scripts::Scripts;

use crate::limit::{Decision, Hit};
use crate::store::{key, Clock, Store, StoreError, StoreStats};

/// Which clock the scripts read (`--redis-time`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TimeSource {
    /// Redis `TIME` inside the scripts: one clock for every sluice replica.
    Redis,
    /// sluice's clock, passed as an argument (for Redis services that refuse TIME).
    Sluice,
}

/// The Redis store.
pub struct RedisStore {
    connection: Connection,
    scripts: Scripts,
    key_prefix: String,
    clock: Arc<dyn Clock>,
    time_source: TimeSource,
    command_timeout: Duration,
    nonce_prefix: String,
    nonce: AtomicU64,
    script_reloads: AtomicU64,
    /// Whether the last call reached Redis: changes are logged once, not per request.
    reachable: AtomicBool,
}

/// One reply of a script: admitted, remaining, reset_after_us, retry_after_us.
type Reply = Vec<i64>;

impl RedisStore {
    /// Connects to `target` (waiting up to `startup_wait`) and loads the scripts.
    pub async fn connect(
        target: &RedisTarget,
        startup_wait: Duration,
        key_prefix: String,
        time_source: TimeSource,
        clock: Arc<dyn Clock>,
    ) -> Result<RedisStore, StoreError> {
        let connection = target
            .connect_waiting(startup_wait)
            .await
            .map_err(|error| StoreError::Unreachable {
                store: STORE,
                source: format!("{}: {error}", target.describe()).into(),
            })?;
        let store = RedisStore {
            connection,
            scripts: Scripts::new(),
            key_prefix,
            clock,
            time_source,
            command_timeout: target.command_timeout,
            nonce_prefix: format!("{:x}", clock_seed() as u32),
            nonce: AtomicU64::new(0),
            script_reloads: AtomicU64::new(0),
            reachable: AtomicBool::new(true),
        };
        store.load_scripts_in_time().await?;
        Ok(store)
    }

    /// Logs when Redis becomes unreachable or reachable again: once per change.
    fn note_reachability<T>(&self, result: &Result<T, StoreError>) {
        let reached = result.is_ok();
        if self.reachable.swap(reached, Ordering::Relaxed) != reached {
            match result {
                Ok(_) => tracing::info!("Redis is reachable again"),
                Err(error) => {
                    tracing::warn!(%error, "Redis is unreachable: calls fail until it is back")
                }
            }
        }
    }

    /// How many times the scripts were loaded again after a NOSCRIPT reply.
    pub fn script_reloads(&self) -> u64 {
        self.script_reloads.load(Ordering::Relaxed)
    }

    /// `load_scripts` within the command timeout.
    async fn load_scripts_in_time(&self) -> Result<(), StoreError> {
        match tokio::time::timeout(self.command_timeout, self.load_scripts()).await {
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

    /// SCRIPT LOAD of every script (on a Cluster, on every primary).
    async fn load_scripts(&self) -> RedisResult<()> {
        for load in self.scripts.load_commands() {
            let _: redis::Value = match &self.connection {
                Connection::Single(manager) => load.query_async(&mut manager.clone()).await?,
                Connection::Cluster(cluster) => load.query_async(&mut cluster.clone()).await?,
                Connection::Sentinel(sentinel) => load.query_async(&mut sentinel.primary()).await?,
            };
        }
        Ok(())
    }

    /// One pipeline of the EVALSHA of each hit, or, with `send_code`, of the EVAL of the
    /// script's code itself (which cannot meet NOSCRIPT). Each command's error stays in its
    /// own result.
    fn calls<'h>(
        &self,
        hits: impl ExactSizeIterator<Item = &'h Hit>,
        now_us: u64,
        send_code: bool,
    ) -> Pipeline {
        let mut pipe = Pipeline::with_capacity(hits.len());
        pipe.ignore_errors();
        for hit in hits {
            let script = self.scripts.get(hit.limit.algorithm);
            let (command, script) = if send_code {
                ("EVAL", script.code())
            } else {
                ("EVALSHA", script.sha1())
            };
            let key = key::redis_key(&self.key_prefix, hit, now_us);
            let call = self.script_args(hit, now_us).call(command, script, &key);
            pipe.add_command(call);
        }
        pipe
    }

    /// The script arguments of `hit` at `now_us`.
    fn script_args(&self, hit: &Hit, now_us: u64) -> ScriptArgs {
        let algorithm = hit.limit.algorithm;
        // A key that names its window was built with sluice's clock (as envoyproxy/ratelimit
        // does for fixed windows): the script must use the same one.
        let sluice_clock = algorithm.key_holds_window() || self.time_source == TimeSource::Sluice;
        ScriptArgs {
            requests_per_unit: hit.limit.requests_per_unit,
            period_us: hit.limit.period_us(),
            cost: hit.cost,
            capacity: hit.limit.capacity(),
            now_us: sluice_clock.then_some(now_us),
            nonce: algorithm.needs_nonce().then(|| {
                let nonce = self.nonce.fetch_add(1, Ordering::Relaxed);
                format!("{}-{nonce}", self.nonce_prefix)
            }),
        }
    }

    /// Runs `calls`, one result each, in one round trip.
    async fn run(&self, calls: &Pipeline) -> RedisResult<Vec<RedisResult<Reply>>> {
        match &self.connection {
            Connection::Single(manager) => calls.query_async(&mut manager.clone()).await,
            Connection::Sentinel(sentinel) => {
                let result = calls.query_async(&mut sentinel.primary()).await;
                if result
                    .as_ref()
                    .is_err_and(|e| e.is_io_error() || e.is_connection_dropped())
                {
                    // The primary may have moved: ask the sentinels before the next call.
                    if let Err(error) = sentinel.refresh().await {
                        tracing::warn!(%error, "cannot find the Redis primary through Sentinel");
                    }
                }
                result
            }
            Connection::Cluster(cluster) => {
                let mut tasks = tokio::task::JoinSet::new();
                for (index, call) in calls.cmd_iter().enumerate() {
                    let (call, mut cluster) = (call.clone(), cluster.clone());
                    tasks.spawn(
                        async move { (index, call.query_async::<Reply>(&mut cluster).await) },
                    );
                }
                let mut results: Vec<Option<RedisResult<Reply>>> =
                    calls.cmd_iter().map(|_| None).collect();
                while let Some(joined) = tasks.join_next().await {
                    let (index, result) = joined.map_err(|e| {
                        RedisError::from((
                            redis::ErrorKind::Io,
                            "cluster call failed",
                            e.to_string(),
                        ))
                    })?;
                    results[index] = Some(result);
                }
                Ok(results.into_iter().flatten().collect())
            }
        }
    }

    /// Runs the hits; after NOSCRIPT, loads the scripts again for the calls to come and runs
    /// the failed hits once more with EVAL, which cannot meet NOSCRIPT even if the scripts are
    /// flushed again meanwhile.
    async fn decide(&self, hits: &[Hit], now_us: u64) -> Result<Vec<Decision>, StoreError> {
        let calls = self.calls(hits.iter(), now_us, false);
        let mut results = self.run(&calls).await.map_err(store_error)?;
        let missing: Vec<usize> = (0..results.len())
            .filter(|&i| matches!(&results[i], Err(e) if e.code() == Some("NOSCRIPT")))
            .collect();
        if !missing.is_empty() {
            self.script_reloads.fetch_add(1, Ordering::Relaxed);
            tracing::info!("Redis lost the scripts (NOSCRIPT): loading them again");
            if let Err(error) = self.load_scripts_in_time().await {
                // The retry below sends the code itself; the next calls will try again.
                tracing::warn!(%error, "cannot load the scripts into Redis");
            }
            let again = self.calls(missing.iter().map(|&i| &hits[i]), now_us, true);
            let retried = self.run(&again).await.map_err(store_error)?;
            for (index, result) in missing.into_iter().zip(retried) {
                results[index] = result;
            }
        }
        results
            .into_iter()
            .map(|result| decision(result.map_err(store_error)?))
            .collect()
    }
}

impl Store for RedisStore {
    async fn healthy(&self) -> bool {
        let ping = async {
            let mut ping = redis::cmd("PING");
            let reply: RedisResult<String> = match &self.connection {
                Connection::Single(manager) => ping.query_async(&mut manager.clone()).await,
                Connection::Cluster(cluster) => {
                    ping.arg("sluice").query_async(&mut cluster.clone()).await
                }
                Connection::Sentinel(sentinel) => ping.query_async(&mut sentinel.primary()).await,
            };
            reply.is_ok()
        };
        tokio::time::timeout(self.command_timeout, ping)
            .await
            .unwrap_or(false)
    }

    fn stats(&self) -> StoreStats {
        StoreStats {
            script_reloads: Some(self.script_reloads()),
            ..StoreStats::default()
        }
    }

    /// Redis state is keyed by descriptor and shaped by algorithm; nothing is derived here.
    fn config_changed(&self) {}

    async fn charge(&self, hits: &[Hit]) -> Result<Vec<Decision>, StoreError> {
        if hits.is_empty() {
            return Ok(Vec::new());
        }
        let now_us = self.clock.now_us();
        let deadline = Instant::now() + self.command_timeout;
        let result = match tokio::time::timeout_at(deadline.into(), self.decide(hits, now_us)).await
        {
            Ok(decided) => decided,
            Err(_) => Err(self.timed_out()),
        };
        self.note_reachability(&result);
        result
    }
}

/// A script reply as a `Decision`.
fn decision(reply: Reply) -> Result<Decision, StoreError> {
    let [admitted, remaining, reset_after_us, retry_after_us] = reply[..] else {
        return Err(StoreError::Protocol {
            store: STORE,
            source: format!("unexpected script reply {reply:?}").into(),
        });
    };
    let non_negative = |v: i64| u64::try_from(v).unwrap_or(0);
    Ok(Decision {
        admitted: admitted == 1,
        remaining: u32::try_from(non_negative(remaining)).unwrap_or(u32::MAX),
        reset_after_us: non_negative(reset_after_us),
        retry_after_us: non_negative(retry_after_us),
    })
}

/// The store's name in errors.
const STORE: &str = "Redis";

/// A Redis error by kind: a connection that failed, else an error reply. (Timeouts are the
/// store's own deadline, `timed_out`.)
fn store_error(error: RedisError) -> StoreError {
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

/// A per-process seed for sliding-log nonces: distinct across replicas and restarts.
fn clock_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    hasher.finish()
}
