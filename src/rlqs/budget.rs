//! One bucket's budget shared by every client that reports it: each client's recent demand
//! and current assignment, with the time its claim expires. A client's share is its max-min
//! fair share of the limit, capped so that the assignments still in force never add up to more
//! than the limit. The memory budget serves one sluice process; the Redis one (`in_redis`,
//! `lua/rlqs_budget.lua`) every replica on that Redis.

mod in_redis;

pub use in_redis::RedisBudget;

use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;

use super::share::shares_in_demand_order;
use crate::store::any::AnyStore;
use crate::store::StoreError;

/// Where the claims on buckets are kept.
pub trait Budget: Send + Sync + 'static {
    /// Records the client's demand and returns its share and how many clients hold a claim.
    fn claim(&self, ask: &Ask<'_>)
        -> impl Future<Output = Result<(u64, usize), StoreError>> + Send;

    /// The client gives its share of the bucket back.
    fn release(&self, bucket: &str, client: &str) -> impl Future<Output = ()> + Send;
}

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
    // Clients by demand, then id, so that an uneven split's remainder goes the same way
    // everywhere (the order `max_min_fair` and the Lua budget use).
    let mut order: Vec<(u64, &str)> = claims
        .iter()
        .map(|(client, claim)| (claim.demand, client.as_str()))
        .collect();
    order.sort_unstable();
    let demands = order.iter().map(|&(demand, _)| demand);
    let target = order
        .iter()
        .zip(shares_in_demand_order(ask.limit, demands))
        .find(|((_, client), _)| *client == ask.client)
        .map_or(0, |(_, share)| share);
    let others = claims
        .iter()
        .filter(|(client, _)| client.as_str() != ask.client)
        .fold(0u64, |sum, (_, claim)| sum.saturating_add(claim.assigned));
    let share = target.min(ask.limit.saturating_sub(others));
    if let Some(claim) = claims.get_mut(ask.client) {
        claim.assigned = share;
    }
    share
}

/// The budget that goes with the store sluice serves with: in its Redis when it has one (every
/// replica shares it), else in this process.
pub enum AnyBudget {
    Memory(MemoryBudget),
    Redis(RedisBudget),
}

impl AnyBudget {
    /// The budget beside `store`.
    pub fn for_store(store: &AnyStore) -> AnyBudget {
        match store.redis() {
            Some(redis) => AnyBudget::Redis(RedisBudget::of(redis)),
            None => AnyBudget::Memory(MemoryBudget::default()),
        }
    }
}

impl Budget for AnyBudget {
    async fn claim(&self, ask: &Ask<'_>) -> Result<(u64, usize), StoreError> {
        match self {
            AnyBudget::Memory(memory) => memory.claim(ask).await,
            AnyBudget::Redis(redis) => redis.claim(ask).await,
        }
    }

    async fn release(&self, bucket: &str, client: &str) {
        match self {
            AnyBudget::Memory(memory) => memory.release(bucket, client).await,
            AnyBudget::Redis(redis) => redis.release(bucket, client).await,
        }
    }
}

/// The budgets of one process.
#[derive(Debug, Default)]
pub struct MemoryBudget {
    buckets: Mutex<HashMap<String, HashMap<String, Claim>>>,
}

impl Budget for MemoryBudget {
    async fn claim(&self, ask: &Ask<'_>) -> Result<(u64, usize), StoreError> {
        let share = self.claim_now(ask);
        Ok((share, self.active_clients(ask.bucket, ask.now_us)))
    }

    async fn release(&self, bucket: &str, client: &str) {
        self.release_now(bucket, client);
    }
}

impl MemoryBudget {
    /// The client's share of the bucket after recording its demand.
    pub fn claim_now(&self, ask: &Ask<'_>) -> u64 {
        let mut buckets = self
            .buckets
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let claims = buckets.entry(ask.bucket.to_string()).or_default();
        settle(claims, ask)
    }

    /// The client gives its share of the bucket back.
    pub fn release_now(&self, bucket: &str, client: &str) {
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
    use crate::rlqs::share::max_min_fair;
    use proptest::prelude::*;

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
        assert_eq!(budget.claim_now(&ask("a", 900, 0)), 900);
        assert_eq!(budget.claim_now(&ask("b", 900, 1)), 100);
        assert_eq!(budget.claim_now(&ask("a", 900, 2)), 500);
        assert_eq!(budget.claim_now(&ask("b", 900, 3)), 500);
        // a stops reporting: after its claim expires, b may take it all.
        assert_eq!(budget.claim_now(&ask("b", 900, 30)), 900);
        assert_eq!(budget.active_clients("b", 30), 1);
        budget.release_now("b", "b");
        assert_eq!(budget.active_clients("b", 30), 0);
    }

    proptest! {
        /// The share is the client's max-min fair share of every claim in force (clients in
        /// id order, as the Lua budget orders them), capped by what the others hold.
        #[test]
        fn a_claim_gets_its_fair_share_capped_by_the_others(
            others in prop::collection::vec((0u64..2_000, 0u64..1_000, 0u64..20), 0..40),
            demand in 0u64..2_000,
            limit in 0u64..5_000,
        ) {
            let mut claims: HashMap<String, Claim> = others
                .iter()
                .enumerate()
                .map(|(i, &(demand, assigned, expires_at_us))| {
                    (format!("c{i:02}"), Claim { demand, assigned, expires_at_us })
                })
                .collect();
            let ask = Ask { bucket: "b", client: "me", demand, limit, now_us: 10, expires_at_us: 30 };
            let share = settle(&mut claims, &ask);

            let mut in_force: Vec<(&String, &Claim)> = claims.iter().collect();
            in_force.sort_by_key(|(client, _)| *client);
            prop_assert!(in_force.iter().all(|(c, claim)| claim.expires_at_us > 10 || *c == "me"));
            let demands: Vec<u64> = in_force.iter().map(|(_, claim)| claim.demand).collect();
            let fair = max_min_fair(limit, &demands);
            let mine = in_force.iter().position(|(c, _)| *c == "me").map(|i| fair[i]);
            let held: u64 = in_force
                .iter()
                .filter(|(c, _)| *c != "me")
                .map(|(_, claim)| claim.assigned)
                .sum();
            prop_assert_eq!(Some(share), mine.map(|m| m.min(limit.saturating_sub(held))));
            prop_assert_eq!(claims["me"].assigned, share);
        }
    }
}
