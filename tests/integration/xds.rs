//! The configuration from xDS (`CONFIG_TYPE=GRPC_XDS_SOTW`), against a management server run
//! inside the test: a small tonic aggregated discovery service built from the same protos.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prost::Message;
use sluice_proto::envoy::service::discovery::v3::aggregated_discovery_service_server::{
    AggregatedDiscoveryService, AggregatedDiscoveryServiceServer,
};
use sluice_proto::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use sluice_proto::ratelimit::config::ratelimit::v3::{
    RateLimitConfig, RateLimitDescriptor, RateLimitPolicy, RateLimitUnit,
};
use tokio::sync::watch;
use tonic::{Request, Response, Status, Streaming};
use tonic_health::pb::health_check_response::ServingStatus;

use crate::support::*;

const TYPE_URL: &str = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig";

/// What the management server serves: a version and its resources.
type Snapshot = (String, Vec<RateLimitConfig>);

/// A management server that pushes `snapshots` and records every request it gets.
#[derive(Clone)]
struct Management {
    snapshots: watch::Receiver<Snapshot>,
    requests: Arc<Mutex<Vec<DiscoveryRequest>>>,
}

type Responses =
    Pin<Box<dyn futures_util::Stream<Item = Result<DiscoveryResponse, Status>> + Send>>;

#[tonic::async_trait]
impl AggregatedDiscoveryService for Management {
    type StreamAggregatedResourcesStream = Responses;

