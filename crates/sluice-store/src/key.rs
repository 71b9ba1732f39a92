//! Store keys, built in one place. A descriptor's key is envoyproxy/ratelimit's cache key
//! without its window suffix: `domain_key1_value1_key2_value2_`. A hit's state is named by
//! that key and its `Shape`: a fixed window's by its window's start (the reference's key, which
//! any limit of the descriptor whose window starts then reads), any other state by its
//! algorithm and every number of its limit (the state's units and its lifetime depend on
//! them), so only the limit that wrote it reads it. Both stores name state alike (the Redis
//! store as text, the memory store as a hash of the same parts), so a limit that changes, by a
//! reload or a descriptor's own `limit` override, never reads state of another shape.

use std::fmt::Write;

use sluice_core::algorithm::Algorithm;
use sluice_core::limit::{Hit, Limit, MICROS_PER_SECOND};

/// What names a hit's state besides its descriptor key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Shape {
    /// A fixed window (without debt): the start of the window holding now, in seconds, as the
    /// reference names its counters. Limits of one descriptor whose windows start at the same
    /// second share the counter, there as here.
    Window { start_s: u64 },
    /// Any other state: its algorithm, its limit's numbers, and the numbers of the
    /// algorithm's own settings (`Parameters::shape`: the burst, the warm-up; 0 where none).
    /// `requests_per_unit` is `None` where the state holds under any limit (a count in a
    /// window from the first hit, read against the limit in force).
    Limited {
        algorithm: Algorithm,
        requests_per_unit: Option<u32>,
        period_s: u64,
        own: [u64; 2],
    },
}

impl Shape {
    /// The shape of `limit`'s state at `now_us`.
    pub fn of(limit: &Limit, now_us: u64) -> Shape {
        let period_us = limit.period_us();
        if limit.key_holds_window() {
            // The fixed window's start (`fixed_window::window_us`), without building the
            // whole rate: this runs on every hit. A calendar's period starts at its own.
            let start_us = match limit.counting.calendar() {
                Some(calendar) => calendar.window_us(now_us).0,
                None => now_us - now_us % period_us.max(1),
            };
            return Shape::Window {
                start_s: start_us / MICROS_PER_SECOND,
            };
        }
        let algorithm = limit.algorithm();
        if !algorithm.key_names_rate() {
            return Shape::Limited {
                algorithm,
                requests_per_unit: None,
                period_s: 0,
                own: [0, 0],
            };
        }
        Shape::Limited {
            algorithm,
            requests_per_unit: (!limit.from_first_hit()).then_some(limit.requests_per_unit),
            period_s: period_us / MICROS_PER_SECOND,
            own: limit.counting.shape(&limit.rate()),
        }
    }
}

/// The Redis key of `hit` at `now_us`, after `prefix` (`CACHE_KEY_PREFIX`):
/// - a fixed window: `prefix` + descriptor key + window start in seconds, byte-identical to
///   envoyproxy/ratelimit's, so both servers share counters during a migration;
/// - any other state, and a fixed window that takes debt (its excess carries over windows):
///   `prefix` + algorithm + `_` + L + `per` + period in seconds + `s_`, then the algorithm's
///   own settings (`Parameters::write_key`: `b` + burst + `_` for the buckets, `w` + warm-up
///   in µs + `c` + cold factor + `_` for `warm_up`), then the descriptor key, e.g.
///   `token_bucket_10per60s_b20_domain_key_value_`; a lease limit's leases outlive a
///   change of its numbers: `concurrency_domain_key_value_`;
/// - a limit with a modifier that keeps keys of its own (`Modifiers::keep_state`): its descriptor key comes first, as a hash
///   tag (`slot_tag`) that its modifier's keys share, so that all live in one Cluster slot:
///   `prefix{domain_key_value_}1700000000`, `prefix{domain_key_value_}token_bucket_10per60s_b20_`;
///   a window from the first hit (Limitador's) is tagged so always, with a modifier or
///   without: Kuadrant's calls add a modifier to a limit (docs/kuadrant.md), and
///   they and `ShouldRateLimit` count one counter. Its count holds under any limit, so its key
///   names the period alone: `prefix{domain_key_value_}fixed_window_per60s_first_`.
pub fn redis_key(prefix: &str, hit: &Hit, now_us: u64) -> String {
    let mut key = String::with_capacity(prefix.len() + hit.key.len() + 48);
    key.push_str(prefix);
    let tagged = hit.limit.modifiers.keep_state() || hit.limit.from_first_hit();
    let descriptor = if tagged {
        push_tag(&mut key, &hit.key)
    } else {
        Some(hit.key.as_str())
    };
    // Writing to a String cannot fail.
    match Shape::of(&hit.limit, now_us) {
        Shape::Window { start_s } => {
            key.push_str(descriptor.unwrap_or_default());
            // The common key: its number written without the formatting machinery.
            key.push_str(itoa::Buffer::new().format(start_s));
        }
        Shape::Limited {
            algorithm,
            requests_per_unit,
            period_s,
            own,
        } => {
            let _ = write!(key, "{algorithm}_");
            if algorithm.key_names_rate() {
                match requests_per_unit {
                    Some(requests) => {
                        let _ = write!(key, "{requests}per{period_s}s_");
                    }
                    None => {
                        let _ = write!(key, "per{period_s}s_");
                    }
                }
            }
            algorithm.write_key(own, &mut key);
            key.push_str(descriptor.unwrap_or_default());
        }
    }
    key
}

