//! Settings from command-line flags and environment variables, validated into `Settings`
//! before any port opens. envoyproxy/ratelimit's variable names are accepted with their
//! meaning (`GRPC_HOST`/`GRPC_PORT`, `RUNTIME_ROOT`/`RUNTIME_SUBDIRECTORY`, `SHADOW_MODE`, ...).

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use clap::builder::{BoolishValueParser, FalseyValueParser};
use clap::{ArgAction, Args, ValueEnum};

mod compat;
mod listen;
mod redis;
mod traces;

use crate::config::LoadOptions;
use crate::config::{XdsSettings, XdsTls};
use crate::duration;
use crate::engine::Charging;
use crate::http::HttpEndpoints;
use crate::otel::TracingSettings;
use crate::rlqs::{DefaultAction, RlqsSettings};
use crate::service::{FailureMode, HeaderForm, HeaderNames, RequestBounds, ServiceOptions};
use crate::statsd::{Mogrifier, StatsdSettings};
pub use listen::{ConnectionLimits, TlsSettings};
pub use redis::{RedisArgs, RedisSettings};
pub use traces::TracingArgs;

/// Which store keeps the limit state (`--store`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StoreKind {
    /// Embedded, in this process: one sluice instance.
    Memory,
    /// Redis: any number of sluice replicas share the state.
    Redis,
}

/// The store and its own settings: a Redis store without Redis settings cannot be built.
#[derive(Debug, Clone)]
pub enum StoreSettings {
    Memory {
        /// `--memory-max-keys`.
        memory_max_keys: usize,
        /// `--memory-max-bytes`.
        memory_max_bytes: usize,
    },
    Redis(Box<RedisSettings>),
}

