//! The gRPC port: the RLS and RLQS services, Kuadrant's protocol, the standard health service
//! (kept in step with readiness), reflection, keepalives and connection ages, TLS when
//! configured.

use std::future::Future;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tonic::transport::Server;
use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;

use super::accept::{self, Accepting};
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
/// drain sets NOT_SERVING through.
pub fn serve(
    settings: &Settings,
    listener: TcpListener,
    services: Services,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<
    (
        impl Future<Output = Result<(), tonic::transport::Error>> + Send + 'static,
        HealthReporter,
    ),
    ServerError,
> {
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
    let server = Server::builder()
        .http2_keepalive_interval(Some(network.grpc_keepalive_interval))
        .http2_keepalive_timeout(Some(network.grpc_keepalive_timeout))
        .max_connection_age(network.grpc_max_connection_age)
        .max_connection_age_grace(network.grpc_max_connection_age_grace)
        .layer(tower::util::MapResponseLayer::new(
            status_codes::caller_faults::<tonic::body::Body>,
        ))
        .layer(RlsFirstLayer::new(rls.clone()))
        .add_service(health_service)
        .add_service(reflection().build_v1()?)
        .add_service(reflection().build_v1alpha()?)
        .add_service(KuadrantServer::from_arc(services.kuadrant))
        .add_service(rls)
        .add_service(RateLimitQuotaServiceServer::new(services.quota))
        .serve_with_incoming_shutdown(
            accept::incoming(Accepting::new(listener, network.grpc, "grpc"), tls),
            shutdown,
        );
    Ok((server, health))
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
