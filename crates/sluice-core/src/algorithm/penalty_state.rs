//! What a penalty keeps of a client (`Record`, and `Held`, as a store holds and persists it)
//! and what a decision says of a penalty (`Penalized`): plain state, kept beside the
//! algorithms' states because a store's `State` and every `Decision` carry it. The rules that
//! read and write it are the penalty's (`crate::modifier::penalty`, a modifier above the algorithms,
//! which re-exports these types); nothing here knows them.

use super::persist::{Input, Persist};

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

/// A record as the memory store holds it (one heap block, so that every state stays small).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held(pub Box<Record>);

impl Persist for Held {
    fn put(&self, out: &mut Vec<u8>) {
        let record = &self.0;
        out.extend_from_slice(&record.offences.to_le_bytes());
        for value in [
            record.last_block_ms,
            record.blocked_until_us,
            record.remembered_until_us,
        ] {
            out.extend_from_slice(&value.to_le_bytes());
        }
        record.strikes.put(out);
    }

    fn take(input: &mut Input<'_>) -> Option<Self> {
        Some(Held::from(Record {
            offences: input.u32()?,
            last_block_ms: input.u64()?,
            blocked_until_us: input.u64()?,
            remembered_until_us: input.u64()?,
            strikes: Vec::take(input)?,
        }))
    }
}

impl From<Record> for Held {
    fn from(record: Record) -> Held {
        Held(Box::new(record))
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

impl Record {
    /// Whether the record still reads at `now_us`.
    pub fn remembered(&self, now_us: u64) -> bool {
        self.remembered_until_us > now_us
    }
}
