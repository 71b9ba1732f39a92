//! envoyproxy/ratelimit's environment variables that sluice does not implement: each one that
//! is set is reported once at startup as ignored, with the reason, never silently; and the
//! security settings among them, which stop sluice instead: serving plaintext where TLS was
//! asked for is not a degradation to warn about.

/// (variable or prefix ending in `*`, why sluice ignores it).
pub const IGNORED: &[(&str, &str)] = &[
    (
        "GOSTATS_FLUSH_INTERVAL_SECONDS",
        "stats are sent every STATS_FLUSH_INTERVAL",
    ),
    (
        "PROMETHEUS_MAPPER_YAML",
        "metric names and labels are fixed (the reference mapping's)",
    ),
    ("DEBUG_HOST", "no debug port: /rlconfig is on the HTTP port"),
    ("DEBUG_PORT", "no debug port: /rlconfig is on the HTTP port"),
    ("GRPC_UDS", "the gRPC port is TCP"),
    (
        "RUNTIME_WATCH_ROOT",
        "sluice watches the config paths themselves (--watch-config)",
    ),
    (
        "RUNTIME_IGNOREDOTFILES",
        "names starting with '.' are always skipped",
    ),
    (
        "EXPIRATION_JITTER_MAX_SECONDS",
        "keys expire exactly when their state stops mattering",
    ),
    (
        "REDIS_POOL_SIZE",
        "one multiplexed connection serves every request",
    ),
    (
        "REDIS_PERSECOND_POOL_SIZE",
        "one multiplexed connection serves every request",
    ),
    (
        "MEMCACHE_*",
        "no memcached backend: use the memory or Redis store",
    ),
    (
        "XDS_CLIENT_*",
        "a lost xDS stream is opened again after CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL, give or take a fifth",
    ),
    (
        "CONFIG_GRPC_XDS_NODE_METADATA",
        "the node sent to the xDS server carries its id only",
    ),
    (
        "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
        "the xDS stream carries no additional headers",
    ),
    (
        "DISABLE_STATS",
        "metrics are always kept; /metrics renders them when scraped",
    ),
    (
        "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS",
        "the response-time histogram is in seconds",
    ),
    (
        "REDIS_CLUSTER_PIPELINE_PARALLELISM",
        "a request's Cluster slots are called concurrently",
    ),
    (
        "REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM",
        "a request's Cluster slots are called concurrently",
    ),
    (
        "REDIS_POOL_ON_EMPTY_BEHAVIOR",
        "one multiplexed connection: there is no pool to run empty",
    ),
    (
        "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR",
        "one multiplexed connection: there is no pool to run empty",
    ),
    (
        "REDIS_STARTUP_*",
        "startup waits up to --redis-startup-wait, backing off from 100 ms to 2 s",
    ),
];

/// Security settings sluice cannot honour yet: set, they stop it (variable or prefix ending
/// in `*`, what it asks for).
pub const REFUSED: &[(&str, &str)] = &[];

/// The refused variables set in `vars` to something other than off (`false`, `0`, `no`,
/// `off`, empty), each with what it asks for, sorted.
pub fn refused_in(vars: impl Iterator<Item = (String, String)>) -> Vec<(String, &'static str)> {
    let mut found: Vec<(String, &'static str)> = vars
        .filter(|(_, value)| {
            let value = value.trim().to_ascii_lowercase();
            !matches!(value.as_str(), "" | "false" | "0" | "no" | "off")
        })
        .filter_map(|(name, _)| Some((name.clone(), matching(REFUSED, &name)?)))
        .collect();
    found.sort();
    found
}

/// What `table` says of `name`, by exact name or by a prefix ending in `*`.
fn matching(table: &[(&str, &'static str)], name: &str) -> Option<&'static str> {
    table
        .iter()
        .find(|(pattern, _)| match pattern.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => name == *pattern,
        })
        .map(|(_, why)| *why)
}

/// The ignored variables set in `vars`, each with its reason, sorted.
pub fn ignored_in(vars: impl Iterator<Item = (String, String)>) -> Vec<(String, &'static str)> {
    let mut found: Vec<(String, &'static str)> = vars
        .filter_map(|(name, _)| Some((name.clone(), matching(IGNORED, &name)?)))
        .collect();
    found.sort();
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_names_and_prefixes() {
        let vars = [
            ("DEBUG_PORT", "6070"),
            ("MEMCACHE_HOST_PORT", "x"),
            ("PATH", "/bin"),
            ("REDIS_URL", "r"),
        ];
        let found = ignored_in(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let names: Vec<&str> = found.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["DEBUG_PORT", "MEMCACHE_HOST_PORT"]);
    }

    #[test]
    fn every_security_setting_of_the_reference_is_honoured_now() {
        let vars = [
            ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true"),
            ("GRPC_SERVER_USE_TLS", "true"),
        ];
        let found = refused_in(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        assert!(found.is_empty(), "{found:?}");
    }
}
