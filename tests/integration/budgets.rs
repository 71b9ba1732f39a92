//! Reserved budgets (docs/budgets.md): a request holds an estimate while it runs and settles
//! the actual cost at its end, by the token sluice gave it or by a name of its own; every
//! settle case (duplicate, unknown, late, lapsed), the estimate a client names, several
//! budgets on one descriptor, all-or-nothing with a request's other limits, and the refusals
//! at load, on every store in-process.

use sluice_core::modifier::reserve::SETTLE_KEY;

/// The token of the holds a response opened.
fn token_in(response: &sluice_proto::RateLimitResponse) -> Option<String> {
    sluice_limiter::ticket::token_in(response, SETTLE_KEY)
}
use sluice_proto::rate_limit_response::Code as OurCode;
use sluice_proto::RateLimitResponse as OurResponse;

use crate::support::redis::RedisServer;
use crate::support::stores::{every_store, InProcess};

const CONFIG: &str = include_str!("../fixtures/cases/budgets/config.yaml");
const SECOND: u64 = 1_000_000;

fn is_ok(response: &OurResponse) -> bool {
    response.overall_code == OurCode::Ok as i32
}

/// The text value of dynamic metadata field `key`.
fn metadata(response: &OurResponse, key: &str) -> Option<String> {
    use prost_types::value::Kind;
    match &response.dynamic_metadata.as_ref()?.fields.get(key)?.kind {
        Some(Kind::StringValue(text)) => Some(text.clone()),
        _ => None,
    }
}

/// Opens a hold on `descriptor`: the token and what remains, when admitted.
async fn open(service: &InProcess, descriptor: &str) -> Option<(String, u32)> {
    let response = service.ask("ai", &[descriptor]).await;
    assert_eq!(
        is_ok(&response),
        token_in(&response).is_some(),
        "{}: a token exactly when admitted",
        service.store
    );
    let remaining = response.statuses[0].limit_remaining;
    token_in(&response).map(|token| (token, remaining))
}

/// Settles `token` on `descriptor` at `actual`: what remains after it.
async fn settle(service: &InProcess, descriptor: &str, token: &str, actual: u64) -> u32 {
    let response = service
        .ask(
            "ai",
            &[&format!("{descriptor},sluice.reserve={token}+{actual}")],
        )
        .await;
    assert!(
        is_ok(&response),
        "{}: a settle is never denied",
        service.store
    );
    assert_eq!(token_in(&response), None, "a settle opens nothing");
    response.statuses[0].limit_remaining
}

/// What remains of `descriptor`'s budget net of its holds, read with a settle of nothing
/// under a token no one holds (it charges 0 and frees nothing).
async fn remaining(service: &InProcess, descriptor: &str, probe: u64) -> u32 {
    settle(service, descriptor, &format!("probe-{probe}"), 0).await
}

