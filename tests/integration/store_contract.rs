//! The contract between the stores: the memory store and the Redis store (its Lua scripts,
//! with sluice's clock passed in) reach the same decision, every field, for the same sequence
//! of (time, cost): a table of behaviour cases and random sequences, for every algorithm.

mod admin_read;
mod check;
mod first_hit;
mod leasing;
mod tiers;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::support::redis::RedisServer;
use crate::support::scenario::{limit, scenario};
use crate::support::stores::{redis_store, START_US};
use proptest::prelude::*;
use sluice_core::algorithm::fixed_window::FixedWindowParameters;
use sluice_core::algorithm::warm_up::WarmUpParameters;
use sluice_core::algorithm::State;
use sluice_core::calendar::{self, Calendar, CalendarUnit};
use sluice_core::engine::{self, Charging};
use sluice_core::limit::{Algorithm, Counting, Decision, Hit, LeaseCall, Limit, Role, Unit};
use sluice_core::modifier::penalty::{Penalized, Policy};
use sluice_core::modifier::reserve::Reserved;
use sluice_core::modifier::ModifierSet;
use sluice_store::key::Shape;
use sluice_store::memory::MemoryStore;
use sluice_store::{ManualClock, Store};

/// A Redis for one test (stopped when the test ends), and a runtime to drive the stores.
pub(crate) struct Fixture {
    redis: RedisServer,
    runtime: tokio::runtime::Runtime,
}

impl Fixture {
    pub(crate) fn new() -> Fixture {
        Fixture {
            redis: RedisServer::start(&[]),
            runtime: tokio::runtime::Runtime::new().expect("runtime"),
        }
    }
}

/// A unique key per sequence, so sequences never share state.
fn unique_key() -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    format!("contract_k_{}_", NEXT.fetch_add(1, Ordering::SeqCst))
}

/// One hit of a request: which of the sequence's limits (by index), its cost, its role, and
/// whether it is another limit of the previous hit's descriptor.
pub(crate) type HitSpec = (usize, u64, Role, bool);

/// A request: the time step before it, and its hits.
pub(crate) type RequestSpec = (u64, Vec<HitSpec>);

/// Runs `requests` (time step, hits) on the keys of `limits` (one key each) through both
/// stores, charging as `charging` says; returns both decision lists, hit by hit.
fn both_requests(
    fixture: &Fixture,
    limits: &[Limit],
    requests: &[RequestSpec],
    charging: Charging,
) -> (Vec<Decision>, Vec<Decision>) {
    let own_keys: Vec<usize> = (0..limits.len()).collect();
    both_requests_on(fixture, limits, &own_keys, requests, charging)
}

/// `both_requests` with the key of each limit given: `key_of[i]` is the key (by index) that
/// limit `i` counts under, so several limits may count one descriptor (its limit changed by
/// a reload, or overridden by the request).
pub(crate) fn both_requests_on(
    fixture: &Fixture,
    limits: &[Limit],
    key_of: &[usize],
    requests: &[RequestSpec],
    charging: Charging,
) -> (Vec<Decision>, Vec<Decision>) {
    fixture.runtime.block_on(async {
        let ran = Ran::new(fixture, key_of).await;
        ran.requests(limits, key_of, requests, charging).await
    })
}

/// Both stores on one manual clock, and the keys a sequence counts under.
struct Ran {
    clock: Arc<ManualClock>,
    memory: MemoryStore,
    redis: sluice_store::redis::RedisStore,
    keys: Vec<String>,
}

impl Ran {
    /// Fresh keys for the limits of `key_of` (the key each limit counts under, by index).
    async fn new(fixture: &Fixture, key_of: &[usize]) -> Ran {
        let clock = Arc::new(ManualClock::at(START_US));
        let memory = MemoryStore::new(1000, clock.clone());
        let redis = redis_store(&fixture.redis.url(), String::new(), clock.clone()).await;
        let key_count = key_of.iter().max().map_or(0, |&k| k + 1);
        let keys: Vec<String> = (0..key_count).map(|_| unique_key()).collect();
        Ran {
            clock,
            memory,
            redis,
            keys,
        }
    }

