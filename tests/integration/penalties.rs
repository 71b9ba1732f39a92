//! Penalties (docs/penalties.md): a client its limit keeps denying is blocked, longer at
//! each repeat, up to the maximum, and forgotten after a quiet period; the limit is left
//! alone while it is blocked. On every store in-process (the memory store, Redis, Redis
//! behind the local cache): the escalation, all-or-nothing, debt, shadow mode, several
//! limits, and the memory store's bound; through the real binary with Envoy's protos:
//! `Retry-After` and the metadata on the memory store, Redis (the record's TTL) and a
//! Cluster, and the gauge of clients blocked now.

use std::collections::BTreeMap;
use std::sync::Arc;

use arc_swap::ArcSwap;
use prost_types::value::Kind;
use sluice_config::{self as config, LoadOptions};
use sluice_proto::rate_limit_response::Code as OurCode;
use sluice_proto::RateLimitResponse as OurResponse;
use sluice_server::metrics::Metrics;
use sluice_server::service::RateLimiter;
use sluice_store::any::AnyStore;
use sluice_store::memory::MemoryStore;
use sluice_store::ManualClock;

use crate::support::redis::{cli, cluster_flags, start_cluster, RedisServer};
use crate::support::stores::{every_store, InProcess, START_US};
use crate::support::*;

const CONFIG: &str = include_str!("../fixtures/cases/penalties/config.yaml");
const SECOND: u64 = 1_000_000;

/// The `sluice.penalty` fields of a response, when it has them.
fn block_of(response: &OurResponse) -> Option<BTreeMap<String, Kind>> {
    let metadata = response.dynamic_metadata.as_ref()?;
    let value = metadata.fields.get("sluice.penalty")?;
    match &value.kind {
        Some(Kind::StructValue(fields)) => Some(
            fields
                .fields
                .iter()
                .filter_map(|(k, v)| Some((k.clone(), v.kind.clone()?)))
                .collect(),
        ),
        _ => None,
    }
}

fn number(block: &BTreeMap<String, Kind>, name: &str) -> f64 {
    match block.get(name) {
        Some(Kind::NumberValue(n)) => *n,
        other => panic!("{name}: {other:?}"),
    }
}

fn flag(block: &BTreeMap<String, Kind>, name: &str) -> bool {
    matches!(block.get(name), Some(Kind::BoolValue(true)))
}

/// The overall code, the first status's remaining and seconds to reset.
fn answer(response: &OurResponse) -> (bool, u32, i64) {
    let status = &response.statuses[0];
    (
        response.overall_code == OurCode::Ok as i32,
        status.limit_remaining,
        status.duration_until_reset.map_or(0, |d| d.seconds),
    )
}

/// The sum of every series of `name` in `text`.
fn total(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|line| line.starts_with(&format!("{name}{{")))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Drains `user`'s bucket (5) and is denied twice: the second denial imposes a block.
/// Returns that denial.
async fn offend(service: &InProcess, user: &str) -> OurResponse {
    let descriptor = format!("user={user}");
    for left in (0..5).rev() {
        let response = service.ask("auth", &[&descriptor]).await;
        assert!(answer(&response).0, "{}: {left} left", service.store);
    }
    let first = service.ask("auth", &[&descriptor]).await;
    assert!(
        !answer(&first).0 && block_of(&first).is_none(),
        "{}",
        service.store
    );
    service.ask("auth", &[&descriptor]).await
}

#[tokio::test]
async fn a_client_that_keeps_failing_is_blocked_longer_each_time_then_forgotten_on_every_store() {
    let redis = RedisServer::start(&[]);
    for service in every_store(&redis.url(), CONFIG, &Default::default()).await {
        let store = service.store;
        let imposed = offend(&service, "mallory").await;
        let block = block_of(&imposed).expect("the block is in the metadata");
        assert_eq!(answer(&imposed), (false, 0, 60), "{store}");
        assert!(
            flag(&block, "imposed") && !flag(&block, "shadow_mode"),
            "{store}"
        );
        assert_eq!(number(&block, "offence"), 1.0, "{store}");
        assert!(matches!(block.get("limit"), Some(Kind::StringValue(n)) if n == "login"));
        // Blocked, whatever is asked (a check of cost 0 too); the bucket refills meanwhile.
        service.clock.advance(28 * SECOND);
        let blocked = service.ask("auth", &["user=mallory"]).await;
        assert_eq!(answer(&blocked), (false, 0, 32), "{store}");
        assert!(!flag(&block_of(&blocked).expect("blocked"), "imposed"));
        assert!(
            !answer(&service.ask("auth", &["user=mallory+0"]).await).0,
            "{store}"
        );
        if service.cached {
            assert_eq!(
                service.series("sluice_local_cache_hits_total"),
                2.0,
                "{store}"
            );
        }
        // At the block's end the limit alone decides: full, the blocked calls took nothing.
        service.clock.advance(32 * SECOND);
        let free = service.ask("auth", &["user=mallory"]).await;
        assert!(answer(&free).0, "{store}");
        assert_eq!(answer(&free).1, 4, "{store}: the bucket is full again");
        assert!(block_of(&free).is_none(), "{store}");
        // The next offences: 2 minutes, then 3 (the most, not 4). Each drains what is left
        // (4, then a full bucket) and is denied twice.
        for (minutes, left) in [(2, 4), (3, 5)] {
            for _ in 0..=left {
                service.ask("auth", &["user=mallory"]).await;
            }
            let again = service.ask("auth", &["user=mallory"]).await;
            assert_eq!(answer(&again), (false, 0, 60 * minutes), "{store}");
            service.clock.advance(60 * minutes as u64 * SECOND);
            service.ask("auth", &["user=mallory+0"]).await;
        }
        // Quiet for 10 minutes after the last block: forgotten, the next block is the first.
        service.clock.advance(600 * SECOND);
        let fresh = offend(&service, "mallory").await;
        assert_eq!(answer(&fresh), (false, 0, 60), "{store}");
        assert_eq!(number(&block_of(&fresh).expect("blocked"), "offence"), 1.0);
        // Another client was never touched.
        assert!(
            answer(&service.ask("auth", &["user=alice"]).await).0,
            "{store}"
        );
        let text = service.metrics.render();
        assert_eq!(
            total(&text, "sluice_penalties_imposed_total"),
            4.0,
            "{store}"
        );
        let denials = total(&text, "sluice_penalty_denials_total");
        assert_eq!(denials, 2.0, "{store}: every blocked call counted");
    }
}

