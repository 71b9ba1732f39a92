//! Where the configuration comes from: files (`--config`, or the reference's `RUNTIME_ROOT`,
//! `RUNTIME_SUBDIRECTORY` and `RUNTIME_APPDIRECTORY`) watched for changes, or an xDS management
//! server (`CONFIG_TYPE=GRPC_XDS_SOTW`); how files are read; and readiness at startup.

use std::path::PathBuf;
use std::time::Duration;

use clap::builder::{BoolishValueParser, FalseyValueParser};
use clap::{ArgAction, Args};

use super::SettingsError;
use crate::xds::{XdsSettings, XdsTls};
use sluice_config::LoadOptions;
use sluice_core::duration;
use sluice_core::modifier::leasing;

/// The flags of the configuration's source.
#[derive(Debug, Clone, Args)]
pub struct SourceArgs {
    /// Configuration file or directory; repeatable. Default: `config/`, or
    /// `$RUNTIME_ROOT/$RUNTIME_SUBDIRECTORY/config` when RUNTIME_ROOT is set.
    #[arg(long = "config", env = "SLUICE_CONFIG", value_delimiter = ',')]
    pub config: Vec<PathBuf>,
    #[arg(long, env = "RUNTIME_ROOT", hide = true)]
    pub runtime_root: Option<PathBuf>,
    #[arg(long, env = "RUNTIME_SUBDIRECTORY", hide = true)]
    pub runtime_subdirectory: Option<PathBuf>,
    #[arg(
        long,
        env = "RUNTIME_APPDIRECTORY",
        hide = true,
        default_value = "config"
    )]
    pub runtime_appdirectory: PathBuf,
    /// Where the configuration comes from: `FILE` (the paths), or `GRPC_XDS_SOTW` (an xDS
    /// management server, as Envoy Gateway runs envoyproxy/ratelimit).
    #[arg(long, env = "CONFIG_TYPE", default_value = "FILE", value_parser = parse_config_type)]
    pub config_type: ConfigType,
    /// The xDS management server, `host:port` (or a URL).
    #[arg(
        long,
        env = "CONFIG_GRPC_XDS_SERVER_URL",
        default_value = "localhost:18000"
    )]
    pub config_grpc_xds_server_url: String,
    /// The node id sluice gives the management server.
    #[arg(long, env = "CONFIG_GRPC_XDS_NODE_ID", default_value = "default")]
    pub config_grpc_xds_node_id: String,
    /// TLS towards the xDS server.
    #[arg(long, env = "CONFIG_GRPC_XDS_SERVER_USE_TLS", action = ArgAction::SetTrue, value_parser = FalseyValueParser::new())]
    pub config_grpc_xds_server_use_tls: bool,
    /// The CA the xDS server's certificate must chain to (default: the system's roots).
    #[arg(long, env = "CONFIG_GRPC_XDS_SERVER_TLS_CACERT")]
    pub config_grpc_xds_server_tls_cacert: Option<PathBuf>,
    /// The certificate sluice presents to the xDS server (with the key).
    #[arg(long, env = "CONFIG_GRPC_XDS_CLIENT_TLS_CERT")]
    pub config_grpc_xds_client_tls_cert: Option<PathBuf>,
    /// The key of --config-grpc-xds-client-tls-cert.
    #[arg(long, env = "CONFIG_GRPC_XDS_CLIENT_TLS_KEY")]
    pub config_grpc_xds_client_tls_key: Option<PathBuf>,
    /// The name the xDS server's certificate must be valid for (default: the URL's host).
    #[arg(long, env = "CONFIG_GRPC_XDS_SERVER_TLS_SAN")]
    pub config_grpc_xds_server_tls_san: Option<String>,
    /// Time before a lost xDS stream is opened again (give or take a fifth).
    #[arg(long, env = "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", default_value = "3s", value_parser = duration::parse)]
    pub config_grpc_xds_server_connect_retry_interval: Duration,
    /// Let several files hold the same domain; their descriptors are merged.
    #[arg(long, env = "MERGE_DOMAIN_CONFIG", action = ArgAction::SetTrue, value_parser = FalseyValueParser::new())]
    pub merge_domain_config: bool,
    /// Every limit that does not say `debt` takes debt: a hit that does not fit is charged all
    /// the same (costs reported after the response, e.g. LLM tokens), and the limit denies
    /// until the debt is repaid at its own rate.
    #[arg(long, env = "SLUICE_DEBT", action = ArgAction::SetTrue, value_parser = FalseyValueParser::new())]
    pub debt: bool,
    /// The limits of Limitador's limits files lease their budget on Redis, each replica
    /// taking chunks of at most this many hits (and a tenth of the limit); a limit of fewer
    /// than 20 keeps the exact path (docs/kuadrant.md). Limitador's `redis_cached` sets it.
    #[arg(long, env = "SLUICE_LIMITS_FILE_LEASING")]
    pub limits_file_leasing: Option<u32>,
    /// A leased chunk of a limits file's limit unused this long is given back.
    #[arg(long, env = "SLUICE_LIMITS_FILE_LEASING_MAX_HOLD", default_value = "1s", value_parser = duration::parse)]
    pub limits_file_leasing_max_hold: Duration,
    /// Watch the config paths and reload on change (SIGHUP reloads either way).
    #[arg(long, env = "SLUICE_WATCH_CONFIG", default_value_t = true, action = ArgAction::Set, value_parser = BoolishValueParser::new())]
    pub watch_config: bool,
    /// Report NOT_SERVING (gRPC health, and 500 on /healthcheck) while the loaded config has
    /// no domain, as envoyproxy/ratelimit does.
    #[arg(long, env = "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", action = ArgAction::SetTrue, value_parser = FalseyValueParser::new())]
    pub healthy_with_at_least_one_config_loaded: bool,
    /// Start even when the config fails to load (its errors are logged): serve with no limits
    /// until a reload succeeds. Without it, a config that fails at startup stops sluice.
    #[arg(long, env = "FORCE_START_WITHOUT_INITIAL_CONFIG", action = ArgAction::SetTrue, value_parser = FalseyValueParser::new())]
    pub force_start_without_initial_config: bool,
}