/// `--log-format`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// The flags of `sluice serve`; each has an environment variable.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Configuration file or directory; repeatable. Default: `config/`, or
    /// `$RUNTIME_ROOT/$RUNTIME_SUBDIRECTORY/config` when RUNTIME_ROOT is set.
    #[arg(long = "config", env = "SLUICE_CONFIG", value_delimiter = ',')]
    pub config: Vec<PathBuf>,
    /// gRPC listen address. Default 0.0.0.0:8081, or GRPC_HOST:GRPC_PORT.
    #[arg(long, env = "SLUICE_GRPC_ADDR")]
    pub grpc_addr: Option<String>,
    /// HTTP listen address (health, metrics, JSON). Default 0.0.0.0:8080, or HOST:PORT.
    #[arg(long, env = "SLUICE_HTTP_ADDR")]
    pub http_addr: Option<String>,
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
    /// Send the stats to statsd too, under the reference's names (over TCP, as the reference).
    /// Off by default (the reference's default is on: sluice's metrics are Prometheus first).
    #[arg(long, env = "USE_STATSD", action = ArgAction::SetTrue, value_parser = FalseyValueParser::new())]
    pub use_statsd: bool,
    /// Send the stats to DogStatsD (UDP, with tags) instead of statsd.
    #[arg(long, env = "USE_DOG_STATSD", action = ArgAction::SetTrue, value_parser = FalseyValueParser::new())]
    pub use_dog_statsd: bool,
    /// The statsd or DogStatsD host.
    #[arg(long, env = "STATSD_HOST", default_value = "localhost")]
    pub statsd_host: String,
    /// The statsd or DogStatsD port.
    #[arg(long, env = "STATSD_PORT", default_value_t = 8125)]
    pub statsd_port: u16,
    /// How often stats are sent.
    #[arg(long, env = "STATS_FLUSH_INTERVAL", default_value = "10s", value_parser = duration::parse)]
    pub stats_flush_interval: Duration,
    /// Tags added to every stat: `key:value,key2:value2`.
    #[arg(long, env = "EXTRA_TAGS", default_value = "")]
    pub extra_tags: String,
    /// DogStatsD mogrifiers, by name: each reads DOG_STATSD_MOGRIFIER_<NAME>_PATTERN, _NAME and
    /// _TAGS (see the README).
    #[arg(long, env = "USE_DOG_STATSD_MOGRIFIERS", value_delimiter = ',')]
    pub use_dog_statsd_mogrifiers: Vec<String>,
    /// RLQS: what a bucket that no rule matches gets (`allow` all or `deny` all).
    #[arg(long, env = "SLUICE_RLQS_DEFAULT_ACTION", value_enum, default_value_t = DefaultAction::Allow)]
    pub rlqs_default_action: DefaultAction,
    /// RLQS: the shortest time-to-live of an assignment (otherwise twice the client's report
    /// interval, at most 10 minutes).
    #[arg(long, env = "SLUICE_RLQS_MIN_ASSIGNMENT_TTL", default_value = "10s", value_parser = duration::parse)]
    pub rlqs_min_assignment_ttl: Duration,
    /// RLQS: a bucket a client has not reported for this long is abandoned.
    #[arg(long, env = "SLUICE_RLQS_ABANDON_AFTER", default_value = "60s", value_parser = duration::parse)]
    pub rlqs_abandon_after: Duration,
    /// RLQS: most buckets one client stream may report.
    #[arg(
        long,
        env = "SLUICE_RLQS_MAX_BUCKETS_PER_STREAM",
        default_value_t = 1000
    )]
    pub rlqs_max_buckets_per_stream: usize,
    /// OpenTelemetry traces (`TRACING_ENABLED` and its companions).
    #[command(flatten)]
    pub tracing: TracingArgs,
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
    /// Where the configuration comes from: `FILE` (the paths), or `GRPC_XDS_SOTW` (an xDS
    /// management server, as Envoy Gateway runs envoyproxy/ratelimit).
    #[arg(long, env = "CONFIG_TYPE", default_value = "FILE", value_parser = parse_config_type)]
    pub config_type: ConfigType,
    /// The xDS management server, `host:port` (or a URL).
    #[arg(
        long,
        env = "CONFIG_GRPC_XDS_SERVER_URL",
        default_value = "localhost:18000"
    )]
    pub config_grpc_xds_server_url: String,
    /// The node id sluice gives the management server.
    #[arg(long, env = "CONFIG_GRPC_XDS_NODE_ID", default_value = "default")]
    pub config_grpc_xds_node_id: String,
    /// TLS towards the xDS server.
    #[arg(long, env = "CONFIG_GRPC_XDS_SERVER_USE_TLS", action = ArgAction::SetTrue, value_parser = FalseyValueParser::new())]
    pub config_grpc_xds_server_use_tls: bool,
    /// The CA the xDS server's certificate must chain to (default: the system's roots).
    #[arg(long, env = "CONFIG_GRPC_XDS_SERVER_TLS_CACERT")]
    pub config_grpc_xds_server_tls_cacert: Option<PathBuf>,
    /// The certificate sluice presents to the xDS server (with the key).
    #[arg(long, env = "CONFIG_GRPC_XDS_CLIENT_TLS_CERT")]
    pub config_grpc_xds_client_tls_cert: Option<PathBuf>,
    /// The key of --config-grpc-xds-client-tls-cert.
    #[arg(long, env = "CONFIG_GRPC_XDS_CLIENT_TLS_KEY")]
    pub config_grpc_xds_client_tls_key: Option<PathBuf>,
    /// The name the xDS server's certificate must be valid for (default: the URL's host).
    #[arg(long, env = "CONFIG_GRPC_XDS_SERVER_TLS_SAN")]
    pub config_grpc_xds_server_tls_san: Option<String>,
    /// Time before a lost xDS stream is opened again (give or take a fifth).
    #[arg(long, env = "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", default_value = "3s", value_parser = duration::parse)]
    pub config_grpc_xds_server_connect_retry_interval: Duration,
    /// Where limit state is kept: memory (the default) or redis. Unset, envoyproxy/ratelimit's
    /// BACKEND_TYPE=redis, or a REDIS_URL in the environment, choose redis.
    #[arg(long, env = "SLUICE_STORE", value_enum)]
    pub store: Option<StoreKind>,
    #[arg(long, env = "BACKEND_TYPE", hide = true)]
    pub backend_type: Option<String>,
    #[command(flatten)]
    pub redis: RedisArgs,
    /// What a call gets when the store fails: `unavailable` (gRPC UNAVAILABLE with the reason,
    /// so Envoy's failure_mode_deny decides), `allow` (OK) or `deny` (OVER_LIMIT).
    #[arg(long, env = "SLUICE_FAILURE_MODE", value_enum, default_value_t = FailureMode::Unavailable)]
    pub failure_mode: FailureMode,
    /// Let several files hold the same domain; their descriptors are merged.
    #[arg(long, env = "MERGE_DOMAIN_CONFIG", action = ArgAction::SetTrue, value_parser = FalseyValueParser::new())]
    pub merge_domain_config: bool,
    /// Every limit that does not say `debt` takes debt: a hit that does not fit is charged all
    /// the same (costs reported after the response, e.g. LLM tokens), and the limit denies
    /// until the debt is repaid at its own rate.
    #[arg(long, env = "SLUICE_DEBT", action = ArgAction::SetTrue, value_parser = FalseyValueParser::new())]
    pub debt: bool,
    /// Answer OK overall even when a limit is exceeded (descriptor statuses stay truthful).
    #[arg(long, env = "SHADOW_MODE", action = ArgAction::SetTrue, value_parser = FalseyValueParser::new())]
    pub shadow_mode: bool,
    /// Every limit is in quota mode (envoyproxy/ratelimit's `QUOTA_MODE`): a request is over
    /// limit only when every limit it meets is.
    #[arg(long, env = "QUOTA_MODE", action = ArgAction::SetTrue, value_parser = FalseyValueParser::new())]
    pub quota_mode: bool,
    /// Most descriptors one request may carry.
    #[arg(long, env = "SLUICE_MAX_DESCRIPTORS", default_value_t = RequestBounds::default().max_descriptors)]
    pub max_descriptors: usize,
    /// Most entries one descriptor may carry.
    #[arg(long, env = "SLUICE_MAX_ENTRIES", default_value_t = RequestBounds::default().max_entries)]
    pub max_entries: usize,
    /// Longest entry key, in bytes.
    #[arg(long, env = "SLUICE_MAX_KEY_BYTES", default_value_t = RequestBounds::default().max_key_bytes)]
    pub max_key_bytes: usize,
    /// Longest entry value (and domain), in bytes.
    #[arg(long, env = "SLUICE_MAX_VALUE_BYTES", default_value_t = RequestBounds::default().max_value_bytes)]
    pub max_value_bytes: usize,
    /// Most keys the memory store holds; at the bound only expired state makes room.
    #[arg(long, env = "SLUICE_MEMORY_MAX_KEYS", default_value_t = 1_000_000)]
    pub memory_max_keys: usize,
    /// Most bytes of state the memory store holds: its map's table as allocated, and each
    /// state's heap block (README, "The memory store"). At either bound only expired state is
    /// dropped to make room; when none is, a request needing a new key gets --failure-mode.
    #[arg(long, env = "SLUICE_MEMORY_MAX_BYTES", default_value_t = 256 * 1024 * 1024)]
    pub memory_max_bytes: usize,
    /// Add RateLimit-Limit, -Remaining, -Reset (and Retry-After when over) to responses.
    #[arg(long, env = "LIMIT_RESPONSE_HEADERS_ENABLED", action = ArgAction::SetTrue, value_parser = FalseyValueParser::new())]
    pub response_headers: bool,
    /// How RateLimit-Limit is written: `reference` (`10`, as envoyproxy/ratelimit) or
    /// `quota-policy` (`10, 10;w=60`: the window in seconds, as the IETF draft).
    #[arg(long, env = "SLUICE_RESPONSE_HEADERS_FORM", value_enum, default_value_t = HeaderForm::Reference)]
    pub response_headers_form: HeaderForm,
    #[arg(long, env = "LIMIT_LIMIT_HEADER", default_value = "RateLimit-Limit")]
    pub limit_limit_header: String,
    #[arg(
        long,
        env = "LIMIT_REMAINING_HEADER",
        default_value = "RateLimit-Remaining"
    )]
    pub limit_remaining_header: String,
    #[arg(long, env = "LIMIT_RESET_HEADER", default_value = "RateLimit-Reset")]
    pub limit_reset_header: String,
    /// A denied request charges none of its limits (envoyproxy/ratelimit's variable; sluice's
    /// default is true, the reference's false: with false, every limit that admits a request
    /// is charged even when another denies it).
    #[arg(long, env = "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", default_value_t = true, action = ArgAction::Set, value_parser = BoolishValueParser::new())]
    pub stop_cache_key_increment_when_overlimit: bool,
    /// Fill dynamic_metadata with the request and the matched limits' metadata.
    #[arg(long, env = "RESPONSE_DYNAMIC_METADATA", action = ArgAction::SetTrue, value_parser = FalseyValueParser::new())]
    pub response_dynamic_metadata: bool,
    /// Watch the config paths and reload on change (SIGHUP reloads either way).
    #[arg(long, env = "SLUICE_WATCH_CONFIG", default_value_t = true, action = ArgAction::Set, value_parser = BoolishValueParser::new())]
    pub watch_config: bool,
    /// Share of a limit past which admitted hits count as near the limit (metrics).
    #[arg(long, env = "NEAR_LIMIT_RATIO", default_value_t = 0.8)]
    pub near_limit_ratio: f64,
    /// Most per-limit metric label sets that carry values from requests (detailed_metric,
    /// value_to_metric, limit overrides); past it they share key1="_overflow_".
    #[arg(long, env = "SLUICE_MAX_METRIC_SERIES", default_value_t = 10_000)]
    pub max_metric_series: usize,
    /// `/healthcheck` answers 500 while the store does not answer.
    #[arg(long, env = "SLUICE_HEALTHCHECK_STORE", action = ArgAction::SetTrue, value_parser = FalseyValueParser::new())]
    pub healthcheck_store: bool,
    /// Serve `/json` (a ShouldRateLimit over HTTP: whoever reaches the HTTP port can spend any
    /// client's budget).
    #[arg(long, env = "SLUICE_HTTP_JSON", default_value_t = true, action = ArgAction::Set, value_parser = BoolishValueParser::new())]
    pub http_json: bool,
    /// Serve `/rlconfig` (every configured limit, to whoever reaches the HTTP port).
    #[arg(long, env = "SLUICE_HTTP_RLCONFIG", default_value_t = true, action = ArgAction::Set, value_parser = BoolishValueParser::new())]
    pub http_rlconfig: bool,
    /// envoyproxy/ratelimit's name of --healthcheck-store.
    #[arg(long, env = "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", hide = true, action = ArgAction::SetTrue, value_parser = FalseyValueParser::new())]
    pub redis_health_check_active_connection: bool,
    /// Report NOT_SERVING (gRPC health, and 500 on /healthcheck) while the loaded config has
    /// no domain, as envoyproxy/ratelimit does.
    #[arg(long, env = "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", action = ArgAction::SetTrue, value_parser = FalseyValueParser::new())]
    pub healthy_with_at_least_one_config_loaded: bool,
    /// Start even when the config fails to load (its errors are logged): serve with no limits
    /// until a reload succeeds. Without it, a config that fails at startup stops sluice.
    #[arg(long, env = "FORCE_START_WITHOUT_INITIAL_CONFIG", action = ArgAction::SetTrue, value_parser = FalseyValueParser::new())]
    pub force_start_without_initial_config: bool,
    /// On SIGTERM, time between reporting NOT_SERVING and closing the ports (so load
    /// balancers stop sending traffic first).
    #[arg(long, env = "SLUICE_SHUTDOWN_DRAIN_DELAY", default_value = "0s", value_parser = duration::parse)]
    pub shutdown_drain_delay: Duration,
    /// On SIGTERM, the most time in-flight calls get to finish after the ports close.
    #[arg(long, env = "SLUICE_SHUTDOWN_GRACE", default_value = "10s", value_parser = duration::parse)]
    pub shutdown_grace: Duration,
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
    /// Log level: error, warn, info, debug, trace (or a tracing filter).
    #[arg(long, env = "LOG_LEVEL", default_value = "info")]
    pub log_level: String,
    /// Log format: text or json.
    #[arg(long, env = "LOG_FORMAT", value_enum, ignore_case = true, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    #[arg(long, env = "GRPC_HOST", hide = true)]
    pub grpc_host: Option<String>,
    #[arg(long, env = "GRPC_PORT", hide = true)]
    pub grpc_port: Option<u16>,
    #[arg(long = "host", env = "HOST", hide = true)]
    pub http_host: Option<String>,
    #[arg(long = "port", env = "PORT", hide = true)]
    pub http_port: Option<u16>,
    #[arg(long, env = "RUNTIME_ROOT", hide = true)]
    pub runtime_root: Option<PathBuf>,
    #[arg(long, env = "RUNTIME_SUBDIRECTORY", hide = true)]
    pub runtime_subdirectory: Option<PathBuf>,
    #[arg(
        long,
        env = "RUNTIME_APPDIRECTORY",
        hide = true,
        default_value = "config"
    )]
    pub runtime_appdirectory: PathBuf,
}

