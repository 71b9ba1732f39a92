#![recursion_limit = "256"]
//! The integration tests, in one crate: the library's server run in this process on
//! listeners the harness binds, and real `redis-server` processes on free ports, called
//! through Envoy's own protos (`envoy-types`). `support` starts them; each module tests one
//! part. What needs the `sluice` binary as a process (signals, the command line, the
//! environment, exit codes, the image) is `tests/process`.

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
mod concurrency;
mod config_compat;
mod dashboard;
mod docs_links;
mod first_hit_windows;
mod grpc_service;
mod grpc_standard_services;
mod grpc_tls;
mod hardening;
mod heavy_hitters;
mod hot_keys;
mod in_process;
mod kuadrant;
mod leases;
mod operations;
mod penalties;
mod redis_deployments;
mod redis_faults;
mod redis_pipelining;
mod redis_refusing_writes;
mod redis_store;
mod reference_cases;
mod regions;
mod response_extras;
mod rlqs;
mod rules;
mod store_contract;
mod tiers;
mod xds;
