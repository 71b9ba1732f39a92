//! The compiled configuration: per domain a tree of descriptor nodes, and the walk that finds
//! the rule a request descriptor falls under (docs/configuration.md, "Decisions").

use std::collections::HashMap;
use std::path::PathBuf;

use foldhash::fast::RandomState;

use smallvec::SmallVec;

use crate::error::FileError;
use crate::wildcards::Wildcards;
use sluice_core::labels::{LimitLabels, MatchedLevel};
use sluice_core::limit::Limit;

/// A map of the tree, looked up on every request: a fast seeded hash (the tree is built from
/// the config; a request only looks it up).
pub(crate) type TreeMap<V> = HashMap<String, V, RandomState>;

/// What is said when a configuration holds no domain.
pub const NOTHING_LIMITED: &str =
    "the configuration has no domain: nothing is rate limited (every request is OK)";

/// Every loaded domain. Immutable once built; reload builds a new one.
#[derive(Debug, Default)]
pub struct Config {
    pub(crate) domains: TreeMap<Domain>,
    /// What loaded but has no effect (keys in the wrong place), to be logged.
    pub(crate) warnings: Vec<FileError>,
    /// Where it came from: its files, or the xDS server and version.
    pub(crate) source: String,
}

impl Config {
    /// Where the configuration came from (`files /etc/sluice/config`, `xDS http://... version 7`).
    pub fn source(&self) -> &str {
        &self.source
    }

    /// What loaded but has no effect, each with its file, line and reason.
    pub fn warnings(&self) -> &[FileError] {
        &self.warnings
    }

    /// Logs each warning, and loudly that nothing is limited when no domain loaded.
    pub fn log_warnings(&self) {
        for warning in &self.warnings {
            tracing::warn!("config: {warning}");
        }
        if self.domains.is_empty() {
            tracing::warn!("{NOTHING_LIMITED}");
        }
    }

    /// The rules whose limits count over a calendar (`window`), by their full keys.
    pub fn calendar_rules(&self) -> Vec<&str> {
        self.domains()
            .into_iter()
            .flat_map(|domain| domain.rules())
            .filter(|rule| {
                rule.limits.iter().any(|named| {
                    named
                        .limit
                        .as_ref()
                        .is_some_and(|l| l.counting.calendar().is_some())
                })
            })
            .map(|rule| rule.full_key.as_str())
            .collect()
    }

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

    /// Every (key, value) pair that a node of some domain names exactly (`value: free`).
    pub fn named_values(&self) -> std::collections::HashSet<(String, String)> {
        let mut named = std::collections::HashSet::new();
        for domain in self.domains.values() {
            domain.root.collect_named(&mut named);
        }
        named
    }
}

/// One domain's tree and the files it came from.
#[derive(Debug)]
pub struct Domain {
    pub name: String,
    pub files: Vec<PathBuf>,
    pub(crate) root: Level,
    /// The descriptor entries some limit's modifiers read rather than match
    /// (`Modifiers::entry_keys`): a descriptor that matches no rule with them is matched
    /// without them.
    pub(crate) read_entries: Vec<String>,
    /// Limitador's limits of the namespace of this name (`cel_limits`), each tried against
    /// every request of the domain beside its tree.
    pub cel_limits: Vec<crate::cel_limits::CelLimit>,
    /// Whether a file of sluice's format gave the domain its tree.
    pub(crate) has_tree: bool,
}

/// The nodes below one node, by descriptor key.
#[derive(Debug, Default)]
pub(crate) struct Level {
    pub(crate) by_key: TreeMap<KeyNodes>,
}

/// The nodes of one key at one level: exact values, wildcard values in file order (indexed),
/// and the value-less default.
#[derive(Debug, Default)]
pub(crate) struct KeyNodes {
    pub(crate) exact: TreeMap<Node>,
    pub(crate) wildcards: Wildcards<Node>,
    pub(crate) any_value: Option<Box<Node>>,
}

/// One node of the tree.
#[derive(Debug, Default)]
pub(crate) struct Node {
    /// With a wildcard value: every matching value is counted as the pattern itself.
    pub(crate) share_threshold: bool,
    /// The request's value stands in the metric key instead of the configured one.
    pub(crate) value_to_metric: bool,
    pub(crate) rule: Option<Rule>,
    pub(crate) children: Level,
}

