//! Serving the HTTP port with hyper directly (axum's `serve` sets no timeouts): each request's
//! head must arrive within `header_read_timeout` (a slowloris client that trickles its headers
//! is closed), connections come from `Accepting` (bounded, with a handshake timeout), and on
//! shutdown every connection finishes its request in flight and closes.

use std::future::Future;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;

use crate::server::accept::Accepting;

/// Serves `router` on the connections of `accepting` until `stop` completes, then waits for
/// the connections to finish what they are doing.
pub async fn serve(
    accepting: Accepting,
    router: axum::Router,
    header_read_timeout: Duration,
    stop: impl Future<Output = ()>,
) {
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(header_read_timeout);
    let graceful = GracefulShutdown::new();
    let mut stop = std::pin::pin!(stop);
    loop {
        tokio::select! {
            (connection, _) = accepting.accept() => {
                let service = TowerToHyperService::new(router.clone());
                let served = builder
                    .serve_connection_with_upgrades(TokioIo::new(connection), service)
                    .into_owned();
                let served = graceful.watch(served);
                tokio::spawn(async move {
                    if let Err(error) = served.await {
                        tracing::debug!(%error, "HTTP connection ended with an error");
                    }
                });
            }
            () = &mut stop => break,
        }
    }
    drop(accepting);
    graceful.shutdown().await;
}
