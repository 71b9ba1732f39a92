//! Connecting to Redis: a single node, a Cluster or a primary found through Sentinel; TLS with
//! `rediss://` (and an optional CA file); timeouts; waiting for Redis at startup with backoff.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::io::tcp::TcpSettings;
use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::{
    Client, Cmd, FromRedisValue, IntoConnectionInfo, Pipeline, RedisConnectionInfo, RedisResult,
    ScriptInvocation, TlsCertificates, TlsMode,
};
use tokio::sync::Mutex;

/// Which Redis deployment sluice talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedisKind {
    Single,
    Cluster,
    Sentinel,
}

/// How to reach Redis.
#[derive(Debug, Clone)]
pub struct RedisTarget {
    pub kind: RedisKind,
    /// Single: one URL. Cluster: seed node URLs. Sentinel: sentinel URLs.
    pub urls: Vec<String>,
    /// Sentinel: the name of the monitored primary.
    pub sentinel_master: Option<String>,
    /// Sentinel: the primary's password, or `user:password` (the URLs carry the sentinels').
    pub primary_auth: Option<String>,
    /// PEM file of the CA that signed the server's certificate (`rediss://`); default: the
    /// system's roots.
    pub tls_ca_file: Option<PathBuf>,
    /// The certificate and key (PEM files) sluice presents to a Redis that checks clients.
    pub tls_client: Option<(PathBuf, PathBuf)>,
    pub connect_timeout: Duration,
    pub command_timeout: Duration,
    /// How the calls of concurrent requests are gathered into pipelines (single node and
    /// Sentinel; a Cluster's calls go to their slots' nodes as they come).
    pub pipelining: Pipelining,
}

impl RedisTarget {
    /// A single Redis at `url`, with plain connections and `timeout` for connecting and for
    /// each command (tools and tests).
    pub fn single(url: &str, timeout: Duration) -> RedisTarget {
        RedisTarget {
            kind: RedisKind::Single,
            urls: vec![url.to_string()],
            sentinel_master: None,
            primary_auth: None,
            tls_ca_file: None,
            tls_client: None,
            connect_timeout: timeout,
            command_timeout: timeout,
            pipelining: Pipelining::default(),
        }
    }
}

/// A live connection, shared by every request (multiplexed: no connection per request).
#[derive(Clone)]
pub enum Connection {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
    Sentinel(Arc<SentinelConnection>),
}

impl Connection {
    /// Sends `command` to the node that serves its keys.
    ///
    /// The Cluster's and Sentinel's calls are boxed: their futures are kilobytes, and a
    /// single node's calls would otherwise carry (and copy) that size in every future that
    /// holds one.
    pub async fn command<T: FromRedisValue>(&self, command: &Cmd) -> RedisResult<T> {
        match self {
            Connection::Single(manager) => command.query_async(&mut manager.clone()).await,
            Connection::Cluster(cluster) => {
                Box::pin(command.query_async(&mut cluster.clone())).await
            }
            Connection::Sentinel(sentinel) => {
                Box::pin(async {
                    let result = command.query_async(&mut sentinel.primary()).await;
                    after_failure(sentinel, &result).await;
                    result
                })
                .await
            }
        }
    }

    /// Runs a script with EVALSHA (sent again whole after NOSCRIPT), boxed as `command` is.
    pub async fn invoke(&self, invocation: &ScriptInvocation<'_>) -> RedisResult<Vec<i64>> {
        match self {
            Connection::Single(manager) => invocation.invoke_async(&mut manager.clone()).await,
            Connection::Cluster(cluster) => {
                Box::pin(invocation.invoke_async(&mut cluster.clone())).await
            }
            Connection::Sentinel(sentinel) => {
                Box::pin(async {
                    let result = invocation.invoke_async(&mut sentinel.primary()).await;
                    after_failure(sentinel, &result).await;
                    result
                })
                .await
            }
        }
    }