/// A limit as configured on a node, with what the service needs to apply it.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// The composite key of the node, `domain.key_value.subkey`, as the reference names it.
    pub full_key: String,
    /// What applies: one limit with `rate_limit`, several with `rate_limits` (all must admit a
    /// hit); `unlimited: true` is one entry without a limit.
    pub limits: Vec<NamedLimit>,
    /// The names of limits that this rule's limits replace when both match in a request.
    pub replaces: Vec<String>,
    pub shadow_mode: bool,
    pub quota_mode: bool,
    /// Metrics name the request's values at every level, not the configured ones.
    pub detailed_metric: bool,
    /// `metadata`, as dynamic metadata returns it.
    pub metadata: Option<prost_types::Struct>,
    /// The metric labels of the rule when no request value stands in them (set once the
    /// domain is built): the request path then builds no labels.
    pub metric_labels: Option<LimitLabels>,
    /// How RLQS clients enforce their share of the rule's limit.
    pub rlqs_strategy: RlqsStrategy,
}

/// The strategy an RLQS assignment carries for a rule (`rlqs_strategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RlqsStrategy {
    /// Envoy's token bucket, refilled with the share over the period.
    #[default]
    TokenBucket,
    /// Envoy's requests per time unit: the share per unit (a limit of one whole unit).
    RequestsPerTimeUnit,
}

impl RlqsStrategy {
    /// The YAML names.
    pub fn parse(name: &str) -> Option<RlqsStrategy> {
        match name {
            "token_bucket" => Some(RlqsStrategy::TokenBucket),
            "requests_per_time_unit" => Some(RlqsStrategy::RequestsPerTimeUnit),
            _ => None,
        }
    }
}

/// One limit of a rule, with its `name`; `limit` is `None` for `unlimited: true`.
#[derive(Debug, Clone, PartialEq)]
pub struct NamedLimit {
    pub name: Option<String>,
    pub limit: Option<Limit>,
}

impl Rule {
    /// `unlimited: true`: always OK, never stored.
    pub fn is_unlimited(&self) -> bool {
        self.limits.iter().any(|named| named.limit.is_none())
    }
}

/// The rule a descriptor falls under, and how each of its entries matched.
#[derive(Debug)]
pub struct Match<'a> {
    pub rule: &'a Rule,
    /// One per entry; descriptors rarely have more than four, which take no allocation.
    pub levels: SmallVec<[MatchedLevel<'a>; 4]>,
}

impl Match<'_> {
    /// The (key, value) pairs the store counts under.
    pub fn counted_entries(&self) -> impl Iterator<Item = (&str, &str)> {
        self.levels.iter().map(|l| (l.key, l.counted_value()))
    }
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
        let mut levels = SmallVec::new();
        for (index, (key, value)) in entries.enumerate() {
            let (node, configured) = level.by_key.get(key)?.find(value)?;
            levels.push(MatchedLevel {
                key,
                value,
                configured,
                share_threshold: node.share_threshold,
                value_to_metric: node.value_to_metric,
            });
            if index == last {
                return node.rule.as_ref().map(|rule| Match { rule, levels });
            }
            level = &node.children;
        }
        None
    }

    /// Matches `entries` as `resolve` does; when no rule matches them all, matches them less
    /// the entries a modifier of the domain reads, keeping the match only if a limit of the
    /// rule found reads one of them (such an entry names a class of traffic, not a descriptor).
    pub fn resolve_reading<'a>(&'a self, entries: &[(&'a str, &'a str)]) -> Option<Match<'a>> {
        if let Some(found) = self.resolve(entries.iter().copied()) {
            return Some(found);
        }
        if !entries.iter().any(|(key, _)| self.reads_entry(key)) {
            return None;
        }
        let kept: SmallVec<[(&str, &str); 8]> = entries
            .iter()
            .copied()
            .filter(|(key, _)| !self.reads_entry(key))
            .collect();
        let found = self.resolve(kept.into_iter())?;
        let reads = found
            .rule
            .limits
            .iter()
            .filter_map(|named| named.limit.as_ref())
            .any(|limit| {
                limit
                    .modifiers
                    .entry_keys()
                    .any(|key| entries.iter().any(|(k, _)| *k == key))
            });
        reads.then_some(found)
    }

    /// Whether a modifier of the domain reads the entry `key` rather than matching it.
    pub fn reads_entry(&self, key: &str) -> bool {
        self.read_entries.iter().any(|read| read == key)
    }

    /// Notes the entries the domain's modifiers read (`read_entries`).
    pub(crate) fn note_read_entries(&mut self) {
        let mut read: Vec<String> = Vec::new();
        for rule in self.rules() {
            for limit in rule.limits.iter().filter_map(|named| named.limit.as_ref()) {
                for key in limit.modifiers.entry_keys() {
                    if !read.iter().any(|k| k == key) {
                        read.push(key.to_string());
                    }
                }
            }
        }
        self.read_entries = read;
    }

    /// Sets the metric labels of every rule whose labels take no value from requests.
    pub(crate) fn label_rules(&mut self) {
        let mut path = Vec::new();
        self.root.label_rules(&self.name, &mut path);
    }

    /// Every rule of the domain, in tree order.
    pub fn rules(&self) -> Vec<&Rule> {
        let mut rules = Vec::new();
        self.root.collect_rules(&mut rules);
        rules
    }
}

