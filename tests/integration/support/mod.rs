//! Test harness: serves sluice on free ports with a config written to a temporary directory,
//! and builds requests with Envoy's own protos (`envoy-types`). A server runs in this process
//! (the server library's `server::run` on listeners the harness binds, on a runtime of its
//! own, with a log of its own that `Sluice::log` reads) unless the process is what a test is
//! about: signals, the command line, the environment, exit codes, a reload from files; those
//! start the real `sluice` binary (`Sluice::process`).

pub mod admin;
pub mod browser;
pub mod link;
pub mod redis;
pub mod scenario;
pub mod stores;

use std::io::{BufRead, BufReader};

use clap::Parser;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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

/// A running sluice server, in this process or as a `sluice serve` process; stopped on drop.
pub struct Sluice {
    running: Running,
    pub grpc_addr: SocketAddr,
    pub http_addr: SocketAddr,
    /// The admin API's port, when `--admin-addr` was given.
    pub admin_addr: Option<SocketAddr>,
    pub config_dir: tempfile::TempDir,
}

/// Where the server runs.
enum Running {
    /// `server::run` on a runtime of its own thread: `stop` ends it as SIGTERM would; what
    /// its threads log, line by line.
    InProcess {
        stop: Option<tokio::sync::oneshot::Sender<()>>,
        log: Arc<Mutex<Vec<String>>>,
        /// The server's thread: `server::run` answered Ok (it drained and stopped) or not.
        thread: Option<std::thread::JoinHandle<bool>>,
    },
    /// The binary, with its log lines (stderr) as they come.
    Process {
        child: Child,
        log: Arc<Mutex<Vec<String>>>,
    },
}

/// A log of its own for a server in this process: its threads' events at `info` and above,
/// as the binary logs by default, one line each into `lines`.
fn log_capture(lines: Arc<Mutex<Vec<String>>>) -> tracing::Dispatch {
    use tracing_subscriber::layer::SubscriberExt;
    let writer = move || LineWriter(lines.clone());
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(writer)
        .with_ansi(false);
    let filter = tracing_subscriber::EnvFilter::new("info");
    tracing::Dispatch::new(tracing_subscriber::registry().with(layer).with(filter))
}

/// Appends what one event writes as lines of a server's log.
struct LineWriter(Arc<Mutex<Vec<String>>>);

