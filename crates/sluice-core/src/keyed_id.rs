//! A 128-bit keyed hash used as a map key in place of the string it hashes (the memory
//! store's keys, the override index's descriptors), and the hasher that passes its first half
//! through: a keyed hash is uniformly distributed already, so hashing it again would only cost.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};

/// A 128-bit keyed hash (two u64, so that a map's entry stays 8-byte aligned).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyedId(pub u64, pub u64);

impl Hash for KeyedId {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.0);
    }
}

/// Passes a `KeyedId`'s first half through.
#[derive(Default)]
pub struct PassThrough(u64);

impl Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is used by `KeyedId`; fold anything else in, to stay correct.
        for byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*byte);
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = value;
    }
}

/// A map keyed by `KeyedId`.
pub type KeyedMap<V> = HashMap<KeyedId, V, BuildHasherDefault<PassThrough>>;
