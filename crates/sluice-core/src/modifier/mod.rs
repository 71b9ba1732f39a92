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

pub mod edges;
pub mod leasing;
pub mod on_store_failure;
pub mod penalty;
pub mod reserve;
pub mod tiers;

use smallvec::SmallVec;

use crate::algorithm::params::Refusal;
use crate::algorithm::{Counting, Decision, Kept, LeaseCall, Mark, Outcome, Rate, State};
use crate::duration;
pub use edges::{Event, MetaField, MetaValue, Meter, Said, SeriesDef, SeriesKind, Tally, Ticket};

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
    /// limits (all of them, its own notes among them).
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

/// A row's YAML key, for a row with a script.
macro_rules! with_script {
    ($field:ident, $lua:literal) => {
        stringify!($field)
    };
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

            /// The YAML keys of the modifiers with a script, in registry order: the script's
            /// replies name a modifier by its place here (from 1).
            pub const SCRIPTED: &'static [&'static str] =
                &[$($(with_script!($field, $lua),)?)+];

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

            /// Whether one of them rules what a replica's cache of denials remembers.
            pub fn rules_cache(&self) -> bool {
                false $( || self.$field.as_ref().is_some_and(ModifierPolicy::rules_cache) )+
            }

            /// The mark a remembered copy of `decision` carries, when one of them says it
            /// holds for every cost until its wait ends.
            pub fn lasting(&self, decision: &Decision) -> Option<Mark> {
                None $( .or_else(|| self.$field.as_ref().and_then(|p| ModifierPolicy::lasting(p, decision))) )+
            }

            /// The ticket of the first of them that keeps something per request, with its
            /// registry row.
            pub fn ticket(&self) -> Option<(u8, Ticket)> {
                let mut row = 0u8;
                $(
                    if let (Some(_), Some(ticket)) = (&self.$field, <$policy as ModifierPolicy>::TICKET) {
                        return Some((row, ticket));
                    }
                    row += 1;
                )+
                let _ = row;
                None
            }

            /// The first refusal of the limit by one of them (`ModifierPolicy::refused_on`).
            pub fn refused_on(&self, limit: &Carrier<'_>) -> Result<(), Refusal> {
                $( if let Some(policy) = &self.$field {
                    ModifierPolicy::refused_on(policy, limit)?;
                } )+
                Ok(())
            }

            /// The limit without the modifiers that keep something per request in flight
            /// (those with a ticket), as a gateway without them would count it.
            pub fn without_tickets(&mut self) {
                $( if <$policy as ModifierPolicy>::TICKET.is_some() {
                    self.$field = None;
                } )+
            }

            /// Every row's ticket, with its row: the entries a request may speak to them by.
            pub fn tickets() -> SmallVec<[(u8, Ticket); 1]> {
                let mut tickets = SmallVec::new();
                let mut row = 0u8;
                $(
                    if let Some(ticket) = <$policy as ModifierPolicy>::TICKET {
                        tickets.push((row, ticket));
                    }
                    row += 1;
                )+
                let _ = row;
                tickets
            }

            /// The cost of a hit opening a ticket, when one of them sets it.
            pub fn opening_cost(&self, own_cost: Option<u64>, requests_per_unit: u32) -> Option<u64> {
                None $( .or_else(|| self.$field.as_ref().and_then(|p| ModifierPolicy::opening_cost(p, own_cost, requests_per_unit))) )+
            }

            /// Whether a denial of the limit is named in `sluice.denied_by`.
            pub fn names_denial(&self) -> bool {
                false $( || self.$field.as_ref().is_some_and(ModifierPolicy::names_denial) )+
            }

            /// What every row adds to a response's dynamic metadata, from the decisions of
            /// the request's limits.
            pub fn said(decisions: &[Said<'_>]) -> SmallVec<[MetaField; 1]> {
                let mut fields = SmallVec::new();
                $( fields.extend(<$policy as ModifierPolicy>::said(decisions)); )+
                fields
            }

            /// What `simulate` says of them after their limit's description, in registry order.
            pub fn beside(&self) -> Vec<String> {
                let mut said = Vec::new();
                $( said.extend(self.$field.as_ref().and_then(ModifierPolicy::beside)); )+
                said
            }

            /// What `simulate` marks on a request's line from the fields the rows `said`.
            pub fn events(said: &[MetaField]) -> Vec<Event> {
                let mut events = Vec::new();
                for field in said {
                    $( events.extend(<$policy as ModifierPolicy>::event(field)); )+
                }
                events
            }

            /// The series of the row whose notes go `by` this name, and a new meter for them.
            pub fn meter_of(by: &str) -> Option<(&'static [SeriesDef], Box<dyn Meter>)> {
                $( if by == stringify!($field) {
                    return <$policy as ModifierPolicy>::meter()
                        .map(|meter| (<$policy as ModifierPolicy>::SERIES, meter));
                } )+
                None
            }

            /// Every row's series, for a recorder to configure (histograms' buckets).
            pub fn series() -> impl Iterator<Item = &'static SeriesDef> {
                [$( <$policy as ModifierPolicy>::SERIES, )+].into_iter().flatten()
            }

            /// Why the limit cannot be handed out in chunks, when one of them says.
            pub fn chunk_refusal(&self) -> Option<&'static str> {
                None $( .or_else(|| self.$field.as_ref().and_then(ModifierPolicy::chunk_refusal)) )+
            }

            /// The modifiers set, each with its registry row, in registry order: the first
            /// decides outermost.
            pub fn layers(&self) -> SmallVec<[(u8, &dyn Layer); 4]> {
                let mut layers: SmallVec<[(u8, &dyn Layer); 4]> = SmallVec::new();
                let mut row = 0u8;
                $(
                    if let Some(policy) = &self.$field {
                        layers.push((row, policy as &dyn Layer));
                    }
                    row += 1;
                )+
                let _ = row;
                layers
            }

            /// The argument of each modifier with a script (`SCRIPTED`), for a hit making
            /// `lease` whose window ends at `window_end_us` (0: none); `None` for one the
            /// limit does not carry.
            pub fn script_args(
                &self,
                lease: Option<LeaseCall>,
                window_end_us: u64,
            ) -> SmallVec<[Option<ScriptArg>; 2]> {
                let mut args = SmallVec::new();
                $($(
                    let _ = $lua;
                    args.push(self.$field.as_ref().map(|policy| {
                        let read = ModifierPolicy::parts_read(policy, lease);
                        let parts = <$policy as ModifierPolicy>::PARTS
                            .iter()
                            .enumerate()
                            .map(|(i, part)| read.iter().any(|r| usize::from(*r) == i).then_some(*part))
                            .collect();
                        ScriptArg {
                            parts,
                            numbers: ModifierPolicy::script_numbers(policy, window_end_us),
                        }
                    }));
                )?)+
                args
            }

            /// The part `part` of the modifier of registry row `row`.
            pub fn part(&self, row: u8, part: u8) -> Option<KeptPart> {
                let (_, layer) = self.layers().into_iter().find(|(r, _)| *r == row)?;
                layer.parts().get(usize::from(part)).copied()
            }

            /// The parts an admin reset that asks for the modifiers' records clears (none is
            /// kept per token).
            pub fn reset_parts(&self) -> SmallVec<[KeptPart; 2]> {
                self.layers()
                    .into_iter()
                    .flat_map(|(_, layer)| layer.parts().iter().copied())
                    .filter(|part| part.reset && !part.per_token)
                    .collect()
            }

            /// The names of every part of state any modifier may keep (a snapshot's tags).
            pub fn kept_names() -> Vec<&'static str> {
                let mut names = Vec::new();
                $( names.extend(
                    <$policy as ModifierPolicy>::PARTS.iter().map(|part| part.name)
                ); )+
                names
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
