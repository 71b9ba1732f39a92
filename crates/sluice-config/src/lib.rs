//! Configuration: envoyproxy/ratelimit's YAML format (`file`), its validation and compilation
//! into a descriptor tree (`compile`, `tree`, with the wildcard index `wildcards`), Limitador's
//! limits files in CEL (`cel_limits`), file
//! discovery and loading (`load`), tenant overrides put by the admin API (`overrides`), and errors that name file, line and column (`error`,
//! `position`), and hot reload (`watch`). Knows no store and no gRPC.

mod bounds;
pub mod cel_limits;
mod cel_shortcut;
mod compile;
mod error;
mod file;
pub mod in_force;
mod load;
mod metadata;
pub mod overrides;
mod pattern;
mod position;
mod resource;
mod tree;
mod watch;
mod wildcards;

pub use error::{ConfigError, ConfigErrors, FileError};
pub use load::{load, load_docs_of, load_str, with_source, LoadOptions};
pub use sluice_core::labels::MatchedLevel;
pub use tree::{Config, Domain, Match, NamedLimit, RlqsStrategy, Rule, NOTHING_LIMITED};
pub use watch::{ReloadResult, Reloader};
