//! Budget leasing in front of a shared store (`budget_leasing` on a limit; the policy and its
//! bound are `sluice_core::modifier::leasing`'s). A request whose leased hits the replica's
//! chunks cover, and that has no other hit, is answered here with no call to the store. Any
//! other request goes to the store in one call, as before, where each leased hit its chunk
//! does not cover charges what the chunk lacks and, as a hit of its own in shadow role (its
//! denial vetoes nothing), a new chunk sized by the key's rate: taken whole when it fits, else
//! not at all. One take of a chunk per key is in flight at a time: a request whose chunk lacks
//! while it is waits for it (`WAIT_FOR_TAKE`, `WAITS` times at most) and plans again, so
//! concurrent misses neither each bring a chunk nor each call the store. A request the store
//! denies leaves every chunk as it was. A chunk not used for `max_hold` is given back (a credit
//! to the key, while its window lasts) by a task that runs every `SWEEP`, and every chunk is
//! given back when the limits change (on the runtime the store was made on: a reload runs on
//! a thread of its own).
//!
//! Only all-or-nothing charging leases: with the reference's counting a denied hit is charged
//! too, which only the store can do (and the config refuses leasing there).

mod table;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::admin::AdminStore;
use crate::series::{Reporting, Series};
use crate::{Clock, Store, StoreError};
use sluice_core::engine::{self, Charging};
use sluice_core::limit::{Decision, Hit, Role};
pub use table::{LeaseTable, Step, Unspent};

/// How often idle chunks are given back.
const SWEEP: Duration = Duration::from_millis(250);

/// How long a request waits for a take of a chunk in flight before it calls the store for
/// its own hits alone (a take is one store call: it ends within the store's timeout).
const WAIT_FOR_TAKE: Duration = Duration::from_millis(250);

/// How many times a request waits for a chunk before it calls the store whatever is in
/// flight.
const WAITS: usize = 2;

/// A store behind budget leasing.
pub struct WithLeasing<S> {
    shared: Arc<Shared<S>>,
}

struct Shared<S> {
    inner: S,
    table: LeaseTable,
    clock: Arc<dyn Clock>,
    /// The runtime the store was made on: a reload runs on a thread of its own, outside any
    /// runtime, and gives its chunks back on this one.
    runtime: Option<tokio::runtime::Handle>,
}

impl<S: Store + AdminStore> WithLeasing<S> {
    /// Leases the limits that ask for it in front of `inner`; idle chunks are given back by a
    /// task on the current runtime (none outside one: tools that never lease).
    pub fn new(inner: S, clock: Arc<dyn Clock>) -> WithLeasing<S> {
        let runtime = tokio::runtime::Handle::try_current().ok();
        let shared = Arc::new(Shared {
            inner,
            table: LeaseTable::default(),
            clock,
            runtime: runtime.clone(),
        });
        if let Some(runtime) = runtime {
            runtime.spawn(give_back_idle(Arc::downgrade(&shared)));
        }
        WithLeasing { shared }
    }

    /// The store behind the leases.
    pub fn inner(&self) -> &S {
        &self.shared.inner
    }

    /// The leases.
    pub fn table(&self) -> &LeaseTable {
        &self.shared.table
    }

    /// Gives every unspent chunk back now (on shutdown).
    pub async fn give_back_all(&self) {
        let now_us = self.shared.clock.now_us();
        let unspent = self.shared.table.idle(now_us, true);
        self.shared.give_back(unspent).await;
    }
}

/// Gives the chunks of idle leases back every `SWEEP`, until the store is gone.
async fn give_back_idle<S: Store + AdminStore>(shared: Weak<Shared<S>>) {
    let mut ticks = tokio::time::interval(SWEEP);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let unspent = shared.table.idle(shared.clock.now_us(), false);
        shared.give_back(unspent).await;
    }
}

impl<S: Store + AdminStore> Shared<S> {
    /// Credits each chunk back to its key; one that fails is lost for its window (what it
    /// held is within the bound of what leasing may deny).
    async fn give_back(&self, unspent: Vec<Unspent>) {
        for chunk in unspent {
            let hit = Hit {
                key: chunk.key,
                limit: chunk.limit,
                cost: chunk.amount,
                role: Role::Enforced,
                joins_previous: false,
                lease: None,
            };
            match self.inner.credit(&hit).await {
                Ok(_) => {
                    self.table
                        .given_back
                        .fetch_add(chunk.amount, Ordering::Relaxed);
                }
                Err(error) => tracing::debug!(%error, "an unspent chunk was not given back"),
            }
        }
    }

