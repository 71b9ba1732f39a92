//! Calendar windows through the server (docs/configuration.md, "Calendar windows"): a billing
//! month in a time zone counts on both stores, tells the real time to the period's end, and is
//! listed by `/rlconfig` with the time-zone database; on the memory store it survives a restart
//! with a snapshot (and sluice warns when nothing would keep it), on Redis a Sentinel failover.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sluice_core::calendar::{Calendar, CalendarUnit};

use crate::support::*;

const CONFIG: &str = r#"
domain: billing
descriptors:
  - key: tenant
    rate_limit:
      unit: month
      requests_per_unit: 3
      name: calls_per_billing_month
      window: {calendar: month, time_zone: America/New_York, anchor_day: 15}
"#;

/// The wall clock, in µs since the epoch.
fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after the epoch")
        .as_micros() as u64
}

/// The billing month of `CONFIG`, and its period at `now_us` (start and end, in µs).
fn period_us(now_us: u64) -> (u64, u64) {
    Calendar::new(CalendarUnit::Month, "America/New_York", Some(15), None)
        .expect("a valid calendar")
        .window_us(now_us)
}

/// Seconds from now to the end of the current billing month of `CONFIG`, by the calendar.
fn seconds_to_period_end() -> u64 {
    let now = now_us();
    (period_us(now).1 - now).div_ceil(1_000_000)
}

/// Asks for `tenant` once; the response.
async fn ask(client: &mut Client, tenant: &str) -> RateLimitResponse {
    call_one(client, "billing", &[("tenant", tenant)]).await
}