/// The Redis key of the replicas' heartbeats (`redis::replicas`): `prefix{sluice_replicas}`,
/// one slot on a Cluster.
pub fn replicas_key(prefix: &str) -> String {
    format!("{prefix}{{sluice_replicas}}")
}

/// The Redis key of a part of what `hit`'s modifiers keep beside its limit (`KeptPart`):
/// `prefix`, the tag its limit's key has, then the part's name, and for a part kept per
/// token `_` and the token's 16 hex digits (`prefix{domain_key_value_}holds`,
/// `prefix{domain_key_value_}settled_<token>`). Named by neither the limit's numbers nor its
/// window: a reload that changes the limit keeps them.
pub fn kept_key(prefix: &str, hit: &Hit, name: &str, token: Option<u64>) -> String {
    match token {
        Some(token) => modifier_key(prefix, hit, &format!("{name}_{token:016x}")),
        None => modifier_key(prefix, hit, name),
    }
}

/// `prefix`, the tag `hit`'s limit's key has, then `name` (and the descriptor key, when the
/// tag is its hash).
fn modifier_key(prefix: &str, hit: &Hit, name: &str) -> String {
    let mut key = String::with_capacity(prefix.len() + hit.key.len() + name.len() + 4);
    key.push_str(prefix);
    let descriptor = push_tag(&mut key, &hit.key);
    key.push_str(name);
    if let Some(descriptor) = descriptor {
        key.push('_');
        key.push_str(descriptor);
    }
    key
}

/// Writes the hash tag of `descriptor_key` (`{...}`, which Redis Cluster hashes alone): the
/// key itself, or, when it holds a brace, 16 hex digits of its FNV-1a hash. Returns what the
/// key must still carry to stay unique: nothing, or the descriptor key after a hashed tag.
fn push_tag<'k>(key: &mut String, descriptor_key: &'k str) -> Option<&'k str> {
    key.push('{');
    if descriptor_key.contains(['{', '}']) || descriptor_key.is_empty() {
        let hash = descriptor_key
            .bytes()
            .fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
                (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
            });
        let _ = write!(key, "{hash:016x}}}");
        Some(descriptor_key)
    } else {
        key.push_str(descriptor_key);
        key.push('}');
        None
    }
}

#[cfg(test)]
mod redis_key_tests {
    use super::*;
    use sluice_core::identity::descriptor_key;
    use sluice_core::limit::{Algorithm, Counting, Limit, Role, Unit};

    #[test]
    fn fixed_window_keys_end_with_the_window_start_in_seconds() {
        let hit = Hit {
            key: descriptor_key("domain", [("key1", "value1")]),
            limit: Limit::fixed_window(10, Unit::Minute),
            cost: 1,
            role: Role::Enforced,
            joins_previous: false,
            lease: None,
        };
        // 1234567 s is in the minute starting at 1234560 s.
        let key = redis_key("prefix_", &hit, 1_234_567_000_000);
        assert_eq!(key, "prefix_domain_key1_value1_1234560");
    }

    #[test]
    fn other_keys_carry_the_algorithm() {
        let hit = Hit {
            key: descriptor_key("d", [("k", "v")]),
            limit: Limit::new(Counting::of(Algorithm::TokenBucket), 10, Unit::Second),
            cost: 1,
            role: Role::Enforced,
            joins_previous: false,
            lease: None,
        };
        assert_eq!(redis_key("", &hit, 5), "token_bucket_10per1s_b10_d_k_v_");
    }

