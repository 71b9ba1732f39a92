//! Store keys, built in one place. A descriptor's key is envoyproxy/ratelimit's cache key
//! without its window suffix: `domain_key1_value1_key2_value2_`. The Redis store appends the
//! window start for fixed windows (so the two servers share counters) and the memory store
//! keeps the window in the state.

use std::fmt::Write;

use crate::algorithm::fixed_window;
use crate::limit::{Hit, MICROS_PER_SECOND};

/// The key of a descriptor counted under `entries` (key, value) in `domain`.
pub fn descriptor_key<'a, I>(domain: &str, entries: I) -> String
where
    I: IntoIterator<Item = (&'a str, &'a str)>,
{
    let entries = entries.into_iter();
    let mut key = String::with_capacity(domain.len() + 1 + 32 * entries.size_hint().0);
    key.push_str(domain);
    key.push('_');
    for (name, value) in entries {
        key.push_str(name);
        key.push('_');
        key.push_str(value);
        key.push('_');
    }
    key
}

/// The key of the limit at `index` among a descriptor's several limits (`rate_limits`): the
/// descriptor's key and `#<index>_`. A descriptor with one limit keeps its key as it is.
pub fn limit_key(descriptor_key: &str, index: usize) -> String {
    let mut key = String::with_capacity(descriptor_key.len() + 4);
    key.push_str(descriptor_key);
    // Writing to a String cannot fail.
    let _ = write!(key, "#{index}_");
    key
}

/// The Redis key of `hit` at `now_us`, after `prefix` (`CACHE_KEY_PREFIX`).
/// - fixed_window: `prefix` + descriptor key + window start in seconds, byte-identical to
///   envoyproxy/ratelimit's, so both servers share counters during a migration;
/// - the others, and a fixed window that takes debt (its excess carries over windows):
///   `prefix` + algorithm name + `_` + descriptor key, so a limit whose algorithm changes
///   never reads state of another shape.
pub fn redis_key(prefix: &str, hit: &Hit, now_us: u64) -> String {
    let mut key = String::with_capacity(prefix.len() + hit.key.len() + 24);
    key.push_str(prefix);
    if hit.limit.key_holds_window() {
        key.push_str(&hit.key);
        let start_s = fixed_window::window_start_us(&hit.limit.rate(), now_us) / MICROS_PER_SECOND;
        // Writing to a String cannot fail.
        let _ = write!(key, "{start_s}");
    } else {
        key.push_str(hit.limit.algorithm.as_str());
        key.push('_');
        key.push_str(&hit.key);
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_reference_layout() {
        let key = descriptor_key("domain", [("key1", "value1"), ("key2", "value2")]);
        assert_eq!(key, "domain_key1_value1_key2_value2_");
    }
}

#[cfg(test)]
mod redis_key_tests {
    use super::*;
    use crate::limit::{Algorithm, Limit, Role, Unit};

    #[test]
    fn fixed_window_keys_end_with_the_window_start_in_seconds() {
        let hit = Hit {
            key: descriptor_key("domain", [("key1", "value1")]),
            limit: Limit::fixed_window(10, Unit::Minute),
            cost: 1,
            role: Role::Enforced,
            joins_previous: false,
        };
        // 1234567 s is in the minute starting at 1234560 s.
        let key = redis_key("prefix_", &hit, 1_234_567_000_000);
        assert_eq!(key, "prefix_domain_key1_value1_1234560");
    }

    #[test]
    fn other_keys_carry_the_algorithm() {
        let hit = Hit {
            key: descriptor_key("d", [("k", "v")]),
            limit: Limit {
                algorithm: Algorithm::TokenBucket,
                ..Limit::fixed_window(10, Unit::Second)
            },
            cost: 1,
            role: Role::Enforced,
            joins_previous: false,
        };
        assert_eq!(redis_key("", &hit, 5), "token_bucket_d_k_v_");
    }
}
