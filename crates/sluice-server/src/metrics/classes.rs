//! One limit's decisions by the class of traffic a modifier put each hit in:
//! admitted and denied per class, registered when a class is first seen. Classes come from
//! the configuration, never from requests, so their number is bounded by it.

use std::sync::Mutex;

use metrics::{Counter, Label};

use sluice_core::modifier::Class;
use sluice_store::series::Series;

/// The admitted and denied counters of each class seen.
#[derive(Default)]
pub(super) struct ClassCounters {
    by_class: Mutex<Vec<(String, [Counter; 2])>>,
}

impl ClassCounters {
    /// Counts a hit of `class`, admitted or not, under the limit's `labels`.
    pub(super) fn record(
        &self,
        series: &Series,
        labels: impl FnOnce() -> Vec<Label>,
        class: Class<'_>,
        admitted: bool,
    ) {
        let mut by_class = self
            .by_class
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let index = match by_class.iter().position(|(name, _)| name == class.name) {
            Some(index) => index,
            None => {
                let labels = labels();
                let counters = ["OK", "OVER_LIMIT"].map(|code| {
                    let mut named = labels.clone();
                    named.push(Label::new(class.label, class.name.to_string()));
                    named.push(Label::new("code", code));
                    series.counter(class.series, named)
                });
                by_class.push((class.name.to_string(), counters));
                by_class.len() - 1
            }
        };
        by_class[index].1[usize::from(!admitted)].increment(1);
    }
}
