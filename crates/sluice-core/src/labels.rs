//! What a limit's metric labels are made of, shared by `config` (which fixes the labels of
//! rules at load time) and `metrics` (which counts under them): how each entry of a descriptor
//! matched (`MatchedLevel`), and the labels built from that by envoyproxy/ratelimit's
//! stats-key rules (`LimitLabels`), with a slot the metrics keep their series' handle in
//! (`HandleSlot`). Depends on nothing else in the crate.

use std::any::Any;
use std::sync::{Arc, OnceLock};

/// How one entry matched a node.
#[derive(Debug, Clone, Copy)]
pub struct MatchedLevel<'a> {
    pub key: &'a str,
    /// The request's value.
    pub value: &'a str,
    /// The node's value: the same value, a wildcard pattern, or `None` for a value-less key.
    pub configured: Option<&'a str>,
    pub share_threshold: bool,
    pub value_to_metric: bool,
}

impl<'a> MatchedLevel<'a> {
    /// The value the entry is counted under: the pattern when `share_threshold` makes every
    /// matching value share one counter, else the request's value.
    pub fn counted_value(&self) -> &'a str {
        match self.configured {
            Some(pattern) if self.share_threshold => pattern,
            _ => self.value,
        }
    }

    /// The value the entry stands under in metrics (envoyproxy/ratelimit's stats key): the
    /// request's value with `detailed_metric` (on the limit) or `value_to_metric` (on the node),
    /// except that a shared wildcard pattern wins; else the configured value.
    pub fn metric_value(&self, detailed: bool) -> Option<&'a str> {
        match self.configured {
            Some(pattern) if self.share_threshold => Some(pattern),
            _ if detailed || self.value_to_metric => Some(self.value),
            configured => configured,
        }
    }
}

/// Where the metrics keep the handle of a label set's series once found, so that a rule's
/// labels (fixed at load) reach their series without a lookup on every decision. It belongs
/// to one owner (a number the owner chose: a replay runs two services on one process); a
/// copy starts empty; it takes no part in equality or hashing.
#[derive(Default)]
pub struct HandleSlot(OnceLock<(usize, Arc<dyn Any + Send + Sync>)>);

impl HandleSlot {
    /// The handle `owner` kept here, if it kept one of type `T`.
    pub fn get<T: Any>(&self, owner: usize) -> Option<&T> {
        let (kept_by, handle) = self.0.get()?;
        (*kept_by == owner).then(|| handle.downcast_ref::<T>())?
    }

    /// Keeps `handle` for `owner`, unless an owner kept one already.
    pub fn keep(&self, owner: usize, handle: Arc<dyn Any + Send + Sync>) {
        let _ = self.0.set((owner, handle));
    }
}

impl Clone for HandleSlot {
    fn clone(&self) -> Self {
        HandleSlot::default()
    }
}

impl PartialEq for HandleSlot {
    fn eq(&self, _: &HandleSlot) -> bool {
        true
    }
}

impl Eq for HandleSlot {}

impl std::hash::Hash for HandleSlot {
    fn hash<H: std::hash::Hasher>(&self, _: &mut H) {}
}

impl std::fmt::Debug for HandleSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HandleSlot")
    }
}

/// The labels of one limit's series: `domain`, `key1`, `key2`, the first levels of its stats key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LimitLabels {
    pub domain: String,
    pub key1: String,
    pub key2: Option<String>,
    /// The labels carry values taken from requests (detailed_metric, value_to_metric, a limit
    /// override's keys): their number is bounded.
    pub from_request: bool,
    /// The whole sanitised stats key (`domain.key_value.subkey`): statsd's stat names.
    pub stats_key: String,
    /// The metrics' handle of these labels' series.
    pub series: HandleSlot,
}

impl LimitLabels {
    /// The labels of a configured limit, by envoyproxy/ratelimit's stats-key rules: the config
    /// path, request values with `detailed_metric` or `value_to_metric`, the pattern with
    /// `share_threshold`.
    pub fn of_match(domain: &str, levels: &[MatchedLevel<'_>], detailed: bool) -> LimitLabels {
        let mut stats_key = domain.to_string();
        for level in levels {
            stats_key.push('.');
            stats_key.push_str(level.key);
            if let Some(value) = level.metric_value(detailed).filter(|v| !v.is_empty()) {
                stats_key.push('_');
                stats_key.push_str(value);
            }
        }
        let from_request = levels.iter().any(|l| {
            let shared = l.share_threshold && l.configured.is_some();
            !shared && (detailed || l.value_to_metric)
        });
        LimitLabels::of_stats_key(&stats_key, from_request)
    }

    /// The labels of a client's limit override: entry keys only, never values, so overrides
    /// cannot create a series per value (the reference server's leak).
    pub fn of_override<'a>(domain: &str, keys: impl Iterator<Item = &'a str>) -> LimitLabels {
        let mut stats_key = domain.to_string();
        for key in keys.take(2) {
            stats_key.push('.');
            stats_key.push_str(key);
        }
        LimitLabels::of_stats_key(&stats_key, true)
    }