/// Validated settings of a running server.
#[derive(Debug, Clone)]
pub struct Settings {
    pub config_paths: Vec<PathBuf>,
    pub load_options: LoadOptions,
    pub grpc_addr: SocketAddr,
    pub http_addr: SocketAddr,
    /// `USE_PROMETHEUS`: a listener of the metrics' own.
    pub prometheus: Option<PrometheusListener>,
    /// `GRPC_SERVER_USE_TLS`: the gRPC port's TLS.
    pub grpc_tls: Option<TlsSettings>,
    /// `CONFIG_TYPE=GRPC_XDS_SOTW`: the configuration's management server.
    pub xds: Option<XdsSettings>,
    /// `USE_STATSD` / `USE_DOG_STATSD`: the statsd sink.
    pub statsd: Option<StatsdSettings>,
    /// `TRACING_ENABLED`: the span export.
    pub tracing: Option<TracingSettings>,
    /// The RLQS service's behaviour.
    pub rlqs: RlqsSettings,
    pub store: StoreSettings,
    pub service: ServiceOptions,
    pub near_limit_ratio: f64,
    pub max_metric_series: usize,
    pub healthcheck_store: bool,
    pub http_endpoints: HttpEndpoints,
    pub healthy_with_at_least_one_config_loaded: bool,
    pub force_start_without_initial_config: bool,
    pub watch_config: bool,
    pub shutdown_drain_delay: Duration,
    pub shutdown_grace: Duration,
    pub network: NetworkSettings,
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
}

