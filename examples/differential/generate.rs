//! Seeded generation of what the differential run sends: configs in envoyproxy/ratelimit's
//! format (several domains, nested descriptors, exact, wildcard and value-less nodes, every
//! unit, small limits including 0, `unlimited`, `shadow_mode`, `quota_mode`, `replaces`,
//! `share_threshold`, the metric flags and `metadata`) and request sequences over them (one to
//! three descriptors, the same one twice, `hits_addend` 0/1/3 on the request and on a
//! descriptor, limit overrides including 0, unknown domains and keys, empty values and keys,
//! descriptors without entries). The same seed gives the same config and requests.

use std::fmt;

use serde_yaml::{Mapping, Value};

/// A small deterministic generator (SplitMix64): no dependency, the same stream everywhere.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x5DEE_CE66_D1CE_4E5B)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// True with probability `percent` in 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next_u64() % 100 < percent
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// The units of Envoy's `RateLimitUnit`, by proto name and number.
pub const UNITS: [(&str, i32); 7] = [
    ("second", 1),
    ("minute", 2),
    ("hour", 3),
    ("day", 4),
    ("month", 5),
    ("year", 6),
    ("week", 7),
];

/// The proto number of a unit name.
pub fn unit_number(name: &str) -> i32 {
    UNITS
        .iter()
        .find(|(n, _)| *n == name)
        .map_or(0, |(_, number)| *number)
}

/// A unit's length in seconds, as both servers count it (a month is 30 days).
pub fn unit_seconds(number: i32) -> u64 {
    match number {
        1 => 1,
        2 => 60,
        3 => 3_600,
        4 => 86_400,
        5 => 30 * 86_400,
        6 => 365 * 86_400,
        7 => 7 * 86_400,
        _ => 0,
    }
}

const KEYS: [&str; 5] = ["api", "api_key", "user", "path", "tier"];
const VALUES: [&str; 6] = ["a", "b", "c", "key_c", "x1", "ab"];
/// Wildcard values of every shape: a prefix, a suffix, an inner `*`, `*` alone, two `*`.
const PATTERNS: [&str; 6] = ["a*", "*c", "k*c", "*", "x*1", "*b*"];
const NAMES: [&str; 4] = ["alpha", "beta", "gamma", "delta"];

/// A configured limit.
#[derive(Debug, Clone)]
pub struct RuleLimit {
    pub unit: &'static str,
    pub requests_per_unit: u32,
    pub unlimited: bool,
    pub name: Option<&'static str>,
    pub replaces: Vec<&'static str>,
}

/// A descriptor node of a generated config.
#[derive(Debug, Clone)]
pub struct Node {
    pub key: String,
    pub value: Option<String>,
    pub limit: Option<RuleLimit>,
    pub shadow_mode: bool,
    pub quota_mode: bool,
    pub share_threshold: bool,
    pub detailed_metric: bool,
    pub value_to_metric: bool,
    pub metadata: Option<Value>,
    pub children: Vec<Node>,
}

impl Node {
    pub fn is_wildcard(&self) -> bool {
        self.value.as_deref().is_some_and(|v| v.contains('*'))
    }
}

/// One config file: a domain and its top-level nodes.
#[derive(Debug, Clone)]
pub struct ConfigFile {
    pub name: String,
    pub domain: String,
    pub nodes: Vec<Node>,
}

/// A generated config: its files, in the order both servers load them (by file name).
#[derive(Debug, Clone)]
pub struct Config {
    pub files: Vec<ConfigFile>,
}

impl Config {
    /// The domains, once each.
    pub fn domains(&self) -> Vec<&str> {
        let mut domains: Vec<&str> = Vec::new();
        for file in &self.files {
            if !domains.contains(&file.domain.as_str()) {
                domains.push(&file.domain);
            }
        }
        domains
    }

    /// A domain's top-level nodes across its files, in load order.
    pub fn top_level(&self, domain: &str) -> Vec<&Node> {
        self.files
            .iter()
            .filter(|f| f.domain == domain)
            .flat_map(|f| f.nodes.iter())
            .collect()
    }
}

/// A config for `seed`; with `split_domains`, each domain's top level is spread over two
/// files of the same domain (`MERGE_DOMAIN_CONFIG`).
pub fn config(rng: &mut Rng, split_domains: bool) -> Config {
    let mut files = Vec::new();
    for d in 0..2 + rng.below(2) {
        let domain = format!("domain{d}");
        let nodes = level(rng, 0);
        if split_domains && nodes.len() > 1 {
            let cut = 1 + rng.below(nodes.len() - 1);
            let (first, second) = nodes.split_at(cut);
            files.push(file(format!("{domain}-a"), &domain, first.to_vec()));
            files.push(file(format!("{domain}-b"), &domain, second.to_vec()));
        } else {
            files.push(file(domain.clone(), &domain, nodes));
        }
    }
    Config { files }
}

