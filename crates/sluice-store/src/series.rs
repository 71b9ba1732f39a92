//! The server's one Prometheus recorder, and the seam through which each component writes its
//! own series: request and limit metrics (`metrics`), a store and the local cache (`Store`
//! reports at each scrape), RLQS (`rlqs::report`) and the span export (`otel`). There is no
//! global recorder, so several servers in one process never mix their counts. A component
//! names its series in its own file: adding one touches that file only.

use std::sync::{Arc, Mutex};

use metrics::{Counter, Gauge, Histogram, Key, Label, Metadata, Recorder};
use metrics_exporter_prometheus::{
    Matcher, PrometheusBuilder, PrometheusHandle, PrometheusRecorder,
};

use sluice_core::modifier::{Modifiers, SeriesKind};

static METADATA: Metadata<'static> = Metadata::new("sluice", metrics::Level::INFO, Some("sluice"));

/// Histogram buckets for latencies, in seconds: 50 µs to 1 s.
const LATENCY_BUCKETS: [f64; 14] = [
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
];

/// What a component that keeps its own numbers writes when `/metrics` is scraped.
pub trait Reporting: Send + Sync {
    /// Writes the component's series as of now (gauges set, counters made absolute).
    fn report(&self, series: &Series);
}

impl<T: Reporting + ?Sized> Reporting for &T {
    fn report(&self, series: &Series) {
        (**self).report(series);
    }
}

impl<T: Reporting + ?Sized> Reporting for Arc<T> {
    fn report(&self, series: &Series) {
        (**self).report(series);
    }
}

/// The recorder, and the components that report at each scrape.
pub struct Series {
    recorder: PrometheusRecorder,
    handle: PrometheusHandle,
    reporters: Mutex<Vec<Arc<dyn Reporting>>>,
}

impl Default for Series {
    fn default() -> Self {
        Series::new()
    }
}

impl Series {
    /// A recorder with latency buckets, and the buckets each modifier's histograms give.
    pub fn new() -> Series {
        let builder = PrometheusBuilder::new()
            .set_buckets(&LATENCY_BUCKETS)
            .and_then(|builder| {
                Modifiers::series().try_fold(builder, |builder, series| match series.kind {
                    SeriesKind::Histogram(buckets) => {
                        builder.set_buckets_for_metric(Matcher::Full(series.name.into()), buckets)
                    }
                    SeriesKind::Counter | SeriesKind::Gauge => Ok(builder),
                })
            });
        let recorder = match builder {
            Ok(builder) => builder.build_recorder(),
            // Only an empty bucket list is refused; ours is not, but never fail over it.
            Err(_) => PrometheusBuilder::new().build_recorder(),
        };
        let handle = recorder.handle();
        Series {
            recorder,
            handle,
            reporters: Mutex::new(Vec::new()),
        }
    }

    /// The counter `name` with `labels` (the same name and labels give the same counter).
    pub fn counter(&self, name: &'static str, labels: Vec<Label>) -> Counter {
        self.recorder
            .register_counter(&Key::from_parts(name, labels), &METADATA)
    }

    /// The gauge `name` with `labels`.
    pub fn gauge(&self, name: &'static str, labels: Vec<Label>) -> Gauge {
        self.recorder
            .register_gauge(&Key::from_parts(name, labels), &METADATA)
    }

    /// The histogram `name` with `labels`.
    pub fn histogram(&self, name: &'static str, labels: Vec<Label>) -> Histogram {
        self.recorder
            .register_histogram(&Key::from_parts(name, labels), &METADATA)
    }

    /// Sets the counter `name` (without labels) to `value`, for a component that counts on
    /// its own.
    pub fn total(&self, name: &'static str, value: u64) {
        self.counter(name, Vec::new()).absolute(value);
    }

    /// Sets the gauge `name` (without labels) to `value`.
    pub fn level(&self, name: &'static str, value: u64) {
        self.gauge(name, Vec::new()).set(value as f64);
    }

    /// `reporter` writes its series at every scrape from now on.
    pub fn add_reporter(&self, reporter: Arc<dyn Reporting>) {
        self.reporters
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(reporter);
    }

    /// Folds recorded histogram samples into their buckets. Samples wait in a queue until this
    /// runs, so it must run periodically even when nothing scrapes `/metrics`.
    pub fn upkeep(&self) {
        self.handle.run_upkeep();
    }

    /// The Prometheus text exposition, with every reporter's series as of now.
    pub fn render(&self) -> String {
        let reporters = self
            .reporters
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone();
        for reporter in reporters {
            reporter.report(self);
        }
        self.handle.run_upkeep();
        self.handle.render()
    }
}
