//! What tracking heavy hitters holds and costs (docs/heavy-hitters.md): the sketches' memory as
//! the number of distinct values grows from a thousand to ten million (flat), the time a
//! decision spends recording, and the lists' error against exact counts on a Zipf(1) stream
//! of a million values. Prints markdown tables for BENCHMARKS.md.
//!
//! ```sh
//! cargo run --profile dist --example heavy_hitters
//! ```

use std::time::Instant;

use sluice_core::labels::LimitLabels;
use sluice_proto::rate_limit_descriptor::Entry;
use sluice_server::hitters::zipf::Zipf;
use sluice_server::hitters::{By, HeavyHitters, HittersSettings, LimitName, Span};

fn labels() -> LimitLabels {
    LimitLabels {
        domain: "d".into(),
        key1: "tenant".into(),
        key2: None,
        from_request: false,
        stats_key: "d.tenant".into(),
        series: Default::default(),
    }
}

fn entry(index: u64) -> [Entry; 1] {
    [Entry {
        key: "tenant".into(),
        value: format!("tenant-{index:012}"),
    }]
}

/// A xorshift stream of numbers below `below`.
struct Stream(u64);

impl Stream {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn main() {
    let settings = HittersSettings::default();
    println!("| distinct values | hits | sketches' bytes | ns a record |\n|---|---|---|---|");
    for distinct in [1_000u64, 10_000, 100_000, 1_000_000, 10_000_000] {
        let hitters = HeavyHitters::new(settings);
        let tracked = hitters.tracker(&labels()).expect("tracked");
        let hits = distinct.max(2_000_000);
        // The entries are made before the clock starts: a request carries them already.
        let mut stream = Stream(0x9e37_79b9_7f4a_7c15);
        let values: Vec<[Entry; 1]> = (0..hits.min(2_000_000))
            .map(|_| entry(stream.next() % distinct))
            .collect();
        let started = Instant::now();
        let mut recorded = 0u64;
        while recorded < hits {
            for value in &values {
                hitters.record(&tracked, value, 1, recorded % 10 == 0);
                recorded += 1;
                if recorded == hits {
                    break;
                }
            }
        }
        let ns = started.elapsed().as_nanos() as f64 / hits as f64;
        println!("| {distinct} | {hits} | {} | {ns:.0} |", hitters.bytes());
    }

    // Zipf(1) over a million values, two million hits.
    const VALUES: usize = 1_000_000;
    const HITS: usize = 2_000_000;
    let hitters = HeavyHitters::new(settings);
    let tracked = hitters.tracker(&labels()).expect("tracked");
    let mut exact = vec![0u64; VALUES];
    // One second for the whole stream (one slot): the same table every run.
    const NOW: u64 = 1_800_000_000;
    for index in Zipf::new(VALUES, 0x2545_f491_4f6c_dd1d).take(HITS) {
        exact[index] += 1;
        hitters.record_at(NOW, &tracked, &entry(index as u64), 1, false);
    }
    let name = LimitName {
        domain: "d".into(),
        limit: "d.tenant".into(),
    };
    let top = hitters
        .top_at(NOW, &name, Span::Minute, By::Hits, 20)
        .expect("tracked");
    let mut ranked: Vec<usize> = (0..VALUES).collect();
    ranked.sort_by_key(|i| std::cmp::Reverse(exact[*i]));
    let distinct_seen = exact.iter().filter(|c| **c > 0).count();
    println!(
        "\nZipf(1), {HITS} hits over {VALUES} values ({distinct_seen} seen), capacity {}: bound {} (N/m = {})\n",
        settings.capacity,
        top.bound,
        HITS / settings.capacity
    );
    println!("| rank | exact value | exact count | listed value | listed count | error stated | over by |\n|---|---|---|---|---|---|---|");
    for (rank, heavy) in top.values.iter().enumerate() {
        let index: usize = heavy.value["tenant=tenant-".len()..]
            .parse()
            .expect("an index");
        let truth = ranked[rank];
        println!(
            "| {} | {} | {} | {} | {} | {} | {} |",
            rank + 1,
            truth,
            exact[truth],
            index,
            heavy.count,
            heavy.error,
            heavy.count - exact[index]
        );
    }
}
