//! Modifiers of a limit: units that change how a limit's decision is taken or what it holds,
//! beside the algorithm that counts (penalties block clients a limit keeps denying; a
//! reserved budget holds an estimate per request in flight until its cost is settled). Each is
//! a module of its own here (its policy as the YAML gives it, its rules, its state), a Lua
//! file in `lua/`, and one row of the registry below, from which follow its YAML key inside
//! `rate_limit`, its field in a limit's `Modifiers` and its Lua source in the Redis script;
//! its policy says how a limit's description names it (`ModifierPolicy::shown`); what it writes to the dynamic metadata is its own
//! module's (`penalty::METADATA_KEY`). The engine runs a hit's modifiers around its
//! algorithm (`engine::decide`). Three rows have no Lua and no part in the engine, because they
//! act between a replica and its store: budget leasing (`leasing`), the answer when the
//! store fails (`on_store_failure`) and a limit held across regions (`global`).

pub mod edges;
pub mod global;
pub mod leasing;
pub mod on_store_failure;
pub mod penalty;
#[macro_use]
mod registry;
pub mod reserve;
mod shared;
pub mod tiers;

use smallvec::SmallVec;

use crate::algorithm::params::Refusal;
use crate::algorithm::{Counting, Decision, Kept, LeaseCall, Mark, Outcome, Rate, State};
use crate::duration;
pub use edges::{Event, MetaField, MetaValue, Meter, Said, SeriesDef, SeriesKind, Tally, Ticket};
pub use shared::Modifiers;

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

    /// Why it cannot be carried by `limit`, if it cannot (a refusal's key is under its own,
    /// `reserve.amount`).
    fn refused_on(&self, _limit: &Carrier<'_>) -> Result<(), Refusal> {
        Ok(())
    }

    /// The entries by which a request opens and returns what it keeps per request in flight,
    /// for a modifier that keeps something (`edges::Ticket`).
    const TICKET: Option<Ticket> = None;

    /// The cost a hit opening its ticket carries in place of the descriptor's
    /// (`own_cost`: the descriptor's own `hits_addend`), for a limit of `requests_per_unit`.
    fn opening_cost(&self, _own_cost: Option<u64>, _requests_per_unit: u32) -> Option<u64> {
        None
    }

    /// Whether a denial of its limit is named in `sluice.denied_by`.
    fn names_denial(&self) -> bool {
        false
    }

    /// What it adds to a response's dynamic metadata, from the decisions of the request's
    /// limits that a modifier noted (its own notes among them).
    fn said(_decisions: &[Said<'_>]) -> Option<MetaField> {
        None
    }

    /// What `simulate` says of it in parentheses after its limit's description, if anything.
    fn beside(&self) -> Option<String> {
        None
    }

    /// What `simulate` marks on a request's line from a field it `said`, if anything.
    fn event(_said: &MetaField) -> Option<Event> {
        None
    }

    /// The series it records for each limit that carries it, written by its `meter`.
    const SERIES: &'static [SeriesDef] = &[];

    /// What records its notes in `SERIES`, one for each limit.
    fn meter() -> Option<Box<dyn Meter>> {
        None
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

    /// Whether it rules what a replica's cache of denials may remember of its limit: then
    /// only the denials `lasting` names are remembered (its other denials must reach the
    /// store).
    fn rules_cache(&self) -> bool {
        false
    }

    /// For a modifier that `rules_cache`: the mark a remembered copy of `decision` carries,
    /// when `decision` is one of its denials that holds for every cost until its wait ends.
    fn lasting(&self, _decision: &Decision) -> Option<Mark> {
        None
    }

    /// The parts of state it may keep beside the limit's, each under a key of its own.
    const PARTS: &'static [KeptPart] = &[];

    /// Which of its `parts` a hit making `lease` reads and may write.
    fn parts_read(&self, _lease: Option<LeaseCall>) -> SmallVec<[u8; 2]> {
        SmallVec::new()
    }

    /// Its own numbers in its script's argument (`lua/<name>.lua` reads them after the
    /// positions of its parts' keys), for a hit whose window ends at `window_end_us` (0: its
    /// algorithm has no windows).
    fn script_numbers(&self, _window_end_us: u64) -> String {
        String::new()
    }

    /// What it sets aside of its limit now, as the admin API reads it (`kept(part)`: its
    /// part's state); 0 for most.
    fn held(&self, _kept: &dyn Fn(u8) -> Option<Kept>, _now_us: u64) -> u64 {
        0
    }

    /// Decides a hit around `inner` (the limit's decision, with the modifiers after this one
    /// in the registry): `kept(part)` is its part's state as the request left it so far, and
    /// `leave` takes each state it writes. Passes the hit through to `inner` unless it acts.
    fn around(
        &self,
        _turn: &Turn<'_>,
        _kept: &dyn Fn(u8) -> Option<Kept>,
        inner: &mut dyn FnMut() -> Outcome,
        _leave: &mut dyn FnMut(Left),
    ) -> Outcome {
        inner()
    }
}

/// A part of state a modifier keeps: its name (its key's suffix, its tag in a snapshot),
/// whether it is kept per lease token (a key for each), and whether a reset clears it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeptPart {
    pub name: &'static str,
    pub per_token: bool,
    /// An admin reset that asks for the modifiers' records clears it too.
    pub reset: bool,
}