#[tokio::test]
async fn only_a_limit_that_denies_counts_a_strike_and_a_report_into_debt_is_none() {
    let redis = RedisServer::start(&[]);
    for service in every_store(&redis.url(), CONFIG, &Default::default()).await {
        let store = service.store;
        // Vetoed by another descriptor, eve's bucket admits every time: never a strike.
        for _ in 0..10 {
            let vetoed = service.ask("auth", &["user=eve", "closed=x"]).await;
            assert!(!answer(&vetoed).0 && block_of(&vetoed).is_none(), "{store}");
        }
        let alone = service.ask("auth", &["user=eve"]).await;
        assert_eq!(
            answer(&alone),
            (true, 4, answer(&alone).2),
            "{store}: uncharged"
        );
        // A report of 5 with 2 left lands in debt without a strike; the check it then
        // denies (nothing left) is one, and blocks.
        assert!(
            answer(&service.ask("auth", &["tokens=t+8"]).await).0,
            "{store}"
        );
        let report = service.ask("auth", &["tokens=t+5"]).await;
        assert!(!answer(&report).0 && block_of(&report).is_none(), "{store}");
        let check = service.ask("auth", &["tokens=t+0"]).await;
        let block = block_of(&check).expect("the check is a strike");
        assert!(flag(&block, "imposed"), "{store}");
        assert_eq!(answer(&check), (false, 0, 30), "{store}");
    }
}

#[tokio::test]
async fn shadow_mode_counts_and_reports_a_block_but_never_enforces_it() {
    let redis = RedisServer::start(&[]);
    for service in every_store(&redis.url(), CONFIG, &Default::default()).await {
        let store = service.store;
        assert!(answer(&service.ask("auth", &["trial=t"]).await).0);
        let over = service.ask("auth", &["trial=t"]).await;
        assert!(answer(&over).0, "{store}: shadow mode never denies");
        let block = block_of(&over).expect("reported as it would be");
        assert!(
            flag(&block, "imposed") && flag(&block, "shadow_mode"),
            "{store}"
        );
        let during = service.ask("auth", &["trial=t"]).await;
        assert!(answer(&during).0, "{store}");
        assert!(!flag(&block_of(&during).expect("still blocked"), "imposed"));
        let text = service.metrics.render();
        assert_eq!(
            total(&text, "sluice_penalties_imposed_total"),
            1.0,
            "{store}"
        );
    }
}

#[tokio::test]
async fn a_penalised_limit_among_several_blocks_its_descriptor_alone() {
    let redis = RedisServer::start(&[]);
    for service in every_store(&redis.url(), CONFIG, &Default::default()).await {
        let store = service.store;
        for _ in 0..2 {
            assert!(answer(&service.ask("auth", &["api_key=k"]).await).0);
        }
        let over = service.ask("auth", &["api_key=k"]).await;
        let block = block_of(&over).expect("per_second's penalty");
        assert!(matches!(block.get("limit"), Some(Kind::StringValue(n)) if n == "per_second"));
        service.clock.advance(3 * SECOND);
        let blocked = service.ask("auth", &["api_key=k"]).await;
        assert_eq!(answer(&blocked), (false, 0, 7), "{store}");
        // Another key of the rule is free.
        assert!(
            answer(&service.ask("auth", &["api_key=other"]).await).0,
            "{store}"
        );
        service.clock.advance(7 * SECOND);
        assert!(
            answer(&service.ask("auth", &["api_key=k"]).await).0,
            "{store}"
        );
    }
}