    /// Runs `requests` through both stores; both decision lists, hit by hit.
    async fn requests(
        &self,
        limits: &[Limit],
        key_of: &[usize],
        requests: &[RequestSpec],
        charging: Charging,
    ) -> (Vec<Decision>, Vec<Decision>) {
        let (mut from_memory, mut from_redis) = (Vec::new(), Vec::new());
        for (request_number, (step, specs)) in requests.iter().enumerate() {
            self.clock.advance(*step);
            let hits: Vec<Hit> = specs
                .iter()
                .enumerate()
                .map(|(i, &(index, cost, role, joins))| Hit {
                    key: self.keys[key_of[index]].clone(),
                    limit: limits[index].clone(),
                    cost,
                    role,
                    joins_previous: joins && i > 0,
                    lease: lease_of(&limits[index], request_number, cost),
                })
                .collect();
            from_memory.extend(self.memory.charge(&hits, charging).await.expect("memory"));
            from_redis.extend(self.redis.charge(&hits, charging).await.expect("redis"));
        }
        (from_memory, from_redis)
    }
}

/// The lease of a hit of `cost` in request `number` on `limit`: on a concurrency limit (or a
/// reserved budget), a cost of 2 or 5 releases the lease (settles the hold) of an earlier
/// request (held, released or never taken), any other acquires (opens) under the request's
/// own token; none on a plain rate.
fn lease_of(limit: &Limit, number: usize, cost: u64) -> Option<LeaseCall> {
    if limit.algorithm() != Algorithm::Concurrency && limit.modifiers.reserve.is_none() {
        return None;
    }
    let token = number as u64 + 1;
    Some(match cost % 3 {
        2 => LeaseCall::Release(token / 2 + 1),
        _ => LeaseCall::Acquire(token),
    })
}

/// Runs `steps` (time step, cost) on one key through both stores; returns both decision lists.
pub(crate) fn both(
    fixture: &Fixture,
    limit: Limit,
    steps: &[(u64, u64)],
) -> (Vec<Decision>, Vec<Decision>) {
    let requests: Vec<RequestSpec> = steps
        .iter()
        .map(|&(step, cost)| (step, vec![(0, cost, Role::Enforced, false)]))
        .collect();
    both_requests(fixture, &[limit], &requests, Charging::AllOrNothing)
}

pub(crate) const S: u64 = 1_000_000;

/// Behaviour cases: (what, steps) run for every algorithm.
pub(crate) const CASES: &[(&str, &[(u64, u64)])] = &[
    (
        "up to the limit and over",
        &[(0, 1), (0, 1), (0, 1), (0, 1), (0, 1), (0, 1)],
    ),
    ("cost 0 reads", &[(0, 0), (0, 3), (0, 0), (10, 0)]),
    ("a cost beyond the limit", &[(0, 9), (0, 1)]),
    (
        "across a window edge",
        &[(0, 2), (876_544, 2), (1, 2), (100_000, 2)],
    ),
    (
        "refill while idle",
        &[(0, 3), (250_000, 1), (2 * S, 1), (10 * S, 3)],
    ),
    (
        "dense traffic",
        &[
            (100_000, 1),
            (100_000, 1),
            (100_000, 2),
            (50_000, 1),
            (50_000, 1),
            (700_000, 3),
            (1, 1),
        ],
    ),
];

#[test]
fn the_behaviour_table_agrees_for_every_algorithm() {
    let fixture = Fixture::new();
    for &algorithm in Algorithm::ALL {
        for (what, steps) in CASES {
            for (requests, multiplier, burst) in [(3, 1, None), (4, 2, Some(2)), (0, 1, Some(3))] {
                let limit = limit(algorithm, requests, multiplier, burst);
                let (memory, redis) = both(&fixture, limit.clone(), steps);
                assert_eq!(memory, redis, "{algorithm}, {what}, {limit}");
            }
        }
    }
}

#[test]
fn the_sliding_log_agrees_at_its_largest_limit() {
    let limit = limit(Algorithm::SlidingWindowLog, 10_000, 1, None);
    let (memory, redis) = both(
        &Fixture::new(),
        limit,
        &[(0, 6_000), (1, 4_000), (1, 1), (S, 1)],
    );
    assert_eq!(memory, redis);
}

