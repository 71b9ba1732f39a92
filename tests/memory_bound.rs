//! `--memory-max-bytes` against resident memory: for every algorithm's state, a flood of new
//! keys, and for the sliding log a flood of entries over a few thousand keys, each run in a
//! process of its own (this test binary again, with the sluice binary's allocator) from two
//! worker threads, until the memory store refuses. The store must stop at its bound (it holds
//! at least half of it when it first refuses: its map's table doubles) and the process's
//! resident memory must grow by no more than the margin docs/memory-store.md states: the bound and a
//! fifth, plus 16 MiB for the allocator's own arenas.
//!
//! The figures in BENCHMARKS.md ("How much memory does a key take, and does the bound hold?") are this test's table, in release:
//!   SLUICE_FLOOD_BOUND_MIB=64 cargo test --release --test memory_bound -- --nocapture

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sluice_core::engine::Charging;
use sluice_core::limit::{Algorithm, Counting, Hit, Limit, Role, Unit};
use sluice_store::memory::MemoryStore;
use sluice_store::{ManualClock, Store, StoreError};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The variable that makes this binary run one flood (`<algorithm> <keys|entries>`).
const FLOOD: &str = "SLUICE_FLOOD";

/// The bound of each flood, in MiB (`SLUICE_FLOOD_BOUND_MIB`, default 64: at smaller bounds
/// the allocator's fixed part hides a proportional error).
fn bound_bytes() -> usize {
    let mib: usize = std::env::var("SLUICE_FLOOD_BOUND_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    mib << 20
}

/// What resident memory may grow by under `bound`: docs/memory-store.md's margin.
fn allowed_growth(bound: usize) -> usize {
    bound + bound / 5 + (16 << 20)
}

/// The process's resident memory, in bytes (Linux).
fn resident_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: usize = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// What one flood found.
struct Found {
    refused: bool,
    hits: usize,
    keys: usize,
    counted: usize,
    grown: usize,
}

/// Floods a store bounded at `bound` with hits of `algorithm`: every hit a new key of 10 an
/// hour, or (`entries`) hits on a few thousand keys of 1,000 an hour, whose logs lengthen.
/// Four tasks on two worker threads, as the sluice binary on two cores.
fn flood(algorithm: Algorithm, entries: bool, bound: usize) -> Found {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .expect("a runtime");
    runtime.block_on(async move {
        // Logs of 1,000 entries on one key per 8 KiB of the bound: together they need half
        // as much again as the bound (a full log is held in 12 KiB).
        let (requests, keys) = if entries {
            (1_000, (bound >> 13).max(1_000))
        } else {
            (10, usize::MAX)
        };
        let limit = Limit::new(Counting::of(algorithm), requests, Unit::Hour);
        let clock = Arc::new(ManualClock::at(1_700_000_000_000_000));
        let before = resident_bytes();
        let store =
            Arc::new(MemoryStore::new(usize::MAX >> 12, clock.clone()).with_max_bytes(bound));
        // The first refusal stops every task.
        let stop = Arc::new(AtomicBool::new(false));
        let tasks: Vec<_> = (0..4)
            .map(|task| {
                let (store, clock, stop) = (store.clone(), clock.clone(), stop.clone());
                let limit = limit.clone();
                tokio::spawn(async move {
                    let (mut hits, mut refused) = (0, false);
                    for i in (task..usize::MAX).step_by(4) {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        clock.advance(1);
                        let hit = Hit {
                            key: format!("flood_{}_", i % keys),
                            limit: limit.clone(),
                            cost: 1,
                            role: Role::Enforced,
                            joins_previous: false,
                            lease: None,
                        };
                        // As the binary's calls, the tasks take turns on the workers.
                        if i % 256 < 4 {
                            tokio::task::yield_now().await;
                        }
                        match store.charge(&[hit], Charging::AllOrNothing).await {
                            Ok(_) => hits += 1,
                            Err(StoreError::Full { .. }) => {
                                refused = true;
                                stop.store(true, Ordering::Relaxed);
                                break;
                            }
                            Err(other) => panic!("{other}"),
                        }
                    }
                    (hits, refused)
                })
            })
            .collect();
        let (mut hits, mut refused) = (0, false);
        for task in tasks {
            let (task_hits, task_refused) = task.await.expect("a flood task");
            hits += task_hits;
            refused |= task_refused;
        }
        // The allocator hands freed pages back after a delay (mimalloc: 10 ms): let it.
        tokio::time::sleep(Duration::from_millis(200)).await;
        Found {
            refused,
            hits,
            keys: store.key_count(),
            counted: store.bytes_held(),
            grown: resident_bytes().saturating_sub(before),
        }
    })
}

/// Runs the flood `spec` in a process of its own; its line of figures.
fn flood_in_a_process(spec: &str) -> String {
    let exe = std::env::current_exe().expect("this test binary");
    let output = Command::new(exe)
        .args([
            "--exact",
            "every_state_stays_within_its_bound_in_resident_memory",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(FLOOD, spec)
        .output()
        .expect("run a flood");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{spec}: {stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // The harness may print the test's name on the same line.
    stdout
        .lines()
        .find_map(|line| line.find("flood ").map(|at| line[at..].to_string()))
        .unwrap_or_else(|| panic!("{spec}: no figures in {stdout}"))
}

#[test]
fn every_state_stays_within_its_bound_in_resident_memory() {
    let bound = bound_bytes();
    if let Ok(spec) = std::env::var(FLOOD) {
        let (name, kind) = spec.split_once(' ').unwrap_or((spec.as_str(), "keys"));
        let algorithm = Algorithm::parse(name).expect("an algorithm");
        let found = flood(algorithm, kind == "entries", bound);
        println!(
            "flood {} {} {} {} {} {}",
            found.refused, found.hits, found.keys, found.counted, found.grown, bound
        );
        return;
    }
    let mut floods: Vec<String> = Algorithm::ALL.iter().map(|a| format!("{a} keys")).collect();
    floods.push("sliding_window_log entries".into());
    println!("| state | flood | bound MiB | hits | keys | counted MiB | resident growth MiB |");
    println!("|---|---|---|---|---|---|---|");
    for spec in floods {
        let line = flood_in_a_process(&spec);
        let figures: Vec<usize> = line
            .split_whitespace()
            .skip(2)
            .filter_map(|f| f.parse().ok())
            .collect();
        let [hits, keys, counted, grown, _] = figures[..] else {
            panic!("{spec}: {line}");
        };
        let mib = |bytes: usize| bytes as f64 / 1_048_576.0;
        println!(
            "| {} | {} | {} | {hits} | {keys} | {:.1} | {:.1} |",
            spec.split(' ').next().unwrap_or(""),
            spec.split(' ').nth(1).unwrap_or(""),
            bound >> 20,
            mib(counted),
            mib(grown)
        );
        assert!(
            line.starts_with("flood true "),
            "{spec}: never refused: {line}"
        );
        assert!(
            counted <= bound && counted >= bound / 2,
            "{spec}: refused holding {counted} bytes of {bound}"
        );
        assert!(
            grown <= allowed_growth(bound),
            "{spec}: resident memory grew {:.1} MiB under a bound of {} MiB",
            mib(grown),
            bound >> 20
        );
    }
}
