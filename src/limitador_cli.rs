//! Limitador's command line (`limitador-server [OPTIONS] LIMITS_FILE [STORAGE]`), the one
//! limitador-operator's Deployment runs: the `sluice` binary answers to it when it is run
//! under the name `limitador-server` (docs/kuadrant.md). Each option and environment variable
//! becomes the `sluice serve` flag of the same meaning; what sluice cannot honour is refused
//! with the reason.

use std::path::PathBuf;

use clap::{ArgAction, Parser, Subcommand};

/// The name the binary answers to with Limitador's command line.
pub const NAME: &str = "limitador-server";

/// Limitador's options.
#[derive(Debug, Parser)]
#[command(
    name = "limitador-server",
    version,
    about = "sluice, answering to Limitador's command line"
)]
pub struct LimitadorCli {
    /// The limits file (Limitador's YAML), watched for changes.
    #[arg(env = "LIMITS_FILE")]
    limits_file: PathBuf,
    #[arg(
        short = 'b',
        long = "rls-ip",
        env = "ENVOY_RLS_HOST",
        default_value = "0.0.0.0"
    )]
    rls_ip: String,
    #[arg(
        short = 'p',
        long = "rls-port",
        env = "ENVOY_RLS_PORT",
        default_value_t = 8081
    )]
    rls_port: u16,
    #[arg(
        short = 'B',
        long = "http-ip",
        env = "HTTP_API_HOST",
        default_value = "0.0.0.0"
    )]
    http_ip: String,
    #[arg(
        short = 'P',
        long = "http-port",
        env = "HTTP_API_PORT",
        default_value_t = 8080
    )]
    http_port: u16,
    /// Limitador's `limited_calls` by `limit_name` too.
    #[arg(short = 'l', long = "limit-name-in-labels", env = "LIMIT_NAME_IN_PROMETHEUS_LABELS", action = ArgAction::SetTrue)]
    limit_name_in_labels: bool,
    /// Refused: sluice adds no labels of its own choosing to its series.
    #[arg(long = "custom-metric-labels")]
    custom_metric_labels: Option<String>,
    /// Refused with `--custom-metric-labels`.
    #[arg(long = "metric-labels-default")]
    metric_labels_default: Option<String>,
    /// Refused: sluice exports traces by OTLP (`TRACING_ENABLED`, `OTEL_EXPORTER_OTLP_*`).
    #[arg(
        long = "tracing-endpoint",
        env = "TRACING_ENDPOINT",
        default_value = ""
    )]
    tracing_endpoint: String,
    /// More logs: -v info, -vv debug, -vvv and -vvvv trace (warnings alone without it).
    #[arg(short = 'v', action = ArgAction::Count)]
    verbosity: u8,
    /// Logs as JSON.
    #[arg(long = "structured-logs", action = ArgAction::SetTrue)]
    structured_logs: bool,
    /// Checks the limits file and exits (0 when it loads).
    #[arg(long = "validate", action = ArgAction::SetTrue)]
    validate: bool,
    /// `NONE`, or `DRAFT_VERSION_03`: X-RateLimit-Limit (`10, 10;w=60`), -Remaining, -Reset.
    #[arg(long = "rate-limit-headers", env = "RATE_LIMIT_HEADERS", default_value = "NONE",
          value_parser = ["NONE", "DRAFT_VERSION_03"])]
    rate_limit_headers: String,
    /// Accepted: sluice always serves gRPC reflection.
    #[arg(long = "grpc-reflection-service", action = ArgAction::SetTrue)]
    grpc_reflection_service: bool,
    #[arg(long = "disable-reservations", action = ArgAction::SetTrue)]
    disable_reservations: bool,
    #[arg(long = "max-reservation-fraction")]
    max_reservation_fraction: Option<String>,
    #[arg(long = "max-reservation-ttl")]
    max_reservation_ttl: Option<String>,
    #[command(subcommand)]
    storage: Option<Storage>,
}