    /// Plans each hit of a request at `now_us`; with `may_wait`, a hit whose chunk lacks
    /// while the next one is taken plans to wait for it.
    fn plan(&self, hits: &[Hit], now_us: u64, may_wait: bool) -> Vec<Step> {
        hits.iter()
            .map(|hit| match hit.limit.modifiers.leasing() {
                Some(policy) => self.table.plan(hit, &policy, now_us, may_wait),
                None => Step::Store,
            })
            .collect()
    }

    /// Plans a request, waiting (at most `WAITS` times) for a take of a chunk in flight rather
    /// than calling the store for a hit its chunk lacks: concurrent misses share one take.
    async fn plan_sharing_takes(&self, hits: &[Hit]) -> (Vec<Step>, u64) {
        for _ in 0..WAITS {
            let now_us = self.clock.now_us();
            let plans = self.plan(hits, now_us, true);
            let Some((at, claim)) = plans.iter().enumerate().find_map(|(at, plan)| match plan {
                Step::Wait(claim) => Some((at, *claim)),
                _ => None,
            }) else {
                return (plans, now_us);
            };
            // This try does not stand: what it spent goes back before it waits.
            let excess = self.refund_all(hits, &plans, |_| true, now_us);
            self.give_back(excess).await;
            if let Some(mut ended) = self.table.waiter(&hits[at], claim) {
                let _ = tokio::time::timeout(WAIT_FOR_TAKE, ended.changed()).await;
            }
        }
        let now_us = self.clock.now_us();
        (self.plan(hits, now_us, false), now_us)
    }

    /// Decides a request with leased hits.
    async fn charge_leased(&self, hits: &[Hit]) -> Result<Vec<Decision>, StoreError> {
        let (plans, now_us) = self.plan_sharing_takes(hits).await;
        let answered_here = |plan: &Step| matches!(plan, Step::Served(_) | Step::Denied(_));
        if plans.iter().all(answered_here) {
            let (decisions, excess) = self.answer_here(hits, &plans, now_us);
            self.give_back(excess).await;
            return Ok(decisions);
        }
        if plans.iter().any(|plan| matches!(plan, Step::Denied(_))) {
            return self.decide_whole(hits, &plans, now_us).await;
        }
        self.give_back(owed_back(hits, &plans)).await;
        let call = StoreCall::of(hits, &plans);
        let decided = self
            .inner
            .charge(&call.hits, Charging::AllOrNothing)
            .await
            .and_then(|decided| {
                (decided.len() == call.hits.len())
                    .then_some(decided)
                    .ok_or_else(|| StoreError::Protocol {
                        store: self.inner.name(),
                        source: "fewer decisions than hits".into(),
                    })
            });
        match decided {
            Ok(decided) => {
                let (decisions, excess) = self.conclude(hits, &plans, &call, &decided, now_us);
                self.give_back(excess).await;
                Ok(decisions)
            }
            Err(error) => {
                let excess = self.refund_all(hits, &plans, |_| true, now_us);
                self.give_back(excess).await;
                Err(error)
            }
        }
    }

    /// A request with a denial remembered here beside hits the store must see: the store
    /// decides it whole, from its own state, every chunk left as it was.
    async fn decide_whole(
        &self,
        hits: &[Hit],
        plans: &[Step],
        now_us: u64,
    ) -> Result<Vec<Decision>, StoreError> {
        let mut excess = self.refund_all(hits, plans, |_| true, now_us);
        excess.extend(owed_back(hits, plans));
        self.give_back(excess).await;
        let mut decided = self.inner.charge(hits, Charging::AllOrNothing).await?;
        // What the store has left excludes this replica's chunks, which remain.
        for (hit, decision) in hits.iter().zip(&mut decided) {
            let unspent = self.table.unspent(hit, now_us);
            let remaining = u64::from(decision.remaining) + unspent;
            decision.remaining = u32::try_from(remaining).unwrap_or(u32::MAX);
        }
        Ok(decided)
    }

