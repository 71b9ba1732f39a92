//! Warm-up, after Guava's `SmoothWarmingUp`: a pacer whose rate ramps up after idleness. The
//! stable interval between permits is S = W / L; permits an idle client did not use are stored
//! (one per cool-down interval, up to `max`), and a stored permit is handed out *slower*, not
//! faster: above the threshold (half the warm-up period's worth of permits) the interval
//! grows linearly from S to `cold_factor` x S at `max`. A saturating client that starts fully
//! cold spends the permits from `max` down to the threshold in exactly the warm-up period (the
//! trapezoid of Guava's documentation), then gets one permit every S. A key never seen is
//! fully cold, as a new Guava limiter is.
//!
//! As Guava's `tryAcquire`, a hit is admitted when the previous one's time has passed
//! (`next_free <= now`), and its own time (the trapezoid's area for its permits) pushes
//! `next_free` on: a client never gets permits faster than one per S. A hit of more than L
//! permits (a whole period at the stable rate) never fits.
//!
//! Integers only. S is W / L rounded up to a whole microsecond; the warm-up period is a whole
//! number N of stable intervals (`warmup` / S, rounded down, at least 1). Stored permits are
//! counted in units of 1 / (2 (1 + cold_factor)) permit, so that the threshold,
//! N (1 + cold_factor), and `max`, N (cold_factor + 5), are integers; times are rounded up to
//! the microsecond. Every product stays below 2^53 (config validation), where the Lua
//! script's doubles are exact.

use crate::algorithm::params::{Given, Parameters, Refusal};
use crate::algorithm::persist::{Input, Persist};
use crate::algorithm::{Ask, Decision, HeapSize, LimitAlgorithm, Rate};

/// `cold_factor` when not given: Guava's.
pub const DEFAULT_COLD_FACTOR: u32 = 3;

/// `warm_up`'s own settings: `warmup`, the warm-up period (default: one period), and
/// `cold_factor`, how much slower the coldest rate is (default 3).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct WarmUpParameters {
    pub warmup_us: Option<u64>,
    pub cold_factor: Option<u32>,
}

impl WarmUpParameters {
    /// The warm-up period of a limit of period `period_us`, in µs.
    pub fn warmup_us(&self, period_us: u64) -> u64 {
        self.warmup_us.unwrap_or(period_us)
    }

    /// The cold factor.
    pub fn cold_factor(&self) -> u32 {
        self.cold_factor.unwrap_or(DEFAULT_COLD_FACTOR)
    }
}

impl Parameters for WarmUpParameters {
    const KEYS: &'static [&'static str] = &["warmup", "cold_factor"];
    const SCRIPT_ARGS: &'static [&'static str] = &["warmup_us", "cold_factor"];

    /// `warmup` a duration above 0 and at least one stable interval, `cold_factor` 1 to 100,
    /// and the whole ramp within what the script's doubles hold exactly.
    fn parse(given: &Given, requests_per_unit: u32, period_us: u64) -> Result<Self, Refusal> {
        let mut own = WarmUpParameters::default();
        if let Some(value) = given.get("warmup") {
            let text = match value {
                serde_yaml::Value::String(text) => text.clone(),
                serde_yaml::Value::Number(number) => number.to_string(),
                _ => {
                    return Err(Refusal::new(
                        "warmup",
                        "must be a duration (10s, 500ms, ...)",
                    ))
                }
            };
            match crate::duration::parse_us(&text) {
                Ok(us) if us > 0 => own.warmup_us = Some(us),
                Ok(_) => return Err(Refusal::new("warmup", "must be longer than 0")),
                Err(error) => return Err(Refusal::new("warmup", error.to_string())),
            }
        }
        if let Some(value) = given.get("cold_factor") {
            match value.as_u64().filter(|n| (1..=100).contains(n)) {
                Some(factor) => own.cold_factor = u32::try_from(factor).ok(),
                None => return Err(Refusal::new("cold_factor", "must be between 1 and 100")),
            }
        }
        if u64::from(requests_per_unit) > period_us {
            let reason = "warm_up paces at most one request per microsecond";
            return Err(Refusal::new("requests_per_unit", reason));
        }
        if requests_per_unit == 0 {
            return Ok(own);
        }
        let shape = Shape::of(&Rate::new(requests_per_unit, period_us, 1), &own);
        let warmup_us = own.warmup_us(period_us);
        if warmup_us < shape.stable_us {
            let reason = format!(
                "{} ms is shorter than one interval of the stable rate ({} ms)",
                warmup_us / 1000,
                shape.stable_us / 1000
            );
            return Err(Refusal::new("warmup", reason));
        }
        if Shape::largest_product(shape.warmup_intervals, shape.cold_factor) >= 1 << 53 {
            let reason = format!(
                "the warm-up covers {} requests at the stable rate, too many for exact \
                 arithmetic with cold_factor {}: shorten warmup or lower the rate",
                shape.warmup_intervals, shape.cold_factor
            );
            return Err(Refusal::new("warmup", reason));
        }
        Ok(own)
    }

    fn describe(&self, rate: &Rate) -> String {
        format!(
            ", warming up over {} ms from {}x slower",
            self.warmup_us(rate.period_us()) / 1000,
            self.cold_factor()
        )
    }

    fn shape(&self, rate: &Rate) -> [u64; 2] {
        let [warmup_us, cold_factor, _] = self.script_args(rate, 0);
        [warmup_us, cold_factor]
    }

    fn write_key([warmup_us, cold_factor]: [u64; 2], key: &mut String) {
        use std::fmt::Write;
        let _ = write!(key, "w{warmup_us}c{cold_factor}_");
    }

    fn script_args(&self, rate: &Rate, _now_us: u64) -> [u64; 3] {
        [
            self.warmup_us(rate.period_us()),
            u64::from(self.cold_factor()),
            0,
        ]
    }
}

