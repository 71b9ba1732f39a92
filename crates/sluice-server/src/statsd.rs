//! The reference's other metrics sink: statsd (`USE_STATSD`: gostats over TCP, as the
//! reference sends it) or DogStatsD (`USE_DOG_STATSD`: over UDP, with tags), beside
//! Prometheus, under the reference's stat names (`ratelimit.service.rate_limit.<stats key>.
//! total_hits`, `ratelimit_server.ShouldRateLimit.total_requests`, ...). The request path only
//! adds to atomic counters and queues timer samples (a bounded queue: samples beyond it are
//! dropped); a task sends counters' changes and the samples every flush interval.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::AsyncWriteExt;

mod mogrifier;
pub use mogrifier::Mogrifier;

/// Most timer samples held between two flushes.
const MAX_SAMPLES: usize = 65_536;

/// Most bytes of one UDP datagram (DogStatsD).
const MAX_DATAGRAM: usize = 1432;

/// Where and how stats are sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatsdSettings {
    /// `host:port`.
    pub address: String,
    /// DogStatsD (UDP, tags as `|#k:v`) rather than statsd (TCP, tags in the name).
    pub dog: bool,
    pub flush_interval: Duration,
    /// `EXTRA_TAGS`: added to every stat.
    pub tags: Vec<(String, String)>,
    /// `USE_DOG_STATSD_MOGRIFIERS`: names turned into names and tags (DogStatsD only).
    pub mogrifiers: Vec<Mogrifier>,
}

/// The reference's stat names for what the service records, on one statsd sink.
pub struct ServiceStats {
    statsd: Arc<Statsd>,
    /// Counted on every call, so registered once.
    requests: Arc<AtomicU64>,
}

impl ServiceStats {
    pub fn new(statsd: Arc<Statsd>) -> ServiceStats {
        ServiceStats {
            requests: statsd.counter("ratelimit_server.ShouldRateLimit.total_requests"),
            statsd,
        }
    }

    /// A ShouldRateLimit call that took `ms`.
    pub fn request(&self, ms: u64) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.statsd
            .time_ms("ratelimit_server.ShouldRateLimit.response_time", ms);
    }

    /// A request global shadow mode answered OK.
    pub fn global_shadow_mode(&self) {
        self.add("ratelimit.service.global_shadow_mode");
    }

    /// A failed call, by its error type.
    pub fn error(&self, err_type: &str) {
        self.add(&format!(
            "ratelimit.service.call.should_rate_limit.{err_type}"
        ));
    }

    /// A configuration load.
    pub fn config_load(&self, success: bool) {
        self.add(if success {
            "ratelimit.service.config_load_success"
        } else {
            "ratelimit.service.config_load_error"
        });
    }

    /// The counters of one limit (by its stats key): total, within, near, over and shadow.
    pub fn limit_counters(&self, stats_key: &str) -> [Arc<AtomicU64>; 5] {
        [
            "total_hits",
            "within_limit",
            "near_limit",
            "over_limit",
            "shadow_mode",
        ]
        .map(|what| {
            self.statsd
                .counter(&format!("ratelimit.service.rate_limit.{stats_key}.{what}"))
        })
    }

    fn add(&self, name: &str) {
        self.statsd.counter(name).fetch_add(1, Ordering::Relaxed);
    }
}

/// The stats, and their sender.
pub struct Statsd {
    settings: StatsdSettings,
    counters: Mutex<HashMap<String, Arc<AtomicU64>>>,
    samples: Mutex<Vec<(&'static str, u64)>>,
}

impl Statsd {
    pub fn new(settings: StatsdSettings) -> Statsd {
        Statsd {
            settings,
            counters: Mutex::new(HashMap::new()),
            samples: Mutex::new(Vec::new()),
        }
    }

    /// The counter `name` (registered on first use; the same name gives the same counter).
    pub fn counter(&self, name: &str) -> Arc<AtomicU64> {
        let mut counters = self
            .counters
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        counters
            .entry(name.to_string())
            .or_insert_with(|| Arc::new(AtomicU64::new(0)))
            .clone()
    }

    /// A timer sample of `name`, in milliseconds.
    pub fn time_ms(&self, name: &'static str, ms: u64) {
        let mut samples = self
            .samples
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if samples.len() < MAX_SAMPLES {
            samples.push((name, ms));
        }
    }

