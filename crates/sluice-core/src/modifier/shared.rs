//! `Modifiers`, a limit's modifiers as every copy of the limit holds them: one `ModifierSet`
//! behind a shared pointer, or none. A request copies each of its limits (into its plan and
//! its hits); with the set shared, a copy is a pointer, and a limit without modifiers (most
//! of them) carries no set at all. A change to a copy's set (a modifier that reads a request's
//! entry) copies the set first, so the config's limit never sees it.

use std::hash::{Hash, Hasher};
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use super::ModifierSet;

/// The set no modifier is in: what a limit without modifiers reads.
static NONE: ModifierSet = ModifierSet::EMPTY;

/// A limit's modifiers: read as a `ModifierSet` (`Deref`), shared between copies.
#[derive(Clone, Default)]
pub struct Modifiers(Option<Arc<ModifierSet>>);

impl Deref for Modifiers {
    type Target = ModifierSet;

    fn deref(&self) -> &ModifierSet {
        self.0.as_deref().unwrap_or(&NONE)
    }
}

impl DerefMut for Modifiers {
    /// This copy's own set, copied from the shared one first when another copy holds it.
    fn deref_mut(&mut self) -> &mut ModifierSet {
        Arc::make_mut(self.0.get_or_insert_with(Default::default))
    }
}

impl From<ModifierSet> for Modifiers {
    fn from(set: ModifierSet) -> Modifiers {
        Modifiers(Some(Arc::new(set)))
    }
}

/// Two limits' modifiers are equal when their sets are, shared or not.
impl PartialEq for Modifiers {
    fn eq(&self, other: &Modifiers) -> bool {
        **self == **other
    }
}

impl Eq for Modifiers {}

impl Hash for Modifiers {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (**self).hash(state);
    }
}

impl std::fmt::Debug for Modifiers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Modifiers with the one whose YAML key is `key`, as `yaml` gives it.
    fn with(key: &str, yaml: &str) -> Modifiers {
        let mut modifiers = Modifiers::default();
        let value = serde_yaml::from_str(yaml).expect("yaml");
        assert!(modifiers.set(key, &value, 60_000_000).expect("valid"));
        modifiers
    }

    fn penalized() -> Modifiers {
        with("penalty", "{after: 3, block: 1m}")
    }

    /// Whether two copies share one set.
    fn shared(a: &Modifiers, b: &Modifiers) -> bool {
        match (&a.0, &b.0) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    #[test]
    fn a_limit_without_modifiers_reads_an_empty_set_and_equals_an_emptied_one() {
        let none = Modifiers::default();
        assert!(none.is_empty());
        let mut emptied = penalized();
        assert_ne!(none, emptied);
        emptied.penalty = None;
        assert_eq!(none, emptied);
    }

    #[test]
    fn a_copy_changed_leaves_the_original_as_it_was() {
        let original = penalized();
        let mut copy = original.clone();
        assert!(shared(&original, &copy));
        copy.penalty = None;
        assert!(original.penalty.is_some());
        assert!(copy.is_empty());
        assert!(!shared(&original, &copy));
    }

    #[test]
    fn a_request_entry_is_taken_into_the_copy_alone() {
        let entries = [("priority", "batch")];
        let original = penalized();
        let mut copy = original.clone();
        copy.take_entries(entries.into_iter());
        assert!(
            shared(&original, &copy),
            "no modifier reads an entry: still shared"
        );

        let original = with(
            "tiers",
            "{from: priority, ceilings: {critical: 1.0, batch: 0.5}, otherwise: critical}",
        );
        let mut copy = original.clone();
        copy.take_entries(entries.into_iter());
        assert!(!shared(&original, &copy));
        assert_eq!(copy.class().map(|c| c.name), Some("batch"));
        assert_eq!(original.class().map(|c| c.name), Some("critical"));
    }
}
