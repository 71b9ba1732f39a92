//! The process's resident memory, for the examples that measure bytes per key or override
//! (included by `#[path]`; not an example of its own).

/// The resident set size, in bytes (0 where /proc cannot be read).
pub fn resident_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}
