//! Micro-benchmarks of the request path's parts: config matching (10,000 wildcard values
//! included), each algorithm's pure function, the memory store (alone and contended, a request
//! of 8 hits together and alone, and its snapshot of a million keys), and key building.
//!   cargo bench --bench hot_path   (one part: `-- snapshot`)

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use sluice_config::{load, Config, LoadOptions};
use sluice_core::algorithm::fixed_window::FixedWindowParameters;
use sluice_core::calendar::{self, Calendar, CalendarUnit};
use sluice_core::engine::Charging;
use sluice_core::identity::descriptor_key;
use sluice_core::limit::{Algorithm, Counting, Hit, Limit, Role, Unit};
use sluice_store::memory::MemoryStore;
use sluice_store::{Store, SystemClock};

/// A config with 200 top-level keys, 50 wildcard values on one key, and a 4-level tree.
fn config() -> Config {
    let mut yaml = String::from("domain: bench\ndescriptors:\n");
    for i in 0..200 {
        yaml.push_str(&format!(
            "  - key: k{i}\n    rate_limit: {{unit: second, requests_per_unit: 10}}\n"
        ));
    }
    for i in 0..50 {
        yaml.push_str(&format!("  - key: path\n    value: /api/v{i}/*\n    rate_limit: {{unit: second, requests_per_unit: 10}}\n"));
    }
    yaml.push_str("  - key: a\n    value: x\n    descriptors:\n      - key: b\n        descriptors:\n          - key: c\n            value: y*\n            descriptors:\n              - key: d\n                rate_limit: {unit: minute, requests_per_unit: 5}\n");
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("bench.yaml");
    std::fs::write(&path, yaml).expect("write");
    load(&[path], LoadOptions::default()).expect("bench config loads")
}

/// 10,000 wildcard values at one key, of three shapes in turn: `w<i>-*`, `*-w<i>`, `*.w<i>.*`.
fn tenant_config() -> Config {
    let mut yaml = String::from("domain: tenants\ndescriptors:\n");
    for i in 0..10_000 {
        let value = match i % 3 {
            0 => format!("w{i}-*"),
            1 => format!("*-w{i}"),
            _ => format!("*.w{i}.*"),
        };
        yaml.push_str(&format!(
            "  - key: tenant\n    value: \"{value}\"\n    rate_limit: {{unit: second, requests_per_unit: 10}}\n"
        ));
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("tenants.yaml");
    std::fs::write(&path, yaml).expect("write");
    load(&[path], LoadOptions::default()).expect("tenant config loads")
}

fn matching(c: &mut Criterion) {
    let config = config();
    let domain = config.domain("bench").expect("domain");
    c.bench_function("match/exact key", |b| {
        b.iter(|| {
            domain
                .resolve(black_box([("k150", "v")]).into_iter())
                .is_some()
        })
    });
    c.bench_function("match/last of 50 wildcards", |b| {
        b.iter(|| {
            domain
                .resolve(black_box([("path", "/api/v49/users")]).into_iter())
                .is_some()
        })
    });
    let tenants = tenant_config();
    let tenants = tenants.domain("tenants").expect("domain");
    for (name, value) in [
        ("match/last prefix of 10,000 wildcards", "w9999-x"),
        ("match/last suffix of 10,000 wildcards", "x-w9997"),
        ("match/last infix of 10,000 wildcards", "a.w9998.b"),
        ("match/none of 10,000 wildcards", "nomatch-value"),
    ] {
        c.bench_function(name, |b| {
            b.iter(|| {
                tenants
                    .resolve(black_box([("tenant", value)]).into_iter())
                    .is_some()
            })
        });
    }
    c.bench_function("match/4 levels", |b| {
        b.iter(|| {
            domain
                .resolve(
                    black_box([("a", "x"), ("b", "any"), ("c", "yes"), ("d", "z")]).into_iter(),
                )
                .is_some()
        })
    });
}

fn algorithms(c: &mut Criterion) {
    for &algorithm in Algorithm::ALL {
        let counting = Counting::of(algorithm).with_burst(Some(100));
        let limit = Limit::new(counting, 100, Unit::Second);
        let state = limit.decide(None, 1, 1_000_000).new_state.map(|(s, _)| s);
        let mut now = 1_000_000u64;
        c.bench_function(&format!("algorithm/{algorithm}"), |b| {
            b.iter(|| {
                now += 1_000;
                limit.decide(black_box(state.as_ref()), 1, now).decision
            })
        });
    }
    // A fixed window over a billing month in a zone with clock changes: the period is drawn
    // from the time-zone database at each decision.
    let calendar = Calendar::new(CalendarUnit::Month, "Europe/Berlin", Some(15), None)
        .expect("a valid calendar");
    let own = FixedWindowParameters {
        from_first_hit: false,
        calendar: Some(calendar::intern(calendar)),
    };
    let limit = Limit::new(Counting::FixedWindow(own), 100, Unit::Month);
    let start = 1_773_529_200_000_000u64;
    let state = limit.decide(None, 1, start).new_state.map(|(s, _)| s);
    let mut now = start;
    c.bench_function("algorithm/fixed_window over a calendar month", |b| {
        b.iter(|| {
            now += 1_000;
            limit.decide(black_box(state.as_ref()), 1, now).decision
        })
    });
}

fn keys(c: &mut Criterion) {
    c.bench_function("key/descriptor_key 2 entries", |b| {
        b.iter(|| {
            descriptor_key(
                black_box("edge_proxy"),
                [("remote_address", "192.0.2.7"), ("path", "/api/v1/users")],
            )
        })
    });
}

fn memory_store(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let store = Arc::new(MemoryStore::new(1_000_000, Arc::new(SystemClock)));
    let limit = Limit::fixed_window(u32::MAX, Unit::Hour);
    let hits: Vec<Hit> = (0..10_000)
        .map(|i| Hit {
            key: format!("bench_k_{i}_"),
            limit: limit.clone(),
            cost: 1,
            role: Role::Enforced,
            joins_previous: false,
            lease: None,
        })
        .collect();
    let mut next = 0;
    c.bench_function("memory store/charge, 10k keys", |b| {
        b.iter(|| {
            next = (next + 1) % hits.len();
            runtime
                .block_on(store.charge(std::slice::from_ref(&hits[next]), Charging::AllOrNothing))
                .expect("memory store")
        })
    });
    c.bench_function("memory store/charge, 4 threads on 16 hot keys", |b| {
        b.iter_custom(|iterations| contended(&store, &hits[..16], iterations))
    });
    // A request of 8 descriptors decided together (all-or-nothing), beside the same 8 hits
    // charged one call each: what deciding them together costs (BENCHMARKS.md, "Scale").
    let mut next = 0;
    c.bench_function("memory store/8 hits, all-or-nothing", |b| {
        b.iter(|| {
            next = (next + 8) % (hits.len() - 8);
            runtime
                .block_on(store.charge(&hits[next..next + 8], Charging::AllOrNothing))
                .expect("memory store")
        })
    });
    c.bench_function("memory store/8 hits, each alone", |b| {
        b.iter(|| {
            next = (next + 8) % (hits.len() - 8);
            for hit in &hits[next..next + 8] {
                black_box(
                    runtime
                        .block_on(store.charge(std::slice::from_ref(hit), Charging::AllOrNothing))
                        .expect("memory store"),
                );
            }
        })
    });
}

/// Time for `iterations` checks spread over 4 threads hitting `hits` at once.
fn contended(store: &Arc<MemoryStore>, hits: &[Hit], iterations: u64) -> Duration {
    let per_thread = iterations.div_ceil(4);
    let started = Instant::now();
    std::thread::scope(|scope| {
        for t in 0..4 {
            let store = store.clone();
            scope.spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .build()
                    .expect("runtime");
                for i in 0..per_thread {
                    let hit = &hits[(i as usize + t) % hits.len()];
                    black_box(
                        runtime
                            .block_on(
                                store.charge(std::slice::from_ref(hit), Charging::AllOrNothing),
                            )
                            .expect("memory store"),
                    );
                }
            });
        }
    });
    started.elapsed()
}

