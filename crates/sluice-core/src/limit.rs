//! Domain types shared by config, algorithms, stores and the service: what a limit is
//! (`Limit`), one charge against it (`Hit`), and what the store decided (`Decision`).

use std::fmt;

use crate::algorithm::{self, Outcome, Rate, State};
pub use crate::algorithm::{Algorithm, Counting, Decision, LeaseCall};
pub use crate::duration::ceil_seconds;
use crate::modifier::Modifiers;

/// A time unit of envoyproxy/ratelimit's format. Month is 30 days and year 365, as there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unit {
    Second,
    Minute,
    Hour,
    Day,
    Week,
    Month,
    Year,
}

impl Unit {
    /// Every unit, in increasing length.
    pub const ALL: [Unit; 7] = [
        Unit::Second,
        Unit::Minute,
        Unit::Hour,
        Unit::Day,
        Unit::Week,
        Unit::Month,
        Unit::Year,
    ];

    /// Length of the unit in seconds.
    pub fn seconds(self) -> u64 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3_600,
            Unit::Day => 86_400,
            Unit::Week => 7 * 86_400,
            Unit::Month => 30 * 86_400,
            Unit::Year => 365 * 86_400,
        }
    }

    /// The lower-case name used in YAML (`minute`).
    pub fn as_str(self) -> &'static str {
        match self {
            Unit::Second => "second",
            Unit::Minute => "minute",
            Unit::Hour => "hour",
            Unit::Day => "day",
            Unit::Week => "week",
            Unit::Month => "month",
            Unit::Year => "year",
        }
    }

    /// Parses a YAML unit name; case-insensitive, as the reference server.
    pub fn parse(name: &str) -> Option<Unit> {
        Unit::ALL
            .into_iter()
            .find(|unit| unit.as_str().eq_ignore_ascii_case(name))
    }

    /// The number of this unit in Envoy's `RateLimitUnit` and `RateLimit.Unit` enums.
    pub fn proto_number(self) -> i32 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 2,
            Unit::Hour => 3,
            Unit::Day => 4,
            Unit::Month => 5,
            Unit::Year => 6,
            Unit::Week => 7,
        }
    }

    /// The name of this unit in Envoy's enums (`MINUTE`).
    pub fn proto_name(self) -> &'static str {
        match self {
            Unit::Second => "SECOND",
            Unit::Minute => "MINUTE",
            Unit::Hour => "HOUR",
            Unit::Day => "DAY",
            Unit::Week => "WEEK",
            Unit::Month => "MONTH",
            Unit::Year => "YEAR",
        }
    }

    /// The unit for an Envoy enum number; `None` for UNKNOWN (0) and numbers Envoy does not define.
    pub fn from_proto_number(number: i32) -> Option<Unit> {
        Unit::ALL
            .into_iter()
            .find(|unit| unit.proto_number() == number)
    }
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A rate: `requests_per_unit` per `unit_multiplier` x `unit`, counted as `counting` says
/// (an algorithm with its own settings).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Limit {
    pub counting: Counting,
    pub requests_per_unit: u32,
    pub unit: Unit,
    pub unit_multiplier: u32,
    /// A hit that does not fit is charged all the same: the limit goes into debt (costs
    /// reported after the response must land).
    pub debt: bool,
    /// What changes how its decision is taken, or what it keeps beside its count: the
    /// modifier registry's (`crate::modifier`).
    pub modifiers: Modifiers,
}

impl Limit {
    /// A limit of `requests_per_unit` per one `unit`, counted as `counting` says.
    pub fn new(counting: Counting, requests_per_unit: u32, unit: Unit) -> Limit {
        Limit {
            counting,
            requests_per_unit,
            unit,
            unit_multiplier: 1,
            debt: false,
            modifiers: Modifiers::default(),
        }
    }

    /// A fixed-window limit of `requests_per_unit` per one `unit`: Envoy's only kind.
    pub fn fixed_window(requests_per_unit: u32, unit: Unit) -> Limit {
        Limit::new(
            Counting::of(Algorithm::FixedWindow),
            requests_per_unit,
            unit,
        )
    }

    /// The algorithm that counts.
    pub fn algorithm(&self) -> Algorithm {
        self.counting.algorithm()
    }

