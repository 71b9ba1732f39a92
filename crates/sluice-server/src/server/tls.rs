//! TLS on the gRPC port (envoyproxy/ratelimit's `GRPC_SERVER_USE_TLS`): the server's
//! certificate and key, and, with `GRPC_CLIENT_TLS_CACERT`, client certificates required and
//! verified against that CA, and with `GRPC_CLIENT_TLS_SAN` valid for that name, as the
//! reference checks them. The files are read again when they change (checked every second:
//! Kubernetes rotates a Secret in place), for the connections to come, with no restart; a file
//! that fails to load leaves the last good configuration in force, logged.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{
    DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig, SignatureScheme,
};

pub use crate::settings::TlsSettings;

/// Why the TLS files could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{path}: {reason}")]
    File { path: PathBuf, reason: String },
    #[error("TLS configuration: {0}")]
    Config(String),
}

/// The server configuration in force, replaced when the files change.
pub struct TlsConfig {
    settings: TlsSettings,
    /// The protocols offered by ALPN.
    alpn: Vec<Vec<u8>>,
    current: ArcSwap<ServerConfig>,
    loaded_at: std::sync::Mutex<Vec<Option<SystemTime>>>,
}

impl TlsConfig {
    /// Loads the files; an error stops the server (a TLS port that cannot be served is not
    /// served in plaintext).
    pub fn load(settings: TlsSettings) -> Result<Arc<TlsConfig>, TlsError> {
        TlsConfig::load_offering(settings, &[b"h2"])
    }

    /// The same, offering `protocols` by ALPN (the admin port: HTTP/2 and HTTP/1.1).
    pub fn load_offering(
        settings: TlsSettings,
        protocols: &[&[u8]],
    ) -> Result<Arc<TlsConfig>, TlsError> {
        let alpn: Vec<Vec<u8>> = protocols.iter().map(|p| p.to_vec()).collect();
        let config = server_config(&settings, &alpn)?;
        let loaded_at = modified(&settings);
        Ok(Arc::new(TlsConfig {
            alpn,
            settings,
            current: ArcSwap::from_pointee(config),
            loaded_at: std::sync::Mutex::new(loaded_at),
        }))
    }

    /// The configuration for the next handshake.
    pub fn current(&self) -> Arc<ServerConfig> {
        self.current.load_full()
    }

    /// Reads the files again whenever one changes, until `self` is the last reference.
    pub async fn watch(self: Arc<Self>) {
        let mut every = tokio::time::interval(Duration::from_secs(1));
        loop {
            every.tick().await;
            let this = self.clone();
            let reloaded = tokio::task::spawn_blocking(move || this.reload_if_changed()).await;
            if let Ok(Err(error)) = reloaded {
                tracing::error!(%error, "TLS files changed but cannot be used; the previous ones stay in force");
            }
            if Arc::strong_count(&self) == 1 {
                return;
            }
        }
    }

    fn reload_if_changed(&self) -> Result<(), TlsError> {
        let now = modified(&self.settings);
        let mut loaded_at = self
            .loaded_at
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if *loaded_at == now {
            return Ok(());
        }
        // Noted even when refused: a half-written rotation is tried again at its next change.
        *loaded_at = now;
        let config = server_config(&self.settings, &self.alpn)?;
        self.current.store(Arc::new(config));
        tracing::info!("TLS certificate reloaded");
        Ok(())
    }
}

/// When each file was last modified.
fn modified(settings: &TlsSettings) -> Vec<Option<SystemTime>> {
    [
        Some(&settings.cert),
        Some(&settings.key),
        settings.client_ca.as_ref(),
    ]
    .into_iter()
    .flatten()
    .map(|path| std::fs::metadata(path).and_then(|m| m.modified()).ok())
    .collect()
}

fn file_error(path: &Path, reason: impl ToString) -> TlsError {
    TlsError::File {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    }
}

/// The rustls server configuration of `settings`, offering `alpn`.
fn server_config(settings: &TlsSettings, alpn: &[Vec<u8>]) -> Result<ServerConfig, TlsError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&settings.cert)
        .map_err(|e| file_error(&settings.cert, e))?
        .collect::<Result<_, _>>()
        .map_err(|e| file_error(&settings.cert, e))?;
    if certs.is_empty() {
        return Err(file_error(&settings.cert, "no certificate in the file"));
    }
    let key =
        PrivateKeyDer::from_pem_file(&settings.key).map_err(|e| file_error(&settings.key, e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?;
    let builder = match &settings.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for cert in CertificateDer::pem_file_iter(ca).map_err(|e| file_error(ca, e))? {
                roots
                    .add(cert.map_err(|e| file_error(ca, e))?)
                    .map_err(|e| file_error(ca, e))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| TlsError::Config(e.to_string()))?;
            let verifier: Arc<dyn ClientCertVerifier> = match &settings.client_san {
                Some(san) => Arc::new(SanVerifier {
                    inner: verifier,
                    san: ServerName::try_from(san.clone()).map_err(|e| {
                        TlsError::Config(format!("GRPC_CLIENT_TLS_SAN '{san}': {e}"))
                    })?,
                }),
                None => verifier,
            };
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(|e| TlsError::Config(e.to_string()))?;
    config.alpn_protocols = alpn.to_vec();
    Ok(config)
}

/// A client verifier that also requires the certificate to be valid for one name.
#[derive(Debug)]
struct SanVerifier {
    inner: Arc<dyn ClientCertVerifier>,
    san: ServerName<'static>,
}

impl ClientCertVerifier for SanVerifier {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        let cert = webpki::EndEntityCert::try_from(end_entity).map_err(|_| {
            rustls::Error::InvalidCertificate(rustls::CertificateError::BadEncoding)
        })?;
        cert.verify_is_valid_for_subject_name(&self.san)
            .map_err(|_| {
                rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForName)
            })?;
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}