#[tokio::test]
async fn a_flood_of_offenders_stays_within_the_memory_stores_bound() {
    let config = config::load_str("case.yaml", CONFIG, LoadOptions::default()).expect("config");
    let clock = Arc::new(ManualClock::at(START_US));
    let store = Arc::new(AnyStore::Memory(MemoryStore::new(256, clock.clone())));
    let limiter = RateLimiter::new(
        Arc::new(ArcSwap::from_pointee(config)),
        store.clone(),
        Default::default(),
        Arc::new(Metrics::new(0.8, 100)),
    );
    let AnyStore::Memory(memory) = &*store else {
        unreachable!()
    };
    let pin = |n: usize| request("auth", vec![descriptor(&[("pin", &format!("p{n}"))])]);
    let (mut refused, mut blocked) = (0, 0);
    for n in 0..1000 {
        for _ in 0..2 {
            match limiter.decide(&to_ours(pin(n))).await {
                Ok(response) => blocked += usize::from(block_of(&response).is_some()),
                Err(_) => refused += 1,
            }
        }
    }
    assert!(memory.key_count() <= 300, "{} keys", memory.key_count());
    assert!(
        blocked > 50 && refused > 0,
        "{blocked} blocked, {refused} refused"
    );
    // Two days on (a client is remembered a day by default), every state has expired: room
    // for new offenders again.
    clock.advance(2 * 86_400 * SECOND);
    memory.sweep_expired();
    assert!(limiter.decide(&to_ours(pin(5000))).await.is_ok());
}

/// A request of Envoy's protos as sluice's own.
fn to_ours(request: RateLimitRequest) -> sluice_proto::RateLimitRequest {
    use prost::Message;
    sluice_proto::RateLimitRequest::decode(request.encode_to_vec().as_slice()).expect("decode")
}

/// Through the real binary: five logins, two denials, then a block with `Retry-After` and the
/// metadata; a blocked call before its end.
async fn login_is_blocked_through_the_binary(sluice: &Sluice) {
    let mut client = sluice.client().await;
    let login = || request("auth", vec![descriptor(&[("user", "mallory")])]);
    for _ in 0..6 {
        call(&mut client, login()).await;
    }
    let imposed = call(&mut client, login()).await;
    assert_eq!(overall(&imposed), Code::OverLimit);
    let retry = imposed
        .response_headers_to_add
        .iter()
        .find(|h| h.key == "Retry-After")
        .map(|h| h.value.clone());
    assert_eq!(retry.as_deref(), Some("60"));
    assert_eq!(imposed.statuses[0].limit_remaining, 0);
    let metadata = imposed.dynamic_metadata.expect("sluice.penalty");
    let block = &metadata.fields["sluice.penalty"];
    let text = format!("{block:?}");
    assert!(text.contains("until") && text.contains("offence"), "{text}");
    let blocked = call(&mut client, login()).await;
    assert_eq!(overall(&blocked), Code::OverLimit);
    let (_, metrics) = sluice.http_get("/metrics");
    assert_eq!(total(&metrics, "sluice_penalties_imposed_total"), 1.0);
    assert_eq!(total(&metrics, "sluice_penalty_denials_total"), 1.0);
}

const HEADERS: [(&str, &str); 1] = [("LIMIT_RESPONSE_HEADERS_ENABLED", "true")];

#[tokio::test]
async fn through_the_binary_on_memory_redis_and_a_cluster() {
    let files = [("config.yaml", CONFIG)];
    let memory = Sluice::start_with(&files, &[], &HEADERS);
    login_is_blocked_through_the_binary(&memory).await;

    let (redis, on_redis) = Sluice::on_own_redis(&files, &[], &HEADERS);
    login_is_blocked_through_the_binary(&on_redis).await;
    // The record lives until a quiet 10 minutes after the block: its TTL says so.
    let ttl: u64 = cli(redis.port, &["PTTL", "{auth_user_mallory_}penalty"])
        .trim()
        .parse()
        .expect("a TTL");
    assert!((655_000..=660_100).contains(&ttl), "{ttl} ms");

    // On a Cluster the limit's key and its record share a slot (one script call).
    let nodes = start_cluster();
    let flags = cluster_flags(&nodes);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let on_cluster = Sluice::start_with(&files, &flags, &HEADERS);
    login_is_blocked_through_the_binary(&on_cluster).await;
}

#[tokio::test]
async fn the_gauge_counts_clients_blocked_now() {
    let sluice = Sluice::start(CONFIG, &[]);
    let mut client = sluice.client().await;
    for pin in ["a", "b"] {
        for _ in 0..2 {
            call_one(&mut client, "auth", &[("pin", pin)]).await;
        }
    }
    let (_, text) = sluice.http_get("/metrics");
    assert_eq!(
        total(&text, "sluice_penalty_blocked_clients"),
        2.0,
        "{text}"
    );
    // The blocks last a second.
    std::thread::sleep(std::time::Duration::from_millis(2100));
    let (_, text) = sluice.http_get("/metrics");
    assert_eq!(total(&text, "sluice_penalty_blocked_clients"), 0.0);
}