    /// The lines of what changed since the last call: counters' increments, then samples.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        {
            let counters = self
                .counters
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            for (name, counter) in counters.iter() {
                let delta = counter.swap(0, Ordering::Relaxed);
                if delta > 0 {
                    lines.push(self.line(name, delta, "c"));
                }
            }
        }
        let samples = std::mem::take(
            &mut *self
                .samples
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        );
        lines.extend(
            samples
                .into_iter()
                .map(|(name, ms)| self.line(name, ms, "ms")),
        );
        lines
    }

    /// One stat: gostats writes tags into the name (`name.__key=value`, keys sorted); DogStatsD
    /// after the type (`|#key:value`), the name and tags mogrified first when a mogrifier
    /// matches.
    fn line(&self, name: &str, value: u64, kind: &str) -> String {
        let tags = &self.settings.tags;
        if self.settings.dog {
            let (name, mut joined) = mogrifier::mogrify(&self.settings.mogrifiers, name)
                .unwrap_or_else(|| (name.to_string(), Vec::new()));
            joined.extend(tags.iter().map(|(k, v)| format!("{k}:{v}")));
            let mut line = format!("{name}:{value}|{kind}");
            if !joined.is_empty() {
                line.push_str("|#");
                line.push_str(&joined.join(","));
            }
            line
        } else {
            let mut sorted = tags.clone();
            sorted.sort();
            let suffix: String = sorted.iter().map(|(k, v)| format!(".__{k}={v}")).collect();
            format!("{name}{suffix}:{value}|{kind}")
        }
    }

    /// Sends what changed every flush interval, for as long as the future runs; a sink that is
    /// down loses that flush's stats, never blocks anything else.
    pub async fn run(self: Arc<Self>) {
        let mut every = tokio::time::interval(self.settings.flush_interval);
        every.tick().await;
        let mut tcp: Option<tokio::net::TcpStream> = None;
        let udp = if self.settings.dog {
            tokio::net::UdpSocket::bind("0.0.0.0:0").await.ok()
        } else {
            None
        };
        loop {
            every.tick().await;
            let lines = self.lines();
            if lines.is_empty() {
                continue;
            }
            if let Some(udp) = &udp {
                for datagram in datagrams(&lines) {
                    let _ = udp
                        .send_to(datagram.as_bytes(), &self.settings.address)
                        .await;
                }
                continue;
            }
            if tcp.is_none() {
                tcp = tokio::net::TcpStream::connect(&self.settings.address)
                    .await
                    .ok();
            }
            let text: String = lines.iter().map(|line| format!("{line}\n")).collect();
            let sent = match tcp.as_mut() {
                Some(stream) => stream.write_all(text.as_bytes()).await.is_ok(),
                None => false,
            };
            if !sent {
                tcp = None;
                tracing::debug!(address = %self.settings.address, "statsd sink unreachable; this flush's stats are dropped");
            }
        }
    }
}

/// `lines` packed into datagrams of at most `MAX_DATAGRAM` bytes.
fn datagrams(lines: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in lines {
        if !current.is_empty() && current.len() + line.len() + 1 > MAX_DATAGRAM {
            out.push(std::mem::take(&mut current));
        }
        if !current.is_empty() {
            current.push('\n');
        }
        current.push_str(line);
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// `EXTRA_TAGS` (`key:value,key2:value2`) as pairs; an entry without `:` is refused.
pub fn parse_tags(text: &str) -> Result<Vec<(String, String)>, String> {
    text.split(',')
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
        .map(|entry| {
            entry
                .split_once(':')
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                .ok_or_else(|| format!("'{entry}' is not key:value"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn statsd(dog: bool, tags: &[(&str, &str)]) -> Statsd {
        Statsd::new(StatsdSettings {
            address: "127.0.0.1:1".into(),
            dog,
            flush_interval: Duration::from_secs(1),
            tags: tags
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            mogrifiers: Vec::new(),
        })
    }

    #[test]
    fn counters_send_their_changes_and_tags_as_each_sink_writes_them() {
        let plain = statsd(false, &[("zone", "b"), ("app", "rl")]);
        plain
            .counter("ratelimit.service.config_load_success")
            .fetch_add(2, Ordering::Relaxed);
        plain.time_ms("ratelimit_server.ShouldRateLimit.response_time", 3);
        assert_eq!(
            plain.lines(),
            [
                "ratelimit.service.config_load_success.__app=rl.__zone=b:2|c",
                "ratelimit_server.ShouldRateLimit.response_time.__app=rl.__zone=b:3|ms",
            ]
        );
        assert!(plain.lines().is_empty(), "nothing changed since");
        let dog = statsd(true, &[("app", "rl")]);
        dog.counter("x").fetch_add(1, Ordering::Relaxed);
        assert_eq!(dog.lines(), ["x:1|c|#app:rl"]);
        assert_eq!(
            parse_tags("a:1, b:2").unwrap(),
            [("a".into(), "1".into()), ("b".into(), "2".into())]
        );
        assert!(parse_tags("broken").is_err());
    }
}
