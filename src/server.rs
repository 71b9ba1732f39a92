//! The composition root: builds the config, the store, the gRPC services and the HTTP
//! endpoints from `Settings`, serves them on the listeners it is given, reloads the config,
//! serves until `shutdown` completes, then reports NOT_SERVING, drains and stops.

mod accept;
use accept::Accepting;
pub use accept::ConnectionLimits;
mod http_serve;
mod status_codes;
mod tls;
pub use tls::{TlsConfig, TlsError, TlsSettings};

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::net::TcpListener;
use tokio::sync::{watch, Notify};
use tonic::transport::Server;
use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;

use crate::config::{self, Config, ConfigErrors, ReloadResult, Reloader, XdsSource};
use crate::http::{self, Endpoints, Readiness, Scrapes};
use crate::metrics::Metrics;
use crate::proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_server::RateLimitQuotaServiceServer;
use crate::proto::rate_limit_service_server::RateLimitServiceServer;
use crate::proto::rate_limit_service_server::SERVICE_NAME;
use crate::proto::FILE_DESCRIPTOR_SET;
use crate::rlqs::budget::{Budget, MemoryBudget, RedisBudget};
use crate::rlqs::QuotaService;
use crate::service::RateLimiter;
use crate::settings::{Settings, StoreSettings};
use crate::statsd::Statsd;
use crate::store::local_cache::WithLocalCache;
use crate::store::memory::MemoryStore;
use crate::store::redis::{RedisStore, RedisTargets};
use crate::store::{Store, StoreError, SystemClock};

/// Health service names reported: the server as a whole, the name envoyproxy/ratelimit uses,
/// and the RLS service itself.
const HEALTH_NAMES: [&str; 4] = ["", "ratelimit", SERVICE_NAME, QUOTA_SERVICE_NAME];

/// The RLQS service's name, for health checks.
const QUOTA_SERVICE_NAME: &str = "envoy.service.rate_limit_quota.v3.RateLimitQuotaService";

