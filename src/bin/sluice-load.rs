//! `sluice-load`: drives ShouldRateLimit over C connections with M calls in flight on each, for
//! a duration or a number of calls, and reports calls/s, codes and latency percentiles.
//!
//!   sluice-load --target 127.0.0.1:8081 --connections 4 --in-flight 32 --duration 10s \
//!               --domain demo --key algorithm --keys 10000 --distribution zipf
//!
//! With `--rate`, callers send on a schedule instead of back to back, so latency can be read
//! at a given throughput (e.g. half of the peak a closed-loop run reached).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use hdrhistogram::Histogram;
use sluice_proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use sluice_proto::rate_limit_descriptor::Entry;
use sluice_proto::rate_limit_response::Code;
use sluice_proto::{RateLimitDescriptor, RateLimitRequest};
use tonic::transport::{Channel, Endpoint};

#[derive(Parser)]
#[command(name = "sluice-load", about = "Load generator for ShouldRateLimit")]
struct Args {
    /// host:port of the gRPC server.
    #[arg(long, default_value = "127.0.0.1:8081")]
    target: String,
    /// Connections (HTTP/2), each with its own task group.
    #[arg(long, default_value_t = 4)]
    connections: usize,
    /// Calls in flight on each connection.
    #[arg(long, default_value_t = 16)]
    in_flight: usize,
    /// How long to run (e.g. 10s); ignored with --calls.
    #[arg(long, default_value = "10s", value_parser = sluice_core::duration::parse)]
    duration: Duration,
    /// Stop after this many calls instead of a duration.
    #[arg(long)]
    calls: Option<u64>,
    /// Send at this many calls/s in all (each caller on a fixed schedule, at most one call in
    /// flight each), instead of as fast as answers come: latency at a chosen share of peak.
    #[arg(long)]
    rate: Option<f64>,
    /// Domain of every request.
    #[arg(long, default_value = "demo")]
    domain: String,
    /// Entry key of the descriptors.
    #[arg(long, default_value = "algorithm")]
    key: String,
    /// Distinct values of the key (1: one hot key). Values are `v0`..`vN-1`, or --value.
    #[arg(long, default_value_t = 1)]
    keys: u64,
    /// The value, when --keys is 1.
    #[arg(long, default_value = "fixed_window")]
    value: String,
    /// How values are drawn.
    #[arg(long, value_enum, default_value_t = Distribution::Uniform)]
    distribution: Distribution,
    /// Descriptors per request.
    #[arg(long, default_value_t = 1)]
    descriptors: usize,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Distribution {
    Uniform,
    /// Zipf with exponent 1: a few values get most calls.
    Zipf,
    /// Every value in turn (`v0`, `v1`, ... across all callers): N calls create N keys, which
    /// fills a store before a measurement (benchmarks/bench --scale).
    Sequential,
}

/// Counts shared by the workers.
#[derive(Default)]
struct Counts {
    ok: AtomicU64,
    over: AtomicU64,
    errors: AtomicU64,
    started: AtomicU64,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Arc::new(Args::parse());
    let sampler = Arc::new(Sampler::new(args.keys, args.distribution));
    let counts = Arc::new(Counts::default());
    let deadline = Instant::now() + args.duration;
    let started = Instant::now();
    let callers = args.connections * args.in_flight;
    // Each caller's period at --rate; callers start spread over one period.
    let period = args
        .rate
        .filter(|rate| *rate > 0.0)
        .map(|rate| Duration::from_secs_f64(callers as f64 / rate));
    let mut workers = Vec::new();
    for connection in 0..args.connections {
        let channel = Endpoint::from_shared(format!("http://{}", args.target))?
            .connect()
            .await?;
        for worker in 0..args.in_flight {
            let index = connection * args.in_flight + worker;
            let seed = index as u64 + 1;
            let (args, sampler, counts) = (args.clone(), sampler.clone(), counts.clone());
            let client = RateLimitServiceClient::new(channel.clone());
            let schedule = period.map(|period| Schedule {
                next: started + period.mul_f64(index as f64 / callers as f64),
                period,
            });
            workers.push(tokio::spawn(work(
                client, args, sampler, counts, deadline, seed, schedule,
            )));
        }
    }
    let mut latencies = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    for worker in workers {
        latencies.add(worker.await?)?;
    }
    report(&args, &counts, &latencies, started.elapsed());
    Ok(())
}

/// When a caller at a fixed rate sends its next call.
struct Schedule {
    next: Instant,
    period: Duration,
}

/// One caller: sends a call (on its schedule, if any), waits for it, records its latency in
/// µs, until done.
async fn work(
    mut client: RateLimitServiceClient<Channel>,
    args: Arc<Args>,
    sampler: Arc<Sampler>,
    counts: Arc<Counts>,
    deadline: Instant,
    seed: u64,
    mut schedule: Option<Schedule>,
) -> Histogram<u64> {
    let mut latencies = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("valid bounds");
    let mut rng = XorShift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    loop {
        let done = match args.calls {
            Some(total) => counts.started.fetch_add(1, Ordering::Relaxed) >= total,
            None => Instant::now() >= deadline,
        };
        if done {
            return latencies;
        }
        if let Some(schedule) = &mut schedule {
            tokio::time::sleep_until(schedule.next.into()).await;
            schedule.next += schedule.period;
        }
        let request = request(&args, &sampler, &mut rng);
        let sent = Instant::now();
        let result = client.should_rate_limit(request).await;
        let _ = latencies.record(sent.elapsed().as_micros().max(1) as u64);
        let counter = match result {
            Ok(response) if response.get_ref().overall_code == Code::OverLimit as i32 => {
                &counts.over
            }
            Ok(_) => &counts.ok,
            Err(_) => &counts.errors,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

fn request(args: &Args, sampler: &Sampler, rng: &mut XorShift) -> RateLimitRequest {
    let descriptors = (0..args.descriptors)
        .map(|_| {
            let value = if args.keys <= 1 {
                args.value.clone()
            } else {
                format!("v{}", sampler.sample(rng))
            };
            RateLimitDescriptor {
                entries: vec![Entry {
                    key: args.key.clone(),
                    value,
                }],
                ..Default::default()
            }
        })
        .collect();
    RateLimitRequest {
        domain: args.domain.clone(),
        descriptors,
        hits_addend: 0,
    }
}

fn report(args: &Args, counts: &Counts, latencies: &Histogram<u64>, elapsed: Duration) {
    let (ok, over, errors) = (
        counts.ok.load(Ordering::Relaxed),
        counts.over.load(Ordering::Relaxed),
        counts.errors.load(Ordering::Relaxed),
    );
    let calls = ok + over + errors;
    let rate = calls as f64 / elapsed.as_secs_f64();
    let us = |q: f64| latencies.value_at_quantile(q);
    if args.json {
        println!(
            "{{\"calls\":{calls},\"seconds\":{:.3},\"calls_per_second\":{rate:.0},\"ok\":{ok},\"over_limit\":{over},\"errors\":{errors},\"p50_us\":{},\"p90_us\":{},\"p99_us\":{},\"p999_us\":{},\"max_us\":{},\"connections\":{},\"in_flight\":{}}}",
            elapsed.as_secs_f64(), us(0.5), us(0.9), us(0.99), us(0.999), latencies.max(), args.connections, args.in_flight
        );
    } else {
        println!(
            "{calls} calls in {:.2} s: {rate:.0} calls/s ({} connections x {} in flight)",
            elapsed.as_secs_f64(),
            args.connections,
            args.in_flight
        );
        println!("OK {ok}, OVER_LIMIT {over}, errors {errors}");
        println!(
            "latency µs: p50 {} p90 {} p99 {} p99.9 {} max {}",
            us(0.5),
            us(0.9),
            us(0.99),
            us(0.999),
            latencies.max()
        );
    }
}

/// Draws key indexes uniformly, by Zipf (exponent 1) through a precomputed CDF, or in turn.
struct Sampler {
    keys: u64,
    zipf_cdf: Option<Vec<f64>>,
    /// The next index, when drawn in turn.
    next: Option<AtomicU64>,
}

impl Sampler {
    fn new(keys: u64, distribution: Distribution) -> Sampler {
        let zipf_cdf = (distribution == Distribution::Zipf && keys > 1).then(|| {
            let weights: Vec<f64> = (1..=keys).map(|rank| 1.0 / rank as f64).collect();
            let total: f64 = weights.iter().sum();
            let mut running = 0.0;
            weights
                .iter()
                .map(|w| {
                    running += w / total;
                    running
                })
                .collect()
        });
        Sampler {
            keys: keys.max(1),
            zipf_cdf,
            next: (distribution == Distribution::Sequential).then(|| AtomicU64::new(0)),
        }
    }

    fn sample(&self, rng: &mut XorShift) -> u64 {
        if let Some(next) = &self.next {
            return next.fetch_add(1, Ordering::Relaxed) % self.keys;
        }
        let unit = (rng.next() >> 11) as f64 / (1u64 << 53) as f64;
        match &self.zipf_cdf {
            Some(cdf) => cdf.partition_point(|&c| c < unit) as u64,
            None => (unit * self.keys as f64) as u64,
        }
    }
}

/// A small fast PRNG (xorshift64): load generation needs speed, not quality.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// In turn, every value is drawn once before any is drawn again: N calls make N keys.
    #[test]
    fn a_sequential_draw_takes_every_value_in_turn() {
        let sampler = Sampler::new(5, Distribution::Sequential);
        let mut rng = XorShift(1);
        let drawn: Vec<u64> = (0..7).map(|_| sampler.sample(&mut rng)).collect();
        assert_eq!(drawn, [0, 1, 2, 3, 4, 0, 1]);
    }
}
