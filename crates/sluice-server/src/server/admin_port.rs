//! The admin port (docs/admin.md): its parts built from the settings (the token file read,
//! mTLS loaded: either failing stops the server), and the gRPC service (with reflection) and
//! the JSON routes served on one listener,
//! HTTP/1.1 and HTTP/2 (cleartext or TLS, by ALPN), each request authenticated before it
//! reaches a call (`auth`): gRPC answers UNAUTHENTICATED or PERMISSION_DENIED, HTTP 401 or
//! 403. Connections are bounded as the other ports' are, and drained on shutdown.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::header::{AUTHORIZATION, CONTENT_TYPE};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json, Router};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};

use super::accept::Accepting;
use super::{ServerError, TlsConfig};
use crate::admin::auth::{self, allowed_subject, Authentication, Denied, Peer};
use crate::admin::grpc::AdminGrpc;
use crate::admin::{sync, Admin};
use crate::settings::{AdminSettings, Settings, StoreSettings};
use sluice_proto::sluice::admin::v1::admin_server::AdminServer;
use sluice_proto::FILE_DESCRIPTOR_SET;
use sluice_store::any::AnyStore;

/// What the port serves and how it lets callers in.
pub struct AdminPort {
    pub admin: Arc<Admin>,
    pub authentication: Arc<Authentication>,
    pub tls: Option<Arc<TlsConfig>>,
    pub allowed_subjects: Arc<Vec<String>>,
    pub header_read_timeout: Duration,
    /// The replay report the dashboard shows.
    pub replay_report: Option<std::path::PathBuf>,
}

/// The routes of the port, authenticated: JSON, the dashboard, gRPC and its reflection.
fn router(port: &AdminPort) -> Result<Router, ServerError> {
    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
    };
    let grpc = tonic::service::Routes::new(AdminServer::new(AdminGrpc(port.admin.clone())))
        .add_service(reflection().build_v1()?)
        .add_service(reflection().build_v1alpha()?)
        .into_axum_router();
    let dashboard = crate::admin::dashboard::router(port.admin.clone(), port.replay_report.clone());
    Ok(crate::admin::http::router(port.admin.clone())
        .merge(dashboard)
        .merge(grpc)
        .layer(middleware::from_fn_with_state(
            port.authentication.clone(),
            authenticate,
        )))
}

/// Lets a request through with its `Caller`, or answers why not.
async fn authenticate(
    State(authentication): State<Arc<Authentication>>,
    Extension(peer): Extension<Peer>,
    mut request: Request,
    next: Next,
) -> Response {
    let authorization = request
        .headers()
        .get(AUTHORIZATION)
        .and_then(|value| value.to_str().ok());
    match authentication.caller(&peer, authorization) {
        Ok(caller) => {
            request.extensions_mut().insert(caller);
            next.run(request).await
        }
        Err(denied) => {
            let grpc = request
                .headers()
                .get(CONTENT_TYPE)
                .and_then(|value| value.to_str().ok())
                .is_some_and(|value| value.starts_with("application/grpc"));
            refusal(&denied, grpc)
        }
    }
}

/// The answer to a request that is not let through.
fn refusal(denied: &Denied, grpc: bool) -> Response {
    let (status, code, message) = match denied {
        Denied::Unauthenticated(message) => (401, tonic::Code::Unauthenticated, *message),
        Denied::Forbidden(message) => (403, tonic::Code::PermissionDenied, *message),
    };
    if grpc {
        return tonic::Status::new(code, message)
            .into_http::<axum::body::Body>()
            .into_response();
    }
    let status = axum::http::StatusCode::from_u16(status).unwrap_or_default();
    let name = if status.as_u16() == 401 {
        "UNAUTHENTICATED"
    } else {
        "PERMISSION_DENIED"
    };
    let mut response = (
        status,
        Json(serde_json::json!({"code": name, "message": message})),
    )
        .into_response();
    if status.as_u16() == 401 {
        let headers = response.headers_mut();
        headers.insert(
            axum::http::header::WWW_AUTHENTICATE,
            axum::http::HeaderValue::from_static("Bearer"),
        );
        // A browser asks for the token (as the password) when it sees Basic offered.
        headers.append(
            axum::http::header::WWW_AUTHENTICATE,
            axum::http::HeaderValue::from_static("Basic realm=\"sluice admin\", charset=\"UTF-8\""),
        );
    }
    response
}

