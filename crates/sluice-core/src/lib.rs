//! sluice's rules, pure and clockless: what a limit is and how one request is decided. No I/O
//! crate and no clock: every function takes the time it decides at.
//!
//! - `limit`: the domain types (`Limit`, `Hit`, `Decision`, `Unit`).
//! - `algorithm`: the algorithms as pure functions with their own settings (`params`), and
//!   the registry that lists them; `modifier`: what changes how a limit decides (registry).
//! - `identity`: what names a descriptor's counter, whatever the store.
//! - `engine`: the rules of one request (all-or-nothing, debt, veto, groups, charging).
//! - `lease`: the tokens of leases; `share`: a limit divided max-min fairly.
//! - `labels`: what a limit's metric labels are made of; `duration`: `10s`, `5m`, ...;
//!   `calendar`: billing periods (day, week, month, year) in an IANA time zone; `keyed_id`: a
//!   128-bit keyed hash as a map key.
#![forbid(unsafe_code)]

pub mod algorithm;
pub mod calendar;
pub mod duration;
pub mod engine;
pub mod identity;
pub mod keyed_id;
pub mod labels;
pub mod lease;
pub mod limit;
pub mod modifier;
pub mod share;
