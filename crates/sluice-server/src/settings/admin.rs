//! The admin port (docs/admin.md): off unless `--admin-addr` is set, and then refused unless
//! it is authenticated, by mTLS with a list of allowed subjects, or by bearer tokens read from
//! a file (never from a flag's value), or both.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;

use super::ports::TlsSettings;
use super::SettingsError;

/// The flags of the admin port.
#[derive(Debug, Clone, Args)]
pub struct AdminArgs {
    /// Serve the admin API (gRPC and JSON over HTTP) on this address; off when unset.
    #[arg(long, env = "SLUICE_ADMIN_ADDR")]
    pub admin_addr: Option<String>,
    /// A file of bearer tokens the admin API accepts, one per line (`<name> <token>`, or the
    /// token alone); read again when it changes.
    #[arg(long, env = "SLUICE_ADMIN_TOKEN_FILE")]
    pub admin_token_file: Option<PathBuf>,
    /// The admin port's certificate (PEM): the port serves TLS.
    #[arg(long, env = "SLUICE_ADMIN_TLS_CERT")]
    pub admin_tls_cert: Option<PathBuf>,
    /// The admin port's private key (PEM).
    #[arg(long, env = "SLUICE_ADMIN_TLS_KEY")]
    pub admin_tls_key: Option<PathBuf>,
    /// Require client certificates signed by this CA (PEM): mTLS.
    #[arg(long, env = "SLUICE_ADMIN_TLS_CLIENT_CA")]
    pub admin_tls_client_ca: Option<PathBuf>,
    /// The subjects a client certificate may name (DNS names of its subject alternative
    /// names), comma-separated; mTLS needs at least one.
    #[arg(long, env = "SLUICE_ADMIN_ALLOWED_SUBJECTS", value_delimiter = ',')]
    pub admin_allowed_subjects: Vec<String>,
    /// A `sluice replay --json` report the dashboard shows (read again at each look, so a job
    /// that writes a new one is shown without a restart).
    #[arg(long, env = "SLUICE_ADMIN_REPLAY_REPORT")]
    pub admin_replay_report: Option<PathBuf>,
}

/// The admin port's validated settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminSettings {
    pub addr: SocketAddr,
    pub token_file: Option<PathBuf>,
    /// TLS on the port; with a client CA, the names a client certificate may be valid for.
    pub tls: Option<TlsSettings>,
    pub allowed_subjects: Vec<String>,
    /// The replay report the dashboard shows.
    pub replay_report: Option<PathBuf>,
}

impl AdminArgs {
    /// The admin port asked for, or `None`; refused when it would serve without
    /// authentication, or when a setting cannot be honoured.
    pub fn into_settings(self) -> Result<Option<AdminSettings>, SettingsError> {
        let refuse = |reason: &str| Err(SettingsError::Admin(reason.to_string()));
        let Some(addr) = self.admin_addr else {
            if self.admin_token_file.is_some()
                || self.admin_replay_report.is_some()
                || self.admin_tls_cert.is_some()
                || !self.admin_allowed_subjects.is_empty()
            {
                return refuse("--admin-token-file, --admin-tls-*, --admin-allowed-subjects or --admin-replay-report is set but --admin-addr is not: set it, or unset them");
            }
            return Ok(None);
        };
        let addr: SocketAddr =
            addr.parse()
                .map_err(|e: std::net::AddrParseError| SettingsError::Address {
                    setting: "--admin-addr / SLUICE_ADMIN_ADDR",
                    value: addr.clone(),
                    reason: e.to_string(),
                })?;
        let subjects: Vec<String> = self
            .admin_allowed_subjects
            .into_iter()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect();
        let tls = match (self.admin_tls_cert, self.admin_tls_key) {
            (Some(cert), Some(key)) => Some(TlsSettings {
                cert,
                key,
                client_ca: self.admin_tls_client_ca.clone(),
                client_san: None,
            }),
            (None, None) => None,
            _ => return refuse("--admin-tls-cert and --admin-tls-key go together"),
        };
        if self.admin_tls_client_ca.is_some() && tls.is_none() {
            return refuse("--admin-tls-client-ca needs --admin-tls-cert and --admin-tls-key");
        }
        let mutual = tls.as_ref().is_some_and(|t| t.client_ca.is_some());
        if mutual && subjects.is_empty() {
            return refuse("mTLS on the admin port needs --admin-allowed-subjects: a certificate the CA signed is not on its own a right to change limits");
        }
        if !subjects.is_empty() && !mutual {
            return refuse("--admin-allowed-subjects needs --admin-tls-client-ca (client certificates are checked against it)");
        }
        if !mutual && self.admin_token_file.is_none() {
            return refuse("the admin API never opens without authentication: set --admin-token-file, or mTLS (--admin-tls-cert, --admin-tls-key, --admin-tls-client-ca and --admin-allowed-subjects)");
        }
        Ok(Some(AdminSettings {
            addr,
            token_file: self.admin_token_file,
            tls,
            allowed_subjects: subjects,
            replay_report: self.admin_replay_report,
        }))
    }
}
