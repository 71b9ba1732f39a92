//! The admin API's side of the harness (docs/admin.md): the config and token the tests serve
//! it with, and its JSON calls, shared by the tests in this process and those of a process.

use std::net::SocketAddr;

use serde_json::{json, Value};

use super::{call, descriptor, http_request_with, overall, request, Code, Sluice};

/// The token every test's admin port accepts.
pub const TOKEN: &str = "test-admin-token-0123456789";

pub const CONFIG: &str = r#"
domain: tenants
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: user
    rate_limits:
      - {unit: minute, requests_per_unit: 3, name: per_minute}
      - {unit: hour, requests_per_unit: 100, name: per_hour}
  - key: stream
    rate_limits:
      - {unit: minute, requests_per_unit: 4, algorithm: concurrency, name: in_flight}
      - {unit: minute, requests_per_unit: 50, name: per_minute}
  - key: log
    rate_limit: {unit: minute, requests_per_unit: 3, algorithm: sliding_window_log}
  - key: bucket
    rate_limit: {unit: minute, requests_per_unit: 3, algorithm: token_bucket}
  - key: login
    rate_limit: {unit: hour, requests_per_unit: 1, penalty: {after: 1, block: 1h}}
  - key: llm
    rate_limit: {unit: hour, requests_per_unit: 100, reserve: {amount: 40}}
"#;

/// A token file for the admin port, and the flags that serve it.
pub struct AdminFlags {
    _dir: tempfile::TempDir,
    pub token_file: String,
}

impl AdminFlags {
    pub fn new() -> AdminFlags {
        let dir = tempfile::tempdir().expect("a directory");
        let path = dir.path().join("tokens");
        std::fs::write(&path, format!("# the tests' operator\nops {TOKEN}\n")).expect("write");
        AdminFlags {
            token_file: path.display().to_string(),
            _dir: dir,
        }
    }

    pub fn args(&self) -> Vec<&str> {
        vec![
            "--admin-addr",
            "127.0.0.1:0",
            "--admin-token-file",
            &self.token_file,
        ]
    }
}

/// One JSON call to the admin port with `token` (none: no authorization header).
pub fn admin_call(
    addr: SocketAddr,
    token: Option<&str>,
    method: &str,
    path: &str,
    body: &Value,
) -> (u16, Value) {
    let body = if body.is_null() {
        String::new()
    } else {
        body.to_string()
    };
    let authorization = token.map(|t| format!("Bearer {t}"));
    let headers: Vec<(&str, &str)> = authorization
        .iter()
        .map(|value| ("Authorization", value.as_str()))
        .collect();
    let (status, body) = http_request_with(addr, method, path, &headers, &body);
    (status, serde_json::from_str(&body).unwrap_or(Value::Null))
}

/// The admin port of `sluice`, called with the tests' token.
pub fn admin(sluice: &Sluice, method: &str, path: &str, body: Value) -> (u16, Value) {
    let addr = sluice.admin_addr.expect("the admin port is served");
    admin_call(addr, Some(TOKEN), method, path, &body)
}

/// Puts an override of `limit` for `entries` (and `name`); panics unless it is stored.
pub fn put_override(sluice: &Sluice, entries: &[(&str, &str)], name: Option<&str>, limit: Value) {
    let (status, body) = admin(
        sluice,
        "PUT",
        "/v1/overrides",
        put_body("tenants", entries, name, limit),
    );
    assert_eq!(status, 200, "{body}");
}

pub fn put_body(domain: &str, entries: &[(&str, &str)], name: Option<&str>, limit: Value) -> Value {
    let mut body = json!({"domain": domain, "descriptor": entry_list(entries), "limit": limit});
    if let Some(name) = name {
        body["name"] = json!(name);
    }
    body
}

pub fn entry_list(entries: &[(&str, &str)]) -> Value {
    Value::Array(
        entries
            .iter()
            .map(|(k, v)| json!({"key": k, "value": v}))
            .collect(),
    )
}

/// The state of a descriptor, as the admin API reads it.
pub fn state_of(sluice: &Sluice, entries: &[(&str, &str)]) -> Value {
    let (status, body) = admin(
        sluice,
        "POST",
        "/v1/descriptors/get",
        json!({"domain": "tenants", "descriptor": entry_list(entries)}),
    );
    assert_eq!(status, 200, "{body}");
    body
}

/// How many of `n` calls of `entries` are admitted, one after another.
pub async fn admitted(sluice: &Sluice, entries: &[(&str, &str)], n: usize) -> usize {
    let mut client = sluice.client().await;
    let mut ok = 0;
    for _ in 0..n {
        let response = call(&mut client, request("tenants", vec![descriptor(entries)])).await;
        ok += usize::from(overall(&response) == Code::Ok);
    }
    ok
}

/// Each store the admin API keeps its records in: the memory store, and Redis.
pub fn each_store(test: impl Fn(&Sluice)) {
    let flags = AdminFlags::new();
    let memory = Sluice::start(CONFIG, &flags.args());
    test(&memory);
    drop(memory);
    let (_redis, on_redis) = Sluice::on_own_redis(&[("config.yaml", CONFIG)], &flags.args(), &[]);
    test(&on_redis);
}

pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(future)
}