    /// The labels envoyproxy/ratelimit's Prometheus mapping gives the stats key
    /// `domain.level1.level2...`: sanitised (`sanitize_stat_name`), then its first three
    /// dot-separated parts are `domain`, `key1` and `key2` (so a value with a dot that is not
    /// an IPv4 address's spreads over two labels, as in the reference).
    fn of_stats_key(stats_key: &str, from_request: bool) -> LimitLabels {
        let sanitized = sanitize_stat_name(stats_key);
        let mut parts = sanitized.split('.');
        LimitLabels {
            domain: parts.next().unwrap_or_default().to_string(),
            key1: parts.next().unwrap_or_default().to_string(),
            key2: parts.next().map(str::to_string),
            from_request,
            stats_key: sanitized.clone(),
            series: Default::default(),
        }
    }
}

/// envoyproxy/ratelimit's sanitising of a stats name: `:` and `|` become `_`, and so do the
/// dots of every IPv4 address (`\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}`, leftmost first).
pub fn sanitize_stat_name(name: &str) -> String {
    let mut out: Vec<u8> = name
        .bytes()
        .map(|b| if b == b':' || b == b'|' { b'_' } else { b })
        .collect();
    let mut at = 0;
    while at < out.len() {
        match ipv4_at(&out, at) {
            Some((dots, end)) => {
                for dot in dots {
                    out[dot] = b'_';
                }
                at = end;
            }
            None => at += 1,
        }
    }
    // Only ASCII bytes were replaced by ASCII bytes: still UTF-8.
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// An IPv4-shaped match starting at `start`: the positions of its three dots and its end.
fn ipv4_at(bytes: &[u8], start: usize) -> Option<([usize; 3], usize)> {
    let digits_from = |at: usize| {
        bytes[at.min(bytes.len())..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count()
    };
    let mut dots = [0; 3];
    let mut at = start;
    for dot in &mut dots {
        // A group followed by a dot is its whole run of digits (at most 3).
        let run = digits_from(at);
        if run == 0 || run > 3 || bytes.get(at + run) != Some(&b'.') {
            return None;
        }
        *dot = at + run;
        at += run + 1;
    }
    let last = digits_from(at);
    (last > 0).then_some((dots, at + last.min(3)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn level<'a>(key: &'a str, value: &'a str, configured: Option<&'a str>) -> MatchedLevel<'a> {
        MatchedLevel {
            key,
            value,
            configured,
            share_threshold: false,
            value_to_metric: false,
        }
    }

    #[test]
    fn labels_follow_the_reference_stats_key() {
        let levels = [
            level("key1", "value1", Some("value1")),
            level("subkey1", "x", None),
        ];
        let labels = LimitLabels::of_match("d", &levels, false);
        assert_eq!(
            (labels.key1.as_str(), labels.key2.as_deref()),
            ("key1_value1", Some("subkey1"))
        );
        assert!(!labels.from_request);
        let detailed = LimitLabels::of_match("d", &levels, true);
        assert_eq!(detailed.key2.as_deref(), Some("subkey1_x"));
        assert!(detailed.from_request);
        let mut shared = level("files", "files/a", Some("files/*"));
        shared.share_threshold = true;
        shared.value_to_metric = true;
        let labels = LimitLabels::of_match("d", &[shared], false);
        assert_eq!(labels.key1, "files_files/*");
        assert!(
            !labels.from_request,
            "a shared pattern is bounded by the config"
        );
    }

    /// The reference's `SanitizeStatName` cases, and what its mapping makes of dots.
    #[test]
    fn labels_are_sanitised_and_split_as_the_reference_maps_them() {
        assert_eq!(sanitize_stat_name("a:b|c"), "a_b_c");
        assert_eq!(
            sanitize_stat_name("d.remote_address_10.0.0.1.path"),
            "d.remote_address_10_0_0_1.path"
        );
        assert_eq!(sanitize_stat_name("1234.5.6.7"), "1234_5_6_7");
        assert_eq!(sanitize_stat_name("1.2.3.4.5.6.7.8"), "1_2_3_4.5_6_7_8");
        assert_eq!(sanitize_stat_name("v1.2.3"), "v1.2.3");
        let ip = level("remote_address", "192.168.0.1", None);
        let labels = LimitLabels::of_match("d", &[ip], true);
        assert_eq!(labels.key1, "remote_address_192_168_0_1");
        let host = level("host", "api.example.com", None);
        let labels = LimitLabels::of_match("d", &[host], true);
        assert_eq!(
            (labels.key1.as_str(), labels.key2.as_deref()),
            ("host_api", Some("example"))
        );
    }
}
