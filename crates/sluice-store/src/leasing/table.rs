//! The chunks one replica holds, by key and limit, and what each request does with them: spent
//! here, denied here (a denial from the store of a cost, remembered for no longer than the
//! lease's `max_hold`, answers that cost or more), or taken from the store (what the chunk
//! lacks, plus a new chunk sized by the key's rate). Every change of a lease happens under its
//! shard's lock; nothing here waits on the store. One take of a new chunk per lease is in
//! flight at a time (its claim): the requests that miss meanwhile go to the store for what
//! they lack alone, so concurrent misses never each bring a chunk. What a lease holds unspent
//! never passes `max_chunk`: an amount that would (a refund landing beside a new chunk) is
//! handed back to be given to the store.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use sluice_core::limit::{Decision, Hit, Limit};
use sluice_core::modifier::leasing::Policy;

const SHARDS: usize = 16;
/// The most leases one replica keeps: past it, a new key takes the exact path.
const MAX_LEASES: usize = 100_000;
/// A give-back is sent only while the chunk's window has at least this long left: a credit
/// must land in the window the chunk was charged to.
const GIVE_BACK_MARGIN_US: u64 = 100_000;

/// What a request does with one leased hit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Step {
    /// The store decides it as it is (not leased, a check, a cost no chunk could hold).
    Store,
    /// Spent from the chunk: answered here.
    Served(Decision),
    /// Denied here: the store denied this cost or less a moment ago.
    Denied(Decision),
    /// The chunk lacks, and the take `claim` of the next one is in flight: wait for it
    /// (`waiter`), then plan again, rather than call the store for this hit alone.
    Wait(u64),
    /// `local` spent from the chunk; the store charges `need`, and a new chunk of `extra`,
    /// after `give_back` is credited back (a bucket's chunk the bucket refilled past).
    /// `claim`: the lease's one take of a new chunk in flight is this one's (`took` or
    /// `release` ends it).
    Take {
        local: u64,
        need: u64,
        extra: u64,
        give_back: u64,
        claim: Option<u64>,
    },
}

/// A spent amount given back to a lease, or a chunk to give back to the store.
pub struct Unspent {
    pub key: String,
    pub limit: Limit,
    pub amount: u64,
}

/// One key's lease at this replica.
#[derive(Debug, Default)]
struct Lease {
    /// Charged in the store, not yet spent here.
    unspent: u64,
    /// The end of the window the unspent chunk was charged to (`None`: the algorithm has no
    /// windows, a bucket).
    window_end_us: Option<u64>,
    /// What the store had left after this replica's last take, net of the chunk.
    store_remaining: u32,
    /// When the limit is fully replenished, as of the last take.
    reset_at_us: u64,
    /// Hits seen since `counting_since_us`, and in the `max_hold` before.
    seen: u64,
    seen_before: u64,
    counting_since_us: u64,
    /// The last time a hit used the lease.
    last_used_us: u64,
    /// A denial by the store: a cost of `cost` or more is denied here until `until_us`.
    denial: Option<(u64, u64, Decision)>,
    /// A bucket's chunk that expired unspent: the store still counts it, and must have it
    /// back before the key's next decision to decide as the exact path would.
    owed_back: u64,
    /// The take of a new chunk in flight, by its claim, and when it was claimed.
    taking: Option<(u64, u64)>,
    /// Told when the take in flight ends, made when a request first waits for one.
    ended: Option<tokio::sync::watch::Sender<()>>,
}

impl Lease {
    /// Counts a hit at `now_us` in the rate of the key at this replica.
    fn see(&mut self, now_us: u64, max_hold_us: u64) {
        let elapsed = now_us.saturating_sub(self.counting_since_us);
        if elapsed >= max_hold_us {
            self.seen_before = if elapsed < 2 * max_hold_us {
                self.seen
            } else {
                0
            };
            self.seen = 0;
            self.counting_since_us = now_us;
        }
        self.seen += 1;
        self.last_used_us = now_us;
    }

