//! What a limit answers when the store cannot decide (`on_store_failure`, else the server's
//! `--failure-mode`): fail the call (gRPC UNAVAILABLE, so Envoy's `failure_mode_deny`
//! decides), admit, deny, or decide in this replica on its share of the limit (the limit
//! divided by the replica count). The store layer that keeps the local share is
//! `sluice-store`'s `breaker`; the service applies the answer per hit.

use std::fmt;

use crate::algorithm::params::Refusal;
use crate::modifier::ModifierPolicy;

/// The answer of a limit whose store failed (by default, as the reference answers:
/// UNAVAILABLE).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Policy {
    /// The call fails with UNAVAILABLE and the reason.
    #[default]
    Unavailable,
    /// The hit is admitted.
    Allow,
    /// The hit is denied.
    Deny,
    /// The replica decides alone, on the limit divided by the replica count.
    LocalShare,
}

impl Policy {
    /// Every policy, by its YAML name.
    pub const ALL: [Policy; 4] = [
        Policy::Unavailable,
        Policy::Allow,
        Policy::Deny,
        Policy::LocalShare,
    ];

    /// The YAML name (`local_share`).
    pub fn as_str(self) -> &'static str {
        match self {
            Policy::Unavailable => "unavailable",
            Policy::Allow => "allow",
            Policy::Deny => "deny",
            Policy::LocalShare => "local_share",
        }
    }

    /// The share of a limit of `limit` one of `replicas` replicas decides on: the limit
    /// divided by them, rounded down (so the replicas together never admit past the limit).
    pub fn share(limit: u32, replicas: u32) -> u32 {
        limit / replicas.max(1)
    }
}

impl ModifierPolicy for Policy {
    fn parse(value: &serde_yaml::Value, _period_us: u64) -> Result<Policy, Refusal> {
        let names = || {
            Policy::ALL
                .iter()
                .map(|p| p.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        value
            .as_str()
            .and_then(|name| Policy::ALL.into_iter().find(|p| p.as_str() == name))
            .ok_or_else(|| Refusal::new("on_store_failure", format!("must be one of {}", names())))
    }

    fn shown(&self) -> String {
        format!(", when the store fails: {self}")
    }

    fn listed(&self) -> String {
        format!(", on_store_failure: {}", self.as_str())
    }

    /// What a limit answers when the store fails, in words.
    fn explained(&self, limit: &crate::modifier::Described<'_>) -> String {
        let answer = match self {
            Policy::Unavailable => {
                "the call fails with UNAVAILABLE (Envoy's failure_mode_deny decides)".to_string()
            }
            Policy::Allow => "its hits are admitted".to_string(),
            Policy::Deny => "its hits are denied".to_string(),
            Policy::LocalShare => format!(
                "each replica decides alone on its share, {} divided by the replica count \
                 (rounded down)",
                limit.requests_per_unit
            ),
        };
        format!(
            "{}: {}: when the store cannot decide, {answer}",
            limit.rule, limit.limit
        )
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Policy::Unavailable => "unavailable",
            Policy::Allow => "allow",
            Policy::Deny => "deny",
            Policy::LocalShare => "local share (the limit / replicas)",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_name_parses_and_others_are_refused_with_the_choices() {
        for policy in Policy::ALL {
            let value = serde_yaml::Value::String(policy.as_str().to_string());
            assert_eq!(Policy::parse(&value, 1).ok(), Some(policy));
        }
        let refused = Policy::parse(&serde_yaml::Value::String("open".into()), 1);
        let reason = refused.err().map(|r| r.reason).unwrap_or_default();
        assert!(reason.contains("local_share"), "{reason}");
    }

    #[test]
    fn a_share_never_adds_up_past_the_limit() {
        assert_eq!(Policy::share(100, 3), 33);
        assert_eq!(Policy::share(100, 0), 100);
        assert_eq!(Policy::share(2, 4), 0);
    }
}
