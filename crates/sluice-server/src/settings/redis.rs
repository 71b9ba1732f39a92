//! The Redis flags, and envoyproxy/ratelimit's Redis variables translated to them:
//! `REDIS_URL` (`host:port`; for Sentinel `master,host:port,...`; for Cluster `host:port,...`),
//! `REDIS_TYPE`, `REDIS_AUTH` (`password` or `user:password`), `REDIS_TLS`, `REDIS_SOCKET_TYPE`;
//! and the same for a second Redis holding the per-second limits (`REDIS_PERSECOND=true`,
//! `REDIS_PERSECOND_URL`, `REDIS_PERSECOND_TYPE`, ...), which shares the CA file and timeouts.

use std::path::PathBuf;
use std::time::Duration;

use clap::builder::FalseyValueParser;
use clap::{ArgAction, Args, ValueEnum};

use crate::settings::choices::{RedisKindChoice, TimeSourceChoice};
use crate::settings::SettingsError;
use sluice_core::duration;
use sluice_store::redis::breaker::BreakerSettings;
use sluice_store::redis::{CircuitSettings, Pipelining, RedisKind, RedisTarget, TimeSource};

/// The flags of the Redis store.
#[derive(Debug, Clone, Args)]
pub struct RedisArgs {
    /// Redis URL(s), comma-separated: `redis://[user:password@]host:port[/db]`, `rediss://` for
    /// TLS. Cluster: seed nodes. Sentinel: the sentinels. The reference's `host:port` works too.
    /// Default: redis://127.0.0.1:6379.
    #[arg(long, env = "REDIS_URL", value_delimiter = ',', hide_env_values = true)]
    pub redis_url: Vec<String>,
    /// single, cluster or sentinel (case-insensitive).
    #[arg(long, env = "REDIS_TYPE", default_value = "single", value_parser = parse_kind)]
    pub redis_type: RedisKind,
    /// Sentinel: the name of the monitored primary (the reference puts it first in REDIS_URL).
    #[arg(long, env = "SLUICE_REDIS_SENTINEL_MASTER")]
    pub redis_sentinel_master: Option<String>,
    /// Password, or `user:password`, for URLs without credentials (with Sentinel: of the
    /// primary the sentinels name).
    #[arg(long, env = "REDIS_AUTH", hide_env_values = true)]
    pub redis_auth: Option<String>,
    /// Sentinel: the sentinels' own password, or `user:password`.
    #[arg(long, env = "REDIS_SENTINEL_AUTH", hide_env_values = true)]
    pub redis_sentinel_auth: Option<String>,
    /// Use TLS for URLs given as `host:port`.
    #[arg(long, env = "REDIS_TLS", action = ArgAction::SetTrue, value_parser = FalseyValueParser::new())]
    pub redis_tls: bool,
    /// `tcp` or `unix` (then REDIS_URL is a socket path).
    #[arg(long, env = "REDIS_SOCKET_TYPE", default_value = "tcp")]
    pub redis_socket_type: String,
    /// PEM file of the CA that signed Redis's certificate; default: the system's roots.
    #[arg(long, env = "REDIS_TLS_CACERT")]
    pub redis_tls_ca_file: Option<PathBuf>,
    /// PEM certificate sluice presents to a Redis that checks its clients (with the key).
    #[arg(long, env = "REDIS_TLS_CLIENT_CERT")]
    pub redis_tls_client_cert: Option<PathBuf>,
    /// PEM private key of --redis-tls-client-cert.
    #[arg(long, env = "REDIS_TLS_CLIENT_KEY")]
    pub redis_tls_client_key: Option<PathBuf>,
    /// Accept any certificate from Redis, unverified (the reference's variable: its TLS
    /// skips the whole verification, and so does sluice's).
    #[arg(long, env = "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", action = ArgAction::SetTrue, value_parser = FalseyValueParser::new())]
    pub redis_tls_skip_hostname_verification: bool,
    /// Time allowed to open a connection.
    #[arg(long, env = "SLUICE_REDIS_CONNECT_TIMEOUT", default_value = "2s", value_parser = duration::parse)]
    pub redis_connect_timeout: Duration,
    /// Time allowed for one request's round trip; past it the call fails (see --failure-mode).
    /// Default: REDIS_TIMEOUT when set (the reference's name), else 500ms.
    #[arg(long, env = "SLUICE_REDIS_COMMAND_TIMEOUT", value_parser = duration::parse)]
    pub redis_command_timeout: Option<Duration>,
    /// envoyproxy/ratelimit's name of --redis-command-timeout.
    #[arg(long, env = "REDIS_TIMEOUT", hide = true, value_parser = duration::parse)]
    pub redis_timeout: Option<Duration>,
    /// Implicit pipelining: how long the script calls of concurrent requests are gathered
    /// before they go to Redis together, in one pipeline (e.g. 150us). 0 (with
    /// --redis-pipeline-limit 0): off, every call is sent as it comes.
    #[arg(long, env = "REDIS_PIPELINE_WINDOW", value_parser = duration::parse)]
    pub redis_pipeline_window: Option<Duration>,
    /// Implicit pipelining: the most calls in one pipeline; 0: no limit but the window.
    #[arg(long, env = "REDIS_PIPELINE_LIMIT")]
    pub redis_pipeline_limit: Option<usize>,
    /// How long startup waits for Redis, retrying with backoff, before giving up.
    #[arg(long, env = "SLUICE_REDIS_STARTUP_WAIT", default_value = "30s", value_parser = duration::parse)]
    pub redis_startup_wait: Duration,
    /// Which clock the scripts use (fixed windows always use sluice's, as the reference).
    #[arg(long, env = "SLUICE_REDIS_TIME", value_enum, default_value_t = TimeSourceChoice::Redis)]
    pub redis_time: TimeSourceChoice,
    /// Bytes of the local over-limit cache in front of Redis; 0 turns it off.
    #[arg(long, env = "LOCAL_CACHE_SIZE_IN_BYTES", default_value_t = 0)]
    pub local_cache_size_in_bytes: usize,
    /// Prefix of every Redis key.
    #[arg(long, env = "CACHE_KEY_PREFIX", default_value = "")]
    pub cache_key_prefix: String,
    /// Keep limits of unit `second` in a Redis of their own (the flags below).
    #[arg(long, env = "REDIS_PERSECOND", action = ArgAction::SetTrue, value_parser = FalseyValueParser::new())]
    pub redis_persecond: bool,
    /// The per-second Redis's URL(s), as --redis-url.
    #[arg(
        long,
        env = "REDIS_PERSECOND_URL",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub redis_persecond_url: Vec<String>,
    /// The per-second Redis's type, as --redis-type.
    #[arg(long, env = "REDIS_PERSECOND_TYPE", default_value = "single", value_parser = parse_kind)]
    pub redis_persecond_type: RedisKind,
    /// The per-second Redis's Sentinel primary name, as --redis-sentinel-master.
    #[arg(long, env = "SLUICE_REDIS_PERSECOND_SENTINEL_MASTER")]
    pub redis_persecond_sentinel_master: Option<String>,
    /// The per-second Redis's password, as --redis-auth.
    #[arg(long, env = "REDIS_PERSECOND_AUTH", hide_env_values = true)]
    pub redis_persecond_auth: Option<String>,
    /// The per-second Redis's sentinels' password, as --redis-sentinel-auth.
    #[arg(long, env = "REDIS_PERSECOND_SENTINEL_AUTH", hide_env_values = true)]
    pub redis_persecond_sentinel_auth: Option<String>,
    /// TLS to the per-second Redis, as --redis-tls.
    #[arg(long, env = "REDIS_PERSECOND_TLS", action = ArgAction::SetTrue, value_parser = FalseyValueParser::new())]
    pub redis_persecond_tls: bool,
    /// The per-second Redis's command timeout, as --redis-command-timeout (default: the main
    /// Redis's). A request that spans both Redis gets the longer of the two.
    #[arg(long, env = "REDIS_PERSECOND_TIMEOUT", value_parser = duration::parse)]
    pub redis_persecond_timeout: Option<Duration>,
    /// The per-second Redis's pipelining window, as --redis-pipeline-window.
    #[arg(long, env = "REDIS_PERSECOND_PIPELINE_WINDOW", value_parser = duration::parse)]
    pub redis_persecond_pipeline_window: Option<Duration>,
    /// The per-second Redis's pipelining limit, as --redis-pipeline-limit.
    #[arg(long, env = "REDIS_PERSECOND_PIPELINE_LIMIT")]
    pub redis_persecond_pipeline_limit: Option<usize>,
    /// The per-second Redis's socket type, as --redis-socket-type.
    #[arg(long, env = "REDIS_PERSECOND_SOCKET_TYPE", default_value = "tcp")]
    pub redis_persecond_socket_type: String,
    /// Store calls that fail in a row (errors or timeouts) before the circuit opens: calls
    /// then wait on nothing and each limit answers as its on_store_failure (else
    /// --failure-mode) says, until a probe is answered. 0: the circuit never opens.
    #[arg(long, env = "SLUICE_STORE_CIRCUIT_FAILURES", default_value_t = 0)]
    pub store_circuit_failures: u32,
    /// How often an open circuit probes Redis (a PING of each Redis); the first answer
    /// closes it.
    #[arg(long, env = "SLUICE_STORE_CIRCUIT_PROBE_INTERVAL", default_value = "200ms", value_parser = duration::parse)]
    pub store_circuit_probe_interval: Duration,
    /// The sluice replicas sharing this Redis, which a local share divides each limit by.
    /// Unset: learnt from Redis while it answers (a heartbeat of each replica every second).
    #[arg(long, env = "SLUICE_STORE_REPLICAS")]
    pub store_replicas: Option<u32>,
    /// The region this replica serves, for limits held across regions (`global`,
    /// docs/regions.md): its replicas share this Redis, and ask --global-home-redis-url for
    /// each window's budget. Unset: a `global` limit is refused.
    #[arg(long, env = "SLUICE_REGION")]
    pub region: Option<String>,
    /// The home Redis of limits held across regions (URLs as --redis-url); in the home region,
    /// its own Redis.
    #[arg(
        long,
        env = "SLUICE_GLOBAL_HOME_REDIS_URL",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub global_home_redis_url: Vec<String>,
    /// The home Redis's type, as --redis-type.
    #[arg(long, env = "SLUICE_GLOBAL_HOME_REDIS_TYPE", default_value = "single", value_parser = parse_kind)]
    pub global_home_redis_type: RedisKind,
    /// Time allowed for a call to home; past it the region counts as cut off from home.
    #[arg(long, env = "SLUICE_GLOBAL_LINK_TIMEOUT", default_value = "1s", value_parser = duration::parse)]
    pub global_link_timeout: Duration,
}