impl SourceArgs {
    /// `--limits-file-leasing` as leasing's policy; refused: a chunk below leasing's smallest,
    /// a hold of 0 or over a minute (as `budget_leasing` refuses them).
    fn limits_file_leasing(&self) -> Result<Option<leasing::Policy>, SettingsError> {
        let Some(max_chunk) = self.limits_file_leasing else {
            return Ok(None);
        };
        let hold = format!("{}ms", self.limits_file_leasing_max_hold.as_millis());
        leasing::Policy::of(u64::from(max_chunk), &hold)
            .map(Some)
            .map_err(|refusal| SettingsError::Refused {
                setting: "--limits-file-leasing",
                reason: format!("{}: {}", refusal.key, refusal.reason),
            })
    }
}

/// Where the configuration comes from (`CONFIG_TYPE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigType {
    File,
    GrpcXdsSotw,
}

fn parse_config_type(text: &str) -> Result<ConfigType, String> {
    match text.to_ascii_uppercase().as_str() {
        "FILE" => Ok(ConfigType::File),
        "GRPC_XDS_SOTW" => Ok(ConfigType::GrpcXdsSotw),
        _ => Err(format!("'{text}' is not FILE or GRPC_XDS_SOTW")),
    }
}

/// The configuration's source, validated.
#[derive(Debug, Clone)]
pub struct SourceSettings {
    pub config_paths: Vec<PathBuf>,
    pub load_options: LoadOptions,
    /// `CONFIG_TYPE=GRPC_XDS_SOTW`: the configuration's management server.
    pub xds: Option<XdsSettings>,
    pub watch_config: bool,
    pub healthy_with_at_least_one_config_loaded: bool,
    pub force_start_without_initial_config: bool,
}

impl SourceArgs {
    /// Resolves the reference's runtime directories and validates the xDS settings.
    pub fn into_settings(self) -> Result<SourceSettings, SettingsError> {
        let xds = self.xds()?;
        let limits_file_leasing = self.limits_file_leasing()?;
        let config_paths = if !self.config.is_empty() {
            self.config
        } else if let Some(root) = self.runtime_root {
            let sub = self.runtime_subdirectory.unwrap_or_default();
            vec![root.join(sub).join(self.runtime_appdirectory)]
        } else {
            vec![PathBuf::from("config")]
        };
        Ok(SourceSettings {
            config_paths,
            load_options: LoadOptions {
                merge_domain_config: self.merge_domain_config,
                debt: self.debt,
                without_tickets: false,
                every_hit: false,
                limits_file_leasing,
                // Set with the store's settings (`--region`).
                regions: false,
            },
            xds,
            watch_config: self.watch_config,
            healthy_with_at_least_one_config_loaded: self.healthy_with_at_least_one_config_loaded,
            force_start_without_initial_config: self.force_start_without_initial_config,
        })
    }

    /// The xDS source, when the configuration comes from one.
    fn xds(&self) -> Result<Option<XdsSettings>, SettingsError> {
        if self.config_type == ConfigType::File {
            return Ok(None);
        }
        let url = self.config_grpc_xds_server_url.as_str();
        if url.is_empty() {
            return Err(SettingsError::Xds(
                "CONFIG_TYPE=GRPC_XDS_SOTW needs CONFIG_GRPC_XDS_SERVER_URL".into(),
            ));
        }
        let tls = self.config_grpc_xds_server_use_tls;
        let server_url = match url.split_once("://") {
            Some((_, rest)) if tls => format!("https://{rest}"),
            Some(_) => url.to_string(),
            None if tls => format!("https://{url}"),
            None => format!("http://{url}"),
        };
        let client = match (
            &self.config_grpc_xds_client_tls_cert,
            &self.config_grpc_xds_client_tls_key,
        ) {
            (Some(cert), Some(key)) => Some((cert.clone(), key.clone())),
            (None, None) => None,
            _ => return Err(SettingsError::Xds(
                "CONFIG_GRPC_XDS_CLIENT_TLS_CERT and CONFIG_GRPC_XDS_CLIENT_TLS_KEY go together"
                    .into(),
            )),
        };
        let tls_files_without_tls = self.config_grpc_xds_server_tls_cacert.is_some()
            || client.is_some()
            || self.config_grpc_xds_server_tls_san.is_some();
        if tls_files_without_tls && !tls {
            return Err(SettingsError::Xds(
                "xDS TLS files or SAN are set but CONFIG_GRPC_XDS_SERVER_USE_TLS is not".into(),
            ));
        }
        Ok(Some(XdsSettings {
            server_url,
            node_id: self.config_grpc_xds_node_id.clone(),
            retry_interval: self.config_grpc_xds_server_connect_retry_interval,
            tls: tls.then(|| XdsTls {
                ca: self.config_grpc_xds_server_tls_cacert.clone(),
                client,
                san: self.config_grpc_xds_server_tls_san.clone(),
            }),
        }))
    }
}
