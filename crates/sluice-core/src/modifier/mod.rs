//! Modifiers of a limit: units that change how a limit's decision is taken or what it holds,
//! beside the algorithm that counts (penalties block clients a limit keeps denying). Each is
//! a module of its own here (its policy as the YAML gives it, its rules, its state), a Lua
//! file in `lua/`, and one row of the registry below, from which follow its YAML key inside
//! `rate_limit`, its field in a limit's `Modifiers`, its Lua source in the Redis script and
//! how a limit's description names it; what it writes to the dynamic metadata is its own
//! module's (`penalty::METADATA_KEY`). The engine runs a hit's modifiers around its
//! algorithm (`engine::decide`).

pub mod penalty;

use crate::algorithm::params::Refusal;

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
}

macro_rules! registry {
    ($( $field:ident: $policy:ty, lua $lua:literal,
        shown $shown:literal; )+) => {
        /// The modifiers one limit carries, parsed and validated: one field per row.
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
        pub struct Modifiers {
            $( pub $field: Option<$policy>, )+
        }

        impl Modifiers {
            /// Every modifier's YAML key inside `rate_limit`.
            pub const KEYS: &'static [&'static str] = &[$(stringify!($field),)+];

            /// Every modifier's Lua source, in registry order (the Redis script loads them
            /// after the algorithms').
            pub const LUA_SOURCES: &'static [&'static str] =
                &[$(include_str!(concat!("../../../../lua/", $lua, ".lua")),)+];

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

            /// Whether the limit carries none.
            pub fn is_empty(&self) -> bool {
                true $( && self.$field.is_none() )+
            }

            /// How a limit's description names them: `, with a penalty`.
            pub fn shown(&self) -> String {
                let mut text = String::new();
                $( if self.$field.is_some() {
                    text.push_str(concat!(", with ", $shown));
                } )+
                text
            }
        }
    };
}

registry! {
    penalty: penalty::Policy, lua "penalty", shown "a penalty";
}
