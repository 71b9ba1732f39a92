//! The gRPC port: the RLS and RLQS services, Kuadrant's protocol, the standard health service
//! (kept in step with readiness), reflection, keepalives and connection ages, TLS when
//! configured; each connection accepted here and served in a task of its own (`connection`)
//! on one of the serving threads (`serving_threads`).

use std::future::Future;
use std::sync::Arc;

use hyper::body::Incoming;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tonic::body::Body;
use tonic::codegen::http::Request;
use tonic::service::Routes;
use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;
use tower::ServiceBuilder;

use super::accept::Accepting;
use super::connection::Lifetime;
use super::deadline::DeadlineLayer;
use super::rls_route::RlsFirstLayer;
use super::serving_threads::{GrpcService, Serving, ServingThreads};
use super::{status_codes, ServerError, TlsConfig};
use crate::http::Readiness;
use crate::kuadrant::KuadrantService;
use crate::rlqs::QuotaService;
use crate::service::RateLimiter;
use crate::settings::Settings;
use sluice_proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_server::RateLimitQuotaServiceServer;
use sluice_proto::kuadrant::service::ratelimit::v1::rate_limit_service_server::RateLimitServiceServer as KuadrantServer;
use sluice_proto::rate_limit_service_server::{RateLimitServiceServer, SERVICE_NAME};
use sluice_proto::FILE_DESCRIPTOR_SET;
use sluice_store::quota_budget::AnyBudget;

/// Health service names reported: the server as a whole, the name envoyproxy/ratelimit uses,
/// the RLS service and the RLQS one.
const HEALTH_NAMES: [&str; 4] = ["", "ratelimit", SERVICE_NAME, QUOTA_SERVICE_NAME];

/// The RLQS service's name, for health checks.
const QUOTA_SERVICE_NAME: &str = "envoy.service.rate_limit_quota.v3.RateLimitQuotaService";

/// What the gRPC port serves.
pub struct Services {
    pub limiter: Arc<RateLimiter<super::stores::Served>>,
    pub kuadrant: Arc<KuadrantService<super::stores::Served>>,
    pub quota: QuotaService<AnyBudget>,
    /// The health service follows it.
    pub readiness: Arc<Readiness>,
}

/// The gRPC server on `listener`, its connections served on `threads` threads of their own
/// (none: on the current runtime), until `shutdown` completes, and the health reporter that
/// drain sets NOT_SERVING through. Once `shutdown` completes, the listener is closed, every
/// connection is told to go away, and the server's future ends when the last one has closed.
pub fn serve(
    settings: &Settings,
    listener: TcpListener,
    services: Services,
    threads: usize,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(impl Future<Output = ()> + Send + 'static, HealthReporter), ServerError> {
    let (health, health_service) = tonic_health::server::health_reporter();
    tokio::spawn(mirror_health(
        services.readiness.subscribe(),
        health.clone(),
    ));
    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    let tls = match &settings.ports.grpc_tls {
        Some(tls) => {
            let tls = TlsConfig::load(tls.clone())?;
            tokio::spawn(tls.clone().watch());
            Some(tls)
        }
        None => None,
    };
    let network = settings.ports.network;
    // One service for both ways in: `ShouldRateLimit` ahead of the router, and the router's
    // route for the service's other names.
    let rls = RateLimitServiceServer::from_arc(services.limiter);
    let routes = Routes::new(health_service)
        .add_service(reflection().build_v1()?)
        .add_service(reflection().build_v1alpha()?)
        .add_service(KuadrantServer::from_arc(services.kuadrant))
        .add_service(rls.clone())
        .add_service(RateLimitQuotaServiceServer::new(services.quota))
        .prepare();
    let service = ServiceBuilder::new()
        .map_request(|request: Request<Incoming>| request.map(Body::new))
        .layer(DeadlineLayer)
        .map_response(status_codes::caller_faults::<Body>)
        .layer(RlsFirstLayer::new(rls))
        .service(routes);
    let lifetime = Lifetime {
        keepalive_interval: network.grpc_keepalive_interval,
        keepalive_timeout: network.grpc_keepalive_timeout,
        max_age: network.grpc_max_connection_age,
        max_age_grace: network.grpc_max_connection_age_grace,
    };
    let (drain, draining) = watch::channel(());
    let serving = Serving {
        service,
        lifetime,
        tls,
        handshake_timeout: network.grpc.handshake_timeout,
        draining,
    };
    let threads = ServingThreads::start(threads, serving).map_err(ServerError::ServingThreads)?;
    let accepting = Accepting::new(listener, network.grpc, "grpc");
    Ok((accept_loop(accepting, threads, drain, shutdown), health))
}

/// Hands each connection `accepting` takes to a serving thread until `shutdown` completes;
/// then tells the connections to go away (through `drain`), and ends once they have closed
/// and the threads have stopped.
async fn accept_loop<S: GrpcService>(
    accepting: Accepting,
    mut threads: ServingThreads<S>,
    drain: watch::Sender<()>,
    shutdown: impl Future<Output = ()>,
) {
    {
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            let (connection, peer) = tokio::select! {
                () = &mut shutdown => break,
                accepted = accepting.accept() => accepted,
            };
            threads.hand_over(connection, peer);
        }
        // The listener closes here: no connection is accepted while the others drain.
        drop(accepting);
    }
    let _ = drain.send(());
    threads.stop().await;
    drain.closed().await;
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

/// Reports `status` under every health name.
pub async fn set_health(health: &HealthReporter, status: ServingStatus) {
    for name in HEALTH_NAMES {
        health.set_service_status(name, status).await;
    }
}