/// The warm-up state: when the next permit is free, the permits stored (in units of
/// 1 / (2 (1 + cold_factor))) as of then, and whether that time was pushed on by a hit that
/// did not fit (debt: until then, even cost 0 is denied).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ramp {
    pub next_free_us: u64,
    pub stored: u64,
    pub in_debt: bool,
}

impl Persist for Ramp {
    fn put(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.next_free_us.to_le_bytes());
        out.extend_from_slice(&self.stored.to_le_bytes());
        out.push(u8::from(self.in_debt));
    }

    fn take(input: &mut Input<'_>) -> Option<Self> {
        Some(Ramp {
            next_free_us: input.u64()?,
            stored: input.u64()?,
            in_debt: input.bool()?,
        })
    }
}

/// The integer constants of a rate's warm-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// S, the stable interval, in µs.
    pub stable_us: u64,
    pub cold_factor: u64,
    /// N, whole stable intervals in the warm-up period.
    pub warmup_intervals: u64,
}

impl Shape {
    /// The shape of `rate` warming up as `own` says: S = ceil(W / L), N = max(1, warmup / S).
    pub fn of(rate: &Rate, own: &WarmUpParameters) -> Shape {
        let stable_us = rate
            .period_us()
            .div_ceil(u64::from(rate.requests_per_unit.max(1)))
            .max(1);
        Shape {
            stable_us,
            cold_factor: u64::from(own.cold_factor().max(1)),
            warmup_intervals: (own.warmup_us(rate.period_us()) / stable_us).max(1),
        }
    }

    /// Units of stored permits in one permit: 2 (1 + cold_factor).
    fn unit(&self) -> u64 {
        2 * (1 + self.cold_factor)
    }

    /// The threshold: N (1 + cold_factor) units (N / 2 permits).
    fn threshold(&self) -> u64 {
        self.warmup_intervals * (1 + self.cold_factor)
    }

    /// `max`: N (cold_factor + 5) units, the threshold plus 2N / (1 + cold_factor) permits.
    pub fn max_stored(&self) -> u64 {
        self.warmup_intervals * (self.cold_factor + 5)
    }

    /// The largest product the decision computes: 32 x cold_factor x N^2 (the trapezoid's
    /// numerator), which must stay below 2^53 for the Lua script.
    pub fn largest_product(warmup_intervals: u64, cold_factor: u64) -> u128 {
        32 * u128::from(cold_factor) * u128::from(warmup_intervals).pow(2)
    }