    /// Bucket capacity: `burst`, else the algorithm's default (the token bucket: a full period
    /// at once; the leaky bucket: 1, strict pacing). Window algorithms: the limit.
    pub fn capacity(&self) -> u64 {
        let algorithm = self.algorithm();
        if let Some(fixed) = algorithm.fixed_capacity() {
            return fixed;
        }
        let default = algorithm.default_burst(self.requests_per_unit);
        u64::from(
            self.counting
                .burst()
                .or(default)
                .unwrap_or(self.requests_per_unit),
        )
    }

    /// Whether the limit's Redis key names its window (the fixed window's, byte-identical to
    /// envoyproxy/ratelimit's); a limit that takes debt carries its excess over windows, so its
    /// key cannot name one.
    pub fn key_holds_window(&self) -> bool {
        self.algorithm().key_holds_window() && !self.debt && !self.from_first_hit()
    }

    /// Whether the limit's windows start at each counter's first hit (Limitador's): its
    /// windows are its state's, so no key and no caller knows where one ends.
    pub fn from_first_hit(&self) -> bool {
        self.counting.from_first_hit()
    }

    /// The state of a limit whose key names its window (`key_holds_window`) when that key
    /// holds `count` at `now_us`: the count of the window holding `now_us`. `None` for any
    /// other limit.
    pub fn window_count(&self, now_us: u64, count: u64) -> Option<State> {
        match &self.counting {
            Counting::FixedWindow(own) if self.key_holds_window() => {
                let (start_us, _) = algorithm::fixed_window::window_us(&self.rate(), own, now_us);
                Some(State::FixedWindow(algorithm::fixed_window::Window {
                    start_us,
                    count,
                }))
            }
            _ => None,
        }
    }

    /// What the algorithm needs of the limit besides its own settings.
    pub fn rate(&self) -> Rate {
        Rate::new(self.requests_per_unit, self.period_us(), self.capacity()).with_debt(self.debt)
    }

    /// Charges `cost` at `now_us` against the key's `state`, by this limit's algorithm; a
    /// hit that does not fit is charged only in debt (`engine::decide_hit` for the other
    /// charging).
    pub fn decide(&self, state: Option<&State>, cost: u64, now_us: u64) -> Outcome {
        algorithm::decide(&self.counting, state, &self.rate(), cost, now_us, None)
    }

    /// What the key's `state` holds against this limit at `now_us`, in requests: past the
    /// capacity when it is over it (the admin API's `used`).
    pub fn used(&self, state: Option<&State>, now_us: u64) -> u64 {
        algorithm::used(&self.counting, state, &self.rate(), now_us)
    }

    /// Credits `cost` at `now_us` to the key's `state`: the state to store and its expiry, or
    /// why this limit's algorithm takes no credit (`LimitAlgorithm::credit`).
    pub fn credit(
        &self,
        state: Option<&State>,
        cost: u64,
        now_us: u64,
    ) -> Result<(State, u64), &'static str> {
        algorithm::credit(&self.counting, state, &self.rate(), cost, now_us)
    }

    /// The same for a hit that acquires or releases a lease limit's leases.
    pub fn decide_lease(
        &self,
        state: Option<&State>,
        cost: u64,
        now_us: u64,
        lease: Option<LeaseCall>,
    ) -> Outcome {
        algorithm::decide(&self.counting, state, &self.rate(), cost, now_us, lease)
    }

    /// The end of the window that holds `now_us`, for an algorithm that counts in windows
    /// (the fixed window: the epoch's, or its calendar's); `None` for the others, and for
    /// windows from the first hit (only their state knows where they end).
    pub fn window_end_us(&self, now_us: u64) -> Option<u64> {
        match &self.counting {
            Counting::FixedWindow(own) if !own.from_first_hit => {
                Some(algorithm::fixed_window::window_us(&self.rate(), own, now_us).1)
            }
            _ => None,
        }
    }

    /// The period W in microseconds: unit x multiplier.
    pub fn period_us(&self) -> u64 {
        // Configured periods are at most 100 years (config validation); saturate regardless.
        (self.unit.seconds() * u64::from(self.unit_multiplier.max(1)))
            .saturating_mul(MICROS_PER_SECOND)
    }
}

