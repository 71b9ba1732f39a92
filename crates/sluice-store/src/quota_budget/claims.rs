//! The claims on one bucket in the memory budget, kept in the order the fair split walks
//! (demand, then client id), by expiry, and with the sum of what is assigned, so that a claim
//! changes what it changes instead of sorting every client again. A claim among 1,000 clients
//! then moves one entry in a sorted vector and walks the split up to its own place with integer
//! arithmetic (BENCHMARKS.md, "How does the cost hold as rules, keys, descriptors and clients grow?").

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use super::claim::{Ask, Claim};
use sluice_core::share::shares_in_demand_order;

/// Every client's claim on one bucket.
#[derive(Debug, Default)]
pub struct BucketClaims {
    claims: HashMap<Arc<str>, Claim>,
    /// (demand, client), ascending: the order of the split (`max_min_fair`'s, the Lua budget's).
    order: Vec<(u64, Arc<str>)>,
    /// (expiry, client), earliest first.
    expiries: BTreeSet<(u64, Arc<str>)>,
    /// What the claims assign in all.
    assigned: u64,
}

impl BucketClaims {
    /// The share `ask` gets: drops the claims expired by then (not the asking client's), records the
    /// client's demand and returns (and records) its share: its max-min fair share of the limit,
    /// capped by what the other claims still hold.
    pub fn share_for(&mut self, ask: &Ask<'_>) -> u64 {
        self.drop_expired(ask.now_us, ask.client);
        // Out of every order and of the sum assigned, then back in with nothing assigned
        // while its share is worked out.
        let client = match self.remove(ask.client) {
            Some((client, _)) => client,
            None => Arc::from(ask.client),
        };
        let place = self.place(ask.demand, &client);
        let claim = Claim {
            demand: ask.demand,
            assigned: 0,
            expires_at_us: ask.expires_at_us,
        };
        self.insert(client, claim);
        let target = shares_in_demand_order(ask.limit, self.order.iter().map(|(d, _)| *d))
            .nth(place)
            .unwrap_or(0);
        let share = target.min(ask.limit.saturating_sub(self.assigned));
        self.assigned = self.assigned.saturating_add(share);
        if let Some(claim) = self.claims.get_mut(ask.client) {
            claim.assigned = share;
        }
        share
    }

    /// Removes the client's claim; whether there was one.
    pub fn release(&mut self, client: &str) -> bool {
        self.remove(client).is_some()
    }

    /// Claims in force at `now_us`.
    pub fn active(&self, now_us: u64) -> usize {
        let expired = self
            .expiries
            .iter()
            .take_while(|(at, _)| *at <= now_us)
            .count();
        self.claims.len() - expired
    }

    pub fn is_empty(&self) -> bool {
        self.claims.is_empty()
    }

    /// The client's claim, if it holds one.
    #[cfg(test)]
    pub fn get(&self, client: &str) -> Option<&Claim> {
        self.claims.get(client)
    }

    /// Records `claim` for `client` (none held), keeping every order.
    pub fn insert(&mut self, client: Arc<str>, claim: Claim) {
        let place = self.place(claim.demand, &client);
        self.order.insert(place, (claim.demand, client.clone()));
        self.expiries.insert((claim.expires_at_us, client.clone()));
        self.assigned = self.assigned.saturating_add(claim.assigned);
        self.claims.insert(client, claim);
    }

    /// Where (demand, client) goes in `order`.
    fn place(&self, demand: u64, client: &Arc<str>) -> usize {
        self.order
            .partition_point(|(d, c)| (*d, &**c) < (demand, &**client))
    }

    /// Takes the client's claim out of every order; the client's id and its claim.
    fn remove(&mut self, client: &str) -> Option<(Arc<str>, Claim)> {
        let (client, claim) = self.claims.remove_entry(client)?;
        let place = self.place(claim.demand, &client);
        if self.order.get(place).is_some_and(|(_, c)| *c == client) {
            self.order.remove(place);
        }
        self.expiries.remove(&(claim.expires_at_us, client.clone()));
        self.assigned = self.assigned.saturating_sub(claim.assigned);
        Some((client, claim))
    }

    /// Drops the claims expired at `now_us`, except `keep`'s.
    fn drop_expired(&mut self, now_us: u64, keep: &str) {
        let expired: Vec<Arc<str>> = self
            .expiries
            .iter()
            .take_while(|(at, _)| *at <= now_us)
            .filter(|(_, client)| &**client != keep)
            .map(|(_, client)| client.clone())
            .collect();
        for client in expired {
            self.remove(&client);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use sluice_core::share::max_min_fair;

    proptest! {
        /// The share is the client's max-min fair share of every claim in force (clients in
        /// id order, as the Lua budget orders them), capped by what the others hold; the
        /// claims kept are exactly those in force and the asking client's.
        #[test]
        fn a_claim_gets_its_fair_share_capped_by_the_others(
            others in prop::collection::vec((0u64..2_000, 0u64..1_000, 0u64..20), 0..40),
            demand in 0u64..2_000,
            limit in 0u64..5_000,
            again in any::<bool>(),
        ) {
            let mut claims = BucketClaims::default();
            for (i, &(demand, assigned, expires_at_us)) in others.iter().enumerate() {
                let claim = Claim { demand, assigned, expires_at_us };
                claims.insert(Arc::from(format!("c{i:02}")), claim);
            }
            // The asking client either holds a claim already (one of the others) or is new.
            let me = if again && !others.is_empty() { "c00".to_string() } else { "me".to_string() };
            let ask = Ask { bucket: "b", client: &me, demand, limit, now_us: 10, expires_at_us: 30 };
            let share = claims.share_for(&ask);

            let mut in_force: Vec<(String, Claim)> = others
                .iter()
                .enumerate()
                .map(|(i, &(demand, assigned, expires_at_us))| {
                    (format!("c{i:02}"), Claim { demand, assigned, expires_at_us })
                })
                .filter(|(c, claim)| claim.expires_at_us > 10 && *c != me)
                .collect();
            in_force.push((me.clone(), Claim { demand, assigned: 0, expires_at_us: 30 }));
            in_force.sort_by(|a, b| (a.1.demand, &a.0).cmp(&(b.1.demand, &b.0)));
            let demands: Vec<u64> = in_force.iter().map(|(_, claim)| claim.demand).collect();
            let fair = max_min_fair(limit, &demands);
            let mine = in_force.iter().position(|(c, _)| *c == me).map(|i| fair[i]);
            let held: u64 = in_force
                .iter()
                .filter(|(c, _)| *c != me)
                .map(|(_, claim)| claim.assigned)
                .sum();
            prop_assert_eq!(Some(share), mine.map(|m| m.min(limit.saturating_sub(held))));
            prop_assert_eq!(claims.get(&me).map(|c| c.assigned), Some(share));
            prop_assert_eq!(claims.active(10), in_force.len());
            prop_assert_eq!(claims.claims.len(), in_force.len());
            prop_assert_eq!(claims.order.len(), in_force.len());
            prop_assert_eq!(claims.assigned, held + share);
        }
    }
}
