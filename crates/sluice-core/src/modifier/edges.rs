//! What a modifier reads of a request and says back at the request's edges, as plain data
//! the limiter and the server write out without naming the modifier: the token entries of a
//! modifier that keeps something per request in flight (`Ticket`), the field it adds to a
//! response's dynamic metadata (`Said`), and the series it records (`SeriesDef`, written by
//! its `Meter` through a `Tally`).

use crate::algorithm::{Decision, Noted};

/// A plain value a unit adds to a response's dynamic metadata (the server writes it as
/// protobuf).
#[derive(Debug, Clone, PartialEq)]
pub enum MetaValue {
    Text(String),
    Number(f64),
    Flag(bool),
}

/// The descriptor entries by which a request speaks to a modifier that keeps something for
/// it while it is in flight (a hold on a budget), and the token the response carries back.
/// Such entries are left out of matching, of overrides and of the key.
#[derive(Debug, Clone, Copy)]
pub struct Ticket {
    /// The entry a descriptor returns its token under (a settle), and the field of the
    /// response's dynamic metadata that gives the token.
    pub key: &'static str,
    /// The entry a descriptor names its own token under when it opens one, if any.
    pub named_key: Option<&'static str>,
    /// The token an entry's value stands for, `None` when it stands for none.
    pub id: fn(&str) -> Option<u64>,
    /// Why an entry under either key is refused when `id` finds no token in it.
    pub refusal: &'static str,
    /// Whether `decision` opened something the token must come back for.
    pub opened: fn(&Decision) -> bool,
    /// What the tools call what it opens, in the plural (`replay` compares a config with
    /// and without them).
    pub noun: &'static str,
}

impl Ticket {
    /// Whether `key` is one of its entries.
    pub fn reads(&self, key: &str) -> bool {
        key == self.key || self.named_key == Some(key)
    }
}

/// A decision of one of a request's limits, as a modifier sees it when it says something in
/// the response: the descriptor's index in the request, the decision, and the name and the
/// shadow mode of the limit that binds the descriptor.
#[derive(Debug, Clone, Copy)]
pub struct Said<'a> {
    pub descriptor: usize,
    pub decision: Decision,
    pub limit_name: &'a str,
    pub shadow_mode: bool,
}

/// What a modifier adds to a response's dynamic metadata: a field and its plain values.
pub type MetaField = (&'static str, Vec<(&'static str, MetaValue)>);

/// What `simulate` marks on a request's line from what a modifier said of it: `{verb} at
/// {time}: {detail}` under the descriptor's chart (`blocked at 7s: offence 1, for 1m`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub descriptor: usize,
    pub verb: &'static str,
    pub detail: String,
}

/// A number among a field's values.
pub fn number_of(values: &[(&'static str, MetaValue)], name: &str) -> Option<f64> {
    values.iter().find_map(|(key, value)| match value {
        MetaValue::Number(n) if *key == name => Some(*n),
        _ => None,
    })
}

/// A flag among a field's values.
pub fn flag_of(values: &[(&'static str, MetaValue)], name: &str) -> Option<bool> {
    values.iter().find_map(|(key, value)| match value {
        MetaValue::Flag(b) if *key == name => Some(*b),
        _ => None,
    })
}

/// A kind of series.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SeriesKind {
    Counter,
    Gauge,
    /// A histogram with these bucket bounds.
    Histogram(&'static [f64]),
}

/// One series a modifier records for each limit that carries it (under the limit's labels,
/// and `label` when given).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SeriesDef {
    pub name: &'static str,
    pub kind: SeriesKind,
    pub label: Option<(&'static str, &'static str)>,
}

/// The series of one limit's modifier, by their place in its `SeriesDef` list.
pub trait Tally {
    /// Adds `n` to a counter.
    fn count(&self, series: usize, n: u64);
    /// Moves a gauge by `change`.
    fn shift(&self, series: usize, change: f64);
    /// Sets a gauge.
    fn set(&self, series: usize, value: f64);
    /// Records a histogram's sample.
    fn observe(&self, series: usize, value: f64);
}

/// What a modifier records of one limit's hits (one per limit, kept by the metrics).
pub trait Meter: Send + Sync {
    /// Records what the modifier `noted` on a hit (`decision`, whose cost was `cost`) at
    /// `now_us` (the metrics' clock).
    fn record(&self, noted: &Noted, decision: &Decision, cost: u64, now_us: u64, tally: &dyn Tally);

    /// Brings what ages (a gauge of blocks in force) up to `now_us`, before the series are
    /// read.
    fn refresh(&self, _now_us: u64, _tally: &dyn Tally) {}
}
