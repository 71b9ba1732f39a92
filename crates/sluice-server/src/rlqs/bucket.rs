//! From an RLQS bucket to a configured limit, and from a share of it to the strategy Envoy
//! enforces. A bucket's (key, value) pairs are a descriptor whose entries are the pairs sorted
//! by key; when that path is not in the config, the other orders of the pairs are tried in
//! lexicographic order (up to 5 pairs), and the first that matches a rule wins. Matching is
//! RLS's: exact values, wildcards, value-less keys, `share_threshold`.

use std::time::Duration;

use sluice_config::Config;
use sluice_config::RlqsStrategy;
use sluice_core::limit::Limit;
use sluice_proto::envoy::r#type::v3::rate_limit_strategy::{
    BlanketRule, RequestsPerTimeUnit, Strategy,
};
use sluice_proto::envoy::r#type::v3::{RateLimitStrategy, TokenBucket};

/// Most pairs whose every order is tried.
const MAX_PERMUTED_PAIRS: usize = 5;

/// What a bucket resolves to.
#[derive(Debug, Clone, PartialEq)]
pub enum Resolved {
    /// A limit shared by every client that reports the bucket, under `budget_key`.
    Limited {
        budget_key: String,
        /// The rule's composite key (`domain.key_value`), for metrics.
        rule: String,
        limit: Limit,
        strategy: RlqsStrategy,
    },
    /// `unlimited: true`: allow all.
    Unlimited { rule: String },
    /// No rule matches.
    Unknown,
}

/// The rule `pairs` fall under in `domain` of `config`.
pub fn resolve(config: &Config, domain: &str, pairs: &[(String, String)]) -> Resolved {
    let Some(tree) = config.domain(domain) else {
        return Resolved::Unknown;
    };
    let mut order: Vec<usize> = (0..pairs.len()).collect();
    order.sort_by(|&a, &b| pairs[a].cmp(&pairs[b]));
    loop {
        let entries = order
            .iter()
            .map(|&i| (pairs[i].0.as_str(), pairs[i].1.as_str()));
        if let Some(matched) = tree.resolve(entries) {
            let rule = matched.rule.full_key.clone();
            // The quota protocol has no call at a request's end: leases cannot be held there,
            // so a lease limit does not apply to a bucket (its rule's rates do).
            let Some(limit) = matched
                .rule
                .limits
                .iter()
                .filter_map(|named| named.limit.clone())
                .find(|limit| !limit.algorithm().leases())
            else {
                return Resolved::Unlimited { rule };
            };
            let mut budget_key = format!("rlqs_{domain}");
            for (key, value) in matched.counted_entries() {
                budget_key.push_str(&format!("_{key}_{value}"));
            }
            return Resolved::Limited {
                budget_key,
                rule,
                limit,
                strategy: matched.rule.rlqs_strategy,
            };
        }
        if pairs.len() > MAX_PERMUTED_PAIRS || !next_permutation(&mut order) {
            return Resolved::Unknown;
        }
    }
}

/// The next order of `items` in lexicographic order; false after the last.
fn next_permutation(items: &mut [usize]) -> bool {
    let Some(pivot) = items.windows(2).rposition(|w| w[0] < w[1]) else {
        return false;
    };
    let Some(successor) = items.iter().rposition(|&x| x > items[pivot]) else {
        return false;
    };
    items.swap(pivot, successor);
    items[pivot + 1..].reverse();
    true
}

/// Allow all or deny all.
pub fn blanket(allow: bool) -> RateLimitStrategy {
    let rule = if allow {
        BlanketRule::AllowAll
    } else {
        BlanketRule::DenyAll
    };
    RateLimitStrategy {
        strategy: Some(Strategy::BlanketRule(rule as i32)),
    }
}

/// A share of `limit` as Envoy's token bucket: `share` per period, in fills of a tenth of it
/// (at least 1), the bucket holding one fill. A client then admits at most its share plus a
/// tenth in any period (a bucket holding the whole share would allow twice the share: a full
/// bucket, then its refill). No share denies all.
pub fn strategy(limit: &Limit, kind: RlqsStrategy, share: u64) -> RateLimitStrategy {
    if share == 0 {
        return blanket(false);
    }
    if kind == RlqsStrategy::RequestsPerTimeUnit {
        return RateLimitStrategy {
            strategy: Some(Strategy::RequestsPerTimeUnit(RequestsPerTimeUnit {
                requests_per_time_unit: share,
                time_unit: limit.unit.proto_number(),
            })),
        };
    }
    let fill = share.div_ceil(FILLS_PER_PERIOD).max(1);
    // fill tokens every period x fill / share, rounded up: never faster than the share.
    let interval_us =
        (u128::from(limit.period_us()) * u128::from(fill)).div_ceil(u128::from(share));
    let tokens = u32::try_from(fill).unwrap_or(u32::MAX);
    RateLimitStrategy {
        strategy: Some(Strategy::TokenBucket(TokenBucket {
            max_tokens: tokens,
            tokens_per_fill: Some(tokens),
            fill_interval: Some(duration(Duration::from_micros(
                u64::try_from(interval_us).unwrap_or(u64::MAX),
            ))),
        })),
    }
}

/// A share is handed out in this many fills per period.
const FILLS_PER_PERIOD: u64 = 10;

/// `d` as a protobuf duration.
pub fn duration(d: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_config::{load_str, LoadOptions};

    const CONFIG: &str = "domain: d
descriptors:
  - key: tenant
    descriptors:
      - key: api
        rate_limit: {unit: minute, requests_per_unit: 1000}
  - key: free
    rate_limit: {unlimited: true}
  - key: user
    value: '*'
    share_threshold: true
    rate_limit: {unit: second, requests_per_unit: 10}
";

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn pairs_match_in_key_order_then_in_the_other_orders() {
        let config = load_str("d.yaml", CONFIG, LoadOptions::default()).unwrap();
        // Sorted, {api, tenant} is not a path; {tenant, api} is.
        let found = resolve(&config, "d", &pairs(&[("api", "x"), ("tenant", "t")]));
        assert!(
            matches!(&found, Resolved::Limited { limit, .. } if limit.requests_per_unit == 1000),
            "{found:?}"
        );
        assert!(matches!(
            resolve(&config, "d", &pairs(&[("free", "y")])),
            Resolved::Unlimited { .. }
        ));
        assert_eq!(
            resolve(&config, "d", &pairs(&[("nope", "y")])),
            Resolved::Unknown
        );
        assert_eq!(
            resolve(&config, "other", &pairs(&[("free", "y")])),
            Resolved::Unknown
        );
        // share_threshold: every user shares one budget.
        let (a, b) = (
            resolve(&config, "d", &pairs(&[("user", "a")])),
            resolve(&config, "d", &pairs(&[("user", "b")])),
        );
        match (a, b) {
            (Resolved::Limited { budget_key: a, .. }, Resolved::Limited { budget_key: b, .. }) => {
                assert_eq!(a, b)
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn permutations_come_in_lexicographic_order() {
        let mut items = vec![0, 1, 2];
        let mut seen = vec![items.clone()];
        while next_permutation(&mut items) {
            seen.push(items.clone());
        }
        assert_eq!(seen.len(), 6);
        assert_eq!(seen[1], [0, 2, 1]);
        assert_eq!(seen[5], [2, 1, 0]);
    }
}
