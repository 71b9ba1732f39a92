//! The server's background upkeep: the store's health followed every second (with
//! `--healthcheck-store`), and histogram samples folded when nothing scrapes.

use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::http::Readiness;
use crate::metrics::Metrics;
use sluice_store::any::AnyStore;
use sluice_store::Store;

/// With `--healthcheck-store`, asks the store every second whether it answers, so that the
/// gRPC health follows it too (as envoyproxy/ratelimit's `REDIS_HEALTH_CHECK_ACTIVE_CONNECTION`).
pub(super) async fn watch_store(store: Weak<AnyStore>, readiness: Arc<Readiness>) {
    let mut every = tokio::time::interval(Duration::from_secs(1));
    loop {
        every.tick().await;
        let Some(store) = store.upgrade() else { return };
        readiness.set_store_ready(store.healthy().await);
    }
}

/// How often histogram samples are folded into buckets when nothing scrapes.
const METRICS_UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

/// Folds histogram samples every `METRICS_UPKEEP_INTERVAL` until the metrics are gone, so an
/// unscraped server's memory does not grow with every call.
pub(super) async fn metrics_upkeep(metrics: Weak<Metrics>) {
    let mut ticks = tokio::time::interval(METRICS_UPKEEP_INTERVAL);
    loop {
        ticks.tick().await;
        let Some(metrics) = metrics.upgrade() else {
            return;
        };
        metrics.upkeep();
    }
}
