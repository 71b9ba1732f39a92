//! Settings from command-line flags and environment variables, validated into `Settings`
//! before any port opens, one file per concern: the ports (`ports`), where the configuration
//! comes from (`source`), the store (`store`, `redis`), how requests are answered
//! (`requests`), what sluice tells about itself (`observability`, `traces`), recording calls
//! for replay (`record`), the admin port (`admin`), Kuadrant's protocol (`kuadrant`), and the
//! reference's variables sluice ignores or refuses (`compat`). envoyproxy/ratelimit's variable
//! names are accepted with their meaning (`GRPC_HOST`/`GRPC_PORT`, `RUNTIME_ROOT`, ...). clap
//! lives only here: the choices among a domain's options are `choices`.

use clap::Args;

mod admin;
mod choices;
mod compat;
mod kuadrant;
mod observability;
mod ports;
mod record;
mod redis;
mod requests;
mod source;
mod store;
mod traces;

use crate::rlqs::RlqsSettings;
pub use admin::{AdminArgs, AdminSettings};
pub use kuadrant::{KuadrantArgs, KuadrantSettings};
pub use observability::{LogFormat, ObservabilityArgs, ObservabilitySettings};
pub use ports::{
    ConnectionLimits, NetworkSettings, PortSettings, PortsArgs, PrometheusListener, TlsSettings,
};
pub use record::RecordArgs;
pub use redis::{GlobalSettings, RedisArgs, RedisSettings};
pub use requests::RequestArgs;
use sluice_core::engine::Charging;
use sluice_core::modifier::on_store_failure::Policy;
use sluice_limiter::LimiterOptions;
pub use source::{ConfigType, SourceArgs, SourceSettings};
pub use store::{StoreArgs, StoreKind, StoreSettings};
pub use traces::TracingArgs;

/// The flags of `sluice serve`, by concern; each has an environment variable.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub source: SourceArgs,
    #[command(flatten)]
    pub ports: PortsArgs,
    #[command(flatten)]
    pub store: StoreArgs,
    #[command(flatten)]
    pub requests: RequestArgs,
    #[command(flatten)]
    pub observability: ObservabilityArgs,
    #[command(flatten)]
    pub record: RecordArgs,
    #[command(flatten)]
    pub admin: AdminArgs,
    #[command(flatten)]
    pub kuadrant: KuadrantArgs,
}

/// Validated settings of a running server.
#[derive(Debug, Clone)]
pub struct Settings {
    pub source: SourceSettings,
    pub ports: PortSettings,
    pub store: StoreSettings,
    /// `/healthcheck` and the gRPC health follow the store.
    pub healthcheck_store: bool,
    pub service: LimiterOptions,
    /// `--failure-mode`: what a limit without its own answer for a failed store gets (the
    /// store is put behind that layer, `sluice_store::on_failure`).
    pub failure_mode: Policy,
    /// The RLQS service's behaviour.
    pub rlqs: RlqsSettings,
    pub observability: ObservabilitySettings,
    /// Recording decided calls (`--record`).
    pub record: Option<crate::record::RecordSettings>,
    /// The admin API's port (`--admin-addr`), when it is served.
    pub admin: Option<AdminSettings>,
    /// Kuadrant's protocol: what a request in flight may hold, Limitador's series' labels.
    pub kuadrant: KuadrantSettings,
}

