//! Who calls the admin API: the subject of a client certificate the port's CA signed (mTLS,
//! checked against the allowed subjects), a bearer token from the token file (as `Bearer`, or as
//! the password of HTTP Basic, which a browser sends), or both when
//! both are configured. Nothing passes without one. The token file is read again when it
//! changes (checked every second), so a token is rotated without a restart; a file that
//! cannot be read or holds no usable token keeps the tokens in force, logged.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use rustls::pki_types::{CertificateDer, ServerName};

/// The fewest characters a token may have: shorter ones can be guessed.
pub const MIN_TOKEN_CHARS: usize = 16;

/// Why the token file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TokenFileError {
    #[error("{path}: {reason}")]
    File { path: PathBuf, reason: String },
}

/// The tokens in force, each with the name a change is logged under.
pub struct Tokens {
    path: PathBuf,
    current: ArcSwap<Vec<(String, String)>>,
    loaded_at: Mutex<Option<SystemTime>>,
}

/// The tokens of the file's text: one per line, `<name> <token>` or the token alone (named
/// `token-<line>`); blank lines and `#` comments skipped.
fn parse(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut tokens = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (name, token) = match line.split_once(char::is_whitespace) {
            Some((name, token)) => (name.to_string(), token.trim().to_string()),
            None => (format!("token-{}", index + 1), line.to_string()),
        };
        if token.chars().count() < MIN_TOKEN_CHARS {
            return Err(format!(
                "line {}: a token needs at least {MIN_TOKEN_CHARS} characters",
                index + 1
            ));
        }
        tokens.push((name, token));
    }
    if tokens.is_empty() {
        return Err("holds no token".into());
    }
    Ok(tokens)
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

fn read(path: &Path) -> Result<Vec<(String, String)>, TokenFileError> {
    let error = |reason: String| TokenFileError::File {
        path: path.to_path_buf(),
        reason,
    };
    let text = std::fs::read_to_string(path).map_err(|e| error(e.to_string()))?;
    parse(&text).map_err(error)
}

impl Tokens {
    /// Reads the file; an error stops the server (an admin port whose tokens cannot be read
    /// would open to no one, or to anyone).
    pub fn load(path: &Path) -> Result<Arc<Tokens>, TokenFileError> {
        let tokens = read(path)?;
        Ok(Arc::new(Tokens {
            path: path.to_path_buf(),
            current: ArcSwap::from_pointee(tokens),
            loaded_at: Mutex::new(modified(path)),
        }))
    }

    /// The name of the token `presented`, if it is one in force (compared in constant time).
    pub fn who(&self, presented: &str) -> Option<String> {
        let tokens = self.current.load();
        let mut found = None;
        for (name, token) in tokens.iter() {
            if same(token.as_bytes(), presented.as_bytes()) {
                found = Some(name.clone());
            }
        }
        found
    }

    /// Reads the file again whenever it changes, until `self` is the last reference.
    pub async fn watch(self: Arc<Self>) {
        let mut every = tokio::time::interval(Duration::from_secs(1));
        loop {
            every.tick().await;
            let now = modified(&self.path);
            let changed = {
                let mut loaded_at = self
                    .loaded_at
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                let changed = *loaded_at != now;
                *loaded_at = now;
                changed
            };
            if changed {
                match read(&self.path) {
                    Ok(tokens) => {
                        tracing::info!(tokens = tokens.len(), "admin token file reloaded");
                        self.current.store(Arc::new(tokens));
                    }
                    Err(error) => {
                        tracing::error!(%error, "the admin token file changed but cannot be used; the tokens in force stay")
                    }
                }
            }
            if Arc::strong_count(&self) == 1 {
                return;
            }
        }
    }
}

/// Whether `a` and `b` are equal, in a time that depends on their lengths only.
fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0_u8, |diff, (x, y)| diff | (x ^ y)) == 0
}

/// The first of `allowed` that the client certificate `cert` is valid for.
pub fn allowed_subject(cert: &CertificateDer<'_>, allowed: &[String]) -> Option<String> {
    let cert = webpki::EndEntityCert::try_from(cert).ok()?;
    allowed.iter().find_map(|subject| {
        let name = ServerName::try_from(subject.as_str()).ok()?;
        cert.verify_is_valid_for_subject_name(&name)
            .ok()
            .map(|()| subject.clone())
    })
}

