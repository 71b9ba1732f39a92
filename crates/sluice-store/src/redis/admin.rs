//! The admin operations on Redis: a limit's keys deleted or credited (the request script's
//! "credit" mode) and its reads ("read" mode), and the override records kept by
//! `lua/overrides.lua` (a put or a delete, and its entry in the stream of changes, in one
//! script call) in a hash beside the counters; every replica reads the stream from where it
//! left off with plain commands.

use std::future::Future;
use std::time::Instant;

use redis::{Cmd, FromRedisValue};

use super::call::Mode;
use super::{decisions, protocol, store_error, RedisStore, DECISION_FIELDS};
use crate::admin::{AdminStore, Feed, Loaded, Page, Reading};
use crate::{key, StoreError};
use sluice_core::limit::{Decision, Hit};

/// The records' script.
const OVERRIDES_LUA: &str = include_str!("../../../../lua/overrides.lua");

/// How many changes one read of the feed takes at most.
const CHANGES_PER_READ: usize = 1000;

/// How many fields one HSCAN of a full load asks for.
const SCAN_COUNT: usize = 1000;

impl RedisStore {
    /// The records' hash and the stream of their changes: one Cluster slot.
    fn records_keys(&self) -> (String, String) {
        let records = format!("{}{{sluice_overrides}}", self.key_prefix);
        let changes = format!("{records}_changes");
        (records, changes)
    }

    /// `command` on the main Redis within the command timeout.
    pub(super) async fn within<T: FromRedisValue>(&self, command: Cmd) -> Result<T, StoreError> {
        self.in_time(self.backends[0].connection.command(&command))
            .await
    }

    /// The deadline of a call made now.
    fn deadline(&self) -> Instant {
        Instant::now() + self.command_timeout
    }

    /// `future` within the command timeout, its Redis error as a store error.
    pub(super) async fn in_time<T>(
        &self,
        future: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, StoreError> {
        // An open circuit sends nothing: these calls wait on Redis no more than a request's.
        self.breaker.check()?;
        match tokio::time::timeout(self.command_timeout, future).await {
            Ok(result) => result.map_err(store_error),
            Err(_) => Err(self.timed_out()),
        }
    }

    /// A call of `lua/overrides.lua`.
    fn records_call(&self, operation: &str) -> Cmd {
        let (records, changes) = self.records_keys();
        let mut command = redis::cmd("EVAL");
        command
            .arg(OVERRIDES_LUA)
            .arg(2)
            .arg(records)
            .arg(changes)
            .arg(operation);
        command
    }

    /// The stream's first and last entry ids ("" when it is empty) and, when `cursor` is
    /// given, up to `CHANGES_PER_READ` changes after it, each (entry id, record id, its JSON
    /// now or `None`). Plain commands, pipelined: the poll every replica makes runs no script
    /// (a Redis's script cache and script counts are the request path's).
    async fn read_changes(&self, cursor: &str) -> Result<Changes, StoreError> {
        let (records, changes) = self.records_keys();
        let mut pipe = redis::pipe();
        pipe.cmd("XRANGE")
            .arg(&changes)
            .arg("-")
            .arg("+")
            .arg("COUNT")
            .arg(1)
            .cmd("XREVRANGE")
            .arg(&changes)
            .arg("+")
            .arg("-")
            .arg("COUNT")
            .arg(1);
        if !cursor.is_empty() {
            pipe.cmd("XRANGE")
                .arg(&changes)
                .arg(format!("({cursor}"))
                .arg("+")
                .arg("COUNT")
                .arg(CHANGES_PER_READ);
        }
        type Entries = Vec<(String, Vec<String>)>;
        let connection = &self.backends[0].connection;
        let replies: Vec<Entries> = self.in_time(connection.pipeline(&pipe)).await?;
        let id_of = |entries: Option<&Entries>| {
            entries
                .and_then(|e| e.first())
                .map(|(id, _)| id.clone())
                .unwrap_or_default()
        };
        let (first, last) = (id_of(replies.first()), id_of(replies.get(1)));
        let entries: Vec<(String, String)> = replies
            .get(2)
            .into_iter()
            .flatten()
            .filter_map(|(entry, fields)| {
                let at = fields.iter().position(|f| f == "id")?;
                Some((entry.clone(), fields.get(at + 1)?.clone()))
            })
            .collect();
        let mut read = Vec::with_capacity(entries.len());
        if !entries.is_empty() {
            let mut hmget = redis::cmd("HMGET");
            hmget.arg(&records);
            for (_, id) in &entries {
                hmget.arg(id);
            }
            let now: Vec<Option<String>> = self.within(hmget).await?;
            for ((entry, id), json) in entries.into_iter().zip(now) {
                read.push((entry, id, json));
            }
        }
        Ok(Changes { first, last, read })
    }
}

/// What one read of the stream of changes found.
struct Changes {
    first: String,
    last: String,
    read: Vec<(String, String, Option<String>)>,
}

/// A stream entry id (`<ms>-<seq>`) as numbers, to compare ("" and malformed: 0-0).
fn entry_id(id: &str) -> (u64, u64) {
    let (ms, seq) = id.split_once('-').unwrap_or((id, "0"));
    (ms.parse().unwrap_or(0), seq.parse().unwrap_or(0))
}

/// The cursor of a feed that has seen nothing: before any entry.
const START: &str = "0-0";

/// A glob pattern matching the ids that start with `prefix` (Redis `SCAN MATCH`).
fn glob_prefix(prefix: &str) -> String {
    let mut pattern = String::with_capacity(prefix.len() + 2);
    for c in prefix.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push('*');
    pattern
}

impl AdminStore for RedisStore {
    async fn reset(&self, hits: &[Hit], records: bool) -> Result<u64, StoreError> {
        let now_us = self.clock.now_us();
        let mut removed = 0;
        for hit in hits {
            let connection = &self.backends[self.backend_of(hit)].connection;
            let mut keys = vec![key::redis_key(&self.key_prefix, hit, now_us)];
            if records {
                for part in hit.limit.modifiers.reset_parts() {
                    keys.push(key::kept_key(&self.key_prefix, hit, part.name, None));
                }
            }
            for key in keys {
                let deleted: u64 = self
                    .in_time(connection.command(redis::cmd("DEL").arg(key)))
                    .await?;
                removed += deleted;
            }
        }
        Ok(removed)
    }