impl ServeArgs {
    /// Resolves defaults and compatibility variables, and validates.
    pub fn into_settings(self) -> Result<Settings, SettingsError> {
        let observability = self.observability.into_settings()?;
        let trace_ratio = observability.tracing.as_ref().map(|t| t.sampling_rate);
        let mut source = self.source.into_settings()?;
        let service = self.requests.service_options(trace_ratio)?;
        let failure_mode: Policy = self.requests.failure_mode.into();
        source.load_options.every_hit = service.charging == Charging::EveryHit;
        let healthcheck_store = self.store.checks_health();
        let region_given = self.store.redis.region.is_some();
        let mut store = self.store.into_settings()?;
        match &store {
            StoreSettings::Redis(redis) => source.load_options.regions = redis.global.is_some(),
            StoreSettings::Memory { .. } if region_given => {
                return Err(SettingsError::Redis(
                    "--region needs --store redis: a region's replicas share its Redis".into(),
                ))
            }
            StoreSettings::Memory { .. } => {}
        }
        if let StoreSettings::Redis(redis) = &mut store {
            // A failure mode of local shares needs the replica count, breaker or not.
            redis.circuit.learn_replicas |= failure_mode == Policy::LocalShare;
        }
        let record = self
            .record
            .into_settings(&service, source.load_options.debt)?;
        Ok(Settings {
            source,
            ports: self.ports.into_settings()?,
            healthcheck_store,
            store,
            service,
            failure_mode,
            rlqs: self.requests.rlqs()?,
            observability,
            record,
            admin: self.admin.into_settings()?,
            kuadrant: self.kuadrant.into_settings()?,
        })
    }
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
    #[error("recording: {0}")]
    Record(String),
    #[error("admin API: {0}")]
    Admin(String),
    #[error("{setting}: {reason}")]
    Refused {
        setting: &'static str,
        reason: String,
    },
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

fn at_least_one(setting: &'static str, value: usize) -> Result<usize, SettingsError> {
    if value == 0 {
        return Err(SettingsError::Zero { setting });
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use std::path::PathBuf;

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

    #[test]
    fn limits_file_leasing_is_leasings_policy_or_refused_with_its_reason() {
        let leased = settings(&["--limits-file-leasing", "100"]).expect("valid");
        let policy = leased
            .source
            .load_options
            .limits_file_leasing
            .expect("leased");
        assert_eq!((policy.max_chunk, policy.max_hold_us), (100, 1_000_000));
        assert!(settings(&[])
            .expect("valid")
            .source
            .load_options
            .limits_file_leasing
            .is_none());
        let small = settings(&["--limits-file-leasing", "1"]).expect_err("refused");
        assert!(
            small.to_string().starts_with("--limits-file-leasing: "),
            "{small}"
        );
        let long = settings(&[
            "--limits-file-leasing",
            "9",
            "--limits-file-leasing-max-hold",
            "2m",
        ]);
        assert!(long.is_err(), "a hold past a minute");
    }

    #[test]
    fn the_grpc_port_has_the_threads_asked_for_or_one_a_cpu_when_the_store_suits() {
        let asked = settings(&["--grpc-threads", "3"])
            .expect("valid")
            .ports
            .network;
        assert_eq!(asked.serving_threads(true), 3);
        assert_eq!(asked.serving_threads(false), 3);
        // 0, the default: one a CPU (or tokio's own variable when it is set) for a store that
        // keeps a call on its thread, else none.
        let default = settings(&["--grpc-threads", "0"])
            .expect("valid")
            .ports
            .network;
        let cpus = std::env::var("TOKIO_WORKER_THREADS")
            .ok()
            .and_then(|threads| threads.parse().ok())
            .or_else(|| std::thread::available_parallelism().ok().map(|n| n.get()));
        assert_eq!(Some(default.serving_threads(true)), cpus);
        assert_eq!(default.serving_threads(false), 0);
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
    fn the_settings_page_says_what_sluice_does_with_every_reference_variable() {
        let readme = include_str!("../../../docs/settings.md");
        let missing: Vec<&str> = REFERENCE_VARIABLES
            .split_whitespace()
            .filter(|name| !readme.contains(&format!("| `{name}` |")))
            .collect();
        assert!(
            missing.is_empty(),
            "not in docs/settings.md's table: {missing:?}"
        );
    }

    #[test]
    fn the_settings_page_names_every_flag_and_its_variable() {
        use clap::CommandFactory;
        let page = include_str!("../../../docs/settings.md");
        let command = Cli::command();
        let missing: Vec<String> = command
            .get_arguments()
            .filter(|arg| !arg.is_hide_set())
            .flat_map(|arg| {
                let flag = arg.get_long().map(|long| format!("`--{long}"));
                let variable = arg
                    .get_env()
                    .map(|env| format!("`{}`", env.to_string_lossy()));
                flag.into_iter().chain(variable)
            })
            .filter(|name| !page.contains(name.as_str()))
            .collect();
        assert!(missing.is_empty(), "not in docs/settings.md: {missing:?}");
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
        assert_eq!(s.ports.grpc_addr, "127.0.0.1:9000".parse().unwrap());
        assert_eq!(s.ports.http_addr, "0.0.0.0:8080".parse().unwrap());
        assert_eq!(s.source.config_paths, vec![PathBuf::from("config")]);
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
            s.source.config_paths,
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
