//! Priority tiers on one shared limit, as a descriptor's (or a limit's) `tiers` gives them:
//! every tier counts against the same limit, and a request of tier T is admitted only while
//! the limit's usage, all tiers together, stays within ceiling(T) x the limit after it. A
//! batch tier at 0.5 stops at half the capacity, a critical tier at 1.0 may use all of it,
//! and capacity an idle tier leaves is used by the others.
//!
//! The tier is read from a descriptor entry (`from`), which is left out of matching and of the
//! key, so that every tier shares one counter; a request without it, or naming an unknown
//! tier, is in `otherwise`. What the tier changes is how much room its hit must leave
//! (`ModifierPolicy::headroom`: the capacity less the tier's ceiling of it), which the engine
//! and `lua/request.lua` apply alike to every algorithm.

use std::fmt;
use std::sync::Arc;

use crate::algorithm::params::Refusal;
use crate::modifier::{fixed_point, policy_map, Class, Described, ModifierPolicy};

/// The YAML keys of `tiers`.
pub const KEYS: [&str; 3] = ["from", "ceilings", "otherwise"];

/// A ceiling's decimals: millionths of the limit.
const PLACES: usize = 6;
/// A ceiling of 1.0 in millionths.
const WHOLE: u64 = 1_000_000;

/// One tier: its name and its ceiling, in millionths of the limit.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Tier {
    pub name: String,
    pub ceiling_ppm: u32,
}

/// The tiers of a limit as configured.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Table {
    from: String,
    tiers: Vec<Tier>,
    otherwise: usize,
}

/// A limit's tiers, and the tier of the request a hit of it belongs to (`otherwise` until an
/// entry picks one).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Policy {
    table: Arc<Table>,
    chosen: usize,
}

impl Policy {
    /// The descriptor entry that names the tier.
    pub fn from(&self) -> &str {
        &self.table.from
    }

    /// The tiers, in the order configured.
    pub fn tiers(&self) -> &[Tier] {
        &self.table.tiers
    }

    /// The tier a request without the entry (or with an unknown tier) is in.
    pub fn otherwise(&self) -> &str {
        &self.table.tiers[self.table.otherwise].name
    }

    /// The tier the hit is in.
    pub fn chosen(&self) -> &Tier {
        &self.table.tiers[self.chosen]
    }

    /// What tier `name` may use of a limit of `capacity`: floor(ceiling x capacity).
    pub fn allowed(ceiling_ppm: u32, capacity: u64) -> u64 {
        let allowed = u128::from(capacity) * u128::from(ceiling_ppm) / u128::from(WHOLE);
        u64::try_from(allowed).unwrap_or(capacity)
    }
}

/// A ceiling as written: `0.5`, `1.0`, `0.125`.
fn ceiling_text(ppm: u32) -> String {
    let text = format!("{}.{:06}", ppm / 1_000_000, ppm % 1_000_000);
    let trimmed = text.trim_end_matches('0');
    if trimmed.ends_with('.') {
        format!("{trimmed}0")
    } else {
        trimmed.to_string()
    }
}