    /// Drops a chunk that no longer holds budget: one charged to a window that is over, or,
    /// on a bucket, one the bucket has refilled past (from the moment the store's level plus
    /// the chunk would pass the bucket's capacity, the store no longer counts the chunk as
    /// taken: spending it then would admit more than the bucket).
    fn expire(&mut self, limit: &Limit, now_us: u64) {
        if self.unspent == 0 {
            return;
        }
        let over = match self.window_end_us {
            Some(end) => end <= now_us,
            None => {
                let per_unit_us = limit.period_us() / u64::from(limit.requests_per_unit.max(1));
                let drains_us = self.unspent.saturating_mul(per_unit_us.max(1));
                now_us.saturating_add(drains_us) >= self.reset_at_us
            }
        };
        if over {
            let unspent = std::mem::take(&mut self.unspent);
            if self.window_end_us.is_none() {
                self.owed_back += unspent;
            }
        }
    }

    /// Claims the lease's one take of a new chunk at `now_us`: `None` while another is in
    /// flight (a claim older than `max_hold_us` is taken as abandoned: its request was
    /// dropped).
    fn claim(&mut self, id: u64, now_us: u64, max_hold_us: u64) -> Option<u64> {
        if let Some((_, since_us)) = self.taking {
            if now_us.saturating_sub(since_us) < max_hold_us {
                return None;
            }
        }
        self.taking = Some((id, now_us));
        Some(id)
    }

    /// Ends the take `claim` (nothing when another holds the lease's claim), telling the
    /// requests that wait for it.
    fn release(&mut self, claim: Option<u64>) {
        if claim.is_some() && self.taking.map(|(id, _)| id) == claim {
            self.taking = None;
            if let Some(ended) = &self.ended {
                ended.send_replace(());
            }
        }
    }

    /// The take in flight at `now_us` that a request may wait for, when one is.
    fn take_in_flight(&self, now_us: u64, max_hold_us: u64) -> Option<u64> {
        self.taking
            .filter(|(_, since_us)| now_us.saturating_sub(*since_us) < max_hold_us)
            .map(|(id, _)| id)
    }

    /// Adds `amount` to the unspent chunk, up to `max_chunk`; what does not fit.
    fn hold(&mut self, amount: u64, max_chunk: u64) -> u64 {
        let room = max_chunk.saturating_sub(self.unspent);
        let held = amount.min(room);
        self.unspent += held;
        amount - held
    }

    /// What the store has left plus the chunk not yet spent.
    fn remaining(&self) -> u32 {
        let total = u64::from(self.store_remaining) + self.unspent;
        u32::try_from(total).unwrap_or(u32::MAX)
    }
}

/// The most a lease of `limit` holds unspent (0 for a limit that is not leased).
fn max_chunk_of(limit: &Limit) -> u64 {
    limit
        .modifiers
        .leasing()
        .map_or(0, |policy| u64::from(policy.max_chunk))
}

/// Leases by (store key, limit): a changed limit never reads another's lease.
type Shard = HashMap<(String, Limit), Lease>;

/// The leases of one replica.
pub struct LeaseTable {
    shards: Box<[Mutex<Shard>]>,
    hasher: RandomState,
    leases: AtomicUsize,
    /// The last claim of a take handed out.
    claims: AtomicU64,
    /// Hits answered from a chunk, chunks taken, and amounts given back.
    pub served: AtomicU64,
    pub chunks: AtomicU64,
    pub given_back: AtomicU64,
}

impl Default for LeaseTable {
    fn default() -> Self {
        LeaseTable {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            hasher: RandomState::new(),
            leases: AtomicUsize::new(0),
            claims: AtomicU64::new(0),
            served: AtomicU64::new(0),
            chunks: AtomicU64::new(0),
            given_back: AtomicU64::new(0),
        }
    }
}

