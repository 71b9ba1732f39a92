//! The HTTP port: `/healthcheck`, `/json` (ShouldRateLimit as JSON), `/metrics` (Prometheus)
//! and `/rlconfig` (every loaded limit), as envoyproxy/ratelimit serves them; and Limitador's
//! HTTP API (`limitador`).

mod json;
mod limitador;

pub use limitador::ReadsCounter;
mod scrape;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;

use crate::kuadrant::KuadrantService;
use crate::metrics::Metrics;
use crate::service::RateLimiter;
pub use scrape::Scrapes;
use sluice_config::{Config, Rule};
use sluice_core::limit::{Algorithm, Limit};
use sluice_limiter::DecisionError;
use sluice_proto::rate_limit_response::Code;
use sluice_store::Store;

/// Whether the server takes traffic: not while draining, nor while a config is required but
/// has no domain (`HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`), nor, when asked
/// (`--healthcheck-store`), while the store does not answer.
#[derive(Debug)]
pub struct Readiness {
    draining: AtomicBool,
    config_ready: AtomicBool,
    /// False while the store does not answer (watched only with `--healthcheck-store`).
    store_ready: AtomicBool,
    changed: tokio::sync::watch::Sender<bool>,
}

impl Readiness {
    pub fn new(config_ready: bool) -> Readiness {
        Readiness {
            draining: AtomicBool::new(false),
            config_ready: AtomicBool::new(config_ready),
            store_ready: AtomicBool::new(true),
            changed: tokio::sync::watch::Sender::new(config_ready),
        }
    }

    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::SeqCst);
        self.changed.send_replace(self.serving());
    }

    pub fn set_config_ready(&self, ready: bool) {
        self.config_ready.store(ready, Ordering::SeqCst);
        self.changed.send_replace(self.serving());
    }

    pub fn set_store_ready(&self, ready: bool) {
        self.store_ready.store(ready, Ordering::SeqCst);
        self.changed.send_if_modified(|serving| {
            let now = self.serving();
            std::mem::replace(serving, now) != now
        });
    }

    pub fn serving(&self) -> bool {
        !self.draining.load(Ordering::SeqCst)
            && self.config_ready.load(Ordering::SeqCst)
            && self.store_ready.load(Ordering::SeqCst)
    }

    /// Whether serving, each time it may have changed.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<bool> {
        self.changed.subscribe()
    }
}

/// Everything the endpoints read.
pub struct Endpoints<S> {
    pub config: Arc<ArcSwap<Config>>,
    pub limiter: Arc<RateLimiter<S>>,
    /// Kuadrant's calls, which Limitador's HTTP API makes too.
    pub kuadrant: Arc<KuadrantService<S>>,
    pub store: Arc<S>,
    pub metrics: Arc<Metrics>,
    /// `/metrics` texts, rendered off the request path.
    pub scrapes: Scrapes,
    pub readiness: Arc<Readiness>,
    /// `/healthcheck` also asks the store (`--healthcheck-store`).
    pub check_store: bool,
    /// Which endpoints beyond `/healthcheck` and `/metrics` are served.
    pub served: HttpEndpoints,
}

/// The endpoints an operator may turn off: `/json` spends any client's budget and `/rlconfig`
/// shows every limit to whoever reaches the port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpEndpoints {
    pub json: bool,
    pub rlconfig: bool,
}

/// The router of the metrics' own listener (`USE_PROMETHEUS`): the metrics at `path`.
pub fn metrics_router<S: Store>(endpoints: Arc<Endpoints<S>>, path: &str) -> Router {
    Router::new()
        .route(path, get(metrics::<S>))
        .with_state(endpoints)
}

/// The router of the HTTP port.
pub fn router<S: Store + ReadsCounter>(endpoints: Arc<Endpoints<S>>) -> Router {
    let mut router = Router::new()
        .route("/healthcheck", get(healthcheck::<S>))
        .route("/metrics", get(metrics::<S>));
    if endpoints.served.json {
        router = router.route("/json", post(should_rate_limit::<S>));
    }
    if endpoints.served.rlconfig {
        router = router.route("/rlconfig", get(rlconfig::<S>));
    }
    router = limitador_routes(router);
    router.with_state(endpoints)
}

/// Limitador's HTTP API (`limitador`).
fn limitador_routes<S: Store + ReadsCounter>(
    router: Router<Arc<Endpoints<S>>>,
) -> Router<Arc<Endpoints<S>>> {
    use limitador::Call;
    let call = |call: Call| {
        move |state: State<Arc<Endpoints<S>>>, body: String| limitador::call(state, call, body)
    };
    router
        .route("/status", get(limitador::status::<S>))
        .route("/limits/{namespace}", get(limitador::limits::<S>))
        .route("/counters/{namespace}", get(limitador::counters::<S>))
        .route("/check", post(call(Call::Check)))
        .route("/report", post(call(Call::Report)))
        .route("/check_and_report", post(call(Call::CheckAndReport)))
}

