//! Who is being limited, on the admin port (docs/heavy-hitters.md), behind its authentication:
//! `GET /v1/top` (a limit's heaviest values by hits or denials over a window), `GET
//! /v1/top/value` (one value: its counts, and its limits in force with used, remaining and
//! reset, and whether it is denied now), `GET /v1/dashboard` (everything the page shows, in
//! one answer) and `GET /dashboard` (the page: one HTML file with its script and chart inline,
//! loading nothing from elsewhere, polling `/v1/dashboard` every second).

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
use super::model::{DescriptorRef, DescriptorState};
use super::{Admin, AdminError};
use crate::hitters::shared::{self, Summary};
use crate::hitters::{By, LimitName, LimitView, Span, Top};
use sluice_config::overrides::{EntryDoc, OverrideDoc};
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

/// `GET /v1/top?domain=&limit=&by=hits|denials&window=1m|1h&k=`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TopQuery {
    domain: Option<String>,
    limit: Option<String>,
    #[serde(default = "hits")]
    by: By,
    #[serde(default = "minute")]
    window: Span,
    k: Option<usize>,
}

fn hits() -> By {
    By::Hits
}

fn minute() -> Span {
    Span::Minute
}

/// A top list as answered: the limit, what it is by, over which window, and the list.
#[derive(Debug, Serialize)]
struct TopAnswer {
    domain: String,
    limit: String,
    by: By,
    window: Span,
    #[serde(flatten)]
    top: TopWithDescriptors,
}

#[derive(Debug, Serialize)]
struct TopWithDescriptors {
    values: Vec<HeavyValue>,
    total: u64,
    bound: u64,
}

/// One heavy value, with its descriptor (what `/v1/descriptors/get` takes).
#[derive(Debug, Serialize)]
struct HeavyValue {
    value: String,
    descriptor: Vec<EntryDoc>,
    count: u64,
    error: u64,
}

fn with_descriptors(top: Top) -> TopWithDescriptors {
    TopWithDescriptors {
        values: top
            .values
            .into_iter()
            .map(|heavy| HeavyValue {
                descriptor: descriptor_of(&heavy.value),
                value: heavy.value,
                count: heavy.count,
                error: heavy.error,
            })
            .collect(),
        total: top.total,
        bound: top.bound,
    }
}

/// The entries a value's text names (`crate::hitters::value_text`'s inverse).
fn descriptor_of(value: &str) -> Vec<EntryDoc> {
    crate::hitters::entries_of(value)
        .into_iter()
        .map(|(key, value)| EntryDoc { key, value })
        .collect()
}

impl Dashboard {
    /// The `k` to tell: the setting's, or the query's up to the sketch's capacity.
    fn k(&self, asked: Option<usize>) -> Result<usize, AdminError> {
        let settings = self.admin.metrics().heavy_hitters().settings();
        match asked {
            None => Ok(settings.top),
            Some(k) if (1..=settings.capacity).contains(&k) => Ok(k),
            Some(k) => Err(AdminError::invalid(
                "k",
                format!(
                    "{k} is not between 1 and the sketches' capacity, {}",
                    settings.capacity
                ),
            )),
        }
    }

    /// Every replica's lists: this one's, and those the others shared through Redis (an error
    /// reading theirs answers UNAVAILABLE: a partial answer would pass for the whole).
    async fn summaries(&self) -> Result<Vec<Summary>, AdminError> {
        let hitters = self.admin.metrics().heavy_hitters();
        match shared::summaries(hitters, self.admin.store()).await {
            (summaries, None) => Ok(summaries),
            (_, Some(error)) => Err(AdminError::Store(error)),
        }
    }

