//! Leaky bucket as a meter, by GCRA: the bucket drains at L per W, one request every
//! T = W / L; a hit of cost h fits when, added to what is in the bucket, it stays within
//! `burst` (default 1: strict pacing). The state is one time: the theoretical arrival time
//! (TAT) at which the bucket is empty again.
//!
//! Times are kept in units of 1/L microsecond so that T = W is an integer: exact in 128-bit
//! integers for every u32 limit and burst, u64 cost and period.

use crate::algorithm::params::Burst;
use crate::algorithm::persist::{Input, Persist};
use crate::algorithm::{remaining, remaining_u64, wait_us};
use crate::algorithm::{Ask, Decision, LimitAlgorithm, Rate};

/// When the bucket is empty again, in units of 1/L µs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tat {
    pub scaled_empty_at: u128,
}

impl Persist for Tat {
    fn put(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.scaled_empty_at.to_le_bytes());
    }

    fn take(input: &mut Input<'_>) -> Option<Self> {
        Some(Tat {
            scaled_empty_at: input.u128()?,
        })
    }
}

/// The leaky bucket in the registry: `burst` defaults to 1, strict pacing.
pub struct LeakyBucket;

impl LimitAlgorithm for LeakyBucket {
    type State = Tat;
    type Params = Burst;

    fn default_burst(_requests_per_unit: u32) -> Option<u32> {
        Some(1)
    }

    /// Decides one hit; returns the decision and the TAT to store when it changed.
    #[inline]
    fn decide(stored: Option<&Tat>, ask: &Ask<'_, Self::Params>) -> (Decision, Option<Tat>) {
        let (limit, cost, now_us) = (ask.rate, ask.cost, ask.now_us);
        let stored = stored.copied();
        let rate = u128::from(limit.requests_per_unit);
        let interval = u128::from(limit.period_us()); // T, scaled
        let tolerance = u128::from(limit.capacity()) * interval; // burst x T
        let now = u128::from(now_us) * rate;
        let empty_at = stored.map_or(now, |tat| tat.scaled_empty_at).max(now);
        let after_hit = empty_at + u128::from(cost) * interval;
        let admitted = after_hit - now <= tolerance;
        let level = if admitted { after_hit } else { empty_at } - now;
        let decision = Decision {
            admitted,
            // Requests of cost 1 that still fit: floor((burst x T - level) / T).
            remaining: remaining(tolerance.saturating_sub(level) / interval),
            reset_after_us: wait_us(level, rate, limit.period_us()),
            retry_after_us: if admitted {
                0
            } else if u128::from(cost) * interval > tolerance {
                limit.period_us()
            } else {
                wait_us(after_hit - tolerance - now, rate, limit.period_us())
            },
            ..Decision::default()
        };
        let changed = (admitted && cost > 0).then_some(Tat {
            scaled_empty_at: after_hit,
        });
        (decision, changed)
    }

    /// When the state no longer matters: the bucket is empty.
    fn force(stored: Option<&Tat>, ask: &Ask<'_, Self::Params>) -> Tat {
        let (limit, cost, now_us) = (ask.rate, ask.cost, ask.now_us);
        let now = u128::from(now_us) * u128::from(limit.requests_per_unit);
        let empty_at = stored.map_or(now, |tat| tat.scaled_empty_at).max(now);
        let interval = u128::from(limit.period_us());
        Tat {
            scaled_empty_at: empty_at.saturating_add(u128::from(cost).saturating_mul(interval)),
        }
    }

    /// The bucket's level in requests, rounded up: past the capacity in debt.
    fn used(stored: Option<&Tat>, ask: &Ask<'_, Self::Params>) -> Option<u64> {
        let now = u128::from(ask.now_us) * u128::from(ask.rate.requests_per_unit);
        let empty_at = stored.map_or(now, |tat| tat.scaled_empty_at).max(now);
        let interval = u128::from(ask.rate.period_us().max(1));
        Some(remaining_u64((empty_at - now).div_ceil(interval)))
    }

    const CREDIT_REFUSAL: Option<&'static str> = None;

    /// The bucket drained by the cost (never below empty now).
    fn credit(stored: Option<&Tat>, ask: &Ask<'_, Self::Params>) -> Tat {
        let now = u128::from(ask.now_us) * u128::from(ask.rate.requests_per_unit);
        let empty_at = stored.map_or(now, |tat| tat.scaled_empty_at).max(now);
        let given = u128::from(ask.cost).saturating_mul(u128::from(ask.rate.period_us()));
        Tat {
            scaled_empty_at: empty_at.saturating_sub(given).max(now),
        }
    }

    fn expires_at_us(tat: &Tat, limit: &Rate, _own: &Self::Params) -> u64 {
        let rate = u128::from(limit.requests_per_unit.max(1));
        u64::try_from(tat.scaled_empty_at.div_ceil(rate)).unwrap_or(u64::MAX)
    }
}
