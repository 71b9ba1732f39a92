//! Test harness: starts the real `sluice` binary on free ports with a config written to a
//! temporary directory, and builds requests with Envoy's own protos (`envoy-types`).

pub mod redis;
pub mod scenario;
pub mod stores;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
pub use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tonic::transport::Channel;

pub use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;

/// A client of the rate limit service, generated from Envoy's protos.
pub type Client = RateLimitServiceClient<Channel>;
pub use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus,
};

/// A running `sluice serve`; killed on drop.
pub struct Sluice {
    child: Child,
    pub grpc_addr: SocketAddr,
    pub http_addr: SocketAddr,
    pub config_dir: tempfile::TempDir,
    log: Arc<Mutex<Vec<String>>>,
}

impl Sluice {
    /// A sluice on a Redis of its own, started here, with `files`, more `args` and `envs`.
    pub fn on_own_redis(
        files: &[(&str, &str)],
        args: &[&str],
        envs: &[(&str, &str)],
    ) -> (redis::RedisServer, Sluice) {
        let redis = redis::RedisServer::start(&[]);
        let sluice = Sluice::on_redis_url(files, &redis.url(), args, envs);
        (redis, sluice)
    }

    /// A sluice on the Redis at `url`, with `files`, more `args` and `envs`.
    pub fn on_redis_url(
        files: &[(&str, &str)],
        url: &str,
        args: &[&str],
        envs: &[(&str, &str)],
    ) -> Sluice {
        let mut all = vec!["--store", "redis", "--redis-url", url];
        all.extend_from_slice(args);
        Sluice::start_with(files, &all, envs)
    }

    /// Serves `config` (one YAML file) with extra command-line `args`.
    pub fn start(config: &str, args: &[&str]) -> Sluice {
        Sluice::start_with(&[("config.yaml", config)], args, &[])
    }

    /// Serves the given files with extra `args` and environment variables `envs`.
    pub fn start_with(files: &[(&str, &str)], args: &[&str], envs: &[(&str, &str)]) -> Sluice {
        let config_dir = tempfile::tempdir().expect("temporary directory");
        for (name, text) in files {
            std::fs::write(config_dir.path().join(name), text).expect("write config");
        }
        let mut command = Command::new(env!("CARGO_BIN_EXE_sluice"));
        command
            .arg("serve")
            .arg("--config")
            .arg(config_dir.path())
            .args(["--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"])
            .args(args)
            .env_remove("SHADOW_MODE")
            .env_remove("MERGE_DOMAIN_CONFIG")
            .env("LOG_LEVEL", "info")
            .envs(envs.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = command.spawn().expect("start the sluice binary");
        let stderr = child.stderr.take().expect("stderr is piped");
        let log = Arc::new(Mutex::new(Vec::new()));
        let (addr_tx, addr_rx) = mpsc::channel();
        let lines = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(addrs) = listening_addrs(&line) {
                    let _ = addr_tx.send(addrs);
                }
                lines.lock().unwrap().push(line);
            }
        });
        let (grpc_addr, http_addr) = match addr_rx.recv_timeout(Duration::from_secs(20)) {
            Ok(addrs) => addrs,
            Err(_) => {
                let _ = child.kill();
                panic!(
                    "sluice did not start; its log:\n{}",
                    log.lock().unwrap().join("\n")
                );
            }
        };
        Sluice {
            child,
            grpc_addr,
            http_addr,
            config_dir,
            log,
        }
    }

    /// A new client on its own connection.
    pub async fn client(&self) -> RateLimitServiceClient<Channel> {
        RateLimitServiceClient::new(self.channel().await)
    }

    /// A new connection to the gRPC port.
    pub async fn channel(&self) -> Channel {
        Channel::from_shared(format!("http://{}", self.grpc_addr))
            .expect("valid uri")
            .connect()
            .await
            .expect("connect to sluice")
    }

    /// The gRPC health status of `""` (`ServingStatus` as a number), asked on a new
    /// connection.
    pub async fn grpc_health(&self) -> i32 {
        grpc_health_on(self.channel().await).await
    }

    /// The gRPC health of `""` and the status of `/healthcheck`.
    pub async fn health(&self) -> (i32, u16) {
        (self.grpc_health().await, self.http_get("/healthcheck").0)
    }

    /// Polls until `health()` is `expected`, for at most 10 s.
    pub async fn wait_health(&self, expected: (i32, u16)) -> bool {
        for _ in 0..200 {
            if self.health().await == expected {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }

    /// The process id, for signals.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits up to `limit` for the process to exit; its exit code, if it did.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<i32> {
        let started = std::time::Instant::now();
        while started.elapsed() < limit {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status.code().unwrap_or(-1));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// `GET http://HTTP_ADDR{path}`: (status, body).
    pub fn http_get(&self, path: &str) -> (u16, String) {
        http_request(self.http_addr, "GET", path, "")
    }

    /// `POST http://HTTP_ADDR{path}` with `body`: (status, body).
    pub fn http_post(&self, path: &str, body: &str) -> (u16, String) {
        http_request(self.http_addr, "POST", path, body)
    }

    /// Waits up to 10 s until the log holds `text`; whether it did.
    pub fn wait_for_log(&self, text: &str) -> bool {
        let started = std::time::Instant::now();
        while started.elapsed() < Duration::from_secs(10) {
            if self.log().contains(text) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// Everything the server logged so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }
}

impl Drop for Sluice {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The gRPC and HTTP addresses in the startup line
/// `... sluice listening grpc=127.0.0.1:PORT http=127.0.0.1:PORT ...`.
fn listening_addrs(line: &str) -> Option<(SocketAddr, SocketAddr)> {
    if !line.contains("sluice listening") {
        return None;
    }
    let field = |name: &str| -> Option<SocketAddr> {
        let rest = &line[line.find(name)? + name.len()..];
        rest.split_whitespace().next()?.parse().ok()
    };
    Some((field("grpc=")?, field("http=")?))
}

/// The gRPC health status of `""` asked over `channel` (which may predate a shutdown).
pub async fn grpc_health_on(channel: Channel) -> i32 {
    tonic_health::pb::health_client::HealthClient::new(channel)
        .check(tonic_health::pb::HealthCheckRequest {
            service: String::new(),
        })
        .await
        .expect("health answers")
        .into_inner()
        .status
}

/// A descriptor of `entries`.
pub fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(key, value)| Entry {
                key: key.to_string(),
                value: value.to_string(),
            })
            .collect(),
        ..Default::default()
    }
}

/// A descriptor with a per-descriptor `hits_addend`.
pub fn descriptor_with_hits(entries: &[(&str, &str)], hits: u64) -> RateLimitDescriptor {
    RateLimitDescriptor {
        hits_addend: Some(envoy_types::pb::google::protobuf::UInt64Value { value: hits }),
        ..descriptor(entries)
    }
}

/// A descriptor with a client limit override.
pub fn descriptor_with_limit(
    entries: &[(&str, &str)],
    requests_per_unit: u32,
    unit: i32,
) -> RateLimitDescriptor {
    RateLimitDescriptor {
        limit: Some(RateLimitOverride {
            requests_per_unit,
            unit,
        }),
        ..descriptor(entries)
    }
}

/// A request for `domain` with `descriptors`.
pub fn request(domain: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_string(),
        descriptors,
        hits_addend: 0,
    }
}

