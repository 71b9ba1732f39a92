//! What the memory store's state costs the process, so that `--memory-max-bytes` bounds what it
//! holds: the map's table as it is allocated (its spare buckets and its doubling included), and
//! each state's heap block as the allocator hands it out. And how a sliding log is held so that
//! its block changes size once per doubling, not on every hit.
//!
//! `tests/memory_bound.rs` holds resident memory to the bound so counted, for every
//! algorithm's state and for floods of keys and of entries (BENCHMARKS.md, "How much
//! memory does a key take, and does the bound hold?").

use std::mem::size_of;

use sluice_core::algorithm::State;

use super::{Entry, KeyId};

/// The bytes the allocator takes for a block of `bytes`: mimalloc (the sluice binary's
/// allocator) rounds a block up to its size class, in steps of 8 bytes up to 64, then four
/// classes per power of two (at most a quarter more).
pub(super) fn allocated(bytes: usize) -> usize {
    if bytes == 0 {
        return 0;
    }
    if bytes <= 64 {
        return bytes.next_multiple_of(8);
    }
    let step = bytes.next_power_of_two() / 8;
    bytes.next_multiple_of(step)
}

/// Buckets of a map that can hold `capacity` entries (std's hashbrown: a power of two, 7/8 of
/// them usable from 8 buckets on).
fn buckets(capacity: usize) -> usize {
    match capacity {
        0 => 0,
        1..=7 => (capacity + 1).next_power_of_two(),
        _ => (capacity * 8 / 7).next_power_of_two(),
    }
}

/// The entries `buckets` hold.
fn capacity_of(buckets: usize) -> usize {
    if buckets <= 8 {
        buckets.saturating_sub(1)
    } else {
        buckets / 8 * 7
    }
}

/// The bytes a map's table of `capacity` entries costs: a slot and a control byte per bucket
/// and a group of control bytes more, and half as much again for the tables it grew from
/// (each doubling frees the last one, which the allocator does not all hand back: under a
/// flood of new keys, resident memory grew 1.3 to 1.9 times the table itself).
pub(super) fn table_bytes(capacity: usize) -> usize {
    match buckets(capacity) {
        0 => 0,
        b => (b * (size_of::<(KeyId, Entry)>() + 1) + 16) * 3 / 2,
    }
}

/// The capacity a map of `capacity` has once it holds `len` entries: it doubles its buckets
/// (from 4) each time it is full.
pub(super) fn capacity_for(capacity: usize, len: usize) -> usize {
    let mut buckets = buckets(capacity).max(if len > 0 { 4 } else { 0 });
    while capacity_of(buckets) < len {
        buckets *= 2;
    }
    capacity.max(capacity_of(buckets))
}

/// The entries a sliding log of `len` is held room for, having room for `held`: kept while
/// it fits and is not four times too large, else the next power of two. A log lengthening
/// by one entry per hit is reallocated once per doubling (14 times up to 10,000 entries)
/// instead of on every hit, and its room is known before it is written.
fn log_capacity(held: usize, len: usize) -> usize {
    if held >= len && held / 4 <= len.max(1) {
        held
    } else {
        len.next_power_of_two().max(4)
    }
}

/// The heap bytes `state` takes as held: its block; a sliding log's half as much again for
/// the smaller blocks it grew through, which the allocator keeps in part (under a flood of
/// entries, resident memory grew 1.3 to 1.6 times the logs' blocks themselves).
pub(super) fn heap_bytes(state: &State) -> usize {
    match state {
        State::SlidingWindowLog(_) => allocated(state.heap_bytes()) * 3 / 2,
        other => allocated(other.heap_bytes()),
    }
}

/// The heap bytes `new` will take once held over `held` (`None`: a new key).
pub(super) fn heap_bytes_held(held: Option<&State>, new: &State) -> usize {
    match new {
        State::SlidingWindowLog(log) => {
            let room = match held {
                Some(State::SlidingWindowLog(old)) => old.capacity(),
                _ => 0,
            };
            allocated(log_capacity(room, log.len()) * size_of::<u64>()) * 3 / 2
        }
        other => heap_bytes(other),
    }
}

/// Writes `new` over `held`, a sliding log into the block it has when that keeps fitting.
pub(super) fn hold(held: &mut State, new: State) {
    match (held, new) {
        (State::SlidingWindowLog(old), State::SlidingWindowLog(log)) => {
            let room = log_capacity(old.capacity(), log.len());
            if room != old.capacity() {
                *old = Vec::with_capacity(room);
            }
            old.clear();
            old.extend_from_slice(&log);
        }
        (held, new) => *held = new,
    }
}

/// `new` as a new key holds it: a sliding log with the room `log_capacity` gives it.
pub(super) fn fresh(new: State) -> State {
    match new {
        State::SlidingWindowLog(log) => {
            let mut held = Vec::with_capacity(log_capacity(0, log.len()));
            held.extend_from_slice(&log);
            State::SlidingWindowLog(held)
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[test]
    fn the_table_model_follows_std_hashmap_as_it_grows() {
        let mut map: HashMap<u64, [u8; 56]> = HashMap::new();
        let mut modelled = 0;
        for len in 1..=100_000u64 {
            map.insert(len, [0; 56]);
            modelled = capacity_for(modelled, len as usize);
            assert_eq!(map.capacity(), modelled, "at {len} entries");
        }
    }

    #[test]
    fn blocks_round_up_to_the_allocators_size_classes() {
        let classes = [
            (0, 0),
            (1, 8),
            (64, 64),
            (65, 80),
            (129, 160),
            (80_008, 81_920),
        ];
        for (bytes, class) in classes {
            assert_eq!(allocated(bytes), class, "{bytes} bytes");
        }
        for bytes in 1..100_000 {
            let block = allocated(bytes);
            assert!(
                block >= bytes && block <= bytes + bytes / 4 + 8,
                "{bytes}: {block}"
            );
        }
    }

    #[test]
    fn a_lengthening_log_is_reallocated_once_per_doubling() {
        let mut held = fresh(State::SlidingWindowLog(vec![1]));
        let mut reallocations = 0;
        for len in 2..=10_001u64 {
            let before = match &held {
                State::SlidingWindowLog(log) => log.as_ptr(),
                _ => unreachable!(),
            };
            let new = State::SlidingWindowLog((0..len).collect());
            let expected = heap_bytes_held(Some(&held), &new);
            hold(&mut held, new);
            assert_eq!(heap_bytes(&held), expected);
            if let State::SlidingWindowLog(log) = &held {
                assert_eq!(log.len() as u64, len);
                reallocations += usize::from(log.as_ptr() != before);
            }
        }
        assert!(reallocations <= 13, "{reallocations}");
    }
}
