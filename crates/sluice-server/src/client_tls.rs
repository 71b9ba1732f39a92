//! TLS of sluice's own gRPC clients (towards the xDS server and the OTLP collector): tonic's
//! client configuration from PEM files, read when called.

use std::path::{Path, PathBuf};

use tonic::transport::{Certificate, ClientTlsConfig, Identity};

/// The server's certificate chains to `ca` (else to the system's roots); sluice presents
/// `client` (certificate, key) when given. A file that cannot be read is named in the error.
pub fn client_tls(
    ca: Option<&Path>,
    client: Option<&(PathBuf, PathBuf)>,
) -> Result<ClientTlsConfig, String> {
    let read = |path: &Path| std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()));
    let mut config = ClientTlsConfig::new();
    config = match ca {
        Some(ca) => config.ca_certificate(Certificate::from_pem(read(ca)?)),
        None => config.with_native_roots(),
    };
    if let Some((cert, key)) = client {
        config = config.identity(Identity::from_pem(read(cert)?, read(key)?));
    }
    Ok(config)
}