fn file(name: String, domain: &str, nodes: Vec<Node>) -> ConfigFile {
    ConfigFile {
        name,
        domain: domain.to_string(),
        nodes,
    }
}

/// One level of nodes with distinct (key, value) pairs.
fn level(rng: &mut Rng, depth: usize) -> Vec<Node> {
    let mut nodes: Vec<Node> = Vec::new();
    let count = if depth == 0 {
        3 + rng.below(5)
    } else {
        1 + rng.below(3)
    };
    for _ in 0..count * 2 {
        if nodes.len() == count {
            break;
        }
        let key = rng.pick(&KEYS).to_string();
        let value = match rng.below(10) {
            0..=2 => None,
            3..=6 => Some(rng.pick(&VALUES).to_string()),
            _ => Some(rng.pick(&PATTERNS).to_string()),
        };
        if nodes.iter().any(|n| n.key == key && n.value == value) {
            continue;
        }
        nodes.push(node(rng, key, value, depth));
    }
    nodes
}

fn node(rng: &mut Rng, key: String, value: Option<String>, depth: usize) -> Node {
    let wildcard = value.as_deref().is_some_and(|v| v.contains('*'));
    let limit = rng.chance(75).then(|| rule_limit(rng));
    let limited = limit.as_ref().is_some_and(|l| !l.unlimited);
    let children = if depth < 2 && rng.chance(40) {
        level(rng, depth + 1)
    } else {
        Vec::new()
    };
    Node {
        key,
        value,
        shadow_mode: limited && rng.chance(12),
        quota_mode: limited && rng.chance(12),
        share_threshold: wildcard && rng.chance(50),
        detailed_metric: rng.chance(10),
        value_to_metric: rng.chance(10),
        metadata: rng.chance(20).then(|| metadata(rng)),
        limit,
        children,
    }
}

fn rule_limit(rng: &mut Rng) -> RuleLimit {
    let unlimited = rng.chance(6);
    let name = rng.chance(40).then(|| *rng.pick(&NAMES));
    let replaces = if rng.chance(15) {
        let other = *rng.pick(&NAMES);
        (Some(other) != name).then_some(other).into_iter().collect()
    } else {
        Vec::new()
    };
    let unit = match rng.below(20) {
        0..=6 => "second",
        7..=12 => "minute",
        13..=14 => "hour",
        15..=16 => "day",
        17 => "week",
        18 => "month",
        _ => "year",
    };
    RuleLimit {
        unit,
        requests_per_unit: *rng.pick(&[0, 1, 1, 2, 2, 3, 5, 10]),
        unlimited,
        name,
        replaces,
    }
}

fn metadata(rng: &mut Rng) -> Value {
    let mut map = Mapping::new();
    let tier = *rng.pick(&["gold", "silver"]);
    map.insert("tier".into(), tier.into());
    if rng.chance(50) {
        let mut inner = Mapping::new();
        inner.insert(
            (*rng.pick(&["a", "b"])).into(),
            Value::from(rng.below(3) as u64),
        );
        map.insert("limits".into(), Value::Mapping(inner));
    }
    Value::Mapping(map)
}

/// A file's YAML text.
pub fn yaml(file: &ConfigFile) -> String {
    let mut root = Mapping::new();
    root.insert("domain".into(), file.domain.clone().into());
    root.insert("descriptors".into(), nodes_yaml(&file.nodes));
    serde_yaml::to_string(&Value::Mapping(root)).unwrap_or_default()
}

fn nodes_yaml(nodes: &[Node]) -> Value {
    Value::Sequence(nodes.iter().map(node_yaml).collect())
}

fn node_yaml(node: &Node) -> Value {
    let mut map = Mapping::new();
    map.insert("key".into(), node.key.clone().into());
    if let Some(value) = &node.value {
        map.insert("value".into(), value.clone().into());
    }
    if let Some(limit) = &node.limit {
        let mut l = Mapping::new();
        if limit.unlimited {
            l.insert("unlimited".into(), true.into());
        } else {
            l.insert("unit".into(), limit.unit.into());
            l.insert("requests_per_unit".into(), limit.requests_per_unit.into());
        }
        if let Some(name) = limit.name {
            l.insert("name".into(), name.into());
        }
        if !limit.replaces.is_empty() {
            let replaces = limit
                .replaces
                .iter()
                .map(|name| {
                    let mut r = Mapping::new();
                    r.insert("name".into(), (*name).into());
                    Value::Mapping(r)
                })
                .collect();
            l.insert("replaces".into(), Value::Sequence(replaces));
        }
        map.insert("rate_limit".into(), Value::Mapping(l));
    }
    for (flag, on) in [
        ("shadow_mode", node.shadow_mode),
        ("quota_mode", node.quota_mode),
        ("share_threshold", node.share_threshold),
        ("detailed_metric", node.detailed_metric),
        ("value_to_metric", node.value_to_metric),
    ] {
        if on {
            map.insert(flag.into(), true.into());
        }
    }
    if let Some(metadata) = &node.metadata {
        map.insert("metadata".into(), metadata.clone());
    }
    if !node.children.is_empty() {
        map.insert("descriptors".into(), nodes_yaml(&node.children));
    }
    Value::Mapping(map)
}

