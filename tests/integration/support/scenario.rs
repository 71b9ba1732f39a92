//! What the algorithm properties and the store contract share: limits of a few requests per
//! few seconds, and random sequences of (time step, cost) dense enough to reach them.

use proptest::prelude::*;
use sluice_core::limit::{Algorithm, Counting, Limit, Unit};

/// A limit of `requests` per `multiplier` seconds counted by `algorithm`, with `burst` where
/// the algorithm takes one.
pub fn limit(algorithm: Algorithm, requests: u32, multiplier: u32, burst: Option<u32>) -> Limit {
    Limit {
        counting: Counting::of(algorithm).with_burst(burst),
        requests_per_unit: requests,
        unit: Unit::Second,
        unit_multiplier: multiplier,
        debt: false,
        modifiers: sluice_core::modifier::Modifiers::default(),
    }
}

/// (requests, multiplier, burst, steps): up to `max_steps` steps of at most half a period,
/// some 0 (simultaneous hits), each with a cost of 0 to 3.
pub fn scenario(max_steps: usize) -> impl Strategy<Value = (u32, u32, u32, Vec<(u64, u64)>)> {
    (1u32..=8, 1u32..=3, 1u32..=8).prop_flat_map(move |(requests, multiplier, burst)| {
        let period = u64::from(multiplier) * 1_000_000;
        let steps = prop::collection::vec(
            (prop_oneof![Just(0), 0..period / 2], 0u64..=3),
            1..max_steps,
        );
        (Just(requests), Just(multiplier), Just(burst), steps)
    })
}
