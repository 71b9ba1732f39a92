//! The heavy hitters of every replica sharing a Redis: each replica writes its lists there
//! every `PUBLISH_EVERY` (`Summary`, at most `LISTED` values a list), and a read merges this
//! replica's own counts with the others' (`merge`). A value's merged count is the sum of its
//! counts, each replica that does not list it adding the most it may have counted there (its
//! floor), so the merged count is never under the true one and over it by at most the sum of
//! the replicas' floors: the merged answer's bound. A replica's lists are at most
//! `PUBLISH_EVERY` old; one not heard from for `MAX_AGE` is left out (and its report deleted).

use std::sync::Weak;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::window::{self, Part};
use super::{By, Heavy, HeavyHitters, LimitName, LimitView, Point, Span, Top};
use sluice_store::any::AnyStore;
use sluice_store::StoreError;

/// How often a replica writes its lists.
pub const PUBLISH_EVERY: Duration = Duration::from_secs(2);
/// A replica's lists older than this are left out.
pub const MAX_AGE: Duration = Duration::from_secs(10);
/// The reports' kind in Redis.
const KIND: &str = "heavy_hitters";

/// One list of one replica: the values it counted most, the window's total, and the most a
/// value it does not list may have counted (`floor`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct List {
    pub window: Span,
    pub by: By,
    pub values: Vec<Heavy>,
    pub total: u64,
    pub floor: u64,
}

/// One limit's lists, the values denied in the last 10 to 20 seconds, and its hits and
/// denials over the last hour.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LimitLists {
    pub name: LimitName,
    pub lists: Vec<List>,
    pub denied_now: List,
    pub timeline: Vec<Point>,
}

/// What one replica tells the others.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Summary {
    pub limits: Vec<LimitLists>,
}

impl Summary {
    /// `name`'s list over `window` by `by`, when the replica tracks it.
    pub fn list(&self, name: &LimitName, window: Span, by: By) -> Option<&List> {
        self.limits
            .iter()
            .find(|l| &l.name == name)?
            .lists
            .iter()
            .find(|list| list.window == window && list.by == by)
    }
}

/// A local top list as a replica tells it: at most `listed` values; when some are left out,
/// a value not listed counted at most the least listed count.
pub fn list_of(top: Top, window: Span, by: By, listed: usize) -> List {
    let mut values = top.values;
    let cut = values.len() > listed;
    values.truncate(listed);
    let least_listed = values.last().map_or(0, |h| h.count);
    List {
        window,
        by,
        total: top.total,
        floor: if cut {
            top.bound.max(least_listed)
        } else {
            top.bound
        },
        values,
    }
}

impl HeavyHitters {
    /// This replica's lists of every limit, at most `listed` values each.
    pub fn summary(&self, listed: usize) -> Summary {
        let capacity = self.settings.capacity;
        let now = self.now();
        let limits = self
            .tracked()
            .iter()
            .map(|tracked| {
                let tracker = tracked.lock();
                let mut lists = Vec::new();
                for window in Span::ALL {
                    for by in [By::Hits, By::Denials] {
                        let top = tracker.window(window).top(now, by, capacity);
                        lists.push(list_of(top, window, by, listed));
                    }
                }
                let denied_now = tracker.denied_now(now, capacity);
                LimitLists {
                    name: tracked.name.clone(),
                    lists,
                    denied_now: list_of(denied_now, Span::Minute, By::Denials, listed),
                    timeline: tracker.timeline.points(now),
                }
            })
            .collect();
        Summary { limits }
    }
}

/// `name`'s list over `window` by `by`, merged over `summaries` (this replica's and the
/// others'); `None` when none tracks the limit.
pub fn merged_top(
    summaries: &[Summary],
    name: &LimitName,
    window: Span,
    by: By,
    k: usize,
) -> Option<Top> {
    let lists: Vec<&List> = summaries
        .iter()
        .filter_map(|s| s.list(name, window, by))
        .collect();
    (!lists.is_empty()).then(|| merge(&lists, k))
}

/// The limits any of `summaries` tracks.
pub fn merged_names(summaries: &[Summary]) -> Vec<LimitName> {
    let mut names: Vec<LimitName> = Vec::new();
    for limit in summaries.iter().flat_map(|s| &s.limits) {
        if !names.contains(&limit.name) {
            names.push(limit.name.clone());
        }
    }
    names
}

