//! The Space-Saving sketch (Metwally, Agrawal and El Abbadi, 2005): the values with the most
//! weight in a stream, in at most `capacity` counters whatever the number of distinct values.
//! A value it holds carries its count and the error that count may carry (what the counter it
//! took had counted before); a value it does not hold counted at most `floor()`. So every
//! count it gives is never under the true one and over it by at most `floor()`, which is at
//! most `total / capacity`.
//!
//! The counters are a min-heap by count (the one to give up is the root), found by the value's
//! 64-bit hash: a value's text is stored once, when it takes a counter.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};

/// One counter: the value it counts, its count, and how much of the count may belong to the
/// values it counted before.
#[derive(Debug, Clone)]
pub struct Counted {
    pub value: String,
    pub count: u64,
    pub error: u64,
    hash: u64,
}

/// The sketch.
#[derive(Debug, Clone)]
pub struct SpaceSaving {
    capacity: usize,
    /// A value's hash to its counter's place in `heap`.
    places: HashMap<u64, usize, NoHash>,
    heap: Vec<Counted>,
    total: u64,
}

/// A hash of a value, made by the caller (`hash_of`), is its own key.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoHash;

impl BuildHasher for NoHash {
    type Hasher = PassThrough;

    fn build_hasher(&self) -> PassThrough {
        PassThrough(0)
    }
}

/// Hashes a `u64` to itself.
#[derive(Debug, Default)]
pub struct PassThrough(u64);

impl Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*byte);
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = value;
    }
}

impl Counted {
    /// The hash its value is found by.
    pub fn hash_key(&self) -> u64 {
        self.hash
    }
}

impl SpaceSaving {
    /// An empty sketch of `capacity` counters (at least one).
    pub fn new(capacity: usize) -> SpaceSaving {
        SpaceSaving {
            capacity: capacity.max(1),
            places: HashMap::default(),
            heap: Vec::new(),
            total: 0,
        }
    }

    /// Adds `weight` to the value whose hash is `hash`; `value` writes its text, called only
    /// when the value takes a counter.
    pub fn add(&mut self, hash: u64, weight: u64, value: impl FnOnce() -> String) {
        self.total = self.total.saturating_add(weight);
        if let Some(&place) = self.places.get(&hash) {
            self.heap[place].count = self.heap[place].count.saturating_add(weight);
            self.sift_down(place);
            return;
        }
        if self.heap.len() < self.capacity {
            let place = self.heap.len();
            self.heap.push(Counted {
                value: value(),
                count: weight,
                error: 0,
                hash,
            });
            self.places.insert(hash, place);
            self.sift_up(place);
            return;
        }
        // Full: the value takes the counter with the least count, and that count as its error.
        let root = &mut self.heap[0];
        self.places.remove(&root.hash);
        let floor = root.count;
        *root = Counted {
            value: value(),
            count: floor.saturating_add(weight),
            error: floor,
            hash,
        };
        self.places.insert(hash, 0);
        self.sift_down(0);
    }

    /// The most a value it does not hold may have counted: the least count when full, else 0.
    pub fn floor(&self) -> u64 {
        if self.heap.len() < self.capacity {
            0
        } else {
            self.heap.first().map_or(0, |c| c.count)
        }
    }

    /// The weight of everything added.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// The counter of the value whose hash is `hash`, when it holds one.
    pub fn get(&self, hash: u64) -> Option<&Counted> {
        self.places.get(&hash).map(|&place| &self.heap[place])
    }

    /// Every counter, in no order.
    pub fn counters(&self) -> &[Counted] {
        &self.heap
    }

    /// Empties it, keeping its room.
    pub fn clear(&mut self) {
        self.places.clear();
        self.heap.clear();
        self.total = 0;
    }

