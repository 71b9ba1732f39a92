//! The rate limit algorithms as pure functions of (state, rate, cost, now): no clock, no I/O,
//! no async, and nothing of the rest of the crate. Stores keep the state and call `decide`; the
//! Lua scripts of the Redis store must reach the same decisions. Common rules: a denied hit and
//! a hit of cost 0 change no state; a cost that can never fit is denied with one period as its
//! retry time; `requests_per_unit: 0` admits only cost 0, whatever the burst. A limit that
//! takes debt (`Rate::debt`) is charged even by a hit that does not fit: the hit is denied,
//! and the limit denies until the debt is repaid at its own rate.
//!
//! `registry!` below is the one place that lists the algorithms: each row ties an `Algorithm`
//! to the module that decides (its `LimitAlgorithm` implementation, which names its own
//! settings, `Parameters`), its name in YAML (which is also the name of its script,
//! `lua/<name>.lua`) and how its state is held. From the rows come `Algorithm`, `State` and
//! `Counting` (an algorithm with its settings, as a limit holds it). Adding an algorithm, with
//! settings of its own or not, is one Rust file, one Lua file and one row.

pub mod concurrency;
#[cfg(test)]
mod credit_tests;
mod decision;
pub mod fixed_window;
pub mod kept;
pub mod leaky_bucket;
pub mod params;
pub mod persist;
mod rate;
pub mod sliding_window_counter;
pub mod sliding_window_log;
pub mod token_bucket;
pub mod warm_up;

use std::borrow::Borrow;
use std::fmt;

pub use decision::{Decision, Mark, Outcome};
pub use kept::{Kept, Noted};
use params::{Given, Parameters, Refusal};
use persist::Persist;
pub use rate::Rate;

/// One algorithm's rules. Implemented once per algorithm module, named in the registry.
pub trait LimitAlgorithm {
    /// What the store keeps under one key.
    type State: Clone;

    /// The algorithm's own settings (`params::NoParameters` when it has none).
    type Params: Parameters;

    /// The bucket capacity when `burst` is not set; `None`: the algorithm takes no `burst`
    /// (its capacity is `requests_per_unit`).
    fn default_burst(requests_per_unit: u32) -> Option<u32> {
        let _ = requests_per_unit;
        None
    }

    /// The largest `requests_per_unit` the algorithm accepts, and why, when it has one.
    const MAX_REQUESTS_PER_UNIT: Option<(u32, &'static str)> = None;

    /// The state's key names its window (the fixed window's, byte-identical to
    /// envoyproxy/ratelimit's): the key is built with sluice's clock, so the script must use it.
    const KEY_HOLDS_WINDOW: bool = false;

    /// The script stores members that must be unique per hit (the sliding log).
    const NEEDS_NONCE: bool = false;

    /// The algorithm's own rule covers `requests_per_unit: 0` (else the common one applies).
    const DECIDES_ZERO_LIMIT: bool = false;

    /// Without debt, a charge past the limit stays in its window and is forgotten when the
    /// window ends (the fixed window's key names its window): a limit of 0 can then take the
    /// reference's charges of denied hits, which no other algorithm could ever repay.
    const EXCESS_ENDS_WITH_WINDOW: bool = false;

    /// The capacity whatever the limit says (a pacer's 1), when the algorithm has one.
    const FIXED_CAPACITY: Option<u64> = None;

    /// The state's key names L and W (a changed rate is a new state); a concurrency limit's
    /// leases stay counted when its limit or their life changes.
    const KEY_NAMES_RATE: bool = true;

    /// A hit that does not fit can be charged all the same (debt, the reference's counting);
    /// a concurrency limit never takes a lease that does not fit.
    const OWES: bool = true;

    /// Decides one hit of `cost` at `now_us`; returns the decision and the state to store
    /// when it changed.
    fn decide(
        stored: Option<&Self::State>,
        ask: &Ask<'_, Self::Params>,
    ) -> (Decision, Option<Self::State>);

    /// The state after charging `cost` that does not fit: the limit goes into debt (a
    /// counter above L, a bucket below empty), repaid at the limit's own rate.
    fn force(stored: Option<&Self::State>, ask: &Ask<'_, Self::Params>) -> Self::State;

    /// When `state` no longer matters (it reads as absent from then on).
    fn expires_at_us(state: &Self::State, rate: &Rate, own: &Self::Params) -> u64;

    /// Why "`cost` more now" has no meaning for the algorithm (a credit is refused with
    /// this reason); `None` when `credit` gives it.
    const CREDIT_REFUSAL: Option<&'static str> = Some("the algorithm takes no credit");

    /// The state after a credit of `ask.cost`: that much more admitted from `ask.now_us`, as
    /// far as the state can hold it (a window's count down by the cost, never below 0; a
    /// bucket's tokens up by the cost, never past full).
    fn credit(stored: Option<&Self::State>, ask: &Ask<'_, Self::Params>) -> Self::State {
        Self::force(stored, &Ask { cost: 0, ..*ask })
    }

    /// What `stored` holds against the limit at `ask.now_us`, in requests, for a state that
    /// can hold more than the capacity (debt, a settle past the limit, the reference's
    /// counting); `None`: the capacity less what a hit of cost 0 is told remains. The admin
    /// API's `used`, which the Lua scripts' `used` must agree with.
    fn used(stored: Option<&Self::State>, ask: &Ask<'_, Self::Params>) -> Option<u64> {
        let _ = (stored, ask);
        None
    }
}

/// One hit as an algorithm sees it: the limit's rate, the algorithm's own settings, the cost,
/// the time, and what it does to a concurrency limit's leases (rates ignore it).
pub struct Ask<'a, P> {
    pub rate: &'a Rate,
    pub own: &'a P,
    pub cost: u64,
    pub now_us: u64,
    pub lease: Option<LeaseCall>,
}

/// What a hit does to a concurrency limit's leases, under its request's token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LeaseCall {
    /// Takes `cost` leases when they fit.
    Acquire(u64),
    /// Frees what the token holds.
    Release(u64),
}

