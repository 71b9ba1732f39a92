//! Keeping this replica's override index in step with the store: every record loaded before
//! the server serves, then the store's feed of changes read every `FOLLOW_EVERY` (one call
//! per replica, never one per request), so that a change made through any replica is in
//! force on every one within a second. A feed that cannot be followed (the store lost or
//! trimmed it) loads every record again, swapped in whole. On the memory store, which is
//! one process, a change is durable in its journal before it is answered; a snapshot, which
//! empties the journal, is written once the journal has grown.

use std::path::PathBuf;
use std::sync::{Arc, Weak};
use std::time::Duration;

use sluice_config::overrides::{self, OverrideIndex, OverrideLimit};
use sluice_config::LoadOptions;
use sluice_store::admin::{AdminStore, Feed};
use sluice_store::any::AnyStore;
use sluice_store::StoreError;

use super::parse_record;

/// How often the feed is read.
pub const FOLLOW_EVERY: Duration = Duration::from_millis(250);

/// A record compiled for the index, or `None` (logged) when this version cannot use it.
fn compiled(json: &str, options: LoadOptions) -> Option<(String, OverrideLimit)> {
    let doc = parse_record(json)?;
    match doc.compile(options) {
        Ok(limit) => Some((doc.descriptor_id(), limit)),
        Err(error) => {
            tracing::warn!(%error, record = json, "an override in the store is refused; skipped");
            None
        }
    }
}

/// Loads every record of `store` into `index` (replacing what it held); the feed's cursor.
pub async fn load(
    store: &AnyStore,
    index: &OverrideIndex,
    options: LoadOptions,
) -> Result<String, StoreError> {
    let loaded = store.all_overrides().await?;
    let records = loaded.records;
    // Compiled off the runtime's threads: a million records take a while.
    let all: Vec<(String, OverrideLimit)> = tokio::task::spawn_blocking(move || {
        records
            .iter()
            .filter_map(|(_, json)| compiled(json, options))
            .collect()
    })
    .await
    .unwrap_or_default();
    index.replace_all(all);
    Ok(loaded.cursor)
}

/// Applies the changes of the feed after `cursor` to `index`; the next cursor.
async fn catch_up(
    store: &AnyStore,
    index: &OverrideIndex,
    options: LoadOptions,
    cursor: &str,
) -> Result<String, StoreError> {
    match store.override_changes(cursor).await? {
        Feed::Reload => {
            tracing::info!("the store's feed of override changes cannot be followed from here: loading every override again");
            load(store, index, options).await
        }
        Feed::Changes { changes, cursor } => {
            for (record_id, json) in changes {
                let descriptor_id = overrides::descriptor_id_of(&record_id);
                match json.as_deref().and_then(|json| compiled(json, options)) {
                    Some((id, limit)) => index.insert(&id, limit),
                    None => {
                        index.remove(descriptor_id, overrides::name_of_record(&record_id));
                    }
                }
            }
            Ok(cursor)
        }
    }
}

/// Follows the store's feed from `cursor` until the store is gone; a failed read is
/// logged once per outage and tried again at the next tick.
pub async fn follow(
    store: Weak<AnyStore>,
    index: Arc<OverrideIndex>,
    options: LoadOptions,
    mut cursor: String,
) {
    let mut ticks = tokio::time::interval(FOLLOW_EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        ticks.tick().await;
        let Some(store) = store.upgrade() else { return };
        match catch_up(&store, &index, options, &cursor).await {
            Ok(next) => {
                if failing {
                    tracing::info!("reading the store's override changes again");
                }
                failing = false;
                cursor = next;
            }
            Err(error) => {
                if !failing {
                    tracing::warn!(%error, "cannot read the store's override changes: the overrides in force stay until it answers");
                }
                failing = true;
            }
        }
    }
}

/// The journal's length past which a change writes a snapshot, which empties it: the
/// journal stays small without a snapshot per change (a store of a million keys takes
/// seconds to write).
const COMPACT_JOURNAL_BYTES: u64 = 1 << 20;

/// Writes the memory store's snapshot to `path` after a change `changes` signals, when the
/// journal that made the change durable has grown past `COMPACT_JOURNAL_BYTES`.
pub async fn snapshot_on_change(
    store: Weak<AnyStore>,
    changes: Arc<tokio::sync::Notify>,
    path: PathBuf,
) {
    loop {
        changes.notified().await;
        let Some(store) = store.upgrade() else { return };
        if store
            .memory()
            .is_none_or(|memory| memory.journal_bytes() < COMPACT_JOURNAL_BYTES)
        {
            continue;
        }
        let path = path.clone();
        let saved = tokio::task::spawn_blocking(move || {
            store.memory().map(|memory| memory.save_snapshot(&path))
        })
        .await;
        if let Ok(Some(Err(error))) = saved {
            tracing::warn!(%error, "cannot write the memory store's snapshot after an override change");
        }
    }
}
