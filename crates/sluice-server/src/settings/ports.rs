//! The ports: the gRPC and HTTP listen addresses (with the reference's `GRPC_HOST`/`GRPC_PORT`
//! and `HOST`/`PORT`), the Prometheus listener of `USE_PROMETHEUS`, the gRPC port's TLS, what
//! each port allows its connections, the HTTP endpoints served, and shutdown's drain.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use clap::builder::{BoolishValueParser, FalseyValueParser};
use clap::{ArgAction, Args};

use super::SettingsError;
use crate::http::HttpEndpoints;
use sluice_core::duration;

/// The flags of the ports.
#[derive(Debug, Clone, Args)]
pub struct PortsArgs {
    /// gRPC listen address. Default 0.0.0.0:8081, or GRPC_HOST:GRPC_PORT.
    #[arg(long, env = "SLUICE_GRPC_ADDR")]
    pub grpc_addr: Option<String>,
    /// HTTP listen address (health, metrics, JSON). Default 0.0.0.0:8080, or HOST:PORT.
    #[arg(long, env = "SLUICE_HTTP_ADDR")]
    pub http_addr: Option<String>,
    #[arg(long, env = "GRPC_HOST", hide = true)]
    pub grpc_host: Option<String>,
    #[arg(long, env = "GRPC_PORT", hide = true)]
    pub grpc_port: Option<u16>,
    #[arg(long = "host", env = "HOST", hide = true)]
    pub http_host: Option<String>,
    #[arg(long = "port", env = "PORT", hide = true)]
    pub http_port: Option<u16>,
    /// Serve the metrics on a listener of their own as well (envoyproxy/ratelimit's
    /// `USE_PROMETHEUS`, at `PROMETHEUS_ADDR` and `PROMETHEUS_PATH`).
    #[arg(long, env = "USE_PROMETHEUS", action = ArgAction::SetTrue, value_parser = FalseyValueParser::new())]
    pub use_prometheus: bool,
    /// With --use-prometheus: its address (the reference's `:9090` form works).
    #[arg(long, env = "PROMETHEUS_ADDR", default_value = ":9090")]
    pub prometheus_addr: String,
    /// With --use-prometheus: the path of the metrics there.
    #[arg(long, env = "PROMETHEUS_PATH", default_value = "/metrics")]
    pub prometheus_path: String,
    /// Serve the gRPC port over TLS (envoyproxy/ratelimit's variable), with
    /// --grpc-server-tls-cert and --grpc-server-tls-key.
    #[arg(long, env = "GRPC_SERVER_USE_TLS", action = ArgAction::SetTrue, value_parser = FalseyValueParser::new())]
    pub grpc_server_use_tls: bool,
    /// PEM certificate (chain) of the gRPC port; read again when the file changes.
    #[arg(long, env = "GRPC_SERVER_TLS_CERT")]
    pub grpc_server_tls_cert: Option<PathBuf>,
    /// PEM private key of the gRPC port.
    #[arg(long, env = "GRPC_SERVER_TLS_KEY")]
    pub grpc_server_tls_key: Option<PathBuf>,
    /// Require client certificates on the gRPC port, signed by this PEM CA.
    #[arg(long, env = "GRPC_CLIENT_TLS_CACERT")]
    pub grpc_client_tls_cacert: Option<PathBuf>,
    /// ...and valid for this DNS name (a subject alternative name of the client's certificate).
    #[arg(long, env = "GRPC_CLIENT_TLS_SAN")]
    pub grpc_client_tls_san: Option<String>,
    /// Serve `/json` (a ShouldRateLimit over HTTP: whoever reaches the HTTP port can spend any
    /// client's budget).
    #[arg(long, env = "SLUICE_HTTP_JSON", default_value_t = true, action = ArgAction::Set, value_parser = BoolishValueParser::new())]
    pub http_json: bool,
    /// Serve `/rlconfig` (every configured limit, to whoever reaches the HTTP port).
    #[arg(long, env = "SLUICE_HTTP_RLCONFIG", default_value_t = true, action = ArgAction::Set, value_parser = BoolishValueParser::new())]
    pub http_rlconfig: bool,
    /// Most connections open at once on the gRPC port; more wait to be accepted.
    #[arg(long, env = "SLUICE_MAX_CONNECTIONS", default_value_t = 10_000)]
    pub max_connections: usize,
    /// Most connections open at once on the HTTP port.
    #[arg(long, env = "SLUICE_HTTP_MAX_CONNECTIONS", default_value_t = 1024)]
    pub http_max_connections: usize,
    /// Time a new connection (either port) has to send its first bytes before it is closed.
    #[arg(long, env = "SLUICE_HANDSHAKE_TIMEOUT", default_value = "10s", value_parser = duration::parse)]
    pub handshake_timeout: Duration,
    /// Time an HTTP request's head has to arrive whole (slowloris clients are closed).
    #[arg(long, env = "SLUICE_HTTP_HEADER_READ_TIMEOUT", default_value = "10s", value_parser = duration::parse)]
    pub http_header_read_timeout: Duration,
    /// HTTP/2 keepalive on the gRPC port: a PING after this long without frames...
    #[arg(long, env = "SLUICE_GRPC_KEEPALIVE_INTERVAL", default_value = "30s", value_parser = duration::parse)]
    pub grpc_keepalive_interval: Duration,
    /// ...and the connection closed when its answer takes longer than this.
    #[arg(long, env = "SLUICE_GRPC_KEEPALIVE_TIMEOUT", default_value = "10s", value_parser = duration::parse)]
    pub grpc_keepalive_timeout: Duration,
    /// A gRPC connection is asked to go away (GOAWAY) after this long, so that clients
    /// spread over new replicas (envoyproxy/ratelimit's variable and default).
    #[arg(long, env = "GRPC_MAX_CONNECTION_AGE", default_value = "24h", value_parser = duration::parse)]
    pub grpc_max_connection_age: Duration,
    /// ...and closed this long after that.
    #[arg(long, env = "GRPC_MAX_CONNECTION_AGE_GRACE", default_value = "1h", value_parser = duration::parse)]
    pub grpc_max_connection_age_grace: Duration,
    /// Threads of their own serving the gRPC port's connections, each new one going to the
    /// thread with the fewest open; 0: one a CPU available to the process
    /// (`TOKIO_WORKER_THREADS` when set) when the store keeps a call on its thread (memory, a
    /// single Redis over plain TCP pipelined adaptively), else none (the shared runtime).
    #[arg(long, env = "SLUICE_GRPC_THREADS", default_value_t = 0)]
    pub grpc_threads: usize,
    /// On SIGTERM, time between reporting NOT_SERVING and closing the ports (so load
    /// balancers stop sending traffic first).
    #[arg(long, env = "SLUICE_SHUTDOWN_DRAIN_DELAY", default_value = "0s", value_parser = duration::parse)]
    pub shutdown_drain_delay: Duration,
    /// On SIGTERM, the most time in-flight calls get to finish after the ports close.
    #[arg(long, env = "SLUICE_SHUTDOWN_GRACE", default_value = "10s", value_parser = duration::parse)]
    pub shutdown_grace: Duration,
}