    /// The decisions of a request answered here whole; what it spent does not stand if it is
    /// denied (what of it a chunk cannot hold back, to give back to the store).
    fn answer_here(
        &self,
        hits: &[Hit],
        plans: &[Step],
        now_us: u64,
    ) -> (Vec<Decision>, Vec<Unspent>) {
        let decisions: Vec<Decision> = plans
            .iter()
            .map(|plan| match plan {
                Step::Served(decision) | Step::Denied(decision) => *decision,
                _ => Decision::default(),
            })
            .collect();
        let stands = standing(hits, &decisions);
        let excess = self.refund_all(hits, plans, |i| !stands[i], now_us);
        (decisions, excess)
    }

    /// Puts back what the hits `which` picks spent from their chunks, and ends their takes'
    /// claims (a settled take has ended its own); what the chunks cannot hold back.
    fn refund_all(
        &self,
        hits: &[Hit],
        plans: &[Step],
        which: impl Fn(usize) -> bool,
        now_us: u64,
    ) -> Vec<Unspent> {
        let mut excess = Vec::new();
        for (index, (hit, plan)) in hits.iter().zip(plans).enumerate() {
            if !which(index) {
                continue;
            }
            let spent = match plan {
                Step::Served(_) => hit.cost,
                Step::Take { local, claim, .. } => {
                    self.table.release(hit, *claim);
                    *local
                }
                _ => 0,
            };
            let amount = self.table.refund(hit, spent, now_us);
            if amount > 0 {
                excess.push(Unspent {
                    key: hit.key.clone(),
                    limit: hit.limit.clone(),
                    amount,
                });
            }
        }
        excess
    }

    /// The request's decisions from the store's, each take recorded (a chunk only when its
    /// request stands), and what does not stand put back; what the chunks cannot hold, to
    /// give back to the store.
    fn conclude(
        &self,
        hits: &[Hit],
        plans: &[Step],
        call: &StoreCall,
        decided: &[Decision],
        now_us: u64,
    ) -> (Vec<Decision>, Vec<Unspent>) {
        let decisions: Vec<Decision> = plans
            .iter()
            .zip(&call.sent)
            .map(|(plan, sent)| match (plan, sent) {
                (Step::Served(decision), _) => *decision,
                // A denial says what remained before it: the store's, and the chunk's part.
                (Step::Take { local, .. }, Some(index)) if !decided[*index].admitted => {
                    let remaining = u64::from(decided[*index].remaining) + local;
                    Decision {
                        remaining: u32::try_from(remaining).unwrap_or(u32::MAX),
                        ..decided[*index]
                    }
                }
                (_, Some(index)) => decided[*index],
                _ => Decision::default(),
            })
            .collect();
        let stands = standing(hits, &decisions);
        let mut excess = Vec::new();
        for (index, (hit, plan)) in hits.iter().zip(plans).enumerate() {
            let (Step::Take { claim, .. }, Some(policy)) = (plan, hit.limit.modifiers.leasing())
            else {
                continue;
            };
            let chunk = call.extra[index]
                .filter(|_| stands[index])
                .map(|(amount, at)| (amount, decided[at]))
                .filter(|(_, extra)| extra.admitted)
                .map(|(amount, extra)| (amount, extra.remaining));
            // The store's own answer: what it has left, without the chunk's part.
            let Some(from_store) = call.sent[index].map(|at| decided[at]) else {
                self.table.release(hit, *claim);
                continue;
            };
            let amount = self
                .table
                .took(hit, &policy, &from_store, chunk, *claim, now_us);
            if amount > 0 {
                excess.push(Unspent {
                    key: hit.key.clone(),
                    limit: hit.limit.clone(),
                    amount,
                });
            }
        }
        excess.extend(self.refund_all(hits, plans, |i| !stands[i], now_us));
        (decisions, excess)
    }
}

/// Whether each hit's charge stands, all or nothing, as `decisions` admitted them.
fn standing(hits: &[Hit], decisions: &[Decision]) -> smallvec::SmallVec<[bool; 8]> {
    engine::standing(
        hits,
        |i| decisions[i].admitted,
        Charging::AllOrNothing,
        false,
    )
}

