//! `sluice check-config`: the same loader as `serve`, run offline, and what it says of each
//! domain and rule (`explain`), as text. The command prints it; tests read it in-process.

mod explain;

use std::fmt::Write;
use std::path::{Path, PathBuf};

pub use explain::explain;
use sluice_config::{self as config, LoadOptions};

/// What `check-config` says: whether everything it was given loads, the report (stdout) and
/// the errors and warnings (stderr).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    pub passed: bool,
    pub out: String,
    pub err: String,
}

/// Loads `paths` as `serve` would, then checks the overrides file, when given, against them.
pub fn check(paths: &[PathBuf], options: LoadOptions, overrides: Option<&Path>) -> Report {
    let mut report = Report::default();
    let config = match config::load(paths, options) {
        Ok(config) => config,
        Err(errors) => {
            let _ = writeln!(report.err, "{errors}");
            return report;
        }
    };
    for warning in config.warnings() {
        let _ = writeln!(report.err, "warning: {warning}");
    }
    if config.domains().is_empty() {
        let _ = writeln!(report.err, "warning: {}", config::NOTHING_LIMITED);
    }
    for domain in config.domains() {
        let files: Vec<String> = domain
            .files
            .iter()
            .map(|f| f.display().to_string())
            .collect();
        let _ = writeln!(
            report.out,
            "domain {}: {} limits ({})",
            domain.name,
            domain.rules().len(),
            files.join(", ")
        );
        for rule in domain.rules() {
            for line in explain(rule) {
                let _ = writeln!(report.out, "  {line}");
            }
        }
        // Limitador's limits of the namespace (docs/kuadrant.md), one line each.
        for limit in &domain.cel_limits {
            let _ = writeln!(report.out, "  Limitador's limit {}", limit.describe());
        }
    }
    report.passed = match overrides {
        Some(path) => check_overrides(path, &config, options, &mut report),
        None => true,
    };
    report
}

/// Checks a file of overrides against `config`: the count in force (never each one), or
/// each refused one with its field; whether all are in force.
fn check_overrides(
    path: &Path,
    config: &config::Config,
    options: LoadOptions,
    report: &mut Report,
) -> bool {
    let docs = match config::overrides::read_file(path) {
        Ok(docs) => docs,
        Err(error) => {
            let _ = writeln!(report.err, "{error}");
            return false;
        }
    };
    match config::overrides::index_of(&docs, config, options) {
        Ok(index) => {
            let _ = writeln!(
                report.out,
                "overrides: {} in force ({})",
                index.len(),
                path.display()
            );
            true
        }
        Err(refused) => {
            for error in refused {
                let _ = writeln!(report.err, "{}: {error}", path.display());
            }
            false
        }
    }
}