    /// `stored` at `now_us` when it was as of `since_us`: a unit per S / (cold_factor + 5) of
    /// idleness, up to `max`.
    fn refilled(&self, stored: u64, since_us: u64, now_us: u64) -> u64 {
        let full_after = self.warmup_intervals * self.stable_us;
        let idle = now_us.saturating_sub(since_us).min(full_after);
        let gained = idle * (self.cold_factor + 5) / self.stable_us;
        self.max_stored().min(stored + gained)
    }

    /// The time the next `units` permits take when `stored` are stored: the trapezoid's area
    /// for those above the threshold, S each for the rest; each part rounded up.
    fn time_us(&self, stored: u64, units: u64) -> u64 {
        let threshold = self.threshold();
        let above = stored.saturating_sub(threshold);
        let taken = above.min(units);
        let rest = units - taken;
        let (a1, a2) = (above, above - taken);
        let n = self.warmup_intervals;
        // S x [8N x taken + (cold_factor - 1) x taken x (a1 + a2)] / (16 (1 + cold_factor) N)
        let numerator = 8 * n * taken + (self.cold_factor - 1) * taken * (a1 + a2);
        let trapezoid = scaled_ceil(self.stable_us, numerator, 16 * (1 + self.cold_factor) * n);
        trapezoid + scaled_ceil(self.stable_us, rest, self.unit())
    }

    /// When a key at `ramp` reads as never seen: free, and fully cold.
    fn cold_again_us(&self, ramp: &Ramp) -> u64 {
        let missing = self.max_stored() - ramp.stored.min(self.max_stored());
        ramp.next_free_us
            .saturating_add(scaled_ceil(self.stable_us, missing, self.cold_factor + 5))
    }
}

/// ceil(s x n / d) without forming s x n: s x floor(n / d) + ceil(s x (n mod d) / d).
fn scaled_ceil(s: u64, n: u64, d: u64) -> u64 {
    let (q, r) = (n / d, n % d);
    s.saturating_mul(q)
        .saturating_add((u128::from(s) * u128::from(r)).div_ceil(u128::from(d)) as u64)
}

/// The ramp at `now_us`: a key never seen is free and fully cold; past `next_free`, the idle
/// time has stored permits.
fn resynced(shape: &Shape, stored: Option<&Ramp>, now_us: u64) -> Ramp {
    match stored {
        None => Ramp {
            next_free_us: now_us,
            stored: shape.max_stored(),
            in_debt: false,
        },
        Some(ramp) if ramp.next_free_us < now_us => Ramp {
            next_free_us: now_us,
            stored: shape.refilled(ramp.stored, ramp.next_free_us, now_us),
            in_debt: false,
        },
        Some(ramp) => *ramp,
    }
}

/// The ramp after `cost` permits are taken from `ramp`, in debt or not.
fn charged(shape: &Shape, ramp: &Ramp, cost: u64, in_debt: bool) -> Ramp {
    let units = cost.saturating_mul(shape.unit());
    Ramp {
        next_free_us: ramp
            .next_free_us
            .saturating_add(shape.time_us(ramp.stored, units)),
        stored: ramp.stored - ramp.stored.min(units),
        in_debt,
    }
}

/// Warm-up in the registry.
pub struct WarmUp;

/// Held inline: nothing on the heap.
impl HeapSize for Ramp {}

impl LimitAlgorithm for WarmUp {
    type State = Ramp;
    type Params = WarmUpParameters;

    /// A pacer holds one request at a time, as a leaky bucket of burst 1.
    const FIXED_CAPACITY: Option<u64> = Some(1);

    /// Decides one hit: admitted when the next permit is free; its permits' time moves
    /// `next_free` on.
    #[inline]
    fn decide(stored: Option<&Ramp>, ask: &Ask<'_, Self::Params>) -> (Decision, Option<Ramp>) {
        let (rate, own, cost, now_us) = (ask.rate, ask.own, ask.cost, ask.now_us);
        let shape = Shape::of(rate, own);
        let ramp = resynced(&shape, stored, now_us);
        // More than a period's worth at the stable rate can never fit.
        let fits = cost <= u64::from(rate.requests_per_unit);
        let free = ramp.next_free_us <= now_us;
        // Cost 0 reads: admitted unless the limit is in debt.
        let admitted = fits && (free || (cost == 0 && !ramp.in_debt));
        let after = if admitted && cost > 0 {
            charged(&shape, &ramp, cost, false)
        } else {
            ramp
        };
        let decision = Decision {
            admitted,
            remaining: u32::from(after.next_free_us <= now_us),
            reset_after_us: shape.cold_again_us(&after) - now_us,
            retry_after_us: if admitted {
                0
            } else if !fits {
                rate.period_us()
            } else {
                ramp.next_free_us - now_us
            },
            ..Decision::default()
        };
        let changed = (admitted && cost > 0).then_some(after);
        (decision, changed)
    }

