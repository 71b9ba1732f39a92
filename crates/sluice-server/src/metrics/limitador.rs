//! Limitador's series (docs/kuadrant.md), for the dashboards built on them:
//! `authorized_calls`, `authorized_hits` and `limited_calls` by `limitador_namespace` (and by
//! `limit_name`, the limit that limited, with `--limit-name-in-labels`), `limitador_up`,
//! `datastore_partitioned` (1 while the store fails) and `datastore_latency` (seconds a store
//! call took). Written for Kuadrant's calls, Limitador's HTTP API, and ShouldRateLimit calls
//! in a namespace of Limitador's limits files.

use metrics::{Gauge, Histogram, Label};
use sluice_store::series::Series;

/// What one call got, as Limitador counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallOutcome<'a> {
    /// Admitted; `hits` charged (none for a check).
    Authorized { hits: Option<u64> },
    /// Limited by the limit named `limit_name` ("" for one without a name).
    Limited { limit_name: &'a str },
    /// Charged without a check (a report, a commit).
    Reported { hits: u64 },
}

/// The series' handles and options.
pub struct LimitadorSeries {
    limit_name_in_labels: bool,
    partitioned: Gauge,
    latency: Histogram,
}

impl LimitadorSeries {
    /// Registered at start: `limitador_up` 1, `datastore_partitioned` 0.
    pub fn new(series: &Series) -> LimitadorSeries {
        series.gauge("limitador_up", vec![]).set(1.0);
        let partitioned = series.gauge("datastore_partitioned", vec![]);
        partitioned.set(0.0);
        LimitadorSeries {
            limit_name_in_labels: false,
            partitioned,
            latency: series.histogram("datastore_latency", vec![]),
        }
    }

    /// `limited_calls` also by `limit_name` (`--limit-name-in-labels`).
    pub fn with_limit_name_in_labels(mut self, on: bool) -> LimitadorSeries {
        self.limit_name_in_labels = on;
        self
    }

    /// Whether `limited_calls` carry `limit_name`.
    pub fn names_limits(&self) -> bool {
        self.limit_name_in_labels
    }

    /// Counts a call in `namespace`.
    pub fn record(&self, series: &Series, namespace: &str, outcome: CallOutcome<'_>) {
        let namespace = || vec![Label::new("limitador_namespace", namespace.to_string())];
        match outcome {
            CallOutcome::Authorized { hits } => {
                series.counter("authorized_calls", namespace()).increment(1);
                if let Some(hits) = hits {
                    series
                        .counter("authorized_hits", namespace())
                        .increment(hits);
                }
            }
            CallOutcome::Limited { limit_name } => {
                let mut labels = namespace();
                if self.limit_name_in_labels {
                    labels.push(Label::new("limit_name", limit_name.to_string()));
                }
                series.counter("limited_calls", labels).increment(1);
            }
            CallOutcome::Reported { hits } => {
                series
                    .counter("authorized_hits", namespace())
                    .increment(hits);
            }
        }
    }

    /// The store answered in `seconds`.
    pub fn store_answered(&self, seconds: f64) {
        self.latency.record(seconds);
        self.partitioned.set(0.0);
    }

    /// The store failed.
    pub fn store_failed(&self) {
        self.partitioned.set(1.0);
    }
}