    async fn top(
        &self,
        query: TopQuery,
        domain: String,
        limit: String,
    ) -> Result<TopAnswer, AdminError> {
        let k = self.k(query.k)?;
        let name = LimitName { domain, limit };
        let summaries = self.summaries().await?;
        let top = shared::merged_top(&summaries, &name, query.window, query.by, k)
            .ok_or_else(|| not_tracked(&name))?;
        Ok(TopAnswer {
            domain: name.domain,
            limit: name.limit,
            by: query.by,
            window: query.window,
            top: with_descriptors(top),
        })
    }
}

fn not_tracked(name: &LimitName) -> AdminError {
    AdminError::NotFound(format!(
        "no limit '{}' of domain '{}' is tracked (GET /v1/top lists those that are)",
        name.limit, name.domain
    ))
}

/// A limit's top list; without `limit`, the limits tracked (of `domain`, when given).
async fn top(
    State(dashboard): State<Dashboard>,
    query: Result<Query<TopQuery>, QueryRejection>,
) -> Response {
    let result = match query.map_err(invalid_query) {
        Ok(Query(mut query)) => match (query.domain.take(), query.limit.take()) {
            (Some(domain), Some(limit)) => dashboard
                .top(query, domain, limit)
                .await
                .map(|answer| json!(answer)),
            (None, Some(_)) => Err(AdminError::invalid(
                "domain",
                "a limit is named within its domain: set domain too",
            )),
            (domain, None) => dashboard.summaries().await.map(|summaries| {
                let names: Vec<LimitName> = shared::merged_names(&summaries)
                    .into_iter()
                    .filter(|n| domain.as_ref().is_none_or(|d| &n.domain == d))
                    .collect();
                json!({ "limits": names })
            }),
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

/// One value: its counts in each window (never under the true ones; over by at most
/// `error`), and its descriptor's limits in force as `/v1/descriptors/get` reads them.
#[derive(Debug, Serialize)]
struct ValueAnswer {
    domain: String,
    limit: String,
    value: String,
    descriptor: Vec<EntryDoc>,
    windows: serde_json::Map<String, serde_json::Value>,
    /// A limit in force (not in shadow mode) has nothing left: its next hit is denied.
    denied_now: bool,
    state: DescriptorState,
}

async fn value(
    State(dashboard): State<Dashboard>,
    query: Result<Query<ValueQuery>, QueryRejection>,
) -> Response {
    let query = match query.map_err(invalid_query) {
        Ok(Query(query)) => query,
        Err(error) => return answer::<()>(Err(error)),
    };
    let name = LimitName {
        domain: query.domain.clone(),
        limit: query.limit.clone(),
    };
    let summaries = match dashboard.summaries().await {
        Ok(summaries) => summaries,
        Err(error) => return answer::<()>(Err(error)),
    };
    let mut windows = serde_json::Map::new();
    for span in Span::ALL {
        let mut counts = serde_json::Map::new();
        for (by, field) in [(By::Hits, "hits"), (By::Denials, "denials")] {
            // Every value any replica lists: the one asked for is found if it is listed.
            let Some(top) = shared::merged_top(&summaries, &name, span, by, usize::MAX) else {
                return answer::<()>(Err(not_tracked(&name)));
            };

            let found = top.values.iter().find(|h| h.value == query.value);
            // A value the sketches do not hold counted at most their bound.
            let (count, error) = found.map_or((top.bound, top.bound), |h| (h.count, h.error));
            counts.insert(field.to_string(), json!({"count": count, "error": error}));
        }
        windows.insert(span.as_str().to_string(), counts.into());
    }
    let descriptor = descriptor_of(&query.value);
    let target = DescriptorRef {
        domain: query.domain.clone(),
        descriptor: descriptor.clone(),
        name: None,
    };
    let result = dashboard.admin.get(target).await.map(|state| {
        let denied_now = state
            .limits
            .iter()
            .any(|limit| !limit.shadow_mode && limit.remaining == 0);
        ValueAnswer {
            domain: query.domain,
            limit: query.limit,
            value: query.value,
            descriptor,
            windows,
            denied_now,
            state,
        }
    });
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
