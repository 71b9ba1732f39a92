//! Resident memory of the memory store per active key: charges N distinct fixed-window keys
//! (descriptor keys like envoyproxy/ratelimit's, `edge_proxy_remote_address_10.1.2.3_`) and
//! reports the growth of the process's resident set, then floods it with N more under a bound
//! of N keys and reports the keys held.
//!
//!   cargo run --release --example memory_per_key -- 1000000

#[path = "resident.rs"]
mod resident;

use std::sync::Arc;

use resident::resident_bytes;

use sluice_core::engine::Charging;
use sluice_core::limit::{Hit, Limit, Role, Unit};
use sluice_store::memory::MemoryStore;
use sluice_store::{Store, SystemClock};

fn hit(i: u64) -> Hit {
    let (a, b, c) = ((i >> 16) & 255, (i >> 8) & 255, i & 255);
    Hit {
        key: format!("edge_proxy_remote_address_10.{a}.{b}.{c}_"),
        limit: Limit::fixed_window(100, Unit::Hour),
        cost: 1,
        role: Role::Enforced,
        joins_previous: false,
        lease: None,
    }
}

fn main() {
    let keys: u64 = std::env::args()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(1_000_000);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let store = Arc::new(MemoryStore::new(keys as usize, Arc::new(SystemClock)));
    let before = resident_bytes();
    for i in 0..keys {
        runtime
            .block_on(store.charge(&[hit(i)], Charging::AllOrNothing))
            .expect("memory store");
    }
    let after = resident_bytes();
    let held = store.key_count() as u64;
    println!(
        "{held} keys: resident memory grew {} bytes, {:.1} bytes per key",
        after - before,
        (after - before) as f64 / held as f64
    );
    for i in keys..2 * keys {
        // Past the bound a new key is refused (the state held still matters).
        let _ = runtime.block_on(store.charge(&[hit(i)], Charging::AllOrNothing));
    }
    println!(
        "after {} more new keys under a bound of {keys}: {} keys held ({} bytes counted), {} refused, resident {} bytes",
        keys,
        store.key_count(),
        store.bytes_held(),
        store.full_count(),
        resident_bytes()
    );
}