/// The most bytes of a region's name.
const MAX_REGION_NAME: usize = 64;

/// Where a replica takes part in limits held across regions.
#[derive(Debug, Clone)]
pub struct GlobalSettings {
    /// `--region`.
    pub region: String,
    /// `--global-home-redis-url`, with `--global-link-timeout` as its command timeout.
    pub home: RedisTarget,
}

/// One Redis deployment as the flags describe it.
struct Endpoint<'a> {
    /// The variable named in errors.
    url_variable: &'a str,
    urls: &'a [String],
    kind: RedisKind,
    sentinel_master: Option<String>,
    auth: Option<&'a str>,
    sentinel_auth: Option<&'a str>,
    tls: bool,
    socket_type: &'a str,
    command_timeout: Duration,
    pipelining: Pipelining,
}

/// Validated Redis settings.
#[derive(Debug, Clone)]
pub struct RedisSettings {
    pub target: RedisTarget,
    pub redis_startup_wait: Duration,
    pub cache_key_prefix: String,
    /// With `REDIS_PERSECOND`: the Redis of the limits of unit `second`.
    pub per_second: Option<RedisTarget>,
    pub redis_time: TimeSource,
    /// Bytes of the local over-limit cache; 0: none.
    pub local_cache_size_in_bytes: usize,
    /// The circuit breaker, and the replica count of local shares.
    pub circuit: CircuitSettings,
    /// Limits held across regions (`--region`), when this replica takes part in them.
    pub global: Option<GlobalSettings>,
}

