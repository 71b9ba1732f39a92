//! The registry of modifiers as a macro: from one row per modifier (its YAML key, its policy
//! type and, when it has one, its Lua file) `registry!` makes `Modifiers`, the modifiers one
//! limit carries, with every iteration the rest of the code runs over them (parsing, words,
//! layers, script arguments, tickets, what they say, their series). The rows themselves are
//! at the foot of `modifier/mod.rs`.

/// A row's YAML key, for a row with a script.
macro_rules! with_script {
    ($field:ident, $lua:literal) => {
        stringify!($field)
    };
}

macro_rules! registry {
    ($( $field:ident: $policy:ty $(, lua $lua:literal)?; )+) => {
        /// The modifiers one limit carries, parsed and validated: one field per row. A limit
        /// holds it shared, as `Modifiers` (`modifier::shared`), and reads it through that.
        #[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
        pub struct ModifierSet {
            $( pub $field: Option<$policy>, )+
        }

        impl ModifierSet {
            /// The set without any modifier.
            pub const EMPTY: ModifierSet = ModifierSet { $( $field: None, )+ };
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

            /// How a limit's description names them, in registry order.
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
                // Most limits' modifiers read no entry: their shared set stays shared.
                if self.entry_keys().next().is_none() {
                    return;
                }
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
                if self.ticket().is_none() {
                    return;
                }
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
