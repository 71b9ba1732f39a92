//! Who is being limited, as the admin API answers it (docs/heavy-hitters.md), for both its
//! faces: the limits tracked, a limit's heaviest values by hits or denials over a window, and
//! one value's counts with its limits in force. Every answer merges this replica's lists with
//! those the others share through Redis (`hitters::shared`).

use serde::Serialize;

use super::model::{DescriptorRef, DescriptorState};
use super::{Admin, AdminError};
use crate::hitters::shared::{self, Summary};
use crate::hitters::{entries_of, By, LimitName, Span, Top};
use sluice_config::overrides::EntryDoc;

/// A top list: the limit, what it is by, over which window, its values, the window's total
/// and the most any count is over.
#[derive(Debug, Serialize)]
pub struct TopAnswer {
    pub domain: String,
    pub limit: String,
    pub by: By,
    pub window: Span,
    pub values: Vec<HeavyValue>,
    pub total: u64,
    pub bound: u64,
}

/// One heavy value, with its descriptor (what `GetDescriptor` takes).
#[derive(Debug, Serialize)]
pub struct HeavyValue {
    pub value: String,
    pub descriptor: Vec<EntryDoc>,
    pub count: u64,
    pub error: u64,
}

/// A count (never under the true one) and the most it may be over.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Count {
    pub count: u64,
    pub error: u64,
}

/// One window's counts of a value.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct WindowCounts {
    pub hits: Count,
    pub denials: Count,
}

/// One value: its counts in each window, and its descriptor's limits in force as
/// `GetDescriptor` reads them.
#[derive(Debug, Serialize)]
pub struct ValueAnswer {
    pub domain: String,
    pub limit: String,
    pub value: String,
    pub descriptor: Vec<EntryDoc>,
    /// By window name (`1m`, `1h`).
    pub windows: std::collections::BTreeMap<&'static str, WindowCounts>,
    /// A limit in force (not in shadow mode) has nothing left: its next hit is denied.
    pub denied_now: bool,
    pub state: DescriptorState,
}

/// `by` as a call names it: `hits` (also when empty) or `denials`.
pub fn by_named(name: &str) -> Result<By, AdminError> {
    match name {
        "" | "hits" => Ok(By::Hits),
        "denials" => Ok(By::Denials),
        other => Err(AdminError::invalid(
            "by",
            format!("'{other}' is neither hits nor denials"),
        )),
    }
}

/// `window` as a call names it: `1m` (also when empty) or `1h`.
pub fn window_named(name: &str) -> Result<Span, AdminError> {
    match name {
        "" | "1m" => Ok(Span::Minute),
        "1h" => Ok(Span::Hour),
        other => Err(AdminError::invalid(
            "window",
            format!("'{other}' is neither 1m nor 1h"),
        )),
    }
}

/// The entries a value's text names.
fn descriptor_of(value: &str) -> Vec<EntryDoc> {
    entries_of(value)
        .into_iter()
        .map(|(key, value)| EntryDoc { key, value })
        .collect()
}

fn not_tracked(name: &LimitName) -> AdminError {
    AdminError::NotFound(format!(
        "no limit '{}' of domain '{}' is tracked (the tracked limits are listed without one)",
        name.limit, name.domain
    ))
}

impl Admin {
    /// Every replica's lists: this one's, and those the others shared through Redis (an error
    /// reading theirs answers UNAVAILABLE: a partial answer would pass for the whole).
    pub async fn hitter_summaries(&self) -> Result<Vec<Summary>, AdminError> {
        let hitters = self.metrics().heavy_hitters();
        match shared::summaries(hitters, self.store()).await {
            (summaries, None) => Ok(summaries),
            (_, Some(error)) => Err(AdminError::Store(error)),
        }
    }

    /// The limits any replica tracks (of `domain`, when given).
    pub async fn tracked_limits(&self, domain: Option<&str>) -> Result<Vec<LimitName>, AdminError> {
        let summaries = self.hitter_summaries().await?;
        Ok(shared::merged_names(&summaries)
            .into_iter()
            .filter(|name| domain.is_none_or(|d| name.domain == d))
            .collect())
    }

    /// The `k` values of `name` (the setting's number when `None`, at most the sketches'
    /// capacity) with the most hits or denials over `window`.
    pub async fn top(
        &self,
        name: LimitName,
        by: By,
        window: Span,
        k: Option<usize>,
    ) -> Result<TopAnswer, AdminError> {
        let settings = self.metrics().heavy_hitters().settings();
        let k = match k {
            None => settings.top,
            Some(k) if (1..=settings.capacity).contains(&k) => k,
            Some(k) => {
                return Err(AdminError::invalid(
                    "k",
                    format!(
                        "{k} is not between 1 and the sketches' capacity, {}",
                        settings.capacity
                    ),
                ))
            }
        };
        let summaries = self.hitter_summaries().await?;
        let Top {
            values,
            total,
            bound,
        } = shared::merged_top(&summaries, &name, window, by, k)
            .ok_or_else(|| not_tracked(&name))?;
        Ok(TopAnswer {
            domain: name.domain,
            limit: name.limit,
            by,
            window,
            values: values
                .into_iter()
                .map(|heavy| HeavyValue {
                    descriptor: descriptor_of(&heavy.value),
                    value: heavy.value,
                    count: heavy.count,
                    error: heavy.error,
                })
                .collect(),
            total,
            bound,
        })
    }

    /// `value` of `name`: its counts in each window, its limits in force, and whether it is
    /// denied now.
    pub async fn top_value(
        &self,
        name: LimitName,
        value: String,
    ) -> Result<ValueAnswer, AdminError> {
        if value.is_empty() {
            return Err(AdminError::invalid(
                "value",
                "a value is needed (key=value,...)",
            ));
        }
        let summaries = self.hitter_summaries().await?;
        let mut windows = std::collections::BTreeMap::new();
        for window in Span::ALL {
            let count = |by| {
                // Every value any replica lists: the one asked for is found if it is listed;
                // one no list holds counted at most the bound.
                let top = shared::merged_top(&summaries, &name, window, by, usize::MAX)
                    .ok_or_else(|| not_tracked(&name))?;
                let found = top.values.iter().find(|h| h.value == value);
                Ok::<_, AdminError>(found.map_or(
                    Count {
                        count: top.bound,
                        error: top.bound,
                    },
                    |h| Count {
                        count: h.count,
                        error: h.error,
                    },
                ))
            };
            let counts = WindowCounts {
                hits: count(By::Hits)?,
                denials: count(By::Denials)?,
            };
            windows.insert(window.as_str(), counts);
        }
        let descriptor = descriptor_of(&value);
        let state = self
            .get(DescriptorRef {
                domain: name.domain.clone(),
                descriptor: descriptor.clone(),
                name: None,
            })
            .await?;
        let denied_now = state
            .limits
            .iter()
            .any(|limit| !limit.shadow_mode && limit.remaining == 0);
        Ok(ValueAnswer {
            domain: name.domain,
            limit: name.limit,
            value,
            descriptor,
            windows,
            denied_now,
            state,
        })
    }
}