impl LeaseTable {
    fn shard(&self, key: &str) -> MutexGuard<'_, Shard> {
        let index = (self.hasher.hash_one(key) as usize) % SHARDS;
        self.shards[index]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// What `hit` (leased as `policy` says) does at `now_us`; a spend from the chunk is taken
    /// now, and given back with `refund` if the request does not stand. With `may_wait`, a
    /// hit its chunk lacks while the next chunk is being taken waits for it (`Step::Wait`).
    pub fn plan(&self, hit: &Hit, policy: &Policy, now_us: u64, may_wait: bool) -> Step {
        if hit.cost == 0 || hit.cost > hit.limit.capacity() {
            return Step::Store;
        }
        let mut shard = self.shard(&hit.key);
        let lease = match shard.get_mut(&(hit.key.clone(), hit.limit.clone())) {
            Some(lease) => lease,
            None if self.leases.load(Ordering::Relaxed) >= MAX_LEASES => return Step::Store,
            None => {
                self.leases.fetch_add(1, Ordering::Relaxed);
                shard
                    .entry((hit.key.clone(), hit.limit.clone()))
                    .or_insert(Lease {
                        counting_since_us: now_us,
                        ..Lease::default()
                    })
            }
        };
        lease.expire(&hit.limit, now_us);
        if let Some((until_us, cost, decision)) = lease.denial {
            if now_us < until_us && hit.cost >= cost {
                lease.see(now_us, policy.max_hold_us);
                return Step::Denied(Decision {
                    remaining: lease.remaining(),
                    retry_after_us: until_us - now_us,
                    reset_after_us: lease.reset_at_us.saturating_sub(now_us),
                    decided_at_us: now_us,
                    ..decision
                });
            }
            lease.denial = None;
        }
        // A miss while the next chunk is taken waits for it: it is seen (counted in the key's
        // rate) once, when it plans again.
        if may_wait && lease.unspent < hit.cost {
            if let Some(claim) = lease.take_in_flight(now_us, policy.max_hold_us) {
                return Step::Wait(claim);
            }
        }
        lease.see(now_us, policy.max_hold_us);
        if lease.unspent >= hit.cost {
            lease.unspent -= hit.cost;
            self.served.fetch_add(1, Ordering::Relaxed);
            let reset_at_us = lease.window_end_us.unwrap_or(lease.reset_at_us);
            return Step::Served(Decision {
                admitted: true,
                remaining: lease.remaining(),
                reset_after_us: reset_at_us.saturating_sub(now_us),
                retry_after_us: 0,
                decided_at_us: now_us,
                ..Decision::default()
            });
        }
        let wanted = policy.chunk(lease.seen.max(lease.seen_before));
        let local = std::mem::take(&mut lease.unspent);
        let claim = if wanted > 0 {
            let id = self.claims.fetch_add(1, Ordering::Relaxed) + 1;
            lease.claim(id, now_us, policy.max_hold_us)
        } else {
            None
        };
        Step::Take {
            local,
            need: hit.cost - local,
            extra: if claim.is_some() { wanted } else { 0 },
            give_back: std::mem::take(&mut lease.owed_back),
            claim,
        }
    }

    /// Puts back `amount` a request spent from `hit`'s chunk and that does not stand; what
    /// would take the chunk past `max_chunk`, to give back to the store.
    pub fn refund(&self, hit: &Hit, amount: u64, now_us: u64) -> u64 {
        if amount == 0 {
            return 0;
        }
        let max_chunk = max_chunk_of(&hit.limit);
        let mut shard = self.shard(&hit.key);
        let Some(lease) = shard.get_mut(&(hit.key.clone(), hit.limit.clone())) else {
            return 0;
        };
        let mut excess = 0;
        if lease.window_end_us.is_none_or(|end| end > now_us) {
            excess = lease.hold(amount, max_chunk);
        }
        lease.expire(&hit.limit, now_us);
        excess
    }

    /// A receiver told when the take `claim` of `hit`'s lease ends; `None` when it already
    /// has (plan again at once).
    pub fn waiter(&self, hit: &Hit, claim: u64) -> Option<tokio::sync::watch::Receiver<()>> {
        let mut shard = self.shard(&hit.key);
        let lease = shard.get_mut(&(hit.key.clone(), hit.limit.clone()))?;
        if lease.taking.map(|(id, _)| id) != Some(claim) {
            return None;
        }
        let ended = lease
            .ended
            .get_or_insert_with(|| tokio::sync::watch::channel(()).0);
        Some(ended.subscribe())
    }

    /// Ends the take `claim` of `hit`'s lease without a chunk (the store failed, or decided
    /// the request another way).
    pub fn release(&self, hit: &Hit, claim: Option<u64>) {
        if claim.is_none() {
            return;
        }
        let mut shard = self.shard(&hit.key);
        if let Some(lease) = shard.get_mut(&(hit.key.clone(), hit.limit.clone())) {
            lease.release(claim);
        }
    }