#[tokio::test]
async fn a_request_holds_its_estimate_and_settles_its_actual_on_every_store() {
    let redis = RedisServer::start(&[]);
    for service in every_store(&redis.url(), CONFIG, &Default::default()).await {
        let store = service.store;
        // A check (no hits_addend) holds `amount`: 10,000 less 2,000.
        let (first, left) = open(&service, "api_key=k").await.expect("first");
        assert_eq!(left, 8_000, "{store}: net of the hold");
        // A client that names its max_tokens holds that, capped at half the budget.
        let (second, left) = open(&service, "api_key=k+7000").await.expect("second");
        assert_eq!(left, 3_000, "{store}: 5,000 held at most");
        let (third, left) = open(&service, "api_key=k+3000").await.expect("third");
        assert_eq!(left, 0, "{store}");
        let denied = service.ask("ai", &["api_key=k+1"]).await;
        assert!(!is_ok(&denied), "{store}: used + held + 1 > 10,000");
        assert_eq!(token_in(&denied), None);
        assert_eq!(
            metadata(&denied, "sluice.denied_by").as_deref(),
            Some("tokens_per_hour"),
            "{store}: the budget that denied, by name"
        );
        // The first used 2,500 of its 2,000: the hold goes, the actual lands.
        assert_eq!(
            settle(&service, "api_key=k", &first, 2_500).await,
            0,
            "{store}"
        );
        // The second used 100 of its 5,000.
        assert_eq!(
            settle(&service, "api_key=k", &second, 100).await,
            4_400,
            "{store}: 10,000 - 2,600 charged - 3,000 held"
        );
        // A duplicate settle charges nothing more.
        assert_eq!(
            settle(&service, "api_key=k", &second, 100).await,
            4_400,
            "{store}"
        );
        // A token nobody holds (lost, or another replica's that lapsed) charges once.
        assert_eq!(
            settle(&service, "api_key=k", "00000000000000aa", 400).await,
            4_000,
            "{store}"
        );
        assert_eq!(
            settle(&service, "api_key=k", "00000000000000aa", 400).await,
            4_000,
            "{store}: once"
        );
        assert_eq!(settle(&service, "api_key=k", &third, 3_000).await, 4_000);

        let calls = |call: &str| {
            service.series(&format!(
                r#"sluice_reserve_calls_total{{domain="ai",key1="api_key",call="{call}"}}"#
            ))
        };
        assert_eq!(calls("opened"), 3.0, "{store}");
        assert_eq!(calls("settled"), 3.0, "{store}");
        assert_eq!(calls("duplicate"), 2.0, "{store}");
        assert_eq!(calls("unknown"), 1.0, "{store}");
        service.metrics.upkeep();
        let labels = r#"{domain="ai",key1="api_key"}"#;
        let series = |name: &str| service.series(&format!("{name}{labels}"));
        assert_eq!(series("sluice_reserve_held"), 0.0, "{store}: all settled");
        // 500 over, 4,900 under, exact.
        assert_eq!(
            series("sluice_reserve_estimate_error_count"),
            3.0,
            "{store}"
        );
        assert_eq!(
            series("sluice_reserve_estimate_error_sum"),
            -4_400.0,
            "{store}"
        );
        let under =
            r#"sluice_reserve_estimate_error_bucket{domain="ai",key1="api_key",le="-1000"}"#;
        assert_eq!(service.series(under), 1.0, "{store}");
    }
}

#[tokio::test]
async fn a_hold_named_by_the_request_settles_by_that_name_on_every_store() {
    let redis = RedisServer::start(&[]);
    for service in every_store(&redis.url(), CONFIG, &Default::default()).await {
        let store = service.store;
        let (token, left) = open(&service, "api_key=n,sluice.hold=req-42")
            .await
            .expect("opened");
        assert_eq!(left, 8_000, "{store}: the entry is set aside in matching");
        assert_ne!(token, "req-42", "the token is sluice's form of the name");
        // The end of the stream sends the same x-request-id back, not the token.
        assert_eq!(settle(&service, "api_key=n", "req-42", 1_000).await, 9_000);
        // And the token names the same hold: settled already.
        assert_eq!(settle(&service, "api_key=n", &token, 1_000).await, 9_000);
    }
}

#[tokio::test]
async fn a_hold_never_settled_lapses_and_costs_nothing_on_every_store() {
    let redis = RedisServer::start(&[]);
    for service in every_store(&redis.url(), CONFIG, &Default::default()).await {
        let store = service.store;
        // Early in the hour, so that max_hold (2 minutes) ends first.
        let (_, left) = open(&service, "api_key=l+5000").await.expect("opened");
        assert_eq!(left, 5_000, "{store}");
        service.clock.advance(60 * SECOND);
        let (_, left) = open(&service, "api_key=l+1000").await.expect("second");
        assert_eq!(left, 4_000, "{store}");
        service.clock.advance(59 * SECOND);
        assert_eq!(remaining(&service, "api_key=l", 1).await, 4_000, "{store}");
        service.clock.advance(SECOND);
        assert_eq!(
            remaining(&service, "api_key=l", 2).await,
            9_000,
            "{store}: the first lapsed at 2 minutes, nothing charged"
        );
        let lapsed = r#"sluice_reserve_lapsed_total{domain="ai",key1="api_key"}"#;
        assert_eq!(service.series(lapsed), 1.0, "{store}");
        let held = r#"sluice_reserve_held{domain="ai",key1="api_key"}"#;
        assert_eq!(
            service.series(held),
            1_000.0,
            "{store}: 6,000 opened, 5,000 lapsed"
        );
        service.clock.advance(60 * SECOND);
        assert_eq!(remaining(&service, "api_key=l", 3).await, 10_000, "{store}");
        // Its settle after it lapsed charges the actual once, and frees nothing else.
        let (late, _) = open(&service, "api_key=l").await.expect("opened");
        service.clock.advance(121 * SECOND);
        assert_eq!(settle(&service, "api_key=l", &late, 700).await, 9_300);
    }
}