/// Runs `test` on `cases` values of `strategy` (no regression file: the cases need Redis).
pub(crate) fn check_cases<S: Strategy>(
    cases: u32,
    strategy: &S,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
) {
    let config = ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    let mut runner = proptest::test_runner::TestRunner::new(config);
    if let Err(failure) = runner.run(strategy, test) {
        panic!("{failure}");
    }
}

#[test]
fn random_sequences_agree_for_every_algorithm() {
    let fixture = Fixture::new();
    check_cases(48, &scenario(40), |(l, m, b, steps)| {
        for &algorithm in Algorithm::ALL {
            let (memory, redis) = both(&fixture, limit(algorithm, l, m, Some(b)), &steps);
            prop_assert_eq!(memory, redis, "{}", algorithm);
        }
        Ok(())
    });
}

/// Zones with clock changes of an hour, of half an hour, and none; and a quarter-hour offset.
const CALENDAR_ZONES: &[&str] = &[
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",
    "Asia/Kathmandu",
];

#[test]
fn calendar_windows_agree_at_random_instants_and_zones() {
    let fixture = Fixture::new();
    let units = [
        (CalendarUnit::Day, Unit::Day),
        (CalendarUnit::Week, Unit::Week),
        (CalendarUnit::Month, Unit::Month),
    ];
    let hour = 3_600 * S;
    let strategy = (
        0..CALENDAR_ZONES.len(),
        0..units.len(),
        1u8..=31,
        0..400 * 24 * hour,
        prop::collection::vec((0..40 * hour, 0u64..=3), 1..25),
    );
    check_cases(32, &strategy, |(zone, unit, anchor, offset, steps)| {
        let (calendar_unit, limit_unit) = units[unit];
        let anchor = match calendar_unit {
            CalendarUnit::Day => None,
            CalendarUnit::Week => Some(anchor % 7 + 1),
            _ => Some(anchor),
        };
        let calendar = Calendar::new(calendar_unit, CALENDAR_ZONES[zone], anchor, None)
            .expect("a valid calendar");
        let own = FixedWindowParameters {
            calendar: Some(calendar::intern(calendar)),
            from_first_hit: false,
        };
        let limit = Limit::new(Counting::FixedWindow(own), 5, limit_unit);
        // Somewhere in the next 400 days (every season's clock changes), then the sequence.
        let steps: Vec<(u64, u64)> = std::iter::once((offset, 0)).chain(steps).collect();
        let (memory, redis) = both(&fixture, limit.clone(), &steps);
        prop_assert_eq!(memory, redis, "{}", limit);
        Ok(())
    });
}

#[test]
fn warm_up_agrees_at_random_warm_ups_cold_factors_and_in_debt() {
    let fixture = Fixture::new();
    let shapes = (1u64..=8, 1u32..=6, prop::bool::ANY);
    check_cases(
        48,
        &(scenario(40), shapes),
        |((l, m, _, steps), (warm, cold, debt))| {
            let own = WarmUpParameters {
                warmup_us: Some(warm * u64::from(m) * 250_000),
                cold_factor: Some(cold),
            };
            let limit = Limit {
                counting: Counting::WarmUp(own),
                debt,
                ..limit(Algorithm::WarmUp, l * 3, m, None)
            };
            let (memory, redis) = both(&fixture, limit.clone(), &steps);
            prop_assert_eq!(memory, redis, "{}", limit);
            Ok(())
        },
    );
}

/// A penalty of short periods, so that a sequence sees blocks impose, grow, end and be
/// forgotten.
pub(crate) fn penalty() -> impl Strategy<Value = Policy> {
    (
        1u32..=3,
        1u64..=30,
        1u64..=20,
        1000u32..=3000,
        0u64..=40,
        0u64..=60,
    )
        .prop_map(|(after, within, block, factor_milli, more, quiet)| Policy {
            after,
            within_us: within * 100_000,
            block_ms: block * 100,
            factor_milli,
            max_block_ms: (block + more) * 100,
            forget_us: (within + quiet) * 100_000,
        })
}

