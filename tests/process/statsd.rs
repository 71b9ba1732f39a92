//! The statsd sink (`USE_STATSD`, TCP as the reference's gostats) and DogStatsD
//! (`USE_DOG_STATSD`, UDP, tags), received by sinks run inside the test: after a known sequence
//! of calls, the stats and their counts are what the reference sends for it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::support::*;

const CONFIG: &str =
    "domain: s\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 2}\n";

/// Three calls on one user: 2 within (the second near: past 80% of 2), the third over.
async fn three_calls(sluice: &Sluice) {
    let mut client = sluice.client().await;
    call_times(&mut client, "s", &[("user", "alice")], 3).await;
}

/// Sums the counters of `lines` (`name:value|c...`) by name; counts the timer samples.
fn totals(lines: &[String]) -> BTreeMap<String, u64> {
    let mut totals = BTreeMap::new();
    for line in lines {
        let Some((name, rest)) = line.split_once(':') else {
            continue;
        };
        let mut fields = rest.split('|');
        let value: u64 = fields.next().unwrap_or("0").parse().unwrap_or(0);
        match fields.next() {
            Some("c") => *totals.entry(name.to_string()).or_insert(0) += value,
            Some("ms") => *totals.entry(format!("{name} (samples)")).or_insert(0) += 1,
            _ => {}
        }
    }
    totals
}

/// What the reference sends for `three_calls`, with `suffix` after each name.
fn expected(suffix: &str) -> Vec<(String, u64)> {
    [
        ("ratelimit.service.rate_limit.s.user.total_hits", 3),
        ("ratelimit.service.rate_limit.s.user.within_limit", 2),
        ("ratelimit.service.rate_limit.s.user.near_limit", 1),
        ("ratelimit.service.rate_limit.s.user.over_limit", 1),
        ("ratelimit_server.ShouldRateLimit.total_requests", 3),
        ("ratelimit.service.config_load_success", 1),
    ]
    .into_iter()
    .map(|(name, count)| (format!("{name}{suffix}"), count))
    .collect()
}

#[tokio::test]
async fn statsd_receives_the_references_stats_over_tcp() {
    let sink = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = sink.local_addr().unwrap().port().to_string();
    let sluice = Sluice::process_with(
        &[("config.yaml", CONFIG)],
        &[],
        &[
            ("USE_STATSD", "true"),
            ("STATSD_HOST", "127.0.0.1"),
            ("STATSD_PORT", &port),
            ("STATS_FLUSH_INTERVAL", "100ms"),
            ("EXTRA_TAGS", "cluster:eu"),
        ],
    );
    three_calls(&sluice).await;
    let (mut stream, _) = tokio::time::timeout(Duration::from_secs(10), sink.accept())
        .await
        .expect("sluice connects")
        .unwrap();
    let mut received = String::new();
    let started = Instant::now();
    let mut buffer = [0u8; 4096];
    while started.elapsed() < Duration::from_secs(2) {
        use tokio::io::AsyncReadExt;
        if let Ok(Ok(n)) =
            tokio::time::timeout(Duration::from_millis(300), stream.read(&mut buffer)).await
        {
            received.push_str(&String::from_utf8_lossy(&buffer[..n]));
        }
    }
    let lines: Vec<String> = received.lines().map(str::to_string).collect();
    let totals = totals(&lines);
    for (name, count) in expected(".__cluster=eu") {
        assert_eq!(totals.get(&name), Some(&count), "{name} in {totals:?}");
    }
    assert_eq!(
        totals.get("ratelimit_server.ShouldRateLimit.response_time.__cluster=eu (samples)"),
        Some(&3)
    );
}

/// The DogStatsD lines sluice sends to a UDP sink, with `envs`, for `three_calls`.
async fn dogstatsd_lines(envs: &[(&str, &str)]) -> Vec<String> {
    let sink = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let port = sink.local_addr().unwrap().port().to_string();
    let mut all = vec![
        ("USE_DOG_STATSD", "true"),
        ("STATSD_HOST", "127.0.0.1"),
        ("STATSD_PORT", &port),
        ("STATS_FLUSH_INTERVAL", "100ms"),
        ("EXTRA_TAGS", "cluster:eu"),
    ];
    all.extend_from_slice(envs);
    let sluice = Sluice::process_with(&[("config.yaml", CONFIG)], &[], &all);
    three_calls(&sluice).await;
    let mut lines = Vec::new();
    let started = Instant::now();
    let mut buffer = [0u8; 2048];
    while started.elapsed() < Duration::from_secs(2) {
        if let Ok(Ok((n, _))) =
            tokio::time::timeout(Duration::from_millis(300), sink.recv_from(&mut buffer)).await
        {
            lines.extend(
                String::from_utf8_lossy(&buffer[..n])
                    .lines()
                    .map(str::to_string),
            );
        }
    }
    lines
}

#[tokio::test]
async fn dogstatsd_receives_them_over_udp_with_tags() {
    let lines = dogstatsd_lines(&[]).await;
    assert!(
        lines.iter().all(|l| l.ends_with("|#cluster:eu")),
        "{lines:?}"
    );
    let totals = totals(&lines);
    for (name, count) in expected("") {
        assert_eq!(totals.get(&name), Some(&count), "{name} in {totals:?}");
    }
}

#[tokio::test]
async fn dogstatsd_mogrifiers_turn_names_into_names_and_tags() {
    // The reference README's HITS mogrifier.
    let lines = dogstatsd_lines(&[
        ("USE_DOG_STATSD_MOGRIFIERS", "HITS"),
        (
            "DOG_STATSD_MOGRIFIER_HITS_PATTERN",
            r"^ratelimit\.service\.rate_limit\.([^.]+)\.(.*)\.([^.]+)$",
        ),
        (
            "DOG_STATSD_MOGRIFIER_HITS_NAME",
            "ratelimit.service.rate_limit.$3",
        ),
        ("DOG_STATSD_MOGRIFIER_HITS_TAGS", "domain:$1,descriptor:$2"),
    ])
    .await;
    let tagged = |stat: &str| {
        lines
            .iter()
            .filter(|l| {
                l.starts_with(&format!("ratelimit.service.rate_limit.{stat}:"))
                    && l.ends_with("|#domain:s,descriptor:user,cluster:eu")
            })
            .count()
    };
    for stat in ["total_hits", "within_limit", "near_limit", "over_limit"] {
        assert!(tagged(stat) >= 1, "{stat} mogrified in {lines:?}");
    }
    // A name the pattern does not match is sent as it is.
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("ratelimit.service.config_load_success:1|c|#cluster:eu")),
        "{lines:?}"
    );
    let totals = totals(&lines);
    assert_eq!(
        totals.get("ratelimit.service.rate_limit.total_hits"),
        Some(&3),
        "{totals:?}"
    );
}