/// A client's limit override.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Override {
    pub requests_per_unit: u32,
    pub unit: i32,
}

/// A descriptor of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Descriptor {
    pub entries: Vec<(String, String)>,
    pub hits_addend: Option<u64>,
    pub limit: Option<Override>,
}

/// A request of a sequence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub domain: String,
    pub hits_addend: u32,
    pub descriptors: Vec<Descriptor>,
}

impl fmt::Display for Request {
    /// `domain [+N] | k=v,k=v [+N] [limit=N/UNIT] | ...`: a reproducer's line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.domain)?;
        if self.hits_addend != 0 {
            write!(f, " +{}", self.hits_addend)?;
        }
        for d in &self.descriptors {
            let entries: Vec<String> = d.entries.iter().map(|(k, v)| format!("{k}={v}")).collect();
            write!(f, " | {}", entries.join(","))?;
            if let Some(hits) = d.hits_addend {
                write!(f, " +{hits}")?;
            }
            if let Some(limit) = d.limit {
                let unit = UNITS
                    .iter()
                    .find(|(_, n)| *n == limit.unit)
                    .map_or("unknown", |(name, _)| name);
                write!(f, " limit={}/{unit}", limit.requests_per_unit)?;
            }
        }
        Ok(())
    }
}

/// `count` requests over `config`.
pub fn requests(rng: &mut Rng, config: &Config, count: usize) -> Vec<Request> {
    (0..count).map(|_| request(rng, config)).collect()
}

fn request(rng: &mut Rng, config: &Config) -> Request {
    let domains = config.domains();
    let domain = if rng.chance(5) {
        "nowhere".to_string()
    } else {
        rng.pick(&domains).to_string()
    };
    let top = config.top_level(&domain);
    let mut descriptors: Vec<Descriptor> = Vec::new();
    for _ in 0..1 + rng.below(3) {
        let entries = match rng.below(100) {
            0..=14 if !descriptors.is_empty() => {
                let again = rng.pick(&descriptors).clone();
                descriptors.push(again);
                continue;
            }
            0..=79 => walk(rng, &top),
            80..=96 => random_entries(rng),
            97..=98 => vec![(String::new(), "a".to_string())],
            _ => Vec::new(),
        };
        let hits_addend = match rng.below(20) {
            0..=11 => None,
            12..=14 => Some(0),
            15..=16 => Some(1),
            _ => Some(3),
        };
        let limit = rng.chance(10).then(|| Override {
            requests_per_unit: *rng.pick(&[0, 1, 2, 5]),
            unit: rng.pick(&UNITS).1,
        });
        descriptors.push(Descriptor {
            entries,
            hits_addend,
            limit,
        });
    }
    Request {
        domain,
        hits_addend: *rng.pick(&[0, 0, 0, 0, 0, 0, 0, 1, 3, 3]),
        descriptors,
    }
}

/// Entries along a path of the tree, each a value its node matches (mostly).
fn walk(rng: &mut Rng, top: &[&Node]) -> Vec<(String, String)> {
    let mut entries = Vec::new();
    let mut level: Vec<&Node> = top.to_vec();
    while !level.is_empty() {
        let node = *rng.pick(&level);
        entries.push((node.key.clone(), value_for(rng, node)));
        let stop = node.limit.is_some() && rng.chance(60);
        if stop || node.children.is_empty() || rng.chance(10) {
            break;
        }
        level = node.children.iter().collect();
    }
    entries
}

/// A value for `node`: its own, one its pattern matches, or (now and then) another.
fn value_for(rng: &mut Rng, node: &Node) -> String {
    match &node.value {
        _ if rng.chance(8) => rng.pick(&VALUES).to_string(),
        None => (*rng.pick(&["a", "b", "zz", "", "key_c"])).to_string(),
        Some(pattern) if pattern.contains('*') => {
            let fill = *rng.pick(&["", "b", "zz", "_q"]);
            pattern.replacen('*', fill, 1).replace('*', "")
        }
        Some(value) => value.clone(),
    }
}

fn random_entries(rng: &mut Rng) -> Vec<(String, String)> {
    (0..1 + rng.below(2))
        .map(|_| {
            let key = *rng.pick(&["api", "user_", "zz", "api_key", "path", "tier"]);
            let value = *rng.pick(&["a", "", "c", "key_c", "q"]);
            (key.to_string(), value.to_string())
        })
        .collect()
}
