//! An algorithm's own settings (`burst`, `warmup`, `cold_factor`, ...): the `Parameters` an
//! algorithm names in its `LimitAlgorithm` implementation own their YAML keys, their parsing
//! and validation, how a limit shows them, the numbers that name their state, and their
//! script arguments. The registry generates what is shared (`Counting`, the list of keys).
//! The settings that more than one algorithm takes (`Burst`) and the empty ones live here.

use std::collections::BTreeMap;
use std::fmt;
use std::hash::Hash;

use super::Rate;
use crate::calendar::Calendar;

/// The YAML values of a limit's algorithm keys, by key.
pub type Given = BTreeMap<String, serde_yaml::Value>;

/// Why a setting of an algorithm was refused: the key it is under, and the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub key: &'static str,
    pub reason: String,
}

impl Refusal {
    pub fn new(key: &'static str, reason: impl Into<String>) -> Refusal {
        Refusal {
            key,
            reason: reason.into(),
        }
    }
}

/// What a limit tells its algorithm beyond L, W and the common settings.
pub trait Parameters:
    Copy + fmt::Debug + PartialEq + Eq + Hash + Default + Send + Sync + 'static
{
    /// The YAML keys of these settings, beside the common ones.
    const KEYS: &'static [&'static str] = &[];

    /// The names of their script arguments, after the common ones (the algorithm's Lua file
    /// lists the same names, in this order, as its `params`).
    const SCRIPT_ARGS: &'static [&'static str] = &[];

    /// Reads and validates the settings from `given` (only keys of `KEYS` are there), for a
    /// limit of `requests_per_unit` per `period_us`.
    fn parse(given: &Given, requests_per_unit: u32, period_us: u64) -> Result<Self, Refusal> {
        let _ = (given, requests_per_unit, period_us);
        Ok(Self::default())
    }

    /// The bucket capacity these settings ask for, when they name one.
    fn burst(&self) -> Option<u32> {
        None
    }

    /// The same settings asking for a capacity of `burst`, where they take one.
    fn with_burst(self, burst: Option<u32>) -> Self {
        let _ = burst;
        self
    }

    /// How a limit shows them after its rate (`, burst 20`), given its resolved rate.
    fn describe(&self, rate: &Rate) -> String {
        let _ = rate;
        String::new()
    }

    /// The numbers that name their state beside the algorithm, L and W (a changed setting is a
    /// new state), given the resolved rate.
    fn shape(&self, rate: &Rate) -> [u64; 2] {
        let _ = rate;
        [0, 0]
    }

    /// Writes the part of a Redis key that `shape` stands for (`b20_`).
    fn write_key(shape: [u64; 2], key: &mut String) {
        let _ = (shape, key);
    }

    /// Their script arguments at `now_us`, in `SCRIPT_ARGS` order (at most three; those
    /// past `SCRIPT_ARGS.len()` are not sent).
    fn script_args(&self, rate: &Rate, now_us: u64) -> [u64; 3] {
        let _ = (rate, now_us);
        [0, 0, 0]
    }

    /// Why a limit with these settings takes no debt, when it cannot.
    fn refuses_debt(&self) -> Option<&'static str> {
        None
    }

    /// The calendar the limit counts over, where the settings name one.
    fn calendar(&self) -> Option<&'static Calendar> {
        None
    }
}

/// The settings of an algorithm that takes none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct NoParameters;

impl Parameters for NoParameters {}

/// `burst`: a bucket's capacity (the algorithm's default when not given).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Burst(pub Option<u32>);

impl Parameters for Burst {
    const KEYS: &'static [&'static str] = &["burst"];

    fn parse(given: &Given, _: u32, _: u64) -> Result<Burst, Refusal> {
        match given.get("burst") {
            None => Ok(Burst(None)),
            Some(value) => match value.as_u64().and_then(|n| u32::try_from(n).ok()) {
                Some(0) => Err(Refusal::new("burst", "must be at least 1")),
                Some(burst) => Ok(Burst(Some(burst))),
                None => Err(Refusal::new("burst", "must be a whole number from 1")),
            },
        }
    }

    fn burst(&self) -> Option<u32> {
        self.0
    }

    fn with_burst(self, burst: Option<u32>) -> Burst {
        Burst(burst)
    }

    fn describe(&self, rate: &Rate) -> String {
        format!(", burst {}", rate.capacity())
    }

    fn shape(&self, rate: &Rate) -> [u64; 2] {
        [rate.capacity(), 0]
    }

    fn write_key([capacity, _]: [u64; 2], key: &mut String) {
        use std::fmt::Write;
        let _ = write!(key, "b{capacity}_");
    }
}