impl fmt::Display for Limit {
    /// `token_bucket: 10 per second, burst 20`, `fixed_window: 5 per 5 minutes`;
    /// `concurrency: 3 in flight, a lease lives at most 2 seconds` (not a rate: its period
    /// is a lease's longest life).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.algorithm().leases() {
            write!(
                f,
                "{}: {} in flight, a lease lives at most ",
                self.algorithm(),
                self.requests_per_unit
            )?;
            match self.unit_multiplier {
                0 | 1 => write!(f, "1 {}", self.unit)?,
                n => write!(f, "{n} {}s", self.unit)?,
            }
        } else {
            write!(f, "{}: {} per ", self.algorithm(), self.requests_per_unit)?;
            match self.unit_multiplier {
                0 | 1 => write!(f, "{}", self.unit)?,
                n => write!(f, "{n} {}s", self.unit)?,
            }
        }
        f.write_str(&self.counting.describe(&self.rate()))?;
        if self.debt {
            write!(f, ", taking debt")?;
        }
        if !self.modifiers.is_empty() {
            f.write_str(&self.modifiers.shown())?;
        }
        Ok(())
    }
}

/// Microseconds in a second: time inside sluice is integer microseconds.
pub const MICROS_PER_SECOND: u64 = 1_000_000;

/// One charge of `cost` against `limit`, whose state lives under `key`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hit {
    pub key: String,
    pub limit: Limit,
    pub cost: u64,
    /// How the hit's denial weighs on its request.
    pub role: Role,
    /// Another limit of the previous hit's descriptor: the hits of one descriptor are charged
    /// together or not at all.
    pub joins_previous: bool,
    /// On a lease limit: the lease the hit acquires or releases.
    pub lease: Option<LeaseCall>,
}

impl Hit {
    /// Whether the hit releases a lease: its charge always stands, and it never denies.
    pub fn releases(&self) -> bool {
        matches!(self.lease, Some(LeaseCall::Release(_)))
    }

    /// Whether the hit acquires a lease: it is taken only by a request that is admitted, in
    /// either charging mode.
    pub fn acquires(&self) -> bool {
        matches!(self.lease, Some(LeaseCall::Acquire(_)))
    }
}

/// What a descriptor's lease limit did: acquired (or was refused) `cost`, or released.
#[derive(Debug, Clone, Copy)]
pub struct LeaseOutcome {
    pub decision: Decision,
    pub cost: u64,
    pub releases: bool,
    /// Another limit of the descriptor denied the hit: its leases were not taken.
    pub descriptor_denied: bool,
}

impl LeaseOutcome {
    /// Whether the request took its leases: its lease limit admitted them, and neither
    /// its descriptor nor the request (`request_denied`: vetoed, the overall code before
    /// global shadow mode) was denied.
    pub fn taken(&self, request_denied: bool) -> bool {
        !self.releases
            && self.cost > 0
            && self.decision.admitted
            && !self.descriptor_denied
            && !request_denied
    }

    /// Whether the lease limit itself refused the leases.
    pub fn refused(&self) -> bool {
        !self.releases && self.cost > 0 && !self.decision.admitted
    }
}

/// How a hit's denial weighs on the request it belongs to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Role {
    /// A denial denies the request.
    #[default]
    Enforced,
    /// `shadow_mode`: counted, but a denial never denies the request.
    Shadow,
    /// `quota_mode`: the request is denied only when every quota hit of it is.
    Quota,
    /// `quota_mode` and `shadow_mode` together: one of the request's quota hits, always
    /// counted as passing (its status is OK whatever it decides), as in the reference.
    PassingQuota,
}

impl Role {
    /// The role's name in the Redis scripts' arguments.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Enforced => "enforced",
            Role::Shadow => "shadow",
            Role::Quota => "quota",
            Role::PassingQuota => "passing_quota",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_parse_case_insensitively_and_map_to_envoy_numbers() {
        assert_eq!(Unit::parse("MiNuTe"), Some(Unit::Minute));
        assert_eq!(Unit::parse("foo"), None);
        assert_eq!(Unit::Week.proto_number(), 7);
        assert_eq!(Unit::Month.proto_number(), 5);
        assert_eq!(Unit::Year.proto_number(), 6);
        assert_eq!(Unit::from_proto_number(0), None);
        assert_eq!(Unit::from_proto_number(7), Some(Unit::Week));
    }

    #[test]
    fn period_multiplies_unit() {
        let mut limit = Limit::fixed_window(10, Unit::Minute);
        limit.unit_multiplier = 5;
        assert_eq!(limit.period_us(), 300 * MICROS_PER_SECOND);
    }

    #[test]
    fn seconds_round_up() {
        for (us, seconds) in [(0, 0), (1, 1), (1_000_000, 1), (1_000_001, 2)] {
            assert_eq!(ceil_seconds(us), seconds, "{us} µs");
        }
    }
}