impl LeaseCall {
    /// The token.
    pub fn token(self) -> u64 {
        match self {
            LeaseCall::Acquire(token) | LeaseCall::Release(token) => token,
        }
    }
}

impl<P> Clone for Ask<'_, P> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<P> Copy for Ask<'_, P> {}

/// What a held state keeps on the heap, so that the memory store can bound its bytes.
pub trait HeapSize {
    fn heap_bytes(&self) -> usize {
        0
    }
}

impl HeapSize for Kept {
    fn heap_bytes(&self) -> usize {
        std::mem::size_of::<Vec<u8>>() + self.bytes.capacity()
    }
}

impl HeapSize for Vec<u64> {
    fn heap_bytes(&self) -> usize {
        self.capacity() * std::mem::size_of::<u64>()
    }
}

impl<T> HeapSize for Box<T> {
    fn heap_bytes(&self) -> usize {
        std::mem::size_of::<T>()
    }
}

/// Declares `Algorithm`, `State` and their dispatch from one row per algorithm:
/// `Variant => module::Implementation, "yaml_name", held state type;`.
macro_rules! registry {
    ($( $(#[$doc:meta])* $variant:ident => $rule:ty, $name:literal, $held:ty; )+) => {
        /// How a limit counts: sluice's `algorithm` extension (docs/algorithms.md).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Algorithm {
            $( $(#[$doc])* $variant, )+
        }

        impl Algorithm {
            /// Every algorithm, in registry order: the default first.
            pub const ALL: &'static [Algorithm] = &[$(Algorithm::$variant),+];

            /// The name used in YAML (`token_bucket`), and of its script in `lua/`.
            pub fn as_str(self) -> &'static str {
                match self { $(Algorithm::$variant => $name,)+ }
            }

            /// The Lua source of the algorithm's script (`lua/<name>.lua`), without the
            /// shared header.
            pub fn lua_source(self) -> &'static str {
                match self {
                    $(Algorithm::$variant => include_str!(concat!("../../../../lua/", $name, ".lua")),)+
                }
            }

            /// The bucket capacity when `burst` is not set; `None`: no `burst` is taken.
            pub fn default_burst(self, requests_per_unit: u32) -> Option<u32> {
                match self {
                    $(Algorithm::$variant => <$rule>::default_burst(requests_per_unit),)+
                }
            }

            /// The largest `requests_per_unit` accepted, and why, when there is one.
            pub fn max_requests_per_unit(self) -> Option<(u32, &'static str)> {
                match self { $(Algorithm::$variant => <$rule>::MAX_REQUESTS_PER_UNIT,)+ }
            }

            /// Whether the key names the window (built with sluice's clock).
            pub fn key_holds_window(self) -> bool {
                match self { $(Algorithm::$variant => <$rule>::KEY_HOLDS_WINDOW,)+ }
            }

            /// Whether a hit that does not fit can be charged all the same (debt).
            pub fn owes(self) -> bool {
                match self { $(Algorithm::$variant => <$rule>::OWES,)+ }
            }

            /// Whether the state's key names L and W.
            pub fn key_names_rate(self) -> bool {
                match self { $(Algorithm::$variant => <$rule>::KEY_NAMES_RATE,)+ }
            }

            /// Whether the script needs a nonce unique to the hit.
            pub fn needs_nonce(self) -> bool {
                match self { $(Algorithm::$variant => <$rule>::NEEDS_NONCE,)+ }
            }

            /// The capacity whatever the limit says, when the algorithm has one.
            pub fn fixed_capacity(self) -> Option<u64> {
                match self { $(Algorithm::$variant => <$rule>::FIXED_CAPACITY,)+ }
            }

            /// Why the algorithm takes no credit, or `None` when it does.
            pub fn credit_refusal(self) -> Option<&'static str> {
                match self { $(Algorithm::$variant => <$rule>::CREDIT_REFUSAL,)+ }
            }

            /// The YAML keys of the algorithm's own settings.
            pub fn own_keys(self) -> &'static [&'static str] {
                match self {
                    $(Algorithm::$variant => <<$rule as LimitAlgorithm>::Params>::KEYS,)+
                }
            }

            /// The names of the algorithm's own script arguments, after the common ones.
            pub fn own_script_args(self) -> &'static [&'static str] {
                match self {
                    $(Algorithm::$variant => <<$rule as LimitAlgorithm>::Params>::SCRIPT_ARGS,)+
                }
            }

            /// Writes the part of a Redis key that the algorithm's settings' `shape` stands for.
            pub fn write_key(self, shape: [u64; 2], key: &mut String) {
                match self {
                    $(Algorithm::$variant => {
                        <<$rule as LimitAlgorithm>::Params>::write_key(shape, key)
                    })+
                }
            }
        }

        /// An algorithm with its own settings, as a limit holds it: a setting of one algorithm
        /// cannot be given to another.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Counting {
            $( $(#[$doc])* $variant(<$rule as LimitAlgorithm>::Params), )+
        }

        impl Counting {
            /// The algorithm.
            pub fn algorithm(&self) -> Algorithm {
                match self { $(Counting::$variant(_) => Algorithm::$variant,)+ }
            }

            /// `algorithm` with its settings' defaults.
            pub fn of(algorithm: Algorithm) -> Counting {
                match algorithm {
                    $(Algorithm::$variant => Counting::$variant(Default::default()),)+
                }
            }

            /// `algorithm` with its settings read from `given` (only its own keys), for a
            /// limit of `requests_per_unit` per `period_us`.
            pub fn parse(
                algorithm: Algorithm,
                given: &Given,
                requests_per_unit: u32,
                period_us: u64,
            ) -> Result<Counting, Refusal> {
                Ok(match algorithm {
                    $(Algorithm::$variant => Counting::$variant(
                        Parameters::parse(given, requests_per_unit, period_us)?,
                    ),)+
                })
            }

            /// The capacity the settings ask for, when they name one (`burst`).
            pub fn burst(&self) -> Option<u32> {
                match self { $(Counting::$variant(own) => own.burst(),)+ }
            }

            /// The same, asking for a capacity of `burst` where the algorithm takes one.
            pub fn with_burst(self, burst: Option<u32>) -> Counting {
                match self {
                    $(Counting::$variant(own) => Counting::$variant(own.with_burst(burst)),)+
                }
            }

            /// How a limit shows the settings after its rate.
            pub fn describe(&self, rate: &Rate) -> String {
                match self { $(Counting::$variant(own) => own.describe(rate),)+ }
            }

            /// The numbers that name the settings' state.
            pub fn shape(&self, rate: &Rate) -> [u64; 2] {
                match self { $(Counting::$variant(own) => own.shape(rate),)+ }
            }

            /// The settings' script arguments at `now_us` (`own_script_args` names them).
            pub fn script_args(&self, rate: &Rate, now_us: u64) -> [u64; 3] {
                match self { $(Counting::$variant(own) => own.script_args(rate, now_us),)+ }
            }

            /// Why the limit takes no debt with these settings, when it cannot.
            pub fn refuses_debt(&self) -> Option<&'static str> {
                match self { $(Counting::$variant(own) => own.refuses_debt(),)+ }
            }

            /// The calendar the limit counts over, where its algorithm's settings name one.
            pub fn calendar(&self) -> Option<&'static crate::calendar::Calendar> {
                match self { $(Counting::$variant(own) => own.calendar(),)+ }
            }
        }

        /// The stored state of one key, one variant per algorithm, so state written under one
        /// algorithm is never read as another's.
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub enum State {
            $( $variant($held), )+
            /// What a modifier keeps beside a limit (under a key of its own).
            Kept(Kept),
        }

        impl State {
            /// The bytes the state holds on the heap, beside its own size.
            pub fn heap_bytes(&self) -> usize {
                match self {
                    $(State::$variant(held) => HeapSize::heap_bytes(held),)+
                    State::Kept(kept) => HeapSize::heap_bytes(kept),
                }
            }

            /// What names each algorithm's kind of state in a snapshot, in registry order;
            /// the parts modifiers keep (`Kept::part`) follow them (`kept` below: their names).
            pub const PERSISTED_NAMES: &'static [&'static str] = &[$($name,)+];

            /// The state's tag in a snapshot: its kind's index in `PERSISTED_NAMES` followed
            /// by `kept`; `None` for a kept part not in `kept`.
            pub fn persisted_tag(&self, kept: &[&str]) -> Option<u8> {
                let mut tag = 0;
                $(
                    if matches!(self, State::$variant(_)) {
                        return Some(tag);
                    }
                    tag += 1;
                )+
                let State::Kept(held) = self else { return None };
                let at = kept.iter().position(|part| *part == held.part)?;
                u8::try_from(usize::from(tag) + at).ok()
            }

            /// Appends the state's bytes (without its tag) to `out`.
            pub fn persist(&self, out: &mut Vec<u8>) {
                match self {
                    $(State::$variant(held) => Persist::put(held, out),)+
                    State::Kept(held) => out.extend_from_slice(&held.bytes),
                }
            }

            /// A state of the kind `name` read from all of `bytes`, a part of `kept` kept as
            /// it is; `None` for an unknown kind or bytes of another layout.
            pub fn restore(name: &str, bytes: &[u8], kept: &[&'static str]) -> Option<State> {
                match name {
                    $($name => persist::read_whole::<$held>(bytes).map(State::$variant),)+
                    _ => kept.iter().find(|part| **part == name).map(|part| {
                        State::Kept(Kept { part, bytes: Box::new(bytes.to_vec()) })
                    }),
                }
            }
        }

        /// Credits `cost` to `rate` counted as `counting` says at `now_us`, given the key's
        /// current `state` (if any): the state to store and its expiry, or why the
        /// algorithm takes no credit.
        pub fn credit(
            counting: &Counting,
            state: Option<&State>,
            rate: &Rate,
            cost: u64,
            now_us: u64,
        ) -> Result<(State, u64), &'static str> {
            match counting {
                $(Counting::$variant(own) => {
                    if let Some(reason) = <$rule as LimitAlgorithm>::CREDIT_REFUSAL {
                        return Err(reason);
                    }
                    let stored = match state {
                        Some(State::$variant(held)) => Some(Borrow::borrow(held)),
                        _ => None,
                    };
                    let ask = Ask { rate, own, cost, now_us, lease: None };
                    let credited = <$rule>::credit(stored, &ask);
                    let expires_at_us = <$rule>::expires_at_us(&credited, rate, own);
                    Ok((State::$variant(<$held>::from(credited)), expires_at_us))
                })+
            }
        }

        /// What the key's `state` holds against `rate` counted as `counting` says at
        /// `now_us`, in requests, past the capacity included (`LimitAlgorithm::used`).
        pub fn used(counting: &Counting, state: Option<&State>, rate: &Rate, now_us: u64) -> u64 {
            match counting {
                $(Counting::$variant(own) => {
                    let stored = match state {
                        Some(State::$variant(held)) => Some(Borrow::borrow(held)),
                        _ => None,
                    };
                    let ask = Ask { rate, own, cost: 0, now_us, lease: None };
                    let own_rule = rate.requests_per_unit > 0 || <$rule>::DECIDES_ZERO_LIMIT;
                    own_rule.then(|| <$rule>::used(stored, &ask)).flatten().unwrap_or_else(|| {
                        let (decision, _) = decide_by::<$rule>(stored, &ask);
                        rate.capacity().saturating_sub(u64::from(decision.remaining))
                    })
                })+
            }
        }

        /// Charges `cost` against `rate` counted as `counting` says at `now_us`, given the
        /// key's current `state` (if any). State of another algorithm's shape is treated as
        /// absent.
        pub fn decide(
            counting: &Counting,
            state: Option<&State>,
            rate: &Rate,
            cost: u64,
            now_us: u64,
            lease: Option<LeaseCall>,
        ) -> Outcome {
            match counting {
                $(Counting::$variant(own) => {
                    let stored = match state {
                        Some(State::$variant(held)) => Some(Borrow::borrow(held)),
                        _ => None,
                    };
                    let ask = Ask { rate, own, cost, now_us, lease };
                    let (decision, changed) = decide_by::<$rule>(stored, &ask);
                    Outcome {
                        decision,
                        new_state: changed
                            .map(|(s, expires)| (State::$variant(<$held>::from(s)), expires)),
                    }
                })+
            }
        }
    };
}