/// Time for one request's round trip when no setting says.
const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_millis(500);

/// Where Redis is when no URL is given.
const DEFAULT_URL: &str = "redis://127.0.0.1:6379";

/// The pipelining a Redis's two flags ask for: adaptive when neither is given, else the
/// reference's (a window of 0 and a limit of 0: off).
fn pipelining(window: Option<Duration>, limit: Option<usize>) -> Pipelining {
    match (window, limit) {
        (None, None) => Pipelining::ADAPTIVE,
        (window, limit) => Pipelining {
            window: window.unwrap_or_default(),
            limit: limit.unwrap_or_default(),
            adaptive: false,
        },
    }
}

fn parse_kind(text: &str) -> Result<RedisKind, String> {
    RedisKindChoice::from_str(text, true)
        .map(RedisKind::from)
        .map_err(|_| format!("'{text}' is not single, cluster or sentinel"))
}

impl RedisArgs {
    /// Resolves the reference's forms into URLs and validates.
    pub fn into_settings(self) -> Result<RedisSettings, SettingsError> {
        let command_timeout = self
            .redis_command_timeout
            .or(self.redis_timeout)
            .unwrap_or(DEFAULT_COMMAND_TIMEOUT);
        let main = Endpoint {
            url_variable: "--redis-url / REDIS_URL",
            urls: &self.redis_url,
            kind: self.redis_type,
            sentinel_master: self.redis_sentinel_master.clone(),
            auth: self.redis_auth.as_deref(),
            sentinel_auth: self.redis_sentinel_auth.as_deref(),
            tls: self.redis_tls,
            socket_type: &self.redis_socket_type,
            command_timeout,
            pipelining: pipelining(self.redis_pipeline_window, self.redis_pipeline_limit),
        };
        let main = self.target(main)?;
        let per_second = if self.redis_persecond {
            if self.redis_persecond_url.is_empty() {
                return Err(SettingsError::Redis(
                    "REDIS_PERSECOND is on but REDIS_PERSECOND_URL is not set".into(),
                ));
            }
            let endpoint = Endpoint {
                url_variable: "--redis-persecond-url / REDIS_PERSECOND_URL",
                urls: &self.redis_persecond_url,
                kind: self.redis_persecond_type,
                sentinel_master: self.redis_persecond_sentinel_master.clone(),
                auth: self.redis_persecond_auth.as_deref(),
                sentinel_auth: self.redis_persecond_sentinel_auth.as_deref(),
                tls: self.redis_persecond_tls,
                socket_type: &self.redis_persecond_socket_type,
                command_timeout: self.redis_persecond_timeout.unwrap_or(command_timeout),
                pipelining: pipelining(
                    self.redis_persecond_pipeline_window,
                    self.redis_persecond_pipeline_limit,
                ),
            };
            Some(self.target(endpoint)?)
        } else {
            None
        };
        let circuit = self.circuit()?;
        let global = self.global()?;
        Ok(RedisSettings {
            target: main,
            per_second,
            redis_startup_wait: self.redis_startup_wait,
            cache_key_prefix: self.cache_key_prefix,
            local_cache_size_in_bytes: self.local_cache_size_in_bytes,
            redis_time: self.redis_time.into(),
            circuit,
            global,
        })
    }