impl std::io::Write for LineWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(bytes);
        let mut lines = self.0.lock().unwrap_or_else(|p| p.into_inner());
        lines.extend(text.lines().map(str::to_string));
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// `args` with the flags that serve on the Redis at `url`.
fn on_redis_args<'a>(url: &'a str, args: &[&'a str]) -> Vec<&'a str> {
    let mut all = vec!["--store", "redis", "--redis-url", url];
    all.extend_from_slice(args);
    all
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
        Sluice::start_with(files, &on_redis_args(url, args), envs)
    }

    /// Serves `config` (one YAML file) with extra command-line `args`.
    pub fn start(config: &str, args: &[&str]) -> Sluice {
        Sluice::start_with(&[("config.yaml", config)], args, &[])
    }

    /// Serves the given files with extra `args` and environment variables `envs` in this
    /// process, each variable given as the flag that reads it (one that no flag reads, which
    /// the server only warns about or refuses, is a process's subject: `process_with`).
    pub fn start_with(files: &[(&str, &str)], args: &[&str], envs: &[(&str, &str)]) -> Sluice {
        match flags_of(envs) {
            Some(flags) => {
                let mut all: Vec<&str> = args.to_vec();
                all.extend(flags.iter().map(String::as_str));
                Sluice::in_process(config_dir_with(files), &all)
            }
            None => panic!(
                "no flag reads one of {envs:?}: a variable only the environment gives is a \
                 process's subject (Sluice::process_with, in tests/process)"
            ),
        }
    }

    /// As `start_with`, in this process, for a start that may be refused: the server, or why
    /// `server::run` stopped before it served (every variable in `envs` must have a flag).
    pub fn try_start_with(
        files: &[(&str, &str)],
        args: &[&str],
        envs: &[(&str, &str)],
    ) -> Result<Sluice, String> {
        let flags = flags_of(envs).expect("a flag for every variable of a start in this process");
        let mut all: Vec<&str> = args.to_vec();
        all.extend(flags.iter().map(String::as_str));
        Sluice::try_in_process(config_dir_with(files), &all)
    }

    /// The `sluice serve` binary serving `config` (one YAML file) with extra `args`: for what
    /// only a process has (signals, exit codes, the command line, the environment); the
    /// process tests' (`tests/process`).
    #[allow(dead_code)]
    pub fn process(config: &str, args: &[&str]) -> Sluice {
        Sluice::process_with(&[("config.yaml", config)], args, &[])
    }

    /// The server library's `server::run` in this process, on listeners bound here, with the
    /// flags of `sluice serve` (`args`, after `--config DIR`).
    fn in_process(config_dir: tempfile::TempDir, args: &[&str]) -> Sluice {
        Sluice::try_in_process(config_dir, args)
            .unwrap_or_else(|error| panic!("sluice did not start: {error}"))
    }

    /// `in_process`, or why the server stopped before it served.
    fn try_in_process(config_dir: tempfile::TempDir, args: &[&str]) -> Result<Sluice, String> {
        let config = config_dir.path().display().to_string();
        let mut flags = vec!["sluice", "--config", &config];
        flags.extend_from_slice(args);
        let settings = ServeFlags::try_parse_from(flags)
            .unwrap_or_else(|error| panic!("the test's flags: {error}"))
            .serve
            .into_settings()
            .map_err(|error| format!("settings refused: {error}"))?;
        let bind = || std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
        let (grpc, http) = (bind(), bind());
        let prometheus = settings
            .ports
            .prometheus
            .as_ref()
            .map(|p| std::net::TcpListener::bind(p.addr).expect("bind the Prometheus port"));
        let (grpc_addr, http_addr) = (
            grpc.local_addr().expect("an address"),
            http.local_addr().expect("an address"),
        );
        let admin = settings.admin.as_ref().map(|_| bind());
        let admin_addr = admin.as_ref().map(|a| a.local_addr().expect("an address"));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (error_tx, error_rx) = mpsc::channel();
        let log = Arc::new(Mutex::new(Vec::new()));
        let dispatch = log_capture(log.clone());
        let thread = std::thread::spawn(move || {
            let _logging = tracing::dispatcher::set_default(&dispatch);
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .on_thread_start(move || {
                    // For the thread's whole life: a runtime's threads end with it.
                    std::mem::forget(tracing::dispatcher::set_default(&dispatch));
                })
                .build()
                .expect("a runtime for the server");
            let served = runtime.block_on(async move {
                let tokio_listener = |listener: std::net::TcpListener| {
                    listener.set_nonblocking(true).expect("non-blocking");
                    tokio::net::TcpListener::from_std(listener).expect("a tokio listener")
                };
                let listeners = sluice_server::server::Listeners {
                    grpc: tokio_listener(grpc),
                    http: tokio_listener(http),
                    prometheus: prometheus.map(tokio_listener),
                    admin: admin.map(tokio_listener),
                };
                let shutdown = async {
                    let _ = stopped.await;
                };
                // Reloads from files are a process's subject (SIGHUP); nothing asks here.
                let reload = Arc::new(tokio::sync::Notify::new());
                sluice_server::server::run(settings, listeners, shutdown, reload).await
            });
            let stopped_well = served.is_ok();
            if let Err(error) = served {
                let _ = error_tx.send(error.to_string());
            }
            runtime.shutdown_timeout(Duration::from_millis(100));
            stopped_well
        });
        let sluice = Sluice {
            running: Running::InProcess {
                stop: Some(stop),
                log,
                thread: Some(thread),
            },
            grpc_addr,
            http_addr,
            admin_addr,
            config_dir,
        };
        sluice.wait_serving(&error_rx)?;
        Ok(sluice)
    }

    /// Waits until the in-process server answers on its HTTP port (it serves gRPC from the
    /// same moment); its error when it stopped instead.
    fn wait_serving(&self, error: &mpsc::Receiver<String>) -> Result<(), String> {
        let started = std::time::Instant::now();
        while started.elapsed() < Duration::from_secs(20) {
            if let Ok(error) = error.try_recv() {
                return Err(error);
            }
            if answers_http(self.http_addr) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Err("sluice did not start serving within 20 s".into())
    }

    /// The `sluice serve` binary serving the given files with extra `args` and environment
    /// variables `envs`.
    pub fn process_with(files: &[(&str, &str)], args: &[&str], envs: &[(&str, &str)]) -> Sluice {
        let config_dir = config_dir_with(files);
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
        let (grpc_addr, http_addr, admin_addr) = match addr_rx.recv_timeout(Duration::from_secs(20))
        {
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
            running: Running::Process { child, log },
            grpc_addr,
            http_addr,
            admin_addr,
            config_dir,
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

    /// The process, for what only a process has; a test that asks it of a server in this
    /// process starts it with `Sluice::process`.
    fn child(&mut self) -> &mut Child {
        match &mut self.running {
            Running::Process { child, .. } => child,
            Running::InProcess { .. } => {
                panic!("this test asks for a process: start it with Sluice::process")
            }
        }
    }

    /// The process id, for signals.
    #[allow(dead_code)]
    pub fn pid(&self) -> u32 {
        match &self.running {
            Running::Process { child, .. } => child.id(),
            Running::InProcess { .. } => {
                panic!("this test signals the process: start it with Sluice::process")
            }
        }
    }

    /// Starts the server's shutdown, as SIGTERM does (health NOT_SERVING, the drain), without
    /// waiting for it: for a server in this process, its shutdown future completes.
    pub fn begin_shutdown(&mut self) {
        match &mut self.running {
            Running::InProcess { stop, .. } => {
                if let Some(stop) = stop.take() {
                    let _ = stop.send(());
                }
            }
            Running::Process { child, .. } => {
                let pid = child.id().to_string();
                let sent = std::process::Command::new("kill")
                    .args(["-TERM", &pid])
                    .status();
                assert!(sent.is_ok_and(|s| s.success()), "SIGTERM to {pid}");
            }
        }
    }

    /// Shuts the server down as SIGTERM does and waits for it to drain and stop (a process:
    /// up to 20 s); its exit code (in this process: 0 when `server::run` answered Ok).
    pub fn terminate(&mut self) -> Option<i32> {
        self.begin_shutdown();
        if let Running::InProcess { thread, .. } = &mut self.running {
            let stopped_well = thread.take()?.join().unwrap_or(false);
            return Some(if stopped_well { 0 } else { 1 });
        }
        self.wait_exit(Duration::from_secs(20))
    }

    /// Waits up to `limit` for the process to exit; its exit code, if it did.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<i32> {
        let child = self.child();
        let started = std::time::Instant::now();
        while started.elapsed() < limit {
            if let Ok(Some(status)) = child.try_wait() {
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
        match &self.running {
            Running::Process { log, .. } | Running::InProcess { log, .. } => {
                log.lock().unwrap().join("\n")
            }
        }
    }
}

impl Drop for Sluice {
    fn drop(&mut self) {
        match &mut self.running {
            Running::Process { child, .. } => {
                let _ = child.kill();
                let _ = child.wait();
            }
            Running::InProcess { stop, .. } => {
                // The server drains as after SIGTERM, on its own thread; nothing waits for it.
                if let Some(stop) = stop.take() {
                    let _ = stop.send(());
                }
            }
        }
    }
}

/// The flags of `sluice serve`, as the binary parses them.
#[derive(Parser)]
struct ServeFlags {
    #[command(flatten)]
    serve: sluice_server::settings::ServeArgs,
}

/// The flags of `sluice serve` that read the environment variables `envs`, as they would
/// read them (`--name=value`; a switch given when its value is true); `None` when a
/// variable is read by no flag.
fn flags_of(envs: &[(&str, &str)]) -> Option<Vec<String>> {
    use clap::CommandFactory;
    let command = ServeFlags::command();
    let mut flags = Vec::new();
    for (name, value) in envs {
        let arg = command
            .get_arguments()
            .find(|arg| arg.get_env().is_some_and(|env| env == *name))?;
        let long = arg.get_long()?;
        if arg.get_action().takes_values() {
            flags.push(format!("--{long}={value}"));
        } else if matches!(
            value.to_ascii_lowercase().as_str(),
            "true" | "1" | "yes" | "on"
        ) {
            flags.push(format!("--{long}"));
        }
    }
    Some(flags)
}

/// A temporary directory holding `files` (name, text).
fn config_dir_with(files: &[(&str, &str)]) -> tempfile::TempDir {
    let config_dir = tempfile::tempdir().expect("temporary directory");
    for (name, text) in files {
        std::fs::write(config_dir.path().join(name), text).expect("write config");
    }
    config_dir
}

/// Whether an HTTP server answers a request on `addr` (any status).
fn answers_http(addr: SocketAddr) -> bool {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect(addr) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
    let asked = format!("GET /healthcheck HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    let mut answer = [0u8; 12];
    stream.write_all(asked.as_bytes()).is_ok()
        && stream.read_exact(&mut answer).is_ok()
        && answer.starts_with(b"HTTP/1.1")
}

/// The gRPC and HTTP addresses in the startup line
/// `... sluice listening grpc=127.0.0.1:PORT http=127.0.0.1:PORT ...`.
fn listening_addrs(line: &str) -> Option<(SocketAddr, SocketAddr, Option<SocketAddr>)> {
    if !line.contains("sluice listening") {
        return None;
    }
    let field = |name: &str| -> Option<SocketAddr> {
        let rest = &line[line.find(name)? + name.len()..];
        rest.split_whitespace().next()?.parse().ok()
    };
    Some((field("grpc=")?, field("http=")?, field("admin=")))
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

/// Waits for the next window of `period` (aligned to the epoch, as fixed windows are) to begin
/// when the current one ends within `run`: a test that counts across a window's end would
/// see its limits start again.
pub async fn clear_of_a_windows_end(period: Duration, run: Duration) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let into = Duration::from_millis((now.as_millis() % period.as_millis().max(1)) as u64);
    let left = period.saturating_sub(into);
    if left < run {
        tokio::time::sleep(left + Duration::from_secs(1)).await;
    }
}

/// The text field `key` of a response's dynamic metadata (a lease's or a hold's token, the
/// budget that denied).
pub fn metadata_text(response: &RateLimitResponse, key: &str) -> Option<String> {
    use envoy_types::pb::google::protobuf::value::Kind;
    match response
        .dynamic_metadata
        .as_ref()?
        .fields
        .get(key)?
        .kind
        .as_ref()?
    {
        Kind::StringValue(text) => Some(text.clone()),
        _ => None,
    }
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
    http_request_with(addr, method, path, &[], body)
}

/// The same, with more `headers`.
pub fn http_request_with(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    use std::io::Write;
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        headers
            .iter()
            .map(|(name, value)| format!("{name}: {value}\r\n"))
            .collect::<String>(),
        body.len()
    );
    let (status, response) = http_exchange(addr, |stream| {
        stream.write_all(request.as_bytes()).expect("send");
    });
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

/// One HTTP/1.1 exchange on a new connection to `addr`: `send` writes the whole request, then
/// the response is read to the end; its status and the whole response.
pub fn http_exchange(
    addr: SocketAddr,
    send: impl FnOnce(&mut std::net::TcpStream),
) -> (u16, String) {
    use std::io::Read;
    let mut stream = std::net::TcpStream::connect(addr).expect("connect to the HTTP port");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    send(&mut stream);
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("read");
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status line");
    (status, response)
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

/// Polls `check` every 50 ms for up to 10 s; the server's log tells why when it fails.
pub async fn eventually(sluice: &Sluice, what: &str, mut check: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "not within 10 s: {what}; the server's log:\n{}",
        sluice.log()
    );
}

/// The limit a probe of cost 0 on `key=probe` finds in domain `domain`, when one applies.
pub async fn limit_of(client: &mut Client, domain: &str, key: &str) -> Option<u32> {
    let response = call(
        client,
        request(domain, vec![descriptor_with_hits(&[(key, "probe")], 0)]),
    )
    .await;
    response.statuses[0]
        .current_limit
        .as_ref()
        .map(|l| l.requests_per_unit)
}

/// Opens up to `count` TCP connections to `addr` that send nothing (each given 200 ms, so a
/// full backlog does not hold the test).
pub fn idle_connections(addr: std::net::SocketAddr, count: usize) -> Vec<std::net::TcpStream> {
    (0..count)
        .filter_map(|_| {
            std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).ok()
        })
        .collect()
}
