//! OpenTelemetry traces (`TRACING_ENABLED`): the export pipeline started once per process
//! (`export`) and the spans of a decision (`spans`). Off, nothing here runs: the spans' target
//! is disabled, so their call sites cost one cached check.

pub mod export;
pub mod spans;

pub use export::{span_counts, Export, SpanCounts, TracingError};

/// How spans leave the process (`TRACING_EXPORTER_PROTOCOL`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExporterProtocol {
    /// OTLP over gRPC (port 4317 by default).
    Grpc,
    /// OTLP over HTTP with protobuf bodies (port 4318 by default): the reference's default.
    Http,
}

impl ExporterProtocol {
    /// The reference's values: `grpc`, or `http` (also when empty).
    pub fn parse(text: &str) -> Result<ExporterProtocol, String> {
        match text.to_ascii_lowercase().as_str() {
            "grpc" => Ok(ExporterProtocol::Grpc),
            "http" | "" => Ok(ExporterProtocol::Http),
            _ => Err(format!("'{text}' is not grpc or http")),
        }
    }
}

/// What `TRACING_*` and the TLS files of `OTEL_EXPORTER_OTLP_*` ask for. The endpoint, headers,
/// timeout and compression come from the standard `OTEL_EXPORTER_OTLP_*` variables, read by the
/// exporter itself.
#[derive(Debug, Clone)]
pub struct TracingSettings {
    pub protocol: ExporterProtocol,
    pub service_name: String,
    pub service_namespace: String,
    /// A random UUID when not given, as the reference.
    pub service_instance_id: Option<String>,
    /// The share of root spans kept; a caller's sampled flag decides for its children.
    pub sampling_rate: f64,
    /// Spans waiting for export at most; past it they are dropped and counted.
    pub max_queue_size: usize,
    /// `OTEL_BSP_SCHEDULE_DELAY`: the time between exports, the first one included.
    pub schedule_delay: std::time::Duration,
    /// `OTEL_EXPORTER_OTLP_CERTIFICATE`: the CA the collector's certificate chains to.
    pub ca_certificate: Option<std::path::PathBuf>,
    /// `OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE` and `..._CLIENT_KEY`: sluice's certificate.
    pub client_certificate: Option<(std::path::PathBuf, std::path::PathBuf)>,
    /// The collector's address, from `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` (the exporter's default when neither is set).
    pub endpoint: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_protocol_takes_the_references_values() {
        assert_eq!(ExporterProtocol::parse("grpc"), Ok(ExporterProtocol::Grpc));
        assert_eq!(ExporterProtocol::parse("HTTP"), Ok(ExporterProtocol::Http));
        assert_eq!(ExporterProtocol::parse(""), Ok(ExporterProtocol::Http));
        assert!(ExporterProtocol::parse("thrift").is_err());
    }
}