/// Uses up `tenant`'s month, then checks the denial's wait: the time to the period's end.
async fn exhaust_and_check_the_wait(sluice: &Sluice, tenant: &str) {
    let mut client = sluice.client().await;
    for left in [2, 1, 0] {
        let response = ask(&mut client, tenant).await;
        assert_eq!(overall(&response), Code::Ok);
        assert_eq!(response.statuses[0].limit_remaining, left);
        let limit = response.statuses[0]
            .current_limit
            .as_ref()
            .expect("a limit");
        assert_eq!(limit.unit, Unit::Month as i32);
    }
    let denied = ask(&mut client, tenant).await;
    assert_eq!(overall(&denied), Code::OverLimit);
    let wait = denied.statuses[0]
        .duration_until_reset
        .as_ref()
        .expect("a wait")
        .seconds as u64;
    let expected = seconds_to_period_end();
    assert!(
        wait.abs_diff(expected) <= 2,
        "waits {wait} s, the period ends in {expected} s"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_billing_month_counts_to_its_local_midnight_on_both_stores() {
    let memory = Sluice::start(CONFIG, &[]);
    exhaust_and_check_the_wait(&memory, "acme").await;
    let (redis, on_redis) = Sluice::on_own_redis(&[("config.yaml", CONFIG)], &[], &[]);
    exhaust_and_check_the_wait(&on_redis, "acme").await;
    // The reference's key layout, with the period's start (local midnight) in seconds.
    let start_s = period_us(now_us()).0 / 1_000_000;
    let key = format!("billing_tenant_acme_{start_s}");
    assert_eq!(redis.cli(&["GET", &key]).trim(), "3", "{key}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_headers_give_the_real_time_to_the_periods_end() {
    let sluice = Sluice::start_with(
        &[("config.yaml", CONFIG)],
        &[],
        &[("LIMIT_RESPONSE_HEADERS_ENABLED", "true")],
    );
    let mut client = sluice.client().await;
    let header = |response: &RateLimitResponse, name: &str| -> Option<u64> {
        response
            .response_headers_to_add
            .iter()
            .find(|h| h.key.eq_ignore_ascii_case(name))
            .and_then(|h| h.value.parse().ok())
    };
    let first = ask(&mut client, "hooli").await;
    let reset = header(&first, "RateLimit-Reset").expect("RateLimit-Reset");
    let expected = seconds_to_period_end();
    assert!(reset.abs_diff(expected) <= 2, "{reset} against {expected}");
    for _ in 0..2 {
        ask(&mut client, "hooli").await;
    }
    let over = ask(&mut client, "hooli").await;
    let retry = header(&over, "Retry-After").expect("Retry-After");
    assert!(retry.abs_diff(expected) <= 2, "{retry} against {expected}");
}

#[test]
fn rlconfig_lists_the_window_and_names_the_time_zone_database() {
    let sluice = Sluice::start(CONFIG, &[]);
    let (status, body) = sluice.http_get("/rlconfig");
    assert_eq!(status, 200);
    let version = sluice_core::calendar::time_zone_database_version();
    assert!(
        body.starts_with(&format!("# time zone database {version}\n")),
        "{body}"
    );
    assert!(
        body.contains(
            "billing.tenant: unit=MONTH requests_per_unit=3, shadow_mode: false, window: \
             calendar month from day 15, midnight America/New_York"
        ),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_billing_month_survives_a_restart_with_a_snapshot_and_is_warned_of_without_one() {
    let unkept = Sluice::start(CONFIG, &[]);
    assert!(
        unkept.wait_for_log("calendar windows count in memory only"),
        "{}",
        unkept.log()
    );
    drop(unkept);
    let dir = tempfile::tempdir().expect("temporary directory");
    let snapshot = dir.path().join("state.snapshot").display().to_string();
    let args = ["--memory-snapshot", snapshot.as_str()];
    let mut first = Sluice::start(CONFIG, &args);
    assert!(!first
        .log()
        .contains("calendar windows count in memory only"));
    let mut client = first.client().await;
    for _ in 0..2 {
        assert_eq!(overall(&ask(&mut client, "initech").await), Code::Ok);
    }
    assert_eq!(first.terminate(), Some(0), "drained, its snapshot written");
    let second = Sluice::start(CONFIG, &args);
    let mut client = second.client().await;
    let third = ask(&mut client, "initech").await;
    assert_eq!(overall(&third), Code::Ok);
    assert_eq!(
        third.statuses[0].limit_remaining, 0,
        "two were counted before"
    );
    assert_eq!(overall(&ask(&mut client, "initech").await), Code::OverLimit);
}

/// Asks for `tenant` until the store answers (a failover fails calls for a moment), for at
/// most 20 s.
async fn ask_through_a_failover(sluice: &Sluice, tenant: &str) -> RateLimitResponse {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let mut client = sluice.client().await;
        let request = request("billing", vec![descriptor(&[("tenant", tenant)])]);
        match client.should_rate_limit(request).await {
            Ok(response) => return response.into_inner(),
            Err(status) if std::time::Instant::now() < deadline => {
                eprintln!("during the failover: {status}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(status) => panic!("the store never came back: {status}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_billing_month_keeps_its_count_across_a_redis_failover() {
    use crate::redis_faults::{failover_on_command, sentinel_deployment};
    let (primary, replica, sentinel) = sentinel_deployment();
    let url = format!("mymaster,127.0.0.1:{}", sentinel.port);
    let sluice = Sluice::start_with(
        &[("config.yaml", CONFIG)],
        &["--store", "redis", "--redis-command-timeout", "500ms"],
        &[("REDIS_TYPE", "SENTINEL"), ("REDIS_URL", &url)],
    );
    for _ in 0..2 {
        assert_eq!(
            overall(&ask_through_a_failover(&sluice, "globex").await),
            Code::Ok
        );
    }
    // The replica has the two charges before it is promoted.
    assert_eq!(primary.cli(&["WAIT", "1", "5000"]).trim(), "1");
    // Asked after the old primary is a replica: until then it takes writes, which its resync
    // drops (Redis's own window of loss, docs/redis.md).
    let _deployment = tokio::task::spawn_blocking(move || {
        failover_on_command(&primary, &replica, &sentinel);
        (primary, replica, sentinel)
    })
    .await
    .expect("the failover");
    let third = ask_through_a_failover(&sluice, "globex").await;
    assert_eq!(overall(&third), Code::Ok);
    assert_eq!(
        third.statuses[0].limit_remaining, 0,
        "two were counted before"
    );
    let fourth = ask_through_a_failover(&sluice, "globex").await;
    assert_eq!(overall(&fourth), Code::OverLimit);
}
