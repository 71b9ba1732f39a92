//! A sliding window of sketches: `slots` slots of `width` seconds each, every hit counted in
//! the slot of its second (a slot past its time is emptied and reused). Reading merges the
//! slots still inside the window: a value's count is the sum of its counts, with each slot
//! that does not hold it adding that slot's floor, so the merged count is never under the
//! true one and over it by at most the sum of the slots' floors (the window's bound).

use std::sync::Arc;

use super::space_saving::SpaceSaving;

/// Hits and denials of one slot of time.
#[derive(Debug, Clone)]
struct Slot {
    /// The slot's time (seconds / width); `u64::MAX` before its first hit.
    at: u64,
    hits: SpaceSaving,
    denials: SpaceSaving,
}

/// What a window is read by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum By {
    Hits,
    Denials,
}

impl By {
    /// Its name in the calls: `hits`, `denials`.
    pub fn as_str(self) -> &'static str {
        match self {
            By::Hits => "hits",
            By::Denials => "denials",
        }
    }
}

/// One value of a window's top list: its count (never under the true one), the most that
/// count may be over (`error`), and its entries' text.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Heavy {
    pub value: String,
    pub count: u64,
    pub error: u64,
}

/// A window's top list, its total and its bound (the most any count may be over; at most
/// total / capacity).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Top {
    pub values: Vec<Heavy>,
    pub total: u64,
    pub bound: u64,
}

/// The window.
#[derive(Debug, Clone)]
pub struct Window {
    width: u64,
    slots: Vec<Slot>,
}

impl Window {
    /// `slots` slots of `width` seconds, each sketch of `capacity` counters.
    pub fn new(slots: usize, width: u64, capacity: usize) -> Window {
        let slot = Slot {
            at: u64::MAX,
            hits: SpaceSaving::new(capacity),
            denials: SpaceSaving::new(capacity),
        };
        Window {
            width: width.max(1),
            slots: vec![slot; slots.max(1)],
        }
    }

    /// The window's length in seconds.
    pub fn seconds(&self) -> u64 {
        self.width * self.slots.len() as u64
    }

    /// Counts `weight` hits of the value hashed `hash` at second `now`, denied or not.
    pub fn add(
        &mut self,
        now: u64,
        hash: u64,
        weight: u64,
        denied: bool,
        value: &dyn Fn() -> Arc<str>,
    ) {
        let at = now / self.width;
        let index = (at % self.slots.len() as u64) as usize;
        let slot = &mut self.slots[index];
        if slot.at != at {
            slot.at = at;
            slot.hits.clear();
            slot.denials.clear();
        }
        slot.hits.add(hash, weight, value);
        if denied {
            slot.denials.add(hash, weight, value);
        }
    }

    /// The slots inside the window at second `now`, the newest `last` of them.
    fn live(&self, now: u64, last: usize) -> impl Iterator<Item = &Slot> {
        let newest = now / self.width;
        let oldest = newest.saturating_sub(last.min(self.slots.len()) as u64 - 1);
        self.slots
            .iter()
            .filter(move |slot| slot.at != u64::MAX && slot.at >= oldest && slot.at <= newest)
    }

    /// The `k` values with the most hits or denials at second `now`.
    pub fn top(&self, now: u64, by: By, k: usize) -> Top {
        self.top_of_last(now, by, k, self.slots.len())
    }

    /// `top`, over the newest `last` slots only.
    pub fn top_of_last(&self, now: u64, by: By, k: usize, last: usize) -> Top {
        let parts: Vec<Part<'_>> = self
            .live(now, last)
            .map(|slot| match by {
                By::Hits => slot.hits.part(),
                By::Denials => slot.denials.part(),
            })
            .collect();
        merge(&parts, k)
    }

    /// The bytes its sketches hold.
    pub fn sketch_bytes(&self) -> usize {
        self.slots
            .iter()
            .map(|s| s.hits.bytes() + s.denials.bytes())
            .sum()
    }
}

/// One list to merge: the values it holds with their counts and errors, its total, and the
/// most a value it does not hold may have counted (its floor).
pub struct Part<'a> {
    pub values: Vec<(&'a str, u64, u64)>,
    pub total: u64,
    pub floor: u64,
}

/// The `k` values with the highest merged count of `parts` (a window's slots, or replicas'
/// lists): a value's counts and errors summed, each part that does not hold it adding its
/// floor to both, so the merged count stays never under the true one and over it by at most
/// the sum of the floors (the merged bound).
pub fn merge(parts: &[Part<'_>], k: usize) -> Top {
    let total = parts.iter().map(|p| p.total).sum();
    let bound: u64 = parts.iter().map(|p| p.floor).sum();
    // Per value: its counts and errors where held, and the floors of the parts holding it.
    let mut held: std::collections::HashMap<&str, (u64, u64, u64)> = Default::default();
    for part in parts {
        for &(value, count, error) in &part.values {
            let sums = held.entry(value).or_default();
            sums.0 += count;
            sums.1 += error;
            sums.2 += part.floor;
        }
    }
    let mut values: Vec<Heavy> = held
        .into_iter()
        .map(|(value, (count, error, floors))| Heavy {
            value: value.to_string(),
            count: count + (bound - floors),
            error: error + (bound - floors),
        })
        .collect();
    top_k(&mut values, k);
    Top {
        values,
        total,
        bound,
    }
}

impl SpaceSaving {
    /// The sketch as a part of a merge.
    fn part(&self) -> Part<'_> {
        Part {
            values: self
                .counters()
                .iter()
                .map(|c| (&*c.value, c.count, c.error))
                .collect(),
            total: self.total(),
            floor: self.floor(),
        }
    }
}

/// Keeps the `k` highest counts, highest first (ties by value, so the order is stable).
pub fn top_k(values: &mut Vec<Heavy>, k: usize) {
    values.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.value.cmp(&b.value)));
    values.truncate(k);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn add(window: &mut Window, now: u64, value: &str, denied: bool) {
        let hash = foldhash::fast::FixedState::with_seed(3).hash_one(value);
        window.add(now, hash, 1, denied, &|| Arc::from(value));
    }

    use std::hash::BuildHasher;

    #[test]
    fn counts_only_the_slots_inside_the_window() {
        let mut window = Window::new(6, 10, 8);
        add(&mut window, 100, "old", true);
        for _ in 0..3 {
            add(&mut window, 155, "new", false);
        }
        let top = window.top(159, By::Hits, 5);
        assert_eq!(top.values.len(), 2);
        assert_eq!(top.values[0].value, "new");
        assert_eq!(top.values[0].count, 3);
        // At 160 the slot of 100 (its sixth) has left the window.
        let top = window.top(160, By::Hits, 5);
        assert_eq!(top.values.len(), 1);
        assert_eq!(window.top(159, By::Denials, 5).values[0].value, "old");
        assert!(window.top(160, By::Denials, 5).values.is_empty());
    }

    #[test]
    fn a_slot_reused_forgets_what_it_held() {
        let mut window = Window::new(2, 1, 8);
        add(&mut window, 10, "a", false);
        add(&mut window, 12, "b", false);
        let top = window.top(12, By::Hits, 5);
        assert_eq!(
            top.values
                .iter()
                .map(|h| h.value.as_str())
                .collect::<Vec<_>>(),
            ["b"]
        );
        assert_eq!(top.total, 1);
    }
}
