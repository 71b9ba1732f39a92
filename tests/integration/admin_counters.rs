//! The admin API's reset and credit (docs/admin.md, "Reset and credit"): what each clears or
//! gives back, what each never touches (leases, holds, penalties unless asked), the algorithms
//! that refuse a credit, and both exact under 64 concurrent clients on two replicas.

use std::time::Duration;

use serde_json::json;

use crate::support::admin::{
    admin, admin_call, admitted, block_on, each_store, entry_list, put_override, state_of,
    AdminFlags, CONFIG, TOKEN,
};
use crate::support::{
    call, clear_of_a_windows_end, descriptor, descriptor_with_hits, metadata_text, overall,
    redis::RedisServer, request, Code, Sluice,
};

#[test]
fn reset_clears_the_counts_but_never_leases_in_flight() {
    each_store(|sluice| {
        assert_eq!(block_on(admitted(sluice, &[("api_key", "r1")], 3)), 2);
        assert_eq!(block_on(admitted(sluice, &[("stream", "s1")], 2)), 2);
        let (status, reset) = admin(
            sluice,
            "POST",
            "/v1/descriptors/reset",
            json!({"domain": "tenants", "descriptor": entry_list(&[("api_key", "r1")])}),
        );
        assert_eq!(status, 200, "{reset}");
        assert_eq!(reset["state"]["limits"][0]["used"], 0);
        assert_eq!(block_on(admitted(sluice, &[("api_key", "r1")], 3)), 2);
        let (status, reset) = admin(
            sluice,
            "POST",
            "/v1/descriptors/reset",
            json!({"domain": "tenants", "descriptor": entry_list(&[("stream", "s1")])}),
        );
        assert_eq!(status, 200, "{reset}");
        let kept = reset["kept"].as_array().expect("kept");
        assert!(
            kept[0]
                .as_str()
                .is_some_and(|k| k.contains("leases in flight")),
            "{reset}"
        );
        let limits = reset["state"]["limits"].as_array().expect("limits");
        assert_eq!(limits[0]["used"], 2, "the two leases stay held: {reset}");
        assert_eq!(limits[1]["used"], 0, "the rate is cleared: {reset}");
    });
}

#[test]
fn credit_admits_that_many_more_now_and_is_refused_where_it_means_nothing() {
    each_store(|sluice| {
        assert_eq!(block_on(admitted(sluice, &[("api_key", "c1")], 3)), 2);
        let (status, credited) = admin(
            sluice,
            "POST",
            "/v1/descriptors/credit",
            json!({"domain": "tenants", "descriptor": entry_list(&[("api_key", "c1")]), "amount": 1}),
        );
        assert_eq!(status, 200, "{credited}");
        assert_eq!(credited["state"]["limits"][0]["remaining"], 1);
        assert_eq!(block_on(admitted(sluice, &[("api_key", "c1")], 3)), 1);
        assert_eq!(block_on(admitted(sluice, &[("bucket", "b1")], 4)), 3);
        let (status, credited) = admin(
            sluice,
            "POST",
            "/v1/descriptors/credit",
            json!({"domain": "tenants", "descriptor": entry_list(&[("bucket", "b1")]), "amount": 2}),
        );
        assert_eq!(status, 200, "{credited}");
        assert_eq!(block_on(admitted(sluice, &[("bucket", "b1")], 4)), 2);
        let (status, refused) = admin(
            sluice,
            "POST",
            "/v1/descriptors/credit",
            json!({"domain": "tenants", "descriptor": entry_list(&[("log", "l1")]), "amount": 1}),
        );
        assert_eq!(
            (status, refused["code"].as_str()),
            (400, Some("FAILED_PRECONDITION")),
            "{refused}"
        );
        assert!(
            refused["message"]
                .as_str()
                .is_some_and(|m| m.contains("sliding_window_log")),
            "{refused}"
        );
        let (status, refused) = admin(
            sluice,
            "POST",
            "/v1/descriptors/credit",
            json!({"domain": "tenants", "descriptor": entry_list(&[("stream", "s9")]), "amount": 1}),
        );
        assert_eq!(
            status, 400,
            "a descriptor with a concurrency limit takes no credit: {refused}"
        );
        let (status, named) = admin(
            sluice,
            "POST",
            "/v1/descriptors/credit",
            json!({"domain": "tenants", "descriptor": entry_list(&[("stream", "s9")]), "name": "per_minute", "amount": 1}),
        );
        assert_eq!(status, 200, "its rate limit by name does: {named}");
    });
}

