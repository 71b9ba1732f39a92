//! What a reserved budget keeps beside its limit (`Holds`: the estimates held for requests in
//! flight, the part `holds`; `SettleMark`: a settled token's mark, the part `settled`, one key
//! per token) and what a decision notes of it (`Reserved`), with their encodings in a store's
//! `Kept` state and a decision's `Noted` numbers; and what it says outside the store: the
//! token of the holds a request opened, given back in the response and returned by the
//! settle (`TICKET`: the entries `sluice.reserve` and `sluice.hold`), and its series for each
//! limit (calls by kind, holds that lapsed, what is held now, how far the actual cost was
//! from the estimate: `ReserveMeter`).

use super::hold_id;
use crate::algorithm::persist::{put_count, Input, Persist};
use crate::algorithm::{Decision, Kept, Noted};
use crate::modifier::{Meter, SeriesDef, SeriesKind, Tally, Ticket};

/// The part of state that holds a budget's holds.
pub const HOLDS: &str = "holds";
/// The part of state that marks a settled token (one key per token).
pub const SETTLED: &str = "settled";

/// One estimate held for a request in flight, under its token, until it is settled or lapses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hold {
    pub token: u64,
    pub amount: u64,
    /// When it lapses (µs): the earlier of `max_hold` after it was taken and its window's end.
    pub expires_us: u64,
}

/// The holds of one limit's key, in the order they were taken (lapsed ones until a write
/// drops them).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Holds(pub Vec<Hold>);

impl Holds {
    /// The holds still live at `now_us`, and how many had lapsed, holding how much.
    pub fn live(&self, now_us: u64) -> (Holds, u32, u64) {
        let live: Vec<Hold> = self
            .0
            .iter()
            .copied()
            .filter(|hold| hold.expires_us > now_us)
            .collect();
        let lapsed = u32::try_from(self.0.len() - live.len()).unwrap_or(u32::MAX);
        let amount = self.total().saturating_sub(Holds(live.clone()).total());
        (Holds(live), lapsed, amount)
    }

    /// What the holds hold together.
    pub fn total(&self) -> u64 {
        self.0
            .iter()
            .fold(0u64, |sum, hold| sum.saturating_add(hold.amount))
    }

    /// When the last hold lapses: the state matters until then.
    pub fn expires_at_us(&self) -> u64 {
        self.0.iter().map(|hold| hold.expires_us).max().unwrap_or(0)
    }

    /// Takes out the hold of `token`, if there is one.
    pub fn take(&mut self, token: u64) -> Option<Hold> {
        let at = self.0.iter().position(|hold| hold.token == token)?;
        Some(self.0.remove(at))
    }
}

impl Persist for Holds {
    fn put(&self, out: &mut Vec<u8>) {
        put_count(out, self.0.len());
        for hold in &self.0 {
            for value in [hold.token, hold.amount, hold.expires_us] {
                out.extend_from_slice(&value.to_le_bytes());
            }
        }
    }

    fn take(input: &mut Input<'_>) -> Option<Self> {
        let count = input.count(24)?;
        let holds = (0..count)
            .map(|_| {
                Some(Hold {
                    token: input.u64()?,
                    amount: input.u64()?,
                    expires_us: input.u64()?,
                })
            })
            .collect::<Option<Vec<Hold>>>()?;
        Some(Holds(holds))
    }
}

/// A token that was settled, remembered so that a second settle charges nothing more: what the
/// first one charged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SettleMark(pub u64);

impl Persist for SettleMark {
    fn put(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.0.to_le_bytes());
    }

    fn take(input: &mut Input<'_>) -> Option<Self> {
        input.u64().map(SettleMark)
    }
}

impl Holds {
    /// The holds kept in `kept`, when it holds them.
    pub fn of_kept(kept: &Kept) -> Option<Holds> {
        kept.read()
    }
}

impl SettleMark {
    /// The mark kept in `kept`, when it holds one.
    pub fn of_kept(kept: &Kept) -> Option<SettleMark> {
        kept.read()
    }
}

/// What a call on a reserved budget was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    /// A request's estimate was held.
    Opened,
    /// A hold was settled: dropped, and the actual cost charged.
    Settled,
    /// The token was settled before: nothing more was charged.
    Duplicate,
    /// No hold had the token (it lapsed, or was never taken here): the actual cost was
    /// charged once, nothing freed.
    Unknown,
}

impl Call {
    /// The call's number in a Redis script's reply (0: none).
    pub fn number(self) -> i64 {
        match self {
            Call::Opened => 1,
            Call::Settled => 2,
            Call::Duplicate => 3,
            Call::Unknown => 4,
        }
    }

    /// The call of a reply's number.
    pub fn of_number(number: i64) -> Option<Call> {
        [Call::Opened, Call::Settled, Call::Duplicate, Call::Unknown]
            .into_iter()
            .find(|call| call.number() == number)
    }

    /// The name in metrics and metadata.
    pub const fn as_str(self) -> &'static str {
        match self {
            Call::Opened => "opened",
            Call::Settled => "settled",
            Call::Duplicate => "duplicate",
            Call::Unknown => "unknown",
        }
    }
}

/// What a decision says of a reserved budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reserved {
    pub call: Call,
    /// What the key's holds hold after the call.
    pub held: u64,
    /// The estimate: held by an opening, or held by the hold a settle dropped (0 when the
    /// token had none).
    pub estimate: u64,
    /// Holds found lapsed and dropped by this call, and what they held.
    pub lapsed: u32,
    pub lapsed_amount: u64,
}

impl Reserved {
    /// What a reservation noted, as a decision carries it; the note's `by` is the
    /// reservation's YAML key.
    pub fn noted(self) -> Noted {
        Noted {
            by: super::KEY,
            values: [
                u64::try_from(self.call.number()).unwrap_or(0),
                self.held,
                self.estimate,
                u64::from(self.lapsed),
                self.lapsed_amount,
            ],
        }
    }

    /// What the reservation did on `decision`, if it did something.
    pub fn of(decision: &Decision) -> Option<Reserved> {
        Reserved::of_noted(&decision.noted(super::KEY)?)
    }

    /// What a reservation noted in `noted`, if it holds a call.
    pub fn of_noted(noted: &Noted) -> Option<Reserved> {
        let [call, held, estimate, lapsed, lapsed_amount] = noted.values;
        Some(Reserved {
            call: Call::of_number(i64::try_from(call).ok()?)?,
            held,
            estimate,
            lapsed: u32::try_from(lapsed).unwrap_or(u32::MAX),
            lapsed_amount,
        })
    }
}

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
    noun: "reservations",
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
