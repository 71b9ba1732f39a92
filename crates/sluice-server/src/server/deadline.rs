//! The client's deadline (`grpc-timeout`, gRPC over HTTP/2): a call still unanswered when it
//! passes is dropped and answered CANCELLED ("Timeout expired"), as tonic's server answers it.
//! A header that does not parse is ignored.

use std::convert::Infallible;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::future::{Either, FutureExt, Map};
use tokio::time::error::Elapsed;
use tokio::time::Timeout;
use tonic::body::Body;
use tonic::codegen::http::{HeaderMap, Request, Response};
use tower::{Layer, Service};

/// The header a gRPC client's deadline comes in.
const GRPC_TIMEOUT: &str = "grpc-timeout";

/// Holds each call to its client's deadline.
#[derive(Clone, Copy, Default)]
pub struct DeadlineLayer;

impl<S> Layer<S> for DeadlineLayer {
    type Service = Deadline<S>;

    fn layer(&self, inner: S) -> Deadline<S> {
        Deadline { inner }
    }
}

/// `inner`, each call held to its client's deadline.
#[derive(Clone)]
pub struct Deadline<S> {
    inner: S,
}

/// What a call answers: its own answer, or CANCELLED when its deadline passes first.
type Answered = Result<Response<Body>, Infallible>;

impl<S> Service<Request<Body>> for Deadline<S>
where
    S: Service<Request<Body>, Response = Response<Body>, Error = Infallible>,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future =
        Either<S::Future, Map<Timeout<S::Future>, fn(Result<Answered, Elapsed>) -> Answered>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let deadline = client_deadline(request.headers());
        let call = self.inner.call(request);
        match deadline {
            None => Either::Left(call),
            Some(deadline) => {
                Either::Right(tokio::time::timeout(deadline, call).map(past_deadline as fn(_) -> _))
            }
        }
    }
}

/// A call's answer, or CANCELLED when its deadline passed first.
fn past_deadline(answer: Result<Answered, Elapsed>) -> Answered {
    answer.unwrap_or_else(|_| Ok(tonic::Status::cancelled("Timeout expired").into_http()))
}

/// The deadline a `grpc-timeout` header gives (up to 8 digits and a unit: H, M, S, m, u, n);
/// `None` without one, or for one that does not parse.
fn client_deadline(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(GRPC_TIMEOUT)?.to_str().ok()?;
    let digits = value.get(..value.len().checked_sub(1)?)?;
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let amount: u64 = digits.parse().ok()?;
    Some(match &value[digits.len()..] {
        "H" => Duration::from_secs(amount * 3600),
        "M" => Duration::from_secs(amount * 60),
        "S" => Duration::from_secs(amount),
        "m" => Duration::from_millis(amount),
        "u" => Duration::from_micros(amount),
        "n" => Duration::from_nanos(amount),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::codegen::http::HeaderValue;

    fn deadline_of(value: &str) -> Option<Duration> {
        let mut headers = HeaderMap::new();
        headers.insert(
            GRPC_TIMEOUT,
            HeaderValue::from_str(value).expect("a header value"),
        );
        client_deadline(&headers)
    }

    #[test]
    fn each_unit_of_grpc_timeout_gives_its_deadline() {
        assert_eq!(deadline_of("2H"), Some(Duration::from_secs(7200)));
        assert_eq!(deadline_of("3M"), Some(Duration::from_secs(180)));
        assert_eq!(deadline_of("4S"), Some(Duration::from_secs(4)));
        assert_eq!(deadline_of("20m"), Some(Duration::from_millis(20)));
        assert_eq!(
            deadline_of("99999999u"),
            Some(Duration::from_micros(99_999_999))
        );
        assert_eq!(deadline_of("5n"), Some(Duration::from_nanos(5)));
    }

    #[test]
    fn a_grpc_timeout_that_does_not_parse_sets_no_deadline() {
        for value in ["", "m", "20", "20x", "123456789m", "-1m", "+1m", "1.5S"] {
            assert_eq!(deadline_of(value), None, "{value:?}");
        }
        assert_eq!(client_deadline(&HeaderMap::new()), None);
    }
}
