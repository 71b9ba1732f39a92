//! Fixed windows from each counter's first hit through the server (docs/configuration.md,
//! "Windows from the first hit"): on both stores a window lasts one period from its
//! counter's first hit, not to the epoch's edge; on Redis it is a hash under a key that names
//! neither window nor time, shared by replicas and kept by a reload that changes the limit,
//! and on the memory store kept by its snapshot across a restart;
//! and the settings that cannot go with it are refused with the
//! path, line and reason.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::support::*;

const CONFIG: &str = r#"
domain: api
descriptors:
  - key: tenant
    rate_limit:
      unit: second
      unit_multiplier: 2
      requests_per_unit: 1
      window: {start: first_hit}
  - key: plan
    rate_limit:
      unit: hour
      requests_per_unit: 5
      window: {start: first_hit}
"#;

/// Sleeps until the epoch's 2-second window holding now has `left` of it to run.
async fn until_epoch_window_has_left(left: Duration) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after the epoch");
    let period = Duration::from_secs(2);
    let into = Duration::from_nanos((now.as_nanos() % period.as_nanos()) as u64);
    let wait = (period + period - left - into).as_nanos() % period.as_nanos();
    tokio::time::sleep(Duration::from_nanos(wait as u64)).await;
}

/// The seconds `response`'s first status waits to its window's end.
fn reset_s(response: &RateLimitResponse) -> i64 {
    response.statuses[0]
        .duration_until_reset
        .as_ref()
        .map_or(0, |d| d.seconds)
}

/// A window of 2 s opened 0.5 s before the epoch's 2-second edge: past that edge it still
/// denies, and it admits again 2 s after its first hit.
async fn a_window_lasts_one_period_from_its_first_hit(sluice: &Sluice, tenant: &str) {
    let mut client = sluice.client().await;
    until_epoch_window_has_left(Duration::from_millis(500)).await;
    let first = call_one(&mut client, "api", &[("tenant", tenant)]).await;
    assert_eq!(overall(&first), Code::Ok);
    assert_eq!(
        reset_s(&first),
        2,
        "the window runs a whole period from the first hit"
    );
    // 1 s later: past the epoch's edge, within the counter's window.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let within = call_one(&mut client, "api", &[("tenant", tenant)]).await;
    assert_eq!(
        overall(&within),
        Code::OverLimit,
        "an epoch window would have reset"
    );
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    let after = call_one(&mut client, "api", &[("tenant", tenant)]).await;
    assert_eq!(
        overall(&after),
        Code::Ok,
        "the window ended 2 s after its first hit"
    );
}

