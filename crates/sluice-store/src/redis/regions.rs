//! What a limit held across regions asks of Redis (docs/regions.md): of the home Redis, a
//! region's report and grant (`lua/global_home.lua`); of a region's own Redis, what the
//! region was granted and admitted alone (`lua/global_region.lua`) and what it counted. The
//! scripts run with EVALSHA, sent again whole after NOSCRIPT; none is on a request's path.

use std::sync::LazyLock;

use redis::Script;

use super::RedisStore;
use crate::{key, StoreError};
use sluice_core::limit::Hit;

const HOME_LUA: &str = include_str!("../../../../lua/global_home.lua");
const REGION_LUA: &str = include_str!("../../../../lua/global_region.lua");
static HOME: LazyLock<Script> = LazyLock::new(|| Script::new(HOME_LUA));
static REGION: LazyLock<Script> = LazyLock::new(|| Script::new(REGION_LUA));

/// One region's report to home for one window of a global limit, and what it asks for.
#[derive(Debug, Clone, Copy)]
pub struct Ask<'a> {
    /// The window's hash at home (`RedisStore::global_key`).
    pub key: &'a str,
    pub region: &'a str,
    /// What the region knows it was granted.
    pub known: u64,
    /// What the region admitted in the window.
    pub count: u64,
    pub want: u64,
    pub limit: u64,
    pub ttl_ms: u64,
}

/// What home holds of a region's window after its report, and of every region's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Held {
    /// What the region was granted in all.
    pub granted: u64,
    /// The most the region admitted past its grants, alone.
    pub alone: u64,
    /// What every region was granted or admitted alone (only home's reply says).
    pub used: u64,
}

impl Held {
    /// What the region may admit in the window while it reaches home.
    pub fn allowance(&self) -> u64 {
        self.granted + self.alone
    }
}

fn number(reply: &[i64], at: usize) -> Result<u64, StoreError> {
    reply
        .get(at)
        .and_then(|n| u64::try_from(*n).ok())
        .ok_or_else(|| StoreError::Protocol {
            store: super::STORE,
            source: format!("{} numbers in a global limit's reply", reply.len()).into(),
        })
}

impl RedisStore {
    /// The name of a global limit's window (starting at `window_s`) in this Redis, home's or
    /// a region's (`side`): `<prefix>global_<descriptor key><period in s>_<start in s>_<side>`.
    pub fn global_key(&self, hit: &Hit, window_s: u64, side: &str) -> String {
        let period_s = hit.limit.period_us() / sluice_core::limit::MICROS_PER_SECOND;
        format!(
            "{}global_{}{period_s}_{window_s}_{side}",
            self.key_prefix, hit.key
        )
    }

    /// The key of `hit`'s count in its window at `now_us`, as the request path writes it.
    pub fn counter_key(&self, hit: &Hit, now_us: u64) -> String {
        key::redis_key(&self.key_prefix, hit, now_us)
    }

    async fn script(
        &self,
        invocation: redis::ScriptInvocation<'_>,
    ) -> Result<Vec<i64>, StoreError> {
        self.in_time(self.backends[0].connection.invoke(&invocation))
            .await
    }

    /// Loads both scripts, so that the first call of each is not sent twice (a NOSCRIPT, then
    /// the code itself): across a link between regions that is a round trip saved.
    pub async fn load_global_scripts(&self) -> Result<(), StoreError> {
        for code in [HOME_LUA, REGION_LUA] {
            let command = redis::cmd("SCRIPT").arg("LOAD").arg(code).to_owned();
            let _: String = self.within(command).await?;
        }
        Ok(())
    }

    /// Home's side: records what the region admitted alone, grants it what it asks of what
    /// remains, and says what it holds.
    pub async fn global_grant(&self, ask: &Ask<'_>) -> Result<Held, StoreError> {
        let mut invocation = HOME.prepare_invoke();
        invocation
            .key(ask.key)
            .arg(ask.region)
            .arg(ask.known)
            .arg(ask.count)
            .arg(ask.want)
            .arg(ask.limit)
            .arg(ask.ttl_ms);
        let reply = self.script(invocation).await?;
        Ok(Held {
            granted: number(&reply, 0)?,
            alone: number(&reply, 1)?,
            used: number(&reply, 2)?,
        })
    }

    /// A region's side: raises what the region holds to what home said, and says what it
    /// holds now (another replica may have heard more).
    pub async fn region_raise(
        &self,
        key: &str,
        held: Held,
        ttl_ms: u64,
    ) -> Result<Held, StoreError> {
        let mut invocation = REGION.prepare_invoke();
        invocation
            .key(key)
            .arg(held.granted)
            .arg(held.alone)
            .arg(ttl_ms);
        let reply = self.script(invocation).await?;
        Ok(Held {
            granted: number(&reply, 0)?,
            alone: number(&reply, 1)?,
            used: 0,
        })
    }

    /// A region's side: what the region holds of a window (`key`) and what it counted
    /// (`counter`), in one round trip on a single node.
    pub async fn region_read(&self, key: &str, counter: &str) -> Result<(Held, u64), StoreError> {
        let read_held = redis::cmd("HMGET").arg(key).arg("t").arg("a").to_owned();
        let read_count = redis::cmd("GET").arg(counter).to_owned();
        let (held, count): (Vec<Option<u64>>, Option<u64>) = match &self.backends[0].connection {
            // A Cluster's two keys may be in two slots: two calls.
            super::Connection::Cluster(_) => {
                let held = self.within(read_held).await?;
                (held, self.within(read_count).await?)
            }
            connection => {
                let mut pipe = redis::pipe();
                pipe.add_command(read_held).add_command(read_count);
                self.in_time(connection.pipeline(&pipe)).await?
            }
        };
        let held = Held {
            granted: held.first().copied().flatten().unwrap_or(0),
            alone: held.get(1).copied().flatten().unwrap_or(0),
            used: 0,
        };
        Ok((held, count.unwrap_or(0)))
    }
}