/// What one port allows its connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    pub max_connections: usize,
    /// The time a new connection has to send its first bytes.
    pub handshake_timeout: Duration,
}

/// The TLS files and checks of the gRPC port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// Client certificates are required and must chain to this CA.
    pub client_ca: Option<PathBuf>,
    /// ...and be valid for this name (a DNS name in their subject alternative names).
    pub client_san: Option<String>,
}

/// Where the metrics are served on their own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrometheusListener {
    pub addr: SocketAddr,
    pub path: String,
}

/// What the ports allow their connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetworkSettings {
    pub grpc: ConnectionLimits,
    pub http: ConnectionLimits,
    pub http_header_read_timeout: Duration,
    pub grpc_keepalive_interval: Duration,
    pub grpc_keepalive_timeout: Duration,
    pub grpc_max_connection_age: Duration,
    pub grpc_max_connection_age_grace: Duration,
    /// Threads serving the gRPC port's connections as asked; 0: as the store suits
    /// (`serving_threads`).
    pub grpc_threads: usize,
}

/// The ports, validated.
#[derive(Debug, Clone)]
pub struct PortSettings {
    pub grpc_addr: SocketAddr,
    pub http_addr: SocketAddr,
    /// `USE_PROMETHEUS`: a listener of the metrics' own.
    pub prometheus: Option<PrometheusListener>,
    /// `GRPC_SERVER_USE_TLS`: the gRPC port's TLS.
    pub grpc_tls: Option<TlsSettings>,
    pub http_endpoints: HttpEndpoints,
    pub network: NetworkSettings,
    pub shutdown_drain_delay: Duration,
    pub shutdown_grace: Duration,
}

impl PortsArgs {
    /// Resolves the compatibility variables and validates.
    pub fn into_settings(self) -> Result<PortSettings, SettingsError> {
        Ok(PortSettings {
            grpc_addr: listen_addr(
                "--grpc-addr / SLUICE_GRPC_ADDR / GRPC_HOST:GRPC_PORT",
                self.grpc_addr.as_deref(),
                self.grpc_host.as_deref(),
                self.grpc_port.unwrap_or(8081),
            )?,
            http_addr: listen_addr(
                "--http-addr / SLUICE_HTTP_ADDR / HOST:PORT",
                self.http_addr.as_deref(),
                self.http_host.as_deref(),
                self.http_port.unwrap_or(8080),
            )?,
            prometheus: self.prometheus()?,
            grpc_tls: self.grpc_tls()?,
            http_endpoints: HttpEndpoints {
                json: self.http_json,
                rlconfig: self.http_rlconfig,
            },
            network: self.network()?,
            shutdown_drain_delay: self.shutdown_drain_delay,
            shutdown_grace: self.shutdown_grace,
        })
    }

