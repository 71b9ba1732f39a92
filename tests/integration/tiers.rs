//! Priority tiers on one shared limit (docs/tiers.md): batch and default traffic flood a
//! limit at three times its capacity while critical traffic sends a tenth of it, on memory,
//! on Redis and on two replicas of one Redis; what a client is told (the tier's remaining,
//! `sluice.denied_by`), the series by tier, overrides that set ceilings, and the refusals.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::support::redis::RedisServer;
use crate::support::*;

const LIMIT: u64 = 200;

const CONFIG: &str = "
domain: tiers
descriptors:
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 200, name: tenant_rate}
    tiers:
      from: priority
      ceilings: {critical: 1.0, default: 0.8, batch: 0.5}
      otherwise: default
";

/// A request of `tenant` in `tier` (none: without the entry).
fn of_tier(tenant: &str, tier: Option<&str>) -> RateLimitRequest {
    let mut entries = vec![("tenant", tenant)];
    if let Some(tier) = tier {
        entries.push(("priority", tier));
    }
    request("tiers", vec![descriptor(&entries)])
}

/// Admitted requests by tier: critical, default, batch.
#[derive(Default)]
struct Admitted {
    by_tier: [AtomicU64; 3],
    critical_denied: AtomicU64,
}

/// 16 clients on `replicas` (in turn): batch and default send 1.5 x the limit each, critical
/// a tenth of it, interleaved.
async fn flood(replicas: &[&Sluice], tenant: &str) -> Arc<Admitted> {
    let admitted = Arc::new(Admitted::default());
    let mut tasks = Vec::new();
    for client in 0..16usize {
        let mut grpc = replicas[client % replicas.len()].client().await;
        let admitted = admitted.clone();
        let tenant = tenant.to_string();
        tasks.push(tokio::spawn(async move {
            // Each client: 2 x (300 / 16) batch and default calls, and its share of 20 critical.
            for i in 0..38usize {
                let tier = match i % 2 {
                    0 => ("default", 1),
                    _ => ("batch", 2),
                };
                let critical = i % 30 == 0 && (client + i) % 16 < 10;
                let (name, index) = if critical { ("critical", 0) } else { tier };
                let response = call(&mut grpc, of_tier(&tenant, Some(name))).await;
                let ok = overall(&response) == Code::Ok;
                if ok {
                    admitted.by_tier[index].fetch_add(1, Ordering::Relaxed);
                } else if index == 0 {
                    admitted.critical_denied.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for task in tasks {
        task.await.expect("a client");
    }
    admitted
}

/// What the flood left: critical never denied, batch at most half the limit, default and
/// batch together at most 80%, and every tier together at most the limit.
fn assert_shares(store: &str, admitted: &Admitted) {
    let [critical, default, batch] = admitted
        .by_tier
        .each_ref()
        .map(|n| n.load(Ordering::Relaxed));
    // The figures docs/tiers.md gives (`--nocapture`).
    eprintln!("{store}: critical {critical}, default {default}, batch {batch}");
    assert_eq!(
        admitted.critical_denied.load(Ordering::Relaxed),
        0,
        "{store}: critical denied"
    );
    assert!(critical >= 10, "{store}: critical sent {critical}");
    assert!(batch <= LIMIT / 2, "{store}: batch admitted {batch}");
    assert!(
        batch + default <= LIMIT * 8 / 10,
        "{store}: batch {batch} + default {default}"
    );
    assert!(
        critical + default + batch <= LIMIT,
        "{store}: {critical} + {default} + {batch}"
    );
    // The flood fills what its tiers may: every tier together reaches default's 80%.
    let all = critical + default + batch;
    assert!(
        all >= LIMIT * 8 / 10,
        "{store}: {critical} + {default} + {batch}"
    );
}

#[tokio::test]
async fn critical_keeps_its_share_while_batch_and_default_flood_memory_and_redis() {
    clear_of_a_windows_end(Duration::from_secs(3600), Duration::from_secs(60)).await;
    let memory = Sluice::start(CONFIG, &[]);
    assert_shares("memory", &*flood(&[&memory], "a").await);
    let redis = RedisServer::start(&[]);
    let one = Sluice::on_redis_url(&[("config.yaml", CONFIG)], &redis.url(), &[], &[]);
    assert_shares("redis", &*flood(&[&one], "b").await);
    let two = Sluice::on_redis_url(&[("config.yaml", CONFIG)], &redis.url(), &[], &[]);
    assert_shares("two replicas", &*flood(&[&one, &two], "c").await);
}

#[tokio::test]
async fn a_client_is_told_its_tiers_remaining_and_which_limit_and_tier_denied_it() {
    clear_of_a_windows_end(Duration::from_secs(3600), Duration::from_secs(60)).await;
    let memory = Sluice::start(CONFIG, &[]);
    let (_redis, on_redis) = Sluice::on_own_redis(&[("config.yaml", CONFIG)], &[], &[]);
    for (store, sluice) in [("memory", &memory), ("redis", &on_redis)] {
        let mut client = sluice.client().await;
        // Batch may fill 100 of 200: the first is told 99 remain for it.
        let first = call(&mut client, of_tier("t", Some("batch"))).await;
        assert_eq!(first.statuses[0].limit_remaining, 99, "{store}");
        // Without the entry, or with an unknown tier, a request is in `otherwise` (160).
        let plain = call(&mut client, of_tier("t", None)).await;
        assert_eq!(plain.statuses[0].limit_remaining, 158, "{store}");
        let unknown = call(&mut client, of_tier("t", Some("urgent"))).await;
        assert_eq!(unknown.statuses[0].limit_remaining, 157, "{store}");
        let critical = call(&mut client, of_tier("t", Some("critical"))).await;
        assert_eq!(critical.statuses[0].limit_remaining, 196, "{store}");
        for _ in 0..96 {
            call(&mut client, of_tier("t", Some("batch"))).await;
        }
        let denied = call(&mut client, of_tier("t", Some("batch"))).await;
        assert_eq!(overall(&denied), Code::OverLimit, "{store}");
        assert_eq!(denied.statuses[0].limit_remaining, 0, "{store}");
        assert_eq!(
            metadata_text(&denied, "sluice.denied_by").as_deref(),
            Some("tenant_rate/batch"),
            "{store}"
        );
        // Critical still has the rest: 200 - 100 used.
        let critical = call(&mut client, of_tier("t", Some("critical"))).await;
        assert_eq!(overall(&critical), Code::Ok, "{store}");
        assert_eq!(critical.statuses[0].limit_remaining, 99, "{store}");
        assert!(metadata_text(&critical, "sluice.denied_by").is_none());
        let (_, metrics) = sluice.http_get("/metrics");
        let by_tier = |tier: &str, code: &str| {
            let labels = format!(
                r#"sluice_tier_decisions_total{{domain="tiers",key1="tenant",tier="{tier}",code="{code}"}}"#
            );
            series(&metrics, &labels).unwrap_or(0.0)
        };
        assert_eq!(by_tier("batch", "OK"), 97.0, "{store}: {metrics}");
        assert_eq!(by_tier("batch", "OVER_LIMIT"), 1.0, "{store}");
        assert_eq!(by_tier("critical", "OK"), 2.0, "{store}");
        assert_eq!(by_tier("default", "OK"), 2.0, "{store}");
    }
}

#[tokio::test]
async fn tiers_apply_to_every_limit_of_a_descriptor_and_hold_with_all_or_nothing() {
    const SEVERAL: &str = "
domain: tiers
descriptors:
  - key: tenant
    rate_limits:
      - {unit: hour, requests_per_unit: 10, name: per_hour}
      - {unit: day, requests_per_unit: 100, name: per_day}
    tiers: {from: priority, ceilings: {gold: 1, bronze: 0.3}, otherwise: bronze}
";
    clear_of_a_windows_end(Duration::from_secs(3600), Duration::from_secs(60)).await;
    let memory = Sluice::start(SEVERAL, &[]);
    let (_redis, on_redis) = Sluice::on_own_redis(&[("config.yaml", SEVERAL)], &[], &[]);
    for (store, sluice) in [("memory", &memory), ("redis", &on_redis)] {
        let mut client = sluice.client().await;
        let mut admitted = 0;
        for _ in 0..5 {
            let response = call(&mut client, of_tier("s", Some("bronze"))).await;
            admitted += u32::from(overall(&response) == Code::Ok);
        }
        assert_eq!(admitted, 3, "{store}: bronze fills 30% of the hour's 10");
        let denied = call(&mut client, of_tier("s", Some("bronze"))).await;
        assert_eq!(
            metadata_text(&denied, "sluice.denied_by").as_deref(),
            Some("per_hour/bronze"),
            "{store}"
        );
        // The denied requests charged neither limit: gold has 7 of the hour left.
        let gold = call(&mut client, of_tier("s", Some("gold"))).await;
        assert_eq!(overall(&gold), Code::Ok, "{store}");
        assert_eq!(gold.statuses[0].limit_remaining, 6, "{store}");
    }
}

#[tokio::test]
async fn an_override_sets_the_ceilings_of_a_tiered_rule() {
    use crate::support::admin::{admin, put_body, AdminFlags};
    clear_of_a_windows_end(Duration::from_secs(3600), Duration::from_secs(60)).await;
    let flags = AdminFlags::new();
    let sluice = Sluice::start(CONFIG, &flags.args());
    let limit = serde_json::json!({"unit": "hour", "requests_per_unit": 10,
        "tiers": {"from": "priority", "ceilings": {"critical": 1, "batch": 0.2}, "otherwise": "batch"}});
    let body = put_body("tiers", &[("tenant", "o")], None, limit);
    let (status, answer) = admin(&sluice, "PUT", "/v1/overrides", body);
    assert_eq!(status, 200, "{answer}");
    let mut client = sluice.client().await;
    let batch = codes(&mut client, "o", "batch", 3).await;
    assert_eq!(batch, [Code::Ok, Code::Ok, Code::OverLimit]);
    let critical = call(&mut client, of_tier("o", Some("critical"))).await;
    assert_eq!(critical.statuses[0].limit_remaining, 7);
    // Other tenants keep the file's ceilings.
    let other = call(&mut client, of_tier("p", Some("batch"))).await;
    assert_eq!(other.statuses[0].limit_remaining, 99);
}

/// The overall codes of `times` requests of `tenant` in `tier`, in order.
async fn codes(client: &mut Client, tenant: &str, tier: &str, times: usize) -> Vec<Code> {
    let mut codes = Vec::new();
    for _ in 0..times {
        codes.push(overall(&call(client, of_tier(tenant, Some(tier))).await));
    }
    codes
}

#[test]
fn ceilings_outside_0_to_1_a_tier_named_twice_and_leasing_are_refused_with_their_place() {
    let refused = |tiers: &str, extra: &str| {
        let config = format!(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {{unit: second, requests_per_unit: 10{extra}}}\n    tiers: {tiers}\n"
        );
        let dir = tempfile::tempdir().expect("a directory");
        std::fs::write(dir.path().join("c.yaml"), config).expect("written");
        let error = sluice_config::load(&[dir.path().to_path_buf()], Default::default())
            .expect_err("refused")
            .to_string();
        assert!(error.contains("c.yaml"), "names the file: {error}");
        error
    };
    let over = refused("{from: p, ceilings: {a: 1.5}, otherwise: a}", "");
    assert!(
        over.contains("tiers.ceilings") && over.contains("at most 1"),
        "{over}"
    );
    let zero = refused("{from: p, ceilings: {a: 0}, otherwise: a}", "");
    assert!(zero.contains("above 0"), "{zero}");
    let twice = refused("{from: p, ceilings: {a: 1, a: 0.5}, otherwise: a}", "");
    assert!(
        twice.contains("duplicate") || twice.contains("twice"),
        "{twice}"
    );
    let leased = refused(
        "{from: p, ceilings: {a: 1}, otherwise: a}",
        ", budget_leasing: {max_chunk: 10}",
    );
    assert!(
        leased.contains("tiers") && leased.contains("chunk"),
        "{leased}"
    );
    assert!(leased.contains("c.yaml:5:"), "names the line: {leased}");
}

#[test]
fn check_config_explains_the_tiers_and_simulate_shows_the_tier_of_its_traffic() {
    let dir = tempfile::tempdir().expect("a directory");
    std::fs::write(dir.path().join("c.yaml"), CONFIG).expect("written");
    let report = sluice::check::check(&[dir.path().to_path_buf()], Default::default(), None);
    assert!(report.passed, "{}", report.err);
    assert!(
        report
            .out
            .contains("shared by tiers named by the entry 'priority'")
            && report.out.contains("batch up to 100 (0.5)")
            && report.out.contains("critical up to 200 (1.0)")
            && report.out.contains("is default"),
        "{}",
        report.out
    );
    let simulation = sluice::simulate::Simulation {
        config_paths: vec![dir.path().to_path_buf()],
        load_options: Default::default(),
        domain: "tiers".into(),
        descriptors: vec![vec![
            ("tenant".into(), "a".into()),
            ("priority".into(), "batch".into()),
        ]],
        together: false,
        traffic: sluice::simulate::Traffic {
            rate: sluice::simulate::traffic::parse_rate("30/s").expect("a rate"),
            bursts: Vec::new(),
            duration_us: 10_000_000,
        },
        cost: 1,
        reports: Vec::new(),
        hold_us: None,
        actual: None,
        bucket_us: None,
    };
    let report = sluice::simulate::run(&simulation).expect("simulated");
    let run = &report.runs[0];
    assert!(
        run.limit.contains("this traffic: tier batch"),
        "{}",
        run.limit
    );
    let admitted = run.decisions.iter().filter(|d| d.admitted).count();
    assert_eq!(admitted, 100, "batch fills half of 200");
}

#[tokio::test]
async fn a_reload_changes_the_ceilings_and_keeps_the_shared_count() {
    clear_of_a_windows_end(Duration::from_secs(3600), Duration::from_secs(60)).await;
    let memory = Sluice::start(CONFIG, &[]);
    let (_redis, on_redis) = Sluice::on_own_redis(&[("config.yaml", CONFIG)], &[], &[]);
    for (store, sluice) in [("memory", &memory), ("redis", &on_redis)] {
        let mut client = sluice.client().await;
        // 60 of 200 used by batch (which may fill 100).
        for _ in 0..60 {
            call(&mut client, of_tier("r", Some("batch"))).await;
        }
        let lowered = CONFIG.replace("batch: 0.5", "batch: 0.25");
        let file = sluice.config_dir.path().join("config.yaml");
        std::fs::write(&file, lowered).expect("rewrite the config");
        // Batch may now fill 50 of the 200, and 60 are used already: it is denied at once.
        // Probed at cost 0, which charges nothing.
        let probe = request(
            "tiers",
            vec![descriptor_with_hits(
                &[("tenant", "r"), ("priority", "batch")],
                0,
            )],
        );
        eventually(sluice, "the lowered ceiling applies", async || {
            let response = call(&mut client, probe.clone()).await;
            overall(&response) == Code::OverLimit
        })
        .await;
        // The count survived the reload: critical is told 140 remain.
        let critical = call(&mut client, of_tier("r", Some("critical"))).await;
        assert_eq!(critical.statuses[0].limit_remaining, 139, "{store}");
    }
}

#[tokio::test]
async fn the_headers_give_the_tiers_own_remaining() {
    clear_of_a_windows_end(Duration::from_secs(3600), Duration::from_secs(60)).await;
    let sluice = Sluice::start_with(
        &[("config.yaml", CONFIG)],
        &[],
        &[("LIMIT_RESPONSE_HEADERS_ENABLED", "true")],
    );
    let mut client = sluice.client().await;
    let remaining = |response: &RateLimitResponse| -> Option<u64> {
        response
            .response_headers_to_add
            .iter()
            .find(|h| h.key.eq_ignore_ascii_case("RateLimit-Remaining"))
            .and_then(|h| h.value.parse().ok())
    };
    let batch = call(&mut client, of_tier("h", Some("batch"))).await;
    assert_eq!(remaining(&batch), Some(99), "batch fills 100 of 200");
    let default = call(&mut client, of_tier("h", Some("default"))).await;
    assert_eq!(remaining(&default), Some(158), "default fills 160 of 200");
    let critical = call(&mut client, of_tier("h", Some("critical"))).await;
    assert_eq!(remaining(&critical), Some(197));
}
