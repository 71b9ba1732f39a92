//! The sluice server as a library: the services, metrics, settings and the composition root.
//!
//! A map, in the order a request meets it:
//! - `settings`: flags and environment variables -> validated `Settings`, one file per concern.
//! - `server`: the composition root; builds everything (one store value and its RLQS budget,
//!   `server/stores.rs`) and serves once, in named pieces (gRPC, HTTP, drain), on listeners
//!   its caller may bind (`server::run`).
//! - `service`: the gRPC RateLimitService: validate, match, charge, respond; `lease`: a
//!   lease's token at the request's edges.
//! - `rlqs`: Envoy's Rate Limit Quota Service; `xds`: the configuration from a management
//!   server.
//! - `http`: `/healthcheck`, `/json`, `/metrics`, `/rlconfig`.
//! - `metrics`: the service's own series (calls, limits, store calls, config loads), and
//!   `hitters`: who is being limited (each limit's heaviest values); `statsd`
//!   and `otel`: the exporters.
//! - `record`: recording decided calls (`serve --record`), in a versioned format.
//! - `admin`: the admin API (tenant overrides, reset, credit) on a port of its own, and the
//!   sync that keeps every replica's overrides in step with the store.
//!
//! Below it: `sluice_core` (the rules), `sluice_proto` (Envoy's API), `sluice_config` (the
//! YAML) and `sluice_store` (memory, Redis). Only `server` knows every part.
#![forbid(unsafe_code)]
// The async bodies over `AnyStore` (Redis behind its layers: the local cache in front) are deeper
// than the compiler's default layout query depth.
#![recursion_limit = "256"]

pub mod admin;
pub mod client_tls;
pub mod hitters;
pub mod http;
pub mod kuadrant;
pub mod metrics;
pub mod otel;
pub mod record;
pub mod rlqs;
pub mod server;
pub mod service;
pub mod settings;
pub mod statsd;
pub mod xds;
