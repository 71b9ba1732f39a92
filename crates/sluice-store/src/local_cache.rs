//! The local over-limit cache: a request whose every key is known to be over its limit until
//! time T is answered here until T, with no round trip to the store (limits taking debt never
//! are: their hits must be charged). Exact, because consumption (here or on any other
//! replica) only ever pushes T later: when a hit of cost 1 is denied with a wait of R, no hit
//! of cost 1 or more fits before now + R. Bounded in bytes; `clear` drops it on config reload.
//!
//! With the reference's counting (`Charging::EveryHit`) a denied hit is charged too, so only
//! a fixed window is answered here, as the reference's cache does: its count is past L until
//! its window ends whatever else is charged, so a denial of any cost holds until then. The
//! other algorithms would take the hit as debt, which only the store can do.
//!
//! A limit with a modifier that rules the cache (`ModifierPolicy::rules_cache`: one whose
//! blocks never end early, whatever any replica charges) is answered here only with the
//! denials the modifier names as lasting, for every cost; its other denials must reach the
//! store.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::series::{Reporting, Series};
use crate::{Clock, Store, StoreError};
use sluice_core::algorithm::Mark;
use sluice_core::engine::Charging;
use sluice_core::limit::{Decision, Hit, Limit};

/// What one entry costs beside its key: the limit, two times, and the map's own overhead.
const ENTRY_OVERHEAD_BYTES: usize = 96;
const SHARDS: usize = 16;

/// A store behind a local over-limit cache.
pub struct WithLocalCache<S> {
    inner: S,
    cache: OverLimitCache,
}

/// Over-limit keys by (store key, limit): a changed limit never reads another's entry.
type Shard = HashMap<(String, Limit), Over>;

struct OverLimitCache {
    shards: Box<[Mutex<Shard>]>,
    hasher: RandomState,
    bytes_per_shard: usize,
    used_bytes: [AtomicUsize; SHARDS],
    clock: Arc<dyn Clock>,
    hits: AtomicU64,
}

/// A key over its limit until `until_us`; fully replenished at `reset_at_us` at the earliest;
/// the mark of the denial that holds it, when a modifier's does.
#[derive(Clone, Copy)]
struct Over {
    until_us: u64,
    reset_at_us: u64,
    mark: Mark,
}

impl<S: Store> WithLocalCache<S> {
    /// Caches over-limit keys of `inner` in at most about `max_bytes`.
    /// The store behind the cache.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    pub fn new(inner: S, max_bytes: usize, clock: Arc<dyn Clock>) -> Self {
        WithLocalCache {
            inner,
            cache: OverLimitCache {
                shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
                hasher: RandomState::new(),
                bytes_per_shard: max_bytes / SHARDS,
                used_bytes: Default::default(),
                clock,
                hits: AtomicU64::new(0),
            },
        }
    }

    /// How many hits were answered from the cache.
    pub fn cache_hits(&self) -> u64 {
        self.cache.hits.load(Ordering::Relaxed)
    }

    /// Forgets every entry (the limits they were computed for may have changed).
    pub fn clear(&self) {
        for index in 0..SHARDS {
            self.cache.lock(index).clear();
            self.cache.used_bytes[index].store(0, Ordering::Relaxed);
        }
    }
}

impl<S: Store> Reporting for WithLocalCache<S> {
    /// The store's series, and the requests the cache answered.
    fn report(&self, series: &Series) {
        self.inner.report(series);
        series.total("sluice_local_cache_hits_total", self.cache_hits());
    }
}

