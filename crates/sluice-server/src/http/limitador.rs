//! Limitador's HTTP API on the HTTP port (docs/kuadrant.md): `GET /status` (the health probe
//! limitador-operator's Deployment asks), `GET /limits/{namespace}` (the namespace's limits
//! from Limitador's limits files), and `POST /check`, `/report` and `/check_and_report`
//! (`{"namespace", "values", "delta"}`: 200, or 429 when limited), each the Kuadrant service's
//! call on one descriptor of `values`, with Limitador's JSON shapes (and, as Limitador, only
//! `/check_and_report` counted in its series).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{error_response, Endpoints};
use crate::kuadrant::Caller;
use crate::metrics::loads::LoadsNow;
use sluice_config::cel_limits::CelLimit;
use sluice_core::limit::{Hit, Role};
use sluice_proto::rate_limit_descriptor::Entry;
use sluice_proto::rate_limit_response::Code;
use sluice_proto::RateLimitDescriptor;
use sluice_store::admin::{AdminStore, Reading};
use sluice_store::on_failure::WithFailureAnswer;
use sluice_store::regions::WithRegions;
use sluice_store::{Clock, Store, StoreError, SystemClock};
use std::future::Future;

/// The body of `/check`, `/report` and `/check_and_report`.
#[derive(Debug, Deserialize)]
pub struct CheckAndReport {
    namespace: String,
    values: BTreeMap<String, String>,
    delta: u64,
}

impl CheckAndReport {
    /// The one descriptor Limitador makes of `values`, entries in key order.
    fn descriptors(&self) -> Vec<RateLimitDescriptor> {
        let entries = self
            .values
            .iter()
            .map(|(key, value)| Entry {
                key: key.clone(),
                value: value.clone(),
            })
            .collect();
        vec![RateLimitDescriptor {
            entries,
            ..RateLimitDescriptor::default()
        }]
    }
}

/// Which of Limitador's three calls.
#[derive(Debug, Clone, Copy)]
pub enum Call {
    Check,
    Report,
    CheckAndReport,
}

/// `/status`: when the server started, when its configuration was last applied, how many
/// were, and how many loads failed since (Limitador's fields); 500 while not serving.
pub async fn status<S: Store>(State(endpoints): State<Arc<Endpoints<S>>>) -> Response {
    let code = if endpoints.readiness.serving() {
        StatusCode::OK
    } else {
        StatusCode::INTERNAL_SERVER_ERROR
    };
    (code, Json(status_json(endpoints.metrics.config_loads()))).into_response()
}

fn status_json(loads: LoadsNow) -> Value {
    json!({
        "started_at": naive_utc(loads.started_us),
        "config_applied_at": naive_utc(loads.applied_us),
        "config_version": loads.version,
        "config_err_since": loads.failed_since,
    })
}

/// A time as Limitador's `NaiveDateTime` writes it: UTC, without a zone.
fn naive_utc(epoch_us: u64) -> String {
    let micros = i64::try_from(epoch_us).unwrap_or(i64::MAX);
    match jiff::Timestamp::from_microsecond(micros) {
        Ok(at) => jiff::tz::Offset::UTC.to_datetime(at).to_string(),
        Err(_) => String::new(),
    }
}

/// `/limits/{namespace}`: the namespace's limits from Limitador's limits files.
pub async fn limits<S: Store>(
    State(endpoints): State<Arc<Endpoints<S>>>,
    Path(namespace): Path<String>,
) -> Response {
    let config = endpoints.config.load();
    let limits: Vec<Value> = config
        .domain(&namespace)
        .map(|domain| domain.cel_limits.iter().map(limit_json).collect())
        .unwrap_or_default();
    Json(limits).into_response()
}

fn limit_json(limit: &CelLimit) -> Value {
    json!({
        "id": limit.id,
        "namespace": limit.namespace,
        "max_value": limit.max_value,
        "seconds": limit.seconds,
        "name": limit.name,
        "conditions": limit.condition_sources().collect::<Vec<_>>(),
        "variables": limit.variable_sources().collect::<Vec<_>>(),
    })
}