#[test]
fn a_read_shows_what_a_modified_limit_counts_past_its_limit_too_on_both_stores() {
    each_store(|sluice| {
        block_on(async {
            // Every count below is of one hour's window.
            clear_of_a_windows_end(Duration::from_secs(3600), Duration::from_secs(10)).await;
            let mut client = sluice.client().await;
            let ask = |entries: &[(&str, &str)], hits: u64| {
                request("tenants", vec![descriptor_with_hits(entries, hits)])
            };
            // A reserved budget of 100 an hour (holds of 40): a hold opened, then settled
            // at 50.
            let opened = call(&mut client, ask(&[("llm", "t1")], 0)).await;
            let token = metadata_text(&opened, "sluice.reserve").expect("a token");
            let settle = [("llm", "t1"), ("sluice.reserve", token.as_str())];
            let settled = call(&mut client, ask(&settle, 50)).await;
            assert_eq!(settled.statuses[0].limit_remaining, 50);
            let limit = &state_of(sluice, &[("llm", "t1")])["limits"][0];
            assert_eq!(
                (&limit["used"], &limit["remaining"], &limit["held"]),
                (&json!(50), &json!(50), &json!(0)),
                "{limit}"
            );
            // Another hold: held, not used.
            let opened = call(&mut client, ask(&[("llm", "t1")], 0)).await;
            let token = metadata_text(&opened, "sluice.reserve").expect("a token");
            let limit = &state_of(sluice, &[("llm", "t1")])["limits"][0];
            assert_eq!(
                (&limit["used"], &limit["remaining"], &limit["held"]),
                (&json!(50), &json!(10), &json!(40)),
                "{limit}"
            );
            // Settled at 90: past the limit, as a settle always stands.
            let settle = [("llm", "t1"), ("sluice.reserve", token.as_str())];
            call(&mut client, ask(&settle, 90)).await;
            let limit = &state_of(sluice, &[("llm", "t1")])["limits"][0];
            assert_eq!(
                (&limit["used"], &limit["remaining"], &limit["held"]),
                (&json!(140), &json!(0), &json!(0)),
                "the real count, past the limit: {limit}"
            );
            // A penalized limit of 1 an hour: used once, read as used, and the read sets
            // off no penalty.
            assert_eq!(admitted(sluice, &[("login", "p1")], 1).await, 1);
            let limit = &state_of(sluice, &[("login", "p1")])["limits"][0];
            assert_eq!(
                (&limit["used"], &limit["remaining"]),
                (&json!(1), &json!(0)),
                "{limit}"
            );
        });
    });
}

/// Hits of cost 1 on `entries` by `clients` concurrent clients, `each` apiece, spread over
/// `replicas`; how many were admitted.
async fn hammer(
    replicas: &[&Sluice],
    entries: &[(&str, &str)],
    clients: usize,
    each: usize,
) -> usize {
    let mut tasks = Vec::new();
    for client in 0..clients {
        let mut channel = replicas[client % replicas.len()].client().await;
        let entries: Vec<(String, String)> = entries
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        tasks.push(tokio::spawn(async move {
            let pairs: Vec<(&str, &str)> = entries
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            let mut ok = 0;
            for _ in 0..each {
                let response =
                    call(&mut channel, request("tenants", vec![descriptor(&pairs)])).await;
                ok += usize::from(overall(&response) == Code::Ok);
            }
            ok
        }));
    }
    let mut admitted = 0;
    for task in tasks {
        admitted += task.await.expect("a client");
    }
    admitted
}