    /// Sends `pipeline` (single node and Sentinel), boxed as `command` is.
    pub async fn pipeline<T: FromRedisValue>(&self, pipeline: &Pipeline) -> RedisResult<T> {
        match self {
            Connection::Single(manager) => pipeline.query_async(&mut manager.clone()).await,
            Connection::Cluster(cluster) => {
                Box::pin(pipeline.query_async(&mut cluster.clone())).await
            }
            Connection::Sentinel(sentinel) => {
                Box::pin(async {
                    let result = pipeline.query_async(&mut sentinel.primary()).await;
                    after_failure(sentinel, &result).await;
                    result
                })
                .await
            }
        }
    }
}

/// After a connection failure through Sentinel, the primary may have moved: asks the
/// sentinels before the next call.
async fn after_failure<T>(sentinel: &SentinelConnection, result: &RedisResult<T>) {
    // A dropped connection, or a primary demoted to a replica under sluice (READONLY).
    if result.as_ref().is_err_and(|e| {
        e.is_io_error() || e.is_connection_dropped() || e.code() == Some("READONLY")
    }) {
        match sentinel.refresh().await {
            // Logged when the primary is first lost and when it is found: the calls of a
            // failover retry this many times a second.
            Err(error) => {
                if !sentinel
                    .lost
                    .swap(true, std::sync::atomic::Ordering::Relaxed)
                {
                    tracing::warn!(%error, "cannot find the Redis primary through Sentinel (a failover in progress?): calls fail until it is found");
                }
            }
            Ok(()) => {
                if sentinel
                    .lost
                    .swap(false, std::sync::atomic::Ordering::Relaxed)
                {
                    tracing::info!("found the Redis primary through Sentinel again");
                }
            }
        }
    }
}

/// How often the sentinels are asked which node is the primary, while its connection works:
/// after a failover that leaves the old primary up (`SENTINEL FAILOVER`, a partition), it
/// takes writes that the new one never sees until it is turned into a replica, which
/// Sentinel does only some seconds later. Following the sentinels bounds that to this.
const FOLLOW_EVERY: Duration = Duration::from_millis(500);

/// The primary's connection, re-resolved through the sentinels when it fails, and when the
/// sentinels name another primary (`follow`).
pub struct SentinelConnection {
    sentinel: Mutex<SentinelClient>,
    primary: ArcSwap<ConnectionManager>,
    /// The address of `primary`.
    address: ArcSwap<String>,
    config: ConnectionManagerConfig,
    /// The last lookup of the primary failed (logged once until one succeeds).
    lost: std::sync::atomic::AtomicBool,
}

impl SentinelConnection {
    /// The current primary's connection.
    pub fn primary(&self) -> ConnectionManager {
        (**self.primary.load()).clone()
    }

    /// Asks the sentinels for the primary again (after a failover).
    pub async fn refresh(&self) -> RedisResult<()> {
        self.connect_to_primary(true).await.map(|_| ())
    }

    /// Connects to the primary the sentinels name, unless it is the one connected and
    /// `always` is false; returns whether it moved.
    async fn connect_to_primary(&self, always: bool) -> RedisResult<bool> {
        let mut sentinel = self.sentinel.lock().await;
        let client = sentinel.async_get_client().await?;
        let address = client.get_connection_info().addr().to_string();
        let moved = address != **self.address.load();
        if !moved && !always {
            return Ok(false);
        }
        let manager = ConnectionManager::new_with_config(client, self.config.clone()).await?;
        self.primary.store(Arc::new(manager));
        self.address.store(Arc::new(address));
        Ok(moved)
    }

    /// Asks the sentinels every `FOLLOW_EVERY` which node is the primary, and moves to a new
    /// one as soon as they name it; ends with the connection.
    async fn follow(connection: std::sync::Weak<SentinelConnection>) {
        let mut ticks = tokio::time::interval(FOLLOW_EVERY);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            let Some(connection) = connection.upgrade() else {
                return;
            };
            // A failed lookup is the calls' to report (`after_failure`): they fail with it.
            if let Ok(true) = connection.connect_to_primary(false).await {
                tracing::info!(
                    primary = %connection.address.load(),
                    "Sentinel names another Redis primary: calls go to it from now on"
                );
            }
        }
    }
}