/// `/counters/{namespace}`: the counters of the namespace's limits that hold a count, as
/// Limitador lists them (its limit, its variables' values, what remains and the seconds until
/// its window ends), read from the store; those this replica has asked about (docs/kuadrant.md).
pub async fn counters<S: Store + ReadsCounter>(
    State(endpoints): State<Arc<Endpoints<S>>>,
    Path(namespace): Path<String>,
) -> Response {
    let config = endpoints.config.load();
    let Some(domain) = config.domain(&namespace) else {
        return Json(Vec::<Value>::new()).into_response();
    };
    let seen = endpoints
        .limiter
        .seen_counters()
        .of_namespace(&namespace, SystemClock.now_us());
    let mut listed = Vec::new();
    for counter in seen {
        let Some(limit) = domain
            .cel_limits
            .iter()
            .find(|limit| limit.identity == counter.identity)
        else {
            continue;
        };
        let hit = Hit {
            key: counter.key.clone(),
            limit: limit.limit.clone(),
            cost: 0,
            role: Role::Enforced,
            joins_previous: false,
            lease: None,
        };
        let reading = match endpoints.store.read_counter(&hit).await {
            Ok(reading) => reading,
            Err(error) => return error_response(error.into()),
        };
        if reading.used == 0 {
            continue;
        }
        listed.push(counter_json(limit, &counter.values, &reading));
    }
    Json(listed).into_response()
}

/// A store whose counters can be read without a charge (the admin API's read): the served
/// store reads through its regions and its failure answer to the store itself.
pub trait ReadsCounter {
    fn read_counter(&self, hit: &Hit) -> impl Future<Output = Result<Reading, StoreError>> + Send;
}

impl<S: Store + AdminStore> ReadsCounter for WithRegions<WithFailureAnswer<Arc<S>>> {
    async fn read_counter(&self, hit: &Hit) -> Result<Reading, StoreError> {
        self.inner().inner().read(hit).await
    }
}

/// One counter as Limitador writes it: `limit`, `set_variables`, `remaining`,
/// `expires_in_seconds` (whole seconds, rounded down).
fn counter_json(limit: &CelLimit, values: &[String], reading: &Reading) -> Value {
    let set_variables: BTreeMap<&str, &str> = limit
        .variable_sources()
        .zip(values.iter().map(String::as_str))
        .collect();
    json!({
        "limit": limit_json(limit),
        "set_variables": set_variables,
        "remaining": limit.max_value.saturating_sub(reading.used),
        "expires_in_seconds": reading.decision.reset_after_us / 1_000_000,
    })
}

/// `/check`, `/report`, `/check_and_report`: 200 (`null`), 429 (`null`) when limited, 400 for
/// a body that is not one, 500 when the store failed.
pub async fn call<S: Store>(
    State(endpoints): State<Arc<Endpoints<S>>>,
    call: Call,
    body: String,
) -> Response {
    let asked: CheckAndReport = match serde_json::from_str(&body) {
        Ok(asked) => asked,
        Err(error) => {
            return (StatusCode::BAD_REQUEST, format!("bad request: {error}\n")).into_response()
        }
    };
    let descriptors = asked.descriptors();
    let (namespace, delta) = (asked.namespace, asked.delta);
    let kuadrant = &endpoints.kuadrant;
    let code = match call {
        Call::Check => {
            kuadrant
                .check(namespace, descriptors, delta, Caller::Http)
                .await
        }
        Call::Report => kuadrant
            .report(namespace, descriptors, delta, Caller::Http)
            .await
            .map(|()| Code::Ok),
        Call::CheckAndReport => {
            kuadrant
                .check_and_report(namespace, descriptors, delta)
                .await
        }
    };
    match code {
        Ok(Code::OverLimit) => (StatusCode::TOO_MANY_REQUESTS, Json(Value::Null)).into_response(),
        Ok(_) => (StatusCode::OK, Json(Value::Null)).into_response(),
        Err(error) => error_response(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_writes_limitadors_fields_and_times() {
        let loads = LoadsNow {
            started_us: 1_700_000_000_123_456,
            applied_us: 1_700_000_060_000_000,
            version: 2,
            failed_since: 1,
        };
        let json = status_json(loads);
        assert_eq!(json["started_at"], "2023-11-14T22:13:20.123456");
        assert_eq!(json["config_applied_at"], "2023-11-14T22:14:20");
        assert_eq!(json["config_version"], 2);
        assert_eq!(json["config_err_since"], 1);
    }
}
