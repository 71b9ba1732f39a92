#![recursion_limit = "256"]
//! The integration tests, in one crate: the real `sluice` binary and real `redis-server`
//! processes on free ports, called through Envoy's own protos (`envoy-types`), and the
//! library's server run in-process. `support` starts them; each module tests one part.

mod support;

mod accounting;
mod admin;
mod admin_clients;
mod admin_counters;
mod algorithm_properties;
mod budget_race;
mod budgets;
mod calendar_windows;
mod circuit_breaker;
mod cli;
mod concurrency;
mod config_compat;
mod deploy;
mod docs_links;
mod grpc_service;
mod grpc_standard_services;
mod grpc_tls;
mod hardening;
mod hot_keys;
mod in_process;
mod leases;
mod load_tools;
mod memory_snapshot;
mod operations;
mod otel_traces;
mod penalties;
mod record_replay;
mod redis_deployments;
mod redis_faults;
mod redis_pipelining;
mod redis_refusing_writes;
mod redis_store;
mod reference_cases;
mod response_extras;
mod rlqs;
mod rules;
mod simulate;
mod statsd;
mod store_contract;
mod xds;