    /// `--region` and the home Redis, validated: both or neither.
    fn global(&self) -> Result<Option<GlobalSettings>, SettingsError> {
        let region = match (&self.region, self.global_home_redis_url.is_empty()) {
            (None, true) => return Ok(None),
            (Some(_), true) => {
                return Err(SettingsError::Redis(
                    "--region is set but --global-home-redis-url is not: a region takes its global limits' budget from home".into(),
                ))
            }
            (None, false) => {
                return Err(SettingsError::Redis(
                    "--global-home-redis-url is set but --region is not: home knows each region by its name".into(),
                ))
            }
            (Some(region), false) => region.trim(),
        };
        let valid = |c: char| c.is_ascii_alphanumeric() || "-_.".contains(c);
        if region.is_empty() || region.len() > MAX_REGION_NAME || !region.chars().all(valid) {
            return Err(SettingsError::Redis(format!(
                "--region '{region}': a name of 1 to {MAX_REGION_NAME} letters, digits, '-', '_' or '.'"
            )));
        }
        if self.global_link_timeout.is_zero() {
            return Err(SettingsError::Redis(
                "--global-link-timeout must be longer than 0".into(),
            ));
        }
        let home = Endpoint {
            url_variable: "--global-home-redis-url / SLUICE_GLOBAL_HOME_REDIS_URL",
            urls: &self.global_home_redis_url,
            kind: self.global_home_redis_type,
            sentinel_master: None,
            auth: None,
            sentinel_auth: None,
            tls: false,
            socket_type: "tcp",
            command_timeout: self.global_link_timeout,
            pipelining: Pipelining::default(),
        };
        Ok(Some(GlobalSettings {
            region: region.to_string(),
            home: self.target(home)?,
        }))
    }

