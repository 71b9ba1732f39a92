//! sluice: a rate limit server for Envoy's RLS v3 API. This package is the binary and the
//! tools that drive the server's library: `simulate` (synthetic traffic through the service on
//! a virtual clock) and `replay` (a recording decided again under another config). The
//! layers live in `crates/` and are re-exported here under the names the tools, tests and
//! benchmarks use:
//!
//! - `sluice_core`: `algorithm`, `duration`, `engine`, `labels`, `limit`, `modifier` (and
//!   `penalty`, its first unit);
//! - `sluice_proto`: `proto` (Envoy's API types);
//! - `sluice_config`: `config`;
//! - `sluice_store`: `store`, `series`;
//! - `sluice_server`: `server`, `service`, `settings`, `http`, `metrics`, `rlqs`, `xds`,
//!   `record`, `lease`, `reserve` (the request's edges of concurrency limits and reserved
//!   budgets), `otel`, `statsd`, `client_tls`.
#![forbid(unsafe_code)]

pub use sluice_config as config;
pub use sluice_core::modifier::penalty;
pub use sluice_core::{algorithm, calendar, duration, engine, labels, limit, modifier};
pub use sluice_proto as proto;
pub use sluice_server::{
    admin, client_tls, http, lease, metrics, otel, record, reserve, rlqs, server, service,
    settings, statsd, xds,
};
pub use sluice_store as store;
pub use sluice_store::series;

pub mod replay;
pub mod simulate;
