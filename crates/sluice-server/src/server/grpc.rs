//! The gRPC port: the RLS and RLQS services, Kuadrant's protocol, the standard health service
//! (kept in step with readiness), reflection, keepalives and connection ages, TLS when
//! configured; each connection served in a task of its own (`connection`).

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;

use futures_util::{Stream, StreamExt};
use hyper::body::Incoming;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tonic::body::Body;
use tonic::codegen::http::{Request, Response};
use tonic::service::Routes;
use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;
use tower::ServiceBuilder;

use super::accept::{self, Accepting, GrpcConnection};
use super::connection::{self, Lifetime};
use super::deadline::DeadlineLayer;
use super::rls_route::RlsFirstLayer;
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

/// The gRPC server on `listener` until `shutdown` completes, and the health reporter that
/// drain sets NOT_SERVING through. Once `shutdown` completes, the listener is closed, every
/// connection is told to go away, and the server's future ends when the last one has closed.
pub fn serve(
    settings: &Settings,
    listener: TcpListener,
    services: Services,
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
    let incoming = accept::incoming(Accepting::new(listener, network.grpc, "grpc"), tls);
    Ok((accept_loop(incoming, service, lifetime, shutdown), health))
}

/// Serves each connection `incoming` yields with `service`, each in a task of its own, until
/// `shutdown` completes; then tells them to go away and waits until they have closed.
async fn accept_loop<S>(
    incoming: impl Stream<Item = std::io::Result<GrpcConnection>>,
    service: S,
    lifetime: Lifetime,
    shutdown: impl Future<Output = ()>,
) where
    S: tower::Service<Request<Incoming>, Response = Response<Body>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let (drain, draining) = watch::channel(());
    {
        let mut incoming = std::pin::pin!(incoming);
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            let accepted = tokio::select! {
                () = &mut shutdown => break,
                accepted = incoming.next() => accepted,
            };
            let connection = match accepted {
                Some(Ok(connection)) => connection,
                Some(Err(error)) => {
                    tracing::debug!(%error, "a gRPC connection was not accepted");
                    continue;
                }
                None => break,
            };
            let service = TowerToHyperService::new(service.clone());
            tokio::spawn(connection::serve(
                connection,
                service,
                lifetime,
                draining.clone(),
            ));
        }
        // The listener closes here: no connection is accepted while the others drain.
    }
    drop(draining);
    let _ = drain.send(());
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
