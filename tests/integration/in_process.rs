//! The library's server run in this process: `main` is not involved, the listeners are bound
//! here on port 0 and their addresses read back, and shutdown is a future this test completes.

use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use sluice_server::server::{self, Listeners};
use sluice_server::settings::ServeArgs;
use tokio::sync::{oneshot, Notify};

use crate::support::*;

#[derive(Parser)]
struct Flags {
    #[command(flatten)]
    serve: ServeArgs,
}

const CONFIG: &str =
    "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 2}\n";

#[tokio::test]
async fn a_server_runs_on_listeners_it_is_given_and_stops_when_told() {
    let dir = tempfile::tempdir().expect("temporary directory");
    std::fs::write(dir.path().join("d.yaml"), CONFIG).expect("config written");
    let config = dir.path().display().to_string();
    let settings = Flags::parse_from(["sluice", "--config", &config, "--store", "memory"])
        .serve
        .into_settings()
        .expect("valid settings");
    let grpc = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let http = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let listeners = Listeners {
        grpc,
        http,
        prometheus: None,
        admin: None,
    };
    let grpc_addr = listeners.grpc_addr().expect("an address");
    let http_addr = listeners.http_addr().expect("an address");
    let (stop, stopped) = oneshot::channel::<()>();
    let shutdown = async {
        let _ = stopped.await;
    };
    let serving = tokio::spawn(server::run(
        settings,
        listeners,
        shutdown,
        Arc::new(Notify::new()),
    ));

    let mut client = Client::connect(format!("http://{grpc_addr}"))
        .await
        .expect("connect to the in-process server");
    let ask = || request("d", vec![descriptor(&[("k", "v")])]);
    let codes = [
        overall(&call(&mut client, ask()).await),
        overall(&call(&mut client, ask()).await),
        overall(&call(&mut client, ask()).await),
    ];
    assert_eq!(codes, [Code::Ok, Code::Ok, Code::OverLimit]);
    let health =
        tokio::task::spawn_blocking(move || http_request(http_addr, "GET", "/healthcheck", ""))
            .await
            .expect("the HTTP call ran");
    assert_eq!(health, (200, "OK".to_string()));

    stop.send(()).expect("the server waits for the signal");
    let ended = tokio::time::timeout(Duration::from_secs(10), serving)
        .await
        .expect("the server stops within its grace period")
        .expect("the server task did not panic");
    assert!(ended.is_ok(), "{ended:?}");
}
