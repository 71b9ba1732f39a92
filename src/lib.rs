//! sluice: a rate limit server for Envoy's RLS v3 API.
//!
//! A map of the crate, in the order a request meets it:
//! - `settings`: flags and environment variables -> validated `Settings`, one file per concern.
//! - `server`: the composition root; builds everything (one store value and its RLQS budget,
//!   `server/stores.rs`) and serves once, in named pieces (gRPC, HTTP, drain).
//! - `service`: the gRPC RateLimitService: validate, match, charge, respond.
//! - `http`: `/healthcheck`, `/json`, `/metrics`, `/rlconfig`.
//! - `config`: envoyproxy/ratelimit's YAML, validated and compiled into a descriptor tree.
//! - `limit`: domain types (`Limit`, `Hit`; `Decision`, `Algorithm` and `Counting` come from
//!   `algorithm`).
//! - `engine`: the rules of one request, pure (all-or-nothing, debt, veto, groups, charging).
//! - `labels`: what a limit's metric labels are made of (used by `config` and `metrics`).
//! - `series`: the server's one Prometheus recorder, through which each component writes its
//!   own series; `metrics`: the service's own (calls, limits, store calls, config loads).
//! - `penalty`: blocks, growing at each repeat offence, for clients a limit keeps denying.
//! - `algorithm`: the algorithms as pure functions with their own settings (`params`), and
//!   the registry that lists them.
//! - `store`: the `Store` trait, key layout, the memory store, the Redis store, the local
//!   cache, and `any`, the one store value the server serves with.
//! - `proto`: Envoy's API types, generated from `proto/`.
//! - `simulate`: `sluice simulate`, synthetic traffic through the service on a virtual clock.
//! - `record`: recording decided calls (`serve --record`), in a versioned format;
//!   `replay`: `sluice replay`, a recording decided again under another config, compared.
#![forbid(unsafe_code)]

pub mod algorithm;
pub mod client_tls;
pub mod codec;
pub mod config;
pub mod duration;
pub mod engine;
pub mod http;
pub mod labels;
pub mod lease;
pub mod limit;
pub mod metrics;
pub mod otel;
pub mod penalty;
pub mod proto;
pub mod record;
pub mod replay;
pub mod rlqs;
pub mod series;
pub mod server;
pub mod service;
pub mod settings;
pub mod simulate;
pub mod statsd;
pub mod store;