/// The ceilings as a YAML map of tier names to numbers in (0, 1], in file order.
fn parse_ceilings(value: Option<&serde_yaml::Value>) -> Result<Vec<Tier>, Refusal> {
    let Some(value) = value else {
        return Err(Refusal::new(
            "tiers.ceilings",
            "is required: each tier's name and the share of the limit it may fill (0 < ceiling <= 1)",
        ));
    };
    let serde_yaml::Value::Mapping(map) = value else {
        return Err(Refusal::new(
            "tiers.ceilings",
            "must be a map of tier names to ceilings (critical: 1.0, batch: 0.5)",
        ));
    };
    if map.is_empty() {
        return Err(Refusal::new(
            "tiers.ceilings",
            "must name at least one tier",
        ));
    }
    let mut tiers: Vec<Tier> = Vec::with_capacity(map.len());
    for (name, ceiling) in map {
        let Some(name) = name.as_str().filter(|n| !n.is_empty()) else {
            return Err(Refusal::new(
                "tiers.ceilings",
                format!("a tier's name must be a non-empty text, not {name:?}"),
            ));
        };
        let key = "tiers.ceilings";
        if name.contains('/') || name.chars().any(char::is_control) {
            let reason =
                format!("tier '{name}': a tier's name holds no '/' and no control character");
            return Err(Refusal::new(key, reason));
        }
        if tiers.iter().any(|t| t.name == name) {
            return Err(Refusal::new(key, format!("names the tier '{name}' twice")));
        }
        let ppm = fixed_point(ceiling, PLACES)
            .filter(|ppm| (1..=WHOLE).contains(ppm))
            .and_then(|ppm| u32::try_from(ppm).ok())
            .ok_or_else(|| {
                Refusal::new(
                    key,
                    format!("tier '{name}': the ceiling must be a number above 0 and at most 1 (a share of the limit, at most 6 decimals)"),
                )
            })?;
        tiers.push(Tier {
            name: name.to_string(),
            ceiling_ppm: ppm,
        });
    }
    Ok(tiers)
}

impl ModifierPolicy for Policy {
    fn parse(value: &serde_yaml::Value, _period_us: u64) -> Result<Policy, Refusal> {
        let map = policy_map(value, "tiers", &KEYS)?;
        let from = match map.get("from") {
            Some(serde_yaml::Value::String(from)) if !from.is_empty() => from.clone(),
            _ => {
                return Err(Refusal::new(
                    "tiers.from",
                    "is required: the descriptor entry that names a request's tier (priority)",
                ))
            }
        };
        let tiers = parse_ceilings(map.get("ceilings"))?;
        let otherwise =
            match map.get("otherwise") {
                None => return Err(Refusal::new(
                    "tiers.otherwise",
                    "is required: the tier of a request without the entry or with an unknown tier",
                )),
                Some(value) => {
                    let name = value.as_str().unwrap_or_default();
                    tiers.iter().position(|t| t.name == name).ok_or_else(|| {
                        let names: Vec<&str> = tiers.iter().map(|t| t.name.as_str()).collect();
                        Refusal::new(
                            "tiers.otherwise",
                            format!("must be one of the tiers ({})", names.join(", ")),
                        )
                    })?
                }
            };
        Ok(Policy {
            table: Arc::new(Table {
                from,
                tiers,
                otherwise,
            }),
            chosen: otherwise,
        })
    }

    fn shown(&self) -> String {
        format!(", {self}")
    }

    fn listed(&self) -> String {
        format!(", {self}")
    }

    fn explained(&self, limit: &Described<'_>) -> String {
        let shares: Vec<String> = self
            .tiers()
            .iter()
            .map(|tier| {
                let allowed = Policy::allowed(tier.ceiling_ppm, u64::from(limit.requests_per_unit));
                format!(
                    "{} up to {allowed} ({})",
                    tier.name,
                    ceiling_text(tier.ceiling_ppm)
                )
            })
            .collect();
        format!(
            "{}: shared by tiers named by the entry '{}': a request is admitted only while the \
             usage of every tier together stays within its tier's ceiling of the limit after \
             it: {} per {}; a request without the entry or with an unknown tier is {}",
            limit.rule,
            self.from(),
            shares.join(", "),
            limit.period,
            self.otherwise(),
        )
    }

    fn entry_key(&self) -> Option<&str> {
        Some(self.from())
    }

    fn take_entry(&mut self, value: Option<&str>) {
        self.chosen = value
            .and_then(|value| self.tiers().iter().position(|t| t.name == value))
            .unwrap_or(self.table.otherwise);
    }

    fn headroom(&self, capacity: u64) -> u64 {
        capacity - Policy::allowed(self.chosen().ceiling_ppm, capacity)
    }

