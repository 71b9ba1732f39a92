//! How many sluice replicas share this Redis, learnt while it answers: each replica writes a
//! heartbeat every second into one sorted set (`<prefix>{sluice_replicas}`, scored by the
//! time in milliseconds, expiring by itself), drops the entries older than `STALE`, and counts
//! the rest (`ReplicaCount`). A replica's share of a limit divides it by the count;
//! `--store-replicas` sets it instead, and then no heartbeat is written.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use super::connect::Connection;
use crate::Clock;

/// The replica count a share divides by: fixed, or kept up to date by whoever learns it (the
/// Redis store's heartbeats, `redis::replicas`).
#[derive(Clone)]
pub struct ReplicaCount(Arc<AtomicU32>);

impl ReplicaCount {
    /// A count fixed at `replicas` (at least 1).
    pub fn fixed(replicas: u32) -> ReplicaCount {
        ReplicaCount(Arc::new(AtomicU32::new(replicas.max(1))))
    }

    /// The count now (at least 1).
    pub fn get(&self) -> u32 {
        self.0.load(Ordering::Relaxed).max(1)
    }

    /// A handle that updates the count for as long as the count is held.
    pub fn downgrade(&self) -> Weak<AtomicU32> {
        Arc::downgrade(&self.0)
    }
}

/// How often a replica writes its heartbeat.
const HEARTBEAT: Duration = Duration::from_secs(1);
/// A replica not heard from for this long is no longer counted.
const STALE_MS: u64 = 5_000;

/// A count learnt from heartbeats in `connection`'s Redis under `key`, each call within
/// `timeout`, for as long as the count is held somewhere; 1 until the first answer.
pub fn learnt(
    connection: Connection,
    key: String,
    clock: Arc<dyn Clock>,
    timeout: Duration,
) -> ReplicaCount {
    let count = ReplicaCount::fixed(1);
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return count;
    };
    let held = count.downgrade();
    let member = format!("{:016x}", crate::unique_process_id());
    runtime.spawn(async move {
        let mut ticks = tokio::time::interval(HEARTBEAT);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            let Some(count) = held.upgrade() else { return };
            let now_ms = clock.now_us() / 1_000;
            let beat = heartbeat(&connection, &key, &member, now_ms);
            if let Ok(Ok(replicas)) = tokio::time::timeout(timeout, beat).await {
                count.store(replicas.max(1), Ordering::Relaxed);
            }
        }
    });
    count
}

/// Writes this replica's heartbeat at `now_ms`, forgets the stale ones, and counts the rest.
async fn heartbeat(
    connection: &Connection,
    key: &str,
    member: &str,
    now_ms: u64,
) -> redis::RedisResult<u32> {
    let _: i64 = connection
        .command(redis::cmd("ZADD").arg(key).arg(now_ms).arg(member))
        .await?;
    let stale = now_ms.saturating_sub(STALE_MS);
    let _: i64 = connection
        .command(
            redis::cmd("ZREMRANGEBYSCORE")
                .arg(key)
                .arg("-inf")
                .arg(format!("({stale}")),
        )
        .await?;
    let _: i64 = connection
        .command(redis::cmd("PEXPIRE").arg(key).arg(STALE_MS * 2))
        .await?;
    connection.command(redis::cmd("ZCARD").arg(key)).await
}
