//! The admin API (docs/admin.md) through its port: overrides replace a rule's limits (all of
//! them, or one by name) and give way to a request's own limit; unlimited and shadow mode by
//! override; reset and credit; errors naming the field with nothing half-applied; no call
//! without authentication; on the memory store and on Redis.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::{
    call, clear_of_a_windows_end, code, descriptor, descriptor_with_limit, http_exchange,
    http_request_with, overall, redis::RedisServer, request, Code, Sluice, Unit,
};

use crate::support::admin::*;

#[test]
fn an_override_replaces_the_rule_s_limit_for_its_descriptor_only_until_deleted() {
    each_store(|sluice| {
        put_override(
            sluice,
            &[("api_key", "acme")],
            None,
            json!({"unit": "minute", "requests_per_unit": 5}),
        );
        assert_eq!(block_on(admitted(sluice, &[("api_key", "acme")], 7)), 5);
        assert_eq!(
            block_on(admitted(sluice, &[("api_key", "beta")], 3)),
            2,
            "other tenants keep the rule"
        );
        let state = state_of(sluice, &[("api_key", "acme")]);
        assert_eq!(state["limits"][0]["source"], "override");
        assert_eq!(state["limits"][0]["requests_per_unit"], 5);
        assert_eq!(state["limits"][0]["used"], 5);
        assert_eq!(state["limits"][0]["remaining"], 0);
        let (status, listed) = admin(sluice, "GET", "/v1/overrides?domain=tenants", Value::Null);
        assert_eq!(status, 200);
        assert_eq!(
            listed["overrides"].as_array().map(Vec::len),
            Some(1),
            "{listed}"
        );
        assert_eq!(listed["overrides"][0]["updated_by"], "token:ops");
        let (_, rlconfig) = sluice.http_get("/rlconfig");
        assert!(rlconfig.contains("# overrides in force: 1"), "{rlconfig}");
        let (_, metrics) = sluice.http_get("/metrics");
        let changes = r#"sluice_admin_changes_total{operation="put_override"}"#;
        assert_eq!(
            crate::support::series(&metrics, changes),
            Some(1.0),
            "{metrics}"
        );
        assert_eq!(
            crate::support::series(&metrics, "sluice_overrides"),
            Some(1.0)
        );
        let target = json!({"domain": "tenants", "descriptor": entry_list(&[("api_key", "acme")])});
        let (status, deleted) = admin(sluice, "DELETE", "/v1/overrides", target.clone());
        assert_eq!(status, 200, "{deleted}");
        assert_eq!(deleted["previous"]["limit"]["requests_per_unit"], 5);
        assert_eq!(
            state_of(sluice, &[("api_key", "acme")])["limits"][0]["source"],
            "config"
        );
        let (status, again) = admin(sluice, "DELETE", "/v1/overrides", target);
        assert_eq!((status, again["code"].as_str()), (404, Some("NOT_FOUND")));
    });
}

#[test]
fn a_request_s_own_limit_still_comes_first() {
    each_store(|sluice| {
        put_override(
            sluice,
            &[("api_key", "own")],
            None,
            json!({"unit": "minute", "requests_per_unit": 50}),
        );
        let admitted = block_on(async {
            let mut client = sluice.client().await;
            let mut ok = 0;
            for _ in 0..4 {
                let own = descriptor_with_limit(&[("api_key", "own")], 1, Unit::Minute as i32);
                let response = call(&mut client, request("tenants", vec![own])).await;
                ok += usize::from(overall(&response) == Code::Ok);
            }
            ok
        });
        assert_eq!(admitted, 1);
    });
}

#[test]
fn a_named_override_replaces_that_limit_and_keeps_the_others() {
    each_store(|sluice| {
        put_override(
            sluice,
            &[("user", "u1")],
            Some("per_minute"),
            json!({"unit": "minute", "requests_per_unit": 6, "algorithm": "token_bucket"}),
        );
        assert_eq!(block_on(admitted(sluice, &[("user", "u1")], 8)), 6);
        let state = state_of(sluice, &[("user", "u1")]);
        let limits = state["limits"].as_array().expect("limits");
        assert_eq!(limits.len(), 2);
        assert_eq!(
            (
                limits[0]["name"].as_str(),
                limits[0]["source"].as_str(),
                limits[0]["algorithm"].as_str()
            ),
            (Some("per_minute"), Some("override"), Some("token_bucket"))
        );
        assert_eq!(
            (
                limits[1]["name"].as_str(),
                limits[1]["source"].as_str(),
                limits[1]["used"].as_u64()
            ),
            (Some("per_hour"), Some("config"), Some(6))
        );
    });
}