    async fn credit(&self, hit: &Hit) -> Result<Decision, StoreError> {
        let now_us = self.clock.now_us();
        let call = self.hit_call(hit, 0, now_us);
        let backend = &self.backends[call.backend];
        let reply = self
            .in_time(self.call(
                backend,
                std::slice::from_ref(&call),
                Mode::Credit,
                self.deadline(),
            ))
            .await?;
        let (decision, _) = decisions(&reply, 1, Mode::Credit)?
            .pop()
            .ok_or_else(|| protocol("no decision in a credit's reply"))?;
        Ok(Decision {
            decided_at_us: now_us,
            ..decision
        })
    }

    /// The request script's "read" mode: the state under the limit's own key (a limit with a
    /// modifier has a tagged one), decided at cost 0 without its modifiers, and what they set
    /// aside, nothing written.
    async fn read(&self, hit: &Hit) -> Result<Reading, StoreError> {
        let now_us = self.clock.now_us();
        let read = Hit {
            cost: 0,
            lease: None,
            ..hit.clone()
        };
        let call = self.hit_call(&read, 0, now_us);
        let backend = &self.backends[call.backend];
        let reply = self
            .in_time(self.call(
                backend,
                std::slice::from_ref(&call),
                Mode::Read,
                self.deadline(),
            ))
            .await?;
        let [.., used, held, at] = reply[..] else {
            return Err(protocol("no state in a read's reply"));
        };
        if reply.len() != DECISION_FIELDS + 3 {
            return Err(protocol(&format!(
                "{} numbers in a read's reply",
                reply.len()
            )));
        }
        let (decision, _) = decisions(&reply[..DECISION_FIELDS], 1, Mode::All)?
            .pop()
            .ok_or_else(|| protocol("no decision in a read's reply"))?;
        Ok(Reading {
            decision: Decision {
                decided_at_us: u64::try_from(at).unwrap_or(now_us),
                ..decision
            },
            used: u64::try_from(used).unwrap_or(0),
            held: u64::try_from(held).unwrap_or(0),
        })
    }

    async fn put_override(&self, id: &str, json: &str) -> Result<Option<String>, StoreError> {
        let mut command = self.records_call("put");
        command.arg(id).arg(json);
        self.within(command).await
    }

