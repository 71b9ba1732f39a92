//! What a penalty keeps of a client (`Record`, kept beside its limit's state as the part
//! `penalty`) and what a decision notes of a penalty (`Penalized`), with their encodings in
//! a store's `Kept` state and a decision's `Noted` numbers.

use crate::algorithm::persist::{Input, Persist};
use crate::algorithm::{Decision, Kept, Noted};

/// The part of state a penalty keeps: its name, in keys and snapshots.
pub const PART: &str = "penalty";

/// What a penalty remembers of one client.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Record {
    /// Offences while remembered: the blocks imposed.
    pub offences: u32,
    /// The last block's length.
    pub last_block_ms: u64,
    /// When the last block ends (or ended).
    pub blocked_until_us: u64,
    /// When the client is forgotten: the record reads as absent from then on.
    pub remembered_until_us: u64,
    /// The times of the strikes since the last offence, oldest first (at most `after` - 1).
    pub strikes: Vec<u64>,
}

impl Persist for Record {
    fn put(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.offences.to_le_bytes());
        for value in [
            self.last_block_ms,
            self.blocked_until_us,
            self.remembered_until_us,
        ] {
            out.extend_from_slice(&value.to_le_bytes());
        }
        self.strikes.put(out);
    }

    fn take(input: &mut Input<'_>) -> Option<Self> {
        Some(Record {
            offences: input.u32()?,
            last_block_ms: input.u64()?,
            blocked_until_us: input.u64()?,
            remembered_until_us: input.u64()?,
            strikes: Vec::take(input)?,
        })
    }
}

impl Record {
    /// The record kept in `kept`, when it holds one.
    pub fn of_kept(kept: &Kept) -> Option<Record> {
        kept.read()
    }

    /// The record as a store keeps it.
    pub fn kept(&self) -> Kept {
        Kept::of(PART, self)
    }
}

/// What a decision says of a penalty.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Penalized {
    /// The hit was denied by a block ending then (µs, the store's clock); 0: it was not.
    pub until_us: u64,
    /// The block's number among the client's offences while remembered (1: the first).
    pub offence: u32,
    /// This hit's denial imposed the block.
    pub imposed: bool,
}

impl Penalized {
    /// What a penalty noted, as a decision carries it (`until_us`, `offence`, `imposed`);
    /// the note's `by` is the penalty's YAML key.
    pub fn noted(self) -> Noted {
        Noted {
            by: super::KEY,
            values: [
                self.until_us,
                u64::from(self.offence),
                u64::from(self.imposed),
                0,
                0,
            ],
        }
    }

    /// What the penalty did to `decision` (`until_us` 0: nothing).
    pub fn of(decision: &Decision) -> Penalized {
        decision
            .noted(super::KEY)
            .map(|noted| Penalized::of_noted(&noted))
            .unwrap_or_default()
    }

    /// What a penalty noted in `noted`.
    pub fn of_noted(noted: &Noted) -> Penalized {
        let [until_us, offence, imposed, ..] = noted.values;
        Penalized {
            until_us,
            offence: u32::try_from(offence).unwrap_or(u32::MAX),
            imposed: imposed != 0,
        }
    }
}

impl Record {
    /// Whether the record still reads at `now_us`.
    pub fn remembered(&self, now_us: u64) -> bool {
        self.remembered_until_us > now_us
    }
}
