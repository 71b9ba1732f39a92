//! Modifiers of a limit: units that change how a limit's decision is taken or what it holds,
//! beside the algorithm that counts (penalties block clients a limit keeps denying; a
//! reserved budget holds an estimate per request in flight until its cost is settled). Each is
//! a module of its own here (its policy as the YAML gives it, its rules, its state), a Lua
//! file in `lua/`, and one row of the registry below, from which follow its YAML key inside
//! `rate_limit`, its field in a limit's `Modifiers` and its Lua source in the Redis script;
//! its policy says how a limit's description names it (`ModifierPolicy::shown`); what it writes to the dynamic metadata is its own
//! module's (`penalty::METADATA_KEY`). The engine runs a hit's modifiers around its
//! algorithm (`engine::decide`). Two rows have no Lua and no part in the engine, because they
//! act between a replica and its store: budget leasing (`leasing`) and the answer when the
//! store fails (`on_store_failure`).

pub mod leasing;
pub mod on_store_failure;
pub mod penalty;
pub mod reserve;
pub mod tiers;

use crate::algorithm::params::Refusal;
use crate::duration;

/// A plain value a unit adds to a response's dynamic metadata (the server writes it as
/// protobuf).
#[derive(Debug, Clone, PartialEq)]
pub enum MetaValue {
    Text(String),
    Number(f64),
    Flag(bool),
}

/// A modifier's policy, as one YAML value inside `rate_limit` gives it.
pub trait ModifierPolicy: Sized {
    /// Reads and validates `value` for a limit whose period is `period_us`; a refusal names
    /// the key under the modifier's own and the reason.
    fn parse(value: &serde_yaml::Value, period_us: u64) -> Result<Self, Refusal>;

    /// How a limit's description names it: `, with a penalty`.
    fn shown(&self) -> String;

    /// Its settings as `/rlconfig` lists them after the limit's (`, reserve: amount 40, ...`);
    /// nothing for a modifier the line does not list.
    fn listed(&self) -> String {
        String::new()
    }

    /// What `check-config` says it does to `limit`, in words, with its bound.
    fn explained(&self, limit: &Described<'_>) -> String;

    /// The descriptor entry it reads rather than matches (left out of matching and of the
    /// key, so that every value of it shares the limit's counter); none for most.
    fn entry_key(&self) -> Option<&str> {
        None
    }

    /// Takes the value of its `entry_key` in a request's descriptor (`None`: absent).
    fn take_entry(&mut self, _value: Option<&str>) {}

    /// How much of a limit of `capacity` a hit must leave unused: it is admitted only if it
    /// fits with that much to spare, and told what remains above it.
    fn headroom(&self, _capacity: u64) -> u64 {
        0
    }

    /// The class of traffic it puts the hit in, named in `sluice.denied_by` and counted in
    /// the metrics.
    fn class(&self) -> Option<Class<'_>> {
        None
    }

    /// Why a limit carrying it cannot be handed to replicas in chunks taken ahead, if it cannot.
    fn chunk_refusal(&self) -> Option<&'static str> {
        None
    }

    /// Whether it may keep state beside the limit's: a request carrying it is then decided
    /// whole (never on a one-hit fast path), and the limit's Redis key is tagged so that the
    /// keys it keeps share the limit's Cluster slot. False leaves the key as it was.
    fn keeps_state(&self) -> bool {
        true
    }
}

/// A class of traffic a modifier puts a hit in: the series that counts decisions by class
/// (`sluice_tier_decisions_total`), the label that names such classes (`tier`), and the hit's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Class<'a> {
    pub series: &'static str,
    pub label: &'static str,
    pub name: &'a str,
}

