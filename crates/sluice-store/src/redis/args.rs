//! The arguments of every algorithm script, built in one place: the common ones in the order
//! `lua/common.lua` lists them, then one per modifier with a script (`Modifiers::SCRIPTED`),
//! then the algorithm's own (`Parameters::SCRIPT_ARGS`, which its script lists as `params`).
//! Tests check them against the Lua sources.

use redis::Cmd;
use smallvec::SmallVec;

use sluice_core::limit::{LeaseCall, Role};
use sluice_core::modifier::ScriptArg;

/// The arguments of one hit in a script call, typed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptArgs {
    /// The algorithm's name, which its script registers under.
    pub algorithm: &'static str,
    /// L.
    pub requests_per_unit: u32,
    /// W, unit x unit_multiplier, in microseconds.
    pub period_us: u64,
    /// The cost of the hit; 0 only reads.
    pub cost: u64,
    /// The bucket capacity (burst); L for the window algorithms.
    pub capacity: u64,
    /// sluice's clock; `None`: the script reads Redis TIME.
    pub now_us: Option<u64>,
    /// A value unique to the hit, for algorithms that store members (`needs_nonce`).
    pub nonce: Option<String>,
    /// How the hit's denial weighs on its request.
    pub role: Role,
    /// The limit takes debt: a hit that does not fit is charged all the same.
    pub debt: bool,
    /// The hits of one descriptor share a group (the index of its first hit).
    pub group: usize,
    /// On a lease limit, the lease the hit acquires or releases.
    pub lease: Option<LeaseCall>,
    /// What the hit must leave unused of the capacity (`Modifiers::headroom`; 0 for most).
    pub headroom: u64,
    /// The argument of each modifier with a script (`Modifiers::script_args`), whose parts'
    /// keys are in the call's KEYS.
    pub modifiers: SmallVec<[Option<ScriptArg>; 2]>,
    /// The algorithm's own arguments (`Counting::script_args`), of which it takes `own_count`.
    pub own: [u64; 3],
    pub own_count: usize,
}

/// A lease as a script argument: `+<token>` acquires, `-<token>` releases, 16 hex digits.
pub fn lease_arg(lease: Option<LeaseCall>) -> String {
    match lease {
        Some(LeaseCall::Acquire(token)) => format!("+{token:016x}"),
        Some(LeaseCall::Release(token)) => format!("-{token:016x}"),
        None => String::new(),
    }
}

/// A modifier as a script argument: the positions of its parts' keys in KEYS (from 1, taken
/// in turn from `next_key`; 0 for a part the hit does not read), then its own numbers,
/// space-separated; empty without one.
pub fn modifier_arg(arg: Option<&ScriptArg>, next_key: &mut usize) -> String {
    let Some(arg) = arg else {
        return String::new();
    };
    let mut text = String::new();
    for part in &arg.parts {
        let position = match part {
            Some(_) => {
                *next_key += 1;
                *next_key
            }
            None => 0,
        };
        text.push_str(&position.to_string());
        text.push(' ');
    }
    text.push_str(&arg.numbers);
    text
}

impl ScriptArgs {
    /// The names of a hit's common arguments, in the order `lua/common.lua` lists them; one
    /// argument per modifier with a script follows them.
    pub const NAMES: [&'static str; 12] = [
        "algorithm",
        "requests_per_unit",
        "period_us",
        "cost",
        "capacity",
        "now_us",
        "nonce",
        "role",
        "debt",
        "group",
        "lease",
        "headroom",
    ];

