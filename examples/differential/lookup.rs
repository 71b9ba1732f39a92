//! The rule a descriptor reaches, matched two ways, to tell when they part: as
//! envoyproxy/ratelimit matches (a level's nodes found by the string `key + "_" + value`, so
//! the entry `api=key_c` finds the node `api_key: c`, and a wildcard pattern is matched
//! against that string), and as sluice matches (key and value apart).

use crate::generate::{Config, Node};

/// The node with a limit a descriptor's last entry reaches, matched as the reference does.
pub fn by_joined_string<'a>(
    config: &'a Config,
    domain: &str,
    entries: &[(String, String)],
) -> Option<&'a Node> {
    walk(config, domain, entries, |level, key, value| {
        find_joined(level, key, value).map(|(n, _)| n)
    })
}

/// The values the reference's key holds for `entries`: each entry's own, or the pattern of
/// the `share_threshold` wildcard node it matched.
pub fn key_values(config: &Config, domain: &str, entries: &[(String, String)]) -> Vec<String> {
    let mut level: Vec<&Node> = config.top_level(domain);
    let mut values: Vec<String> = entries.iter().map(|(_, v)| v.clone()).collect();
    for (i, (key, value)) in entries.iter().enumerate() {
        let Some((node, by_pattern)) = find_joined(&level, key, value) else {
            break;
        };
        if by_pattern && node.share_threshold {
            // The reference trims `key_` (the entry's key) off the node's joined pattern.
            let pattern = joined_key(node);
            values[i] = pattern
                .strip_prefix(&format!("{key}_"))
                .unwrap_or(&pattern)
                .to_string();
        }
        level = node.children.iter().collect();
    }
    values
}

/// The nodes the reference walks for `entries`, as far as it finds one.
pub fn path_by_joined_string<'a>(
    config: &'a Config,
    domain: &str,
    entries: &[(String, String)],
) -> Vec<&'a Node> {
    let mut level: Vec<&Node> = config.top_level(domain);
    let mut path = Vec::new();
    for (key, value) in entries {
        let Some((node, _)) = find_joined(&level, key, value) else {
            break;
        };
        path.push(node);
        level = node.children.iter().collect();
    }
    path
}

/// The node of `level` the reference finds for an entry, and whether a wildcard found it.
fn find_joined<'a>(level: &[&'a Node], key: &str, value: &str) -> Option<(&'a Node, bool)> {
    let joined = format!("{key}_{value}");
    let exact = level.iter().copied().find(|n| joined_key(n) == joined);
    if let Some(node) = exact {
        return Some((node, false));
    }
    let pattern = level
        .iter()
        .copied()
        .find(|n| joined_key(n).contains('*') && wildcard(&joined_key(n), &joined));
    if let Some(node) = pattern {
        return Some((node, true));
    }
    level
        .iter()
        .copied()
        .find(|n| joined_key(n) == key)
        .map(|n| (n, false))
}

/// The node with a limit a descriptor's last entry reaches, key and value matched apart.
pub fn by_key_and_value<'a>(
    config: &'a Config,
    domain: &str,
    entries: &[(String, String)],
) -> Option<&'a Node> {
    walk(config, domain, entries, |level, key, value| {
        let of_key = || level.iter().copied().filter(|n| n.key == key);
        of_key()
            .find(|n| n.value.as_deref() == Some(value))
            .or_else(|| {
                of_key()
                    .find(|n| n.is_wildcard() && wildcard(n.value.as_deref().unwrap_or(""), value))
            })
            .or_else(|| of_key().find(|n| n.value.is_none()))
    })
}

/// Walks the domain's tree an entry at a time with `find`; the node at the last entry, when
/// it has a limit (no fallback to a parent's).
fn walk<'a>(
    config: &'a Config,
    domain: &str,
    entries: &[(String, String)],
    find: impl Fn(&[&'a Node], &str, &str) -> Option<&'a Node>,
) -> Option<&'a Node> {
    let mut level: Vec<&'a Node> = config.top_level(domain);
    if level.is_empty() {
        return None;
    }
    for (i, (key, value)) in entries.iter().enumerate() {
        let node = find(&level, key, value)?;
        if i == entries.len() - 1 {
            return node.limit.as_ref().map(|_| node);
        }
        if node.children.is_empty() {
            return None;
        }
        level = node.children.iter().collect();
    }
    None
}

/// A node's key in the reference's map: `key`, or `key_value`.
fn joined_key(node: &Node) -> String {
    match node.value.as_deref() {
        Some(value) if !value.is_empty() => format!("{}_{value}", node.key),
        _ => node.key.clone(),
    }
}

/// Whether `text` matches `pattern`, each `*` standing for any run of characters.
pub fn wildcard(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if parts.len() == 1 {
        return pattern == text;
    }
    if !text.starts_with(first) || !text[first.len()..].ends_with(last) {
        return false;
    }
    let mut rest = &text[first.len()..text.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}
