//! One bucket's budget shared by every client that reports it: each client's recent demand
//! and current assignment, with the time its claim expires. A client's share is its max-min
//! fair share of the limit, capped so that the assignments still in force never add up to more
//! than the limit. The memory budget serves one sluice process; the Redis one (`in_redis`,
//! `lua/rlqs_budget.lua`) every replica on that Redis.

mod claim;
mod claims;
mod in_redis;

pub use claim::{Ask, Claim};
pub use in_redis::RedisBudget;

use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;

use crate::any::AnyStore;
use crate::StoreError;
use claims::BucketClaims;

/// Where the claims on buckets are kept.
pub trait Budget: Send + Sync + 'static {
    /// Records the client's demand and returns its share and how many clients hold a claim.
    fn claim(&self, ask: &Ask<'_>)
        -> impl Future<Output = Result<(u64, usize), StoreError>> + Send;

    /// The client gives its share of the bucket back.
    fn release(&self, bucket: &str, client: &str) -> impl Future<Output = ()> + Send;
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
    buckets: Mutex<HashMap<String, BucketClaims>>,
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
        if let Some(claims) = buckets.get_mut(ask.bucket) {
            return claims.share_for(ask);
        }
        let mut claims = BucketClaims::default();
        let share = claims.share_for(ask);
        buckets.insert(ask.bucket.to_string(), claims);
        share
    }

    /// The client gives its share of the bucket back.
    pub fn release_now(&self, bucket: &str, client: &str) {
        let mut buckets = self
            .buckets
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(claims) = buckets.get_mut(bucket) {
            claims.release(client);
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
        buckets
            .get(bucket)
            .map_or(0, |claims| claims.active(now_us))
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
}
