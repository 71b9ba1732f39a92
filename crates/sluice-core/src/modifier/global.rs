//! A limit held across regions, as a limit's `global` gives it: one home store owns the
//! limit's budget for each window, and each region (its own Redis, its replicas) takes chunks
//! of it ahead of need, so that a call is answered from its own region. The rules, and the
//! bounds they keep:
//!
//! - Home grants a region a chunk only from what no region holds or admitted: a window never
//!   admits more than the limit across the regions while they reach home.
//! - A region tops its holding up to `chunk` when it falls to half of it: what the regions
//!   hold unspent, and so what may be denied while budget remains, is at most regions x
//!   `chunk`.
//! - A region cut off from home spends what it holds, then admits on its `cut_off_share` of
//!   the window (what it took from home counts in it). A window in which regions are cut off
//!   admits at most the limit plus each cut-off region's share.
//! - What a region admitted alone is reported to home when the link returns (as the most it
//!   admitted past its grants, never added twice), and home grants nobody that part again.
//!
//! The regional side runs in the store layer (`sluice-store`'s `regions`); what is here is the
//! policy and the words that state its bound.

use std::fmt;

use crate::algorithm::params::Refusal;
use crate::modifier::{policy_map, Described, ModifierPolicy};

/// The YAML keys of `global`.
pub const KEYS: [&str; 3] = ["chunk", "regions", "cut_off_share"];

/// The smallest chunk: below it a region would call home on every other call.
pub const MIN_CHUNK: u64 = 2;

/// The most regions a limit may be held across.
pub const MAX_REGIONS: u64 = 64;

/// How a limit is held across regions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Policy {
    /// The most a region holds unspent of a window's budget: what it tops its holding up to.
    pub chunk: u32,
    /// How many regions share the limit: the bound of what is held is this times `chunk`,
    /// and a cut-off region's share is the limit divided by it unless `cut_off_share` says.
    pub regions: u32,
    /// What a region cut off from home admits in a window, given; `None`: the limit divided
    /// by `regions`.
    pub cut_off_share: Option<u32>,
}

impl Policy {
    /// What a region cut off from home admits in a window of a limit of `requests_per_unit`.
    pub fn share(&self, requests_per_unit: u32) -> u32 {
        self.cut_off_share
            .unwrap_or(requests_per_unit / self.regions.max(1))
    }

    /// What a region cut off admits in a window, in words: the given share, or `limit / 3`.
    fn share_text(&self) -> String {
        self.cut_off_share.map_or_else(
            || format!("limit / {}", self.regions),
            |share| share.to_string(),
        )
    }

    /// The bound, as `/rlconfig` states it.
    pub fn bound(&self) -> String {
        format!(
            "never admits more than the limit across {} regions; denies at most {} x {} while \
             budget remains; a region cut off admits at most {} a window",
            self.regions,
            self.regions,
            self.chunk,
            self.share_text()
        )
    }
}

/// A whole number under `global.<key>` from `min` to `max`.
fn whole(
    map: &serde_yaml::Mapping,
    key: &'static str,
    min: u64,
    max: u64,
) -> Result<Option<u32>, Refusal> {
    let Some(value) = map.get(key) else {
        return Ok(None);
    };
    value
        .as_u64()
        .filter(|n| (min..=max).contains(n))
        .and_then(|n| u32::try_from(n).ok())
        .map(Some)
        .ok_or_else(|| {
            let path = match key {
                "chunk" => "global.chunk",
                "regions" => "global.regions",
                _ => "global.cut_off_share",
            };
            Refusal::new(path, format!("must be a whole number from {min} to {max}"))
        })
}

impl ModifierPolicy for Policy {
    fn parse(value: &serde_yaml::Value, _period_us: u64) -> Result<Policy, Refusal> {
        let map = policy_map(value, "global", &KEYS)?;
        let chunk = whole(map, "chunk", MIN_CHUNK, u64::from(u32::MAX))?.ok_or_else(|| {
            Refusal::new(
                "global.chunk",
                "is required: the most a region holds at once, which bounds what may be denied while budget remains",
            )
        })?;
        let regions = whole(map, "regions", 1, MAX_REGIONS)?.ok_or_else(|| {
            Refusal::new(
                "global.regions",
                "is required: how many regions share the limit, which sets the bound and a cut-off region's share",
            )
        })?;
        let cut_off_share = whole(map, "cut_off_share", 0, u64::from(u32::MAX))?;
        Ok(Policy {
            chunk,
            regions,
            cut_off_share,
        })
    }

    fn shown(&self) -> String {
        format!(", {self}")
    }

    fn listed(&self) -> String {
        format!(
            ", global: chunk {}, regions {}, cut_off_share {} (bound: {})",
            self.chunk,
            self.regions,
            self.share_text(),
            self.bound()
        )
    }

    /// What a global limit does, in words, with its bounds (docs/regions.md).
    fn explained(&self, limit: &Described<'_>) -> String {
        let share = self.share(limit.requests_per_unit);
        format!(
            "{}: global across {} regions: each region takes chunks of each window's budget \
             from home ahead of need (topped up to {} when half is spent) and answers from its \
             own Redis; bound: a window never admits more than {} while regions reach home, and \
             at most {} x {} is denied while budget remains; a region cut off from home admits at \
             most {share} a window, so a window with k regions cut off admits at most {} + k x {share}",
            limit.rule,
            self.regions,
            self.chunk,
            limit.requests_per_unit,
            self.regions,
            self.chunk,
            limit.requests_per_unit,
        )
    }

    fn keeps_state(&self) -> bool {
        false
    }

    /// A denial holds only until the region's next grant: a replica's cache of denials
    /// remembers none of them (`lasting` names none).
    fn rules_cache(&self) -> bool {
        true
    }
}

impl fmt::Display for Policy {
    /// `global across 3 regions in chunks of at most 200`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "global across {} regions in chunks of at most {}",
            self.regions, self.chunk
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(yaml: &str) -> Result<Policy, Refusal> {
        crate::modifier::parsed(yaml)
    }

    #[test]
    fn the_share_is_the_limit_divided_by_the_regions_unless_given() {
        let global = policy("{chunk: 50, regions: 3}").expect("valid");
        assert_eq!(global.share(3000), 1000);
        assert_eq!(global.share(100), 33, "rounded down");
        let given = policy("{chunk: 50, regions: 3, cut_off_share: 0}").expect("valid");
        assert_eq!(given.share(3000), 0, "a region cut off may be told to deny");
        assert!(
            given.bound().contains("denies at most 3 x 50"),
            "{}",
            given.bound()
        );
        assert!(global
            .bound()
            .ends_with("admits at most limit / 3 a window"));
    }

    #[test]
    fn a_policy_without_its_bound_or_with_unknown_keys_is_refused() {
        let refused = |yaml: &str| policy(yaml).err().map(|r| r.key);
        assert_eq!(refused("{regions: 3}"), Some("global.chunk"));
        assert_eq!(refused("{chunk: 50}"), Some("global.regions"));
        assert_eq!(refused("{chunk: 1, regions: 3}"), Some("global.chunk"));
        assert_eq!(refused("{chunk: 5, regions: 0}"), Some("global.regions"));
        assert_eq!(refused("{chunk: 5, regions: 2, share: 3}"), Some("global"));
        assert_eq!(
            refused("{chunk: 5, regions: 2, cut_off_share: -1}"),
            Some("global.cut_off_share")
        );
        assert_eq!(refused("50"), Some("global"));
    }
}