/// Every limit as the dashboard shows it, merged over `summaries`, `k` values a list.
pub fn merged_views(summaries: &[Summary], k: usize) -> Vec<LimitView> {
    merged_names(summaries)
        .into_iter()
        .map(|name| {
            let of_limit: Vec<&LimitLists> = summaries
                .iter()
                .filter_map(|s| s.limits.iter().find(|l| l.name == name))
                .collect();
            let top = |by| merged_top(summaries, &name, Span::Minute, by, k).unwrap_or_default();
            let top_hits = top(By::Hits);
            let top_denials = top(By::Denials);
            let denied_now: Vec<&List> = of_limit.iter().map(|l| &l.denied_now).collect();
            let mut steps: std::collections::BTreeMap<u64, Point> = Default::default();
            for point in of_limit.iter().flat_map(|l| &l.timeline) {
                let step = steps.entry(point.at).or_insert(Point {
                    at: point.at,
                    hits: 0,
                    denials: 0,
                });
                step.hits += point.hits;
                step.denials += point.denials;
            }
            LimitView {
                domain: name.domain,
                limit: name.limit,
                in_force: Vec::new(),
                hits_last_minute: top_hits.total,
                denials_last_minute: top_denials.total,
                timeline: steps.into_values().collect(),
                denied_now: merge(&denied_now, k),
                top_hits,
                top_denials,
            }
        })
        .collect()
}

/// This replica's summary and the others' (`listed` values a list of its own), with why the
/// others' could not be read, if they could not.
pub async fn summaries(
    hitters: &HeavyHitters,
    store: &AnyStore,
) -> (Vec<Summary>, Option<StoreError>) {
    let own = hitters.summary(hitters.settings().capacity);
    match others(hitters, store).await {
        Ok(mut others) => {
            others.insert(0, own);
            (others, None)
        }
        Err(error) => (vec![own], Some(error)),
    }
}

/// The `k` values of `lists` (one a replica) with the highest merged count.
pub fn merge(lists: &[&List], k: usize) -> Top {
    let parts: Vec<Part<'_>> = lists
        .iter()
        .map(|list| Part {
            values: list
                .values
                .iter()
                .map(|h| (h.value.as_str(), h.count, h.error))
                .collect(),
            total: list.total,
            floor: list.floor,
        })
        .collect();
    window::merge(&parts, k)
}

/// The other replicas' summaries, read from Redis (none on the memory store, where a
/// replica has no peers).
pub async fn others(hitters: &HeavyHitters, store: &AnyStore) -> Result<Vec<Summary>, StoreError> {
    let Some(redis) = store.redis() else {
        return Ok(Vec::new());
    };
    let reports = redis.reports(KIND, MAX_AGE).await?;
    Ok(reports
        .into_iter()
        .filter(|(replica, _)| replica != hitters.replica())
        .filter_map(|(_, text)| serde_json::from_str(&text).ok())
        .collect())
}

/// Writes this replica's lists to Redis every `PUBLISH_EVERY`, until the server lets go of its
/// metrics or its store (nothing on the memory store, or with tracking off). A failed write is
/// logged once until one succeeds again.
pub async fn publish(hitters: Weak<HeavyHitters>, store: Weak<AnyStore>) {
    let mut failing = false;
    let mut every = tokio::time::interval(PUBLISH_EVERY);
    loop {
        every.tick().await;
        let (Some(hitters), Some(store)) = (hitters.upgrade(), store.upgrade()) else {
            return;
        };
        let settings = hitters.settings();
        let Some(redis) = store.redis().filter(|_| settings.capacity > 0) else {
            return;
        };
        let listed = (settings.top * 4).min(settings.capacity);
        let text = match serde_json::to_string(&hitters.summary(listed)) {
            Ok(text) => text,
            Err(error) => {
                tracing::warn!(%error, "the heavy hitters cannot be written as JSON");
                continue;
            }
        };
        match redis.put_report(KIND, hitters.replica(), &text).await {
            Ok(()) if failing => {
                failing = false;
                tracing::info!("the heavy hitters are shared through Redis again");
            }
            Ok(()) => {}
            Err(error) if !failing => {
                failing = true;
                tracing::warn!(%error, "the heavy hitters cannot be shared through Redis: the admin port tells this replica's own until it can");
            }
            Err(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn heavy(value: &str, count: u64, error: u64) -> Heavy {
        Heavy {
            value: value.to_string(),
            count,
            error,
        }
    }

    #[test]
    fn a_replica_that_does_not_list_a_value_adds_its_floor() {
        let a = List {
            window: Span::Minute,
            by: By::Hits,
            values: vec![heavy("x", 50, 0), heavy("y", 10, 2)],
            total: 70,
            floor: 3,
        };
        let b = List {
            window: Span::Minute,
            by: By::Hits,
            values: vec![heavy("y", 40, 0)],
            total: 40,
            floor: 0,
        };
        let top = merge(&[&a, &b], 5);
        assert_eq!(top.values, [heavy("x", 50, 0), heavy("y", 50, 2)]);
        assert_eq!(top.total, 110);
        assert_eq!(top.bound, 3);
    }

    #[test]
    fn a_cut_list_tells_the_least_listed_count_as_its_floor() {
        let top = Top {
            values: vec![heavy("a", 9, 0), heavy("b", 5, 0), heavy("c", 2, 0)],
            total: 16,
            bound: 0,
        };
        let list = list_of(top, Span::Hour, By::Denials, 2);
        assert_eq!(list.values.len(), 2);
        assert_eq!(list.floor, 5);
    }
}
