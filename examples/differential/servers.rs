//! The processes of a differential run: a `redis-server` for each server, the reference
//! server (its binary from the environment, never built here) and sluice, each started with
//! the same settings (the reference's environment variables, which sluice reads too) on free
//! ports of the loopback, and stopped on drop.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tonic::transport::Channel;

use crate::Error;

/// A gRPC client of either server, through Envoy's own protos.
pub type Client = RateLimitServiceClient<Channel>;

pub use crate::process::{free_port, Process, Redis};

/// Which store sluice runs on in a mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SluiceStore {
    Redis,
    Memory,
}

/// What a server of a run needs: the settings both get, and where the config lives.
pub struct Launch<'a> {
    pub env: &'a [(&'static str, &'static str)],
    pub runtime_root: &'a Path,
}

/// A running server and its client.
pub struct Server {
    _process: Process,
    pub client: Client,
}

/// The reference server on `redis`, with the run's settings.
pub async fn start_reference(
    binary: &Path,
    launch: &Launch<'_>,
    redis: &Redis,
    log: PathBuf,
) -> Result<Server, Error> {
    let (mut command, grpc) = command(binary)?;
    command
        .env("USE_STATSD", "false")
        .env("REDIS_SOCKET_TYPE", "tcp")
        .env("REDIS_URL", format!("127.0.0.1:{}", redis.port))
        .env("HOST", "127.0.0.1")
        .env("PORT", free_port()?.to_string())
        .env("DEBUG_HOST", "127.0.0.1")
        .env("DEBUG_PORT", free_port()?.to_string())
        .env("GRPC_HOST", "127.0.0.1")
        .env("GRPC_PORT", grpc.to_string())
        .env("RUNTIME_WATCH_ROOT", "false")
        .env("RUNTIME_IGNOREDOTFILES", "true");
    start(command, launch, grpc, log).await
}

/// sluice on `redis` or its memory store, with the run's settings.
pub async fn start_sluice(
    binary: &Path,
    launch: &Launch<'_>,
    store: SluiceStore,
    redis: &Redis,
    log: PathBuf,
) -> Result<Server, Error> {
    let (mut command, grpc) = command(binary)?;
    command
        .env("SLUICE_GRPC_ADDR", format!("127.0.0.1:{grpc}"))
        .env("SLUICE_HTTP_ADDR", format!("127.0.0.1:{}", free_port()?))
        .env("SLUICE_WATCH_CONFIG", "false");
    if store == SluiceStore::Redis {
        command.env("REDIS_URL", format!("127.0.0.1:{}", redis.port));
    }
    start(command, launch, grpc, log).await
}

/// `binary` with an empty environment but its log level, and the free port for its gRPC.
fn command(binary: &Path) -> Result<(Command, u16), Error> {
    let mut command = Command::new(binary);
    command.env_clear().env("LOG_LEVEL", "warn");
    Ok((command, free_port()?))
}

async fn start(
    mut command: Command,
    launch: &Launch<'_>,
    grpc: u16,
    log: PathBuf,
) -> Result<Server, Error> {
    command
        .env("RUNTIME_ROOT", launch.runtime_root)
        .env("RUNTIME_SUBDIRECTORY", "ratelimit")
        .envs(launch.env.iter().copied())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log)?);
    let child = command
        .spawn()
        .map_err(|e| Error(format!("cannot start {:?}: {e}", command.get_program())))?;
    let process = Process(child);
    let client = connect(grpc, &log).await?;
    Ok(Server {
        _process: process,
        client,
    })
}

/// A client once the server answers a call (a domain no config has).
async fn connect(port: u16, log: &Path) -> Result<Client, Error> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(channel) = Channel::from_shared(format!("http://127.0.0.1:{port}"))
            .map_err(|e| Error(e.to_string()))?
            .connect()
            .await
        {
            let mut client = RateLimitServiceClient::new(channel);
            let probe = crate::wire::request(&crate::generate::Request {
                domain: "probe".into(),
                hits_addend: 0,
                descriptors: vec![crate::generate::Descriptor {
                    entries: vec![("probe".into(), "probe".into())],
                    hits_addend: None,
                    limit: None,
                }],
            });
            if client.should_rate_limit(probe).await.is_ok() {
                return Ok(client);
            }
        }
        if Instant::now() > deadline {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            return Err(Error(format!(
                "a server did not answer on port {port}; its log:\n{text}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
