//! The flags of OpenTelemetry traces (`TRACING_*`, `OTEL_BSP_*`, `OTEL_EXPORTER_OTLP_*`), and
//! the `TracingSettings` they make, validated before any port opens.

use std::path::PathBuf;

use clap::builder::FalseyValueParser;
use clap::{ArgAction, Args};

use super::{at_least_one, SettingsError};
use crate::otel::{ExporterProtocol, TracingSettings};

/// The tracing flags of `sluice serve`.
#[derive(Debug, Clone, Args)]
pub struct TracingArgs {
    /// Export a span of every decision over OTLP (OpenTelemetry).
    #[arg(long = "tracing-enabled", env = "TRACING_ENABLED", action = ArgAction::SetTrue, value_parser = FalseyValueParser::new())]
    pub enabled: bool,
    /// The spans' service.name.
    #[arg(
        long = "tracing-service-name",
        value_name = "TRACING_SERVICE_NAME",
        env = "TRACING_SERVICE_NAME",
        default_value = "RateLimit"
    )]
    pub service_name: String,
    /// The spans' service.namespace (none when empty).
    #[arg(
        long = "tracing-service-namespace",
        value_name = "TRACING_SERVICE_NAMESPACE",
        env = "TRACING_SERVICE_NAMESPACE",
        default_value = ""
    )]
    pub service_namespace: String,
    /// The spans' service.instance.id (a random UUID when empty).
    #[arg(
        long = "tracing-service-instance-id",
        value_name = "TRACING_SERVICE_INSTANCE_ID",
        env = "TRACING_SERVICE_INSTANCE_ID",
        default_value = ""
    )]
    pub service_instance_id: String,
    /// The share of calls without a sampled caller span that are traced: 1 is every one, 0
    /// none. A caller's sampled flag decides for its calls.
    #[arg(
        long = "tracing-sampling-rate",
        value_name = "TRACING_SAMPLING_RATE",
        env = "TRACING_SAMPLING_RATE",
        default_value_t = 1.0
    )]
    pub sampling_rate: f64,
    /// OTLP over `http` (protobuf, port 4318) or `grpc` (port 4317). The collector's address,
    /// headers and timeout: the standard OTEL_EXPORTER_OTLP_* variables.
    #[arg(
        long = "tracing-exporter-protocol",
        value_name = "TRACING_EXPORTER_PROTOCOL",
        env = "TRACING_EXPORTER_PROTOCOL",
        default_value = "http"
    )]
    pub exporter_protocol: String,
    /// Spans waiting for export at most; past it they are dropped and counted.
    #[arg(
        long = "tracing-max-queue-size",
        value_name = "TRACING_MAX_QUEUE_SIZE",
        env = "OTEL_BSP_MAX_QUEUE_SIZE",
        default_value_t = 2048
    )]
    pub max_queue_size: usize,
    /// Milliseconds between span exports, the first one included (one delay after start).
    #[arg(
        long = "tracing-schedule-delay-ms",
        value_name = "TRACING_SCHEDULE_DELAY_MS",
        env = "OTEL_BSP_SCHEDULE_DELAY",
        default_value_t = 5000
    )]
    pub schedule_delay_ms: u64,
    /// The PEM CA the collector's certificate chains to (an https:// endpoint; default: the
    /// system's roots).
    #[arg(long, env = "OTEL_EXPORTER_OTLP_CERTIFICATE")]
    pub otel_exporter_otlp_certificate: Option<PathBuf>,
    /// The PEM certificate sluice presents to the collector (with the key).
    #[arg(long, env = "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE")]
    pub otel_exporter_otlp_client_certificate: Option<PathBuf>,
    /// The PEM key of that certificate.
    #[arg(long, env = "OTEL_EXPORTER_OTLP_CLIENT_KEY")]
    pub otel_exporter_otlp_client_key: Option<PathBuf>,
}

impl TracingArgs {
    /// The span export, when tracing is on.
    pub(super) fn settings(&self) -> Result<Option<TracingSettings>, SettingsError> {
        if !self.enabled {
            return Ok(None);
        }
        let protocol = ExporterProtocol::parse(&self.exporter_protocol).map_err(|reason| {
            SettingsError::Tracing(format!("TRACING_EXPORTER_PROTOCOL: {reason}"))
        })?;
        if !self.sampling_rate.is_finite() {
            return Err(SettingsError::Tracing(
                "TRACING_SAMPLING_RATE is not a number".into(),
            ));
        }
        let client_certificate =
            match (
                &self.otel_exporter_otlp_client_certificate,
                &self.otel_exporter_otlp_client_key,
            ) {
                (Some(cert), Some(key)) => Some((cert.clone(), key.clone())),
                (None, None) => None,
                _ => return Err(SettingsError::Tracing(
                    "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE and OTEL_EXPORTER_OTLP_CLIENT_KEY go \
                     together"
                        .into(),
                )),
            };
        let endpoint = [
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "OTEL_EXPORTER_OTLP_ENDPOINT",
        ]
        .into_iter()
        .find_map(|name| std::env::var(name).ok().filter(|v| !v.trim().is_empty()));
        Ok(Some(TracingSettings {
            protocol,
            service_name: self.service_name.clone(),
            service_namespace: self.service_namespace.clone(),
            service_instance_id: Some(self.service_instance_id.clone()).filter(|id| !id.is_empty()),
            sampling_rate: self.sampling_rate,
            max_queue_size: at_least_one("--tracing-max-queue-size", self.max_queue_size)?,
            schedule_delay: match self.schedule_delay_ms {
                0 => {
                    return Err(SettingsError::Zero {
                        setting: "--tracing-schedule-delay-ms",
                    })
                }
                ms => std::time::Duration::from_millis(ms),
            },
            ca_certificate: self.otel_exporter_otlp_certificate.clone(),
            client_certificate,
            endpoint,
        }))
    }
}