/// Where Limitador keeps its counters.
#[derive(Debug, Subcommand)]
enum Storage {
    /// sluice's memory store (the default).
    Memory {
        /// Accepted: the memory store is bounded by its own settings.
        #[arg(long = "cache")]
        cache: Option<u64>,
    },
    /// The memory store, snapshotted to PATH at shutdown and read back at start.
    Disk {
        #[arg(env = "DISK_PATH")]
        path: PathBuf,
        #[arg(long = "optimize", default_value = "throughput", value_parser = ["throughput", "disk"])]
        optimize: String,
    },
    /// sluice's Redis store.
    Redis {
        #[arg(env = "REDIS_URL")]
        url: String,
    },
    /// sluice's Redis store with budget leasing on the limits file's limits; the flush period
    /// is how long an unspent chunk is kept; Limitador's other batching options are accepted
    /// and have no counterpart.
    #[command(name = "redis_cached")]
    RedisCached {
        #[arg(env = "REDIS_URL")]
        url: String,
        #[arg(long = "batch-size")]
        batch_size: Option<usize>,
        #[arg(long = "flush-period")]
        flush_period: Option<i64>,
        #[arg(long = "max-cached")]
        max_cached: Option<usize>,
        #[arg(long = "response-timeout")]
        response_timeout: Option<u64>,
    },
}

/// What the command line asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum Asked {
    /// `sluice serve` with these flags.
    Serve(Vec<String>),
    /// `sluice check-config` of this file.
    Validate(PathBuf),
}

impl LimitadorCli {
    /// The `sluice` command this command line is, or why it cannot be honoured.
    pub fn translate(self) -> Result<Asked, String> {
        if self.custom_metric_labels.is_some() || self.metric_labels_default.is_some() {
            return Err(
                "--custom-metric-labels and --metric-labels-default are not served: \
                        sluice's series carry their own labels (docs/metrics.md)"
                    .into(),
            );
        }
        if !self.tracing_endpoint.is_empty() {
            return Err(
                "--tracing-endpoint is not served: set TRACING_ENABLED=true and \
                        OTEL_EXPORTER_OTLP_ENDPOINT (docs/metrics.md)"
                    .into(),
            );
        }
        let config = self.limits_file.display().to_string();
        if self.validate {
            return Ok(Asked::Validate(self.limits_file));
        }
        let mut flags = vec![
            "--config".to_string(),
            config,
            "--grpc-addr".into(),
            address(&self.rls_ip, self.rls_port),
            "--http-addr".into(),
            address(&self.http_ip, self.http_port),
            "--log-level".into(),
            log_level(self.verbosity).into(),
        ];
        if self.structured_logs {
            flags.extend(["--log-format".into(), "json".into()]);
        }
        if self.rate_limit_headers == "DRAFT_VERSION_03" {
            // Limitador's names, and the draft's form of the limit (`10, 10;w=60`).
            flags.extend(
                [
                    "--response-headers",
                    "--response-headers-form",
                    "quota-policy",
                    "--limit-limit-header",
                    "X-RateLimit-Limit",
                    "--limit-remaining-header",
                    "X-RateLimit-Remaining",
                    "--limit-reset-header",
                    "X-RateLimit-Reset",
                ]
                .map(String::from),
            );
        }
        if self.limit_name_in_labels {
            flags.push("--limit-name-in-labels".into());
        }
        if self.disable_reservations {
            flags.push("--disable-reservations".into());
        }
        if let Some(fraction) = self.max_reservation_fraction {
            flags.extend(["--max-reservation-fraction".into(), fraction]);
        }
        if let Some(ttl) = self.max_reservation_ttl {
            flags.extend(["--max-reservation-ttl".into(), ttl]);
        }
        flags.extend(storage_flags(self.storage));
        Ok(Asked::Serve(flags))
    }
}

/// `ip:port`, with an IPv6 address in brackets.
fn address(ip: &str, port: u16) -> String {
    if ip.contains(':') && !ip.starts_with('[') {
        format!("[{ip}]:{port}")
    } else {
        format!("{ip}:{port}")
    }
}

/// Limitador's `-v` count as a log level.
fn log_level(verbosity: u8) -> &'static str {
    match verbosity {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    }
}