    fn class(&self) -> Option<Class<'_>> {
        Some(Class {
            series: "sluice_tier_decisions_total",
            label: "tier",
            name: &self.chosen().name,
        })
    }

    fn keeps_state(&self) -> bool {
        false
    }

    fn chunk_refusal(&self) -> Option<&'static str> {
        Some("tiers cap each class of traffic below the limit, which a replica's chunk, taken for every tier at once, cannot keep")
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "tiers from '{}': ", self.from())?;
        for (i, tier) in self.tiers().iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{} {}", tier.name, ceiling_text(tier.ceiling_ppm))?;
        }
        write!(f, ", otherwise {}", self.otherwise())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(yaml: &str) -> Result<Policy, Refusal> {
        let value: serde_yaml::Value = serde_yaml::from_str(yaml).expect("YAML");
        Policy::parse(&value, 1_000_000)
    }

    const EXAMPLE: &str =
        "{from: priority, ceilings: {critical: 1.0, default: 0.8, batch: 0.5}, otherwise: default}";

    #[test]
    fn a_tier_leaves_what_is_above_its_ceiling_and_the_rest_fall_in_otherwise() {
        let mut policy = parsed(EXAMPLE).expect("valid");
        let class = |policy: &Policy| policy.class().map(|c| c.name.to_string());
        assert_eq!(class(&policy).as_deref(), Some("default"));
        assert_eq!(policy.class().map(|c| c.label), Some("tier"));
        assert_eq!(policy.headroom(1000), 200);
        policy.take_entry(Some("batch"));
        assert_eq!(
            (class(&policy).as_deref(), policy.headroom(1000)),
            (Some("batch"), 500)
        );
        policy.take_entry(Some("critical"));
        assert_eq!(policy.headroom(1000), 0);
        policy.take_entry(Some("Critical"));
        assert_eq!(
            class(&policy).as_deref(),
            Some("default"),
            "names are exact"
        );
        policy.take_entry(None);
        assert_eq!(class(&policy).as_deref(), Some("default"));
        // A ceiling's share rounds down: batch of 7 may fill 3.
        policy.take_entry(Some("batch"));
        assert_eq!(policy.headroom(7), 4);
        assert_eq!(
            policy.to_string(),
            "tiers from 'priority': critical 1.0, default 0.8, batch 0.5, otherwise default"
        );
    }

    #[test]
    fn ceilings_outside_0_to_1_a_tier_named_twice_and_an_unknown_otherwise_are_refused() {
        let refused = |yaml: &str| parsed(yaml).expect_err("refused");
        let over = refused("{from: p, ceilings: {a: 1.5}, otherwise: a}");
        assert_eq!(over.key, "tiers.ceilings");
        assert!(over.reason.contains("at most 1"), "{over:?}");
        assert!(refused("{from: p, ceilings: {a: 0}, otherwise: a}")
            .reason
            .contains("tier 'a'"));
        assert!(refused("{from: p, ceilings: {a: -0.5}, otherwise: a}")
            .reason
            .contains("above 0"));
        assert_eq!(
            refused("{from: p, ceilings: {a: 1}, otherwise: b}").key,
            "tiers.otherwise"
        );
        assert_eq!(
            refused("{ceilings: {a: 1}, otherwise: a}").key,
            "tiers.from"
        );
        assert_eq!(refused("{from: p, otherwise: a}").key, "tiers.ceilings");
        assert_eq!(
            refused("{from: p, ceilings: {a: 1}}").key,
            "tiers.otherwise"
        );
        assert!(refused("{from: p, ceilings: {a/b: 1}, otherwise: a/b}")
            .reason
            .contains("'/'"));
        assert!(
            refused("{from: p, ceilings: {a: 1}, otherwise: a, ceiling: 2}")
                .reason
                .contains("unknown key")
        );
    }
}
