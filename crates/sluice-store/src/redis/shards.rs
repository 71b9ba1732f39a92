//! Requests whose keys live in different shards (a Cluster's slots, or the two Redis of
//! `REDIS_PERSECOND`): one script call per shard, concurrently, and, when charging is
//! all-or-nothing, the charges that must not stand taken back before the answer goes out.

use std::time::Instant;

use futures_util::future::join_all;
use redis::cluster_routing::Slot;

use super::{decisions, protocol, store_error, Connection, HitCall, Mode, RedisStore};
use crate::StoreError;
use sluice_core::engine::{standing, Charging};
use sluice_core::limit::{Decision, Hit};

impl RedisStore {
    /// The shard of `call`: its backend, and on a Cluster its slot.
    fn shard_of(&self, call: &HitCall) -> Shard {
        let on_cluster = matches!(
            self.backends[call.backend].connection,
            Connection::Cluster(_)
        );
        Shard {
            backend: call.backend,
            slot: on_cluster.then(|| Slot::for_key(&call.key)),
        }
    }

    /// Keys in different shards (a Cluster's slots, or the two Redis of `REDIS_PERSECOND`)
    /// cannot be touched by one script: each shard's admitted hits are charged (`Mode::Any`),
    /// then the charges that must not stand (`engine::standing`: a descriptor with a denied
    /// limit, a vetoed request; never debt) are taken back (`Mode::Refund`) before the answer goes out.
    /// Nothing is ever over-admitted (a charge lands before the decision that could rely on
    /// it); meanwhile a concurrent request may see charges that are then taken back. A hit
    /// whose charge is taken back reports what remains without it.
    pub(super) async fn decide_across_shards(
        &self,
        hits: &[Hit],
        calls: Vec<HitCall>,
        deadline: Instant,
    ) -> Result<Vec<Decision>, StoreError> {
        let (mut decided, failure) = self.call_each_shard(&calls, Mode::Any, deadline).await;
        self.take_back(
            hits,
            &calls,
            &mut decided,
            Charging::AllOrNothing,
            failure.is_some(),
            deadline,
        )
        .await;
        every_decided(decided, failure)
    }

    /// Takes back the charges of `hits` that must not stand under `charging`
    /// (`engine::standing`), given what each shard decided; a hit whose charge is taken
    /// back reports what remains without it.
    async fn take_back(
        &self,
        hits: &[Hit],
        calls: &[HitCall],
        decided: &mut [Option<(Decision, u64)>],
        charging: Charging,
        failed: bool,
        deadline: Instant,
    ) {
        let admitted = |index: usize| decided[index].is_some_and(|(d, _)| d.admitted);
        let stands = standing(hits, admitted, charging, failed);
        let undo: Vec<bool> = stands.iter().map(|&stands| !stands).collect();
        if undo.iter().any(|&undo| undo) {
            for (index, decision) in self.refund(calls, decided, &undo, deadline).await {
                decided[index] = Some(decision);
            }
        }
    }

    /// The reference's counting across shards: every hit is charged, denied or not, so each
    /// shard's call is the whole answer, but for a lease's acquire: one of a request that
    /// turns out vetoed (or that failed in part) is taken back, as on one Redis.
    pub(super) async fn decide_every_hit_across_shards(
        &self,
        hits: &[Hit],
        calls: Vec<HitCall>,
        deadline: Instant,
    ) -> Result<Vec<Decision>, StoreError> {
        let (mut decided, failure) = self
            .call_each_shard(&calls, Mode::EveryPart, deadline)
            .await;
        if hits.iter().any(Hit::acquires) {
            self.take_back(
                hits,
                &calls,
                &mut decided,
                Charging::EveryHit,
                failure.is_some(),
                deadline,
            )
            .await;
        }
        every_decided(decided, failure)
    }

    /// A dry run (`Charging::Check`): each shard's hits decided by the script's read-only
    /// twin, which writes nothing; on one Redis the request's rules apply whole (`Mode::All`),
    /// across shards each shard's (`Mode::Any`).
    pub(super) async fn check_each_shard(
        &self,
        calls: Vec<HitCall>,
        deadline: Instant,
    ) -> Result<Vec<Decision>, StoreError> {
        let shards = self.shards_of(&calls);
        let mode = if shards.len() == 1 && shards[0].0.slot.is_none() {
            Mode::All
        } else {
            Mode::Any
        };
        let (decided, failure) = self
            .call_shards(&calls, &shards, mode, true, deadline)
            .await;
        every_decided(decided, failure)
    }