    /// In debt: the permits' time is added after `next_free`, however far it is.
    fn force(stored: Option<&Ramp>, ask: &Ask<'_, Self::Params>) -> Ramp {
        let (rate, own, cost, now_us) = (ask.rate, ask.own, ask.cost, ask.now_us);
        let shape = Shape::of(rate, own);
        charged(&shape, &resynced(&shape, stored, now_us), cost, true)
    }

    /// When the key reads as never seen: free and fully cold again.
    const CREDIT_REFUSAL: Option<&'static str> = Some(
        "warm_up's rate follows how full its bucket is: tokens given back would change its ramp, not only its count (reset it instead)",
    );

    fn expires_at_us(ramp: &Ramp, rate: &Rate, own: &WarmUpParameters) -> u64 {
        Shape::of(rate, own).cold_again_us(ramp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::vectors::run;
    use crate::algorithm::vectors::S;
    use crate::algorithm::Counting;
    use crate::limit::{Limit, Unit};

    /// 10 per second (S = 100 ms), warming up over 1 s (N = 10), cold factor 3.
    const OWN: WarmUpParameters = WarmUpParameters {
        warmup_us: Some(S),
        cold_factor: Some(3),
    };

    fn limit() -> Limit {
        Limit::new(Counting::WarmUp(OWN), 10, Unit::Second)
    }

    #[test]
    fn a_new_key_starts_cold_and_ramps_to_the_stable_rate_over_the_warm_up() {
        // Threshold 40 units (5 permits), max 80 (10 permits): 5 permits above it, spent
        // at intervals from 300 ms down to 100 ms, taking the warm-up period (1 s) in all.
        let shape = Shape::of(&limit().rate(), &OWN);
        assert_eq!((shape.threshold(), shape.max_stored()), (40, 80));
        let mut ramp = resynced(&shape, None, 0);
        let mut intervals = Vec::new();
        for _ in 0..7 {
            let next = charged(&shape, &ramp, 1, false);
            intervals.push(next.next_free_us - ramp.next_free_us);
            ramp = next;
        }
        assert_eq!(
            intervals,
            [280_000, 240_000, 200_000, 160_000, 120_000, 100_000, 100_000]
        );
        assert_eq!(intervals[..5].iter().sum::<u64>(), S);
    }

    #[test]
    fn denials_change_nothing_and_say_when_the_next_permit_is_free() {
        let got = run(
            limit(),
            &[
                (0, 1),       // cold: admitted, next free at 280 ms
                (100_000, 1), // too early: retry in 180 ms
                (100_000, 0), // cost 0 reads: admitted, nothing changes, none remaining
                (280_000, 1), // free again: admitted, next at 520 ms
            ],
        );
        assert!(got[0].0);
        assert_eq!((got[1].0, got[1].1, got[1].3), (false, 0, 180_000));
        assert_eq!((got[2].0, got[2].1, got[2].3), (true, 0, 0));
        assert_eq!((got[3].0, got[3].1), (true, 0));
        // Fully cold again 280 ms + 240 ms (the next permit) + the 2 permits' refill
        // (16 units at 8 units per 100 ms) after the last hit.
        assert_eq!(got[3].2, 240_000 + 200_000);
    }

    #[test]
    fn idleness_stores_permits_up_to_the_warm_up_period() {
        let shape = Shape::of(&limit().rate(), &OWN);
        // Warm (no stored permits); 250 ms idle stores 2.5 permits' worth (20 units).
        let warm = Ramp {
            next_free_us: 0,
            stored: 0,
            in_debt: false,
        };
        assert_eq!(resynced(&shape, Some(&warm), 250_000).stored, 20);
        assert_eq!(resynced(&shape, Some(&warm), 10 * S).stored, 80);
    }
}