fn storage_flags(storage: Option<Storage>) -> Vec<String> {
    match storage {
        None | Some(Storage::Memory { .. }) => vec!["--store".into(), "memory".into()],
        Some(Storage::Disk { path, .. }) => vec![
            "--store".into(),
            "memory".into(),
            "--memory-snapshot".into(),
            path.display().to_string(),
        ],
        Some(Storage::Redis { url }) => {
            vec!["--store".into(), "redis".into(), "--redis-url".into(), url]
        }
        // Counted ahead on each replica, as Limitador's cache counts, but within a bound:
        // budget leasing, unspent chunks given back after the flush period (at most a minute,
        // leasing's longest hold).
        Some(Storage::RedisCached {
            url, flush_period, ..
        }) => {
            let hold_ms = flush_period
                .filter(|ms| *ms > 0)
                .unwrap_or(1000)
                .min(60_000);
            vec![
                "--store".into(),
                "redis".into(),
                "--redis-url".into(),
                url,
                "--limits-file-leasing".into(),
                LEASED_CHUNK.to_string(),
                "--limits-file-leasing-max-hold".into(),
                format!("{hold_ms}ms"),
            ]
        }
    }
}

/// The most a replica leases of a limit at once under `redis_cached` (and a tenth of the
/// limit): what leasing may deny while budget remains is at most replicas times this.
const LEASED_CHUNK: u32 = 100;

#[cfg(test)]
mod tests {
    use super::*;

    fn asked(args: &[&str]) -> Result<Asked, String> {
        let mut all = vec![NAME];
        all.extend_from_slice(args);
        LimitadorCli::try_parse_from(all)
            .map_err(|e| e.to_string())?
            .translate()
    }

    fn serve(args: &[&str]) -> Vec<String> {
        match asked(args) {
            Ok(Asked::Serve(flags)) => flags,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_operators_command_line_serves_its_ports_file_and_store() {
        let flags = serve(&[
            "--rls-port",
            "9081",
            "-vv",
            "/etc/limits.yaml",
            "redis",
            "redis://r:6379",
        ]);
        let expected = [
            "--config",
            "/etc/limits.yaml",
            "--grpc-addr",
            "0.0.0.0:9081",
            "--http-addr",
            "0.0.0.0:8080",
            "--log-level",
            "debug",
            "--store",
            "redis",
            "--redis-url",
            "redis://r:6379",
        ];
        assert_eq!(flags, expected);
        let disk = serve(&["l.yaml", "disk", "/var/counters"]);
        assert!(disk.ends_with(&["--memory-snapshot".into(), "/var/counters".into()]));
        let cached = serve(&["l.yaml", "redis_cached", "redis://r", "--batch-size", "10"]);
        let leased = [
            "--redis-url",
            "redis://r",
            "--limits-file-leasing",
            "100",
            "--limits-file-leasing-max-hold",
            "1000ms",
        ];
        assert!(cached.ends_with(&leased.map(String::from)), "{cached:?}");
        let flushed = serve(&[
            "l.yaml",
            "redis_cached",
            "redis://r",
            "--flush-period",
            "250",
        ]);
        assert!(flushed.ends_with(&["250ms".into()]), "{flushed:?}");
        let headers = serve(&[
            "--rate-limit-headers",
            "DRAFT_VERSION_03",
            "--http-ip",
            "::",
            "l.yaml",
        ]);
        assert!(headers.contains(&"[::]:8080".to_string()), "{headers:?}");
        assert!(headers.contains(&"quota-policy".to_string()), "{headers:?}");
    }

    #[test]
    fn validate_checks_and_what_cannot_be_honoured_is_refused() {
        assert_eq!(
            asked(&["--validate", "l.yaml"]),
            Ok(Asked::Validate("l.yaml".into()))
        );
        let refused = asked(&["--custom-metric-labels", "x", "l.yaml"]).unwrap_err();
        assert!(refused.contains("--custom-metric-labels"), "{refused}");
        let refused = asked(&["--tracing-endpoint", "rpc://c:4317", "l.yaml"]).unwrap_err();
        assert!(refused.contains("OTEL_EXPORTER_OTLP_ENDPOINT"), "{refused}");
        assert!(asked(&["--rate-limit-headers", "DRAFT_VERSION_99", "l.yaml"]).is_err());
    }
}
