//! Who is being limited, over HTTP on the admin port (docs/heavy-hitters.md), behind its
//! authentication: `GET /v1/top` and `GET /v1/top/value` (the calls of `top`), `GET
//! /v1/dashboard` (everything the page shows, in one answer) and `GET /dashboard` (the page:
//! one HTML file with its script and chart inline, loading nothing from elsewhere, polling
//! `/v1/dashboard` every second).

use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::http::{answer, invalid_query};
use super::top::{by_named, window_named};
use super::{Admin, AdminError};
use crate::hitters::shared;
use crate::hitters::{LimitName, LimitView};
use sluice_config::overrides::OverrideDoc;
use sluice_core::modifier::{Modifiers, SeriesKind};

/// The page.
const PAGE: &str = include_str!("dashboard.html");

/// The largest replay report shown (a report of many rules is larger; its head is not JSON).
const MAX_REPORT_BYTES: u64 = 8 << 20;

/// The store's series the page shows beside the modifiers' gauges (`gauges`).
const STORE_GAUGES: [&str; 1] = ["sluice_store_circuit_open"];

/// The series of the Prometheus text the page shows: the circuit breaker, and every gauge a
/// limit's modifiers keep (what they hold for requests in flight, the clients they block).
fn gauges() -> Vec<&'static str> {
    let kept = Modifiers::series()
        .filter(|series| matches!(series.kind, SeriesKind::Gauge))
        .map(|series| series.name);
    STORE_GAUGES.into_iter().chain(kept).collect()
}

#[derive(Clone)]
struct Dashboard {
    admin: Arc<Admin>,
    replay_report: Option<PathBuf>,
}

/// The routes.
pub fn router(admin: Arc<Admin>, replay_report: Option<PathBuf>) -> Router {
    Router::new()
        .route("/dashboard", get(page))
        .route("/v1/dashboard", get(everything))
        .route("/v1/top", get(top))
        .route("/v1/top/value", get(value))
        .with_state(Dashboard {
            admin,
            replay_report,
        })
}

async fn page() -> Response {
    (
        [
            (CONTENT_TYPE, "text/html; charset=utf-8"),
            (CACHE_CONTROL, "no-store"),
        ],
        PAGE,
    )
        .into_response()
}

/// `GET /v1/top?domain=&limit=&by=hits|denials&window=1m|1h&k=`; without `limit`, the limits
/// tracked (of `domain`, when given).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TopQuery {
    domain: Option<String>,
    limit: Option<String>,
    #[serde(default)]
    by: String,
    #[serde(default)]
    window: String,
    k: Option<usize>,
}

async fn top(
    State(dashboard): State<Dashboard>,
    query: Result<Query<TopQuery>, QueryRejection>,
) -> Response {
    let admin = &dashboard.admin;
    let result = match query.map_err(invalid_query) {
        Ok(Query(query)) => match (query.domain, query.limit) {
            (Some(domain), Some(limit)) => match (by_named(&query.by), window_named(&query.window))
            {
                (Ok(by), Ok(window)) => admin
                    .top(LimitName { domain, limit }, by, window, query.k)
                    .await
                    .map(|answer| json!(answer)),
                (Err(error), _) | (_, Err(error)) => Err(error),
            },
            (None, Some(_)) => Err(AdminError::invalid(
                "domain",
                "a limit is named within its domain: set domain too",
            )),
            (domain, None) => admin
                .tracked_limits(domain.as_deref())
                .await
                .map(|limits| json!({ "limits": limits })),
        },
        Err(error) => Err(error),
    };
    answer(result)
}

/// `GET /v1/top/value?domain=&limit=&value=`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ValueQuery {
    domain: String,
    limit: String,
    value: String,
}

async fn value(
    State(dashboard): State<Dashboard>,
    query: Result<Query<ValueQuery>, QueryRejection>,
) -> Response {
    let result = match query.map_err(invalid_query) {
        Ok(Query(query)) => {
            let name = LimitName {
                domain: query.domain,
                limit: query.limit,
            };
            dashboard.admin.top_value(name, query.value).await
        }
        Err(error) => Err(error),
    };
    answer(result)
}

/// What the page shows, in one answer.
#[derive(Debug, Serialize)]
struct Everything {
    now: u64,
    /// Why the other replicas' lists are not in the answer, when they cannot be read.
    replicas_error: Option<String>,
    limits: Vec<LimitView>,
    overrides: Vec<OverrideDoc>,
    gauges: Vec<Gauge>,
    replay: Option<serde_json::Value>,
    replay_error: Option<String>,
}

/// One line of a gauge the page shows: its name, labels and value.
#[derive(Debug, Serialize)]
struct Gauge {
    name: String,
    labels: String,
    value: String,
}

async fn everything(State(dashboard): State<Dashboard>) -> Response {
    let admin = &dashboard.admin;
    let hitters = admin.metrics().heavy_hitters();
    let (summaries, replicas_error) = shared::summaries(hitters, admin.store()).await;
    let mut limits = shared::merged_views(&summaries, hitters.settings().top);
    for view in &mut limits {
        view.in_force = admin.limits_of(&view.domain, &view.limit);
    }
    let replicas_error = replicas_error.map(|e| format!("the other replicas' lists: {e}"));
    let mut overrides = Vec::new();
    for domain in admin.domain_names() {
        if let Ok((page, _)) = admin.list(&domain, super::MAX_PAGE, "").await {
            overrides.extend(page);
        }
    }
    let text = admin.metrics().render();
    let names = gauges();
    let gauges = text
        .lines()
        .filter_map(|line| {
            let name = names.iter().find(|name| {
                line.strip_prefix(**name)
                    .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
            })?;
            let rest = &line[name.len()..];
            let (labels, value) = rest.rsplit_once(' ')?;
            Some(Gauge {
                name: name.to_string(),
                labels: labels.trim_matches(|c| c == '{' || c == '}').to_string(),
                value: value.to_string(),
            })
        })
        .collect();
    let (replay, replay_error) = match &dashboard.replay_report {
        Some(path) => match read_report(path).await {
            Ok(report) => (Some(report), None),
            Err(error) => (None, Some(error)),
        },
        None => (None, None),
    };
    Json(Everything {
        now: hitters.now(),
        replicas_error,
        limits,
        overrides,
        gauges,
        replay,
        replay_error,
    })
    .into_response()
}

/// The replay report at `path`, with when it was written (`written_at`, RFC 3339), read off
/// the runtime's threads.
async fn read_report(path: &std::path::Path) -> Result<serde_json::Value, String> {
    let path = path.to_path_buf();
    tokio::task::spawn_blocking(move || report_at(&path))
        .await
        .map_err(|e| format!("reading the replay report: {e}"))?
}

fn report_at(path: &std::path::Path) -> Result<serde_json::Value, String> {
    let shown = path.display();
    let metadata = std::fs::metadata(path).map_err(|e| format!("{shown}: {e}"))?;
    if metadata.len() > MAX_REPORT_BYTES {
        return Err(format!(
            "{shown}: {} bytes, past the {MAX_REPORT_BYTES} shown",
            metadata.len()
        ));
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("{shown}: {e}"))?;
    let mut report: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{shown}: not a replay report: {e}"))?;
    let written = metadata
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| super::rfc3339(u64::try_from(d.as_micros()).unwrap_or(u64::MAX)));
    if let (Some(object), Some(written)) = (report.as_object_mut(), written) {
        object.insert("written_at".to_string(), json!(written));
    }
    Ok(report)
}