#[test]
fn reset_and_credit_are_exact_under_64_clients_on_two_replicas() {
    let redis = RedisServer::start(&[]);
    let flags = AdminFlags::new();
    let files = [("config.yaml", CONFIG)];
    let first = Sluice::on_redis_url(&files, &redis.url(), &flags.args(), &[]);
    let second = Sluice::on_redis_url(&files, &redis.url(), &flags.args(), &[]);
    let key = [("api_key", "exact")];
    // A limit no client reaches, so that every hit counts: the model is a plain sum.
    put_override(
        &first,
        &key,
        None,
        json!({"unit": "hour", "requests_per_unit": 1_000_000}),
    );
    std::thread::sleep(Duration::from_millis(600));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let used = |sluice: &Sluice| {
        state_of(sluice, &key)["limits"][0]["used"]
            .as_u64()
            .expect("used")
    };
    runtime.block_on(async {
        assert_eq!(hammer(&[&first, &second], &key, 64, 20).await, 1280);
        // Credits of 50, ten of them through both replicas, while 64 clients charge 1,280
        // more: the count never falls to 0 on the way, so the model is exact.
        let credits = tokio::task::spawn_blocking({
            let (a, b) = (first.admin_addr, second.admin_addr);
            move || {
                for round in 0..10 {
                    let addr = if round % 2 == 0 { a } else { b }.expect("admin port");
                    let body = json!({"domain": "tenants", "descriptor": entry_list(&[("api_key", "exact")]), "amount": 50});
                    let (status, answer) = admin_call(addr, Some(TOKEN), "POST", "/v1/descriptors/credit", &body);
                    assert_eq!(status, 200, "{answer}");
                }
            }
        });
        assert_eq!(hammer(&[&first, &second], &key, 64, 20).await, 1280);
        credits.await.expect("the credits");
    });
    assert_eq!(used(&first), 2560 - 500);
    assert_eq!(
        used(&second),
        2560 - 500,
        "both replicas read the same counter"
    );
    let (status, reset) = admin(
        &second,
        "POST",
        "/v1/descriptors/reset",
        json!({"domain": "tenants", "descriptor": entry_list(&key)}),
    );
    assert_eq!(
        (status, reset["cleared"].as_u64()),
        (200, Some(1)),
        "{reset}"
    );
    runtime.block_on(async {
        assert_eq!(hammer(&[&first, &second], &key, 64, 5).await, 320);
    });
    assert_eq!(used(&first), 320, "counted from the reset on, exactly");
}

#[test]
fn reset_forgets_a_penalty_only_when_asked_and_never_frees_a_hold() {
    each_store(|sluice| {
        // One admitted, then a denial: an offence, and a block of an hour.
        assert_eq!(block_on(admitted(sluice, &[("login", "mallory")], 3)), 1);
        let target =
            json!({"domain": "tenants", "descriptor": entry_list(&[("login", "mallory")])});
        let (status, _) = admin(sluice, "POST", "/v1/descriptors/reset", target.clone());
        assert_eq!(status, 200);
        assert_eq!(
            block_on(admitted(sluice, &[("login", "mallory")], 1)),
            0,
            "still blocked"
        );
        let mut with_penalties = target.clone();
        with_penalties["penalties"] = json!(true);
        let (status, reset) = admin(sluice, "POST", "/v1/descriptors/reset", with_penalties);
        assert_eq!(status, 200, "{reset}");
        assert_eq!(
            block_on(admitted(sluice, &[("login", "mallory")], 2)),
            1,
            "the block is forgotten"
        );

        // A check opens a hold of 40; a reset clears the count but the hold stays held.
        let opened = block_on(async {
            let mut client = sluice.client().await;
            let check = crate::support::descriptor_with_hits(&[("llm", "k1")], 0);
            overall(&call(&mut client, request("tenants", vec![check])).await)
        });
        assert_eq!(opened, Code::Ok);
        assert_eq!(block_on(admitted(sluice, &[("llm", "k1")], 1)), 1);
        let before = state_of(sluice, &[("llm", "k1")]);
        assert_eq!(before["limits"][0]["held"], 80, "two holds of 40: {before}");
        let (status, reset) = admin(
            sluice,
            "POST",
            "/v1/descriptors/reset",
            json!({"domain": "tenants", "descriptor": entry_list(&[("llm", "k1")])}),
        );
        assert_eq!(status, 200, "{reset}");
        assert_eq!(
            reset["state"]["limits"][0]["held"], 80,
            "holds in flight stay: {reset}"
        );
        assert_eq!(reset["state"]["limits"][0]["remaining"], 20, "{reset}");
    });
}
