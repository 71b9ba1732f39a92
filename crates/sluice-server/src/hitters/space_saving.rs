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
use std::hash::BuildHasherDefault;
use std::sync::Arc;

use sluice_core::keyed_id::PassThrough;

/// One counter: the value it counts, its count, and how much of the count may belong to the
/// values it counted before.
#[derive(Debug, Clone)]
pub struct Counted {
    pub value: Arc<str>,
    pub count: u64,
    pub error: u64,
    hash: u64,
}

/// The sketch. Counters stay in their place (`counters`); the heap orders their places by
/// count, and `position` says where each place is in the heap, so reordering the heap writes
/// two numbers and finds nothing by hash.
#[derive(Debug, Clone)]
pub struct SpaceSaving {
    capacity: usize,
    /// A value's hash to its counter's place.
    places: HashMap<u64, u32, BuildHasherDefault<PassThrough>>,
    counters: Vec<Counted>,
    /// Places, a min-heap by count.
    heap: Vec<u32>,
    /// Each place's index in `heap`.
    position: Vec<u32>,
    total: u64,
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
            capacity: capacity.clamp(1, u32::MAX as usize),
            places: HashMap::default(),
            counters: Vec::new(),
            heap: Vec::new(),
            position: Vec::new(),
            total: 0,
        }
    }

    /// Adds `weight` to the value whose hash is `hash`; `value` gives its text, asked only
    /// when the value takes a counter.
    pub fn add(&mut self, hash: u64, weight: u64, value: impl FnOnce() -> Arc<str>) {
        self.total = self.total.saturating_add(weight);
        if let Some(&place) = self.places.get(&hash) {
            let counter = &mut self.counters[place as usize];
            counter.count = counter.count.saturating_add(weight);
            self.sift_down(self.position[place as usize] as usize);
            return;
        }
        if self.counters.len() < self.capacity {
            let place = self.counters.len() as u32;
            self.counters.push(Counted {
                value: value(),
                count: weight,
                error: 0,
                hash,
            });
            self.places.insert(hash, place);
            self.heap.push(place);
            self.position.push(place);
            self.sift_up(place as usize);
            return;
        }
        // Full: the value takes the counter with the least count, and that count as its error.
        let place = self.heap[0];
        let counter = &mut self.counters[place as usize];
        self.places.remove(&counter.hash);
        let floor = counter.count;
        *counter = Counted {
            value: value(),
            count: floor.saturating_add(weight),
            error: floor,
            hash,
        };
        self.places.insert(hash, place);
        self.sift_down(0);
    }

    /// The most a value it does not hold may have counted: the least count when full, else 0.
    pub fn floor(&self) -> u64 {
        if self.counters.len() < self.capacity {
            0
        } else {
            self.heap
                .first()
                .map_or(0, |&place| self.counters[place as usize].count)
        }
    }

    /// The weight of everything added.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// The counter of the value whose hash is `hash`, when it holds one.
    pub fn get(&self, hash: u64) -> Option<&Counted> {
        self.places
            .get(&hash)
            .map(|&place| &self.counters[place as usize])
    }

    /// Every counter, in no order.
    pub fn counters(&self) -> &[Counted] {
        &self.counters
    }

    /// Empties it, keeping its room.
    pub fn clear(&mut self) {
        self.places.clear();
        self.counters.clear();
        self.heap.clear();
        self.position.clear();
        self.total = 0;
    }

    /// The bytes it holds (its counters, their values' text and its index).
    pub fn bytes(&self) -> usize {
        let text: usize = self.counters.iter().map(|c| c.value.len()).sum();
        self.counters.capacity() * std::mem::size_of::<Counted>()
            + (self.heap.capacity() + self.position.capacity()) * 4
            + self.places.capacity() * (std::mem::size_of::<(u64, u32)>() + 1)
            + text
    }

    fn count_at(&self, index: usize) -> u64 {
        self.counters[self.heap[index] as usize].count
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        self.position[self.heap[a] as usize] = a as u32;
        self.position[self.heap[b] as usize] = b as u32;
    }

    fn sift_up(&mut self, mut index: usize) {
        while index > 0 {
            let parent = (index - 1) / 2;
            if self.count_at(parent) <= self.count_at(index) {
                break;
            }
            self.swap(parent, index);
            index = parent;
        }
    }

    fn sift_down(&mut self, mut index: usize) {
        loop {
            let left = 2 * index + 1;
            let right = left + 1;
            let mut least = index;
            if left < self.heap.len() && self.count_at(left) < self.count_at(least) {
                least = left;
            }
            if right < self.heap.len() && self.count_at(right) < self.count_at(least) {
                least = right;
            }
            if least == index {
                return;
            }
            self.swap(least, index);
            index = least;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    fn add(sketch: &mut SpaceSaving, value: &str, weight: u64) {
        let hash = foldhash::fast::FixedState::with_seed(7).hash_one(value);
        sketch.add(hash, weight, || Arc::from(value));
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
        let c = sketch.counters().iter().find(|c| &*c.value == "c").cloned();
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
            let truth = exact[&*counted.value];
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