/// A memory store holding 1,000,000 keys: 700,000 hourly fixed windows, 200,000 token buckets
/// and 100,000 sliding logs of 3 entries.
fn million_keys() -> MemoryStore {
    let store = MemoryStore::new(2_000_000, Arc::new(SystemClock)).with_max_bytes(1 << 30);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let kinds = [
        (Algorithm::FixedWindow, 700_000, 1),
        (Algorithm::TokenBucket, 200_000, 1),
        (Algorithm::SlidingWindowLog, 100_000, 3),
    ];
    for (algorithm, keys, cost) in kinds {
        let limit = Limit::new(Counting::of(algorithm), 10, Unit::Hour);
        for i in 0..keys {
            let hit = Hit {
                key: format!("bench_{algorithm}_{i}_"),
                limit: limit.clone(),
                cost,
                role: Role::Enforced,
                joins_previous: false,
                lease: None,
            };
            runtime
                .block_on(store.charge(&[hit], Charging::AllOrNothing))
                .expect("memory store");
        }
    }
    store
}

/// The memory store's snapshot of 1,000,000 keys: written (encoded, synced, renamed) and read
/// back into an empty store.
fn snapshot(c: &mut Criterion) {
    let store = million_keys();
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("bench.snapshot");
    let mut group = c.benchmark_group("memory store snapshot");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(20));
    group.bench_function("write 1M keys", |b| {
        b.iter(|| store.save_snapshot(&path).expect("written"))
    });
    let bytes = std::fs::metadata(&path).map_or(0, |m| m.len());
    println!("snapshot of {} keys: {bytes} bytes", store.key_count());
    group.bench_function("read 1M keys", |b| {
        b.iter_with_large_drop(|| {
            let mut empty =
                MemoryStore::new(2_000_000, Arc::new(SystemClock)).with_max_bytes(1 << 30);
            let loaded = empty.load_snapshot(&path).expect("read");
            assert_eq!(loaded.keys, 1_000_000);
            empty
        })
    });
    group.finish();
}

criterion_group!(benches, matching, algorithms, keys, memory_store, snapshot);
criterion_main!(benches);
