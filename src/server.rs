//! The composition root: builds the config, the store and the gRPC services from `Settings`,
//! serves until `shutdown` completes, then reports NOT_SERVING and drains.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::net::TcpListener;
use tonic::transport::server::TcpIncoming;
use tonic::transport::Server;
use tonic_health::ServingStatus;

use crate::config::{self, Config, ConfigErrors};
use crate::proto::rate_limit_service_server::RateLimitServiceServer;
use crate::proto::{FILE_DESCRIPTOR_SET, RATE_LIMIT_SERVICE_NAME};
use crate::service::RateLimiter;
use crate::settings::{Settings, StoreKind};
use crate::store::local_cache::WithLocalCache;
use crate::store::memory::MemoryStore;
use crate::store::redis::RedisStore;
use crate::store::{Store, StoreError, SystemClock};

/// Health service names reported: the server as a whole, the name envoyproxy/ratelimit uses,
/// and the RLS service itself.
const HEALTH_NAMES: [&str; 3] = ["", "ratelimit", RATE_LIMIT_SERVICE_NAME];

/// How often the memory store drops expired state.
const SWEEP_INTERVAL: Duration = Duration::from_secs(1);

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("configuration refused:\n{0}")]
    Config(#[from] ConfigErrors),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("gRPC reflection: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    #[error("gRPC server: {0}")]
    Transport(#[from] tonic::transport::Error),
}

/// Loads the config, builds the store, binds, and serves until `shutdown` completes.
pub async fn run(
    settings: Settings,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let config = config::load(&settings.config_paths, settings.load_options)?;
    match settings.store {
        StoreKind::Memory => {
            let store = Arc::new(MemoryStore::new(
                settings.memory_max_keys,
                Arc::new(SystemClock),
            ));
            tokio::spawn(sweep_memory_store(Arc::downgrade(&store)));
            serve(&settings, config, store, shutdown).await
        }
        StoreKind::Redis => {
            let Some(redis) = &settings.redis else {
                return Err(StoreError::Unavailable("no Redis settings".into()).into());
            };
            tracing::info!(redis = %redis.target.describe(), "connecting to Redis");
            let store = RedisStore::connect(
                &redis.target,
                redis.startup_wait,
                redis.key_prefix.clone(),
                redis.time_source,
                Arc::new(SystemClock),
            )
            .await?;
            tracing::info!(redis = %redis.target.describe(), "Redis connected, scripts loaded");
            if redis.local_cache_bytes == 0 {
                return serve(&settings, config, Arc::new(store), shutdown).await;
            }
            let cached = WithLocalCache::new(store, redis.local_cache_bytes, Arc::new(SystemClock));
            serve(&settings, config, Arc::new(cached), shutdown).await
        }
    }
}

/// Binds the gRPC port and serves the RLS, health and reflection over `store`.
async fn serve<S: Store>(
    settings: &Settings,
    config: Config,
    store: Arc<S>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let bind_error = |source| ServerError::Bind {
        addr: settings.grpc_addr,
        source,
    };
    let listener = TcpListener::bind(settings.grpc_addr)
        .await
        .map_err(bind_error)?;
    let grpc_addr = listener.local_addr().map_err(bind_error)?;
    tracing::info!(
        grpc = %grpc_addr,
        store = ?settings.store,
        domains = config.domains().len(),
        limits = config.rule_count(),
        "sluice listening"
    );
    let config = Arc::new(ArcSwap::from_pointee(config));
    let (health, health_service) = tonic_health::server::health_reporter();
    for name in HEALTH_NAMES {
        health
            .set_service_status(name, ServingStatus::Serving)
            .await;
    }
    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    let limiter = RateLimiter::new(config, store, settings.service);
    let drained = async move {
        shutdown.await;
        tracing::info!("shutting down: reporting NOT_SERVING and draining in-flight calls");
        for name in HEALTH_NAMES {
            health
                .set_service_status(name, ServingStatus::NotServing)
                .await;
        }
    };
    Server::builder()
        .add_service(health_service)
        .add_service(reflection().build_v1()?)
        .add_service(reflection().build_v1alpha()?)
        .add_service(RateLimitServiceServer::new(limiter))
        .serve_with_incoming_shutdown(TcpIncoming::from(listener), drained)
        .await?;
    Ok(())
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