    /// The circuit breaker's flags, validated.
    fn circuit(&self) -> Result<CircuitSettings, SettingsError> {
        if self.store_circuit_probe_interval.is_zero() {
            return Err(SettingsError::Redis(
                "--store-circuit-probe-interval must be longer than 0".into(),
            ));
        }
        let replicas = match self.store_replicas {
            Some(0) => {
                return Err(SettingsError::Zero {
                    setting: "--store-replicas",
                })
            }
            replicas => replicas,
        };
        Ok(CircuitSettings {
            breaker: BreakerSettings {
                failures: self.store_circuit_failures,
                probe_interval: self.store_circuit_probe_interval,
            },
            replicas,
            learn_replicas: self.store_circuit_failures > 0,
        })
    }

    /// The target of `endpoint`, with the CA file and timeouts every Redis shares.
    fn target(&self, endpoint: Endpoint<'_>) -> Result<RedisTarget, SettingsError> {
        let given = if endpoint.urls.is_empty() {
            vec![DEFAULT_URL.to_string()]
        } else {
            endpoint.urls.to_vec()
        };
        let mut urls: Vec<String> = given.iter().map(|u| u.trim().to_string()).collect();
        urls.retain(|u| !u.is_empty());
        let mut master = endpoint.sentinel_master.clone();
        if endpoint.kind == RedisKind::Sentinel
            && master.is_none()
            && !urls.is_empty()
            && !urls[0].contains(':')
        {
            master = Some(urls.remove(0));
        }
        if endpoint.kind == RedisKind::Sentinel && master.is_none() {
            return Err(SettingsError::Redis(format!(
                "Sentinel needs the primary's name: {} = name,host:port,...",
                endpoint.url_variable
            )));
        }
        if urls.is_empty() {
            return Err(SettingsError::Redis(format!(
                "{} is empty",
                endpoint.url_variable
            )));
        }
        let urls: Vec<String> = urls
            .iter()
            .map(|url| endpoint.full_url(url))
            .collect::<Result<_, _>>()?;
        let tls_client = match (&self.redis_tls_client_cert, &self.redis_tls_client_key) {
            (Some(cert), Some(key)) => Some((cert.clone(), key.clone())),
            (None, None) => None,
            _ => {
                return Err(SettingsError::Redis(
                    "REDIS_TLS_CLIENT_CERT and REDIS_TLS_CLIENT_KEY go together".into(),
                ))
            }
        };
        let urls = if self.redis_tls_skip_hostname_verification {
            urls.into_iter().map(|url| unverified(&url)).collect()
        } else {
            urls
        };
        let primary_auth = (endpoint.kind == RedisKind::Sentinel)
            .then(|| endpoint.auth.filter(|a| !a.is_empty()).map(str::to_string))
            .flatten();
        Ok(RedisTarget {
            kind: endpoint.kind,
            urls,
            sentinel_master: master,
            primary_auth,
            tls_ca_file: self.redis_tls_ca_file.clone(),
            tls_client,
            connect_timeout: self.redis_connect_timeout,
            command_timeout: endpoint.command_timeout,
            pipelining: endpoint.pipelining,
        })
    }
}