/// A setting that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("{setting}: '{value}' is not a listen address (host:port): {reason}")]
    Address {
        setting: &'static str,
        value: String,
        reason: String,
    },
    #[error("{setting}: must be at least 1")]
    Zero { setting: &'static str },
    #[error("Redis: {0}")]
    Redis(String),
    #[error(
        "BACKEND_TYPE '{0}' is not served by sluice: use redis (or unset it for the memory store)"
    )]
    Backend(String),
    #[error("{setting}: {value} is not between 0 and 1")]
    Ratio { setting: &'static str, value: f64 },
    #[error("gRPC TLS: {0}")]
    Tls(String),
    #[error("xDS: {0}")]
    Xds(String),
    #[error("statsd: {0}")]
    Statsd(String),
    #[error("tracing: {0}")]
    Tracing(String),
}

/// Where the configuration comes from (`CONFIG_TYPE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigType {
    File,
    GrpcXdsSotw,
}

fn parse_config_type(text: &str) -> Result<ConfigType, String> {
    match text.to_ascii_uppercase().as_str() {
        "FILE" => Ok(ConfigType::File),
        "GRPC_XDS_SOTW" => Ok(ConfigType::GrpcXdsSotw),
        _ => Err(format!("'{text}' is not FILE or GRPC_XDS_SOTW")),
    }
}

