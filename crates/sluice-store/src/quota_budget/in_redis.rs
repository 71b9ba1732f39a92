//! The RLQS budget in Redis (`lua/rlqs_budget.lua`): one hash per bucket, so every sluice
//! replica on the same Redis assigns from one limit. The script is run with EVALSHA and sent
//! again by redis-rs after NOSCRIPT.

use std::time::Duration;

use redis::{Script, ScriptInvocation};

use super::{Ask, Budget};
use crate::redis::{store_error, Connection, RedisStore, STORE};
use crate::StoreError;

/// The claims on buckets, in the store's main Redis.
pub struct RedisBudget {
    connection: Connection,
    script: Script,
    key_prefix: String,
    timeout: Duration,
}

impl RedisBudget {
    /// The budget in `store`'s main Redis, under its key prefix and within its command
    /// timeout.
    pub fn of(store: &RedisStore) -> RedisBudget {
        RedisBudget {
            connection: store.main_connection().clone(),
            script: Script::new(include_str!("../../../../lua/rlqs_budget.lua")),
            key_prefix: store.key_prefix().to_string(),
            timeout: store.command_timeout(),
        }
    }

    fn key(&self, bucket: &str) -> String {
        format!("{}{bucket}", self.key_prefix)
    }

    /// Runs `invocation`, within the command timeout.
    async fn run(&self, invocation: ScriptInvocation<'_>) -> Result<Vec<i64>, StoreError> {
        let call = self.connection.invoke(&invocation);
        match tokio::time::timeout(self.timeout, call).await {
            Ok(reply) => reply.map_err(store_error),
            Err(_) => Err(StoreError::Timeout {
                store: STORE,
                after: self.timeout,
            }),
        }
    }
}

impl Budget for RedisBudget {
    async fn claim(&self, ask: &Ask<'_>) -> Result<(u64, usize), StoreError> {
        let mut invocation = self.script.prepare_invoke();
        invocation
            .key(self.key(ask.bucket))
            .arg(ask.client)
            .arg("claim")
            .arg(ask.demand)
            .arg(ask.limit)
            .arg(ask.now_us)
            .arg(ask.expires_at_us);
        let reply = self.run(invocation).await?;
        match reply.as_slice() {
            [share, clients] => Ok((
                u64::try_from(*share).unwrap_or(0),
                usize::try_from(*clients).unwrap_or(0),
            )),
            _ => Err(StoreError::Protocol {
                store: STORE,
                source: format!("{} numbers in a budget reply", reply.len()).into(),
            }),
        }
    }

    async fn release(&self, bucket: &str, client: &str) {
        let mut invocation = self.script.prepare_invoke();
        invocation.key(self.key(bucket)).arg(client).arg("release");
        if let Err(error) = self.run(invocation).await {
            tracing::debug!(%error, "cannot release an RLQS claim; it lapses with its time-to-live");
        }
    }
}
