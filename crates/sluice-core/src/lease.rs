//! Leases as a request carries them (docs/concurrency.md): the token sluice issues
//! to a request that acquires leases, returned in the response's dynamic metadata under
//! `sluice.lease`, and the descriptor entry of the same key that a release sends it back in
//! (Envoy: a `metadata` action reading it, in a policy with `apply_on_stream_done`). The
//! entry is set aside before matching, so a release matches the rule its acquire did.

use std::sync::atomic::{AtomicU64, Ordering};

/// The descriptor entry key of a release, and the dynamic metadata field of the token.
pub const LEASE_KEY: &str = "sluice.lease";

/// The tokens of one process: distinct in it (a bijection of a counter), and across
/// processes and restarts but for chance (a random key; 2^-64 a pair).
pub struct LeaseTokens {
    key: u64,
    next: AtomicU64,
}

impl LeaseTokens {
    pub fn new() -> LeaseTokens {
        LeaseTokens {
            key: unique_process_id(),
            next: AtomicU64::new(0),
        }
    }

    /// A token no other request of this process got.
    pub fn issue(&self) -> u64 {
        mix(self.next.fetch_add(1, Ordering::Relaxed) ^ self.key)
    }
}

impl Default for LeaseTokens {
    fn default() -> Self {
        LeaseTokens::new()
    }
}

/// A number distinct across processes, replicas and restarts (for ids that must not collide
/// in a shared store: lease tokens, sliding-log nonces, RLQS client ids).
pub fn unique_process_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    hasher.finish()
}

/// SplitMix64's finaliser: a bijection of u64, so distinct counters give distinct tokens.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A token as the response writes it: 16 lower-case hex digits.
pub fn format_token(token: u64) -> String {
    format!("{token:016x}")
}

/// A token a release sent back; `None` when it is not 16 hex digits.
pub fn parse_token(text: &str) -> Option<u64> {
    if text.len() != 16 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(text, 16).ok()
}

/// Whether an entry takes part in matching: every one but a release's token.
pub fn is_matched(key: &str) -> bool {
    key != LEASE_KEY
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_distinct_and_round_trip() {
        let tokens = LeaseTokens::new();
        let issued: std::collections::HashSet<u64> = (0..10_000).map(|_| tokens.issue()).collect();
        assert_eq!(issued.len(), 10_000);
        for token in issued.into_iter().take(100) {
            assert_eq!(parse_token(&format_token(token)), Some(token));
        }
        assert_eq!(parse_token("00000000000000ab"), Some(0xab));
        for bad in [
            "",
            "ab",
            "00000000000000ag",
            "000000000000000ab",
            "+0000000000000ab",
        ] {
            assert_eq!(parse_token(bad), None, "{bad}");
        }
    }
}