impl<S: Store> Store for WithLocalCache<S> {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    /// Answers a request locally when every hit of it is known to be over. Otherwise, with
    /// the reference's counting, the hits known to be over are answered here and only the
    /// others go to the store (as the reference's cache does: a hit it answers is not
    /// charged; each hit is charged on its own in that counting, so nothing else depends on
    /// it), unless the request acquires a lease. With all-or-nothing (or a lease) the request
    /// goes to the store whole, which must see every hit: a denial vetoes the others or the
    /// other limits of its descriptor.
    async fn charge(&self, hits: &[Hit], charging: Charging) -> Result<Vec<Decision>, StoreError> {
        if charging == Charging::Check {
            // A dry run's denial of a cost says nothing of what the key holds: the store
            // answers it, and the cache learns nothing from it.
            return self.inner.charge(hits, charging).await;
        }
        let now_us = self.cache.clock.now_us();
        let local: Vec<Option<Decision>> = hits
            .iter()
            .map(|hit| self.cache.answer(hit, charging, now_us))
            .collect();
        let answered = local.iter().filter(|d| d.is_some()).count();
        if answered == hits.len() {
            self.cache.count_hits(answered);
            return Ok(local.into_iter().flatten().collect());
        }
        // A lease's acquire stands only if the request is admitted: the store must see it all.
        if answered == 0 || charging == Charging::AllOrNothing || hits.iter().any(Hit::acquires) {
            let decisions = self.inner.charge(hits, charging).await?;
            self.cache.remember_all(hits, &decisions, charging, now_us);
            return Ok(decisions);
        }
        self.cache.count_hits(answered);
        let rest = unanswered(hits, &local);
        let decided = self.inner.charge(&rest, charging).await?;
        self.cache.remember_all(&rest, &decided, charging, now_us);
        let mut decided = decided.into_iter();
        local
            .into_iter()
            .map(|answer| answer.or_else(|| decided.next()))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| StoreError::Protocol {
                store: self.inner.name(),
                source: "fewer decisions than hits".into(),
            })
    }

    async fn healthy(&self) -> bool {
        self.inner.healthy().await
    }

    fn config_changed(&self) {
        self.clear();
        self.inner.config_changed();
    }
}

/// The hits the cache did not answer, in order; a hit whose descriptor's earlier hit was
/// answered starts its own run (`joins_previous` names the hit just before it).
fn unanswered(hits: &[Hit], local: &[Option<Decision>]) -> Vec<Hit> {
    hits.iter()
        .enumerate()
        .filter(|(i, _)| local[*i].is_none())
        .map(|(i, hit)| Hit {
            joins_previous: hit.joins_previous && i > 0 && local[i - 1].is_none(),
            ..hit.clone()
        })
        .collect()
}

impl OverLimitCache {
    /// Remembers the denials among `decisions` of `hits`; with all-or-nothing, not a hit whose
    /// key an earlier hit of the request charged: it was decided on that charge, which does
    /// not stand when the request is vetoed, so its denial says nothing of what the key holds
    /// (with every hit counted, the earlier charge stands).
    fn remember_all(&self, hits: &[Hit], decisions: &[Decision], charging: Charging, now_us: u64) {
        for (index, (hit, decision)) in hits.iter().zip(decisions).enumerate() {
            let after_own_charge = hits[..index]
                .iter()
                .any(|earlier| earlier.key == hit.key && earlier.cost > 0);
            if charging == Charging::AllOrNothing && after_own_charge {
                continue;
            }
            self.remember(hit, decision, charging, now_us);
        }
    }

    fn lock(&self, index: usize) -> MutexGuard<'_, Shard> {
        self.shards[index]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn shard_of(&self, hit: &Hit) -> usize {
        (self.hasher.hash_one(&hit.key) as usize) % SHARDS
    }

    /// Counts hits answered here.
    fn count_hits(&self, count: usize) {
        self.hits.fetch_add(count as u64, Ordering::Relaxed);
    }

    /// Whether `hit`, charged as `charging` says, may be answered here at all: never a limit
    /// that takes debt (every hit of it must be charged), never a lease limit (a release
    /// frees it at any time), and with the reference's counting only a fixed window (the
    /// others take a denied hit as debt).
    fn applies(hit: &Hit, charging: Charging) -> bool {
        if hit.lease.is_some() || hit.limit.algorithm().leases() {
            return false;
        }
        if hit.limit.modifiers.rules_cache() {
            // Only its lasting denials are remembered (`remember`).
            return true;
        }
        match charging {
            Charging::AllOrNothing => !hit.limit.debt,
            Charging::EveryHit => hit.limit.key_holds_window(),
            Charging::Check => false,
        }
    }

