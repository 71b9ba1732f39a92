//! Recording decided calls for `sluice replay` (`--record` and its bounds, sampling and
//! hashing): docs/record-replay.md.

use std::path::PathBuf;

use clap::builder::FalseyValueParser;
use clap::{ArgAction, Args};

use super::SettingsError;
use crate::record::format::RecordedOptions;
use crate::record::RecordSettings;
use sluice_core::engine::Charging;
use sluice_limiter::LimiterOptions;

/// The flags of recording.
#[derive(Debug, Clone, Args)]
pub struct RecordArgs {
    /// Record decided calls to this file (JSON Lines, docs/record-replay.md); an
    /// existing file moves to `<file>.1` first.
    #[arg(long, env = "SLUICE_RECORD")]
    pub record: Option<PathBuf>,
    /// The share of clients recorded, 0 to 1: a client's calls (by their descriptors) are kept
    /// or dropped whole.
    #[arg(long, env = "SLUICE_RECORD_SAMPLE", default_value_t = 1.0)]
    pub record_sample: f64,
    /// The file moves to `<file>.1` (replacing an older one) when it would grow past this.
    #[arg(long, env = "SLUICE_RECORD_MAX_BYTES", default_value_t = 256 * 1024 * 1024)]
    pub record_max_bytes: u64,
    /// Write descriptor values as keyed hashes (`#` and 16 hex digits), except the values the
    /// config names (`value: free`) and lease tokens.
    #[arg(long, env = "SLUICE_RECORD_HASH_VALUES", action = ArgAction::SetTrue, value_parser = FalseyValueParser::new())]
    pub record_hash_values: bool,
    /// The hashes' secret, so that recordings of several processes hash alike; without one,
    /// each process hashes under a random key of its own.
    #[arg(long, env = "SLUICE_RECORD_HASH_KEY", hide_env_values = true)]
    pub record_hash_key: Option<String>,
    /// Calls waiting to be written at most; past it a call is dropped and counted
    /// (`sluice_record_dropped_total{reason="queue_full"}`).
    #[arg(long, env = "SLUICE_RECORD_QUEUE", default_value_t = 65_536)]
    pub record_queue: usize,
}

impl RecordArgs {
    /// The recording asked for, with how `service` decides and whether limits take debt by
    /// default (`debt`); `None` without `--record`.
    pub fn into_settings(
        self,
        service: &LimiterOptions,
        debt: bool,
    ) -> Result<Option<RecordSettings>, SettingsError> {
        if self.record_hash_key.is_some() && !self.record_hash_values {
            return Err(SettingsError::Record(
                "--record-hash-key needs --record-hash-values".into(),
            ));
        }
        let Some(path) = self.record else {
            return Ok(None);
        };
        if !(0.0..=1.0).contains(&self.record_sample) {
            return Err(SettingsError::Ratio {
                setting: "--record-sample",
                value: self.record_sample,
            });
        }
        if self.record_max_bytes < 4096 {
            return Err(SettingsError::Record(
                "--record-max-bytes: at least 4096".into(),
            ));
        }
        Ok(Some(RecordSettings {
            path,
            sample: self.record_sample,
            max_bytes: self.record_max_bytes,
            hash_values: self.record_hash_values,
            hash_key: self.record_hash_key,
            queue: super::at_least_one("--record-queue", self.record_queue)?,
            options: RecordedOptions {
                shadow_mode: service.shadow_mode,
                quota_mode: service.quota_mode,
                every_hit: service.charging == Charging::EveryHit,
                debt,
            },
        }))
    }
}