/// What a modifier's words in `check-config` say of its limit and rule.
#[derive(Debug, Clone, Copy)]
pub struct Described<'a> {
    /// The rule's full key (`edge.api_key`).
    pub rule: &'a str,
    /// The limit as it shows itself (`fixed_window: 100 per minute`).
    pub limit: &'a str,
    /// L.
    pub requests_per_unit: u32,
    /// The limit's period in words: `minute`, `5 minutes`.
    pub period: &'a str,
    /// The limit counts in windows (a hold lapses at the window's end).
    pub windowed: bool,
    /// The rule is in shadow mode: counted and reported, never enforced.
    pub shadow_mode: bool,
}

/// The map a modifier's `value` must be, refused under `name` when it is not one or holds a
/// key other than `keys`.
pub(crate) fn policy_map<'v>(
    value: &'v serde_yaml::Value,
    name: &'static str,
    keys: &[&str],
) -> Result<&'v serde_yaml::Mapping, Refusal> {
    let serde_yaml::Value::Mapping(map) = value else {
        return Err(Refusal::new(
            name,
            format!("must be a map of {}", keys.join(", ")),
        ));
    };
    for key in map.keys() {
        if !key.as_str().is_some_and(|k| keys.contains(&k)) {
            let key_name = key
                .as_str()
                .map_or_else(|| format!("{key:?}"), str::to_string);
            let reason = format!("unknown key '{key_name}' (expected {})", keys.join(", "));
            return Err(Refusal::new(name, reason));
        }
    }
    Ok(map)
}

/// A duration under `key` (a text such as `10m`, or a number of seconds), above 0 and at
/// most `max_us`; `None` when absent.
pub(crate) fn duration_of(
    value: Option<&serde_yaml::Value>,
    key: &'static str,
    max_us: u64,
) -> Result<Option<u64>, Refusal> {
    let Some(value) = value else {
        return Ok(None);
    };
    let text = match value {
        serde_yaml::Value::String(text) => text.clone(),
        serde_yaml::Value::Number(number) if number.is_u64() => number.to_string(),
        _ => {
            return Err(Refusal::new(
                key,
                "must be a duration (30s, 10m, 1h, 1d, ...)",
            ))
        }
    };
    match duration::parse_us(&text) {
        Ok(0) => Err(Refusal::new(key, "must be longer than 0")),
        Ok(us) if us > max_us => {
            let reason = format!("must be at most {}", duration::human(max_us));
            Err(Refusal::new(key, reason))
        }
        Ok(us) => Ok(Some(us)),
        Err(error) => Err(Refusal::new(key, error.to_string())),
    }
}

/// A non-negative decimal number (`1.5`, `0.25`, or a string of one) with at most `places`
/// decimals, scaled by 10^`places`; `None` for anything else.
pub(crate) fn fixed_point(value: &serde_yaml::Value, places: usize) -> Option<u64> {
    let text = match value {
        serde_yaml::Value::Number(number) => number.to_string(),
        serde_yaml::Value::String(text) => text.clone(),
        _ => return None,
    };
    let (whole, fraction) = text.split_once('.').unwrap_or((&text, ""));
    let digits = |part: &str| part.chars().all(|c| c.is_ascii_digit());
    if fraction.len() > places || !digits(fraction) || !digits(whole) || whole.is_empty() {
        return None;
    }
    let scale = 10u64.checked_pow(u32::try_from(places).ok()?)?;
    let whole: u64 = whole.parse().ok()?;
    let fraction: u64 = if places == 0 {
        0
    } else {
        format!("{fraction:0<places$}").parse().ok()?
    };
    whole.checked_mul(scale)?.checked_add(fraction)
}