    /// The local answer for `hit`, when its key is known to be over at `now_us`.
    fn answer(&self, hit: &Hit, charging: Charging, now_us: u64) -> Option<Decision> {
        // A modifier's lasting denial denies every cost; an over-limit key, only costs above 0,
        // but with the reference's counting a check too (its window's count is past L).
        let blocks = hit.limit.modifiers.rules_cache();
        let check_fits = hit.cost == 0 && charging == Charging::AllOrNothing;
        if (check_fits && !blocks) || !Self::applies(hit, charging) {
            return None;
        }
        let shard = self.lock(self.shard_of(hit));
        let over = shard
            .get(&(hit.key.clone(), hit.limit.clone()))
            .filter(|o| o.until_us > now_us)?;
        Some(Decision {
            admitted: false,
            remaining: 0,
            reset_after_us: over.reset_at_us.max(over.until_us) - now_us,
            retry_after_us: over.until_us - now_us,
            mark: over.mark,
            decided_at_us: now_us,
        })
    }

    /// Remembers a denial that holds for every cost until its wait is over: one of cost 1,
    /// or, with the reference's counting, one of any cost, a check's included (its window's
    /// count is past L), as the reference's cache does.
    fn remember(&self, hit: &Hit, decision: &Decision, charging: Charging, now_us: u64) {
        if hit.limit.modifiers.rules_cache() {
            if let Some(mark) = hit.limit.modifiers.lasting(decision) {
                if decision.retry_after_us > 0 {
                    self.insert(hit, now_us, decision, mark);
                }
            }
            return;
        }
        let holds_for_every_cost = hit.cost == 1 || charging == Charging::EveryHit;
        if decision.admitted
            || !holds_for_every_cost
            || decision.retry_after_us == 0
            || !Self::applies(hit, charging)
        {
            return;
        }
        self.insert(hit, now_us, decision, Mark::None);
    }

