//! The configuration from an xDS management server, as envoyproxy/ratelimit takes it
//! (`CONFIG_TYPE=GRPC_XDS_SOTW`), for Envoy Gateway: one aggregated discovery stream, state of
//! the world, resources of type `RateLimitConfig` (one domain each). Every snapshot is
//! compiled by the code that compiles files, off the async runtime; a valid one replaces the
//! configuration whole and is ACKed, an invalid one is NACKed with its errors in
//! `error_detail` and the last good configuration keeps serving. When the stream ends, it is
//! opened again after the retry interval, with jitter; sluice serves its last configuration
//! meanwhile.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use prost::Message;
use tokio::sync::mpsc;

use sluice_config::in_force::{off_the_runtime, put_in_force, OnLoad};
use sluice_config::{load_docs_of, Config, ConfigErrors, LoadOptions, ReloadResult};
use sluice_proto::envoy::config::core::v3::Node;
use sluice_proto::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use sluice_proto::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use sluice_proto::google::rpc::Status;
use sluice_proto::ratelimit::config::ratelimit::v3::RateLimitConfig;

/// The resource type sluice asks for.
pub const TYPE_URL: &str = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig";

/// Where the management server is and who sluice is to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XdsSettings {
    /// `http://host:port`, or `https://` with TLS (the reference's `host:port` becomes this).
    pub server_url: String,
    pub node_id: String,
    pub retry_interval: Duration,
    pub tls: Option<XdsTls>,
}

/// TLS towards the management server (`CONFIG_GRPC_XDS_SERVER_USE_TLS`), its files read at
/// each connection, so that rotated ones are used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XdsTls {
    /// The CA the server's certificate must chain to; default: the system's roots.
    pub ca: Option<std::path::PathBuf>,
    /// The certificate and key sluice presents.
    pub client: Option<(std::path::PathBuf, std::path::PathBuf)>,
    /// The name the server's certificate must be valid for; default: the URL's host.
    pub san: Option<String>,
}

