//! What sluice tells about itself: logs (`LOG_LEVEL`, `LOG_FORMAT`), the metrics' near-limit
//! ratio and cardinality bound, statsd and DogStatsD (`USE_STATSD`, `USE_DOG_STATSD` and their
//! companions), and OpenTelemetry traces (`traces`).

use std::time::Duration;

use clap::builder::FalseyValueParser;
use clap::{ArgAction, Args, ValueEnum};

use super::traces::TracingArgs;
use super::SettingsError;
use crate::hitters::HittersSettings;
use crate::otel::TracingSettings;
use crate::statsd::{Mogrifier, StatsdSettings};
use sluice_core::duration;

/// The flags of logs, metrics, statsd and traces.
#[derive(Debug, Clone, Args)]
pub struct ObservabilityArgs {
    /// Log level: error, warn, info, debug, trace (or a tracing filter).
    #[arg(long, env = "LOG_LEVEL", default_value = "info")]
    pub log_level: String,
    /// Log format: text or json.
    #[arg(long, env = "LOG_FORMAT", value_enum, ignore_case = true, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Share of a limit past which admitted hits count as near the limit (metrics).
    #[arg(long, env = "NEAR_LIMIT_RATIO", default_value_t = 0.8)]
    pub near_limit_ratio: f64,
    /// Most per-limit metric label sets that carry values from requests (detailed_metric,
    /// value_to_metric, limit overrides); past it they share key1="_overflow_".
    #[arg(long, env = "SLUICE_MAX_METRIC_SERIES", default_value_t = 10_000)]
    pub max_metric_series: usize,
    /// Counters of each heavy-hitter sketch (docs/heavy-hitters.md); 0 turns tracking off. A
    /// count is over the true one by at most the window's hits over this.
    #[arg(long, env = "SLUICE_HEAVY_HITTERS_CAPACITY", default_value_t = 128)]
    pub heavy_hitters_capacity: usize,
    /// Values each heavy-hitter list tells (Prometheus series, dashboard), at most the capacity.
    #[arg(long, env = "SLUICE_HEAVY_HITTERS_TOP", default_value_t = 10)]
    pub heavy_hitters_top: usize,
    /// Limits whose heavy hitters are tracked at most (the first seen).
    #[arg(long, env = "SLUICE_HEAVY_HITTERS_LIMITS", default_value_t = 200)]
    pub heavy_hitters_limits: usize,
    /// Export each limit's top values on /metrics (`sluice_heavy_hitter_*`): values are
    /// tenants' names, and /metrics has no authentication, so this is off unless asked for.
    #[arg(long, env = "SLUICE_HEAVY_HITTERS_METRICS", action = ArgAction::SetTrue, value_parser = FalseyValueParser::new())]
    pub heavy_hitters_metrics: bool,
    /// Send the stats to statsd too, under the reference's names (over TCP, as the reference).
    /// Off by default (the reference's default is on: sluice's metrics are Prometheus first).
    #[arg(long, env = "USE_STATSD", action = ArgAction::SetTrue, value_parser = FalseyValueParser::new())]
    pub use_statsd: bool,
    /// Send the stats to DogStatsD (UDP, with tags) instead of statsd.
    #[arg(long, env = "USE_DOG_STATSD", action = ArgAction::SetTrue, value_parser = FalseyValueParser::new())]
    pub use_dog_statsd: bool,
    /// The statsd or DogStatsD host.
    #[arg(long, env = "STATSD_HOST", default_value = "localhost")]
    pub statsd_host: String,
    /// The statsd or DogStatsD port.
    #[arg(long, env = "STATSD_PORT", default_value_t = 8125)]
    pub statsd_port: u16,
    /// How often stats are sent.
    #[arg(long, env = "STATS_FLUSH_INTERVAL", default_value = "10s", value_parser = duration::parse)]
    pub stats_flush_interval: Duration,
    /// Tags added to every stat: `key:value,key2:value2`.
    #[arg(long, env = "EXTRA_TAGS", default_value = "")]
    pub extra_tags: String,
    /// DogStatsD mogrifiers, by name: each reads DOG_STATSD_MOGRIFIER_<NAME>_PATTERN, _NAME and
    /// _TAGS (docs/metrics.md).
    #[arg(long, env = "USE_DOG_STATSD_MOGRIFIERS", value_delimiter = ',')]
    pub use_dog_statsd_mogrifiers: Vec<String>,
    /// OpenTelemetry traces (`TRACING_ENABLED` and its companions).
    #[command(flatten)]
    pub tracing: TracingArgs,
}

/// `--log-format`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Metrics, statsd and traces, validated (logging is set up before, from the flags).
#[derive(Debug, Clone)]
pub struct ObservabilitySettings {
    pub near_limit_ratio: f64,
    pub max_metric_series: usize,
    /// Who is being limited.
    pub heavy_hitters: HittersSettings,
    /// `USE_STATSD` / `USE_DOG_STATSD`: the statsd sink.
    pub statsd: Option<StatsdSettings>,
    /// `TRACING_ENABLED`: the span export.
    pub tracing: Option<TracingSettings>,
}

impl ObservabilityArgs {
    /// Validates the ratio, the statsd tags and mogrifiers, and the tracing settings.
    pub fn into_settings(self) -> Result<ObservabilitySettings, SettingsError> {
        let near_limit_ratio = self.near_limit_ratio;
        if !(0.0..=1.0).contains(&near_limit_ratio) {
            return Err(SettingsError::Ratio {
                setting: "--near-limit-ratio / NEAR_LIMIT_RATIO",
                value: near_limit_ratio,
            });
        }
        if self.heavy_hitters_capacity > 0 && self.heavy_hitters_top > self.heavy_hitters_capacity {
            return Err(SettingsError::Refused {
                setting: "--heavy-hitters-top / SLUICE_HEAVY_HITTERS_TOP",
                reason: format!(
                    "{} values cannot be told from sketches of {} counters (--heavy-hitters-capacity)",
                    self.heavy_hitters_top, self.heavy_hitters_capacity
                ),
            });
        }
        Ok(ObservabilitySettings {
            near_limit_ratio,
            max_metric_series: self.max_metric_series,
            heavy_hitters: HittersSettings {
                capacity: self.heavy_hitters_capacity,
                top: self.heavy_hitters_top,
                max_limits: self.heavy_hitters_limits,
                exported: self.heavy_hitters_metrics,
            },
            statsd: self.statsd()?,
            tracing: self.tracing.settings()?,
        })
    }

    /// The statsd sink, when asked for.
    fn statsd(&self) -> Result<Option<StatsdSettings>, SettingsError> {
        if !(self.use_statsd || self.use_dog_statsd) {
            return Ok(None);
        }
        Ok(Some(StatsdSettings {
            address: format!("{}:{}", self.statsd_host, self.statsd_port),
            dog: self.use_dog_statsd,
            flush_interval: self.stats_flush_interval.max(Duration::from_millis(10)),
            tags: crate::statsd::parse_tags(&self.extra_tags)
                .map_err(|e| SettingsError::Statsd(format!("EXTRA_TAGS: {e}")))?,
            mogrifiers: self
                .use_dog_statsd_mogrifiers
                .iter()
                .map(|key| key.trim())
                .filter(|key| !key.is_empty())
                .map(|key| Mogrifier::from_vars(key, |name| std::env::var(name).ok()))
                .collect::<Result<_, _>>()
                .map_err(SettingsError::Statsd)?,
        }))
    }
}