impl ServeArgs {
    /// The xDS source, when the configuration comes from one.
    fn xds(&self) -> Result<Option<XdsSettings>, SettingsError> {
        if self.config_type == ConfigType::File {
            return Ok(None);
        }
        let url = self.config_grpc_xds_server_url.as_str();
        if url.is_empty() {
            return Err(SettingsError::Xds(
                "CONFIG_TYPE=GRPC_XDS_SOTW needs CONFIG_GRPC_XDS_SERVER_URL".into(),
            ));
        }
        let tls = self.config_grpc_xds_server_use_tls;
        let server_url = match url.split_once("://") {
            Some((_, rest)) if tls => format!("https://{rest}"),
            Some(_) => url.to_string(),
            None if tls => format!("https://{url}"),
            None => format!("http://{url}"),
        };
        let client = match (
            &self.config_grpc_xds_client_tls_cert,
            &self.config_grpc_xds_client_tls_key,
        ) {
            (Some(cert), Some(key)) => Some((cert.clone(), key.clone())),
            (None, None) => None,
            _ => return Err(SettingsError::Xds(
                "CONFIG_GRPC_XDS_CLIENT_TLS_CERT and CONFIG_GRPC_XDS_CLIENT_TLS_KEY go together"
                    .into(),
            )),
        };
        let tls_files_without_tls = self.config_grpc_xds_server_tls_cacert.is_some()
            || client.is_some()
            || self.config_grpc_xds_server_tls_san.is_some();
        if tls_files_without_tls && !tls {
            return Err(SettingsError::Xds(
                "xDS TLS files or SAN are set but CONFIG_GRPC_XDS_SERVER_USE_TLS is not".into(),
            ));
        }
        Ok(Some(XdsSettings {
            server_url,
            node_id: self.config_grpc_xds_node_id.clone(),
            retry_interval: self.config_grpc_xds_server_connect_retry_interval,
            tls: tls.then(|| XdsTls {
                ca: self.config_grpc_xds_server_tls_cacert.clone(),
                client,
                san: self.config_grpc_xds_server_tls_san.clone(),
            }),
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

    /// Resolves defaults and compatibility variables, and validates.
    pub fn into_settings(self) -> Result<Settings, SettingsError> {
        let store = self.store_kind()?;
        let grpc_tls = self.grpc_tls()?;
        let xds = self.xds()?;
        let statsd = if self.use_statsd || self.use_dog_statsd {
            Some(StatsdSettings {
                address: format!("{}:{}", self.statsd_host, self.statsd_port),
                dog: self.use_dog_statsd,
                flush_interval: self.stats_flush_interval.max(Duration::from_millis(10)),
                tags: crate::statsd::parse_tags(&self.extra_tags)
                    .map_err(|e| SettingsError::Statsd(format!("EXTRA_TAGS: {e}")))?,
                mogrifiers: self
                    .use_dog_statsd_mogrifiers
                    .iter()
                    .map(|key| key.trim())
                    .filter(|key| !key.is_empty())
                    .map(|key| Mogrifier::from_vars(key, |name| std::env::var(name).ok()))
                    .collect::<Result<_, _>>()
                    .map_err(SettingsError::Statsd)?,
            })
        } else {
            None
        };
        let tracing = self.tracing.settings()?;
        let trace_ratio = tracing.as_ref().map(|t| t.sampling_rate);
        let grpc_addr = listen_addr(
            "--grpc-addr / SLUICE_GRPC_ADDR / GRPC_HOST:GRPC_PORT",
            self.grpc_addr.as_deref(),
            self.grpc_host.as_deref(),
            self.grpc_port.unwrap_or(8081),
        )?;
        let http_addr = listen_addr(
            "--http-addr / SLUICE_HTTP_ADDR / HOST:PORT",
            self.http_addr.as_deref(),
            self.http_host.as_deref(),
            self.http_port.unwrap_or(8080),
        )?;
        let prometheus = if self.use_prometheus {
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
                    value: self.prometheus_path,
                    reason: "a path starts with '/'".into(),
                });
            }
            Some(PrometheusListener {
                addr,
                path: self.prometheus_path,
            })
        } else {
            None
        };
        let bounds = RequestBounds {
            max_descriptors: at_least_one("--max-descriptors", self.max_descriptors)?,
            max_entries: at_least_one("--max-entries", self.max_entries)?,
            max_key_bytes: at_least_one("--max-key-bytes", self.max_key_bytes)?,
            max_value_bytes: at_least_one("--max-value-bytes", self.max_value_bytes)?,
        };
        let config_paths = if !self.config.is_empty() {
            self.config
        } else if let Some(root) = self.runtime_root {
            let sub = self.runtime_subdirectory.unwrap_or_default();
            vec![root.join(sub).join(self.runtime_appdirectory)]
        } else {
            vec![PathBuf::from("config")]
        };
        Ok(Settings {
            config_paths,
            load_options: LoadOptions {
                merge_domain_config: self.merge_domain_config,
                debt: self.debt,
            },
            grpc_addr,
            http_addr,
            prometheus,
            grpc_tls,
            xds,
            statsd,
            tracing,
            rlqs: RlqsSettings {
                default_action: self.rlqs_default_action,
                min_assignment_ttl: self.rlqs_min_assignment_ttl,
                abandon_after: self.rlqs_abandon_after,
                max_buckets_per_stream: at_least_one(
                    "--rlqs-max-buckets-per-stream",
                    self.rlqs_max_buckets_per_stream,
                )?,
            },
            store: match store {
                StoreKind::Redis => StoreSettings::Redis(Box::new(self.redis.into_settings()?)),
                StoreKind::Memory => StoreSettings::Memory {
                    memory_max_keys: at_least_one("--memory-max-keys", self.memory_max_keys)?,
                    memory_max_bytes: at_least_one("--memory-max-bytes", self.memory_max_bytes)?,
                },
            },
            service: ServiceOptions {
                bounds,
                shadow_mode: self.shadow_mode,
                failure_mode: self.failure_mode,
                response_headers: self.response_headers.then(|| HeaderNames {
                    limit: self.limit_limit_header.clone(),
                    remaining: self.limit_remaining_header.clone(),
                    reset: self.limit_reset_header.clone(),
                    form: self.response_headers_form,
                }),
                quota_mode: self.quota_mode,
                tracing: trace_ratio,
                response_dynamic_metadata: self.response_dynamic_metadata,
                charging: if self.stop_cache_key_increment_when_overlimit {
                    Charging::AllOrNothing
                } else {
                    Charging::EveryHit
                },
            },
            near_limit_ratio: ratio(
                "--near-limit-ratio / NEAR_LIMIT_RATIO",
                self.near_limit_ratio,
            )?,
            max_metric_series: self.max_metric_series,
            healthcheck_store: self.healthcheck_store || self.redis_health_check_active_connection,
            http_endpoints: HttpEndpoints {
                json: self.http_json,
                rlconfig: self.http_rlconfig,
            },
            healthy_with_at_least_one_config_loaded: self.healthy_with_at_least_one_config_loaded,
            force_start_without_initial_config: self.force_start_without_initial_config,
            watch_config: self.watch_config,
            shutdown_drain_delay: self.shutdown_drain_delay,
            shutdown_grace: self.shutdown_grace,
            network: NetworkSettings {
                grpc: ConnectionLimits {
                    max_connections: at_least_one("--max-connections", self.max_connections)?,
                    handshake_timeout: self.handshake_timeout,
                },
                http: ConnectionLimits {
                    max_connections: at_least_one(
                        "--http-max-connections",
                        self.http_max_connections,
                    )?,
                    handshake_timeout: self.handshake_timeout,
                },
                http_header_read_timeout: self.http_header_read_timeout,
                grpc_keepalive_interval: self.grpc_keepalive_interval,
                grpc_keepalive_timeout: self.grpc_keepalive_timeout,
                grpc_max_connection_age: self.grpc_max_connection_age,
                grpc_max_connection_age_grace: self.grpc_max_connection_age_grace,
            },
        })
    }
}

impl ServeArgs {
    /// `--store`, else the reference's BACKEND_TYPE, else redis when a Redis URL is given
    /// (REDIS_URL, the reference's default backend, or `--redis-url`), else memory.
    fn store_kind(&self) -> Result<StoreKind, SettingsError> {
        if let Some(store) = self.store {
            return Ok(store);
        }
        match self
            .backend_type
            .as_deref()
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            Some("redis") => Ok(StoreKind::Redis),
            Some(other) if !other.is_empty() => Err(SettingsError::Backend(other.to_string())),
            _ if !self.redis.redis_url.is_empty() => Ok(StoreKind::Redis),
            _ => Ok(StoreKind::Memory),
        }
    }
}