/// An hour's window opened now waits a whole hour (an epoch's hour would end sooner but in
/// one case out of 3,600).
async fn an_hours_window_waits_an_hour(sluice: &Sluice, plan: &str) {
    let mut client = sluice.client().await;
    let first = call_one(&mut client, "api", &[("plan", plan)]).await;
    assert_eq!(overall(&first), Code::Ok);
    assert_eq!(first.statuses[0].limit_remaining, 4);
    assert!(
        (3_599..=3_600).contains(&reset_s(&first)),
        "waits {} s",
        reset_s(&first)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn windows_from_the_first_hit_count_alike_on_both_stores() {
    let memory = Sluice::start(CONFIG, &[]);
    let (redis, on_redis) = Sluice::on_own_redis(&[("config.yaml", CONFIG)], &[], &[]);
    for sluice in [&memory, &on_redis] {
        an_hours_window_waits_an_hour(sluice, "pro").await;
        a_window_lasts_one_period_from_its_first_hit(sluice, "acme").await;
    }
    let (_, rlconfig) = memory.http_get("/rlconfig");
    assert!(
        rlconfig.contains(
            "api.plan: unit=HOUR requests_per_unit=5, shadow_mode: false, window: from each counter's first hit"
        ),
        "{rlconfig}"
    );
    // Redis: a hash of the first hit's time and the count, named by neither, under a key
    // tagged by its descriptor (as when Kuadrant's calls add a modifier to it).
    let key = "{api_plan_pro_}fixed_window_per3600s_first_";
    assert_eq!(redis.cli(&["HGET", key, "c"]).trim(), "1", "{key}");
    let ttl_ms: u64 = redis.cli(&["PTTL", key]).trim().parse().expect("a TTL");
    assert!(
        (3_590_000..=3_601_000).contains(&ttl_ms),
        "{key} expires in {ttl_ms} ms"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_share_a_window_and_a_reload_of_its_limit_keeps_its_count() {
    let (redis, first) = Sluice::on_own_redis(&[("config.yaml", CONFIG)], &[], &[]);
    let second = Sluice::on_redis_url(&[("config.yaml", CONFIG)], &redis.url(), &[], &[]);
    let (mut one, mut two) = (first.client().await, second.client().await);
    let plan = [("plan", "team")];
    for on_first in [true, false, true] {
        let client = if on_first { &mut one } else { &mut two };
        assert_eq!(overall(&call_one(client, "api", &plan).await), Code::Ok);
    }
    // 3 of 5 across both; the limit lowered to 4 on the first replica: 1 more, then none.
    let lowered = CONFIG.replace("requests_per_unit: 5", "requests_per_unit: 4");
    std::fs::write(first.config_dir.path().join("config.yaml"), lowered).expect("written");
    eventually(&first, "the reload", async || {
        first.log().contains("config reloaded")
    })
    .await;
    let fourth = call_one(&mut one, "api", &plan).await;
    assert_eq!(overall(&fourth), Code::Ok);
    assert_eq!(
        fourth.statuses[0].limit_remaining, 0,
        "4 of 4: the count was kept"
    );
    assert_eq!(
        overall(&call_one(&mut one, "api", &plan).await),
        Code::OverLimit
    );
    // The second replica, still at 5, sees the same count: one more.
    assert_eq!(overall(&call_one(&mut two, "api", &plan).await), Code::Ok);
    assert_eq!(
        overall(&call_one(&mut two, "api", &plan).await),
        Code::OverLimit
    );
    // The plain counter call took them: it adds to a live window's count with HINCRBY (the
    // general call writes the hash whole): 4 admitted after the first.
    let stats = redis.cli(&["INFO", "commandstats"]);
    assert!(stats.contains("cmdstat_hincrby:calls=4,"), "{stats}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_survives_a_restart_with_the_memory_snapshot_and_keeps_its_start() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let snapshot = dir.path().join("state.snapshot").display().to_string();
    let args = ["--memory-snapshot", snapshot.as_str()];
    let mut first = Sluice::start(CONFIG, &args);
    let mut client = first.client().await;
    let plan = [("plan", "kept")];
    for _ in 0..3 {
        assert_eq!(
            overall(&call_one(&mut client, "api", &plan).await),
            Code::Ok
        );
    }
    assert_eq!(first.terminate(), Some(0), "drained, its snapshot written");
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let second = Sluice::start(CONFIG, &args);
    let mut client = second.client().await;
    let fourth = call_one(&mut client, "api", &plan).await;
    assert_eq!(
        fourth.statuses[0].limit_remaining, 1,
        "three were counted before"
    );
    // The window still ends an hour after its first hit, not after the restart.
    assert!(reset_s(&fourth) < 3_600, "waits {} s", reset_s(&fourth));
}

/// Limitador's limits count in windows from the first hit (its own).
const LIMITADOR_LIMITS: &str = "\
- namespace: lim
  max_value: 1
  seconds: 2
  variables: [\"descriptors[0]['tenant']\"]
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limitadors_limits_count_from_each_counters_first_hit_on_both_stores() {
    let files = [("limits.yaml", LIMITADOR_LIMITS)];
    let memory = Sluice::start_with(&files, &[], &[]);
    let (_redis, on_redis) = Sluice::on_own_redis(&files, &[], &[]);
    for sluice in [&memory, &on_redis] {
        let mut client = sluice.client().await;
        until_epoch_window_has_left(Duration::from_millis(500)).await;
        let ask = || request("lim", vec![descriptor(&[("tenant", "t1")])]);
        let first = call(&mut client, ask()).await;
        assert_eq!(first.overall_code, Code::Ok as i32);
        tokio::time::sleep(Duration::from_secs(1)).await;
        let within = call(&mut client, ask()).await;
        assert_eq!(within.overall_code, Code::OverLimit as i32);
        tokio::time::sleep(Duration::from_millis(1_300)).await;
        let after = call(&mut client, ask()).await;
        assert_eq!(after.overall_code, Code::Ok as i32);
    }
}

#[test]
fn what_cannot_go_with_a_window_from_the_first_hit_is_refused_with_its_line() {
    let refused = |lines: &str| {
        let text = format!(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n{lines}"
        );
        match sluice_config::load_str("x.yaml", &text, sluice_config::LoadOptions::default()) {
            Ok(_) => panic!("{lines} loaded but must be refused"),
            Err(errors) => errors.to_string(),
        }
    };
    let debt = refused("      window: {start: first_hit}\n      debt: true\n");
    assert!(
        debt.contains("x.yaml:8:")
            && debt.contains("rate_limit.debt: a window from the first hit takes no debt"),
        "{debt}"
    );
    let unknown = refused("      window: {start: sometimes}\n");
    assert!(
        unknown.contains("rate_limit.window.start: must be first_hit"),
        "{unknown}"
    );
    let with_calendar = refused("      window: {start: first_hit, calendar: day}\n");
    assert!(
        with_calendar.contains("rate_limit.window: start is given alone"),
        "{with_calendar}"
    );
    let other = refused("      algorithm: token_bucket\n      window: {start: first_hit}\n");
    assert!(other.contains("window"), "{other}");
}