impl RedisTarget {
    /// Connects once.
    pub async fn connect(&self) -> RedisResult<Connection> {
        // rustls needs one process-wide crypto provider; a second install is a harmless no-op.
        let _ = rustls::crypto::ring::default_provider().install_default();
        // No response timeout of redis-rs's own: every command sluice sends already runs
        // under a deadline of `command_timeout` (the store's check, health check and script
        // loads), and a second timer per call cost about 3% of the CPU of a call.
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(None)
            .set_number_of_retries(1);
        match self.kind {
            RedisKind::Single => {
                let client = self.client(self.first_url()?)?;
                Ok(Connection::Single(
                    ConnectionManager::new_with_config(client, config).await?,
                ))
            }
            RedisKind::Cluster => {
                let mut builder = ClusterClientBuilder::new(self.urls.clone())
                    .tcp_settings(tcp_settings())
                    .connection_timeout(self.connect_timeout)
                    .response_timeout(self.command_timeout);
                if let Some(certificates) = self.certificates()? {
                    builder = builder.certs(certificates);
                }
                let client = builder.build()?;
                Ok(Connection::Cluster(client.get_async_connection().await?))
            }
            RedisKind::Sentinel => {
                let master = self.sentinel_master.clone().unwrap_or_default();
                let primary_info = self.primary_info();
                let mut sentinel = SentinelClient::build(
                    self.urls.clone(),
                    master,
                    Some(primary_info),
                    SentinelServerType::Master,
                )?;
                let client = sentinel.async_get_client().await?;
                let address = client.get_connection_info().addr().to_string();
                let primary = ConnectionManager::new_with_config(client, config.clone()).await?;
                let connection = Arc::new(SentinelConnection {
                    sentinel: Mutex::new(sentinel),
                    primary: ArcSwap::from_pointee(primary),
                    address: ArcSwap::from_pointee(address),
                    config,
                    lost: std::sync::atomic::AtomicBool::new(false),
                });
                tokio::spawn(SentinelConnection::follow(Arc::downgrade(&connection)));
                Ok(Connection::Sentinel(connection))
            }
        }
    }

    /// How to reach the primary the sentinels name: its credentials, and TLS when the
    /// sentinels are reached with TLS.
    fn primary_info(&self) -> SentinelNodeConnectionInfo {
        let mut redis = RedisConnectionInfo::default();
        if let Some(auth) = &self.primary_auth {
            redis = match auth.split_once(':') {
                Some((user, password)) => redis.set_username(user).set_password(password),
                None => redis.set_password(auth),
            };
        }
        let info = SentinelNodeConnectionInfo::default()
            .set_tcp_settings(tcp_settings())
            .set_redis_connection_info(redis);
        if self.urls.iter().any(|url| url.starts_with("rediss://")) {
            info.set_tls_mode(TlsMode::Secure)
        } else {
            info
        }
    }

