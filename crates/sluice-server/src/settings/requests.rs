//! How requests are answered: the failure mode, shadow and quota modes, the reference's
//! counting (`STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`), the bounds of a request, response
//! headers and dynamic metadata; and the RLQS service's behaviour.

use std::time::Duration;

use clap::builder::{BoolishValueParser, FalseyValueParser};
use clap::{ArgAction, Args};

use super::choices::{DefaultActionChoice, FailureModeChoice, HeaderFormChoice};
use super::{at_least_one, SettingsError};
use crate::rlqs::RlqsSettings;
use sluice_core::duration;
use sluice_core::engine::Charging;
use sluice_limiter::{HeaderNames, LimiterOptions, RequestBounds};

/// The flags of how requests are answered.
#[derive(Debug, Clone, Args)]
pub struct RequestArgs {
    /// What a call gets when the store fails: `unavailable` (gRPC UNAVAILABLE with the reason,
    /// so Envoy's failure_mode_deny decides), `allow` (OK) or `deny` (OVER_LIMIT).
    #[arg(long, env = "SLUICE_FAILURE_MODE", value_enum, default_value_t = FailureModeChoice::Unavailable)]
    pub failure_mode: FailureModeChoice,
    /// Answer OK overall even when a limit is exceeded (descriptor statuses stay truthful).
    #[arg(long, env = "SHADOW_MODE", action = ArgAction::SetTrue, value_parser = FalseyValueParser::new())]
    pub shadow_mode: bool,
    /// Every limit is in quota mode (envoyproxy/ratelimit's `QUOTA_MODE`): a request is over
    /// limit only when every limit it meets is.
    #[arg(long, env = "QUOTA_MODE", action = ArgAction::SetTrue, value_parser = FalseyValueParser::new())]
    pub quota_mode: bool,
    /// A denied request charges none of its limits (envoyproxy/ratelimit's variable; sluice's
    /// default is true, the reference's false: with false, every limit that admits a request
    /// is charged even when another denies it).
    #[arg(long, env = "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", default_value_t = true, action = ArgAction::Set, value_parser = BoolishValueParser::new())]
    pub stop_cache_key_increment_when_overlimit: bool,
    /// Most descriptors one request may carry.
    #[arg(long, env = "SLUICE_MAX_DESCRIPTORS", default_value_t = RequestBounds::default().max_descriptors)]
    pub max_descriptors: usize,
    /// Most entries one descriptor may carry.
    #[arg(long, env = "SLUICE_MAX_ENTRIES", default_value_t = RequestBounds::default().max_entries)]
    pub max_entries: usize,
    /// Longest entry key, in bytes.
    #[arg(long, env = "SLUICE_MAX_KEY_BYTES", default_value_t = RequestBounds::default().max_key_bytes)]
    pub max_key_bytes: usize,
    /// Longest entry value (and domain), in bytes.
    #[arg(long, env = "SLUICE_MAX_VALUE_BYTES", default_value_t = RequestBounds::default().max_value_bytes)]
    pub max_value_bytes: usize,
    /// Add RateLimit-Limit, -Remaining, -Reset (and Retry-After when over) to responses.
    #[arg(long, env = "LIMIT_RESPONSE_HEADERS_ENABLED", action = ArgAction::SetTrue, value_parser = FalseyValueParser::new())]
    pub response_headers: bool,
    /// How RateLimit-Limit is written: `reference` (`10`, as envoyproxy/ratelimit) or
    /// `quota-policy` (`10, 10;w=60`: the window in seconds, as the IETF draft).
    #[arg(long, env = "SLUICE_RESPONSE_HEADERS_FORM", value_enum, default_value_t = HeaderFormChoice::Reference)]
    pub response_headers_form: HeaderFormChoice,
    #[arg(long, env = "LIMIT_LIMIT_HEADER", default_value = "RateLimit-Limit")]
    pub limit_limit_header: String,
    #[arg(
        long,
        env = "LIMIT_REMAINING_HEADER",
        default_value = "RateLimit-Remaining"
    )]
    pub limit_remaining_header: String,
    #[arg(long, env = "LIMIT_RESET_HEADER", default_value = "RateLimit-Reset")]
    pub limit_reset_header: String,
    /// Fill dynamic_metadata with the request and the matched limits' metadata.
    #[arg(long, env = "RESPONSE_DYNAMIC_METADATA", action = ArgAction::SetTrue, value_parser = FalseyValueParser::new())]
    pub response_dynamic_metadata: bool,
    /// RLQS: what a bucket that no rule matches gets (`allow` all or `deny` all).
    #[arg(long, env = "SLUICE_RLQS_DEFAULT_ACTION", value_enum, default_value_t = DefaultActionChoice::Allow)]
    pub rlqs_default_action: DefaultActionChoice,
    /// RLQS: the shortest time-to-live of an assignment (otherwise twice the client's report
    /// interval, at most 10 minutes).
    #[arg(long, env = "SLUICE_RLQS_MIN_ASSIGNMENT_TTL", default_value = "10s", value_parser = duration::parse)]
    pub rlqs_min_assignment_ttl: Duration,
    /// RLQS: a bucket a client has not reported for this long is abandoned.
    #[arg(long, env = "SLUICE_RLQS_ABANDON_AFTER", default_value = "60s", value_parser = duration::parse)]
    pub rlqs_abandon_after: Duration,
    /// RLQS: most buckets one client stream may report.
    #[arg(
        long,
        env = "SLUICE_RLQS_MAX_BUCKETS_PER_STREAM",
        default_value_t = 1000
    )]
    pub rlqs_max_buckets_per_stream: usize,
}

impl RequestArgs {
    /// The service's options; `trace_ratio`: the sampling ratio when traces are exported.
    pub fn service_options(
        &self,
        trace_ratio: Option<f64>,
    ) -> Result<LimiterOptions, SettingsError> {
        let bounds = RequestBounds {
            max_descriptors: at_least_one("--max-descriptors", self.max_descriptors)?,
            max_entries: at_least_one("--max-entries", self.max_entries)?,
            max_key_bytes: at_least_one("--max-key-bytes", self.max_key_bytes)?,
            max_value_bytes: at_least_one("--max-value-bytes", self.max_value_bytes)?,
        };
        Ok(LimiterOptions {
            bounds,
            shadow_mode: self.shadow_mode,
            response_headers: self.response_headers.then(|| HeaderNames {
                limit: self.limit_limit_header.clone(),
                remaining: self.limit_remaining_header.clone(),
                reset: self.limit_reset_header.clone(),
                form: self.response_headers_form.into(),
            }),
            quota_mode: self.quota_mode,
            tracing: trace_ratio,
            response_dynamic_metadata: self.response_dynamic_metadata,
            charging: if self.stop_cache_key_increment_when_overlimit {
                Charging::AllOrNothing
            } else {
                Charging::EveryHit
            },
        })
    }

    /// The RLQS service's behaviour.
    pub fn rlqs(&self) -> Result<RlqsSettings, SettingsError> {
        Ok(RlqsSettings {
            default_action: self.rlqs_default_action.into(),
            min_assignment_ttl: self.rlqs_min_assignment_ttl,
            abandon_after: self.rlqs_abandon_after,
            max_buckets_per_stream: at_least_one(
                "--rlqs-max-buckets-per-stream",
                self.rlqs_max_buckets_per_stream,
            )?,
        })
    }
}