/// envoyproxy/ratelimit variables set in this process's environment that sluice ignores, each
/// with the reason: to be reported once at startup. (Every variable sluice honours is read by
/// clap, through the `env` of its flag; this is the only other read of the environment.)
pub fn ignored_variables() -> Vec<(String, &'static str)> {
    compat::ignored_in(std::env::vars())
}

/// envoyproxy/ratelimit's security settings set in this process's environment that sluice
/// cannot honour, each with what it asks for: sluice must not start.
pub fn refused_variables() -> Vec<(String, &'static str)> {
    compat::refused_in(std::env::vars())
}

fn ratio(setting: &'static str, value: f64) -> Result<f64, SettingsError> {
    if !(0.0..=1.0).contains(&value) {
        return Err(SettingsError::Ratio { setting, value });
    }
    Ok(value)
}

fn at_least_one(setting: &'static str, value: usize) -> Result<usize, SettingsError> {
    if value == 0 {
        return Err(SettingsError::Zero { setting });
    }
    Ok(value)
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: ServeArgs,
    }

    fn settings(argv: &[&str]) -> Result<Settings, SettingsError> {
        let mut full = vec!["sluice"];
        full.extend_from_slice(argv);
        Cli::parse_from(full).args.into_settings()
    }

    /// Every variable envoyproxy/ratelimit reads (its `src/settings/settings.go`, 2026).
    const REFERENCE_VARIABLES: &str = "BACKEND_TYPE CACHE_KEY_PREFIX CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS \
        CONFIG_GRPC_XDS_CLIENT_TLS_CERT CONFIG_GRPC_XDS_CLIENT_TLS_KEY CONFIG_GRPC_XDS_NODE_ID \
        CONFIG_GRPC_XDS_NODE_METADATA CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL \
        CONFIG_GRPC_XDS_SERVER_TLS_CACERT CONFIG_GRPC_XDS_SERVER_TLS_SAN CONFIG_GRPC_XDS_SERVER_URL \
        CONFIG_GRPC_XDS_SERVER_USE_TLS CONFIG_TYPE DEBUG_HOST DEBUG_PORT DISABLE_STATS \
        EXPIRATION_JITTER_MAX_SECONDS EXTRA_TAGS FORCE_START_WITHOUT_INITIAL_CONFIG \
        GRPC_CLIENT_TLS_CACERT GRPC_CLIENT_TLS_SAN GRPC_HOST \
        GRPC_MAX_CONNECTION_AGE GRPC_MAX_CONNECTION_AGE_GRACE GRPC_PORT GRPC_SERVER_TLS_CERT \
        GRPC_SERVER_TLS_KEY GRPC_SERVER_USE_TLS GRPC_UDS HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED \
        HOST LIMIT_LIMIT_HEADER LIMIT_REMAINING_HEADER LIMIT_RESET_HEADER \
        LIMIT_RESPONSE_HEADERS_ENABLED LOCAL_CACHE_SIZE_IN_BYTES LOG_FORMAT LOG_LEVEL \
        MEMCACHE_HOST_PORT MEMCACHE_MAX_IDLE_CONNS MEMCACHE_SRV MEMCACHE_SRV_REFRESH MEMCACHE_TLS MEMCACHE_TLS_CACERT \
        MEMCACHE_TLS_CLIENT_CERT MEMCACHE_TLS_CLIENT_KEY MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION \
        MERGE_DOMAIN_CONFIG NEAR_LIMIT_RATIO PORT PROMETHEUS_ADDR PROMETHEUS_MAPPER_YAML \
        PROMETHEUS_PATH PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS QUOTA_MODE REDIS_AUTH \
        REDIS_CLUSTER_PIPELINE_PARALLELISM REDIS_HEALTH_CHECK_ACTIVE_CONNECTION REDIS_PERSECOND \
        REDIS_PERSECOND_AUTH REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM \
        REDIS_PERSECOND_PIPELINE_LIMIT REDIS_PERSECOND_PIPELINE_WINDOW \
        REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR REDIS_PERSECOND_POOL_SIZE \
        REDIS_PERSECOND_SENTINEL_AUTH REDIS_PERSECOND_SOCKET_TYPE REDIS_PERSECOND_TIMEOUT \
        REDIS_PERSECOND_TLS REDIS_PERSECOND_TYPE REDIS_PERSECOND_URL REDIS_PIPELINE_LIMIT \
        REDIS_PIPELINE_WINDOW REDIS_POOL_ON_EMPTY_BEHAVIOR REDIS_POOL_SIZE REDIS_SENTINEL_AUTH \
        REDIS_SOCKET_TYPE REDIS_STARTUP_INITIAL_INTERVAL REDIS_STARTUP_MAX_ELAPSED_TIME \
        REDIS_STARTUP_MAX_INTERVAL REDIS_TIMEOUT REDIS_TLS REDIS_TLS_CACERT REDIS_TLS_CLIENT_CERT \
        REDIS_TLS_CLIENT_KEY REDIS_TLS_SKIP_HOSTNAME_VERIFICATION REDIS_TYPE REDIS_URL \
        RESPONSE_DYNAMIC_METADATA RUNTIME_APPDIRECTORY RUNTIME_IGNOREDOTFILES RUNTIME_ROOT \
        RUNTIME_SUBDIRECTORY RUNTIME_WATCH_ROOT SHADOW_MODE STATSD_HOST STATSD_PORT \
        STATS_FLUSH_INTERVAL STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT TRACING_ENABLED \
        TRACING_EXPORTER_PROTOCOL TRACING_SAMPLING_RATE TRACING_SERVICE_INSTANCE_ID \
        TRACING_SERVICE_NAME TRACING_SERVICE_NAMESPACE USE_DOG_STATSD USE_DOG_STATSD_MOGRIFIERS \
        USE_PROMETHEUS USE_STATSD XDS_CLIENT_BACKOFF_INITIAL_INTERVAL XDS_CLIENT_BACKOFF_JITTER \
        XDS_CLIENT_BACKOFF_MAX_INTERVAL XDS_CLIENT_BACKOFF_RANDOM_FACTOR \
        XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES";

    #[test]
    fn the_readme_says_what_sluice_does_with_every_reference_variable() {
        let readme = include_str!("../README.md");
        let missing: Vec<&str> = REFERENCE_VARIABLES
            .split_whitespace()
            .filter(|name| !readme.contains(&format!("| `{name}` |")))
            .collect();
        assert!(missing.is_empty(), "not in the README's table: {missing:?}");
    }

    #[test]
    fn every_reference_variable_is_honoured_or_reported_as_ignored() {
        use clap::CommandFactory;
        let command = Cli::command();
        let honoured: Vec<String> = command
            .get_arguments()
            .filter_map(|arg| arg.get_env())
            .map(|env| env.to_string_lossy().into_owned())
            .collect();
        let silent: Vec<&str> = REFERENCE_VARIABLES
            .split_whitespace()
            .filter(|name| !honoured.iter().any(|h| h == name))
            .filter(|name| {
                let vars = || [(name.to_string(), "true".to_string())].into_iter();
                compat::ignored_in(vars()).is_empty() && compat::refused_in(vars()).is_empty()
            })
            .collect();
        assert!(
            silent.is_empty(),
            "neither honoured nor reported: {silent:?}"
        );
    }

    #[test]
    fn defaults_and_compat_ports() {
        let s = settings(&["--grpc-host", "127.0.0.1", "--grpc-port", "9000"]).unwrap();
        assert_eq!(s.grpc_addr, "127.0.0.1:9000".parse().unwrap());
        assert_eq!(s.http_addr, "0.0.0.0:8080".parse().unwrap());
        assert_eq!(s.config_paths, vec![PathBuf::from("config")]);
    }

    #[test]
    fn runtime_root_names_the_config_directory() {
        let s = settings(&[
            "--runtime-root",
            "/data",
            "--runtime-subdirectory",
            "ratelimit",
        ])
        .unwrap();
        assert_eq!(
            s.config_paths,
            vec![PathBuf::from("/data/ratelimit/config")]
        );
    }

    #[test]
    fn bad_address_is_refused_with_the_setting_named() {
        let err = settings(&["--grpc-addr", "nowhere"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("--grpc-addr"), "{err}");
        assert!(err.contains("nowhere"), "{err}");
    }
}