async fn healthcheck<S: Store>(State(endpoints): State<Arc<Endpoints<S>>>) -> Response {
    if !endpoints.readiness.serving() {
        return (StatusCode::INTERNAL_SERVER_ERROR, "not serving\n").into_response();
    }
    if endpoints.check_store && !endpoints.store.healthy().await {
        return (StatusCode::INTERNAL_SERVER_ERROR, "store unreachable\n").into_response();
    }
    (StatusCode::OK, "OK").into_response()
}

async fn should_rate_limit<S: Store>(
    State(endpoints): State<Arc<Endpoints<S>>>,
    body: String,
) -> Response {
    let request: json::JsonRequest = match serde_json::from_str(&body) {
        Ok(request) => request,
        Err(error) => {
            return (StatusCode::BAD_REQUEST, format!("bad request: {error}\n")).into_response()
        }
    };
    match endpoints.limiter.decide(&request.into()).await {
        Ok(response) => {
            let status = if response.overall_code == Code::OverLimit as i32 {
                StatusCode::TOO_MANY_REQUESTS
            } else {
                StatusCode::OK
            };
            (status, axum::Json(json::response(&response))).into_response()
        }
        Err(error) => error_response(error),
    }
}

/// 400 naming the field for a bad request, 500 with the reason when the store failed.
fn error_response(error: DecisionError) -> Response {
    match &error {
        DecisionError::InvalidRequest { .. } => {
            (StatusCode::BAD_REQUEST, format!("bad request: {error}\n")).into_response()
        }
        DecisionError::Store(_) => {
            (StatusCode::INTERNAL_SERVER_ERROR, format!("{error}\n")).into_response()
        }
    }
}

async fn metrics<S: Store>(State(endpoints): State<Arc<Endpoints<S>>>) -> Response {
    let metrics = endpoints.metrics.clone();
    match endpoints.scrapes.text(move || metrics.render()).await {
        Ok(text) => ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response(),
        Err(error) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{error}\n")).into_response(),
    }
}

/// Every limit, one line each, sorted; written on a blocking thread (a config may be large).
async fn rlconfig<S: Store>(State(endpoints): State<Arc<Endpoints<S>>>) -> Response {
    let config = endpoints.config.load_full();
    let overrides = endpoints.limiter.overrides().len();
    let written = tokio::task::spawn_blocking(move || {
        let mut lines: Vec<String> = config
            .domains()
            .into_iter()
            .flat_map(|domain| domain.rules())
            .flat_map(describe)
            .collect();
        // Limitador's limits (docs/kuadrant.md), one line each.
        lines.extend(
            config
                .domains()
                .into_iter()
                .flat_map(|domain| &domain.cel_limits)
                .map(|limit| limit.describe()),
        );
        lines.sort();
        // Calendar windows' boundaries come from the time-zone database built in: which one.
        if lines.iter().any(|line| line.contains(", window: calendar")) {
            let version = sluice_core::calendar::time_zone_database_version();
            lines.insert(0, format!("# time zone database {version}"));
        }
        // Admin overrides are counted, never listed (there may be a million).
        if overrides > 0 {
            lines.insert(0, format!("# overrides in force: {overrides}"));
        }
        lines
            .into_iter()
            .map(|line| line + "\n")
            .collect::<String>()
    });
    let source = endpoints.config.load().source().to_string();
    match written.await {
        // Where the limits came from (files, or the xDS server and version), beside them.
        Ok(text) => {
            let database = sluice_core::calendar::time_zone_database_version();
            let headers = [
                ("x-sluice-config-source", source),
                ("x-sluice-time-zone-database", database.to_string()),
            ];
            (headers, text).into_response()
        }
        Err(error) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{error}\n")).into_response(),
    }
}

/// A rule's limits as `/rlconfig` prints them, one line each (the reference's form, plus
/// sluice's extensions).
fn describe(rule: &Rule) -> Vec<String> {
    rule.limits
        .iter()
        .map(|named| match named.limit.clone() {
            None => format!("{}: unlimited", rule.full_key),
            Some(limit) => describe_limit(&rule.full_key, &limit, rule.shadow_mode),
        })
        .collect()
}

fn describe_limit(full_key: &str, limit: &Limit, shadow_mode: bool) -> String {
    let mut line = format!(
        "{full_key}: unit={} requests_per_unit={}, shadow_mode: {shadow_mode}",
        limit.unit.as_str().to_uppercase(),
        limit.requests_per_unit,
    );
    if limit.algorithm() != Algorithm::default() || limit.unit_multiplier > 1 {
        line.push_str(&format!(
            ", algorithm: {}, period: {} x {}",
            limit.algorithm(),
            limit.unit_multiplier,
            limit.unit
        ));
        // The algorithm's own settings, as it shows them (`, burst 20`).
        line.push_str(&limit.counting.describe(&limit.rate()));
    }
    if let Some(calendar) = limit.counting.calendar() {
        line.push_str(&format!(", window: {calendar}"));
    } else if limit.from_first_hit() {
        line.push_str(", window: from each counter's first hit");
    }
    if limit.debt {
        line.push_str(", debt: true");
    }
    // Each modifier's settings, as it lists them.
    line.push_str(&limit.modifiers.listed());
    line
}
