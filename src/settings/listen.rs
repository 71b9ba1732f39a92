//! The settings of a listening port: what it allows its connections, and the TLS files and
//! checks of the gRPC port. Values only: the server's `accept` and `tls` modules apply them.

use std::path::PathBuf;
use std::time::Duration;

/// What one port allows its connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    pub max_connections: usize,
    /// The time a new connection has to send its first bytes.
    pub handshake_timeout: Duration,
}

/// The TLS files and checks of the gRPC port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// Client certificates are required and must chain to this CA.
    pub client_ca: Option<PathBuf>,
    /// ...and be valid for this name (a DNS name in their subject alternative names).
    pub client_san: Option<String>,
}
