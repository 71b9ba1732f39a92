//! Tiers in the contract: hits of three tiers of one limit on one key (a ceiling of 1, 0.6
//! and 0.3) decide alike on both stores, every field, for every algorithm, with debt,
//! penalties and reservations, both ways of charging.

use std::sync::atomic::{AtomicUsize, Ordering};

use proptest::prelude::*;
use sluice_core::engine::Charging;
use sluice_core::limit::{Algorithm, Limit};
use sluice_core::modifier::{ModifierPolicy, ModifierSet};

use super::{both_requests_on, check_cases, penalty, requests, reserve, Fixture, RequestSpec};
use crate::support::scenario::limit;

/// The tiers, by hit index: 0 may fill the whole limit, 1 six tenths, 2 three tenths.
const TIERS: [&str; 3] = ["top", "mid", "low"];

/// `base` in each tier, one limit a tier.
fn in_each_tier(base: &Limit) -> Vec<Limit> {
    let yaml = "{from: p, ceilings: {top: 1, mid: 0.6, low: 0.3}, otherwise: low}";
    let value: serde_yaml::Value = serde_yaml::from_str(yaml).expect("YAML");
    TIERS
        .iter()
        .map(|tier| {
            let mut policy = sluice_core::modifier::tiers::Policy::parse(&value, 0).expect("tiers");
            policy.take_entry(Some(tier));
            let mut limit = base.clone();
            limit.modifiers.tiers = Some(policy);
            limit
        })
        .collect()
}

#[test]
fn hits_of_three_tiers_on_one_key_agree_for_every_algorithm() {
    let fixture = Fixture::new();
    let base = (
        0..Algorithm::ALL.len(),
        1u32..=8,
        1u32..=2,
        1u32..=5,
        prop::bool::weighted(0.3),
        prop::option::weighted(0.3, penalty()),
        prop::option::weighted(0.3, reserve()),
    );
    let scenario = (base, requests(), any::<bool>());
    let (low_denied, top_admitted) = (AtomicUsize::new(0), AtomicUsize::new(0));
    check_cases(
        64,
        &scenario,
        |((a, l, m, b, debt, penalty, reserve), requests, all)| {
            let algorithm = Algorithm::ALL[a];
            let base = Limit {
                debt,
                modifiers: ModifierSet {
                    penalty,
                    reserve: reserve.filter(|_| !algorithm.leases()),
                    ..ModifierSet::default()
                }
                .into(),
                ..limit(algorithm, l, m, Some(b))
            };
            let limits = in_each_tier(&base);
            let requests: Vec<RequestSpec> = requests;
            let charging = if all {
                Charging::AllOrNothing
            } else {
                Charging::EveryHit
            };
            let (memory, redis) =
                both_requests_on(&fixture, &limits, &[0, 0, 0], &requests, charging);
            let tiers = requests
                .iter()
                .flat_map(|(_, hits)| hits.iter().map(|h| h.0));
            for (tier, decision) in tiers.zip(&memory) {
                if tier == 2 && !decision.admitted {
                    low_denied.fetch_add(1, Ordering::Relaxed);
                }
                if tier == 0 && decision.admitted {
                    top_admitted.fetch_add(1, Ordering::Relaxed);
                }
            }
            prop_assert_eq!(memory, redis, "{} {:?}", base, charging);
            Ok(())
        },
    );
    let (low_denied, top_admitted) = (low_denied.into_inner(), top_admitted.into_inner());
    assert!(
        low_denied > 50 && top_admitted > 50,
        "{low_denied} low denied, {top_admitted} top admitted"
    );
}