    /// Records the store's answer to the take `claim` of `hit` at `now_us`: `need` decided as
    /// `decision` (a denial is remembered for its cost, for at most `max_hold`), and a new
    /// chunk of `chunk` (0: none) that left the store with `store_remaining`. Returns what of
    /// the chunk the lease could not hold within `max_chunk`, to give back to the store.
    pub fn took(
        &self,
        hit: &Hit,
        policy: &Policy,
        decision: &Decision,
        chunk: Option<(u64, u32)>,
        claim: Option<u64>,
        now_us: u64,
    ) -> u64 {
        let mut shard = self.shard(&hit.key);
        let Some(lease) = shard.get_mut(&(hit.key.clone(), hit.limit.clone())) else {
            return chunk.map_or(0, |(amount, _)| amount);
        };
        lease.release(claim);
        lease.expire(&hit.limit, now_us);
        lease.reset_at_us = now_us.saturating_add(decision.reset_after_us);
        if !decision.admitted {
            let until_us = now_us + decision.retry_after_us.min(policy.max_hold_us);
            lease.denial = Some((until_us, hit.cost, *decision));
            lease.store_remaining = decision.remaining;
            return 0;
        }
        lease.store_remaining = decision.remaining;
        let Some((amount, store_remaining)) = chunk else {
            return 0;
        };
        let window_end_us = hit.limit.window_end_us(now_us);
        if window_end_us != lease.window_end_us {
            lease.unspent = 0;
        }
        let excess = lease.hold(amount, u64::from(policy.max_chunk));
        lease.window_end_us = window_end_us;
        lease.store_remaining = store_remaining;
        self.chunks.fetch_add(1, Ordering::Relaxed);
        excess
    }

    /// Takes the unspent chunks of leases idle for `max_hold` (or all, `everything`) at
    /// `now_us`, to give back to the store; forgets leases idle for twice that.
    pub fn idle(&self, now_us: u64, everything: bool) -> Vec<Unspent> {
        let mut unspent = Vec::new();
        for shard in self.shards.iter() {
            let mut shard = shard.lock().unwrap_or_else(|p| p.into_inner());
            shard.retain(|(key, limit), lease| {
                let Some(policy) = limit.modifiers.leasing() else {
                    return false;
                };
                let idle_us = now_us.saturating_sub(lease.last_used_us);
                lease.expire(limit, now_us);
                let in_time = lease
                    .window_end_us
                    .is_none_or(|end| end > now_us + GIVE_BACK_MARGIN_US);
                let owed = std::mem::take(&mut lease.owed_back);
                if owed > 0 {
                    unspent.push(Unspent {
                        key: key.clone(),
                        limit: limit.clone(),
                        amount: owed,
                    });
                }
                if (everything || idle_us >= policy.max_hold_us) && lease.unspent > 0 {
                    let amount = std::mem::take(&mut lease.unspent);
                    if in_time {
                        unspent.push(Unspent {
                            key: key.clone(),
                            limit: limit.clone(),
                            amount,
                        });
                    }
                }
                let keep = !everything && idle_us < 2 * policy.max_hold_us;
                if !keep {
                    self.leases.fetch_sub(1, Ordering::Relaxed);
                }
                keep
            });
        }
        unspent
    }

    /// What this replica holds unspent of `hit`'s key at `now_us`.
    pub fn unspent(&self, hit: &Hit, now_us: u64) -> u64 {
        let mut shard = self.shard(&hit.key);
        shard
            .get_mut(&(hit.key.clone(), hit.limit.clone()))
            .map_or(0, |lease| {
                lease.expire(&hit.limit, now_us);
                lease.unspent
            })
    }

    /// Forgets the leases of `key`, their chunks unspent and not given back (after the key's
    /// counters were reset).
    pub fn forget(&self, key: &str) {
        let mut shard = self.shard(key);
        let before = shard.len();
        shard.retain(|(leased, _), _| leased != key);
        self.leases
            .fetch_sub(before - shard.len(), Ordering::Relaxed);
    }