/// A reservation: holds that lapse within 0.1 to 3 s, capped at a fraction of the limit.
pub(crate) fn reserve() -> impl Strategy<Value = sluice_core::modifier::reserve::Policy> {
    (1u64..=4, 100_000u32..=1_000_000, 1u64..=30, 1u32..=3).prop_map(
        |(amount, ppm, hold, max_holds)| sluice_core::modifier::reserve::Policy {
            amount,
            max_fraction_ppm: ppm,
            max_hold_us: hold * 100_000,
            max_holds,
        },
    )
}

/// One to 29 requests of one to three hits on the limits 0 to 2, with random roles and costs
/// (some beyond every limit), some hits joining the previous one's descriptor, each after a
/// random step of the clock (often none).
pub(crate) fn requests() -> impl Strategy<Value = Vec<RequestSpec>> {
    let role = prop_oneof![
        4 => Just(Role::Enforced),
        1 => Just(Role::Shadow),
        2 => Just(Role::Quota)
    ];
    let hit = (
        0usize..3,
        prop_oneof![4 => 0u64..=3, 1 => 4u64..=12],
        role,
        any::<bool>(),
    );
    let request = (
        prop_oneof![Just(0), 0u64..1_500_000],
        prop::collection::vec(hit, 1..=3),
    );
    prop::collection::vec(request, 1..30)
}

/// Requests of one to three hits on three keys of random algorithms and limits (some taking
/// debt, half the fixed windows from their first hit, half with a penalty, some reserving: their hits open and settle holds), with random roles and costs (some beyond every limit), some
/// hits joining the previous one's descriptor (a key may appear twice in a request), charged
/// both ways.
pub(crate) fn multi_hit_scenario() -> impl Strategy<Value = (Vec<Limit>, Vec<RequestSpec>, bool)> {
    let limit_of = (
        0..Algorithm::ALL.len(),
        0u32..=5,
        1u32..=2,
        1u32..=5,
        prop::bool::weighted(0.3),
        prop::option::weighted(0.5, penalty()),
        prop::option::weighted(0.4, reserve()),
        prop::bool::weighted(0.5),
    );
    let limits = prop::collection::vec(limit_of, 3);
    (limits, requests(), any::<bool>()).prop_map(|(limits, requests, all_or_nothing)| {
        let limits = limits
            .into_iter()
            .map(|(a, l, m, b, debt, penalty, reserve, first_hit)| {
                let algorithm = Algorithm::ALL[a];
                // A concurrency limit takes no reserve (refused at load).
                let reserve = reserve.filter(|_| !algorithm.leases());
                let mut limit = Limit {
                    debt,
                    modifiers: ModifierSet {
                        penalty,
                        reserve,
                        ..ModifierSet::default()
                    }
                    .into(),
                    ..limit(algorithm, l, m, Some(b))
                };
                // Half the fixed windows start at their first hit (and so take no debt).
                if algorithm == Algorithm::FixedWindow && first_hit {
                    limit.counting = Counting::FixedWindow(FixedWindowParameters::FROM_FIRST_HIT);
                    limit.debt = false;
                }
                limit
            })
            .collect();
        (limits, requests, all_or_nothing)
    })
}

#[test]
fn random_requests_of_several_hits_agree_both_ways_of_charging() {
    let fixture = Fixture::new();
    // Blocks imposed, and hits denied by a block, over every case: the penalties were
    // exercised, not only carried.
    let (imposed, blocked) = (AtomicUsize::new(0), AtomicUsize::new(0));
    // Holds opened, and settles of each kind, over every case.
    let calls: [AtomicUsize; 4] = Default::default();
    check_cases(96, &multi_hit_scenario(), |(limits, requests, all)| {
        let charging = if all {
            Charging::AllOrNothing
        } else {
            Charging::EveryHit
        };
        let (memory, redis) = both_requests(&fixture, &limits, &requests, charging);
        for decision in &memory {
            let penalty = Penalized::of(decision);
            imposed.fetch_add(usize::from(penalty.imposed), Ordering::Relaxed);
            blocked.fetch_add(
                usize::from(penalty.until_us > 0 && !penalty.imposed),
                Ordering::Relaxed,
            );
            if let Some(reserved) = Reserved::of(decision) {
                calls[reserved.call.number() as usize - 1].fetch_add(1, Ordering::Relaxed);
            }
        }
        prop_assert_eq!(memory, redis, "{:?} {:?}", limits, charging);
        Ok(())
    });
    let (imposed, blocked) = (imposed.into_inner(), blocked.into_inner());
    assert!(
        imposed > 20 && blocked > 20,
        "{imposed} blocks imposed, {blocked} hits blocked"
    );
    // Each kind of call happened (a settle of a live hold is the rarest: 5 to 30 in 96
    // random cases, so a bound above 1 would fail some runs by chance).
    let calls = calls.map(AtomicUsize::into_inner);
    assert!(
        calls.iter().all(|&n| n > 0),
        "opened, settled, duplicate, unknown: {calls:?}"
    );
}

