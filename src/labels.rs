//! What a limit's metric labels are made of, shared by `config` (which fixes the labels of
//! rules at load time) and `metrics` (which counts under them): how each entry of a descriptor
//! matched (`MatchedLevel`), and the labels built from that by envoyproxy/ratelimit's
//! stats-key rules (`LimitLabels`). Depends on nothing else in the crate.

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

/// The labels of one limit's series: `domain`, `key1`, `key2`, the first levels of its stats key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LimitLabels {
    pub domain: String,
    pub key1: String,
    pub key2: Option<String>,
    /// The labels carry values taken from requests (detailed_metric, value_to_metric, a limit
    /// override's keys): their number is bounded.
    pub from_request: bool,
}

impl LimitLabels {
    /// The labels of a configured limit, by envoyproxy/ratelimit's stats-key rules: the config
    /// path, request values with `detailed_metric` or `value_to_metric`, the pattern with
    /// `share_threshold`.
    pub fn of_match(domain: &str, levels: &[MatchedLevel<'_>], detailed: bool) -> LimitLabels {
        let segment = |level: &MatchedLevel<'_>| match level.metric_value(detailed) {
            Some(value) if !value.is_empty() => format!("{}_{value}", level.key),
            _ => level.key.to_string(),
        };
        let from_request = levels.iter().any(|l| {
            let shared = l.share_threshold && l.configured.is_some();
            !shared && (detailed || l.value_to_metric)
        });
        LimitLabels {
            domain: domain.to_string(),
            key1: levels.first().map(segment).unwrap_or_default(),
            key2: levels.get(1).map(segment),
            from_request,
        }
    }

    /// The labels of a client's limit override: entry keys only, never values, so overrides
    /// cannot create a series per value (the reference server's leak).
    pub fn of_override<'a>(domain: &str, keys: impl Iterator<Item = &'a str>) -> LimitLabels {
        let mut keys = keys;
        LimitLabels {
            domain: domain.to_string(),
            key1: keys.next().unwrap_or_default().to_string(),
            key2: keys.next().map(str::to_string),
            from_request: true,
        }
    }
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
}