/// What the port knows of a caller before its request: the certificate subject it was
/// allowed under (mTLS), if any.
#[derive(Debug, Clone, Default)]
pub struct Peer {
    pub subject: Option<String>,
}

/// Who a request comes from, once authenticated.
#[derive(Debug, Clone)]
pub struct Caller(pub String);

/// How the port authenticates.
pub struct Authentication {
    pub tokens: Option<Arc<Tokens>>,
    /// Whether a client certificate valid for an allowed subject is required.
    pub mutual: bool,
}

/// Why a request is not let through.
#[derive(Debug, PartialEq, Eq)]
pub enum Denied {
    /// No credentials, or ones not in force (401, UNAUTHENTICATED).
    Unauthenticated(&'static str),
    /// A certificate for none of the allowed subjects (403, PERMISSION_DENIED).
    Forbidden(&'static str),
}

impl Authentication {
    /// The caller of a request from `peer` carrying `authorization` (its header's value).
    pub fn caller(&self, peer: &Peer, authorization: Option<&str>) -> Result<Caller, Denied> {
        let mut who = Vec::new();
        if self.mutual {
            match &peer.subject {
                Some(subject) => who.push(format!("mtls:{subject}")),
                None => {
                    return Err(Denied::Forbidden(
                        "the client certificate is valid for none of the allowed subjects",
                    ))
                }
            }
        }
        if let Some(tokens) = &self.tokens {
            let presented = authorization.and_then(presented_token).ok_or(
                Denied::Unauthenticated(
                    "a bearer token is required (authorization: Bearer <token>, or Basic with the token as the password)",
                ),
            )?;
            let name = tokens.who(&presented).ok_or(Denied::Unauthenticated(
                "the bearer token is not one in force",
            ))?;
            who.push(format!("token:{name}"));
        }
        if who.is_empty() {
            return Err(Denied::Unauthenticated("no authentication is configured"));
        }
        Ok(Caller(who.join(" ")))
    }
}

/// The token an `authorization` header presents: `Bearer <token>`, or HTTP Basic with the token
/// as the password (any user name), which a browser sends for the dashboard.
fn presented_token(authorization: &str) -> Option<String> {
    use base64::Engine;
    if let Some(token) = authorization.strip_prefix("Bearer ") {
        return Some(token.trim().to_string());
    }
    let encoded = authorization.strip_prefix("Basic ")?.trim();
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()?;
    let pair = String::from_utf8(decoded).ok()?;
    let (_, password) = pair.split_once(':')?;
    Some(password.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(text: &str) -> Arc<Tokens> {
        Arc::new(Tokens {
            path: PathBuf::new(),
            current: ArcSwap::from_pointee(parse(text).unwrap()),
            loaded_at: Mutex::new(None),
        })
    }

    #[test]
    fn a_token_file_names_its_tokens_and_refuses_short_ones() {
        let parsed = parse("# rotation\nci 0123456789abcdef0\nfedcba9876543210x\n").unwrap();
        assert_eq!(parsed[0], ("ci".into(), "0123456789abcdef0".into()));
        assert_eq!(parsed[1].0, "token-3");
        assert!(parse("short").unwrap_err().contains("16"));
        assert!(parse("\n# nothing\n").is_err());
    }

    #[test]
    fn a_caller_needs_every_configured_credential() {
        let auth = Authentication {
            tokens: Some(tokens("ops 0123456789abcdef0")),
            mutual: false,
        };
        let peer = Peer::default();
        assert_eq!(
            auth.caller(&peer, Some("Bearer 0123456789abcdef0"))
                .unwrap()
                .0,
            "token:ops"
        );
        assert!(matches!(
            auth.caller(&peer, Some("Bearer wrong-token-0000000")),
            Err(Denied::Unauthenticated(_))
        ));
        assert!(matches!(
            auth.caller(&peer, None),
            Err(Denied::Unauthenticated(_))
        ));
        let both = Authentication {
            tokens: Some(tokens("ops 0123456789abcdef0")),
            mutual: true,
        };
        assert!(matches!(
            both.caller(&peer, Some("Bearer 0123456789abcdef0")),
            Err(Denied::Forbidden(_))
        ));
        let allowed = Peer {
            subject: Some("ops.example".into()),
        };
        assert_eq!(
            both.caller(&allowed, Some("Bearer 0123456789abcdef0"))
                .unwrap()
                .0,
            "mtls:ops.example token:ops"
        );
    }
}
