//! The span export pipeline: the OTLP exporter (gRPC or HTTP) and the SDK's batching, on a
//! runtime of their own (one thread), so a slow or absent
//! collector costs the decision path nothing. Spans wait in a bounded queue: past it they are
//! dropped and counted, as are the spans of a batch the collector did not take.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{SpanExporter as OtlpExporter, WithTonicConfig};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, IdGenerator, RandomIdGenerator, Sampler, SdkTracer, SdkTracerProvider,
    Span, SpanData, SpanExporter, SpanProcessor,
};
use opentelemetry_sdk::Resource;

use super::{ExporterProtocol, TracingSettings};
use sluice_store::series::{Reporting, Series};

/// How long the last spans may take to leave when sluice stops.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

/// Why tracing cannot start as asked; sluice then does not start.
#[derive(Debug, thiserror::Error)]
pub enum TracingError {
    #[error("cannot start the span export thread: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("OTLP exporter: {0}")]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
    #[error("cannot read a TLS file: {0}")]
    TlsFile(String),
    #[error("{0}")]
    Unhonourable(String),
}

/// Spans counted on their way out, for `/metrics`. One per process, as the pipeline is.
#[derive(Debug, Default)]
pub struct SpanCounts {
    /// Sampled spans handed to the queue and not yet exported or dropped.
    pending: AtomicU64,
    pub exported: AtomicU64,
    /// Dropped because the queue was full (the collector slower than the spans).
    pub dropped_queue_full: AtomicU64,
    /// Dropped because the collector did not take their batch.
    pub dropped_export_failed: AtomicU64,
    /// Whether the last export failed: its failures are logged when this changes.
    failing: AtomicBool,
}

impl Reporting for SpanCounts {
    /// Spans exported, and dropped by reason.
    fn report(&self, series: &Series) {
        let exported = self.exported.load(Ordering::Relaxed);
        series.total("sluice_trace_spans_exported_total", exported);
        for (reason, count) in [
            ("queue_full", &self.dropped_queue_full),
            ("export_failed", &self.dropped_export_failed),
        ] {
            let labels = vec![metrics::Label::new("reason", reason)];
            series
                .counter("sluice_trace_spans_dropped_total", labels)
                .absolute(count.load(Ordering::Relaxed));
        }
    }
}

/// The process's span counts.
pub fn span_counts() -> &'static SpanCounts {
    static COUNTS: std::sync::OnceLock<SpanCounts> = std::sync::OnceLock::new();
    COUNTS.get_or_init(SpanCounts::default)
}

/// The running export pipeline. `shutdown` sends what is queued; dropping it without that
/// loses the queue but never blocks.
pub struct Export {
    provider: SdkTracerProvider,
    runtime: Option<tokio::runtime::Runtime>,
    /// The first export, one schedule delay after start (`first_export_on_schedule`).
    first_export: tokio::task::JoinHandle<()>,
}

impl Export {
    /// Starts the pipeline as `settings` say. Must not be called on an async runtime.
    pub fn start(settings: &TracingSettings) -> Result<Export, TracingError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("sluice-otlp")
            .enable_all()
            .build()
            .map_err(TracingError::Runtime)?;
        // The exporter's connection and the batching task live on that runtime.
        let entered = runtime.enter();
        let counts = span_counts();
        let exporter = Counted {
            inner: exporter(settings)?,
            counts,
        };
        let batching = BatchConfigBuilder::default()
            .with_max_queue_size(settings.max_queue_size)
            .with_scheduled_delay(settings.schedule_delay)
            .build();
        let batcher = BatchSpanProcessor::builder(exporter, opentelemetry_sdk::runtime::Tokio)
            .with_batch_config(batching)
            .build();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(Bounded {
                inner: batcher,
                capacity: settings.max_queue_size as u64,
                counts,
            })
            // Calls are sampled before their span is made (`spans::request_span`); what
            // reaches the SDK is kept, and the spans beneath follow their parent.
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::AlwaysOn)))
            .with_resource(resource(settings))
            .build();
        let first_export = first_export_on_schedule(&provider, settings.schedule_delay);
        drop(entered);
        Ok(Export {
            provider,
            runtime: Some(runtime),
            first_export,
        })
    }

    /// The tracer the spans of `spans` are made with.
    pub fn tracer(&self) -> SdkTracer {
        self.provider.tracer("sluice")
    }

    /// Sends the queued spans (waiting up to 5 s) and stops. Must not be called on an async
    /// runtime.
    pub fn shutdown(mut self) {
        self.first_export.abort();
        if let Err(error) = self.provider.shutdown_with_timeout(SHUTDOWN_TIMEOUT) {
            tracing::warn!(%error, "spans still queued when sluice stopped are lost");
        }
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_timeout(Duration::from_millis(100));
        }
    }
}