macro_rules! registry {
    ($( $field:ident: $policy:ty $(, lua $lua:literal)?; )+) => {
        /// The modifiers one limit carries, parsed and validated: one field per row.
        #[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
        pub struct Modifiers {
            $( pub $field: Option<$policy>, )+
        }

        impl Modifiers {
            /// Every modifier's YAML key inside `rate_limit`.
            pub const KEYS: &'static [&'static str] = &[$(stringify!($field),)+];

            /// Every modifier's Lua source, in registry order (the Redis script loads them
            /// after the algorithms'); a modifier the store layer applies has none.
            pub const LUA_SOURCES: &'static [&'static str] =
                &[$($(include_str!(concat!("../../../../lua/", $lua, ".lua")),)?)+];

            /// Sets the modifier whose YAML key is `key` from `value`; `Ok(false)` when no
            /// modifier has that key.
            pub fn set(
                &mut self,
                key: &str,
                value: &serde_yaml::Value,
                period_us: u64,
            ) -> Result<bool, Refusal> {
                match key {
                    $( stringify!($field) => {
                        self.$field = Some(<$policy as ModifierPolicy>::parse(value, period_us)?);
                        Ok(true)
                    } )+
                    _ => Ok(false),
                }
            }

            /// Whether the one whose YAML key is `key` is set.
            pub fn has(&self, key: &str) -> bool {
                match key {
                    $( stringify!($field) => self.$field.is_some(), )+
                    _ => false,
                }
            }

            /// Whether the limit carries none.
            pub fn is_empty(&self) -> bool {
                true $( && self.$field.is_none() )+
            }

            /// How a limit's description names them: `, with a penalty`.
            pub fn shown(&self) -> String {
                let mut text = String::new();
                $( if let Some(policy) = &self.$field {
                    text.push_str(&ModifierPolicy::shown(policy));
                } )+
                text
            }

            /// Their settings as `/rlconfig` lists them after the limit's, in registry order.
            pub fn listed(&self) -> String {
                let mut text = String::new();
                $( if let Some(policy) = &self.$field {
                    text.push_str(&ModifierPolicy::listed(policy));
                } )+
                text
            }

            /// The descriptor entries they read rather than match.
            pub fn entry_keys(&self) -> impl Iterator<Item = &str> {
                [$( self.$field.as_ref().and_then(ModifierPolicy::entry_key), )+]
                    .into_iter()
                    .flatten()
            }

            /// Gives each the value of its entry in a request's `entries` (none: absent).
            pub fn take_entries<'e>(&mut self, entries: impl Iterator<Item = (&'e str, &'e str)> + Clone) {
                $( if let Some(policy) = &mut self.$field {
                    if let Some(key) = ModifierPolicy::entry_key(policy).map(str::to_string) {
                        let value = entries.clone().find(|(k, _)| *k == key).map(|(_, v)| v);
                        ModifierPolicy::take_entry(policy, value);
                    }
                } )+
            }

            /// What a hit must leave unused of a limit of `capacity`: the most any asks.
            pub fn headroom(&self, capacity: u64) -> u64 {
                0 $( .max(self.$field.as_ref().map_or(0, |p| ModifierPolicy::headroom(p, capacity))) )+
            }

            /// The class of traffic the hit is in, when one puts it in one.
            pub fn class(&self) -> Option<Class<'_>> {
                None $( .or_else(|| self.$field.as_ref().and_then(ModifierPolicy::class)) )+
            }

            /// Whether any of them may keep state beside the limit's (`ModifierPolicy::keeps_state`).
            pub fn keep_state(&self) -> bool {
                false $( || self.$field.as_ref().is_some_and(ModifierPolicy::keeps_state) )+
            }

            /// Why the limit cannot be handed out in chunks, when one of them says.
            pub fn chunk_refusal(&self) -> Option<&'static str> {
                None $( .or_else(|| self.$field.as_ref().and_then(ModifierPolicy::chunk_refusal)) )+
            }

            /// What `check-config` says each does to `limit`, in registry order.
            pub fn explained(&self, limit: &Described<'_>) -> Vec<String> {
                let mut lines = Vec::new();
                $( if let Some(policy) = &self.$field {
                    lines.push(ModifierPolicy::explained(policy, limit));
                } )+
                lines
            }
        }
    };
}

registry! {
    penalty: penalty::Policy, lua "penalty";
    reserve: reserve::Policy, lua "reserve";
    budget_leasing: leasing::Policy;
    on_store_failure: on_store_failure::Policy;
    tiers: tiers::Policy;
}
