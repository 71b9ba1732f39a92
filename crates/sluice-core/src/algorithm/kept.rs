//! What a modifier of a limit leaves with the algorithms' data without the algorithms knowing
//! it: the state it keeps beside a limit's (`Kept`, held and persisted as the modifier's own
//! bytes) and what it notes on a decision (`Noted`, a few numbers). Only the modifier that
//! wrote them reads them (`crate::modifier`); a store keeps and moves them as they are.

use super::persist::{read_whole, Persist};

/// State a modifier keeps beside a limit's, under a key of its own: the part's name (its
/// key's suffix and its tag in a snapshot) and the modifier's encoding of it (boxed, so that
/// every `State` stays as small as the algorithms' own).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kept {
    pub part: &'static str,
    pub bytes: Box<Vec<u8>>,
}

impl Kept {
    /// `value` kept as part `part`.
    pub fn of<T: Persist>(part: &'static str, value: &T) -> Kept {
        let mut bytes = Vec::new();
        value.put(&mut bytes);
        Kept {
            part,
            bytes: Box::new(bytes),
        }
    }

    /// The value the bytes hold, when they hold one of `T`'s layout whole.
    pub fn read<T: Persist>(&self) -> Option<T> {
        read_whole(&self.bytes)
    }
}

/// What a modifier notes on a decision: which modifier (its registry row's YAML key) and
/// numbers whose meaning is its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Noted {
    pub by: &'static str,
    pub values: [u64; Noted::VALUES],
}

impl Noted {
    /// How many numbers a note carries (the Redis script's reply has as many fields).
    pub const VALUES: usize = 5;
}
