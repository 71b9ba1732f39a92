//! Token bucket: a bucket of `burst` tokens (default L: a full period's worth at once), refilled
//! continuously at L per W. A hit of cost h takes h tokens when there are h.
//!
//! Tokens are kept scaled by W (a token is W units) so that the refill, L units per
//! microsecond, is an integer: exact in 128-bit integers for every u32 limit and burst, u64
//! cost and period. In debt the bucket holds fewer than no tokens, and refills from there.

use crate::algorithm::params::Burst;
use crate::algorithm::persist::{Input, Persist};
use crate::algorithm::{remaining, remaining_u64, wait_us};
use crate::algorithm::{Ask, Decision, LimitAlgorithm, Rate};

/// The bucket: tokens (scaled by W) as of `updated_us`; below 0 in debt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bucket {
    pub scaled_tokens: i128,
    pub updated_us: u64,
}

impl Persist for Bucket {
    fn put(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.scaled_tokens.to_le_bytes());
        out.extend_from_slice(&self.updated_us.to_le_bytes());
    }

    fn take(input: &mut Input<'_>) -> Option<Self> {
        Some(Bucket {
            scaled_tokens: input.i128()?,
            updated_us: input.u64()?,
        })
    }
}

/// Tokens at `now_us`: a new bucket is full; time going back refills nothing.
fn refilled(stored: Option<Bucket>, full: i128, rate: i128, now_us: u64) -> i128 {
    match stored {
        None => full,
        Some(b) => {
            let elapsed = i128::from(now_us.saturating_sub(b.updated_us));
            full.min(b.scaled_tokens.saturating_add(rate.saturating_mul(elapsed)))
        }
    }
}

/// A non-negative amount of scaled tokens (0 for a negative one).
fn units(amount: i128) -> u128 {
    u128::try_from(amount).unwrap_or(0)
}

/// (full, rate, needed) of `limit` for a hit of `cost`, scaled.
fn scaled(limit: &Rate, cost: u64) -> (i128, i128, i128) {
    let period = i128::from(limit.period_us());
    let full = i128::from(limit.capacity()) * period;
    let needed = i128::from(cost).saturating_mul(period);
    (full, i128::from(limit.requests_per_unit), needed)
}

/// The token bucket in the registry: `burst` defaults to L, a full period at once.
pub struct TokenBucket;

impl LimitAlgorithm for TokenBucket {
    type State = Bucket;
    type Params = Burst;

    fn default_burst(requests_per_unit: u32) -> Option<u32> {
        Some(requests_per_unit)
    }

    /// Decides one hit; returns the decision and the bucket to store when it changed.
    #[inline]
    fn decide(stored: Option<&Bucket>, ask: &Ask<'_, Self::Params>) -> (Decision, Option<Bucket>) {
        let (limit, cost, now_us) = (ask.rate, ask.cost, ask.now_us);
        let period = limit.period_us();
        let (full, rate, needed) = scaled(limit, cost);
        let tokens = refilled(stored.copied(), full, rate, now_us);
        let admitted = needed <= tokens;
        let after = if admitted { tokens - needed } else { tokens };
        let wait = |scaled: i128| wait_us(units(scaled), units(rate), period);
        let decision = Decision {
            admitted,
            remaining: remaining(units(after) / u128::from(period)),
            reset_after_us: wait(full - after),
            retry_after_us: if admitted {
                0
            } else if needed > full {
                period
            } else {
                wait(needed - tokens)
            },
            ..Decision::default()
        };
        let changed = (admitted && cost > 0).then_some(Bucket {
            scaled_tokens: after,
            updated_us: now_us,
        });
        (decision, changed)
    }

    fn force(stored: Option<&Bucket>, ask: &Ask<'_, Self::Params>) -> Bucket {
        let (limit, cost, now_us) = (ask.rate, ask.cost, ask.now_us);
        let (full, rate, needed) = scaled(limit, cost);
        let tokens = refilled(stored.copied(), full, rate, now_us);
        Bucket {
            scaled_tokens: tokens.saturating_sub(needed),
            updated_us: now_us,
        }
    }

    /// What the bucket lacks of full, in requests rounded up: past the capacity in debt.
    fn used(stored: Option<&Bucket>, ask: &Ask<'_, Self::Params>) -> Option<u64> {
        let (full, rate, _) = scaled(ask.rate, 0);
        let tokens = refilled(stored.copied(), full, rate, ask.now_us);
        let lacking = units(full.saturating_sub(tokens));
        Some(remaining_u64(
            lacking.div_ceil(u128::from(ask.rate.period_us().max(1))),
        ))
    }

    const CREDIT_REFUSAL: Option<&'static str> = None;

    /// The bucket as of now, up by the cost's tokens (never past full).
    fn credit(stored: Option<&Bucket>, ask: &Ask<'_, Self::Params>) -> Bucket {
        let (full, rate, given) = scaled(ask.rate, ask.cost);
        let tokens = refilled(stored.copied(), full, rate, ask.now_us);
        Bucket {
            scaled_tokens: full.min(tokens.saturating_add(given)),
            updated_us: ask.now_us,
        }
    }

    /// When the state no longer matters: the bucket is full again.
    fn expires_at_us(bucket: &Bucket, limit: &Rate, _own: &Self::Params) -> u64 {
        let (full, rate, _) = scaled(limit, 0);
        let missing = units(full.saturating_sub(bucket.scaled_tokens));
        bucket
            .updated_us
            .saturating_add(wait_us(missing, units(rate), limit.period_us()))
    }
}