    /// How many leases are kept, and what they hold unspent.
    pub fn held(&self) -> (usize, u64) {
        let mut unspent = 0;
        for shard in self.shards.iter() {
            let shard = shard.lock().unwrap_or_else(|p| p.into_inner());
            unspent += shard.values().map(|lease| lease.unspent).sum::<u64>();
        }
        (self.leases.load(Ordering::Relaxed), unspent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::limit::{Algorithm, Counting, Role, Unit};

    const MINUTE_US: u64 = 60_000_000;
    const POLICY: Policy = Policy {
        max_chunk: 10,
        max_hold_us: 1_000_000,
    };

    fn hit(limit: Limit, cost: u64) -> Hit {
        let mut limit = limit;
        limit.modifiers.budget_leasing = Some(POLICY);
        Hit {
            key: "k".into(),
            limit,
            cost,
            role: Role::Enforced,
            joins_previous: false,
            lease: None,
        }
    }

    fn admitted(remaining: u32, reset_after_us: u64) -> Decision {
        Decision {
            admitted: true,
            remaining,
            reset_after_us,
            ..Decision::default()
        }
    }

    /// Warms the key up (its rate at the replica) and takes a chunk of `chunk` at `now_us`.
    fn with_chunk(table: &LeaseTable, hit: &Hit, chunk: u64, now_us: u64) {
        for _ in 0..40 {
            if let Step::Take { claim, .. } = table.plan(hit, &POLICY, now_us, false) {
                table.release(hit, claim);
            }
        }
        let decision = admitted(50, MINUTE_US - now_us % MINUTE_US);
        table.took(hit, &POLICY, &decision, Some((chunk, 40)), None, now_us);
    }

    #[test]
    fn a_chunk_is_spent_here_until_it_lacks_then_taken_again() {
        let table = LeaseTable::default();
        let hit = hit(Limit::fixed_window(100, Unit::Minute), 3);
        let Step::Take { extra, .. } = table.plan(&hit, &POLICY, 0, false) else {
            panic!("a cold key asks the store");
        };
        assert_eq!(extra, 0, "a key seen once takes no chunk");
        with_chunk(&table, &hit, 10, 1_000);
        for spent in 1..=3u32 {
            match table.plan(&hit, &POLICY, 2_000, false) {
                Step::Served(decision) => assert_eq!(decision.remaining, 40 + 10 - 3 * spent),
                other => panic!("spend {spent}: {other:?}"),
            }
        }
        let Step::Take {
            local, need, extra, ..
        } = table.plan(&hit, &POLICY, 3_000, false)
        else {
            panic!("1 left of the chunk, 3 asked");
        };
        assert_eq!((local, need, extra), (1, 2, 10));
        table.refund(&hit, local, 3_000);
        assert_eq!(table.unspent(&hit, 3_000), 1);
    }

    #[test]
    fn a_windows_chunk_dies_with_it_and_a_buckets_is_owed_back() {
        let table = LeaseTable::default();
        let window = hit(Limit::fixed_window(100, Unit::Minute), 1);
        with_chunk(&table, &window, 10, 1_000);
        assert_eq!(table.unspent(&window, MINUTE_US - 1), 10);
        assert_eq!(table.unspent(&window, MINUTE_US), 0);
        assert!(
            table.idle(MINUTE_US + 5_000_000, false).is_empty(),
            "nothing to give back"
        );

        let bucket = hit(
            Limit::new(Counting::of(Algorithm::TokenBucket), 60, Unit::Minute),
            1,
        );
        // Full again 20 s after the take: a chunk of 10 (10 s of refill) is past at 10 s.
        for _ in 0..40 {
            if let Step::Take { claim, .. } = table.plan(&bucket, &POLICY, 0, false) {
                table.release(&bucket, claim);
            }
        }
        table.took(
            &bucket,
            &POLICY,
            &admitted(40, 20_000_000),
            Some((10, 40)),
            None,
            0,
        );
        assert_eq!(table.unspent(&bucket, 9_999_999), 10);
        assert_eq!(table.unspent(&bucket, 10_000_000), 0);
        let Step::Take { give_back, .. } = table.plan(&bucket, &POLICY, 10_000_001, false) else {
            panic!("the chunk expired: the store decides");
        };
        assert_eq!(give_back, 10, "credited back before the next decision");
    }

    #[test]
    fn a_denial_answers_that_cost_or_more_for_at_most_max_hold() {
        let table = LeaseTable::default();
        let big = hit(Limit::fixed_window(100, Unit::Minute), 5);
        let _ = table.plan(&big, &POLICY, 0, false);
        let denied = Decision {
            admitted: false,
            retry_after_us: 30_000_000,
            ..Decision::default()
        };
        table.took(&big, &POLICY, &denied, None, None, 0);
        assert!(matches!(
            table.plan(&big, &POLICY, 500_000, false),
            Step::Denied(_)
        ));
        let small = hit(Limit::fixed_window(100, Unit::Minute), 4);
        assert!(matches!(
            table.plan(&small, &POLICY, 500_000, false),
            Step::Take { .. }
        ));
        assert!(
            matches!(
                table.plan(&big, &POLICY, 1_000_000, false),
                Step::Take { .. }
            ),
            "asked again after max_hold"
        );
    }

    #[test]
    fn an_idle_lease_gives_its_chunk_back_then_is_forgotten() {
        let table = LeaseTable::default();
        let hit = hit(Limit::fixed_window(100, Unit::Minute), 1);
        with_chunk(&table, &hit, 10, 1_000);
        assert!(table.idle(500_000, false).is_empty(), "not idle yet");
        let back = table.idle(1_001_000, false);
        assert_eq!(back.iter().map(|u| u.amount).sum::<u64>(), 10);
        assert_eq!(table.held(), (1, 0));
        assert!(table.idle(3_000_000, false).is_empty());
        assert_eq!(table.held(), (0, 0), "forgotten after twice max_hold");
    }

    /// One request's step in `many_requests_in_flight_never_hold_past_max_chunk`: start a
    /// request, or finish the pending one at an index, the store granting its chunk or not,
    /// the request standing or not.
    #[derive(Debug, Clone)]
    enum Move {
        Start,
        Finish {
            index: usize,
            granted: bool,
            stands: bool,
        },
    }

    fn steps() -> impl proptest::strategy::Strategy<Value = Vec<Move>> {
        use proptest::prelude::*;
        let step = prop_oneof![
            3 => Just(Move::Start),
            2 => (any::<usize>(), prop::bool::weighted(0.8), prop::bool::weighted(0.8))
                .prop_map(|(index, granted, stands)| Move::Finish { index, granted, stands }),
        ];
        prop::collection::vec(step, 1..400)
    }

    proptest::proptest! {
        /// Requests planned and settled in any interleaving (as 32 tasks on one replica
        /// would): at every step the lease holds at most `max_chunk`, at most one take of a
        /// chunk is in flight, and what the store charged, less what was given back and
        /// what was spent (settled or in flight), is exactly what the lease holds.
        #[test]
        fn many_requests_in_flight_never_hold_past_max_chunk(steps in steps()) {
            let table = LeaseTable::default();
            let hit = hit(Limit::fixed_window(1_000_000, Unit::Minute), 1);
            let mut pending: Vec<Step> = Vec::new();
            let (mut charged, mut returned, mut spent) = (0_u64, 0_u64, 0_u64);
            for (at, step) in steps.into_iter().enumerate() {
                let now_us = 1_000 + at as u64;
                match step {
                    Move::Start => pending.push(table.plan(&hit, &POLICY, now_us, false)),
                    Move::Finish { .. } if pending.is_empty() => continue,
                    Move::Finish { index, granted, stands } => {
                        let plan = pending.swap_remove(index % pending.len());
                        match plan {
                            Step::Served(_) if stands => spent += hit.cost,
                            Step::Served(_) => returned += table.refund(&hit, hit.cost, now_us),
                            Step::Take { local, need, extra, claim, .. } => {
                                let chunk = (granted && stands && extra > 0).then(|| {
                                    charged += extra;
                                    (extra, 500_000)
                                });
                                let decision = admitted(500_000, MINUTE_US - now_us);
                                returned += table.took(&hit, &POLICY, &decision, chunk, claim, now_us);
                                if stands {
                                    spent += local + need;
                                    charged += need;
                                } else {
                                    returned += table.refund(&hit, local, now_us);
                                }
                            }
                            other => proptest::prop_assert!(false, "{other:?}"),
                        }
                    }
                }
                let unspent = table.unspent(&hit, now_us);
                proptest::prop_assert!(unspent <= u64::from(POLICY.max_chunk), "{unspent} held");
                let taking = pending
                    .iter()
                    .filter(|plan| matches!(plan, Step::Take { extra, .. } if *extra > 0))
                    .count();
                proptest::prop_assert!(taking <= 1, "{taking} chunks taken at once");
                // Spent from the chunk by requests still in flight: taken, not yet settled.
                let in_flight: u64 = pending
                    .iter()
                    .map(|plan| match plan {
                        Step::Served(_) => hit.cost,
                        Step::Take { local, .. } => *local,
                        _ => 0,
                    })
                    .sum();
                proptest::prop_assert_eq!(charged - returned - spent - in_flight, unspent);
            }
        }
    }
}
