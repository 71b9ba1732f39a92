//! The compiled configuration: per domain a tree of descriptor nodes, and the walk that finds
//! the rule a request descriptor falls under (DESIGN section 4).

use std::collections::HashMap;
use std::path::PathBuf;

use crate::config::pattern::Pattern;
use crate::limit::Limit;

/// Every loaded domain. Immutable once built; reload builds a new one.
#[derive(Debug, Default)]
pub struct Config {
    pub(crate) domains: HashMap<String, Domain>,
}

impl Config {
    /// The domain named `name`, if configured.
    pub fn domain(&self, name: &str) -> Option<&Domain> {
        self.domains.get(name)
    }

    /// Every domain, sorted by name.
    pub fn domains(&self) -> Vec<&Domain> {
        let mut domains: Vec<&Domain> = self.domains.values().collect();
        domains.sort_by(|a, b| a.name.cmp(&b.name));
        domains
    }

    /// How many rules (limits, unlimited ones included) all domains hold.
    pub fn rule_count(&self) -> usize {
        self.domains.values().map(|d| d.rules().len()).sum()
    }
}

/// One domain's tree and the files it came from.
#[derive(Debug)]
pub struct Domain {
    pub name: String,
    pub files: Vec<PathBuf>,
    pub(crate) root: Level,
}

/// The nodes below one node, by descriptor key.
#[derive(Debug, Default)]
pub(crate) struct Level {
    pub(crate) by_key: HashMap<String, KeyNodes>,
}

/// The nodes of one key at one level: exact values, wildcard values in file order, and the
/// value-less default.
#[derive(Debug, Default)]
pub(crate) struct KeyNodes {
    pub(crate) exact: HashMap<String, Node>,
    pub(crate) wildcards: Vec<(Pattern, Node)>,
    pub(crate) any_value: Option<Box<Node>>,
}

/// One node of the tree.
#[derive(Debug, Default)]
pub(crate) struct Node {
    /// With a wildcard value: every matching value is counted as the pattern itself.
    pub(crate) share_threshold: bool,
    pub(crate) rule: Option<Rule>,
    pub(crate) children: Level,
}

/// A limit as configured on a node, with what the service needs to apply it.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// The composite key of the node, `domain.key_value.subkey`, as the reference names it.
    pub full_key: String,
    pub name: Option<String>,
    /// `None` for `unlimited: true`.
    pub limit: Option<Limit>,
    pub replaces: Vec<String>,
    pub shadow_mode: bool,
    pub quota_mode: bool,
    pub detailed_metric: bool,
    pub value_to_metric: bool,
    pub metadata: Option<serde_yaml::Value>,
}

/// The rule a descriptor falls under, and the (key, value) each entry is counted under: the
/// request's value, or the wildcard pattern where `share_threshold` makes values share.
#[derive(Debug)]
pub struct Match<'a> {
    pub rule: &'a Rule,
    pub counted_entries: Vec<(&'a str, &'a str)>,
}

impl Domain {
    /// Walks the tree one entry at a time: exact value, then wildcards in file order, then the
    /// value-less key. A rule applies only on the node of the last entry; there is no fallback
    /// to a parent.
    pub fn resolve<'a, I>(&'a self, entries: I) -> Option<Match<'a>>
    where
        I: ExactSizeIterator<Item = (&'a str, &'a str)>,
    {
        let last = entries.len().checked_sub(1)?;
        let mut level = &self.root;
        let mut counted_entries = Vec::with_capacity(last + 1);
        for (index, (key, value)) in entries.enumerate() {
            let (node, counted_value) = level.by_key.get(key)?.find(value)?;
            counted_entries.push((key, counted_value));
            if index == last {
                return node.rule.as_ref().map(|rule| Match {
                    rule,
                    counted_entries,
                });
            }
            level = &node.children;
        }
        None
    }

    /// Every rule of the domain, in tree order.
    pub fn rules(&self) -> Vec<&Rule> {
        let mut rules = Vec::new();
        self.root.collect_rules(&mut rules);
        rules
    }
}

impl KeyNodes {
    fn find<'a>(&'a self, value: &'a str) -> Option<(&'a Node, &'a str)> {
        if let Some(node) = self.exact.get(value) {
            return Some((node, value));
        }
        if let Some((pattern, node)) = self.wildcards.iter().find(|(p, _)| p.matches(value)) {
            let counted = if node.share_threshold {
                pattern.as_str()
            } else {
                value
            };
            return Some((node, counted));
        }
        self.any_value.as_deref().map(|node| (node, value))
    }
}

impl Level {
    fn collect_rules<'a>(&'a self, out: &mut Vec<&'a Rule>) {
        let mut keys: Vec<&String> = self.by_key.keys().collect();
        keys.sort();
        for key in keys {
            let nodes = &self.by_key[key];
            let mut values: Vec<&String> = nodes.exact.keys().collect();
            values.sort();
            let exact = values.into_iter().map(|v| &nodes.exact[v]);
            let wildcards = nodes.wildcards.iter().map(|(_, node)| node);
            for node in exact.chain(wildcards).chain(nodes.any_value.as_deref()) {
                out.extend(node.rule.as_ref());
                node.children.collect_rules(out);
            }
        }
    }
}