impl KeyNodes {
    /// The node `value` matches, and that node's configured value (`None`: value-less).
    fn find<'a>(&'a self, value: &'a str) -> Option<(&'a Node, Option<&'a str>)> {
        if let Some(node) = self.exact.get(value) {
            return Some((node, Some(value)));
        }
        if let Some((pattern, node)) = self.wildcards.find(value) {
            return Some((node, Some(pattern.as_str())));
        }
        self.any_value.as_deref().map(|node| (node, None))
    }
}

impl Level {
    /// `path`: the levels from the root to this one, each matched by its configured value
    /// (which is what the labels of a rule without request values are made of).
    fn label_rules<'a>(&'a mut self, domain: &str, path: &mut Vec<MatchedLevel<'a>>) {
        for (key, nodes) in &mut self.by_key {
            let exact = nodes.exact.iter_mut().map(|(v, n)| (Some(v.as_str()), n));
            let wildcards = nodes
                .wildcards
                .iter_mut()
                .map(|(p, n)| (Some(p.as_str()), n));
            let any = nodes.any_value.as_deref_mut().map(|n| (None, n));
            for (configured, node) in exact.chain(wildcards).chain(any) {
                path.push(MatchedLevel {
                    key,
                    value: configured.unwrap_or_default(),
                    configured,
                    share_threshold: node.share_threshold,
                    value_to_metric: node.value_to_metric,
                });
                if let Some(rule) = &mut node.rule {
                    let labels = LimitLabels::of_match(domain, path, rule.detailed_metric);
                    rule.metric_labels = (!labels.from_request).then_some(labels);
                }
                node.children.label_rules(domain, path);
                path.pop();
            }
        }
    }

    fn collect_named(&self, out: &mut std::collections::HashSet<(String, String)>) {
        for (key, nodes) in &self.by_key {
            for (value, node) in &nodes.exact {
                out.insert((key.clone(), value.clone()));
                node.children.collect_named(out);
            }
            let others = nodes.wildcards.iter().map(|(_, node)| node);
            for node in others.chain(nodes.any_value.as_deref()) {
                node.children.collect_named(out);
            }
        }
    }

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

#[cfg(test)]
mod tests {
    use crate::{load_str, LoadOptions};
    use sluice_core::labels::LimitLabels;

    const CONFIG: &str = r#"
domain: d
descriptors:
  - key: exact
    value: a
    rate_limit: { unit: second, requests_per_unit: 1 }
    descriptors:
      - key: any
        rate_limit: { unit: second, requests_per_unit: 1 }
  - key: wild
    value: "pre*"
    rate_limit: { unit: second, requests_per_unit: 1 }
  - key: shared
    value: "s*"
    share_threshold: true
    value_to_metric: true
    rate_limit: { unit: second, requests_per_unit: 1 }
  - key: valued
    value_to_metric: true
    rate_limit: { unit: second, requests_per_unit: 1 }
  - key: detailed
    detailed_metric: true
    rate_limit: { unit: second, requests_per_unit: 1 }
"#;

    /// The labels fixed at load time are the ones the request path would build, and rules
    /// whose labels carry request values have none fixed.
    #[test]
    fn fixed_metric_labels_match_the_labels_of_a_request() {
        let config = load_str("d.yaml", CONFIG, LoadOptions::default()).expect("config loads");
        let domain = config.domain("d").expect("domain d");
        let requests: [&[(&str, &str)]; 6] = [
            &[("exact", "a")],
            &[("exact", "a"), ("any", "x")],
            &[("wild", "prefix")],
            &[("shared", "sx")],
            &[("valued", "v")],
            &[("detailed", "v")],
        ];
        let mut fixed = 0;
        for entries in requests {
            let matched = domain
                .resolve(entries.iter().copied())
                .expect("request matches");
            let rule = matched.rule;
            let built = LimitLabels::of_match("d", &matched.levels, rule.detailed_metric);
            if built.from_request {
                assert_eq!(rule.metric_labels, None, "{entries:?}");
            } else {
                assert_eq!(rule.metric_labels.as_ref(), Some(&built), "{entries:?}");
                fixed += 1;
            }
        }
        assert_eq!(fixed, 4);
    }
}