/// Requests of one to three hits on plain fixed windows only, of the epoch's windows and from
/// the first hit (the Redis store's plain counter call: several descriptors, a key twice,
/// vetoes of all or nothing, limits of 0), charged
/// both ways; a hit joining the previous one's descriptor sends its request to the general
/// call, so both calls are compared with the memory store.
#[test]
fn requests_of_plain_counters_agree_both_ways_of_charging() {
    let fixture = Fixture::new();
    // Half the windows start at their first hit (the counter call reads them as a hash).
    let plain = (0u32..=5, 1u32..=2, any::<bool>()).prop_map(|(l, m, first_hit)| {
        let mut plain = limit(Algorithm::FixedWindow, l, m, None);
        if first_hit {
            plain.counting = Counting::FixedWindow(FixedWindowParameters::FROM_FIRST_HIT);
        }
        plain
    });
    let scenario = (prop::collection::vec(plain, 3), requests(), any::<bool>());
    let vetoed = AtomicUsize::new(0);
    check_cases(64, &scenario, |(limits, requests, all)| {
        let charging = if all {
            Charging::AllOrNothing
        } else {
            Charging::EveryHit
        };
        let (memory, redis) = both_requests(&fixture, &limits, &requests, charging);
        // Requests where an enforced hit was denied beside an admitted one: vetoed, under
        // all or nothing.
        let mut decided = memory.iter();
        for (_, hits) in &requests {
            let mine: Vec<&Decision> = decided.by_ref().take(hits.len()).collect();
            let denied = hits
                .iter()
                .zip(&mine)
                .any(|(hit, d)| hit.2 == Role::Enforced && !d.admitted);
            let admitted = mine.iter().any(|d| d.admitted);
            vetoed.fetch_add(usize::from(all && denied && admitted), Ordering::Relaxed);
        }
        prop_assert_eq!(memory, redis, "{:?} {:?}", limits, charging);
        Ok(())
    });
    let vetoed = vetoed.into_inner();
    assert!(
        vetoed > 10,
        "{vetoed} requests vetoed by a denial beside an admission"
    );
}

