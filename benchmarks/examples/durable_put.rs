//! What a durable override put costs on the memory store (docs/admin.md, "Where overrides
//! live"): the time of `put_override` without a journal (in memory only) and with one (applied,
//! appended and synced to disk before it returns), over `N` puts each, on the file system of
//! the directory given (default: the system's temporary directory), with the median, p99 and
//! worst.
//!
//!   cargo run --profile dist --example durable_put -- 2000 /var/lib/sluice

use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_store::admin::AdminStore;
use sluice_store::memory::MemoryStore;
use sluice_store::SystemClock;

/// The latencies of `count` puts of distinct records on `store`, sorted.
async fn puts(store: &MemoryStore, count: usize) -> Vec<Duration> {
    let json = r#"{"domain":"tenants","descriptor":[{"key":"api_key","value":"t"}],"limit":{"unit":"minute","requests_per_unit":5000}}"#;
    let mut took = Vec::with_capacity(count);
    for i in 0..count {
        let started = Instant::now();
        store
            .put_override(&format!("tenants\u{1f}api_key\u{1f}t{i}"), json)
            .await
            .expect("a put");
        took.push(started.elapsed());
    }
    took.sort();
    took
}

fn show(what: &str, took: &[Duration]) {
    let at = |q: f64| took[((took.len() - 1) as f64 * q) as usize];
    println!(
        "{what:<28} median {:>9.1?}  p99 {:>9.1?}  worst {:>9.1?}",
        at(0.5),
        at(0.99),
        took[took.len() - 1]
    );
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let count: usize = args.next().and_then(|n| n.parse().ok()).unwrap_or(2000);
    let dir = args.next().map_or_else(std::env::temp_dir, Into::into);
    let scratch = tempfile::tempdir_in(&dir).expect("a directory to journal in");
    let memory = MemoryStore::new(1000, Arc::new(SystemClock));
    show("in memory only", &puts(&memory, count).await);
    let (journalled, _) = MemoryStore::new(1000, Arc::new(SystemClock))
        .with_journal(&scratch.path().join("snapshot.journal"))
        .expect("a journal");
    show(
        &format!("journalled in {}", dir.display()),
        &puts(&journalled, count).await,
    );
}
