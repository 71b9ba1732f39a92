#![recursion_limit = "256"]
//! The tests that need the `sluice` binary (or a load tool) as a process: signals, the
//! command line, environment variables, exit codes, the image's entry point. Everything else
//! runs the server in-process (`tests/integration`), with the same harness.

// The harness is the integration tests'; this target uses part of it.
#[allow(dead_code, unused_imports)]
#[path = "../integration/support/mod.rs"]
mod support;

mod cli;
mod deploy;
mod heavy_hitters;
mod lifecycle;
mod limitador_server;
mod load_tools;
mod memory_snapshot;
mod otel_traces;
mod record_replay;
mod regions;
mod startup;
mod statsd;