/// How often the memory store drops expired state.
const SWEEP_INTERVAL: Duration = Duration::from_secs(1);

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("configuration refused:\n{0}")]
    Config(#[from] ConfigErrors),
    #[error("loading the configuration: {0}")]
    ConfigTask(tokio::task::JoinError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot read a listener's address: {0}")]
    LocalAddr(std::io::Error),
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("gRPC reflection: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    #[error("gRPC server: {0}")]
    Transport(#[from] tonic::transport::Error),
    #[error("HTTP server: {0}")]
    HttpServe(std::io::Error),
    #[error("the {0} server stopped by itself")]
    Ended(&'static str),
    #[error("server task: {0}")]
    Task(String),
    #[error("gRPC TLS: {0}")]
    Tls(#[from] TlsError),
}

/// The two ports, bound by the caller (`main`, or a test on `127.0.0.1:0`).
pub struct Listeners {
    pub grpc: TcpListener,
    pub http: TcpListener,
    /// `USE_PROMETHEUS`: the metrics' own.
    pub prometheus: Option<TcpListener>,
}

impl Listeners {
    /// Binds the gRPC and HTTP addresses of `settings`.
    pub async fn bind(settings: &Settings) -> Result<Listeners, ServerError> {
        let prometheus = match &settings.prometheus {
            Some(prometheus) => Some(bind(prometheus.addr).await?),
            None => None,
        };
        Ok(Listeners {
            grpc: bind(settings.grpc_addr).await?,
            http: bind(settings.http_addr).await?,
            prometheus,
        })
    }

    /// The gRPC port's address.
    pub fn grpc_addr(&self) -> Result<SocketAddr, ServerError> {
        local_addr(&self.grpc)
    }

    /// The HTTP port's address.
    pub fn http_addr(&self) -> Result<SocketAddr, ServerError> {
        local_addr(&self.http)
    }
}

/// Loads the config, builds the store, and serves on `listeners` until `shutdown` completes;
/// `reload` asks for a config reload (SIGHUP).
pub async fn run(
    settings: Settings,
    listeners: Listeners,
    shutdown: impl Future<Output = ()> + Send + 'static,
    reload: Arc<Notify>,
) -> Result<(), ServerError> {
    let mut metrics = Metrics::new(settings.near_limit_ratio, settings.max_metric_series);
    if let Some(statsd) = &settings.statsd {
        let statsd = Arc::new(Statsd::new(statsd.clone()));
        tokio::spawn(statsd.clone().run());
        metrics = metrics.with_statsd(statsd);
    }
    if settings.tracing.is_some() {
        metrics = metrics.with_span_counts(crate::otel::span_counts());
    }
    let metrics = Arc::new(metrics);
    tokio::spawn(metrics_upkeep(Arc::downgrade(&metrics)));
    let config = if let Some(xds) = &settings.xds {
        // Nothing is limited until the management server's first snapshot.
        tracing::info!(server = %xds.server_url, node = %xds.node_id, "configuration from xDS");
        Config::default()
    } else {
        load_files(&settings, &metrics).await?
    };
    let run = Running {
        settings: &settings,
        listeners,
        metrics,
        shutdown,
        reload,
    };
    match &settings.store {
        StoreSettings::Memory {
            memory_max_keys,
            memory_max_bytes,
        } => {
            let store = MemoryStore::new(*memory_max_keys, Arc::new(SystemClock))
                .with_max_bytes(*memory_max_bytes);
            let store = Arc::new(store);
            tokio::spawn(sweep_memory_store(Arc::downgrade(&store)));
            run.serve(config, store, Arc::new(MemoryBudget::default()))
                .await
        }
        StoreSettings::Redis(redis) => {
            tracing::info!(redis = %redis.target.describe(), "connecting to Redis");
            if let Some(per_second) = &redis.per_second {
                tracing::info!(redis = %per_second.describe(), "per-second limits in their own Redis");
            }
            let targets = RedisTargets {
                main: &redis.target,
                per_second: redis.per_second.as_ref(),
            };
            let store = RedisStore::connect(
                targets,
                redis.redis_startup_wait,
                redis.cache_key_prefix.clone(),
                redis.redis_time,
                Arc::new(SystemClock),
            )
            .await?;
            tracing::info!(redis = %redis.target.describe(), "Redis connected, scripts loaded");
            if redis.local_cache_size_in_bytes == 0 {
                let budget = Arc::new(RedisBudget::of(&store));
                return run.serve(config, Arc::new(store), budget).await;
            }
            let cached = WithLocalCache::new(
                store,
                redis.local_cache_size_in_bytes,
                Arc::new(SystemClock),
            );
            let budget = Arc::new(RedisBudget::of(cached.inner()));
            run.serve(config, Arc::new(cached), budget).await
        }
    }
}

/// Loads the configuration files at startup; with FORCE_START_WITHOUT_INITIAL_CONFIG a
/// refused load starts with no limits.
async fn load_files(settings: &Settings, metrics: &Metrics) -> Result<Config, ServerError> {
    let (paths, options) = (settings.config_paths.clone(), settings.load_options);
    let config = tokio::task::spawn_blocking(move || config::load(&paths, options))
        .await
        .map_err(ServerError::ConfigTask)?;
    metrics.record_config_load(config.is_ok());
    let config = match config {
        Ok(config) => config,
        Err(errors) if settings.force_start_without_initial_config => {
            for error in &errors.0 {
                tracing::error!(
                    "config refused, starting without limits until a reload loads one: {error}"
                );
            }
            Config::default()
        }
        Err(errors) => return Err(errors.into()),
    };
    config.log_warnings();
    let paths: Vec<String> = settings
        .config_paths
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    tracing::info!(
        paths = %paths.join(","),
        domains = config.domains().len(),
        limits = config.rule_count(),
        "config loaded"
    );
    Ok(config)
}

/// What serving needs besides the config and the store.
struct Running<'a, F> {
    settings: &'a Settings,
    listeners: Listeners,
    metrics: Arc<Metrics>,
    shutdown: F,
    reload: Arc<Notify>,
}

impl<F: Future<Output = ()> + Send + 'static> Running<'_, F> {
    /// Serves gRPC and HTTP, reloads the config when asked, and on shutdown reports
    /// NOT_SERVING, waits the drain delay, then lets in-flight calls finish within the grace
    /// period.
    async fn serve<S: Store, B: Budget>(
        self,
        config: Config,
        store: Arc<S>,
        budget: Arc<B>,
    ) -> Result<(), ServerError> {
        let settings = self.settings;
        let Listeners {
            grpc: grpc_listener,
            http: http_listener,
            prometheus: prometheus_listener,
        } = self.listeners;
        let (domains, limits) = (config.domains().len(), config.rule_count());
        let require_domain = settings.healthy_with_at_least_one_config_loaded;
        // From xDS, not serving until the first snapshot unless asked to start without one.
        let ready = match settings.xds {
            Some(_) => settings.force_start_without_initial_config && !require_domain,
            None => config_ready(require_domain, &config),
        };
        let readiness = Arc::new(Readiness::new(ready));
        let config = Arc::new(ArcSwap::from_pointee(config));
        let on_load = on_config_load(settings, &store, &self.metrics, &readiness);
        // Watching starts before the ports are announced: no change after that is missed.
        let reloading = match &settings.xds {
            Some(xds) => {
                let source =
                    XdsSource::new(xds.clone(), settings.load_options, config.clone(), on_load);
                tokio::spawn(source.run())
            }
            None => {
                let reloader = Reloader::new(
                    settings.config_paths.clone(),
                    settings.load_options,
                    config.clone(),
                    on_load,
                );
                tokio::spawn(reloader.start(self.reload, settings.watch_config))
            }
        };
        let prometheus_addr = match &prometheus_listener {
            Some(listener) => local_addr(listener)?.to_string(),
            None => "-".to_string(),
        };
        tracing::info!(
            grpc = %local_addr(&grpc_listener)?,
            http = %local_addr(&http_listener)?,
            prometheus = %prometheus_addr,
            store = S::NAME,
            domains,
            limits,
            "sluice listening"
        );
        let limiter = Arc::new(RateLimiter::new(
            config.clone(),
            store.clone(),
            settings.service.clone(),
            self.metrics.clone(),
        ));
        let (health, health_service) = tonic_health::server::health_reporter();
        tokio::spawn(mirror_health(readiness.subscribe(), health.clone()));
        if settings.healthcheck_store {
            tokio::spawn(watch_store(Arc::downgrade(&store), readiness.clone()));
        }
        let (stop, stopped) = watch::channel(false);
        let reflection = || {
            tonic_reflection::server::Builder::configure()
                .register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
                .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        };
        let network = settings.network;
        let grpc_tls = match &settings.grpc_tls {
            Some(tls) => {
                let tls = TlsConfig::load(tls.clone())?;
                tokio::spawn(tls.clone().watch());
                Some(tls)
            }
            None => None,
        };
        let grpc = Server::builder()
            .http2_keepalive_interval(Some(network.grpc_keepalive_interval))
            .http2_keepalive_timeout(Some(network.grpc_keepalive_timeout))
            .max_connection_age(network.grpc_max_connection_age)
            .max_connection_age_grace(network.grpc_max_connection_age_grace)
            .layer(tower::util::MapResponseLayer::new(
                status_codes::caller_faults::<tonic::body::Body>,
            ))
            .add_service(health_service)
            .add_service(reflection().build_v1()?)
            .add_service(reflection().build_v1alpha()?)
            .add_service(RateLimitServiceServer::from_arc(limiter.clone()))
            .add_service(RateLimitQuotaServiceServer::new(QuotaService::new(
                config.clone(),
                budget,
                settings.rlqs,
                self.metrics.clone(),
                stopped.clone(),
            )))
            .serve_with_incoming_shutdown(
                accept::incoming(
                    Accepting::new(grpc_listener, network.grpc, "grpc"),
                    grpc_tls,
                ),
                until(stopped.clone()),
            );
        let endpoints = Arc::new(Endpoints {
            config,
            limiter,
            store,
            metrics: self.metrics,
            scrapes: Scrapes::default(),
            readiness: readiness.clone(),
            check_store: settings.healthcheck_store,
            served: settings.http_endpoints,
        });
        if let (Some(listener), Some(prometheus)) = (prometheus_listener, &settings.prometheus) {
            tokio::spawn(http_serve::serve(
                Accepting::new(listener, network.http, "prometheus"),
                http::metrics_router(endpoints.clone(), &prometheus.path),
                network.http_header_read_timeout,
                until(stopped.clone()),
            ));
        }
        let http = http_serve::serve(
            Accepting::new(http_listener, network.http, "http"),
            http::router(endpoints),
            network.http_header_read_timeout,
            until(stopped),
        );
        let mut grpc = tokio::spawn(grpc);
        let mut http = tokio::spawn(async move {
            http.await;
            Ok::<(), std::io::Error>(())
        });
        tokio::select! {
            () = self.shutdown => {}
            ended = &mut grpc => return Err(server_ended("gRPC", ended.map(|r| r.map_err(ServerError::from)))),
            ended = &mut http => return Err(server_ended("HTTP", ended.map(|r| r.map_err(ServerError::HttpServe)))),
        }
        tracing::info!(
            drain_delay_ms = settings.shutdown_drain_delay.as_millis() as u64,
            "shutting down: reporting NOT_SERVING, then draining"
        );
        readiness.start_draining();
        set_health(&health, ServingStatus::NotServing).await;
        tokio::time::sleep(settings.shutdown_drain_delay).await;
        let _ = stop.send(true);
        reloading.abort();
        let finished =
            tokio::time::timeout(settings.shutdown_grace, async { (grpc.await, http.await) });
        match finished.await {
            Ok(_) => tracing::info!("in-flight calls finished; bye"),
            Err(_) => tracing::warn!(
                grace_ms = settings.shutdown_grace.as_millis() as u64,
                "in-flight calls did not finish within the grace period; exiting anyway"
            ),
        }
        Ok(())
    }
}

/// What a configuration load (a reload of the files, an xDS snapshot) does besides the swap:
/// counts it, tells the store, updates readiness, logs refusals with their place.
fn on_config_load<S: Store>(
    settings: &Settings,
    store: &Arc<S>,
    metrics: &Arc<Metrics>,
    readiness: &Arc<Readiness>,
) -> impl Fn(ReloadResult<'_>) + Send + Sync + 'static {
    let (store, metrics, readiness) = (store.clone(), metrics.clone(), readiness.clone());
    let require_domain = settings.healthy_with_at_least_one_config_loaded;
    move |result: ReloadResult<'_>| {
        metrics.record_config_load(result.is_ok());
        match result {
            Ok(config) => {
                store.config_changed();
                config.log_warnings();
                readiness.set_config_ready(config_ready(require_domain, config));
                tracing::info!(
                    source = config.source(),
                    domains = config.domains().len(),
                    limits = config.rule_count(),
                    "config reloaded"
                );
            }
            Err(errors) => {
                for error in &errors.0 {
                    tracing::error!("config refused, the previous one keeps serving: {error}");
                }
            }
        }
    }
}

async fn bind(addr: SocketAddr) -> Result<TcpListener, ServerError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| ServerError::Bind { addr, source })
}

fn local_addr(listener: &TcpListener) -> Result<SocketAddr, ServerError> {
    listener.local_addr().map_err(ServerError::LocalAddr)
}

/// Whether `config` lets the server report SERVING: any config does, unless
/// `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED` asks for a domain.
fn config_ready(require_domain: bool, config: &Config) -> bool {
    !require_domain || !config.domains().is_empty()
}

/// With `--healthcheck-store`, asks the store every second whether it answers, so that the
/// gRPC health follows it too (as envoyproxy/ratelimit's `REDIS_HEALTH_CHECK_ACTIVE_CONNECTION`).
async fn watch_store<S: Store>(store: std::sync::Weak<S>, readiness: Arc<Readiness>) {
    let mut every = tokio::time::interval(Duration::from_secs(1));
    loop {
        every.tick().await;
        let Some(store) = store.upgrade() else { return };
        readiness.set_store_ready(store.healthy().await);
    }
}

/// Keeps the gRPC health status in step with `serving`, until the server is gone.
async fn mirror_health(mut serving: watch::Receiver<bool>, health: HealthReporter) {
    loop {
        let status = if *serving.borrow_and_update() {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        };
        set_health(&health, status).await;
        if serving.changed().await.is_err() {
            return;
        }
    }
}

async fn set_health(health: &HealthReporter, status: ServingStatus) {
    for name in HEALTH_NAMES {
        health.set_service_status(name, status).await;
    }
}

/// Completes once `stopped` turns true (or its sender is gone).
async fn until(mut stopped: watch::Receiver<bool>) {
    let _ = stopped.wait_for(|stop| *stop).await;
}

fn server_ended(
    which: &'static str,
    ended: Result<Result<(), ServerError>, tokio::task::JoinError>,
) -> ServerError {
    match ended {
        Ok(Err(error)) => error,
        Ok(Ok(())) => ServerError::Ended(which),
        Err(error) => ServerError::Task(error.to_string()),
    }
}

/// How often histogram samples are folded into buckets when nothing scrapes.
const METRICS_UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

/// Folds histogram samples every `METRICS_UPKEEP_INTERVAL` until the metrics are gone, so an
/// unscraped server's memory does not grow with every call.
async fn metrics_upkeep(metrics: std::sync::Weak<Metrics>) {
    let mut ticks = tokio::time::interval(METRICS_UPKEEP_INTERVAL);
    loop {
        ticks.tick().await;
        let Some(metrics) = metrics.upgrade() else {
            return;
        };
        metrics.upkeep();
    }
}

/// Drops expired memory-store state every `SWEEP_INTERVAL` until the store is gone.
async fn sweep_memory_store(store: std::sync::Weak<MemoryStore>) {
    let mut ticks = tokio::time::interval(SWEEP_INTERVAL);
    loop {
        ticks.tick().await;
        let Some(store) = store.upgrade() else { return };
        store.sweep_expired();
    }
}