/// The admin port's parts: its authentication (the token file read, mTLS loaded: either
/// failing stops the server), and with the memory store a snapshot after each change.
pub(super) fn parts(
    settings: &Settings,
    admin_settings: &AdminSettings,
    store: &Arc<AnyStore>,
    admin: Arc<Admin>,
) -> Result<AdminPort, ServerError> {
    let tokens = match &admin_settings.token_file {
        Some(path) => {
            let tokens =
                auth::Tokens::load(path).map_err(|error| ServerError::Admin(error.to_string()))?;
            tokio::spawn(tokens.clone().watch());
            Some(tokens)
        }
        None => None,
    };
    let tls = match &admin_settings.tls {
        Some(tls) => {
            let tls = TlsConfig::load_offering(tls.clone(), &[b"h2", b"http/1.1"])?;
            tokio::spawn(tls.clone().watch());
            Some(tls)
        }
        None => None,
    };
    let mutual = admin_settings
        .tls
        .as_ref()
        .is_some_and(|tls| tls.client_ca.is_some());
    if tls.is_none() {
        tracing::warn!("the admin port serves without TLS: its bearer tokens cross the network in clear (set --admin-tls-cert and --admin-tls-key)");
    }
    match &settings.store {
        StoreSettings::Memory {
            snapshot: Some(snapshot),
            ..
        } => {
            tokio::spawn(sync::snapshot_on_change(
                Arc::downgrade(store),
                admin.changes(),
                snapshot.path.clone(),
            ));
        }
        StoreSettings::Memory { snapshot: None, .. } => {
            tracing::warn!("overrides are kept in memory only: a restart loses them (set --memory-snapshot, or use the Redis store)");
        }
        _ => {}
    }
    Ok(AdminPort {
        admin,
        authentication: Arc::new(auth::Authentication { tokens, mutual }),
        tls,
        allowed_subjects: Arc::new(admin_settings.allowed_subjects.clone()),
        header_read_timeout: settings.ports.network.http_header_read_timeout,
        replay_report: admin_settings.replay_report.clone(),
    })
}

/// Serves the port on `accepting` until `stop` completes, then lets each connection finish
/// the request it is on.
pub async fn serve(
    accepting: Accepting,
    port: AdminPort,
    stop: impl Future<Output = ()>,
) -> Result<(), ServerError> {
    let router = router(&port)?;
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(port.header_read_timeout);
    let builder = Arc::new(builder);
    let graceful = Arc::new(GracefulShutdown::new());
    let mut stop = std::pin::pin!(stop);
    loop {
        tokio::select! {
            (connection, addr) = accepting.accept() => {
                let (router, builder, graceful) = (router.clone(), builder.clone(), graceful.clone());
                let tls = port.tls.clone();
                let subjects = port.allowed_subjects.clone();
                let handshake = accepting.handshake_timeout;
                tokio::spawn(async move {
                    let Some(tls) = tls else {
                        serve_connection(connection, Peer::default(), router, &builder, &graceful).await;
                        return;
                    };
                    let acceptor = tokio_rustls::TlsAcceptor::from(tls.current());
                    match tokio::time::timeout(handshake, acceptor.accept(connection)).await {
                        Ok(Ok(stream)) => {
                            let subject = stream
                                .get_ref()
                                .1
                                .peer_certificates()
                                .and_then(|certs| certs.first())
                                .and_then(|cert| allowed_subject(cert, &subjects));
                            serve_connection(stream, Peer { subject }, router, &builder, &graceful).await;
                        }
                        Ok(Err(error)) => tracing::debug!(%addr, %error, "admin TLS handshake refused"),
                        Err(_) => tracing::debug!(%addr, "admin TLS handshake timed out"),
                    }
                });
            }
            () = &mut stop => break,
        }
    }
    drop(accepting);
    if let Ok(graceful) = Arc::try_unwrap(graceful) {
        graceful.shutdown().await;
    }
    Ok(())
}

/// Serves one connection of `peer`.
async fn serve_connection<S>(
    stream: S,
    peer: Peer,
    router: Router,
    builder: &Builder<TokioExecutor>,
    graceful: &GracefulShutdown,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = TowerToHyperService::new(router.layer(Extension(peer)));
    let served = builder
        .serve_connection_with_upgrades(TokioIo::new(stream), service)
        .into_owned();
    if let Err(error) = graceful.watch(served).await {
        tracing::debug!(%error, "admin connection ended with an error");
    }
}
