//! envoyproxy/ratelimit's own test suite, replayed against the `sluice` binary from outside:
//! one test per reference case, named after it (`test/config/config_test.go`'s
//! `TestBasicConfig` is `config::test_basic_config`), on the memory store and on a real Redis.
//! The configs are the project's own, shaped like the reference's fixtures. A case that sluice
//! answers differently on purpose asserts sluice's answer and names the difference
//! (docs/differences.md).

mod config;
mod counting;
mod differential;
mod integration;
mod limiter;
mod service;

use sluice_config::LoadOptions;

use crate::support::redis::RedisServer;
use crate::support::*;

/// A sluice on one store, and the Redis behind it.
pub struct OnStore {
    pub store: &'static str,
    pub sluice: Sluice,
    pub redis: Option<RedisServer>,
}

/// The same config (`files`) and environment served twice: on the memory store and on Redis.
pub fn on_both_stores(
    files: &[(&str, &str)],
    args: &[&str],
    envs: &[(&str, &str)],
) -> Vec<OnStore> {
    let memory = Sluice::start_with(files, args, envs);
    let redis = RedisServer::start(&[]);
    let on_redis = Sluice::on_redis_url(files, &redis.url(), args, envs);
    vec![
        OnStore {
            store: "memory",
            sluice: memory,
            redis: None,
        },
        OnStore {
            store: "redis",
            sluice: on_redis,
            redis: Some(redis),
        },
    ]
}

/// A sluice on a Redis of its own, with `files` and `envs`.
pub fn on_redis(files: &[(&str, &str)], envs: &[(&str, &str)]) -> (RedisServer, Sluice) {
    Sluice::on_own_redis(files, &[], envs)
}

/// What `sluice check-config` says of `files` with its flags `args` (`--merge-domain-config`,
/// `--debt`): whether they load, and its output, from the library's `check` that the command
/// prints (the command line itself is `tests/process`'s).
pub fn check_config(files: &[(&str, &str)], args: &[&str]) -> (bool, String) {
    let dir = tempfile::tempdir().expect("temporary directory");
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).expect("write config");
    }
    for arg in args {
        assert!(
            ["--merge-domain-config", "--debt"].contains(arg),
            "check_config takes no {arg}"
        );
    }
    let options = LoadOptions {
        merge_domain_config: args.contains(&"--merge-domain-config"),
        debt: args.contains(&"--debt"),
        ..LoadOptions::default()
    };
    let report = sluice::check::check(&[dir.path().to_path_buf()], options, None);
    (report.passed, format!("{}{}", report.out, report.err))
}

/// Asserts that `files` are refused with `reason`, naming the file and its line.
pub fn assert_refused(files: &[(&str, &str)], args: &[&str], reason: &str) {
    let (loaded, text) = check_config(files, args);
    assert!(!loaded, "must be refused: {text}");
    assert!(text.contains(reason), "reason {reason:?} in: {text}");
    assert!(text.contains(".yaml:"), "names the file and line: {text}");
}

/// The limit a descriptor of `entries` falls under, read with a hit of cost 0 (which charges
/// nothing): `Some((requests_per_unit, unit, name))`, or `None` for no limit.
pub async fn limit_of(
    sluice: &Sluice,
    domain: &str,
    entries: &[(&str, &str)],
) -> Option<(u32, Unit, String)> {
    let status = status_of(sluice, domain, descriptor_with_hits(entries, 0)).await;
    status.current_limit.map(|limit| {
        let unit = Unit::try_from(limit.unit).expect("a known unit");
        (limit.requests_per_unit, unit, limit.name)
    })
}

/// The status of one descriptor asked alone.
pub async fn status_of(
    sluice: &Sluice,
    domain: &str,
    descriptor: envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor,
) -> DescriptorStatus {
    let mut client = sluice.client().await;
    let response = call(&mut client, request(domain, vec![descriptor])).await;
    response.statuses.into_iter().next().expect("one status")
}

/// The value of the counter `name` with `labels` (`{domain="d",key1="k"}`) on `/metrics`; 0
/// when absent.
pub fn counter(sluice: &Sluice, name: &str, labels: &str) -> f64 {
    let (_, text) = sluice.http_get("/metrics");
    series(&text, &format!("{name}{labels}")).unwrap_or(0.0)
}

/// Seconds since the epoch.
pub fn now_seconds() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after the epoch")
        .as_secs()
}
