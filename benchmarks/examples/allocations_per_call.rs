//! Heap allocations of one ShouldRateLimit decision on the memory store, counted by a global
//! allocator that wraps the system's: the service's own work (validation, matching, the
//! store, the response), without the gRPC transport. Runs 1 and 8 descriptors per request on
//! keys already seen (the steady state) and prints allocations and bytes per call.
//!
//!   cargo run --release --example allocations_per_call

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use sluice_config::{load_str, LoadOptions};
use sluice_limiter::LimiterOptions;
use sluice_proto::rate_limit_descriptor::Entry;
use sluice_proto::{RateLimitDescriptor, RateLimitRequest};
use sluice_server::metrics::Metrics;
use sluice_server::service::RateLimiter;
use sluice_store::memory::MemoryStore;
use sluice_store::SystemClock;

/// The system allocator, counting.
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(new_size as u64, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const CONFIG: &str = "domain: bench
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 1000000000}
";

fn request(descriptors: usize, round: usize) -> RateLimitRequest {
    RateLimitRequest {
        domain: "bench".into(),
        descriptors: (0..descriptors)
            .map(|i| RateLimitDescriptor {
                entries: vec![Entry {
                    key: "k".into(),
                    value: format!("v{}", (round + i) % 64),
                }],
                ..Default::default()
            })
            .collect(),
        hits_addend: 1,
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let config = load_str("bench.yaml", CONFIG, LoadOptions::default())?;
    let limiter = RateLimiter::new(
        Arc::new(ArcSwap::from_pointee(config)),
        Arc::new(MemoryStore::new(1 << 20, Arc::new(SystemClock))),
        LimiterOptions::default(),
        Arc::new(Metrics::new(0.8, 10_000)),
    );
    let runtime = tokio::runtime::Builder::new_current_thread().build()?;
    const CALLS: usize = 100_000;
    for descriptors in [1, 8] {
        let requests: Vec<RateLimitRequest> = (0..CALLS)
            .map(|round| request(descriptors, round))
            .collect();
        // Every key and metric series seen once first: the steady state is measured.
        for request in requests.iter().take(1_000) {
            runtime.block_on(limiter.decide(request))?;
        }
        let (allocations, bytes) = (
            ALLOCATIONS.load(Ordering::Relaxed),
            BYTES.load(Ordering::Relaxed),
        );
        for request in &requests {
            runtime.block_on(limiter.decide(request))?;
        }
        let per_call = |now: u64, before: u64| (now - before) as f64 / CALLS as f64;
        println!(
            "{descriptors} descriptor(s): {:.1} allocations, {:.0} bytes per decision",
            per_call(ALLOCATIONS.load(Ordering::Relaxed), allocations),
            per_call(BYTES.load(Ordering::Relaxed), bytes),
        );
    }
    Ok(())
}
