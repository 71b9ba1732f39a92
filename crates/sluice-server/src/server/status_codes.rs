//! The gRPC status of a request that never reached the service: tonic answers a message it
//! cannot decode (invalid UTF-8 in a string, a wrong wire type) with INTERNAL and one over the
//! size limit with OUT_OF_RANGE. Clients and Envoy read those as server faults; they are the
//! caller's: INVALID_ARGUMENT and RESOURCE_EXHAUSTED, as gRPC's status code guide says.

use tonic::codegen::http::{HeaderValue, Response};
use tonic::Code;

/// Rewrites the `grpc-status` of a trailers-only answer tonic made for an undecodable or
/// oversized request; every other answer passes untouched.
pub fn caller_faults<B>(mut response: Response<B>) -> Response<B> {
    let headers = response.headers();
    let (Some(status), Some(message)) = (headers.get("grpc-status"), headers.get("grpc-message"))
    else {
        return response;
    };
    let message = message.to_str().unwrap_or_default();
    let corrected = match status.as_bytes() {
        // tonic's messages, percent-encoded in the header.
        b"13" if message.starts_with("failed%20to%20decode") => Code::InvalidArgument,
        b"11" if message.contains("message%20length%20too%20large") => Code::ResourceExhausted,
        _ => return response,
    };
    response
        .headers_mut()
        .insert("grpc-status", HeaderValue::from(corrected as i32));
    response
}