/// Why one stream ended.
#[derive(Debug, thiserror::Error)]
enum StreamError {
    #[error("cannot connect: {0}")]
    Connect(#[from] tonic::transport::Error),
    #[error("TLS files: {0}")]
    TlsFiles(String),
    #[error("the stream failed: {0}")]
    Stream(#[from] tonic::Status),
    #[error("the server closed the stream")]
    Closed,
}

/// The configuration source: keeps `current` up to date with the server's snapshots.
pub struct XdsSource {
    settings: XdsSettings,
    options: LoadOptions,
    current: Arc<ArcSwap<Config>>,
    on_load: OnLoad,
}

impl XdsSource {
    pub fn new(
        settings: XdsSettings,
        options: LoadOptions,
        current: Arc<ArcSwap<Config>>,
        on_load: impl Fn(ReloadResult<'_>) + Send + Sync + 'static,
    ) -> XdsSource {
        XdsSource {
            settings,
            options,
            current,
            on_load: Arc::new(on_load),
        }
    }

    /// Follows the server for as long as the future runs.
    pub async fn run(self) {
        // The version applied last: what a NACK and a new stream report.
        let mut applied = String::new();
        loop {
            match self.follow(&mut applied).await {
                Ok(()) | Err(StreamError::Closed) => {
                    tracing::warn!(server = %self.settings.server_url, "the xDS server closed the stream; opening it again")
                }
                Err(error) => {
                    tracing::warn!(server = %self.settings.server_url, %error, "xDS stream lost; the last configuration keeps serving")
                }
            }
            tokio::time::sleep(with_jitter(self.settings.retry_interval)).await;
        }
    }

    /// One stream: asks, then applies and answers every response until the stream ends.
    async fn follow(&self, applied: &mut String) -> Result<(), StreamError> {
        let mut endpoint =
            tonic::transport::Endpoint::from_shared(self.settings.server_url.clone())?;
        if let Some(tls) = &self.settings.tls {
            endpoint = endpoint.tls_config(client_tls(tls)?)?;
        }
        let channel = endpoint.connect().await?;
        let mut client = AggregatedDiscoveryServiceClient::new(channel);
        let (send, requests) = mpsc::channel::<DiscoveryRequest>(4);
        let _ = send.send(self.request(applied, "", None)).await;
        let requests = futures_util::stream::unfold(requests, |mut requests| async move {
            requests.recv().await.map(|request| (request, requests))
        });
        let mut responses = client
            .stream_aggregated_resources(requests)
            .await?
            .into_inner();
        tracing::info!(server = %self.settings.server_url, "xDS stream open");
        while let Some(response) = responses.message().await? {
            let answer = if response.type_url != TYPE_URL {
                // Not ours: acknowledged with what is in force, nothing applied.
                self.request(applied, &response.nonce, None)
            } else {
                match self.apply(&response).await {
                    Ok(()) => {
                        *applied = response.version_info.clone();
                        self.request(applied, &response.nonce, None)
                    }
                    Err(errors) => {
                        let detail = Status {
                            code: tonic::Code::InvalidArgument as i32,
                            message: errors,
                            details: Vec::new(),
                        };
                        self.request(applied, &response.nonce, Some(detail))
                    }
                }
            };
            if send.send(answer).await.is_err() {
                break;
            }
        }
        Err(StreamError::Closed)
    }

    /// Compiles a snapshot (off the runtime) and puts it in force; the errors when refused.
    async fn apply(&self, response: &DiscoveryResponse) -> Result<(), String> {
        let mut docs = Vec::with_capacity(response.resources.len());
        for (index, resource) in response.resources.iter().enumerate() {
            if resource.type_url != TYPE_URL {
                return Err(format!(
                    "resource {index}: type {} is not {TYPE_URL}",
                    resource.type_url
                ));
            }
            let config = RateLimitConfig::decode(resource.value.as_slice())
                .map_err(|e| format!("resource {index}: {e}"))?;
            let name = if config.name.is_empty() {
                format!("xds resource {index} ({})", config.domain)
            } else {
                format!("xds resource {}", config.name)
            };
            docs.push((name, config));
        }
        let (options, current, on_load) =
            (self.options, self.current.clone(), self.on_load.clone());
        let version = response.version_info.clone();
        let source = format!("xDS {} version {version}", self.settings.server_url);
        let applied = off_the_runtime(move || match load_docs_of(docs, options) {
            Ok(config) => {
                let config = sluice_config::with_source(config, source);
                tracing::info!(version = %version, domains = config.domains().len(), "xDS configuration applied");
                put_in_force(&current, config, &on_load);
                Ok(())
            }
            Err(errors) => {
                tracing::error!(version = %version, "xDS configuration refused, the previous one keeps serving:\n{errors}");
                on_load(Err(&errors));
                Err(describe(&errors))
            }
        });
        applied
            .await
            .map_err(|e| format!("the configuration did not compile: {e}"))?
    }

    fn request(&self, version: &str, nonce: &str, error: Option<Status>) -> DiscoveryRequest {
        DiscoveryRequest {
            version_info: version.to_string(),
            node: Some(Node {
                id: self.settings.node_id.clone(),
                user_agent_name: "sluice".to_string(),
                ..Node::default()
            }),
            resource_names: Vec::new(),
            type_url: TYPE_URL.to_string(),
            response_nonce: nonce.to_string(),
            error_detail: error,
        }
    }
}

/// tonic's TLS configuration of `tls`, its files read now.
fn client_tls(tls: &XdsTls) -> Result<tonic::transport::ClientTlsConfig, StreamError> {
    let mut config = crate::client_tls::client_tls(tls.ca.as_deref(), tls.client.as_ref())
        .map_err(StreamError::TlsFiles)?;
    if let Some(san) = &tls.san {
        config = config.domain_name(san.clone());
    }
    Ok(config)
}

fn describe(errors: &ConfigErrors) -> String {
    errors.to_string()
}

/// `interval`, give or take a fifth, so that replicas do not reconnect in step.
fn with_jitter(interval: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(0);
    let spread = hasher.finish() % 401; // 0..=400 thousandths
    interval.mul_f64(0.8 + spread as f64 / 1000.0)
}