impl Endpoint<'_> {
    /// The password (or `user:password`) this endpoint's URLs carry: with Sentinel the URLs are
    /// the sentinels', which have their own.
    fn url_auth(&self) -> Option<&str> {
        let auth = if self.kind == RedisKind::Sentinel {
            self.sentinel_auth
        } else {
            self.auth
        };
        auth.filter(|a| !a.is_empty())
    }

    /// A URL with scheme and credentials: `host:port` becomes `redis[s]://[auth@]host:port`,
    /// and a URL without credentials gets the configured ones.
    fn full_url(&self, url: &str) -> Result<String, SettingsError> {
        let url = if url.contains("://") {
            url.to_string()
        } else {
            match self.socket_type.to_ascii_lowercase().as_str() {
                "unix" => format!("redis+unix://{url}"),
                "tcp" | "" => {
                    let scheme = if self.tls { "rediss" } else { "redis" };
                    format!("{scheme}://{url}")
                }
                other => {
                    return Err(SettingsError::Redis(format!(
                        "socket type '{other}' is not tcp or unix"
                    )))
                }
            }
        };
        Ok(match self.url_auth() {
            Some(auth) => with_credentials(&url, auth),
            None => url,
        })
    }
}

/// A `rediss://` URL whose certificate is not verified (redis-rs's `#insecure`).
fn unverified(url: &str) -> String {
    if url.starts_with("rediss://") && !url.contains('#') {
        format!("{url}#insecure")
    } else {
        url.to_string()
    }
}

/// `url` with `auth` (`password` or `user:password`) when it carries no credentials of its own:
/// in the authority of `redis://` and `rediss://`, as `user` and `pass` parameters of a Unix
/// socket's URL.
fn with_credentials(url: &str, auth: &str) -> String {
    let (user, password) = match auth.split_once(':') {
        Some((user, password)) => (user, password),
        None => ("", auth),
    };
    if let Some(path) = url.strip_prefix("redis+unix://") {
        if path.contains("pass=") {
            return url.to_string();
        }
        let separator = if path.contains('?') { '&' } else { '?' };
        let mut out = format!("{url}{separator}pass={}", percent_encode(password));
        if !user.is_empty() {
            out.push_str(&format!("&user={}", percent_encode(user)));
        }
        return out;
    }
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority = rest.split(['/', '?']).next().unwrap_or_default();
    if authority.contains('@') {
        return url.to_string();
    }
    format!(
        "{scheme}://{}:{}@{rest}",
        percent_encode(user),
        percent_encode(password)
    )
}

