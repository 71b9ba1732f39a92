//! The differential run (`scripts/differential`): envoyproxy/ratelimit and sluice side by
//! side on generated traffic. For each mode (a set of the reference's settings, given to both
//! servers alike) and each seed, it generates a config and a request sequence, starts both
//! servers on their own `redis-server`, sends every request to the reference and then to
//! sluice within the same second, and compares the answers field by field and the Redis keys
//! each server wrote. A difference is either explained by a row of the documented table of
//! differences (`explain.rs`), follows from an earlier difference on the same counter, or is
//! unexplained: then it is shrunk to a short reproducer and the run fails.
//!
//!   differential --reference PATH [--sluice PATH] [--seeds 20] [--first-seed 1]
//!                [--requests 300] [--modes default,stop,...] [--out DIR]

mod compare;
mod error;
mod explain;
mod generate;
mod lookup;
mod process;
mod servers;
mod shrink;
mod wire;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Parser;

use crate::compare::Difference;
use crate::explain::{Explained, Ledger};
use crate::generate::{Config, Request, Rng};
use crate::servers::{Launch, Redis, Server, SluiceStore};

pub use error::Error;

#[derive(Parser, Debug)]
#[command(about = "Runs envoyproxy/ratelimit and sluice side by side on generated traffic")]
struct Args {
    /// The reference server's binary (built from its own source, outside this repository).
    #[arg(long, env = "SLUICE_REFERENCE_BIN")]
    reference: PathBuf,
    /// The sluice binary.
    #[arg(long, default_value = "target/release/sluice")]
    sluice: PathBuf,
    /// How many seeds each mode runs.
    #[arg(long, default_value_t = 20)]
    seeds: u64,
    /// The first seed: a run takes seeds first-seed, first-seed + 1, ...
    #[arg(long, default_value_t = 1)]
    first_seed: u64,
    /// Requests a seed sends.
    #[arg(long, default_value_t = 300)]
    requests: usize,
    /// The modes to run (default: all).
    #[arg(long, value_delimiter = ',')]
    modes: Vec<String>,
    /// Where to keep each seed's config and the reproducers (default: a temporary folder).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Print every difference, explained or not.
    #[arg(long)]
    verbose: bool,
}

/// A set of settings both servers run with.
pub struct Mode {
    pub name: &'static str,
    pub env: &'static [(&'static str, &'static str)],
    pub store: SluiceStore,
    /// Each domain spread over two files (`MERGE_DOMAIN_CONFIG`).
    pub split_domains: bool,
}

const EVERY_HIT: (&str, &str) = ("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "false");

/// The reference's modes, as issue 39 lists them.
pub const MODES: &[Mode] = &[
    Mode {
        name: "default",
        env: &[EVERY_HIT],
        store: SluiceStore::Redis,
        split_domains: false,
    },
    Mode {
        name: "stop-over-limit",
        env: &[("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true")],
        store: SluiceStore::Redis,
        split_domains: false,
    },
    Mode {
        name: "local-cache",
        env: &[EVERY_HIT, ("LOCAL_CACHE_SIZE_IN_BYTES", "1048576")],
        store: SluiceStore::Redis,
        split_domains: false,
    },
    Mode {
        name: "quota-metadata-prefix",
        env: &[
            EVERY_HIT,
            ("QUOTA_MODE", "true"),
            ("RESPONSE_DYNAMIC_METADATA", "true"),
            ("CACHE_KEY_PREFIX", "diff_"),
        ],
        store: SluiceStore::Redis,
        split_domains: false,
    },
    Mode {
        name: "shadow-merge",
        env: &[
            EVERY_HIT,
            ("SHADOW_MODE", "true"),
            ("MERGE_DOMAIN_CONFIG", "true"),
        ],
        store: SluiceStore::Redis,
        split_domains: true,
    },
    Mode {
        name: "headers",
        env: &[EVERY_HIT, ("LIMIT_RESPONSE_HEADERS_ENABLED", "true")],
        store: SluiceStore::Redis,
        split_domains: false,
    },
    Mode {
        name: "memory-store",
        env: &[EVERY_HIT],
        store: SluiceStore::Memory,
        split_domains: false,
    },
];

/// The servers of one mode: a Redis each, kept across seeds (flushed between them).
struct Pair {
    reference_redis: Redis,
    sluice_redis: Redis,
}

/// One seed's material.
pub struct Seed {
    pub number: u64,
    pub config: Config,
    pub requests: Vec<Request>,
}

/// What one request's exchange found.
pub struct Exchange {
    pub differences: Vec<Difference>,
    pub reference: wire::Outcome,
    pub sluice: wire::Outcome,
    /// Whole seconds of the clock when it was sent.
    pub now_s: u64,
    /// The keys the reference's Redis held before the request, with their values.
    pub reference_before: BTreeMap<String, String>,
    /// The second ended between the two calls (a slow call): their windows may differ.
    pub straddled: bool,
}

/// Runs sequences of one mode, each on fresh servers.
pub struct Runner<'a> {
    args: &'a Args,
    pub mode: &'a Mode,
    pair: &'a Pair,
    dir: PathBuf,
}

