//! One reserved budget's series (docs/budgets.md): holds opened, settles by kind (settled,
//! duplicate, unknown), holds found lapsed, what the rule's keys hold (opened less settled and
//! lapsed, as this replica saw them), and the estimate's error (the actual less the estimate
//! of the hold a settle dropped).

use metrics::{Counter, Gauge, Histogram, Label};

use sluice_core::modifier::reserve::{Call, Reserved};
use sluice_store::series::{Series, ESTIMATE_ERROR};

/// The series of one reserved budget.
pub(super) struct ReserveCounters {
    /// By `Call`, in its order: opened, settled, duplicate, unknown.
    calls: [Counter; 4],
    lapsed: Counter,
    held: Gauge,
    error: Histogram,
}

impl ReserveCounters {
    /// The series under `labels`.
    pub(super) fn new(series: &Series, labels: &[Label]) -> ReserveCounters {
        let call = |name: &'static str| {
            let mut labels = labels.to_vec();
            labels.push(Label::new("call", name));
            series.counter("sluice_reserve_calls_total", labels)
        };
        ReserveCounters {
            calls: [
                call(Call::Opened.as_str()),
                call(Call::Settled.as_str()),
                call(Call::Duplicate.as_str()),
                call(Call::Unknown.as_str()),
            ],
            lapsed: series.counter("sluice_reserve_lapsed_total", labels.to_vec()),
            held: series.gauge("sluice_reserve_held", labels.to_vec()),
            error: series.histogram(ESTIMATE_ERROR, labels.to_vec()),
        }
    }

    /// One call of the budget; `cost`: the estimate of an opening, the actual of a settle.
    pub(super) fn record(&self, reserved: &Reserved, cost: u64) {
        let index = match reserved.call {
            Call::Opened => 0,
            Call::Settled => 1,
            Call::Duplicate => 2,
            Call::Unknown => 3,
        };
        self.calls[index].increment(1);
        self.lapsed.increment(u64::from(reserved.lapsed));
        // What this replica's calls took into holds and out of them: summed over replicas,
        // what the rule's keys hold.
        #[allow(clippy::cast_precision_loss)]
        match reserved.call {
            Call::Opened => self.held.increment(reserved.estimate as f64),
            Call::Settled => self.held.decrement(reserved.estimate as f64),
            Call::Duplicate | Call::Unknown => {}
        }
        #[allow(clippy::cast_precision_loss)]
        self.held.decrement(reserved.lapsed_amount as f64);
        if reserved.call == Call::Settled {
            #[allow(clippy::cast_precision_loss)]
            self.error.record(cost as f64 - reserved.estimate as f64);
        }
    }
}