#[test]
fn a_vetoed_request_leaves_every_key_as_it_was_in_both_stores() {
    let fixture = Fixture::new();
    for &algorithm in Algorithm::ALL {
        // A pacer must let the requests 10 µs apart through for the veto to matter: 500,000
        // per second is one every 2 µs (6 µs at the coldest).
        let requests_per_second = if algorithm == Algorithm::WarmUp {
            500_000
        } else {
            5
        };
        let limits = [
            limit(algorithm, requests_per_second, 1, Some(5)),
            limit(Algorithm::FixedWindow, 1, 1, None),
        ];
        // The second request is vetoed by the fixed window of 1; the third reads the first key.
        let pair = vec![(0, 1, Role::Enforced, false), (1, 1, Role::Enforced, false)];
        // The read comes 10 µs later; 1 µs for the pacer, before its third charge (had it
        // stood) would be spent.
        let read_after = if algorithm == Algorithm::WarmUp {
            1
        } else {
            10
        };
        let requests = [
            (0, pair.clone()),
            (10, pair.clone()),
            (10, pair),
            (read_after, vec![(0, 0, Role::Enforced, false)]),
        ];
        let (memory, redis) = both_requests(&fixture, &limits, &requests, Charging::AllOrNothing);
        assert_eq!(memory, redis, "{algorithm}");
        assert!(
            !memory[3].admitted && !memory[5].admitted,
            "{algorithm}: {memory:?}"
        );
        if algorithm == Algorithm::WarmUp {
            // A pacer's remaining is 0 or 1: its reset (when it is cold again) shows what
            // was taken. Read 21 µs in, the key is as the first request alone left it.
            let first = limits[0].decide(None, 1, START_US);
            let state = first.new_state.map(|(state, _)| state);
            let read = limits[0].decide(state.as_ref(), 0, START_US + 21);
            assert!(memory[2].admitted, "{algorithm}: {memory:?}");
            assert_eq!(memory[6].reset_after_us, read.decision.reset_after_us);
            let (each, _) = both_requests(&fixture, &limits, &requests, Charging::EveryHit);
            assert!(
                each[6].reset_after_us > read.decision.reset_after_us,
                "{algorithm}: the reference's way charges every time"
            );
            continue;
        }
        assert_eq!(memory[2].remaining, 4, "{algorithm}: vetoed, nothing taken");
        assert_eq!(
            memory[6].remaining, 4,
            "{algorithm}: only the first request was charged"
        );
        let (each, each_on_redis) = both_requests(&fixture, &limits, &requests, Charging::EveryHit);
        assert_eq!(each, each_on_redis, "{algorithm}");
        // The reference's way charges every time, but a lease is taken only by a request
        // that is admitted (a denied one gets no token to release it with).
        let left = if algorithm.leases() { 4 } else { 2 };
        assert_eq!(
            each[6].remaining, left,
            "{algorithm}: the reference's way charges every time, a lease only when admitted"
        );
    }
}

/// 1000 per minute taking debt, with a burst of 1000 for the buckets.
fn in_debt(algorithm: Algorithm) -> Limit {
    Limit {
        debt: true,
        unit: Unit::Minute,
        ..limit(algorithm, 1000, 1, Some(1000))
    }
}

#[test]
fn reported_costs_land_and_the_debt_blocks_until_repaid_not_a_microsecond_earlier() {
    let fixture = Fixture::new();
    let report = |cost| (0, vec![(0, cost, Role::Enforced, false)]);
    // A concurrency limit takes no debt (refused at load): a lease that does not fit is not taken.
    for &algorithm in Algorithm::ALL
        .iter()
        .filter(|&&a| a != Algorithm::Concurrency)
    {
        // Reports of 900 then 300: the second is denied but charged; a check of cost 0 is then
        // over the limit.
        let limits = [in_debt(algorithm)];
        let requests = [report(900), report(300), report(0)];
        let (memory, redis) = both_requests(&fixture, &limits, &requests, Charging::AllOrNothing);
        assert_eq!(memory, redis, "{algorithm}");
        assert!(
            memory[0].admitted && !memory[1].admitted,
            "{algorithm}: {memory:?}"
        );
        assert!(
            !memory[2].admitted,
            "{algorithm}: 1200 of 1000 used, cost 0 is over"
        );
        assert_eq!(
            memory[1].remaining, memory[0].remaining,
            "{algorithm}: a denial reports what remained before it"
        );

        // A lone report of 1200 blocks a hit of cost 1 until exactly when it said.
        let (first, _) = both_requests(&fixture, &limits, &[report(1200)], Charging::AllOrNothing);
        let wait = first[0].retry_after_us;
        assert!(!first[0].admitted && wait > 0, "{algorithm}: {first:?}");
        for (after, admitted) in [(wait - 1, false), (wait, true)] {
            let requests = [report(1200), (after, vec![(0, 1, Role::Enforced, false)])];
            let (memory, redis) =
                both_requests(&fixture, &limits, &requests, Charging::AllOrNothing);
            assert_eq!(memory, redis, "{algorithm} {after}");
            assert_eq!(
                memory[1].admitted, admitted,
                "{algorithm}: {after} µs after the report"
            );
        }
    }
}

/// What a descriptor's limit may become between two calls (a reload, an override): another
/// rate, unit, period, algorithm or measure, or debt.
fn changing_limit() -> impl Strategy<Value = Limit> {
    let unit = prop_oneof![Just(Unit::Second), Just(Unit::Minute)];
    (
        0..Algorithm::ALL.len(),
        1u32..=6,
        1u32..=2,
        unit,
        prop::bool::weighted(0.2),
    )
        .prop_map(|(a, requests, multiplier, unit, debt)| Limit {
            unit,
            debt,
            ..limit(Algorithm::ALL[a], requests, multiplier, Some(3))
        })
}