impl Runner<'_> {
    async fn start(&self, config: &Config) -> Result<(Server, Server), Error> {
        let root = self.dir.join("runtime");
        let config_dir = root.join("ratelimit").join("config");
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&config_dir)?;
        for file in &config.files {
            std::fs::write(
                config_dir.join(format!("{}.yaml", file.name)),
                generate::yaml(file),
            )?;
        }
        self.pair.reference_redis.flush()?;
        self.pair.sluice_redis.flush()?;
        let launch = Launch {
            env: self.mode.env,
            runtime_root: &root,
        };
        let reference = servers::start_reference(
            &self.args.reference,
            &launch,
            &self.pair.reference_redis,
            self.dir.join("reference.log"),
        )
        .await?;
        let sluice = servers::start_sluice(
            &self.args.sluice,
            &launch,
            self.mode.store,
            &self.pair.sluice_redis,
            self.dir.join("sluice.log"),
        )
        .await?;
        Ok((reference, sluice))
    }

    /// Sends `requests` to fresh servers, both within one second each time.
    pub async fn run(&self, config: &Config, requests: &[Request]) -> Result<Vec<Exchange>, Error> {
        let (mut reference, mut sluice) = self.start(config).await?;
        let compare_keys = self.mode.store == SluiceStore::Redis;
        let mut keys_before = BTreeMap::new();
        let mut reference_before: BTreeMap<String, String> = BTreeMap::new();
        let mut exchanges = Vec::with_capacity(requests.len());
        for request in requests {
            let now_s = same_second().await;
            let message = wire::request(request);
            let r = wire::outcome(reference.client.should_rate_limit(message.clone()).await);
            let s = wire::outcome(sluice.client.should_rate_limit(message).await);
            let straddled = clock_seconds() != now_s;
            let mut differences = compare::differences(&r, &s);
            let reference_keys = self.pair.reference_redis.dump()?;
            let reference_after: BTreeMap<String, String> =
                reference_keys.iter().cloned().collect();
            if compare_keys {
                let keys_now = compare::pair_keys(reference_keys, self.pair.sluice_redis.dump()?);
                differences.extend(compare::keys(&keys_before, &keys_now));
                keys_before = keys_now;
            }
            exchanges.push(Exchange {
                differences,
                reference: r,
                sluice: s,
                now_s,
                straddled,
                reference_before: std::mem::replace(&mut reference_before, reference_after),
            });
        }
        Ok(exchanges)
    }
}

/// Waits, when the clock is within 60 ms of a second's end, for the next second; returns the
/// whole seconds of the clock.
async fn same_second() -> u64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let into = now.subsec_millis();
    if into > 940 {
        tokio::time::sleep(Duration::from_millis(u64::from(1_005 - into))).await;
        return now.as_secs() + 1;
    }
    now.as_secs()
}

/// Whole seconds of the clock.
fn clock_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
}

/// The counts of one mode.
#[derive(Default)]
struct Tally {
    requests: usize,
    agreed: usize,
    /// Requests whose differences are all explained, by the row of their first cause.
    explained: BTreeMap<&'static str, usize>,
    unexplained: usize,
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args = Args::parse();
    match run(&args).await {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(error) => {
            eprintln!("differential: {error}");
            std::process::exit(2);
        }
    }
}

