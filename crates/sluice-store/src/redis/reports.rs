//! What each replica tells the others through Redis (the heavy hitters it counted): one hash
//! per kind of report (`<prefix>{sluice_reports}_<kind>`, one Cluster slot), a field per
//! replica holding `<unix ms> <text>`. A reader takes the fields written within the age it
//! accepts and deletes the older ones, so a replica that stopped leaves nothing behind for
//! long.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::RedisStore;
use crate::StoreError;

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl RedisStore {
    fn reports_key(&self, kind: &str) -> String {
        format!("{}{{sluice_reports}}_{kind}", self.key_prefix)
    }

    /// Writes `replica`'s report of `kind`, in place of its last.
    pub async fn put_report(
        &self,
        kind: &str,
        replica: &str,
        text: &str,
    ) -> Result<(), StoreError> {
        let mut command = redis::cmd("HSET");
        command
            .arg(self.reports_key(kind))
            .arg(replica)
            .arg(format!("{} {text}", unix_ms()));
        let _: u64 = self.within(command).await?;
        Ok(())
    }

    /// Every replica's report of `kind` written within `max_age`, by replica; the older ones
    /// are deleted.
    pub async fn reports(
        &self,
        kind: &str,
        max_age: Duration,
    ) -> Result<Vec<(String, String)>, StoreError> {
        let key = self.reports_key(kind);
        let all: Vec<(String, String)> = self
            .within(redis::cmd("HGETALL").arg(&key).to_owned())
            .await?;
        let oldest = unix_ms().saturating_sub(u64::try_from(max_age.as_millis()).unwrap_or(0));
        let mut fresh = Vec::new();
        let mut stale = Vec::new();
        for (replica, value) in all {
            let (at, text) = value.split_once(' ').unwrap_or(("0", ""));
            if at.parse::<u64>().is_ok_and(|at| at >= oldest) {
                fresh.push((replica, text.to_string()));
            } else {
                stale.push(replica);
            }
        }
        if !stale.is_empty() {
            let _: u64 = self
                .within(redis::cmd("HDEL").arg(&key).arg(&stale).to_owned())
                .await?;
        }
        Ok(fresh)
    }
}