impl Drop for Export {
    fn drop(&mut self) {
        self.first_export.abort();
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// Exports what is queued `delay` after start, on the runtime entered. The SDK's batching
/// task skips the first tick of its interval, which it takes to fire at once, but its
/// interval is a sleep that fires after one delay: left alone, the first export would come
/// at twice the delay (10 s with the default 5 s), and every one after it on schedule.
fn first_export_on_schedule(
    provider: &SdkTracerProvider,
    delay: Duration,
) -> tokio::task::JoinHandle<()> {
    let provider = provider.clone();
    tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        // A flush waits for the batching task, which runs on this runtime's one worker.
        let flushed = tokio::task::spawn_blocking(move || provider.force_flush()).await;
        if let Ok(Err(error)) = flushed {
            tracing::debug!(%error, "the first span export did not complete");
        }
    })
}

/// service.name, service.namespace and service.instance.id, as the reference sets them, over
/// what `OTEL_RESOURCE_ATTRIBUTES` says.
fn resource(settings: &TracingSettings) -> Resource {
    let instance = settings
        .service_instance_id
        .clone()
        .unwrap_or_else(random_uuid);
    let mut attributes = vec![KeyValue::new("service.instance.id", instance)];
    if !settings.service_namespace.is_empty() {
        attributes.push(KeyValue::new(
            "service.namespace",
            settings.service_namespace.clone(),
        ));
    }
    Resource::builder()
        .with_service_name(settings.service_name.clone())
        .with_attributes(attributes)
        .build()
}

/// A version 4 UUID from the SDK's random trace id generator.
fn random_uuid() -> String {
    let bits = u128::from_be_bytes(RandomIdGenerator::default().new_trace_id().to_bytes());
    let bits = (bits & !(0xf << 76) | (0x4 << 76)) & !(0x3 << 62) | (0x2 << 62);
    let hex = format!("{bits:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// The OTLP exporter of `settings.protocol`, with TLS where the endpoint is `https`.
fn exporter(settings: &TracingSettings) -> Result<OtlpExporter, TracingError> {
    let https = settings
        .endpoint
        .as_deref()
        .is_some_and(|e| e.trim_start().to_ascii_lowercase().starts_with("https://"));
    let tls_files = settings.ca_certificate.is_some() || settings.client_certificate.is_some();
    if tls_files && !https {
        return Err(TracingError::Unhonourable(
            "OTEL_EXPORTER_OTLP_CERTIFICATE or a client certificate is set, but the OTLP \
             endpoint is not https://: set OTEL_EXPORTER_OTLP_ENDPOINT to the collector's \
             https:// address"
                .into(),
        ));
    }
    match settings.protocol {
        ExporterProtocol::Http if https => Err(TracingError::Unhonourable(
            "the OTLP endpoint is https://, which the http exporter cannot reach: set \
             TRACING_EXPORTER_PROTOCOL=grpc for TLS to the collector"
                .into(),
        )),
        ExporterProtocol::Http => Ok(OtlpExporter::builder().with_http().build()?),
        ExporterProtocol::Grpc if https => Ok(OtlpExporter::builder()
            .with_tonic()
            .with_tls_config(
                crate::client_tls::client_tls(
                    settings.ca_certificate.as_deref(),
                    settings.client_certificate.as_ref(),
                )
                .map_err(TracingError::TlsFile)?,
            )
            .build()?),
        ExporterProtocol::Grpc => Ok(OtlpExporter::builder().with_tonic().build()?),
    }
}

/// A span processor that keeps at most `capacity` sampled spans waiting: past it a span is
/// dropped and counted instead of queued, so memory stays bounded and the drop is seen.
#[derive(Debug)]
struct Bounded<P> {
    inner: P,
    capacity: u64,
    counts: &'static SpanCounts,
}

impl<P: SpanProcessor> SpanProcessor for Bounded<P> {
    fn on_start(&self, span: &mut Span, cx: &Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        if !span.span_context.is_sampled() {
            return;
        }
        if self.counts.pending.fetch_add(1, Ordering::Relaxed) >= self.capacity {
            self.counts.pending.fetch_sub(1, Ordering::Relaxed);
            self.counts
                .dropped_queue_full
                .fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.inner.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// An exporter that counts what it sent and what the collector did not take, and logs when
/// export starts and stops failing.
#[derive(Debug)]
struct Counted<E> {
    inner: E,
    counts: &'static SpanCounts,
}

impl<E: SpanExporter> SpanExporter for Counted<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let spans = batch.len() as u64;
        let result = self.inner.export(batch).await;
        let counts = self.counts;
        counts.pending.fetch_sub(spans, Ordering::Relaxed);
        let failed = result.is_err();
        match &result {
            Ok(()) => counts.exported.fetch_add(spans, Ordering::Relaxed),
            Err(_) => counts
                .dropped_export_failed
                .fetch_add(spans, Ordering::Relaxed),
        };
        if counts.failing.swap(failed, Ordering::Relaxed) != failed {
            match &result {
                Err(error) => tracing::warn!(%error, "cannot export spans: dropping them"),
                Ok(()) => tracing::info!("spans are exported again"),
            }
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instance_ids_are_version_4_uuids() {
        let id = random_uuid();
        let parts: Vec<&str> = id.split('-').collect();
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12]
        );
        assert!(parts[2].starts_with('4'), "{id}");
        assert!(matches!(&parts[3][..1], "8" | "9" | "a" | "b"), "{id}");
        assert_ne!(random_uuid(), id);
    }
}
