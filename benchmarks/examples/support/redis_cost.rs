//! What the cost examples share: the service on a Redis, and Redis's own CPU in script calls.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use sluice_limiter::LimiterOptions;
use sluice_server::metrics::Metrics;
use sluice_server::service::RateLimiter;
use sluice_store::any::AnyStore;
use sluice_store::redis::{RedisStore, RedisTarget, RedisTargets, TimeSource};
use sluice_store::SystemClock;

/// Redis's own CPU in script calls so far: (calls, µs), from `INFO commandstats`.
pub async fn script_cpu(url: &str) -> Result<(u64, u64), Box<dyn std::error::Error>> {
    let client = redis::Client::open(url)?;
    let mut connection = client.get_multiplexed_async_connection().await?;
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut connection)
        .await?;
    let (mut calls, mut usec) = (0, 0);
    for line in info.lines() {
        let script = ["cmdstat_fcall:", "cmdstat_evalsha:", "cmdstat_eval:"];
        if let Some(rest) = script.iter().find_map(|p| line.strip_prefix(p)) {
            for field in rest.split(',') {
                match field.split_once('=') {
                    Some(("calls", n)) => calls += n.parse::<u64>().unwrap_or(0),
                    Some(("usec", n)) => usec += n.parse::<u64>().unwrap_or(0),
                    _ => {}
                }
            }
        }
    }
    Ok((calls, usec))
}

/// The service on the Redis at `url`, serving `config`.
pub async fn limiter(
    url: &str,
    config: &Arc<ArcSwap<sluice_config::Config>>,
) -> Result<RateLimiter<AnyStore>, Box<dyn std::error::Error>> {
    let target = RedisTarget::single(url, Duration::from_secs(5));
    let targets = RedisTargets {
        main: &target,
        per_second: None,
    };
    let store = RedisStore::connect(
        targets,
        Duration::from_secs(5),
        "bench_".into(),
        TimeSource::Sluice,
        Arc::new(SystemClock),
    )
    .await?;
    Ok(RateLimiter::new(
        config.clone(),
        Arc::new(AnyStore::on_redis(store, 0, Arc::new(SystemClock))),
        LimiterOptions::default(),
        Arc::new(Metrics::new(0.8, 10_000)),
    ))
}
