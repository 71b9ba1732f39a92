//! The modifiers' series of one limit: each registry row's `SeriesDef`s under the limit's
//! labels, registered at the row's first note on the limit and written by the row's meter.
//! Nothing here names a modifier.

use std::sync::OnceLock;

use metrics::{Counter, Gauge, Histogram, Label};

use sluice_core::algorithm::{Decision, Mark};
use sluice_core::modifier::{Meter, Modifiers, SeriesDef, SeriesKind, Tally};
use sluice_store::series::Series;

/// One registered series.
enum Handle {
    Counter(Counter),
    Gauge(Gauge),
    Histogram(Histogram),
}

/// One modifier's series on one limit, and its meter.
struct RowSeries {
    handles: Vec<Handle>,
    meter: Box<dyn Meter>,
}

impl RowSeries {
    fn new(series: &Series, labels: &[Label], defs: &[SeriesDef], meter: Box<dyn Meter>) -> Self {
        let handles = defs
            .iter()
            .map(|def| {
                let mut labels = labels.to_vec();
                if let Some((name, value)) = def.label {
                    labels.push(Label::new(name, value));
                }
                match def.kind {
                    SeriesKind::Counter => Handle::Counter(series.counter(def.name, labels)),
                    SeriesKind::Gauge => Handle::Gauge(series.gauge(def.name, labels)),
                    SeriesKind::Histogram(_) => {
                        Handle::Histogram(series.histogram(def.name, labels))
                    }
                }
            })
            .collect();
        RowSeries { handles, meter }
    }
}

impl Tally for RowSeries {
    fn count(&self, series: usize, n: u64) {
        if let Some(Handle::Counter(counter)) = self.handles.get(series) {
            counter.increment(n);
        }
    }

    fn shift(&self, series: usize, change: f64) {
        if let Some(Handle::Gauge(gauge)) = self.handles.get(series) {
            gauge.increment(change);
        }
    }

    fn set(&self, series: usize, value: f64) {
        if let Some(Handle::Gauge(gauge)) = self.handles.get(series) {
            gauge.set(value);
        }
    }

    fn observe(&self, series: usize, value: f64) {
        if let Some(Handle::Histogram(histogram)) = self.handles.get(series) {
            histogram.record(value);
        }
    }
}

/// The modifiers' series of one limit, one slot per registry row (empty for a row that
/// records none, or has not noted anything on the limit yet).
pub(super) struct LimitModifiers {
    rows: Box<[OnceLock<Option<RowSeries>>]>,
}

impl Default for LimitModifiers {
    fn default() -> Self {
        LimitModifiers {
            rows: Modifiers::KEYS.iter().map(|_| OnceLock::new()).collect(),
        }
    }
}

impl LimitModifiers {
    /// Records what a modifier noted on `decision` (a hit of `cost`), at `now_us`; `labels`
    /// gives the limit's labels when its series are first registered.
    pub(super) fn record(
        &self,
        series: &Series,
        labels: impl FnOnce() -> Vec<Label>,
        decision: &Decision,
        cost: u64,
        now_us: u64,
    ) {
        let Mark::Noted(noted) = &decision.mark else {
            return;
        };
        let Some(row) = Modifiers::KEYS.iter().position(|key| *key == noted.by) else {
            return;
        };
        let Some(slot) = self.rows.get(row) else {
            return;
        };
        let row_series = slot.get_or_init(|| {
            let (defs, meter) = Modifiers::meter_of(noted.by)?;
            Some(RowSeries::new(series, &labels(), defs, meter))
        });
        if let Some(row_series) = row_series {
            row_series
                .meter
                .record(noted, decision, cost, now_us, row_series);
        }
    }

    /// Brings what ages in each row's series up to `now_us`.
    pub(super) fn refresh(&self, now_us: u64) {
        for row_series in self.rows.iter().filter_map(|slot| slot.get()?.as_ref()) {
            row_series.meter.refresh(now_us, row_series);
        }
    }
}
