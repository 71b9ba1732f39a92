//! The arguments of every algorithm script, built in one place: the common ones in the order
//! `lua/common.lua` lists them, then the algorithm's own (`Parameters::SCRIPT_ARGS`, which
//! its script lists as `params`). Tests check both against the Lua sources.

use redis::Cmd;

use sluice_core::limit::{LeaseCall, Role};
use sluice_core::modifier::penalty::Policy;
use sluice_core::modifier::reserve;

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
    /// The limit's penalty, whose record is under a key of the call's own (`penalty_arg`).
    pub penalty: Option<Policy>,
    /// The limit's reservation, and the end of the window the hit is in (0: no window).
    pub reserve: Option<(reserve::Policy, u64)>,
    /// What the hit must leave unused of the capacity (`Modifiers::headroom`; 0 for most).
    pub headroom: u64,
    /// The algorithm's own arguments (`Counting::script_args`), of which it takes `own_count`.
    pub own: [u64; 2],
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

/// A penalty as a script argument: the position of its record's key in KEYS (from 1), then
/// after, within_us, block_ms, factor_milli, max_block_ms and forget_us, space-separated;
/// empty without one.
pub fn penalty_arg(penalty: Option<&Policy>, key_index: usize) -> String {
    match penalty {
        Some(p) => format!(
            "{key_index} {} {} {} {} {} {}",
            p.after, p.within_us, p.block_ms, p.factor_milli, p.max_block_ms, p.forget_us
        ),
        None => String::new(),
    }
}

/// A reservation as a script argument: the positions of its holds' key and of the settled
/// token's key in KEYS (from 1; 0 for an opening, which has none), then max_hold_us, the end
/// of the hit's window in µs (0 when its algorithm has no windows) and max_holds,
/// space-separated; empty without one.
pub fn reserve_arg(reserve: Option<&(reserve::Policy, u64)>, keys: (usize, usize)) -> String {
    match reserve {
        Some((policy, window_end_us)) => {
            format!(
                "{} {} {} {window_end_us} {}",
                keys.0, keys.1, policy.max_hold_us, policy.max_holds
            )
        }
        None => String::new(),
    }
}

/// Where a hit's modifiers' keys are in a call's KEYS (from 1; 0: none).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KeyPositions {
    pub record: usize,
    pub holds: usize,
    pub settled: usize,
}

impl ScriptArgs {
    /// The names of a hit's common arguments, in the order `lua/common.lua` lists them.
    pub const NAMES: [&'static str; 14] = [
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
        "penalty",
        "reserve",
        "headroom",
    ];

    /// Appends the arguments, in `NAMES` order, then the algorithm's own; absent values are
    /// sent empty. `keys`: where the modifiers' keys are in the call's KEYS.
    pub fn append_to(&self, call: &mut Cmd, keys: KeyPositions) {
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
            .arg(penalty_arg(
                self.penalty.as_ref().filter(|_| keys.record > 0),
                keys.record,
            ))
            .arg(reserve_arg(
                self.reserve.as_ref().filter(|_| keys.holds > 0),
                (keys.holds, keys.settled),
            ))
            .arg(self.headroom);
        for own in &self.own[..self.own_count.min(self.own.len())] {
            call.arg(*own);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::limit::Algorithm;

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
            penalty: Some(Policy {
                after: 3,
                within_us: 60_000_000,
                block_ms: 60_000,
                factor_milli: 1_500,
                max_block_ms: 3_600_000,
                forget_us: 86_400_000_000,
            }),
            reserve: Some((
                reserve::Policy {
                    amount: 4000,
                    max_fraction_ppm: 500_000,
                    max_hold_us: 120_000_000,
                    max_holds: 1_000,
                },
                60_000_000,
            )),
            headroom: 2,
            own: [60_000_000, 3],
            own_count: 2,
        }
    }

    fn positions() -> KeyPositions {
        KeyPositions {
            record: 2,
            holds: 3,
            settled: 4,
        }
    }

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
        .append_to(&mut call, positions());
        assert_eq!(call.args_iter().count(), ScriptArgs::NAMES.len());
        for (index, name) in ScriptArgs::NAMES.iter().enumerate() {
            let line = format!("--   ARGV[+{index}]  {name}  ");
            assert!(COMMON.contains(&line), "lua/common.lua lacks `{line}`");
        }
        let count = ScriptArgs::NAMES.len();
        assert!(!COMMON.contains(&format!("ARGV[+{count}]")));
        assert!(COMMON.contains(&format!("{count} common arguments")));
        assert!(REQUEST.contains(&format!("local COMMON = {count}\n")));
        assert!(REQUEST.contains(&format!("ARGV[at + {}]", count - 1)));
        assert!(!REQUEST.contains(&format!("ARGV[at + {count}]")));
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
            args.append_to(&mut call, positions());
            sent(&call).join(" ")
        };
        assert_eq!(
            sent_of(args()),
            "token_bucket 10 60000000 1 10 5 n-1 quota 1 3 -00000000000000ab \
             2 3 60000000 60000 1500 3600000 86400000000 3 4 120000000 60000000 1000 2 60000000 3"
        );
        let plain = ScriptArgs {
            now_us: None,
            nonce: None,
            role: Role::Enforced,
            debt: false,
            group: 0,
            lease: None,
            penalty: None,
            reserve: None,
            headroom: 0,
            own_count: 0,
            ..args()
        };
        // The empty now_us, nonce, lease, penalty and reserve are two spaces each.
        assert_eq!(
            sent_of(plain),
            "token_bucket 10 60000000 1 10   enforced 0 0    0"
        );
    }
}