/// The expired bucket chunks the request's takes credit back first.
fn owed_back(hits: &[Hit], plans: &[Step]) -> Vec<Unspent> {
    hits.iter()
        .zip(plans)
        .filter_map(|(hit, plan)| match plan {
            Step::Take { give_back, .. } if *give_back > 0 => Some(Unspent {
                key: hit.key.clone(),
                limit: hit.limit.clone(),
                amount: *give_back,
            }),
            _ => None,
        })
        .collect()
}

/// The hits a request sends the store: each not answered here (a take's cost cut to what
/// its chunk lacks), then one shadow hit per new chunk; where each hit's decision is.
struct StoreCall {
    hits: Vec<Hit>,
    /// For each hit of the request, the index of its decision in the store's reply.
    sent: Vec<Option<usize>>,
    /// For each hit of the request, the new chunk it asked for and its decision's index.
    extra: Vec<Option<(u64, usize)>>,
}

impl StoreCall {
    fn of(hits: &[Hit], plans: &[Step]) -> StoreCall {
        let mut call = StoreCall {
            hits: Vec::with_capacity(hits.len() + 1),
            sent: vec![None; hits.len()],
            extra: vec![None; hits.len()],
        };
        for (index, (hit, plan)) in hits.iter().zip(plans).enumerate() {
            let cost = match plan {
                Step::Store => hit.cost,
                Step::Take { need, .. } => *need,
                _ => continue,
            };
            let previous_sent = index > 0 && call.sent[index - 1].is_some();
            call.sent[index] = Some(call.hits.len());
            call.hits.push(Hit {
                cost,
                joins_previous: hit.joins_previous && previous_sent,
                ..hit.clone()
            });
        }
        for (index, (hit, plan)) in hits.iter().zip(plans).enumerate() {
            if let Step::Take { extra, .. } = plan {
                if *extra > 0 {
                    call.extra[index] = Some((*extra, call.hits.len()));
                    call.hits.push(Hit {
                        cost: *extra,
                        role: Role::Shadow,
                        joins_previous: false,
                        ..hit.clone()
                    });
                }
            }
        }
        call
    }
}

impl<S: Store + AdminStore> Reporting for WithLeasing<S> {
    /// The store's series, and the leases'.
    fn report(&self, series: &Series) {
        self.shared.inner.report(series);
        let table = &self.shared.table;
        series.total(
            "sluice_budget_lease_served_total",
            table.served.load(Ordering::Relaxed),
        );
        series.total(
            "sluice_budget_lease_chunks_total",
            table.chunks.load(Ordering::Relaxed),
        );
        series.total(
            "sluice_budget_lease_given_back_total",
            table.given_back.load(Ordering::Relaxed),
        );
        let (leases, unspent) = table.held();
        series.level("sluice_budget_leases", leases as u64);
        series.level("sluice_budget_lease_unspent", unspent);
    }
}

impl<S: Store + AdminStore> Store for WithLeasing<S> {
    fn name(&self) -> &'static str {
        self.shared.inner.name()
    }

    async fn charge(&self, hits: &[Hit], charging: Charging) -> Result<Vec<Decision>, StoreError> {
        let leased = hits
            .iter()
            .any(|hit| hit.limit.modifiers.leasing().is_some());
        if charging != Charging::AllOrNothing || !leased {
            return self.shared.inner.charge(hits, charging).await;
        }
        // Boxed: its future (the waits for a take, the give-backs, the store call) is five
        // times the store call's, and every call on the store, leased or not, would carry it,
        // copy it and write it to memory of its own.
        Box::pin(self.shared.charge_leased(hits)).await
    }

    async fn healthy(&self) -> bool {
        self.shared.inner.healthy().await
    }

    /// Gives every chunk back (their limits may have changed) and tells the store. Called
    /// from the reload's own thread: the give-back runs on the runtime the store was made on.
    fn config_changed(&self) {
        let runtime = tokio::runtime::Handle::try_current()
            .ok()
            .or_else(|| self.shared.runtime.clone());
        match runtime {
            Some(runtime) => {
                let unspent = self.shared.table.idle(self.shared.clock.now_us(), true);
                let shared = self.shared.clone();
                runtime.spawn(async move { shared.give_back(unspent).await });
            }
            // No runtime to give back on (a tool that never leases): the chunks stay held
            // until they are idle, as the store still counts them.
            None => tracing::debug!("no runtime to give leased chunks back on"),
        }
        self.shared.inner.config_changed();
    }
}