    async fn stream_aggregated_resources(
        &self,
        request: Request<Streaming<DiscoveryRequest>>,
    ) -> Result<Response<Responses>, Status> {
        let mut incoming = request.into_inner();
        let recorded = self.requests.clone();
        tokio::spawn(async move {
            while let Ok(Some(request)) = incoming.message().await {
                recorded.lock().unwrap().push(request);
            }
        });
        let mut snapshots = self.snapshots.clone();
        let (send, responses) = tokio::sync::mpsc::channel(4);
        tokio::spawn(async move {
            loop {
                let (version, configs) = snapshots.borrow_and_update().clone();
                let response = DiscoveryResponse {
                    version_info: version.clone(),
                    resources: configs
                        .iter()
                        .map(|c| prost_types::Any {
                            type_url: TYPE_URL.to_string(),
                            value: c.encode_to_vec(),
                        })
                        .collect(),
                    canary: false,
                    type_url: TYPE_URL.to_string(),
                    nonce: format!("nonce-{version}"),
                };
                if send.send(Ok(response)).await.is_err() || snapshots.changed().await.is_err() {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(responses),
        )))
    }
}

/// Serves `management` on `addr` until the sender is dropped or fires.
fn serve(
    management: Management,
    listener: std::net::TcpListener,
) -> tokio::sync::oneshot::Sender<()> {
    serve_tls(management, listener, None)
}

/// `serve`, over TLS with `identity` when given.
fn serve_tls(
    management: Management,
    listener: std::net::TcpListener,
    identity: Option<tonic::transport::Identity>,
) -> tokio::sync::oneshot::Sender<()> {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    listener.set_nonblocking(true).unwrap();
    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
    let mut builder = tonic::transport::Server::builder();
    if let Some(identity) = identity {
        let tls = tonic::transport::ServerTlsConfig::new().identity(identity);
        builder = builder.tls_config(tls).unwrap();
    }
    tokio::spawn(
        builder
            .add_service(AggregatedDiscoveryServiceServer::new(management))
            .serve_with_incoming_shutdown(
                tokio_stream::wrappers::TcpListenerStream::new(listener),
                async {
                    let _ = stopped.await;
                },
            ),
    );
    stop
}

/// One domain `d` with one limit on key `k`.
fn domain(requests_per_unit: u32, unit: RateLimitUnit) -> RateLimitConfig {
    RateLimitConfig {
        name: "gateway-policy".into(),
        domain: "d".into(),
        descriptors: vec![RateLimitDescriptor {
            key: "k".into(),
            rate_limit: Some(RateLimitPolicy {
                unit: unit as i32,
                requests_per_unit,
                ..Default::default()
            }),
            ..Default::default()
        }],
    }
}

/// Polls `check` every 50 ms for at most `limit`.
async fn within(limit: Duration, mut check: impl AsyncFnMut() -> bool) -> bool {
    let started = Instant::now();
    while started.elapsed() < limit {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// The limit (requests per unit) a cost-0 call of `k=value` finds.
async fn limit_of(sluice: &Sluice, value: &str) -> Option<u32> {
    let mut client = sluice.client().await;
    let response = call(
        &mut client,
        request("d", vec![descriptor_with_hits(&[("k", value)], 0)]),
    )
    .await;
    response.statuses[0]
        .current_limit
        .as_ref()
        .map(|l| l.requests_per_unit)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_come_from_an_xds_server_acked_nacked_and_followed_across_restarts() {
    let (publish, snapshots) =
        watch::channel::<Snapshot>(("v1".into(), vec![domain(2, RateLimitUnit::Hour)]));
    let requests = Arc::new(Mutex::new(Vec::new()));
    let management = Management {
        snapshots,
        requests: requests.clone(),
    };
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    let mut stop = Some(serve(management.clone(), listener));
    let sluice = Sluice::start_with(
        &[],
        &[],
        &[
            ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
            ("CONFIG_GRPC_XDS_SERVER_URL", &addr.to_string()),
            ("CONFIG_GRPC_XDS_NODE_ID", "test-node"),
            ("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "200ms"),
        ],
    );
    // The first snapshot applies, is acknowledged, and makes sluice serving.
    assert!(
        within(Duration::from_secs(10), async || limit_of(&sluice, "a")
            .await
            == Some(2))
        .await,
        "{}",
        sluice.log()
    );
    assert!(
        sluice
            .wait_health((ServingStatus::Serving as i32, 200))
            .await
    );
    let acked = |version: &str| {
        requests.lock().unwrap().iter().any(|r| {
            r.version_info == version
                && r.response_nonce == format!("nonce-{version}")
                && r.error_detail.is_none()
                && r.type_url == TYPE_URL
                && r.node.as_ref().is_some_and(|n| n.id == "test-node")
        })
    };
    assert!(within(Duration::from_secs(5), async || acked("v1")).await);
    // A snapshot that does not compile is refused with its errors; the last good one serves.
    let broken = RateLimitConfig {
        descriptors: vec![RateLimitDescriptor {
            key: "k".into(),
            rate_limit: Some(RateLimitPolicy {
                requests_per_unit: 5,
                ..Default::default()
            }),
            ..Default::default()
        }],
        ..domain(1, RateLimitUnit::Hour)
    };
    publish.send(("v2".into(), vec![broken])).unwrap();
    let nacked = || {
        requests.lock().unwrap().iter().any(|r| {
            r.version_info == "v1"
                && r.response_nonce == "nonce-v2"
                && r.error_detail
                    .as_ref()
                    .is_some_and(|e| e.message.contains("invalid rate limit unit"))
        })
    };
    assert!(
        within(Duration::from_secs(5), async || nacked()).await,
        "{:?}",
        requests.lock().unwrap()
    );
    assert_eq!(limit_of(&sluice, "a").await, Some(2));
    // An update under load: no call fails, the new limit is in force within a second.
    let caller = {
        let mut client = sluice.client().await;
        tokio::spawn(async move {
            let mut failures = 0;
            let started = Instant::now();
            while started.elapsed() < Duration::from_millis(1500) {
                let ask = request("d", vec![descriptor(&[("k", "load")])]);
                failures += usize::from(client.should_rate_limit(ask).await.is_err());
            }
            failures
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let published = Instant::now();
    publish
        .send(("v3".into(), vec![domain(50, RateLimitUnit::Hour)]))
        .unwrap();
    assert!(
        within(Duration::from_secs(1), async || limit_of(&sluice, "b")
            .await
            == Some(50))
        .await
    );
    eprintln!("v3 in force after {:?}", published.elapsed());
    // /rlconfig says where the limits came from, and which version.
    let head = {
        use std::io::{Read, Write};
        let mut http = std::net::TcpStream::connect(sluice.http_addr).unwrap();
        http.write_all(b"GET /rlconfig HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut answer = String::new();
        http.read_to_string(&mut answer).unwrap();
        answer
    };
    assert!(
        head.contains(&format!(
            "x-sluice-config-source: xDS http://{addr} version v3"
        )),
        "{head}"
    );
    assert_eq!(caller.await.unwrap(), 0, "calls failed during the update");
    // The server goes away: sluice keeps serving v3, and follows the server once it is back.
    drop(stop.take());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(limit_of(&sluice, "c").await, Some(50));
    publish
        .send(("v4".into(), vec![domain(7, RateLimitUnit::Hour)]))
        .unwrap();
    let listener = std::net::TcpListener::bind(addr).unwrap();
    let _back = serve(management, listener);
    assert!(
        within(Duration::from_secs(10), async || limit_of(&sluice, "d")
            .await
            == Some(7))
        .await,
        "{}",
        sluice.log()
    );
    assert!(within(Duration::from_secs(5), async || acked("v4")).await);
}

#[tokio::test]
async fn before_the_first_snapshot_nothing_is_limited_and_health_says_not_serving() {
    // A management server that never answers.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let envs = [
        ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
        ("CONFIG_GRPC_XDS_SERVER_URL", &*addr.to_string()),
    ];
    let waiting = Sluice::start_with(&[], &[], &envs.map(|(k, v)| (k, v)));
    assert!(
        waiting
            .wait_health((ServingStatus::NotServing as i32, 500))
            .await
    );
    assert_eq!(limit_of(&waiting, "x").await, None);
    let mut forced = envs.to_vec();
    forced.push(("FORCE_START_WITHOUT_INITIAL_CONFIG", "true"));
    let started = Sluice::start_with(&[], &[], &forced);
    assert!(
        started
            .wait_health((ServingStatus::Serving as i32, 200))
            .await
    );
    drop(listener);
}

#[tokio::test]
async fn the_xds_server_is_reached_over_tls_and_a_wrong_ca_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    certificate(d, "ca", "xds", "DNS:xds.example,IP:127.0.0.1", "serverAuth");
    certificate(d, "other", "unused", "DNS:unused", "serverAuth");
    let identity = tonic::transport::Identity::from_pem(
        std::fs::read(d.join("xds.crt")).unwrap(),
        std::fs::read(d.join("xds.key")).unwrap(),
    );
    let (_publish, snapshots) =
        watch::channel::<Snapshot>(("t1".into(), vec![domain(3, RateLimitUnit::Hour)]));
    let management = Management {
        snapshots,
        requests: Arc::new(Mutex::new(Vec::new())),
    };
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let _server = serve_tls(management, listener, Some(identity));
    let ca = d.join("ca.crt").display().to_string();
    let other = d.join("other.crt").display().to_string();
    let envs = |ca: &str| {
        vec![
            ("CONFIG_TYPE", "GRPC_XDS_SOTW".to_string()),
            ("CONFIG_GRPC_XDS_SERVER_URL", addr.clone()),
            ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true".to_string()),
            ("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", ca.to_string()),
            ("CONFIG_GRPC_XDS_SERVER_TLS_SAN", "xds.example".to_string()),
            (
                "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
                "200ms".to_string(),
            ),
        ]
    };
    let start = |envs: Vec<(&'static str, String)>| {
        let envs: Vec<(&str, &str)> = envs.iter().map(|(k, v)| (*k, v.as_str())).collect();
        Sluice::start_with(&[], &[], &envs)
    };
    let trusted = start(envs(&ca));
    assert!(
        within(Duration::from_secs(10), async || limit_of(&trusted, "t")
            .await
            == Some(3))
        .await,
        "{}",
        trusted.log()
    );
    let wrong_ca = start(envs(&other));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        limit_of(&wrong_ca, "t").await,
        None,
        "a server the CA does not vouch for gave limits"
    );
    assert!(
        wrong_ca
            .wait_health((ServingStatus::NotServing as i32, 500))
            .await
    );
    assert!(
        wrong_ca.log().contains("xDS stream lost"),
        "{}",
        wrong_ca.log()
    );
}
