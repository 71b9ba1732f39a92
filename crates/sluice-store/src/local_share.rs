//! A replica's local share of its limits, for when the shared store cannot decide: each limit
//! divided by the replica count (rounded down, so that the replicas together never admit past
//! the limit; a bucket's burst divided as well), decided here alone on an embedded memory
//! store. What is counted here is never written to the shared store, when it answers again or
//! later: an outage's admissions are not replayed into it. The counts stay here, so a second
//! outage in the same window goes on from them.

use std::sync::Arc;

use crate::memory::MemoryStore;
use crate::redis::replicas::ReplicaCount;
use crate::{Clock, Store, StoreError};
use sluice_core::engine::Charging;
use sluice_core::limit::{Decision, Hit, Limit};
use sluice_core::modifier::on_store_failure::Policy;

/// The most keys a local share keeps (what an outage of a day of distinct clients needs on
/// one replica, at about 100 bytes a key).
const MAX_KEYS: usize = 200_000;

/// Limits decided on a replica's share.
pub struct LocalShare {
    memory: MemoryStore,
    replicas: ReplicaCount,
}

impl LocalShare {
    /// Shares of limits among `replicas`, on `clock`.
    pub fn new(replicas: ReplicaCount, clock: Arc<dyn Clock>) -> LocalShare {
        LocalShare {
            memory: MemoryStore::new(MAX_KEYS, clock),
            replicas,
        }
    }

    /// The replica count the shares are divided by now.
    pub fn replicas(&self) -> u32 {
        self.replicas.get()
    }

    /// Decides `hits` on this replica's share of their limits.
    pub async fn decide(
        &self,
        hits: &[Hit],
        charging: Charging,
    ) -> Result<Vec<Decision>, StoreError> {
        let replicas = self.replicas();
        let shared: Vec<Hit> = hits
            .iter()
            .map(|hit| Hit {
                limit: share_of(&hit.limit, replicas),
                ..hit.clone()
            })
            .collect();
        self.memory.charge(&shared, charging).await
    }
}

/// `limit` as one of `replicas` decides it alone.
pub fn share_of(limit: &Limit, replicas: u32) -> Limit {
    Limit {
        requests_per_unit: Policy::share(limit.requests_per_unit, replicas),
        counting: limit.counting.with_burst(
            limit
                .counting
                .burst()
                .map(|burst| Policy::share(burst, replicas).max(1)),
        ),
        ..limit.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ManualClock;
    use sluice_core::limit::{Role, Unit};

    #[tokio::test]
    async fn each_replica_admits_its_share_of_the_window() {
        let clock = Arc::new(ManualClock::at(60_000_000));
        let share = LocalShare::new(ReplicaCount::fixed(3), clock);
        let hit = Hit {
            key: "d_k_v".into(),
            limit: Limit::fixed_window(100, Unit::Minute),
            cost: 1,
            role: Role::Enforced,
            joins_previous: false,
            lease: None,
        };
        let mut admitted = 0;
        for _ in 0..50 {
            let decided = share
                .decide(std::slice::from_ref(&hit), Charging::AllOrNothing)
                .await;
            admitted += decided.map_or(0, |d| usize::from(d[0].admitted));
        }
        assert_eq!(admitted, 33, "100 / 3 replicas, rounded down");
    }
}