    /// Holds `hit`'s key as over until `decision`'s wait is over, within the byte bound, a
    /// local answer marked `mark`.
    fn insert(&self, hit: &Hit, now_us: u64, decision: &Decision, mark: Mark) {
        let index = self.shard_of(hit);
        let size = hit.key.len() + ENTRY_OVERHEAD_BYTES;
        let mut shard = self.lock(index);
        let used = &self.used_bytes[index];
        if used.load(Ordering::Relaxed) + size > self.bytes_per_shard {
            // Over budget: drop what has expired, then, if need be, everything in this shard.
            shard.retain(|_, over| over.until_us > now_us);
            if shard
                .keys()
                .map(|(k, _)| k.len() + ENTRY_OVERHEAD_BYTES)
                .sum::<usize>()
                + size
                > self.bytes_per_shard
            {
                shard.clear();
            }
            used.store(
                shard
                    .keys()
                    .map(|(k, _)| k.len() + ENTRY_OVERHEAD_BYTES)
                    .sum(),
                Ordering::Relaxed,
            );
            if size > self.bytes_per_shard {
                return;
            }
        }
        let over = Over {
            until_us: now_us + decision.retry_after_us,
            reset_at_us: now_us + decision.reset_after_us,
            mark,
        };
        if shard
            .insert((hit.key.clone(), hit.limit.clone()), over)
            .is_none()
        {
            used.fetch_add(size, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryStore;
    use crate::ManualClock;
    use sluice_core::limit::{Role, Unit};

    /// Charges `hit` alone `times` times.
    async fn charge_times<S: Store>(store: &S, hit: &Hit, charging: Charging, times: usize) {
        for _ in 0..times {
            store
                .charge(std::slice::from_ref(hit), charging)
                .await
                .expect("the store decides");
        }
    }

    fn hit(cost: u64) -> Hit {
        Hit {
            key: "k".into(),
            limit: Limit::fixed_window(2, Unit::Second),
            cost,
            role: Role::Enforced,
            joins_previous: false,
            lease: None,
        }
    }

    #[tokio::test]
    async fn answers_a_known_over_limit_key_locally_until_its_wait_is_over() {
        let clock = Arc::new(ManualClock::at(10_000_000));
        let store =
            WithLocalCache::new(MemoryStore::new(100, clock.clone()), 1 << 20, clock.clone());
        for _ in 0..3 {
            store
                .charge(&[hit(1)], Charging::AllOrNothing)
                .await
                .unwrap();
        }
        assert_eq!(store.cache_hits(), 0, "the first denial goes to the store");
        clock.set(10_500_000);
        let local = store
            .charge(&[hit(1), hit(3)], Charging::AllOrNothing)
            .await
            .unwrap();
        assert!(local.iter().all(|d| !d.admitted));
        assert_eq!(local[0].retry_after_us, 500_000);
        assert_eq!(store.cache_hits(), 2);
        // Cost 0 reads go to the store; at the window's end the key is asked again.
        for (now_us, cost) in [(10_500_000, 0), (11_000_000, 1)] {
            clock.set(now_us);
            let decided = store.charge(&[hit(cost)], Charging::AllOrNothing).await;
            assert!(decided.unwrap()[0].admitted, "cost {cost} at {now_us}");
        }
        assert_eq!(store.cache_hits(), 2);
    }

    #[tokio::test]
    async fn with_the_references_counting_only_a_fixed_window_is_answered_here() {
        let clock = Arc::new(ManualClock::at(10_000_000));
        let store =
            WithLocalCache::new(MemoryStore::new(100, clock.clone()), 1 << 20, clock.clone());
        // A fixed window of 2: a denied hit of 3 is remembered (the count is past 2 until the
        // window ends), and hits of any cost are then answered here.
        let big = Hit { cost: 3, ..hit(1) };
        for _ in 0..2 {
            store
                .charge(std::slice::from_ref(&big), Charging::EveryHit)
                .await
                .unwrap();
        }
        assert_eq!(
            store.cache_hits(),
            1,
            "the second hit of 3 was answered here"
        );
        // A token bucket takes every denied hit as debt: each must reach the store.
        let mut bucket = hit(1);
        bucket.key = "bucket".into();
        bucket.limit.counting =
            sluice_core::limit::Counting::of(sluice_core::limit::Algorithm::TokenBucket);
        charge_times(&store, &bucket, Charging::EveryHit, 5).await;
        assert_eq!(store.cache_hits(), 1, "no bucket hit was answered here");
    }

    #[tokio::test]
    async fn a_limit_taking_debt_is_never_answered_here() {
        let clock = Arc::new(ManualClock::at(10_000_000));
        let store =
            WithLocalCache::new(MemoryStore::new(100, clock.clone()), 1 << 20, clock.clone());
        let mut report = hit(1);
        report.limit.debt = true;
        charge_times(&store, &report, Charging::AllOrNothing, 5).await;
        assert_eq!(store.cache_hits(), 0, "every report reaches the store");
        // 5 charged in a window of 2: 3 in debt, so the next two windows are spent too.
        clock.set(11_000_000);
        let check = Hit { cost: 0, ..report };
        let next = store
            .charge(&[check], Charging::AllOrNothing)
            .await
            .unwrap();
        assert!(
            !next[0].admitted,
            "the debt carries into the next window: {next:?}"
        );
    }

    #[tokio::test]
    async fn stays_within_its_bytes() {
        let clock = Arc::new(ManualClock::at(0));
        let store = WithLocalCache::new(
            MemoryStore::new(100_000, clock.clone()),
            16 * 200,
            clock.clone(),
        );
        for i in 0..2_000 {
            let mut h = hit(1);
            h.key = format!("key{i}");
            h.limit = Limit::fixed_window(0, Unit::Second);
            store.charge(&[h], Charging::AllOrNothing).await.unwrap();
        }
        let held: usize = (0..SHARDS).map(|i| store.cache.lock(i).len()).sum();
        assert!(held <= 16 * 2, "{held} entries in 3200 bytes");
        store.clear();
        assert_eq!(
            (0..SHARDS)
                .map(|i| store.cache.lock(i).len())
                .sum::<usize>(),
            0
        );
    }
}