#[tokio::test]
async fn every_budget_of_a_descriptor_holds_or_none_does_on_every_store() {
    let redis = RedisServer::start(&[]);
    for service in every_store(&redis.url(), CONFIG, &Default::default()).await {
        let store = service.store;
        // 1,000 a minute and 5,000 a day, 400 held in each.
        for expected in [600, 200] {
            let response = service.ask("ai", &["tenant=t"]).await;
            assert!(is_ok(&response), "{store}");
            assert_eq!(response.statuses[0].limit_remaining, expected, "{store}");
        }
        let denied = service.ask("ai", &["tenant=t"]).await;
        assert!(!is_ok(&denied), "{store}: the minute's budget is held");
        assert_eq!(
            metadata(&denied, "sluice.denied_by").as_deref(),
            Some("tokens_per_minute"),
            "{store}"
        );
        service.clock.advance(60 * SECOND);
        // The minute's holds lapse with its window; the day's stay held.
        let response = service.ask("ai", &["tenant=t"]).await;
        assert!(is_ok(&response), "{store}");
        assert_eq!(
            response.statuses[0].limit_remaining, 600,
            "{store}: the minute binds, 4,200 remain of the day's"
        );
        // A request another limit denies holds nothing: the free plan's one an hour.
        assert!(is_ok(&service.ask("ai", &["plan=free"]).await));
        let vetoed = service.ask("ai", &["api_key=v", "plan=free"]).await;
        assert!(!is_ok(&vetoed), "{store}");
        assert_eq!(token_in(&vetoed), None, "{store}: no hold, no token");
        assert_eq!(remaining(&service, "api_key=v", 3).await, 10_000, "{store}");
    }
}

#[tokio::test]
async fn a_token_bucket_budget_holds_against_its_tokens_on_every_store() {
    let redis = RedisServer::start(&[]);
    for service in every_store(&redis.url(), CONFIG, &Default::default()).await {
        let store = service.store;
        let mut tokens = Vec::new();
        for _ in 0..6 {
            tokens.push(open(&service, "bucket=b").await.expect("opened").0);
        }
        assert!(open(&service, "bucket=b").await.is_none(), "{store}");
        // A settle past what the bucket holds takes it into debt.
        assert_eq!(settle(&service, "bucket=b", &tokens[0], 3_000).await, 0);
        service.clock.advance(10 * SECOND);
        // 10 s refill 1,000; the debt of 2,000 is not yet repaid.
        assert!(open(&service, "bucket=b").await.is_none(), "{store}");
    }
}

#[test]
fn reserve_is_refused_at_load_where_it_has_no_meaning() {
    let refused = [
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {algorithm: concurrency, unit: minute, requests_per_unit: 5}\n    reserve: {amount: 1}\n",
            "descriptors[0].reserve",
            "concurrency",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      algorithm: leaky_bucket\n      unit: minute\n      requests_per_unit: 60\n      reserve: {amount: 10}\n",
            "descriptors[0].rate_limit.reserve.amount",
            "burst",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5, reserve: {amount: 1}}\n    reserve: {amount: 1}\n",
            "descriptors[0].reserve",
            "once",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true}\n    reserve: {amount: 1}\n",
            "descriptors[0].reserve",
            "unlimited",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5}\n    reserve: {amount: 1, max_hold: forever}\n",
            "descriptors[0].reserve.max_hold",
            "",
        ),
    ];
    for (yaml, path, why) in refused {
        let error = sluice_config::load_str("budget.yaml", yaml, Default::default())
            .expect_err(yaml)
            .to_string();
        assert!(error.contains(path) && error.contains(why), "{error}");
        assert!(
            error.contains("budget.yaml:"),
            "names the file and line: {error}"
        );
    }
}