    /// Appends the arguments, in `NAMES` order, then the modifiers', then the algorithm's
    /// own; absent values are sent empty. `next_key`: the last position in the call's KEYS
    /// taken so far (the modifiers' keys take the next ones, in order).
    pub fn append_to(&self, call: &mut Cmd, next_key: &mut usize) {
        call.arg(self.algorithm)
            .arg(self.requests_per_unit)
            .arg(self.period_us)
            .arg(self.cost)
            .arg(self.capacity);
        match self.now_us {
            Some(now_us) => call.arg(now_us),
            None => call.arg(""),
        };
        call.arg(self.nonce.as_deref().unwrap_or(""))
            .arg(self.role.as_str())
            .arg(if self.debt { "1" } else { "0" })
            .arg(self.group)
            .arg(lease_arg(self.lease))
            .arg(self.headroom);
        for modifier in &self.modifiers {
            call.arg(modifier_arg(modifier.as_ref(), next_key));
        }
        for own in &self.own[..self.own_count.min(self.own.len())] {
            call.arg(*own);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::limit::Algorithm;
    use sluice_core::modifier::{KeptPart, Modifiers};
    use smallvec::smallvec;

    const COMMON: &str = include_str!("../../../../lua/common.lua");
    const REQUEST: &str = include_str!("../../../../lua/request.lua");

    fn args() -> ScriptArgs {
        ScriptArgs {
            algorithm: "token_bucket",
            requests_per_unit: 10,
            period_us: 60_000_000,
            cost: 1,
            capacity: 10,
            now_us: Some(5),
            nonce: Some("n-1".into()),
            role: Role::Quota,
            debt: true,
            group: 3,
            lease: Some(LeaseCall::Release(0xab)),
            headroom: 2,
            modifiers: smallvec![
                Some(ScriptArg {
                    parts: smallvec![Some(PART)],
                    numbers: "3 60000000".into(),
                }),
                Some(ScriptArg {
                    parts: smallvec![Some(PART), None],
                    numbers: "120000000 60000000 1000".into(),
                }),
            ],
            own: [60_000_000, 3, 0],
            own_count: 2,
        }
    }

    const PART: KeptPart = KeptPart {
        name: "part",
        per_token: false,
        reset: false,
    };

    fn sent(call: &Cmd) -> Vec<String> {
        call.args_iter()
            .map(|arg| match arg {
                redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                _ => String::new(),
            })
            .collect()
    }

    /// Every common argument sent has its line in the header of `lua/common.lua`, in order;
    /// the driver reads exactly that many per hit, then each algorithm's own, which its script
    /// names as the algorithm's `Parameters` do.
    #[test]
    fn the_arguments_match_the_header_of_common_lua_and_the_scripts() {
        let mut call = Cmd::new();
        ScriptArgs {
            own_count: 0,
            ..args()
        }
        .append_to(&mut call, &mut 1);
        let scripted = Modifiers::SCRIPTED.len();
        assert_eq!(call.args_iter().count(), ScriptArgs::NAMES.len() + scripted);
        for (index, name) in ScriptArgs::NAMES.iter().enumerate() {
            let line = format!("--   ARGV[+{index}]  {name}  ");
            assert!(COMMON.contains(&line), "lua/common.lua lacks `{line}`");
        }
        let count = ScriptArgs::NAMES.len();
        assert!(!COMMON.contains(&format!("ARGV[+{count}]")));
        assert!(COMMON.contains(&format!("{count} common arguments")));
        assert!(COMMON.contains(&format!("ARGV[+{count}...]")));
        assert!(REQUEST.contains(&format!("local COMMON = {count} + #modifiers\n")));
        assert!(REQUEST.contains(&format!("ARGV[at + {}]", count - 1)));
        assert!(REQUEST.contains(&format!("ARGV[at + {} + m]", count - 1)));
        // Each modifier with a script registers itself in the registry's order.
        let sources = Modifiers::LUA_SOURCES;
        assert_eq!(sources.len(), scripted);
        for (source, name) in sources.iter().zip(Modifiers::SCRIPTED) {
            assert!(
                source.contains(&format!("{{name = '{name}', parse = ")),
                "lua/{name}.lua does not register itself"
            );
        }
        for &algorithm in Algorithm::ALL {
            let own = algorithm.own_script_args();
            let source = algorithm.lua_source();
            if own.is_empty() {
                assert!(!source.contains("params."), "{algorithm}");
                continue;
            }
            // The script's field names: the argument names without a `_us` unit.
            let fields: Vec<String> = own
                .iter()
                .map(|name| format!("'{}'", name.trim_end_matches("_us")))
                .collect();
            let line = format!("params.{algorithm} = {{ {} }}", fields.join(", "));
            assert!(source.contains(&line), "lua/{algorithm}.lua lacks `{line}`");
        }
    }

    #[test]
    fn the_arguments_are_sent_in_order_absent_ones_empty() {
        let sent_of = |args: ScriptArgs| {
            let mut call = Cmd::new();
            args.append_to(&mut call, &mut 1);
            sent(&call).join(" ")
        };
        assert_eq!(
            sent_of(args()),
            "token_bucket 10 60000000 1 10 5 n-1 quota 1 3 -00000000000000ab 2 \
             2 3 60000000 3 0 120000000 60000000 1000 60000000 3"
        );
        let plain = ScriptArgs {
            now_us: None,
            nonce: None,
            role: Role::Enforced,
            debt: false,
            group: 0,
            lease: None,
            headroom: 0,
            modifiers: smallvec![None, None],
            own_count: 0,
            ..args()
        };
        // The empty now_us, nonce, lease and modifiers are two spaces each.
        assert_eq!(
            sent_of(plain),
            "token_bucket 10 60000000 1 10   enforced 0 0  0  "
        );
    }
}