#[test]
fn unlimited_and_shadow_mode_are_set_by_an_override() {
    each_store(|sluice| {
        put_override(
            sluice,
            &[("api_key", "free")],
            None,
            json!({"unlimited": true}),
        );
        assert_eq!(block_on(admitted(sluice, &[("api_key", "free")], 10)), 10);
        let state = state_of(sluice, &[("api_key", "free")]);
        assert_eq!(
            (
                state["unlimited"].as_bool(),
                state["unlimited_source"].as_str()
            ),
            (Some(true), Some("override"))
        );
        let mut body = put_body(
            "tenants",
            &[("api_key", "trial")],
            None,
            json!({"unit": "minute", "requests_per_unit": 1}),
        );
        body["shadow_mode"] = json!(true);
        assert_eq!(admin(sluice, "PUT", "/v1/overrides", body).0, 200);
        let codes = block_on(async {
            let mut client = sluice.client().await;
            let mut codes = Vec::new();
            for _ in 0..3 {
                let response = call(
                    &mut client,
                    request("tenants", vec![descriptor(&[("api_key", "trial")])]),
                )
                .await;
                codes.push((overall(&response), code(&response.statuses[0])));
            }
            codes
        });
        // Shadow mode: the limit counts, and never denies.
        assert!(
            codes.iter().all(|c| *c == (Code::Ok, Code::Ok)),
            "{codes:?}"
        );
        let state = state_of(sluice, &[("api_key", "trial")]);
        assert_eq!(
            (
                state["limits"][0]["shadow_mode"].as_bool(),
                state["limits"][0]["source"].as_str()
            ),
            (Some(true), Some("override")),
            "{state}"
        );
        put_override(
            sluice,
            &[("api_key", "strict")],
            None,
            json!({"unit": "minute", "requests_per_unit": 1}),
        );
        assert_eq!(
            block_on(admitted(sluice, &[("api_key", "strict")], 3)),
            1,
            "without shadow mode it denies"
        );
    });
}

#[test]
fn a_refused_call_names_its_field_and_changes_nothing() {
    each_store(|sluice| {
        let cases = [
            (
                put_body(
                    "nowhere",
                    &[("api_key", "x")],
                    None,
                    json!({"unit": "minute", "requests_per_unit": 1}),
                ),
                "domain",
            ),
            (
                put_body(
                    "tenants",
                    &[("api_key", "x")],
                    None,
                    json!({"unit": "fortnight", "requests_per_unit": 1}),
                ),
                "limit.unit",
            ),
            (
                put_body(
                    "tenants",
                    &[("api_key", "x")],
                    None,
                    json!({"unit": "minute", "requests_per_unit": 1, "burst": 2}),
                ),
                "limit.burst",
            ),
            (
                put_body(
                    "tenants",
                    &[("nokey", "x")],
                    None,
                    json!({"unit": "minute", "requests_per_unit": 1}),
                ),
                "descriptor",
            ),
            (
                put_body(
                    "tenants",
                    &[("api_key", "")],
                    None,
                    json!({"unit": "minute", "requests_per_unit": 1}),
                ),
                "descriptor[0].value",
            ),
            (
                put_body(
                    "tenants",
                    &[("user", "x")],
                    Some("per_day"),
                    json!({"unit": "minute", "requests_per_unit": 1}),
                ),
                "name",
            ),
            (
                json!({"domain": "tenants", "limit": {"unit": "minute"}}),
                "descriptor",
            ),
            (
                json!({"domain": "tenants", "descriptor": entry_list(&[("api_key", "x")]), "limit": {"unit": "minute"}, "ttl": "5m", "expires_at": "2099-01-01T00:00:00Z"}),
                "ttl",
            ),
            (
                json!({"domain": "tenants", "descriptor": entry_list(&[("api_key", "x")]), "limit": {"unit": "minute"}, "expires_at": "2001-01-01T00:00:00Z"}),
                "expires_at",
            ),
        ];
        for (body, field) in cases {
            let (status, error) = admin(sluice, "PUT", "/v1/overrides", body.clone());
            assert_eq!(status, 400, "{body} -> {error}");
            assert_eq!(error["code"], "INVALID_ARGUMENT", "{error}");
            assert_eq!(error["field"], field, "{body} -> {error}");
        }
        let (_, listed) = admin(sluice, "GET", "/v1/overrides?domain=tenants", Value::Null);
        assert_eq!(listed["overrides"], json!([]), "nothing half-applied");
        let (status, error) = admin(
            sluice,
            "POST",
            "/v1/descriptors/credit",
            json!({"domain": "tenants", "descriptor": entry_list(&[("api_key", "x")]), "amount": 0}),
        );
        assert_eq!((status, error["field"].as_str()), (400, Some("amount")));
    });
}

