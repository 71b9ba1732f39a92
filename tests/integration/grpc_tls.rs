//! TLS and mTLS on the gRPC port (`GRPC_SERVER_USE_TLS`, `GRPC_CLIENT_TLS_CACERT`,
//! `GRPC_CLIENT_TLS_SAN`), with certificates made by openssl in the test, and their rotation.

use std::path::Path;
use std::time::{Duration, Instant};

use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};

use crate::support::*;

const CONFIG: &str =
    "domain: t\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1000}\n";

fn read(dir: &Path, name: &str) -> Vec<u8> {
    std::fs::read(dir.join(name)).unwrap()
}

/// A TLS channel to `sluice` trusting `ca`, presenting the client certificate `client`.
async fn connect(
    sluice: &Sluice,
    dir: &Path,
    ca: &str,
    client: Option<&str>,
) -> Result<Channel, String> {
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(read(dir, &format!("{ca}.crt"))))
        .domain_name("localhost");
    if let Some(client) = client {
        tls = tls.identity(Identity::from_pem(
            read(dir, &format!("{client}.crt")),
            read(dir, &format!("{client}.key")),
        ));
    }
    let channel = Channel::from_shared(format!("https://{}", sluice.grpc_addr))
        .unwrap()
        .tls_config(tls)
        .map_err(|e| e.to_string())?
        .connect()
        .await
        .map_err(|e| format!("{e:?}"))?;
    Ok(channel)
}

/// Whether a call on `channel` is answered.
async fn answered(channel: Channel) -> bool {
    let mut client =
        envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient::new(channel);
    client
        .should_rate_limit(request("t", vec![descriptor(&[("k", "v")])]))
        .await
        .is_ok()
}

/// sluice serving TLS on its gRPC port with a certificate for localhost, signed by `ca`,
/// made in `dir`; `more` adds settings (the client checks of mTLS).
fn tls_server(dir: &Path, more: &[(&str, &str)]) -> Sluice {
    certificate(
        dir,
        "ca",
        "server",
        "DNS:localhost,IP:127.0.0.1",
        "serverAuth",
    );
    let path = |name: &str| dir.join(name).display().to_string();
    let (cert, key) = (path("server.crt"), path("server.key"));
    let mut settings = vec![
        ("GRPC_SERVER_USE_TLS", "true"),
        ("GRPC_SERVER_TLS_CERT", cert.as_str()),
        ("GRPC_SERVER_TLS_KEY", key.as_str()),
    ];
    settings.extend_from_slice(more);
    Sluice::start_with(&[("config.yaml", CONFIG)], &[], &settings)
}

#[tokio::test]
async fn mtls_admits_only_clients_with_the_right_certificate_and_rotates_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    certificate(d, "clients", "gateway", "DNS:envoy-gateway", "clientAuth");
    certificate(d, "clients", "stranger", "DNS:someone-else", "clientAuth");
    let clients = d.join("clients.crt").display().to_string();
    let sluice = tls_server(
        d,
        &[
            ("GRPC_CLIENT_TLS_CACERT", &clients),
            ("GRPC_CLIENT_TLS_SAN", "envoy-gateway"),
        ],
    );
    let gateway = connect(&sluice, d, "ca", Some("gateway"))
        .await
        .expect("the gateway connects");
    assert!(answered(gateway.clone()).await);
    // Health answers over TLS too, and the HTTP port stays plaintext.
    assert_eq!(grpc_health_on(gateway.clone()).await, 1);
    assert_eq!(sluice.http_get("/healthcheck").0, 200);
    // Refused: plaintext, no client certificate, a certificate for another name.
    let plaintext = Channel::from_shared(format!("http://{}", sluice.grpc_addr))
        .unwrap()
        .connect()
        .await;
    let plaintext_answered = match plaintext {
        Ok(channel) => answered(channel).await,
        Err(_) => false,
    };
    assert!(!plaintext_answered, "a plaintext client was answered");
    for client in [None, Some("stranger")] {
        let refused = match connect(&sluice, d, "ca", client).await {
            Ok(channel) => !answered(channel).await,
            Err(_) => true,
        };
        assert!(refused, "{client:?} was answered");
    }
    // Rotation: a certificate from another CA replaces the files in place.
    certificate(
        d,
        "ca2",
        "server2",
        "DNS:localhost,IP:127.0.0.1",
        "serverAuth",
    );
    std::fs::copy(d.join("server2.key"), d.join("server.key")).unwrap();
    std::fs::copy(d.join("server2.crt"), d.join("server.crt")).unwrap();
    let started = Instant::now();
    let mut rotated = false;
    while started.elapsed() < Duration::from_secs(10) {
        if let Ok(channel) = connect(&sluice, d, "ca2", Some("gateway")).await {
            if answered(channel).await {
                rotated = true;
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        rotated,
        "the new certificate was not served: {}",
        sluice.log()
    );
    // The connection made before keeps being answered.
    assert!(answered(gateway).await);
}

/// Over TLS too, a connection's writes gathered under load (`server/accept.rs`, beneath the
/// TLS stream) still carry every call's own answer, whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_calls_at_once_over_one_tls_connection_are_each_answered() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let sluice = tls_server(d, &[]);
    let channel = connect(&sluice, d, "ca", None)
        .await
        .expect("the client connects");
    let client =
        envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient::new(channel);
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..400usize {
        let mut client = client.clone();
        calls.spawn(async move {
            let value = format!("v{}", i % 4);
            call_one(&mut client, "t", &[("k", value.as_str())]).await
        });
    }
    let mut remaining = Vec::new();
    while let Some(joined) = calls.join_next().await {
        let response = joined.expect("the call's task ends");
        assert_eq!(overall(&response), Code::Ok);
        remaining.push(response.statuses[0].limit_remaining);
    }
    // Four values, 100 calls each on a limit of 1,000: each count from 999 down to 900 once.
    remaining.sort_unstable();
    let expected: Vec<u32> = (900..1000).flat_map(|n| [n; 4]).collect();
    assert_eq!(remaining, expected);
}