/// A modifier's argument in a Redis script call: its parts in order (`Some` for those the
/// hit reads, whose keys the call carries) and its own numbers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptArg {
    pub parts: SmallVec<[Option<KeptPart>; 2]>,
    pub numbers: String,
}

/// The limit a modifier is given to, as it may refuse it (`ModifierPolicy::refused_on`).
#[derive(Debug, Clone, Copy)]
pub struct Carrier<'a> {
    /// The algorithm's name (`token_bucket`).
    pub algorithm: &'a str,
    /// The algorithm keeps a lease per request in flight.
    pub leases: bool,
    pub requests_per_unit: u32,
    /// The most the limit holds at once (a bucket's burst).
    pub capacity: u64,
}

/// A hit as a modifier deciding around its limit sees it.
#[derive(Debug, Clone, Copy)]
pub struct Turn<'a> {
    pub counting: &'a Counting,
    pub rate: Rate,
    /// The end of the window the hit is in, for an algorithm that has windows.
    pub window_end_us: Option<u64>,
    pub cost: u64,
    /// What the hit must leave unused of the limit (`ModifierPolicy::headroom`).
    pub headroom: u64,
    pub lease: Option<LeaseCall>,
    pub now_us: u64,
    /// The limit's state as the request left it so far.
    pub state: Option<&'a State>,
}

/// A state a modifier leaves beside its limit's: which of its parts, the state, until when it
/// matters, and whether it stands whatever the request's fate (`always`: a penalty's strike)
/// or only as the limit's charge does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Left {
    pub part: u8,
    pub kept: Kept,
    pub expires_at_us: u64,
    pub always: bool,
}

/// A modifier as the engine runs it: its policy's hooks behind one object.
pub trait Layer {
    fn parts(&self) -> &'static [KeptPart];
    fn parts_read(&self, lease: Option<LeaseCall>) -> SmallVec<[u8; 2]>;
    fn held(&self, kept: &dyn Fn(u8) -> Option<Kept>, now_us: u64) -> u64;
    fn around(
        &self,
        turn: &Turn<'_>,
        kept: &dyn Fn(u8) -> Option<Kept>,
        inner: &mut dyn FnMut() -> Outcome,
        leave: &mut dyn FnMut(Left),
    ) -> Outcome;
}

impl<P: ModifierPolicy> Layer for P {
    fn parts(&self) -> &'static [KeptPart] {
        P::PARTS
    }

    fn parts_read(&self, lease: Option<LeaseCall>) -> SmallVec<[u8; 2]> {
        ModifierPolicy::parts_read(self, lease)
    }

    fn held(&self, kept: &dyn Fn(u8) -> Option<Kept>, now_us: u64) -> u64 {
        ModifierPolicy::held(self, kept, now_us)
    }

    fn around(
        &self,
        turn: &Turn<'_>,
        kept: &dyn Fn(u8) -> Option<Kept>,
        inner: &mut dyn FnMut() -> Outcome,
        leave: &mut dyn FnMut(Left),
    ) -> Outcome {
        ModifierPolicy::around(self, turn, kept, inner, leave)
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

/// A modifier's policy parsed from `yaml` for a limit of a minute (the tests' way to write one).
#[cfg(test)]
pub(crate) fn parsed<P: ModifierPolicy>(yaml: &str) -> Result<P, Refusal> {
    let value: serde_yaml::Value =
        serde_yaml::from_str(yaml).map_err(|e| Refusal::new("yaml", e.to_string()))?;
    P::parse(&value, 60_000_000)
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

registry! {
    penalty: penalty::Policy, lua "penalty";
    reserve: reserve::Policy, lua "reserve";
    budget_leasing: leasing::Policy;
    on_store_failure: on_store_failure::Policy;
    tiers: tiers::Policy;
    global: global::Policy;
}