    /// The bytes it holds (its counters, their values' text and its index).
    pub fn bytes(&self) -> usize {
        let text: usize = self.heap.iter().map(|c| c.value.capacity()).sum();
        self.heap.capacity() * std::mem::size_of::<Counted>()
            + self.places.capacity() * (2 * std::mem::size_of::<u64>() + 1)
            + text
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        self.places.insert(self.heap[a].hash, a);
        self.places.insert(self.heap[b].hash, b);
    }

    fn sift_up(&mut self, mut place: usize) {
        while place > 0 {
            let parent = (place - 1) / 2;
            if self.heap[parent].count <= self.heap[place].count {
                break;
            }
            self.swap(parent, place);
            place = parent;
        }
    }

    fn sift_down(&mut self, mut place: usize) {
        loop {
            let left = 2 * place + 1;
            let right = left + 1;
            let mut least = place;
            if left < self.heap.len() && self.heap[left].count < self.heap[least].count {
                least = left;
            }
            if right < self.heap.len() && self.heap[right].count < self.heap[least].count {
                least = right;
            }
            if least == place {
                return;
            }
            self.swap(least, place);
            place = least;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn add(sketch: &mut SpaceSaving, value: &str, weight: u64) {
        let hash = foldhash::fast::FixedState::with_seed(7).hash_one(value);
        sketch.add(hash, weight, || value.to_string());
    }

    fn count(sketch: &SpaceSaving, value: &str) -> Option<u64> {
        let hash = foldhash::fast::FixedState::with_seed(7).hash_one(value);
        sketch.get(hash).map(|c| c.count)
    }

    #[test]
    fn counts_exactly_while_it_has_room() {
        let mut sketch = SpaceSaving::new(4);
        for (value, weight) in [("a", 3), ("b", 1), ("a", 2), ("c", 5)] {
            add(&mut sketch, value, weight);
        }
        assert_eq!(count(&sketch, "a"), Some(5));
        assert_eq!(count(&sketch, "b"), Some(1));
        assert_eq!(count(&sketch, "c"), Some(5));
        assert_eq!(sketch.floor(), 0);
        assert_eq!(sketch.total(), 11);
    }

    #[test]
    fn a_newcomer_takes_the_least_counter_and_its_count_as_error() {
        let mut sketch = SpaceSaving::new(2);
        add(&mut sketch, "a", 10);
        add(&mut sketch, "b", 3);
        add(&mut sketch, "c", 1);
        assert_eq!(count(&sketch, "b"), None);
        let c = sketch.counters().iter().find(|c| c.value == "c").cloned();
        let c = c.map(|c| (c.count, c.error));
        assert_eq!(c, Some((4, 3)));
        assert_eq!(sketch.floor(), 4);
        assert_eq!(count(&sketch, "a"), Some(10));
    }

    #[test]
    fn never_under_and_over_by_at_most_total_over_capacity() {
        let mut sketch = SpaceSaving::new(16);
        let mut exact = std::collections::HashMap::new();
        // A skewed stream: value i of 200 comes about 1/(i+1) as often.
        let mut state = 1u64;
        for _ in 0..20_000 {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let u = (state >> 11) as f64 / (1u64 << 53) as f64;
            let value = ((200f64).powf(u) - 1.0) as u64;
            let value = format!("v{value}");
            *exact.entry(value.clone()).or_insert(0u64) += 1;
            add(&mut sketch, &value, 1);
        }
        let bound = sketch.total() / 16;
        assert!(sketch.floor() <= bound);
        for counted in sketch.counters() {
            let truth = exact[&counted.value];
            assert!(
                counted.count >= truth,
                "{} under: {} < {truth}",
                counted.value,
                counted.count
            );
            assert!(counted.count - truth <= counted.error);
            assert!(counted.error <= sketch.floor());
        }
        // Every value heavier than the bound is held.
        for (value, truth) in &exact {
            if *truth > bound {
                assert!(count(&sketch, value).is_some(), "{value} ({truth}) dropped");
            }
        }
    }
}
