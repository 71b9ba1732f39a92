//! What a reserved budget says outside the store: the token of the holds a request opened,
//! given back in the response and returned by the settle (`TICKET`: the entries
//! `sluice.reserve` and `sluice.hold`), and its series for each limit: calls by kind, holds
//! that lapsed, what is held now, and how far the actual cost was from the estimate
//! (`ReserveMeter`).

use super::{hold_id, Call, Reserved};
use crate::algorithm::{Decision, Noted};
use crate::modifier::{Meter, SeriesDef, SeriesKind, Tally, Ticket};

/// The descriptor entry key of a settle (the token, or the value the request named its hold
/// by), and the dynamic metadata field of the token.
pub const SETTLE_KEY: &str = "sluice.reserve";
/// The descriptor entry key by which a request names its hold itself (a client that cannot
/// carry metadata: the value of its `x-request-id`, sent again under `SETTLE_KEY` at the end).
pub const HOLD_KEY: &str = "sluice.hold";

/// The entries of a hold and its settle, and the token the response gives back.
pub const TICKET: Ticket = Ticket {
    key: SETTLE_KEY,
    named_key: Some(HOLD_KEY),
    id: entry_id,
    refusal: "is empty: a hold is named by a token sluice issued or a value such as x-request-id",
    opened,
};

/// A hold id for a non-empty value.
fn entry_id(value: &str) -> Option<u64> {
    (!value.is_empty()).then(|| hold_id(value))
}

/// Whether `decision` opened a hold (a vetoed request's decisions carry no mark).
fn opened(decision: &Decision) -> bool {
    Reserved::of(decision).is_some_and(|reserved| reserved.call == Call::Opened)
}

/// The histogram of a reserved budget's estimate error.
pub const ESTIMATE_ERROR: &str = "sluice_reserve_estimate_error";

/// Histogram buckets for the estimate error (the actual less the estimate): from 100,000
/// under to 100,000 over.
const ESTIMATE_ERROR_BUCKETS: &[f64] = &[
    -100_000.0, -10_000.0, -1_000.0, -100.0, -10.0, -1.0, 0.0, 1.0, 10.0, 100.0, 1_000.0, 10_000.0,
    100_000.0,
];

/// A counter of calls of one kind.
const fn calls(kind: Call) -> SeriesDef {
    SeriesDef {
        name: "sluice_reserve_calls_total",
        kind: SeriesKind::Counter,
        label: Some(("call", kind.as_str())),
    }
}

/// The series a reserved budget records for its limit, in `Tally` order: the calls by kind
/// first, in `CALLS` order.
pub const SERIES: &[SeriesDef] = &[
    calls(Call::Opened),
    calls(Call::Settled),
    calls(Call::Duplicate),
    calls(Call::Unknown),
    SeriesDef {
        name: "sluice_reserve_lapsed_total",
        kind: SeriesKind::Counter,
        label: None,
    },
    SeriesDef {
        name: "sluice_reserve_held",
        kind: SeriesKind::Gauge,
        label: None,
    },
    SeriesDef {
        name: ESTIMATE_ERROR,
        kind: SeriesKind::Histogram(ESTIMATE_ERROR_BUCKETS),
        label: None,
    },
];
const CALLS: [Call; 4] = [Call::Opened, Call::Settled, Call::Duplicate, Call::Unknown];
const LAPSED: usize = 4;
const HELD: usize = 5;
const ERROR: usize = 6;

/// One reserved budget's series.
pub struct ReserveMeter;

impl Meter for ReserveMeter {
    /// `cost`: the estimate an opening held, or the actual a settle charged.
    fn record(
        &self,
        noted: &Noted,
        _decision: &Decision,
        cost: u64,
        _now_us: u64,
        tally: &dyn Tally,
    ) {
        let Some(reserved) = Reserved::of_noted(noted) else {
            return;
        };
        if let Some(index) = CALLS.iter().position(|call| *call == reserved.call) {
            tally.count(index, 1);
        }
        tally.count(LAPSED, u64::from(reserved.lapsed));
        #[allow(clippy::cast_precision_loss)]
        match reserved.call {
            Call::Opened => tally.shift(HELD, reserved.estimate as f64),
            Call::Settled => tally.shift(HELD, -(reserved.estimate as f64)),
            Call::Duplicate | Call::Unknown => {}
        }
        #[allow(clippy::cast_precision_loss)]
        tally.shift(HELD, -(reserved.lapsed_amount as f64));
        if reserved.call == Call::Settled {
            #[allow(clippy::cast_precision_loss)]
            tally.observe(ERROR, cost as f64 - reserved.estimate as f64);
        }
    }
}
