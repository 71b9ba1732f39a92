//! The way in of `ShouldRateLimit`, the call nearly every request to the gRPC port is: it
//! goes straight to its service, ahead of tonic's router. The router (axum's) costs each call
//! a route match, a URL parameter set in the request's extensions, a clone of a boxed service,
//! a boxed future, and the request's and the response's bodies boxed once more; and its
//! futures wait, resumed with the call, for as long as the store takes. Every other path (the
//! RLS's other names, RLQS, Kuadrant's protocol, health, reflection) goes through the router
//! as before, so what each answers is unchanged.

use std::convert::Infallible;
use std::task::{Context, Poll};

use futures_util::future::Either;
use tonic::body::Body;
use tonic::codegen::http::{Request, Response};
use tower::{Layer, Service};

/// The path of `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`.
const SHOULD_RATE_LIMIT: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// Puts `rls` ahead of the service it wraps (the router), for `SHOULD_RATE_LIMIT` alone.
#[derive(Clone)]
pub struct RlsFirstLayer<R> {
    rls: R,
}

impl<R> RlsFirstLayer<R> {
    pub fn new(rls: R) -> Self {
        RlsFirstLayer { rls }
    }
}

impl<R: Clone, S> Layer<S> for RlsFirstLayer<R> {
    type Service = RlsFirst<R, S>;

    fn layer(&self, router: S) -> RlsFirst<R, S> {
        RlsFirst {
            rls: self.rls.clone(),
            router,
        }
    }
}

/// `ShouldRateLimit` to `rls`, everything else to `router`.
#[derive(Clone)]
pub struct RlsFirst<R, S> {
    rls: R,
    router: S,
}

impl<R, S> Service<Request<Body>> for RlsFirst<R, S>
where
    R: Service<Request<Body>, Response = Response<Body>, Error = Infallible>,
    S: Service<Request<Body>, Response = Response<Body>, Error = Infallible>,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Either<R::Future, S::Future>;

    /// Both are always ready (the generated service and tonic's router are), so that the
    /// router's answer stands for both.
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.router.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        if request.uri().path() == SHOULD_RATE_LIMIT {
            Either::Left(self.rls.call(request))
        } else {
            Either::Right(self.router.call(request))
        }
    }
}