    /// Connects, retrying with backoff until `wait` has passed; says what it waits for.
    pub async fn connect_waiting(&self, wait: Duration) -> RedisResult<Connection> {
        let started = Instant::now();
        let mut backoff = Duration::from_millis(100);
        loop {
            match self.connect().await {
                Ok(connection) => return Ok(connection),
                Err(error) if started.elapsed() + backoff < wait => {
                    tracing::warn!(
                        redis = %self.describe(),
                        %error,
                        retry_in_ms = backoff.as_millis() as u64,
                        "waiting for Redis"
                    );
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// What is being connected to, without passwords, for logs.
    pub fn describe(&self) -> String {
        let urls: Vec<String> = self.urls.iter().map(|url| without_password(url)).collect();
        format!("{:?} {}", self.kind, urls.join(",")).to_lowercase()
    }

    fn first_url(&self) -> RedisResult<&str> {
        self.urls
            .first()
            .map(String::as_str)
            .ok_or_else(|| (redis::ErrorKind::InvalidClientConfig, "no Redis URL").into())
    }

    fn client(&self, url: &str) -> RedisResult<Client> {
        let info = url.into_connection_info()?.set_tcp_settings(tcp_settings());
        match self.certificates()? {
            Some(certificates) => Client::build_with_tls(info, certificates),
            None => Client::open(info),
        }
    }

    fn certificates(&self) -> RedisResult<Option<TlsCertificates>> {
        if self.tls_ca_file.is_none() && self.tls_client.is_none() {
            return Ok(None);
        }
        let root_cert = match &self.tls_ca_file {
            Some(path) => Some(read_pem(path, "the Redis CA file")?),
            None => None,
        };
        let client_tls = match &self.tls_client {
            Some((cert, key)) => Some(redis::ClientTlsConfig {
                client_cert: read_pem(cert, "the Redis client certificate")?,
                client_key: read_pem(key, "the Redis client key")?,
            }),
            None => None,
        };
        Ok(Some(TlsCertificates {
            client_tls,
            root_cert,
        }))
    }
}

/// The bytes of the PEM file `path`; `what` names it in the error.
fn read_pem(path: &std::path::Path, what: &'static str) -> RedisResult<Vec<u8>> {
    std::fs::read(path).map_err(|error| {
        redis::RedisError::from((
            redis::ErrorKind::InvalidClientConfig,
            what,
            format!("{}: {error}", path.display()),
        ))
    })
}

/// `redis://user:secret@host` -> `redis://user:***@host`.
fn without_password(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let credentials = &url[scheme + 3..at];
            match credentials.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => format!("{}***{}", &url[..scheme + 3], &url[at..]),
            }
        }
        _ => url.to_string(),
    }
}

/// Every Redis socket without Nagle's algorithm (redis-rs leaves it on): pipelined commands of
/// concurrent requests otherwise wait for the ACK of the ones before them.
fn tcp_settings() -> TcpSettings {
    TcpSettings::default().set_nodelay(true)
}

/// How calls are gathered into pipelines: adaptively (the default), in a window or up to a
/// limit (`REDIS_PIPELINE_WINDOW`, `REDIS_PIPELINE_LIMIT`), or not at all (all zero).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pipelining {
    /// How long a batch stays open after its first call; zero: only the calls already waiting.
    pub window: Duration,
    /// The most calls in a batch; zero: no limit but the window.
    pub limit: usize,
    /// A call goes straight to the connection while no other call is in flight, and joins a
    /// batch of the calls already waiting while some are: no latency at rest, fewer hand-offs
    /// under load.
    pub adaptive: bool,
}

impl Pipelining {
    /// Adaptive batching: what a Redis whose pipelining the settings do not name gets. A
    /// batch gathers the calls that join it while the task yields to the requests being
    /// served, and closes when a yield brings none (at most 20 µs).
    pub const ADAPTIVE: Pipelining = Pipelining {
        window: Duration::from_micros(20),
        limit: 0,
        adaptive: true,
    };

    /// Whether calls are gathered at all.
    pub fn enabled(&self) -> bool {
        self.adaptive || !self.window.is_zero() || self.limit > 0
    }

    /// The most calls in one batch.
    pub(super) fn max_batch(&self) -> usize {
        if self.limit == 0 {
            usize::MAX
        } else {
            self.limit
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_hidden_in_logs() {
        assert_eq!(without_password("redis://u:pw@h:1"), "redis://u:***@h:1");
        assert_eq!(without_password("rediss://pw@h:1"), "rediss://***@h:1");
        assert_eq!(without_password("redis://h:1"), "redis://h:1");
    }
}