/// The decisions of `requests` (one hit each: which limit, its cost) when every state is
/// named by its descriptor and `Shape` and nothing else: the model both stores must follow.
fn by_shape(limits: &[Limit], requests: &[RequestSpec], charging: Charging) -> Vec<Decision> {
    // Each state with when it stops mattering: from then on it reads as absent, as both
    // stores read it (a fixed window's for as long as it is held).
    let mut states: Vec<(Shape, State, u64)> = Vec::new();
    let mut now = START_US;
    let mut decided = Vec::new();
    for (step, hits) in requests {
        now += step;
        let (index, cost, _, _) = hits[0];
        let limit = limits[index].clone();
        let shape = Shape::of(&limit, now);
        let at = states.iter().position(|(s, _, _)| *s == shape);
        let state = at
            .filter(|&i| states[i].2 > now || limit.key_holds_window())
            .map(|i| &states[i].1);
        let hit = Hit {
            key: String::new(),
            limit: limit.clone(),
            cost,
            role: Role::Enforced,
            joins_previous: false,
            lease: lease_of(&limit, decided.len(), cost),
        };
        let outcome = engine::decide_hit(&hit, charging, state, now);
        if let Some((state, expires_at_us)) = outcome.new_state {
            match at {
                Some(i) => states[i] = (shape, state, expires_at_us),
                None => states.push((shape, state, expires_at_us)),
            }
        }
        decided.push(Decision {
            decided_at_us: now,
            ..outcome.decision
        });
    }
    decided
}

#[test]
fn a_descriptor_whose_limit_changes_never_reads_state_of_another_shape() {
    let fixture = Fixture::new();
    let requests = prop::collection::vec(
        (
            prop_oneof![Just(0), 0u64..1_500_000],
            0usize..3,
            prop_oneof![4 => 0u64..=3, 1 => 4u64..=8],
        ),
        1..30,
    );
    let case = (
        prop::collection::vec(changing_limit(), 3),
        requests,
        any::<bool>(),
    );
    check_cases(64, &case, |(limits, requests, all)| {
        let charging = if all {
            Charging::AllOrNothing
        } else {
            Charging::EveryHit
        };
        // Three limits, one descriptor: each call is counted by one of them.
        let requests: Vec<RequestSpec> = requests
            .into_iter()
            .map(|(step, index, cost)| (step, vec![(index, cost, Role::Enforced, false)]))
            .collect();
        let (memory, redis) = both_requests_on(&fixture, &limits, &[0, 0, 0], &requests, charging);
        prop_assert_eq!(&memory, &redis, "{:?}", limits);
        prop_assert_eq!(
            memory,
            by_shape(&limits, &requests, charging),
            "{:?}",
            limits
        );
        Ok(())
    });
}

#[test]
fn an_override_of_another_unit_counts_on_its_own_window_in_both_stores() {
    let fixture = Fixture::new();
    // 5 a second, then overrides of 10 a day and 42 an hour on the same descriptor.
    let limits = [
        Limit::fixed_window(5, Unit::Second),
        Limit::fixed_window(10, Unit::Day),
        Limit::fixed_window(42, Unit::Hour),
    ];
    let one = |index| (0, vec![(index, 1, Role::Enforced, false)]);
    let requests = [one(0), one(0), one(1), one(2)];
    for charging in [Charging::AllOrNothing, Charging::EveryHit] {
        let (memory, redis) = both_requests_on(&fixture, &limits, &[0, 0, 0], &requests, charging);
        assert_eq!(memory, redis);
        let remaining: Vec<u32> = memory.iter().map(|d| d.remaining).collect();
        assert_eq!(remaining, [4, 3, 9, 41]);
        // Each window ends where the epoch's days and hours do.
        let until = |period_us: u64| period_us - START_US % period_us;
        assert_eq!(memory[2].reset_after_us, until(86_400 * S));
        assert_eq!(memory[3].reset_after_us, until(3_600 * S));
    }
}
