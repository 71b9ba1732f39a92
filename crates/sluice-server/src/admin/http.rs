//! The admin API as JSON over HTTP (docs/admin.md): the same calls as the gRPC service, a
//! route each. An error answers with its HTTP status and `{"code", "field", "message"}`.

use std::sync::Arc;

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{post, put};
use axum::{Extension, Json, Router};
use serde::Deserialize;
use serde_json::json;

use super::auth::Caller;
use super::model::{Credit, DescriptorRef, PutOverride, Reset};
use super::{Admin, AdminError};

/// The JSON routes.
pub fn router(admin: Arc<Admin>) -> Router {
    Router::new()
        .route(
            "/v1/overrides",
            put(put_override)
                .delete(delete_override)
                .get(list_overrides),
        )
        .route("/v1/descriptors/get", post(get_descriptor))
        .route("/v1/descriptors/reset", post(reset))
        .route("/v1/descriptors/credit", post(credit))
        .layer(axum::middleware::from_fn(super::body::bounded))
        .with_state(admin)
}

/// An error as JSON, with its status.
fn error_response(error: &AdminError) -> Response {
    let status = StatusCode::from_u16(error.http_status()).unwrap_or(StatusCode::BAD_REQUEST);
    let code = format!("{:?}", error.code());
    let body = json!({
        "code": screaming(&code),
        "field": error.field(),
        "message": error.to_string(),
    });
    (status, Json(body)).into_response()
}

/// `InvalidArgument` as gRPC names it: `INVALID_ARGUMENT`.
fn screaming(camel: &str) -> String {
    let mut out = String::with_capacity(camel.len() + 4);
    for (i, c) in camel.chars().enumerate() {
        if c.is_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

/// A body that is not the call's JSON: 400, naming the field serde names.
fn body_error(message: String) -> AdminError {
    let field = message
        .split('`')
        .nth(1)
        .filter(|_| message.contains("field"))
        .unwrap_or("body")
        .to_string();
    AdminError::Invalid {
        field,
        reason: message,
    }
}

/// A call's answer: its value as JSON, or its error.
pub(super) fn answer<T: serde::Serialize>(result: Result<T, AdminError>) -> Response {
    match result {
        Ok(value) => Json(value).into_response(),
        Err(error) => error_response(&error),
    }
}

/// A query string that is not the call's: 400, naming the field serde names.
pub(super) fn invalid_query(rejection: QueryRejection) -> AdminError {
    body_error(rejection.body_text())
}

fn json_body<T>(body: Result<Json<T>, JsonRejection>) -> Result<T, AdminError> {
    body.map(|Json(value)| value)
        .map_err(|rejection| body_error(rejection.body_text()))
}

async fn put_override(
    State(admin): State<Arc<Admin>>,
    Extension(caller): Extension<Caller>,
    body: Result<Json<PutOverride>, JsonRejection>,
) -> Response {
    let result = match json_body(body) {
        Ok(put) => admin
            .put(&caller.0, put)
            .await
            .map(|(stored, previous)| json!({"override": stored, "previous": previous})),
        Err(error) => Err(error),
    };
    answer(result)
}

async fn delete_override(
    State(admin): State<Arc<Admin>>,
    Extension(caller): Extension<Caller>,
    body: Result<Json<DescriptorRef>, JsonRejection>,
) -> Response {
    let result = match json_body(body) {
        Ok(target) => admin
            .delete(&caller.0, target)
            .await
            .map(|previous| json!({"previous": previous})),
        Err(error) => Err(error),
    };
    answer(result)
}

/// `GET /v1/overrides?domain=...&page_size=...&page_token=...`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    domain: String,
    #[serde(default)]
    page_size: usize,
    #[serde(default)]
    page_token: String,
}

async fn list_overrides(
    State(admin): State<Arc<Admin>>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Response {
    let query = match query {
        Ok(Query(query)) => query,
        Err(rejection) => return error_response(&invalid_query(rejection)),
    };
    let result = admin
        .list(&query.domain, query.page_size, &query.page_token)
        .await
        .map(|(overrides, next)| {
            json!({"overrides": overrides, "next_page_token": next.unwrap_or_default()})
        });
    answer(result)
}

async fn get_descriptor(
    State(admin): State<Arc<Admin>>,
    body: Result<Json<DescriptorRef>, JsonRejection>,
) -> Response {
    let result = match json_body(body) {
        Ok(target) => admin.get(target).await,
        Err(error) => Err(error),
    };
    answer(result)
}

async fn reset(
    State(admin): State<Arc<Admin>>,
    Extension(caller): Extension<Caller>,
    body: Result<Json<Reset>, JsonRejection>,
) -> Response {
    let result = match json_body(body) {
        Ok(reset) => admin.reset(&caller.0, reset).await,
        Err(error) => Err(error),
    };
    answer(result)
}

async fn credit(
    State(admin): State<Arc<Admin>>,
    Extension(caller): Extension<Caller>,
    body: Result<Json<Credit>, JsonRejection>,
) -> Response {
    let result = match json_body(body) {
        Ok(credit) => admin
            .credit(&caller.0, credit)
            .await
            .map(|state| json!({"state": state})),
        Err(error) => Err(error),
    };
    answer(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_read_as_grpc_names_them() {
        assert_eq!(screaming("InvalidArgument"), "INVALID_ARGUMENT");
        assert_eq!(screaming("NotFound"), "NOT_FOUND");
    }

    #[test]
    fn a_body_error_names_the_field_serde_names() {
        let error = body_error("Failed to deserialize the JSON body into the target type: missing field `descriptor` at line 1 column 17".into());
        assert_eq!(error.field(), Some("descriptor"));
        assert_eq!(body_error("EOF while parsing".into()).field(), Some("body"));
    }
}