registry! {
    /// A counter per window aligned to the epoch: envoyproxy/ratelimit's, the default.
    FixedWindow => fixed_window::FixedWindow, "fixed_window", fixed_window::Window;
    /// Every admitted hit of the last period: exact, memory O(L).
    SlidingWindowLog => sliding_window_log::SlidingWindowLog, "sliding_window_log",
        sliding_window_log::Log;
    /// Cloudflare's weighted two-window estimate: O(1) memory.
    SlidingWindowCounter => sliding_window_counter::SlidingWindowCounter,
        "sliding_window_counter", sliding_window_counter::Counts;
    // The buckets hold 128-bit values: boxed, so that every state (and the memory store's
    // entries, one per key) stays 32 bytes and 8-byte aligned.
    /// Tokens refilled continuously, up to `burst` (default L).
    TokenBucket => token_bucket::TokenBucket, "token_bucket", Box<token_bucket::Bucket>;
    /// GCRA: a bucket draining at L per W, holding `burst` (default 1: strict pacing).
    LeakyBucket => leaky_bucket::LeakyBucket, "leaky_bucket", Box<leaky_bucket::Tat>;
    /// Guava's SmoothWarmingUp: L per W once warm, `cold_factor` times slower after idleness.
    WarmUp => warm_up::WarmUp, "warm_up", warm_up::Ramp;
    /// At most L leases held at once, each freed by its release or W after it was taken.
    Concurrency => concurrency::Concurrency, "concurrency", concurrency::Leases;
}