#[tokio::test]
async fn envoys_calls_hold_and_settle_on_redis_by_token_and_by_request_id() {
    use crate::support::*;
    let (_redis, sluice) = Sluice::on_own_redis(&[("config.yaml", CONFIG)], &[], &[]);
    let (status, rlconfig) = sluice.http_get("/rlconfig");
    assert_eq!(status, 200);
    assert!(
        rlconfig.contains(
            "ai.api_key: unit=HOUR requests_per_unit=10000, shadow_mode: false, reserve: \
             amount 2000, max_fraction 0.5, max_hold 2m, max_holds 1000"
        ),
        "{rlconfig}"
    );
    let mut client = sluice.client().await;
    let ask = |entries: &[(&str, &str)], hits: u64| {
        request("ai", vec![descriptor_with_hits(entries, hits)])
    };
    // By the token in the metadata, as the Envoy example sends it.
    let opened = call(&mut client, ask(&[("api_key", "e")], 0)).await;
    assert_eq!(overall(&opened), Code::Ok);
    assert_eq!(opened.statuses[0].limit_remaining, 8_000);
    let token = metadata_text(&opened, "sluice.reserve").expect("a token");
    let settle = [("api_key", "e"), ("sluice.reserve", token.as_str())];
    let settled = call(&mut client, ask(&settle, 2_500)).await;
    assert_eq!(overall(&settled), Code::Ok);
    assert_eq!(settled.statuses[0].limit_remaining, 7_500);
    // Twice: charged once.
    let again = call(&mut client, ask(&settle, 2_500)).await;
    assert_eq!(again.statuses[0].limit_remaining, 7_500);
    // By the client's x-request-id, for a client that cannot carry metadata.
    let named = [("api_key", "e"), ("sluice.hold", "req-7")];
    let opened = call(&mut client, ask(&named, 5_000)).await;
    assert_eq!(opened.statuses[0].limit_remaining, 2_500);
    let denied = call(&mut client, ask(&[("api_key", "e")], 3_000)).await;
    assert_eq!(overall(&denied), Code::OverLimit);
    assert_eq!(
        metadata_text(&denied, "sluice.denied_by").as_deref(),
        Some("tokens_per_hour")
    );
    let by_name = [("api_key", "e"), ("sluice.reserve", "req-7")];
    let settled = call(&mut client, ask(&by_name, 1_000)).await;
    assert_eq!(settled.statuses[0].limit_remaining, 6_500);
    // An empty name is refused, naming the entry.
    let status = client
        .should_rate_limit(ask(&[("api_key", "e"), ("sluice.reserve", "")], 1))
        .await
        .expect_err("refused");
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(
        status.message().contains("descriptors[0].entries[1].value"),
        "{}",
        status.message()
    );
}

#[tokio::test]
async fn a_vetoed_request_on_a_cluster_takes_back_its_hold() {
    use crate::support::redis::{cluster_flags, start_cluster};
    use crate::support::*;
    let nodes = start_cluster();
    let flags = cluster_flags(&nodes);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let sluice = Sluice::start(CONFIG, &flags);
    let mut client = sluice.client().await;
    let ask = |descriptors: Vec<(&[(&str, &str)], u64)>| {
        request(
            "ai",
            descriptors
                .into_iter()
                .map(|(entries, hits)| descriptor_with_hits(entries, hits))
                .collect(),
        )
    };
    // The free plan's one an hour, used up.
    let plan: &[(&str, &str)] = &[("plan", "free")];
    assert_eq!(
        overall(&call(&mut client, ask(vec![(plan, 1)])).await),
        Code::Ok
    );
    // Each slot's share is decided on its own (the budget's opening is admitted there), then
    // the request is vetoed by the plan: the hold is taken back.
    let budget: &[(&str, &str)] = &[("api_key", "c")];
    let vetoed = call(&mut client, ask(vec![(budget, 0), (plan, 1)])).await;
    assert_eq!(overall(&vetoed), Code::OverLimit);
    assert_eq!(
        metadata_text(&vetoed, "sluice.reserve"),
        None,
        "no hold, no token"
    );
    let opened = call(&mut client, ask(vec![(budget, 7_000)])).await;
    assert_eq!(overall(&opened), Code::Ok);
    assert_eq!(
        opened.statuses[0].limit_remaining, 5_000,
        "nothing was left held by the vetoed request"
    );
}
