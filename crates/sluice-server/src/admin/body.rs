//! The bound on a JSON call's body: at most `MAX_BODY_BYTES`. A body over it is answered 413
//! with the admin API's JSON error, after what the client sends of it is read and dropped (up
//! to `DRAIN_BYTES`, within `DRAIN_TIME`): a client that writes its whole body before it reads
//! then reads the answer, instead of a connection reset under its write. Past the drain's
//! bounds the connection is closed with the answer.

use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::http::header::{CONNECTION, CONTENT_LENGTH};
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::StreamExt;
use serde_json::json;

/// The most bytes a JSON call's body may hold: a put is a few hundred bytes.
pub const MAX_BODY_BYTES: usize = 1 << 20;

/// How much of a body over the bound is read and dropped before the answer.
const DRAIN_BYTES: usize = 16 << 20;

/// How long the drain may take.
const DRAIN_TIME: Duration = Duration::from_secs(10);

/// Passes a request on with its body read whole when it is within the bound; else 413.
pub async fn bounded(request: Request, next: Next) -> Response {
    let declared = request
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    let (parts, body) = request.into_parts();
    let mut data = body.into_data_stream();
    if declared.is_some_and(|length| length > MAX_BODY_BYTES as u64) {
        let drained = drain(&mut data, 0).await;
        return too_large(declared, drained);
    }
    let mut held = Vec::new();
    while let Some(chunk) = data.next().await {
        let Ok(chunk) = chunk else {
            // The client's body ended badly: nothing to answer it with but the close.
            return (StatusCode::BAD_REQUEST, "the request body was cut short").into_response();
        };
        if held.len() + chunk.len() > MAX_BODY_BYTES {
            let drained = drain(&mut data, held.len() + chunk.len()).await;
            return too_large(None, drained);
        }
        held.extend_from_slice(&chunk);
    }
    next.run(Request::from_parts(parts, Body::from(held))).await
}

/// Reads and drops what is left of `data`, `read` bytes of it already read, within the
/// drain's bounds; whether it reached the end.
async fn drain(data: &mut axum::body::BodyDataStream, mut read: usize) -> bool {
    let to_end = async {
        while let Some(chunk) = data.next().await {
            let Ok(chunk) = chunk else { return false };
            read += chunk.len();
            if read > DRAIN_BYTES {
                return false;
            }
        }
        true
    };
    tokio::time::timeout(DRAIN_TIME, to_end)
        .await
        .unwrap_or(false)
}

/// The 413 answer, closing the connection when the body was not read to its end.
fn too_large(declared: Option<u64>, drained: bool) -> Response {
    let size = declared.map_or_else(|| "more than that".to_string(), |n| format!("{n} bytes"));
    let body = json!({
        "code": "INVALID_ARGUMENT",
        "field": "body",
        "message": format!("body: {size}, over the limit of {MAX_BODY_BYTES} bytes"),
    });
    let mut response = (StatusCode::PAYLOAD_TOO_LARGE, Json(body)).into_response();
    if !drained {
        response
            .headers_mut()
            .insert(CONNECTION, HeaderValue::from_static("close"));
    }
    response
}