    #[test]
    fn a_windows_shape_is_the_fixed_windows_own_start() {
        let limit = Limit {
            unit_multiplier: 7,
            ..Limit::fixed_window(10, Unit::Minute)
        };
        for now_us in [0, 1, 419_999_999, 420_000_000, 1_700_000_123_456_789] {
            let start_us =
                sluice_core::algorithm::fixed_window::window_start_us(&limit.rate(), now_us);
            let start_s = start_us / MICROS_PER_SECOND;
            assert_eq!(Shape::of(&limit, now_us), Shape::Window { start_s });
        }
    }

    #[test]
    fn keys_name_every_number_of_the_limit_so_shapes_never_share_state() {
        let hit = |limit: Limit| Hit {
            key: descriptor_key("d", [("k", "v")]),
            limit,
            cost: 1,
            role: Role::Enforced,
            joins_previous: false,
            lease: None,
        };
        let leaky =
            |requests| Limit::new(Counting::of(Algorithm::LeakyBucket), requests, Unit::Minute);
        assert_eq!(
            redis_key("", &hit(leaky(10)), 5),
            "leaky_bucket_10per60s_b1_d_k_v_"
        );
        assert_ne!(
            redis_key("", &hit(leaky(10)), 5),
            redis_key("", &hit(leaky(20)), 5)
        );
        let debt = Limit {
            debt: true,
            unit_multiplier: 5,
            ..Limit::fixed_window(10, Unit::Hour)
        };
        assert_eq!(
            redis_key("", &hit(debt), 5),
            "fixed_window_10per18000s_d_k_v_"
        );
        let own = sluice_core::algorithm::warm_up::WarmUpParameters {
            warmup_us: Some(30_000_000),
            cold_factor: None,
        };
        let warm = Limit::new(Counting::WarmUp(own), 10, Unit::Minute);
        assert_eq!(
            redis_key("", &hit(warm), 5),
            "warm_up_10per60s_w30000000c3_d_k_v_"
        );
        // A day's window and a second's share a key only at the day's first second.
        let day = Limit::fixed_window(10, Unit::Day);
        let second = Limit::fixed_window(5, Unit::Second);
        let at = 86_400 * 20_000 * MICROS_PER_SECOND;
        assert_eq!(
            redis_key("", &hit(day.clone()), at),
            redis_key("", &hit(second.clone()), at)
        );
        let later = at + 3 * MICROS_PER_SECOND;
        assert_ne!(
            redis_key("", &hit(day), later),
            redis_key("", &hit(second), later)
        );
    }
}

#[cfg(test)]
mod penalty_key_tests {
    use super::*;
    use sluice_core::limit::{Role, Unit};
    use sluice_core::modifier::penalty::Policy;

    fn penalized(key: &str) -> Hit {
        let policy = Policy {
            after: 1,
            within_us: 1,
            block_ms: 1,
            factor_milli: 1000,
            max_block_ms: 1,
            forget_us: 1,
        };
        Hit {
            key: key.to_string(),
            limit: Limit {
                modifiers: sluice_core::modifier::ModifierSet {
                    penalty: Some(policy),
                    ..Default::default()
                }
                .into(),
                ..Limit::fixed_window(10, Unit::Minute)
            },
            cost: 1,
            role: Role::Enforced,
            joins_previous: false,
            lease: None,
        }
    }

    /// The slot Redis Cluster hashes: the text of the first `{...}` when not empty.
    fn hashed(key: &str) -> &str {
        let Some(open) = key.find('{') else {
            return key;
        };
        match key[open + 1..].find('}') {
            Some(0) | None => key,
            Some(close) => &key[open + 1..open + 1 + close],
        }
    }

    #[test]
    fn a_penalized_limit_and_its_record_share_a_slot_whatever_the_key_holds() {
        for (prefix, descriptor) in [
            ("", "login_user_bob_"),
            ("rl_", "login_user_{bob}_"),
            ("{shared}", "login_user_bob_"),
            ("half{", "login_user_b}ob_"),
        ] {
            let hit = penalized(descriptor);
            let limit = redis_key(prefix, &hit, 1_234_567_000_000);
            let record = kept_key(prefix, &hit, "penalty", None);
            assert_eq!(hashed(&limit), hashed(&record), "{limit} and {record}");
            assert_ne!(limit, record);
        }
        let hit = penalized("login_user_bob_");
        assert_eq!(
            redis_key("", &hit, 1_234_567_000_000),
            "{login_user_bob_}1234560"
        );
        assert_eq!(
            kept_key("", &hit, "penalty", None),
            "{login_user_bob_}penalty"
        );
        let braced = kept_key("", &penalized("a_{b}_"), "penalty", None);
        assert!(braced.ends_with("}penalty_a_{b}_"), "{braced}");
    }
}