/// Sends `request` and returns the response, failing the test on a gRPC error.
pub async fn call(
    client: &mut RateLimitServiceClient<Channel>,
    request: RateLimitRequest,
) -> RateLimitResponse {
    client
        .should_rate_limit(request)
        .await
        .expect("ShouldRateLimit succeeds")
        .into_inner()
}

/// Asks `domain` about one descriptor of `entries`.
pub async fn call_one(
    client: &mut RateLimitServiceClient<Channel>,
    domain: &str,
    entries: &[(&str, &str)],
) -> RateLimitResponse {
    call(client, request(domain, vec![descriptor(entries)])).await
}

/// Asks `domain` about one descriptor of `entries`, `times` times; returns the last answer.
pub async fn call_times(
    client: &mut RateLimitServiceClient<Channel>,
    domain: &str,
    entries: &[(&str, &str)],
    times: usize,
) -> Option<RateLimitResponse> {
    let mut last = None;
    for _ in 0..times {
        last = Some(call_one(client, domain, entries).await);
    }
    last
}

/// The status code of a descriptor status.
pub fn code(status: &DescriptorStatus) -> Code {
    Code::try_from(status.code).expect("a known code")
}

/// The overall code of a response.
pub fn overall(response: &RateLimitResponse) -> Code {
    Code::try_from(response.overall_code).expect("a known code")
}

/// A minimal HTTP/1.1 client: one request, `Connection: close`, returns (status, body).
pub fn http_request(addr: SocketAddr, method: &str, path: &str, body: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).expect("connect to the HTTP port");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).expect("send");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("read");
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status line");
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

/// The value of the series `name{labels}` in a Prometheus text exposition.
pub fn series(text: &str, name_and_labels: &str) -> Option<f64> {
    text.lines()
        .find(|line| {
            line.starts_with(name_and_labels) && line[name_and_labels.len()..].starts_with(' ')
        })
        .and_then(|line| line.rsplit(' ').next()?.parse().ok())
}

/// Runs `command` in `dir`; panics when it fails.
fn run_in(dir: &std::path::Path, command: &str) {
    let status = Command::new("sh")
        .arg("-c")
        .arg(command)
        .current_dir(dir)
        .status();
    assert!(status.is_ok_and(|s| s.success()), "failed: {command}");
}

/// In `dir`: a CA `ca` (made on first use) and a version 3 certificate `leaf` it signs, valid
/// for `san` (`DNS:localhost,IP:127.0.0.1`) and `usage` (`serverAuth`, `clientAuth`).
pub fn certificate(dir: &std::path::Path, ca: &str, leaf: &str, san: &str, usage: &str) {
    if !dir.join(format!("{ca}.crt")).exists() {
        run_in(dir, &format!("openssl req -x509 -newkey rsa:2048 -nodes -keyout {ca}.key -out {ca}.crt -days 1 -subj /CN={ca} 2>/dev/null"));
    }
    std::fs::write(
        dir.join(format!("{leaf}.cnf")),
        format!("subjectAltName={san}\nextendedKeyUsage={usage}\n"),
    )
    .expect("write the extensions");
    run_in(dir, &format!("openssl req -newkey rsa:2048 -nodes -keyout {leaf}.key -out {leaf}.csr -subj /CN={leaf} 2>/dev/null"));
    run_in(dir, &format!("openssl x509 -req -in {leaf}.csr -CA {ca}.crt -CAkey {ca}.key -CAcreateserial -out {leaf}.crt -days 1 -extfile {leaf}.cnf 2>/dev/null"));
}
