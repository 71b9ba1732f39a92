//! The wildcard values of one key at one level, and the index that finds the first of them (in
//! file order) that a request value matches without trying them one after another.
//!
//! Every pattern is filed under one literal part it cannot match without: its prefix (the text
//! before its first `*`), else its suffix (after its last `*`), else its longest inner part
//! (`*foo*`); a pattern of `*` alone matches every value. A value then looks up only the parts
//! it holds: its own prefixes and suffixes of the lengths some pattern's part has, and its
//! substrings of the lengths some inner part has. The candidates found are tried in file order,
//! so the first match is exactly the one a scan in file order finds. At 10,000 patterns
//! `t<i>-*`, a value looks up four prefixes where the scan tried 10,000 patterns
//! (BENCHMARKS.md, "How does the cost hold as rules, keys, descriptors and clients grow?").

use std::collections::{HashMap, HashSet};

use crate::pattern::Pattern;

/// Where a pattern is filed: which of its literal parts a value must hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Anchor {
    Prefix,
    Suffix,
    Inner,
    /// Only `*`s: every value matches.
    Everything,
}

/// The patterns filed under literal parts of one kind, by the part's bytes.
#[derive(Debug, Default)]
struct PartIndex {
    /// Pattern ids (file order, ascending) by literal part.
    by_part: HashMap<Box<[u8]>, Vec<u32>>,
    /// The distinct lengths of the parts, ascending.
    lengths: Vec<usize>,
    /// How many patterns are filed.
    filed: usize,
}

impl PartIndex {
    fn insert(&mut self, part: &[u8], id: u32) {
        self.by_part.entry(part.into()).or_default().push(id);
        self.filed += 1;
        if let Err(at) = self.lengths.binary_search(&part.len()) {
            self.lengths.insert(at, part.len());
        }
    }

    /// The ids filed under `part`, ascending.
    fn get(&self, part: &[u8]) -> &[u32] {
        self.by_part.get(part).map_or(&[], Vec::as_slice)
    }

    /// Tries the ids filed under the part of each length that `part_of` cuts from `bytes`
    /// (its prefix or its suffix of that length).
    fn try_ends<T>(
        &self,
        bytes: &[u8],
        part_of: fn(&[u8], usize) -> &[u8],
        first: &mut Candidate<'_, T>,
    ) {
        for &len in self.lengths.iter().take_while(|&&l| l <= bytes.len()) {
            first.try_all(self.get(part_of(bytes, len)));
        }
    }
}

/// The wildcard values of one key at one level, each with what it leads to, in file order.
#[derive(Debug)]
pub(crate) struct Wildcards<T> {
    entries: Vec<(Pattern, T)>,
    /// The patterns' texts: a value written twice at one level is refused at load.
    texts: HashSet<String>,
    prefixes: PartIndex,
    suffixes: PartIndex,
    inner: PartIndex,
    /// Patterns of `*` alone.
    everything: Vec<u32>,
}

impl<T> Default for Wildcards<T> {
    fn default() -> Self {
        Wildcards {
            entries: Vec::new(),
            texts: HashSet::new(),
            prefixes: PartIndex::default(),
            suffixes: PartIndex::default(),
            inner: PartIndex::default(),
            everything: Vec::new(),
        }
    }
}

impl<T> Wildcards<T> {
    /// Adds `pattern` after every pattern already here; false (and nothing added) when the same
    /// pattern is here already.
    pub(crate) fn push(&mut self, pattern: Pattern, value: T) -> bool {
        if self.texts.contains(pattern.as_str()) {
            return false;
        }
        let Ok(id) = u32::try_from(self.entries.len()) else {
            return false;
        };
        let (anchor, part) = anchor_of(pattern.as_str());
        match anchor {
            Anchor::Prefix => self.prefixes.insert(part, id),
            Anchor::Suffix => self.suffixes.insert(part, id),
            Anchor::Inner => self.inner.insert(part, id),
            Anchor::Everything => self.everything.push(id),
        }
        self.texts.insert(pattern.as_str().to_string());
        self.entries.push((pattern, value));
        true
    }

    /// The first pattern in file order that `value` matches, with what it leads to.
    pub(crate) fn find<'a>(&'a self, value: &'a str) -> Option<&'a (Pattern, T)> {
        let bytes = value.as_bytes();
        let mut first = Candidate::new(&self.entries, value);
        first.try_all(&self.everything);
        self.prefixes
            .try_ends(bytes, |bytes, len| &bytes[..len], &mut first);
        self.suffixes
            .try_ends(bytes, |bytes, len| &bytes[bytes.len() - len..], &mut first);
        self.find_inner(bytes, &mut first);
        first.found()
    }

    /// Tries the patterns filed under an inner part: through the index when the value has
    /// fewer substrings of the parts' lengths than there are such patterns, else each in turn.
    fn find_inner(&self, bytes: &[u8], first: &mut Candidate<'_, T>) {
        if self.inner.filed == 0 {
            return;
        }
        let lookups = bytes.len().saturating_mul(self.inner.lengths.len());
        if lookups >= self.inner.filed {
            for ids in self.inner.by_part.values() {
                first.try_all(ids);
            }
            return;
        }
        for &len in self.inner.lengths.iter().take_while(|&&l| l <= bytes.len()) {
            for window in bytes.windows(len) {
                first.try_all(self.inner.get(window));
            }
        }
    }