/// Percent-encodes everything but letters, digits and `-._~` (what RFC 3986 never escapes),
/// for a URL's userinfo.
fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        redis: RedisArgs,
    }

    fn settings(argv: &[&str]) -> Result<RedisSettings, SettingsError> {
        let mut full = vec!["sluice"];
        full.extend_from_slice(argv);
        Cli::parse_from(full).redis.into_settings()
    }

    #[test]
    fn reference_forms_become_urls() {
        let s = settings(&[
            "--redis-url",
            "localhost:6379",
            "--redis-auth",
            "pw",
            "--redis-tls",
        ])
        .unwrap();
        assert_eq!(s.target.urls, ["rediss://:pw@localhost:6379"]);
        let s = settings(&[
            "--redis-type",
            "SENTINEL",
            "--redis-url",
            "mymaster,h1:26379,h2:26379",
        ])
        .unwrap();
        assert_eq!(s.target.sentinel_master.as_deref(), Some("mymaster"));
        assert_eq!(s.target.urls, ["redis://h1:26379", "redis://h2:26379"]);
        // REDIS_AUTH is the primary's; the sentinels' is REDIS_SENTINEL_AUTH.
        let s = settings(&[
            "--redis-type",
            "sentinel",
            "--redis-url",
            "mymaster,h1:26379",
            "--redis-auth",
            "primary-pw",
            "--redis-sentinel-auth",
            "sentinel-pw",
        ])
        .unwrap();
        assert_eq!(s.target.urls, ["redis://:sentinel-pw@h1:26379"]);
        assert_eq!(s.target.primary_auth.as_deref(), Some("primary-pw"));
        let s = settings(&[
            "--redis-url",
            "/tmp/redis.sock",
            "--redis-socket-type",
            "unix",
        ])
        .unwrap();
        assert_eq!(s.target.urls, ["redis+unix:///tmp/redis.sock"]);
    }

    #[test]
    fn redis_auth_applies_to_every_url_without_credentials() {
        let s = settings(&["--redis-auth", "p@ss:w/rd"]).unwrap();
        assert_eq!(s.target.urls, ["redis://p%40ss:w%2Frd@127.0.0.1:6379"]);
        let s = settings(&["--redis-url", "rediss://h:1/2", "--redis-auth", "pw"]).unwrap();
        assert_eq!(s.target.urls, ["rediss://:pw@h:1/2"]);
        let s = settings(&["--redis-url", "redis://u:own@h:1", "--redis-auth", "pw"]).unwrap();
        assert_eq!(
            s.target.urls,
            ["redis://u:own@h:1"],
            "the URL's own credentials win"
        );
        let s = settings(&[
            "--redis-url",
            "/run/redis.sock",
            "--redis-socket-type",
            "unix",
            "--redis-auth",
            "pw",
        ])
        .unwrap();
        assert_eq!(s.target.urls, ["redis+unix:///run/redis.sock?pass=pw"]);
    }

    #[test]
    fn sentinel_without_a_master_name_is_refused() {
        let err =
            settings(&["--redis-type", "sentinel", "--redis-url", "redis://h:26379"]).unwrap_err();
        assert!(err.to_string().contains("primary's name"), "{err}");
    }

    #[test]
    fn per_second_limits_get_their_own_redis_with_the_same_forms() {
        let s = settings(&["--redis-url", "main:6379"]).unwrap();
        assert!(s.per_second.is_none());
        let s = settings(&[
            "--redis-url",
            "main:6379",
            "--redis-persecond",
            "--redis-persecond-url",
            "fast:6380",
            "--redis-persecond-auth",
            "pw",
            "--redis-persecond-tls",
        ])
        .unwrap();
        let per_second = s.per_second.expect("a per-second target");
        assert_eq!(per_second.urls, ["rediss://:pw@fast:6380"]);
        assert_eq!(s.target.urls, ["redis://main:6379"]);
        assert_eq!(s.target.command_timeout, Duration::from_millis(500));
        assert_eq!(s.target.pipelining, Pipelining::ADAPTIVE);
        assert_eq!(per_second.pipelining, Pipelining::ADAPTIVE);
        let off = settings(&["--redis-pipeline-window", "0"]).unwrap();
        assert!(!off.target.pipelining.enabled(), "the reference's 0: off");
        let s = settings(&[
            "--redis-pipeline-window",
            "150us",
            "--redis-pipeline-limit",
            "8",
            "--redis-persecond",
            "--redis-persecond-url",
            "fast:6380",
            "--redis-persecond-pipeline-limit",
            "4",
        ])
        .unwrap();
        let expected = Pipelining {
            window: Duration::from_micros(150),
            limit: 8,
            adaptive: false,
        };
        assert_eq!(s.target.pipelining, expected);
        let per_second = s.per_second.expect("a per-second target");
        assert_eq!(per_second.pipelining.limit, 4);
        assert!(per_second.pipelining.window.is_zero() && per_second.pipelining.enabled());
        let err = settings(&["--redis-persecond"]).unwrap_err();
        assert!(err.to_string().contains("REDIS_PERSECOND_URL"), "{err}");
    }
}
