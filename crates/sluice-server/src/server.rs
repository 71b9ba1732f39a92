//! The composition root: builds the config, the store, the gRPC services and the HTTP
//! endpoints from `Settings`, serves them on the listeners it is given, reloads the config,
//! serves until `shutdown` completes, then reports NOT_SERVING, drains and stops.

pub(crate) mod accept;
use accept::Accepting;
mod admin_port;
mod connection;
mod deadline;
mod grpc;
pub use accept::ConnectionLimits;
mod http_serve;
mod rls_route;
mod serving_threads;
mod status_codes;
mod stores;
use stores::{Served, Stores};
mod tls;
mod upkeep;
pub use tls::{TlsConfig, TlsError, TlsSettings};
use upkeep::{metrics_upkeep, watch_store};

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use arc_swap::ArcSwap;
use tokio::net::TcpListener;
use tokio::sync::{watch, Notify};
use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;

use crate::admin::{self, Admin};
use crate::http::{self, Endpoints, Readiness, Scrapes};
use crate::kuadrant::KuadrantService;
use crate::metrics::runtime::RuntimeTasks;
use crate::metrics::Metrics;
use crate::record::Recorder;
use crate::rlqs::QuotaService;
use crate::service::RateLimiter;
use crate::settings::Settings;
use crate::statsd::{ServiceStats, Statsd};
use crate::xds::XdsSource;
use sluice_config::overrides::OverrideIndex;
use sluice_config::{self as config, Config, ConfigErrors, ReloadResult, Reloader};
use sluice_store::any::AnyStore;
use sluice_store::{Store, StoreError};

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
    #[error("starting the gRPC port's serving threads: {0}")]
    ServingThreads(std::io::Error),
    #[error("the {0} server stopped by itself")]
    Ended(&'static str),
    #[error("server task: {0}")]
    Task(String),
    #[error("gRPC TLS: {0}")]
    Tls(#[from] TlsError),
    #[error("{0}")]
    Record(#[from] crate::record::RecordError),
    #[error("memory store snapshot: {0}")]
    Snapshot(#[from] sluice_store::memory::snapshot::SnapshotError),
    #[error("admin API: {0}")]
    Admin(String),
    #[error("the memory store's journal {path}: {source}")]
    Journal { path: String, source: StoreError },
    #[error("loading the overrides from the store: {0}")]
    Overrides(StoreError),
}

/// The ports, bound by the caller (`main`, or a test on `127.0.0.1:0`).
pub struct Listeners {
    pub grpc: TcpListener,
    pub http: TcpListener,
    /// `USE_PROMETHEUS`: the metrics' own.
    pub prometheus: Option<TcpListener>,
    /// `--admin-addr`: the admin API's.
    pub admin: Option<TcpListener>,
}

impl Listeners {
    /// Binds the gRPC and HTTP addresses of `settings`.
    pub async fn bind(settings: &Settings) -> Result<Listeners, ServerError> {
        let prometheus = match &settings.ports.prometheus {
            Some(prometheus) => Some(bind(prometheus.addr).await?),
            None => None,
        };
        let admin = match &settings.admin {
            Some(admin) => Some(bind(admin.addr).await?),
            None => None,
        };
        Ok(Listeners {
            grpc: bind(settings.ports.grpc_addr).await?,
            http: bind(settings.ports.http_addr).await?,
            prometheus,
            admin,
        })
    }

    /// The admin port's address, when it is served.
    pub fn admin_addr(&self) -> Result<Option<SocketAddr>, ServerError> {
        self.admin.as_ref().map(local_addr).transpose()
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
    let mut metrics = Metrics::new(
        settings.observability.near_limit_ratio,
        settings.observability.max_metric_series,
    );
    metrics = metrics
        .with_limit_name_in_labels(settings.kuadrant.limit_name_in_labels)
        .with_heavy_hitters(settings.observability.heavy_hitters);
    if let Some(statsd) = &settings.observability.statsd {
        let statsd = Arc::new(Statsd::new(statsd.clone()));
        tokio::spawn(statsd.clone().run());
        metrics = metrics.with_statsd(ServiceStats::new(statsd));
    }
    if settings.observability.tracing.is_some() {
        metrics
            .series()
            .add_reporter(Arc::new(crate::otel::span_counts()));
    }
    metrics
        .series()
        .add_reporter(Arc::new(RuntimeTasks(tokio::runtime::Handle::current())));
    let metrics = Arc::new(metrics);
    tokio::spawn(metrics_upkeep(Arc::downgrade(&metrics)));
    let config = if let Some(xds) = &settings.source.xds {
        // Nothing is limited until the management server's first snapshot.
        tracing::info!(server = %xds.server_url, node = %xds.node_id, "configuration from xDS");
        Config::default()
    } else {
        load_files(&settings, &metrics).await?
    };
    let stores = Stores::build(&settings, settings.record.is_some()).await?;
    metrics.series().add_reporter(stores.served.clone());
    let store = stores.store.clone();
    // The overrides in force before the first call is served.
    let overrides = Arc::new(OverrideIndex::default());
    let options = settings.source.load_options;
    let cursor = admin::sync::load(&store, &overrides, options)
        .await
        .map_err(ServerError::Overrides)?;
    if !overrides.is_empty() {
        tracing::info!(
            overrides = overrides.len(),
            "overrides loaded from the store"
        );
    }
    metrics
        .series()
        .add_reporter(Arc::new(admin::OverrideCount(overrides.clone())));
    if store.redis().is_some() {
        // The admin port reads the lists every replica shares; without it, none are shared.
        if settings.admin.is_some() {
            tokio::spawn(crate::hitters::shared::publish(
                Arc::downgrade(metrics.heavy_hitters()),
                Arc::downgrade(&store),
            ));
        }
        tokio::spawn(admin::sync::follow(
            Arc::downgrade(&store),
            overrides.clone(),
            options,
            cursor,
        ));
    }
    let run = Running {
        settings: &settings,
        listeners,
        metrics,
        shutdown,
        reload,
    };
    run.serve(config, stores, overrides).await
}

/// Loads the configuration files at startup; with FORCE_START_WITHOUT_INITIAL_CONFIG a
/// refused load starts with no limits.
async fn load_files(settings: &Settings, metrics: &Metrics) -> Result<Config, ServerError> {
    let (paths, options) = (
        settings.source.config_paths.clone(),
        settings.source.load_options,
    );
    let config = tokio::task::spawn_blocking(move || config::load(&paths, options))
        .await
        .map_err(ServerError::ConfigTask)?;
    metrics.record_config_load(config.is_ok());
    let config = match config {
        Ok(config) => config,
        Err(errors) if settings.source.force_start_without_initial_config => {
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
    warn_of_unkept_calendars(calendars_unkept(settings), &config);
    let paths: Vec<String> = settings
        .source
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
    /// Serves gRPC and HTTP, reloads the config when asked, and on shutdown drains (`drain`).
    async fn serve(
        self,
        config: Config,
        stores: Stores,
        overrides: Arc<OverrideIndex>,
    ) -> Result<(), ServerError> {
        let Stores {
            store,
            served,
            budget,
        } = stores;
        let settings = self.settings;
        let readiness = Arc::new(Readiness::new(ready_at_start(settings, &config)));
        let counts = (config.domains().len(), config.rule_count());
        let config = Arc::new(ArcSwap::from_pointee(config));
        let on_load = on_config_load(settings, &store, &self.metrics, &readiness);
        // Watching starts before the ports are announced: no change after that is missed.
        let reloading = watch_config(settings, &config, on_load, self.reload);
        announce(&self.listeners, &store, counts)?;
        if settings.healthcheck_store {
            tokio::spawn(watch_store(Arc::downgrade(&store), readiness.clone()));
        }
        let recorder = match &settings.record {
            Some(record) => {
                let recorder = Arc::new(Recorder::start(record)?);
                self.metrics.series().add_reporter(recorder.clone());
                tracing::info!(path = %record.path.display(), sample = record.sample, "recording decided calls");
                Some(recorder)
            }
            None => None,
        };
        let mut limiter = RateLimiter::new(
            config.clone(),
            served.clone(),
            settings.service.clone(),
            self.metrics.clone(),
        );
        if let Some(recorder) = &recorder {
            limiter = limiter.with_recorder(recorder.clone());
        }
        limiter = limiter.with_overrides(overrides.clone());
        let mut listeners = self.listeners;
        let admin = match (&settings.admin, listeners.admin.take()) {
            (Some(admin_settings), Some(listener)) => {
                let admin = Arc::new(Admin::new(
                    config.clone(),
                    store.clone(),
                    overrides,
                    settings.source.load_options,
                    self.metrics.clone(),
                ));
                let port = admin_port::parts(settings, admin_settings, &store, admin)?;
                Some((listener, port))
            }
            _ => None,
        };
        let limiter = Arc::new(limiter);
        let (stop, stopped) = watch::channel(false);
        let kuadrant = Arc::new(KuadrantService::new(
            limiter.clone(),
            settings.kuadrant.holds,
            self.metrics.clone(),
        ));
        let services = grpc::Services {
            limiter: limiter.clone(),
            kuadrant: kuadrant.clone(),
            quota: QuotaService::new(
                config.clone(),
                budget,
                settings.rlqs,
                self.metrics.clone(),
                stopped.clone(),
            ),
            readiness: readiness.clone(),
        };
        let stopped_admin = stopped.clone();
        let threads = (settings.ports.network).serving_threads(store.keeps_calls_on_their_thread());
        let (grpc, health) = grpc::serve(
            settings,
            listeners.grpc,
            services,
            threads,
            until(stopped.clone()),
        )?;
        let store_for_snapshot = store.clone();
        let endpoints = Arc::new(Endpoints {
            config,
            limiter,
            kuadrant,
            store: served,
            metrics: self.metrics,
            scrapes: Scrapes::default(),
            readiness: readiness.clone(),
            check_store: settings.healthcheck_store,
            served: settings.ports.http_endpoints,
        });
        let (http, prometheus) = (listeners.http, listeners.prometheus);
        if let Some((listener, port)) = admin {
            let accepting = Accepting::new(listener, settings.ports.network.http, "admin");
            tokio::spawn(async move {
                if let Err(error) = admin_port::serve(accepting, port, until(stopped_admin)).await {
                    tracing::error!(%error, "the admin port stopped");
                }
            });
        }
        let http = serve_http(settings, http, prometheus, endpoints, stopped);
        let mut grpc = tokio::spawn(grpc);
        let mut http = tokio::spawn(http);
        tokio::select! {
            () = self.shutdown => {}
            ended = &mut grpc => return Err(server_ended("gRPC", ended.map(Ok))),
            ended = &mut http => return Err(server_ended("HTTP", ended.map(Ok))),
        }
        reloading.abort();
        let servers = async { (grpc.await, http.await) };
        drain(settings, &readiness, &health, stop, servers).await;
        stores::save_on_shutdown(store_for_snapshot, &settings.store).await;
        if let Some(recorder) = recorder {
            // What is queued is written before the process ends.
            tokio::task::spawn_blocking(move || recorder.finish())
                .await
                .map_err(|e| ServerError::Task(e.to_string()))?;
        }
        Ok(())
    }
}

/// Logs the addresses served, the store and the config's size.
fn announce(
    listeners: &Listeners,
    store: &AnyStore,
    (domains, limits): (usize, usize),
) -> Result<(), ServerError> {
    let prometheus = match &listeners.prometheus {
        Some(listener) => local_addr(listener)?.to_string(),
        None => "-".to_string(),
    };
    let admin = match listeners.admin_addr()? {
        Some(addr) => addr.to_string(),
        None => "-".to_string(),
    };
    tracing::info!(
        grpc = %listeners.grpc_addr()?,
        http = %listeners.http_addr()?,
        %prometheus,
        %admin,
        store = store.name(),
        domains,
        limits,
        "sluice listening"
    );
    Ok(())
}

/// Whether the server reports SERVING before any reload: from xDS, not until the first
/// snapshot unless asked to start without one; from files, as `config_ready` says.
fn ready_at_start(settings: &Settings, config: &Config) -> bool {
    let require_domain = settings.source.healthy_with_at_least_one_config_loaded;
    match settings.source.xds {
        Some(_) => settings.source.force_start_without_initial_config && !require_domain,
        None => config_ready(require_domain, config),
    }
}

/// Starts the config's source: the xDS client, or the file reloader (on `reload`, and on
/// file changes with `--watch-config`); each load goes through `on_load`.
fn watch_config(
    settings: &Settings,
    config: &Arc<ArcSwap<Config>>,
    on_load: impl Fn(ReloadResult<'_>) + Send + Sync + 'static,
    reload: Arc<Notify>,
) -> tokio::task::JoinHandle<()> {
    match &settings.source.xds {
        Some(xds) => {
            let source = XdsSource::new(
                xds.clone(),
                settings.source.load_options,
                config.clone(),
                on_load,
            );
            tokio::spawn(source.run())
        }
        None => {
            let reloader = Reloader::new(
                settings.source.config_paths.clone(),
                settings.source.load_options,
                config.clone(),
                on_load,
            );
            tokio::spawn(reloader.start(reload, settings.source.watch_config))
        }
    }
}

/// The HTTP port (and the Prometheus one of `USE_PROMETHEUS`, spawned), until `stopped`.
fn serve_http(
    settings: &Settings,
    listener: TcpListener,
    prometheus_listener: Option<TcpListener>,
    endpoints: Arc<Endpoints<Served>>,
    stopped: watch::Receiver<bool>,
) -> impl Future<Output = ()> + Send + 'static {
    let network = settings.ports.network;
    if let (Some(listener), Some(prometheus)) = (prometheus_listener, &settings.ports.prometheus) {
        tokio::spawn(http_serve::serve(
            Accepting::new(listener, network.http, "prometheus"),
            http::metrics_router(endpoints.clone(), &prometheus.path),
            network.http_header_read_timeout,
            until(stopped.clone()),
        ));
    }
    http_serve::serve(
        Accepting::new(listener, network.http, "http"),
        http::router(endpoints),
        network.http_header_read_timeout,
        until(stopped),
    )
}

/// Shutting down: reports NOT_SERVING, waits the drain delay, stops accepting (`stop`), then
/// lets in-flight calls (`servers`) finish within the grace period.
async fn drain<T>(
    settings: &Settings,
    readiness: &Readiness,
    health: &HealthReporter,
    stop: watch::Sender<bool>,
    servers: impl Future<Output = T>,
) {
    tracing::info!(
        drain_delay_ms = settings.ports.shutdown_drain_delay.as_millis() as u64,
        "shutting down: reporting NOT_SERVING, then draining"
    );
    readiness.start_draining();
    grpc::set_health(health, ServingStatus::NotServing).await;
    tokio::time::sleep(settings.ports.shutdown_drain_delay).await;
    let _ = stop.send(true);
    match tokio::time::timeout(settings.ports.shutdown_grace, servers).await {
        Ok(_) => tracing::info!("in-flight calls finished; bye"),
        Err(_) => tracing::warn!(
            grace_ms = settings.ports.shutdown_grace.as_millis() as u64,
            "in-flight calls did not finish within the grace period; exiting anyway"
        ),
    }
}

/// Whether calendar windows would count where a restart loses them: the memory store
/// without a snapshot.
fn calendars_unkept(settings: &Settings) -> bool {
    matches!(
        settings.store,
        crate::settings::StoreSettings::Memory { snapshot: None, .. }
    )
}

/// Warns, when `unkept`, of the calendar windows `config` counts: a restart would lose their
/// periods' counts.
fn warn_of_unkept_calendars(unkept: bool, config: &Config) {
    let rules = config.calendar_rules();
    if unkept && !rules.is_empty() {
        tracing::warn!(
            rules = %rules.join(","),
            "calendar windows count in memory only: a restart loses their periods' counts \
             (set --memory-snapshot, or use the Redis store)"
        );
    }
}

/// What a configuration load (a reload of the files, an xDS snapshot) does besides the swap:
/// counts it, tells the store, updates readiness, logs refusals with their place.
fn on_config_load(
    settings: &Settings,
    store: &Arc<AnyStore>,
    metrics: &Arc<Metrics>,
    readiness: &Arc<Readiness>,
) -> impl Fn(ReloadResult<'_>) + Send + Sync + 'static {
    let (store, metrics, readiness) = (store.clone(), metrics.clone(), readiness.clone());
    let require_domain = settings.source.healthy_with_at_least_one_config_loaded;
    let unkept = calendars_unkept(settings);
    move |result: ReloadResult<'_>| {
        metrics.record_config_load(result.is_ok());
        match result {
            Ok(config) => {
                store.config_changed();
                config.log_warnings();
                warn_of_unkept_calendars(unkept, config);
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