    /// Every pattern with what it leads to, in file order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &(Pattern, T)> {
        self.entries.iter()
    }

    /// Every pattern with what it leads to, in file order, the latter mutable.
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = (&Pattern, &mut T)> {
        self.entries.iter_mut().map(|(p, v)| (&*p, v))
    }
}

/// The earliest matching pattern found so far.
struct Candidate<'a, T> {
    entries: &'a [(Pattern, T)],
    value: &'a str,
    /// The id of the earliest match so far; `u32::MAX` for none.
    best: u32,
}

impl<'a, T> Candidate<'a, T> {
    fn new(entries: &'a [(Pattern, T)], value: &'a str) -> Self {
        Candidate {
            entries,
            value,
            best: u32::MAX,
        }
    }

    /// Tries `ids` (ascending) in order, up to the earliest match so far.
    fn try_all(&mut self, ids: &[u32]) {
        for &id in ids.iter().take_while(|&&id| id < self.best) {
            let matched = self
                .entries
                .get(id as usize)
                .is_some_and(|(pattern, _)| pattern.matches(self.value));
            if matched {
                self.best = id;
                return;
            }
        }
    }

    fn found(&self) -> Option<&'a (Pattern, T)> {
        self.entries.get(self.best as usize)
    }
}

/// Which literal part of `pattern` (holding at least one `*`) files it.
fn anchor_of(pattern: &str) -> (Anchor, &[u8]) {
    let parts: Vec<&str> = pattern.split('*').collect();
    let prefix = parts.first().copied().unwrap_or_default();
    let suffix = parts.last().copied().unwrap_or_default();
    if !prefix.is_empty() {
        return (Anchor::Prefix, prefix.as_bytes());
    }
    if !suffix.is_empty() {
        return (Anchor::Suffix, suffix.as_bytes());
    }
    match parts.iter().max_by_key(|part| part.len()) {
        Some(inner) if !inner.is_empty() => (Anchor::Inner, inner.as_bytes()),
        _ => (Anchor::Everything, &[]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn index(patterns: &[&str]) -> Wildcards<usize> {
        let mut wildcards = Wildcards::default();
        for (i, p) in patterns.iter().enumerate() {
            assert!(wildcards.push(Pattern::parse(p).expect("a pattern"), i));
        }
        wildcards
    }

    /// The first match of a scan in file order: what the index must find.
    fn scan(patterns: &[&str], value: &str) -> Option<usize> {
        patterns
            .iter()
            .position(|p| Pattern::parse(p).is_some_and(|pattern| pattern.matches(value)))
    }

    fn found(wildcards: &Wildcards<usize>, value: &str) -> Option<usize> {
        wildcards.find(value).map(|(_, i)| *i)
    }

    #[test]
    fn overlapping_patterns_match_in_file_order() {
        let patterns = [
            "*-prod",
            "team-*",
            "team-a*",
            "*",
            "*a*",
            "team-*-prod",
            "t*d",
        ];
        let wildcards = index(&patterns);
        for (value, first) in [
            ("team-a-prod", 0),
            ("team-a", 1),
            ("x", 3),
            ("", 3),
            ("xay", 3),
        ] {
            assert_eq!(found(&wildcards, value), Some(first), "{value}");
            assert_eq!(scan(&patterns, value), Some(first), "{value}");
        }
        // Without the catch-all, later patterns of every kind win by file order.
        let patterns = ["team-a*", "*-prod", "*x*", "t*d", "team-*"];
        let wildcards = index(&patterns);
        for (value, first) in [
            ("team-b-prod", Some(1)),
            ("team-a-prod", Some(0)),
            ("zxz", Some(2)),
            ("tod", Some(3)),
            ("team-b", Some(4)),
            ("zzz", None),
        ] {
            assert_eq!(found(&wildcards, value), first, "{value}");
            assert_eq!(scan(&patterns, value), first, "{value}");
        }
    }

    #[test]
    fn a_pattern_written_twice_is_refused() {
        let mut wildcards = index(&["a*"]);
        assert!(!wildcards.push(Pattern::parse("a*").expect("pattern"), 9));
        assert_eq!(wildcards.iter().count(), 1);
    }

    #[test]
    fn multibyte_values_are_looked_up_by_bytes() {
        let patterns = ["é*", "*ü", "*ñ*"];
        let wildcards = index(&patterns);
        assert_eq!(found(&wildcards, "éa"), Some(0));
        assert_eq!(found(&wildcards, "aü"), Some(1));
        assert_eq!(found(&wildcards, "aña"), Some(2));
        assert_eq!(found(&wildcards, "ä"), None);
    }

    proptest! {
        /// On random overlapping patterns and values over a small alphabet, the index finds
        /// exactly the first match of a scan in file order.
        #[test]
        fn the_index_finds_what_a_scan_in_file_order_finds(
            patterns in proptest::collection::hash_set("[ab*]{0,4}\\*[ab*]{0,4}", 1..40),
            values in proptest::collection::vec("[ab]{0,8}", 1..40),
        ) {
            let patterns: Vec<&str> = patterns.iter().map(String::as_str).collect();
            let wildcards = index(&patterns);
            for value in &values {
                prop_assert_eq!(found(&wildcards, value), scan(&patterns, value), "{}", value);
            }
        }
    }
}