    /// `calls` by shard: each shard, and the indices of its calls.
    fn shards_of(&self, calls: &[HitCall]) -> Vec<(Shard, Vec<usize>)> {
        let mut shards: Vec<(Shard, Vec<usize>)> = Vec::new();
        for (index, call) in calls.iter().enumerate() {
            let shard = self.shard_of(call);
            match shards.iter_mut().find(|(s, _)| *s == shard) {
                Some((_, members)) => members.push(index),
                None => shards.push((shard, vec![index])),
            }
        }
        shards
    }

    /// One script call per shard of `calls`, concurrently, as `mode` says: each hit's
    /// decision (by index; `None` where its shard failed) and a failure, if any.
    async fn call_each_shard(
        &self,
        calls: &[HitCall],
        mode: Mode,
        deadline: Instant,
    ) -> (Vec<Option<(Decision, u64)>>, Option<StoreError>) {
        let shards = self.shards_of(calls);
        self.call_shards(calls, &shards, mode, false, deadline)
            .await
    }

    /// The calls of `shards`, each shard's in one script call, concurrently; `read_only`: by
    /// the script's read-only twin.
    async fn call_shards(
        &self,
        calls: &[HitCall],
        shards: &[(Shard, Vec<usize>)],
        mode: Mode,
        read_only: bool,
        deadline: Instant,
    ) -> (Vec<Option<(Decision, u64)>>, Option<StoreError>) {
        let groups: Vec<Vec<HitCall>> = shards
            .iter()
            .map(|(_, members)| members.iter().map(|&i| calls[i].clone()).collect())
            .collect();
        let replies = join_all(shards.iter().zip(&groups).map(|((shard, _), group)| {
            let backend = &self.backends[shard.backend];
            async move {
                if read_only {
                    self.call_checking(backend, group, mode, deadline).await
                } else {
                    self.call(backend, group, mode, deadline).await
                }
            }
        }))
        .await;
        let mut decided: Vec<Option<(Decision, u64)>> = vec![None; calls.len()];
        let mut failure = None;
        for ((_, members), reply) in shards.iter().zip(replies) {
            match reply
                .map_err(store_error)
                .and_then(|r| decisions(&r, members.len(), mode))
            {
                Ok(found) => {
                    for (&index, decision) in members.iter().zip(found) {
                        decided[index] = Some(decision);
                    }
                }
                Err(error) => failure = Some(error),
            }
        }
        (decided, failure)
    }

    /// Takes back the charges `decided` made (admitted hits of cost > 0) of the hits `undo`
    /// names, shard by shard; returns, by hit index, what each refunded hit reports then.
    async fn refund(
        &self,
        calls: &[HitCall],
        decided: &[Option<(Decision, u64)>],
        undo: &[bool],
        deadline: Instant,
    ) -> Vec<(usize, (Decision, u64))> {
        let mut shards: Vec<(Shard, Vec<usize>, Vec<HitCall>)> = Vec::new();
        for (index, (call, decision)) in calls.iter().zip(decided).enumerate() {
            let Some((decision, decided_at_us)) = decision else {
                continue;
            };
            if !undo[index] || !decision.admitted || call.args.cost == 0 {
                continue;
            }
            let mut charged = call.clone();
            charged.args.now_us = Some(*decided_at_us);
            let shard = self.shard_of(&charged);
            match shards.iter_mut().find(|(s, _, _)| *s == shard) {
                Some((_, indices, members)) => {
                    indices.push(index);
                    members.push(charged);
                }
                None => shards.push((shard, vec![index], vec![charged])),
            }
        }
        let refunds = shards.iter().map(|(shard, _, group)| {
            self.call(&self.backends[shard.backend], group, Mode::Refund, deadline)
        });
        let mut refunded = Vec::new();
        for ((_, indices, _), result) in shards.iter().zip(join_all(refunds).await) {
            match result
                .map_err(store_error)
                .and_then(|r| decisions(&r, indices.len(), Mode::Refund))
            {
                Ok(found) => refunded.extend(indices.iter().copied().zip(found)),
                Err(error) => {
                    tracing::warn!(%error, "cannot take back the charges of a denied request")
                }
            }
        }
        refunded
    }
}

/// The decisions of a request decided shard by shard: the first failure, else every hit's.
fn every_decided(
    decided: Vec<Option<(Decision, u64)>>,
    failure: Option<StoreError>,
) -> Result<Vec<Decision>, StoreError> {
    if let Some(error) = failure {
        return Err(error);
    }
    decided
        .into_iter()
        .map(|decision| decision.map(|(d, _)| d))
        .collect::<Option<Vec<Decision>>>()
        .ok_or_else(|| protocol("a slot answered fewer hits than asked"))
}

/// Where a script call runs: a backend, and on a Cluster one slot of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Shard {
    backend: usize,
    slot: Option<Slot>,
}