impl Default for Algorithm {
    /// The first row: envoyproxy/ratelimit's fixed window.
    fn default() -> Self {
        Algorithm::ALL[0]
    }
}

impl Algorithm {
    /// Parses a YAML algorithm name (exact, lower case).
    pub fn parse(name: &str) -> Option<Algorithm> {
        Algorithm::ALL.iter().copied().find(|a| a.as_str() == name)
    }

    /// The algorithm's position in `ALL`, for tables indexed by algorithm.
    pub fn index(self) -> usize {
        self as usize
    }

    /// Whether the algorithm counts leases (held, then released) rather than a rate.
    pub fn leases(self) -> bool {
        self == Algorithm::Concurrency
    }

    /// Whether the algorithm has a bucket capacity that `burst` sets.
    pub fn has_burst(self) -> bool {
        self.default_burst(1).is_some()
    }

    /// Every algorithm's own YAML keys, each once.
    pub fn parameter_keys() -> Vec<&'static str> {
        let mut keys: Vec<&'static str> = Vec::new();
        for key in Algorithm::ALL.iter().flat_map(|a| a.own_keys()) {
            if !keys.contains(key) {
                keys.push(key);
            }
        }
        keys
    }

    /// The names of the algorithms that take the YAML key `key`, for messages.
    pub fn names_taking(key: &str) -> String {
        let names: Vec<&str> = Algorithm::ALL
            .iter()
            .filter(|a| a.own_keys().contains(&key))
            .map(|a| a.as_str())
            .collect();
        names.join(" and ")
    }

    /// Every name, for messages: `a, b or c`.
    pub fn names() -> String {
        let names: Vec<&str> = Algorithm::ALL.iter().map(|a| a.as_str()).collect();
        match names.split_last() {
            Some((last, [])) => (*last).to_string(),
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
            None => String::new(),
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One algorithm's decision under the common rules, with its state's expiry.
fn decide_by<A: LimitAlgorithm>(
    stored: Option<&A::State>,
    ask: &Ask<'_, A::Params>,
) -> (Decision, Option<(A::State, u64)>) {
    let (rate, cost) = (ask.rate, ask.cost);
    if rate.requests_per_unit == 0 && !A::DECIDES_ZERO_LIMIT {
        return (blocked(rate, cost), None);
    }
    let (decision, changed) = A::decide(stored, ask);
    let with_expiry = |state: A::State| {
        let expires_at_us = A::expires_at_us(&state, rate, ask.own);
        (state, expires_at_us)
    };
    // Debt, or the reference's counting: a hit that does not fit is charged all the same (a
    // limit of 0 never repays a debt, so it takes none; its window forgets a count). It is
    // denied, reports what remained before it (as every denial does), and is told when a
    // hit of cost 1 fits again.
    let never_repaid = rate.requests_per_unit == 0 && (rate.debt || !A::EXCESS_ENDS_WITH_WINDOW);
    if decision.admitted
        || !A::OWES
        || !rate.charges_what_does_not_fit()
        || cost == 0
        || never_repaid
    {
        return (decision, changed.map(with_expiry));
    }
    let in_debt = A::force(stored, ask);
    let (next, _) = A::decide(Some(&in_debt), &Ask { cost: 1, ..*ask });
    let decision = Decision {
        admitted: false,
        remaining: decision.remaining,
        reset_after_us: next.reset_after_us,
        retry_after_us: next.retry_after_us,
        ..Decision::default()
    };
    (decision, Some(with_expiry(in_debt)))
}

/// `decide` for a hit that must leave `headroom` of the capacity unused (a share a modifier
/// keeps for other traffic, `ModifierPolicy::headroom`): admitted only when a hit of `cost + headroom` would be,
/// and told what remains above the headroom. A release never leaves any. A denial is the
/// decision of `cost + headroom`, never charged but as `rate` charges what does not fit, at
/// `cost` alone. `lua/request.lua` (`held_back`) is the other copy.
pub fn decide_within(
    counting: &Counting,
    state: Option<&State>,
    rate: &Rate,
    (cost, headroom): (u64, u64),
    now_us: u64,
    lease: Option<LeaseCall>,
) -> Outcome {
    let plain = || decide(counting, state, rate, cost, now_us, lease);
    if headroom == 0 || matches!(lease, Some(LeaseCall::Release(_))) {
        return plain();
    }
    let probe_rate = rate.with_denied_charged(false);
    let probe = decide(
        counting,
        state,
        &probe_rate,
        cost.saturating_add(headroom),
        now_us,
        lease,
    );
    let above =
        |remaining: u32| u32::try_from(u64::from(remaining).saturating_sub(headroom)).unwrap_or(0);
    if probe.decision.admitted {
        let mut outcome = plain();
        outcome.decision.remaining = above(outcome.decision.remaining);
        return outcome;
    }
    let decision = Decision {
        remaining: above(probe.decision.remaining),
        ..probe.decision
    };
    let new_state = if rate.charges_what_does_not_fit() && cost > 0 {
        plain().new_state
    } else {
        None
    };
    Outcome {
        decision,
        new_state,
    }
}

/// `count` as a `remaining` field: saturated to u32 (limits are u32, so only overflowing
/// intermediate values can exceed it).
pub(crate) fn remaining(count: u128) -> u32 {
    u32::try_from(count).unwrap_or(u32::MAX)
}

/// A count in requests as a `u64`, saturated (only a state far past its limit overflows).
pub(crate) fn remaining_u64(count: u128) -> u64 {
    u64::try_from(count).unwrap_or(u64::MAX)
}

/// Microseconds until `scaled` units drain at `per_us` units per microsecond, rounded up; 0
/// when nothing is owed, one `period_us` when nothing drains.
pub(crate) fn wait_us(scaled: u128, per_us: u128, period_us: u64) -> u64 {
    if scaled == 0 {
        return 0;
    }
    if per_us == 0 {
        return period_us;
    }
    u64::try_from(scaled.div_ceil(per_us)).unwrap_or(u64::MAX)
}

/// `requests_per_unit: 0`: only cost 0 passes, and nothing ever will. (The fixed window gets
/// this from its own rule, with the reference server's reset time: the window's end.)
fn blocked(rate: &Rate, cost: u64) -> Decision {
    Decision {
        admitted: cost == 0,
        remaining: 0,
        reset_after_us: 0,
        retry_after_us: if cost == 0 { 0 } else { rate.period_us() },
        ..Decision::default()
    }
}

#[cfg(test)]
pub(crate) mod vectors;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zero_limit_blocks_every_algorithm_whatever_the_burst() {
        for &algorithm in Algorithm::ALL {
            let limit = vectors::per_second(algorithm, 0, Some(5));
            let mut state = None;
            for now in [0, 1, 5_000_000] {
                let outcome = limit.decide(state.as_ref(), 1, now);
                assert!(!outcome.decision.admitted, "{algorithm} at {now}");
                assert!(
                    limit.decide(state.as_ref(), 0, now).decision.admitted,
                    "{algorithm}"
                );
                state = outcome.new_state.map(|(s, _)| s);
            }
        }
    }

    #[test]
    fn used_is_the_capacity_less_what_remains_and_the_real_count_past_it() {
        for &algorithm in Algorithm::ALL {
            let limit = vectors::per_second(algorithm, 10, Some(10));
            let three = limit.decide(None, 3, 0).new_state.map(|(s, _)| s);
            let read = limit.decide(three.as_ref(), 0, 0).decision;
            let used = limit.used(three.as_ref(), 0);
            assert_eq!(
                u64::from(read.remaining),
                limit.capacity().saturating_sub(used),
                "{algorithm}"
            );
            if algorithm.owes() && algorithm != Algorithm::WarmUp {
                let in_debt = crate::limit::Limit {
                    debt: true,
                    ..limit
                };
                let owed = in_debt.decide(three.as_ref(), 12, 0).new_state;
                let owed = owed.map(|(s, _)| s);
                let expected = if algorithm == Algorithm::SlidingWindowLog {
                    11 // the log keeps L + 1 entries
                } else {
                    15
                };
                assert_eq!(in_debt.used(owed.as_ref(), 0), expected, "{algorithm}");
            }
        }
    }

    #[test]
    fn names_round_trip_and_list_every_algorithm() {
        for &algorithm in Algorithm::ALL {
            assert_eq!(Algorithm::parse(algorithm.as_str()), Some(algorithm));
            assert!(Algorithm::names().contains(algorithm.as_str()));
            assert!(!algorithm.lua_source().is_empty(), "{algorithm}");
        }
        assert_eq!(Algorithm::default(), Algorithm::FixedWindow);
        assert_eq!(
            Algorithm::names_taking("burst"),
            "token_bucket and leaky_bucket"
        );
        assert_eq!(Algorithm::names_taking("cold_factor"), "warm_up");
        assert_eq!(
            Algorithm::parameter_keys(),
            ["window", "burst", "warmup", "cold_factor"]
        );
    }
}