    async fn delete_override(&self, id: &str) -> Result<Option<String>, StoreError> {
        let mut command = self.records_call("delete");
        command.arg(id);
        self.within(command).await
    }

    async fn get_override(&self, id: &str) -> Result<Option<String>, StoreError> {
        let (records, _) = self.records_keys();
        self.within(redis::cmd("HGET").arg(records).arg(id).to_owned())
            .await
    }

    /// The page token is `<HSCAN cursor>:<records of that step already given>`: one HSCAN
    /// step may find more than a page holds, and the next page takes that step again (its
    /// records sorted) from where the page ended.
    async fn list_overrides(
        &self,
        prefix: &str,
        token: &str,
        count: usize,
    ) -> Result<Page, StoreError> {
        let (records, _) = self.records_keys();
        let pattern = glob_prefix(prefix);
        let count = count.max(1);
        let (cursor, skip) = token.split_once(':').unwrap_or((token, "0"));
        let mut cursor: u64 = cursor.parse().unwrap_or(0);
        let mut skip: usize = skip.parse().unwrap_or(0);
        let mut page = Vec::with_capacity(count);
        loop {
            let mut command = redis::cmd("HSCAN");
            command
                .arg(&records)
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(count.max(SCAN_COUNT));
            let (next, fields): (u64, Vec<String>) = self.within(command).await?;
            let mut found = Vec::with_capacity(fields.len() / 2);
            let mut pairs = fields.into_iter();
            while let (Some(id), Some(json)) = (pairs.next(), pairs.next()) {
                found.push((id, json));
            }
            found.sort();
            let room = count - page.len();
            let fresh: Vec<(String, String)> = found.into_iter().skip(skip).collect();
            if fresh.len() > room {
                page.extend(fresh.into_iter().take(room));
                return Ok(Page {
                    records: page,
                    next: Some(format!("{cursor}:{}", skip + room)),
                });
            }
            page.extend(fresh);
            skip = 0;
            cursor = next;
            if cursor == 0 || page.len() == count {
                break;
            }
        }
        Ok(Page {
            records: page,
            next: (cursor != 0).then(|| format!("{cursor}:0")),
        })
    }

    /// The stream's last id is read before the hash is scanned: a change made while it is
    /// scanned comes again by the feed.
    async fn all_overrides(&self) -> Result<Loaded, StoreError> {
        let head = self.read_changes("").await?;
        let cursor = match head.last.as_str() {
            "" => START.to_string(),
            last => last.to_string(),
        };
        let mut records = Vec::new();
        let mut token = String::new();
        loop {
            let page = self.list_overrides("", &token, SCAN_COUNT).await?;
            records.extend(page.records);
            match page.next {
                Some(next) => token = next,
                None => break,
            }
        }
        Ok(Loaded { records, cursor })
    }

    /// A cursor before the stream's first entry (some changes after it were trimmed), or
    /// after its last (the stream was lost: a flush, a failover to a replica that lagged),
    /// cannot be followed: every record is loaded again.
    async fn override_changes(&self, cursor: &str) -> Result<Feed, StoreError> {
        if cursor.is_empty() {
            return Ok(Feed::Reload);
        }
        let changes = self.read_changes(cursor).await?;
        let at = entry_id(cursor);
        let lost = if changes.last.is_empty() {
            cursor != START
        } else {
            (at < entry_id(&changes.first) && cursor != START) || at > entry_id(&changes.last)
        };
        if lost {
            return Ok(Feed::Reload);
        }
        let mut next = cursor.to_string();
        let mut applied = Vec::with_capacity(changes.read.len());
        for (entry, id, json) in changes.read {
            next = entry;
            applied.push((id, json));
        }
        Ok(Feed::Changes {
            changes: applied,
            cursor: next,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_ids_compare_by_time_then_sequence() {
        assert!(entry_id("5-1") < entry_id("5-2"));
        assert!(entry_id("5-9") < entry_id("10-0"));
        assert_eq!(entry_id(""), (0, 0));
    }

    #[test]
    fn a_prefix_pattern_escapes_glob_characters() {
        assert_eq!(glob_prefix("a*b\u{1f}"), "a\\*b\u{1f}*");
    }
}
