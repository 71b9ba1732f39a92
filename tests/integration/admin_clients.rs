//! The admin API through the real binary and clients this project did not write: curl for
//! the JSON calls, grpcurl (by reflection, no proto files) for the gRPC service, each with a
//! bearer token and behind mTLS with an allowed-subject list.

use std::process::Command;

use serde_json::Value;

use crate::support::admin::{AdminFlags, TOKEN};
use crate::support::redis::RedisServer;
use crate::support::{certificate, Sluice};

const CONFIG: &str = r#"
domain: tenants
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 2}
"#;

/// Runs `program` with `args`; its exit success, stdout and stderr.
fn run(program: &str, args: &[&str]) -> (bool, String, String) {
    let output = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program} (scripts/test installs it): {e}"));
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// grpcurl with the bearer header and `data`, calling `method` of the admin service at `addr`.
fn admin_grpc(bearer: &str, addr: &str, data: &str, method: &str) -> (bool, String, String) {
    let method = format!("sluice.admin.v1.Admin/{method}");
    run(
        "grpcurl",
        &["-plaintext", "-H", bearer, "-d", data, addr, &method],
    )
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

#[test]
fn curl_and_grpcurl_put_read_and_list_overrides_on_the_memory_store() {
    curl_and_grpcurl_with(&[]);
}

#[test]
fn curl_and_grpcurl_put_read_and_list_overrides_on_redis() {
    let redis = RedisServer::start(&[]);
    curl_and_grpcurl_with(&["--store", "redis", "--redis-url", &redis.url()]);
}

/// The binary with a bearer token (and `store` flags), driven by curl and grpcurl.
fn curl_and_grpcurl_with(store: &[&str]) {
    let flags = AdminFlags::new();
    let mut args = flags.args();
    args.extend_from_slice(store);
    let sluice = Sluice::start_with(&[("config.yaml", CONFIG)], &args, &[]);
    let addr = sluice
        .admin_addr
        .expect("the admin port is logged")
        .to_string();
    let bearer = format!("Authorization: Bearer {TOKEN}");

    let put = r#"{"domain":"tenants","descriptor":[{"key":"api_key","value":"acme"}],"limit":{"unit":"hour","requests_per_unit":1000},"ttl":"1h"}"#;
    let url = format!("http://{addr}/v1/overrides");
    let (ok, out, err) = run(
        "curl",
        &[
            "-sS",
            "-X",
            "PUT",
            "-H",
            &bearer,
            "-H",
            "Content-Type: application/json",
            "--data",
            put,
            &url,
        ],
    );
    assert!(ok, "{err}");
    let stored = json(&out);
    assert_eq!(
        stored["override"]["limit"]["requests_per_unit"], 1000,
        "{out}"
    );
    assert!(
        stored["override"]["expires_at"]
            .as_str()
            .is_some_and(|at| at.ends_with('Z')),
        "{out}"
    );

    let (ok, out, _) = run(
        "curl",
        &["-sS", "-o", "/dev/null", "-w", "%{http_code}", &url],
    );
    assert!(ok);
    assert_eq!(out, "401", "no token, no call");

    // grpcurl finds the service by reflection, through the same port.
    let (ok, out, err) = run("grpcurl", &["-plaintext", "-H", &bearer, &addr, "list"]);
    assert!(ok, "{err}");
    assert!(out.contains("sluice.admin.v1.Admin"), "{out}");
    let get = r#"{"domain":"tenants","descriptor":[{"key":"api_key","value":"acme"}]}"#;
    let (ok, out, err) = admin_grpc(&bearer, &addr, get, "GetDescriptor");
    assert!(ok, "{err}");
    let state = json(&out);
    assert_eq!(state["limits"][0]["source"], "override", "{out}");
    assert_eq!(state["limits"][0]["requestsPerUnit"], 1000, "{out}");

    let put_named = r#"{"domain":"tenants","descriptor":[{"key":"api_key","value":"beta"}],"limit":{"unit":"minute","requests_per_unit":9,"algorithm":"token_bucket","burst":3}}"#;
    let (ok, out, err) = admin_grpc(&bearer, &addr, put_named, "PutOverride");
    assert!(ok, "{err}");
    assert_eq!(json(&out)["override"]["updatedBy"], "token:ops", "{out}");
    let (ok, out, err) = run(
        "grpcurl",
        &[
            "-plaintext",
            "-H",
            &bearer,
            "-d",
            r#"{"domain":"tenants","pageSize":1}"#,
            &addr,
            "sluice.admin.v1.Admin/ListOverrides",
        ],
    );
    assert!(ok, "{err}");
    let page = json(&out);
    assert_eq!(page["overrides"].as_array().map(Vec::len), Some(1), "{out}");
    let token = page["nextPageToken"]
        .as_str()
        .expect("a next page")
        .to_string();
    let next = format!(r#"{{"domain":"tenants","pageSize":1,"pageToken":"{token}"}}"#);
    let (ok, out, err) = admin_grpc(&bearer, &addr, &next, "ListOverrides");
    assert!(ok, "{err}");
    assert_eq!(
        json(&out)["overrides"].as_array().map(Vec::len),
        Some(1),
        "{out}"
    );

    let bad = r#"{"domain":"tenants","descriptor":[{"key":"api_key","value":"x"}],"limit":{"unit":"fortnight"}}"#;
    let (ok, _, err) = admin_grpc(&bearer, &addr, bad, "PutOverride");
    assert!(!ok);
    assert!(
        err.contains("InvalidArgument") && err.contains("limit.unit"),
        "{err}"
    );
    let (ok, _, err) = run(
        "grpcurl",
        &[
            "-plaintext",
            "-d",
            get,
            &addr,
            "sluice.admin.v1.Admin/GetDescriptor",
        ],
    );
    assert!(!ok);
    assert!(err.contains("Unauthenticated"), "{err}");
    assert!(
        sluice.log().contains("admin change"),
        "every change is logged"
    );
}

#[test]
fn behind_mtls_only_an_allowed_subject_is_let_in() {
    let certs = tempfile::tempdir().expect("a directory");
    let d = certs.path();
    certificate(
        d,
        "ca",
        "server",
        "DNS:localhost,IP:127.0.0.1",
        "serverAuth",
    );
    certificate(d, "ca", "ops", "DNS:ops.example", "clientAuth");
    certificate(d, "ca", "intruder", "DNS:other.example", "clientAuth");
    let path = |name: &str| d.join(name).display().to_string();
    let (cert, key, ca) = (path("server.crt"), path("server.key"), path("ca.crt"));
    let args = [
        "--admin-addr",
        "127.0.0.1:0",
        "--admin-tls-cert",
        &cert,
        "--admin-tls-key",
        &key,
        "--admin-tls-client-ca",
        &ca,
        "--admin-allowed-subjects",
        "ops.example,deploy.example",
    ];
    let sluice = Sluice::start_with(&[("config.yaml", CONFIG)], &args, &[]);
    let addr = sluice.admin_addr.expect("the admin port").to_string();
    let url = format!(
        "https://127.0.0.1:{}/v1/overrides?domain=tenants",
        addr.rsplit(':').next().unwrap_or_default()
    );
    let curl_as = |who: &str| {
        let (cert, key) = (path(&format!("{who}.crt")), path(&format!("{who}.key")));
        run(
            "curl",
            &[
                "-sS",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "--cacert",
                &ca,
                "--cert",
                &cert,
                "--key",
                &key,
                &url,
            ],
        )
    };
    assert_eq!(curl_as("ops").1, "200");
    assert_eq!(curl_as("intruder").1, "403");
    let (ok, _, _) = run("curl", &["-sS", "-o", "/dev/null", "--cacert", &ca, &url]);
    assert!(!ok, "no client certificate, no connection");
    let grpc_addr = format!("localhost:{}", addr.rsplit(':').next().unwrap_or_default());
    let (ok, out, err) = run(
        "grpcurl",
        &[
            "-cacert",
            &ca,
            "-cert",
            &path("ops.crt"),
            "-key",
            &path("ops.key"),
            "-d",
            r#"{"domain":"tenants","descriptor":[{"key":"api_key","value":"z"}]}"#,
            &grpc_addr,
            "sluice.admin.v1.Admin/GetDescriptor",
        ],
    );
    assert!(ok, "{err}");
    assert_eq!(json(&out)["limits"][0]["source"], "config", "{out}");
}