    /// The Prometheus listener of `USE_PROMETHEUS`, if asked for.
    fn prometheus(&self) -> Result<Option<PrometheusListener>, SettingsError> {
        if !self.use_prometheus {
            return Ok(None);
        }
        // Go's `:9090` is every interface.
        let addr = match self.prometheus_addr.strip_prefix(':') {
            Some(port) => format!("0.0.0.0:{port}"),
            None => self.prometheus_addr.clone(),
        };
        let setting = "--prometheus-addr / PROMETHEUS_ADDR";
        let addr = listen_addr(setting, Some(&addr), None, 0)?;
        if !self.prometheus_path.starts_with('/') {
            return Err(SettingsError::Address {
                setting: "--prometheus-path / PROMETHEUS_PATH",
                value: self.prometheus_path.clone(),
                reason: "a path starts with '/'".into(),
            });
        }
        Ok(Some(PrometheusListener {
            addr,
            path: self.prometheus_path.clone(),
        }))
    }

    /// The gRPC port's TLS, if asked for; a TLS setting that cannot be honoured as given is an
    /// error, never plaintext.
    fn grpc_tls(&self) -> Result<Option<TlsSettings>, SettingsError> {
        let refuse = |reason: &str| Err(SettingsError::Tls(reason.to_string()));
        if !self.grpc_server_use_tls {
            if self.grpc_server_tls_cert.is_some()
                || self.grpc_server_tls_key.is_some()
                || self.grpc_client_tls_cacert.is_some()
                || self.grpc_client_tls_san.is_some()
            {
                return refuse("GRPC_SERVER_TLS_CERT, GRPC_SERVER_TLS_KEY, GRPC_CLIENT_TLS_CACERT or GRPC_CLIENT_TLS_SAN is set but GRPC_SERVER_USE_TLS is not: set it, or unset them");
            }
            return Ok(None);
        }
        let (Some(cert), Some(key)) = (&self.grpc_server_tls_cert, &self.grpc_server_tls_key)
        else {
            return refuse(
                "GRPC_SERVER_USE_TLS needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY",
            );
        };
        if self.grpc_client_tls_san.is_some() && self.grpc_client_tls_cacert.is_none() {
            return refuse("GRPC_CLIENT_TLS_SAN needs GRPC_CLIENT_TLS_CACERT (client certificates are checked against it)");
        }
        Ok(Some(TlsSettings {
            cert: cert.clone(),
            key: key.clone(),
            client_ca: self.grpc_client_tls_cacert.clone(),
            client_san: self.grpc_client_tls_san.clone(),
        }))
    }

    /// What the ports allow their connections.
    fn network(&self) -> Result<NetworkSettings, SettingsError> {
        let limits = |setting, max_connections| {
            Ok::<_, SettingsError>(ConnectionLimits {
                max_connections: super::at_least_one(setting, max_connections)?,
                handshake_timeout: self.handshake_timeout,
            })
        };
        Ok(NetworkSettings {
            grpc: limits("--max-connections", self.max_connections)?,
            http: limits("--http-max-connections", self.http_max_connections)?,
            http_header_read_timeout: self.http_header_read_timeout,
            grpc_keepalive_interval: self.grpc_keepalive_interval,
            grpc_keepalive_timeout: self.grpc_keepalive_timeout,
            grpc_max_connection_age: self.grpc_max_connection_age,
            grpc_max_connection_age_grace: self.grpc_max_connection_age_grace,
            grpc_threads: self.grpc_threads,
        })
    }
}

impl NetworkSettings {
    /// The threads of their own the gRPC port's connections are served on: as many as asked;
    /// asked for none, one a CPU when the store keeps a call on the thread it was made on
    /// (`keeps_calls_on_their_thread`), else none, the connections served on the runtime
    /// shared with the rest (where a store whose connection's task runs on that runtime wakes
    /// its callers without crossing runtimes).
    pub fn serving_threads(&self, keeps_calls_on_their_thread: bool) -> usize {
        match self.grpc_threads {
            0 if keeps_calls_on_their_thread => default_threads(),
            asked => asked,
        }
    }
}

/// One thread a CPU the process may use, as tokio's runtime counts its workers
/// (`TOKIO_WORKER_THREADS` when set to a number).
fn default_threads() -> usize {
    std::env::var("TOKIO_WORKER_THREADS")
        .ok()
        .and_then(|threads| threads.trim().parse::<usize>().ok())
        .filter(|threads| *threads > 0)
        .or_else(|| std::thread::available_parallelism().ok().map(|n| n.get()))
        .unwrap_or(1)
}

/// `explicit` when given, else `host:port` from the compatibility variables.
fn listen_addr(
    setting: &'static str,
    explicit: Option<&str>,
    host: Option<&str>,
    port: u16,
) -> Result<SocketAddr, SettingsError> {
    let value = match explicit {
        Some(value) => value.to_string(),
        None => format!("{}:{port}", host.unwrap_or("0.0.0.0")),
    };
    let error = |reason: String| SettingsError::Address {
        setting,
        value: value.clone(),
        reason,
    };
    let mut addrs = value.to_socket_addrs().map_err(|e| error(e.to_string()))?;
    addrs
        .next()
        .ok_or_else(|| error("it resolves to no address".into()))
}