#[test]
fn no_call_passes_without_a_token_in_force() {
    let flags = AdminFlags::new();
    let sluice = Sluice::start(CONFIG, &flags.args());
    let addr = sluice.admin_addr.expect("admin port");
    let list = json!(null);
    let (status, body) = admin_call(addr, None, "GET", "/v1/overrides?domain=tenants", &list);
    assert_eq!(
        (status, body["code"].as_str()),
        (401, Some("UNAUTHENTICATED"))
    );
    let (status, _) = admin_call(
        addr,
        Some("not-the-token-0123456789"),
        "GET",
        "/v1/overrides?domain=tenants",
        &list,
    );
    assert_eq!(status, 401);
    let put = put_body(
        "tenants",
        &[("api_key", "sneaky")],
        None,
        json!({"unlimited": true}),
    );
    assert_eq!(admin_call(addr, None, "PUT", "/v1/overrides", &put).0, 401);
    assert_eq!(
        block_on(admitted(&sluice, &[("api_key", "sneaky")], 3)),
        2,
        "no override was put"
    );
}

#[test]
fn an_override_reaches_another_replica_within_a_second() {
    let redis = RedisServer::start(&[]);
    let flags = AdminFlags::new();
    let files = [("config.yaml", CONFIG)];
    let first = Sluice::on_redis_url(&files, &redis.url(), &flags.args(), &[]);
    let second = Sluice::on_redis_url(&files, &redis.url(), &[], &[]);
    let started = Instant::now();
    put_override(
        &first,
        &[("api_key", "spread")],
        None,
        json!({"unlimited": true}),
    );
    let seen_after = block_on(async {
        let mut client = second.client().await;
        loop {
            let response = call(
                &mut client,
                request("tenants", vec![descriptor(&[("api_key", "spread")])]),
            )
            .await;
            // The rule's 2 per minute would deny the third call; the override admits all.
            if overall(&response) == Code::Ok && started.elapsed() > Duration::ZERO {
                let mut all = true;
                for _ in 0..3 {
                    let again = call(
                        &mut client,
                        request("tenants", vec![descriptor(&[("api_key", "spread")])]),
                    )
                    .await;
                    all &= overall(&again) == Code::Ok;
                }
                if all {
                    return started.elapsed();
                }
            }
            assert!(started.elapsed() < Duration::from_secs(5), "never seen");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    assert!(
        seen_after < Duration::from_secs(1),
        "seen after {seen_after:?}"
    );
    // A replica that starts loads the overrides before it serves.
    let third = Sluice::on_redis_url(&files, &redis.url(), &[], &[]);
    assert_eq!(block_on(admitted(&third, &[("api_key", "spread")], 5)), 5);
    // A delete reaches the others alike.
    let target = json!({"domain": "tenants", "descriptor": entry_list(&[("api_key", "spread")])});
    assert_eq!(admin(&first, "DELETE", "/v1/overrides", target).0, 200);
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        state_of(&first, &[("api_key", "spread")])["unlimited"],
        false
    );
    // Whether the rule's 2 a minute were spent before the override reached the second replica
    // depends on timing; either way the rule, not the override, answers now.
    assert!(
        block_on(admitted(&second, &[("api_key", "spread")], 3)) <= 2,
        "the override still applies at the second replica after its delete"
    );
}

#[test]
fn overrides_live_in_one_slot_of_a_cluster() {
    let nodes = crate::support::redis::start_cluster();
    let flags = AdminFlags::new();
    let cluster = crate::support::redis::cluster_flags(&nodes);
    let mut args: Vec<&str> = cluster.iter().map(String::as_str).collect();
    args.extend(flags.args());
    let first = Sluice::start_with(&[("config.yaml", CONFIG)], &args, &[]);
    let second = Sluice::start_with(&[("config.yaml", CONFIG)], &args, &[]);
    // Every count below is of one minute's window.
    block_on(clear_of_a_windows_end(
        Duration::from_secs(60),
        Duration::from_secs(15),
    ));
    put_override(
        &first,
        &[("api_key", "sharded")],
        None,
        json!({"unit": "minute", "requests_per_unit": 4}),
    );
    assert_eq!(block_on(admitted(&first, &[("api_key", "sharded")], 6)), 4);
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        state_of(&second, &[("api_key", "sharded")])["limits"][0]["used"],
        4
    );
    let (status, credited) = admin(
        &second,
        "POST",
        "/v1/descriptors/credit",
        json!({"domain": "tenants", "descriptor": entry_list(&[("api_key", "sharded")]), "amount": 2}),
    );
    assert_eq!(status, 200, "{credited}");
    assert_eq!(block_on(admitted(&first, &[("api_key", "sharded")], 3)), 2);
    // A limit with a modifier keeps its state under a key tagged for its slot: read there.
    assert_eq!(block_on(admitted(&first, &[("login", "sharded")], 1)), 1);
    let login = &state_of(&second, &[("login", "sharded")])["limits"][0];
    assert_eq!(
        (&login["used"], &login["remaining"]),
        (&json!(1), &json!(0)),
        "{login}"
    );
    // Two holds of 40 of the 100 open, the third does not fit.
    assert_eq!(block_on(admitted(&first, &[("llm", "sharded")], 3)), 2);
    let llm = &state_of(&second, &[("llm", "sharded")])["limits"][0];
    assert_eq!(
        (&llm["used"], &llm["held"], &llm["remaining"]),
        (&json!(0), &json!(80), &json!(20)),
        "{llm}"
    );
}

#[test]
fn an_override_stops_applying_when_it_expires() {
    each_store(|sluice| {
        let mut body = put_body(
            "tenants",
            &[("api_key", "promo")],
            None,
            json!({"unlimited": true}),
        );
        body["ttl"] = json!("1s");
        let (status, stored) = admin(sluice, "PUT", "/v1/overrides", body);
        assert_eq!(status, 200, "{stored}");
        assert!(stored["override"]["expires_at"]
            .as_str()
            .is_some_and(|at| at.ends_with('Z')));
        assert_eq!(block_on(admitted(sluice, &[("api_key", "promo")], 4)), 4);
        std::thread::sleep(Duration::from_millis(1200));
        assert_eq!(
            state_of(sluice, &[("api_key", "promo")])["unlimited"],
            false
        );
        assert_eq!(
            block_on(admitted(sluice, &[("api_key", "promo")], 3)),
            2,
            "the rule's 2 a minute again"
        );
    });
}

#[test]
fn a_body_over_the_bound_is_read_then_answered_413_and_nothing_changes() {
    let flags = AdminFlags::new();
    let sluice = Sluice::start(CONFIG, &flags.args());
    let addr = sluice.admin_addr.expect("the admin port is served");
    let authorization = format!("Bearer {TOKEN}");
    let headers = [("Authorization", authorization.as_str())];
    let mut put = put_body(
        "tenants",
        &[("api_key", "big")],
        None,
        json!({"unit": "minute", "requests_per_unit": 5}),
    );
    put["padding"] = json!("x".repeat(3 << 20));
    // The whole 3 MiB body is written before the answer is read: it is read, then answered.
    let (status, answer) =
        http_request_with(addr, "PUT", "/v1/overrides", &headers, &put.to_string());
    assert_eq!(status, 413, "{answer}");
    let answer: Value = serde_json::from_str(&answer).expect("a JSON error");
    assert_eq!(answer["field"], "body", "{answer}");
    assert!(
        answer["message"]
            .as_str()
            .is_some_and(|m| m.contains("1048576")),
        "{answer}"
    );
    // Without a length (chunked), the same.
    let (status, _) = chunked_request(addr, "/v1/overrides", &authorization, 2 << 20);
    assert_eq!(status, 413);
    // Nothing was stored, and the port answers as before.
    assert_eq!(
        state_of(&sluice, &[("api_key", "big")])["limits"][0]["source"],
        "config"
    );
}

/// A PUT of `size` bytes of padding, sent chunked and written whole before the answer is
/// read; its status and the whole response.
fn chunked_request(
    addr: SocketAddr,
    path: &str,
    authorization: &str,
    size: usize,
) -> (u16, String) {
    use std::io::Write;
    let head = format!(
        "PUT {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: {authorization}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    );
    http_exchange(addr, |stream| {
        stream.write_all(head.as_bytes()).expect("send the head");
        let chunk = vec![b' '; 64 * 1024];
        for _ in 0..size / chunk.len() {
            stream
                .write_all(format!("{:x}\r\n", chunk.len()).as_bytes())
                .and_then(|()| stream.write_all(&chunk))
                .and_then(|()| stream.write_all(b"\r\n"))
                .expect("the whole body is written");
        }
        stream.write_all(b"0\r\n\r\n").expect("the last chunk");
    })
}
