//! One bucket's budget shared by every client that reports it: each client's recent demand
//! and current assignment, with the time its claim expires. A client's share is its max-min
//! fair share of the limit, capped so that the assignments still in force never add up to more
//! than the limit. The memory budget serves one sluice process.

use std::collections::HashMap;
use std::sync::Mutex;

use super::share::max_min_fair;

/// One client's claim on a bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claim {
    /// Requests per period the client would send.
    pub demand: u64,
    /// Requests per period it may admit now.
    pub assigned: u64,
    pub expires_at_us: u64,
}

/// What a client asks of a bucket's budget.
#[derive(Debug, Clone, Copy)]
pub struct Ask<'a> {
    pub bucket: &'a str,
    pub client: &'a str,
    pub demand: u64,
    pub limit: u64,
    pub now_us: u64,
    pub expires_at_us: u64,
}

/// Settles `ask` against the `claims` on its bucket: drops the expired ones, records the
/// client's demand and returns (and records) its share.
pub fn settle(claims: &mut HashMap<String, Claim>, ask: &Ask<'_>) -> u64 {
    claims.retain(|client, claim| claim.expires_at_us > ask.now_us || client == ask.client);
    let assigned_before = claims.get(ask.client).map_or(0, |c| c.assigned);
    claims.insert(
        ask.client.to_string(),
        Claim {
            demand: ask.demand,
            assigned: assigned_before,
            expires_at_us: ask.expires_at_us,
        },
    );
    let clients: Vec<&String> = claims.keys().collect();
    let demands: Vec<u64> = clients.iter().map(|c| claims[*c].demand).collect();
    let targets = max_min_fair(ask.limit, &demands);
    let mut target = 0;
    let mut others = 0u64;
    for (client, share) in clients.iter().zip(targets) {
        if client.as_str() == ask.client {
            target = share;
        } else {
            others = others.saturating_add(claims[*client].assigned);
        }
    }
    let share = target.min(ask.limit.saturating_sub(others));
    if let Some(claim) = claims.get_mut(ask.client) {
        claim.assigned = share;
    }
    share
}

/// The budgets of one process.
#[derive(Debug, Default)]
pub struct MemoryBudget {
    buckets: Mutex<HashMap<String, HashMap<String, Claim>>>,
}

impl MemoryBudget {
    /// The client's share of the bucket after recording its demand.
    pub fn claim(&self, ask: &Ask<'_>) -> u64 {
        let mut buckets = self
            .buckets
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let claims = buckets.entry(ask.bucket.to_string()).or_default();
        settle(claims, ask)
    }

    /// The client gives its share of the bucket back.
    pub fn release(&self, bucket: &str, client: &str) {
        let mut buckets = self
            .buckets
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(claims) = buckets.get_mut(bucket) {
            claims.remove(client);
            if claims.is_empty() {
                buckets.remove(bucket);
            }
        }
    }

    /// Clients with a claim in force on `bucket` at `now_us`.
    pub fn active_clients(&self, bucket: &str, now_us: u64) -> usize {
        let buckets = self
            .buckets
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        buckets.get(bucket).map_or(0, |claims| {
            claims.values().filter(|c| c.expires_at_us > now_us).count()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask<'a>(client: &'a str, demand: u64, now_us: u64) -> Ask<'a> {
        Ask {
            bucket: "b",
            client,
            demand,
            limit: 1000,
            now_us,
            expires_at_us: now_us + 10,
        }
    }

    #[test]
    fn shares_converge_and_never_add_up_to_more_than_the_limit() {
        let budget = MemoryBudget::default();
        // The first client alone takes what it wants; the second gets what is left, then
        // each report moves both towards their fair shares.
        assert_eq!(budget.claim(&ask("a", 900, 0)), 900);
        assert_eq!(budget.claim(&ask("b", 900, 1)), 100);
        assert_eq!(budget.claim(&ask("a", 900, 2)), 500);
        assert_eq!(budget.claim(&ask("b", 900, 3)), 500);
        // a stops reporting: after its claim expires, b may take it all.
        assert_eq!(budget.claim(&ask("b", 900, 30)), 900);
        assert_eq!(budget.active_clients("b", 30), 1);
        budget.release("b", "b");
        assert_eq!(budget.active_clients("b", 30), 0);
    }
}