async fn run(args: &Args) -> Result<bool, Error> {
    let temp;
    let out = match &args.out {
        Some(dir) => dir.clone(),
        None => {
            temp = tempfile::tempdir()?;
            temp.path().to_path_buf()
        }
    };
    let modes: Vec<&Mode> = MODES
        .iter()
        .filter(|m| args.modes.is_empty() || args.modes.iter().any(|n| n == m.name))
        .collect();
    let mut all_agree = true;
    let mut summary = Vec::new();
    for mode in modes {
        let pair = Pair {
            reference_redis: Redis::start()?,
            sluice_redis: Redis::start()?,
        };
        let dir = out.join(mode.name);
        std::fs::create_dir_all(&dir)?;
        let runner = Runner {
            args,
            mode,
            pair: &pair,
            dir: dir.clone(),
        };
        let mut tally = Tally::default();
        for number in args.first_seed..args.first_seed + args.seeds {
            let seed = seed(number, mode, args.requests);
            let exchanges = runner.run(&seed.config, &seed.requests).await?;
            let mut ledger = Ledger::new(mode, &seed.config);
            let mut roots = Vec::new();
            for (index, (request, exchange)) in seed.requests.iter().zip(&exchanges).enumerate() {
                tally.requests += 1;
                let explained = ledger.explain(request, exchange);
                if args.verbose && !exchange.differences.is_empty() {
                    print_exchange(mode, number, index, request, exchange, Some(&explained));
                }
                match explained {
                    Explained::Agreed => tally.agreed += 1,
                    Explained::Row(row) => *tally.explained.entry(row).or_default() += 1,
                    Explained::Unexplained { root } => {
                        tally.unexplained += 1;
                        if root {
                            roots.push(index);
                        }
                    }
                }
            }
            keep_seed(&dir, &seed)?;
            for &index in roots.iter().take(2) {
                println!(
                    "\n[{}] seed {number}: request {index} differs, unexplained:",
                    mode.name
                );
                print_exchange(
                    mode,
                    number,
                    index,
                    &seed.requests[index],
                    &exchanges[index],
                    None,
                );
                let reproducer = shrink::shrink(&runner, &seed, index).await?;
                println!("reproducer:\n{reproducer}");
            }
        }
        all_agree &= tally.unexplained == 0;
        summary.push((mode.name, tally));
    }
    println!(
        "\n{:<24} {:>8} {:>8} {:>10} {:>12}  explained by",
        "mode", "requests", "agree", "explained", "unexplained"
    );
    for (name, tally) in &summary {
        let rows: Vec<String> = tally
            .explained
            .iter()
            .map(|(row, n)| format!("{row} {n}"))
            .collect();
        let explained: usize = tally.explained.values().sum();
        println!(
            "{name:<24} {:>8} {:>8} {explained:>10} {:>12}  {}",
            tally.requests,
            tally.agreed,
            tally.unexplained,
            rows.join(", ")
        );
    }
    println!("\nconfigs and reproducers kept in {}", out.display());
    if args.out.is_none() {
        // The temporary folder goes with this run.
        println!("(pass --out DIR to keep them)");
    }
    Ok(all_agree)
}

fn seed(number: u64, mode: &Mode, requests: usize) -> Seed {
    let mut rng = Rng::new(number);
    let config = generate::config(&mut rng, mode.split_domains);
    let requests = generate::requests(&mut rng, &config, requests);
    Seed {
        number,
        config,
        requests,
    }
}

fn keep_seed(dir: &Path, seed: &Seed) -> Result<(), Error> {
    let seed_dir = dir.join(format!("seed-{}", seed.number));
    std::fs::create_dir_all(&seed_dir)?;
    for file in &seed.config.files {
        std::fs::write(
            seed_dir.join(format!("{}.yaml", file.name)),
            generate::yaml(file),
        )?;
    }
    let lines: Vec<String> = seed.requests.iter().map(ToString::to_string).collect();
    std::fs::write(seed_dir.join("requests.txt"), lines.join("\n") + "\n")?;
    Ok(())
}

fn print_exchange(
    mode: &Mode,
    seed: u64,
    index: usize,
    request: &Request,
    exchange: &Exchange,
    explained: Option<&Explained>,
) {
    let explained = explained.map_or(String::new(), |e| format!("  => {e:?}"));
    println!("[{}] seed {seed} #{index}: {request}{explained}", mode.name);
    for d in &exchange.differences {
        println!(
            "    {}: reference {} / sluice {}",
            d.field, d.reference, d.sluice
        );
    }
}
