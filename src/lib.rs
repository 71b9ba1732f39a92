//! sluice: a rate limit server for Envoy's RLS v3 API. This package is the binary and the
//! tools that drive the server's library: `check` (`check-config`), `simulate` (synthetic traffic through the service on
//! a virtual clock), `replay` (a recording decided again under another config) and
//! `limitador_cli` (Limitador's command line, which the binary answers to under its name). The layers
//! live in `crates/` and are used under their own names (`sluice_core`, `sluice_proto`,
//! `sluice_config`, `sluice_store`, `sluice_server`): nothing here gives a crate a second name.
#![forbid(unsafe_code)]

pub mod check;
pub mod limitador_cli;
pub mod replay;
pub mod simulate;
