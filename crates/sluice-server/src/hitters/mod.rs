//! Who is being limited (docs/heavy-hitters.md): for each limit (a rule, named by its stats
//! key as the limit metrics name it), the descriptor values with the most hits and the most
//! denials over the last minute and the last hour, in Space-Saving sketches (`space_saving`)
//! kept in sliding windows of slots (`window`), and the limit's hits and denials over the last
//! hour in 10-second steps (`timeline`). Memory is bounded whatever the number of values:
//! `capacity` counters a sketch, two sketches a slot, at most `max_limits` limits tracked.
//! A decision costs a hash of the descriptor's entries and one uncontended lock of its limit.
//! `exposition` writes the top values as Prometheus series (at most `top` a limit, window and
//! kind); `shared` merges the lists of the replicas that share a Redis.

pub mod shared;
pub mod space_saving;
mod timeline;
pub mod window;
pub mod zipf;

use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use sluice_core::labels::LimitLabels;
use sluice_limiter::ticket::is_matched;
use sluice_proto::rate_limit_descriptor::Entry;
pub use timeline::Point;
use timeline::Timeline;
use window::Window;
pub use window::{By, Heavy, Top};

/// The longest value text kept (a descriptor's entries as `key=value,key=value`); longer ones
/// are cut at a character boundary and end with `…`.
pub const MAX_VALUE_BYTES: usize = 256;

/// How many values are tracked, and how many are told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HittersSettings {
    /// Counters of each sketch (0: no tracking). A count is over the true one by at most the
    /// window's hits over this.
    pub capacity: usize,
    /// Values each top list tells (the Prometheus series and the dashboard).
    pub top: usize,
    /// Limits tracked at most; a limit first seen past it is not tracked.
    pub max_limits: usize,
    /// The top values are on /metrics (`exposition`); off by default, values being tenants'
    /// names and /metrics unauthenticated.
    pub exported: bool,
}

impl Default for HittersSettings {
    fn default() -> Self {
        HittersSettings {
            capacity: 128,
            top: 10,
            max_limits: 200,
            exported: false,
        }
    }
}

/// The windows a top list is asked of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Span {
    #[serde(rename = "1m")]
    Minute,
    #[serde(rename = "1h")]
    Hour,
}

impl Span {
    pub const ALL: [Span; 2] = [Span::Minute, Span::Hour];

    pub fn as_str(self) -> &'static str {
        match self {
            Span::Minute => "1m",
            Span::Hour => "1h",
        }
    }
}

/// A limit's name: its domain and its stats key.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LimitName {
    pub domain: String,
    pub limit: String,
}

/// What is tracked of one limit.
pub struct Tracker {
    minute: Window,
    hour: Window,
    timeline: Timeline,
}

impl Tracker {
    fn new(capacity: usize) -> Tracker {
        Tracker {
            // Six slots each: a window is its length less at most one slot old.
            minute: Window::new(6, 10, capacity),
            hour: Window::new(6, 600, capacity),
            timeline: Timeline::new(),
        }
    }

    fn window(&self, span: Span) -> &Window {
        match span {
            Span::Minute => &self.minute,
            Span::Hour => &self.hour,
        }
    }

    /// The values denied in the newest two 10-second slots.
    fn denied_now(&self, now: u64, k: usize) -> Top {
        self.minute.top_of_last(now, By::Denials, k, 2)
    }
}

/// One tracked limit.
pub struct Tracked {
    pub name: LimitName,
    tracker: Mutex<Tracker>,
}

impl Tracked {
    fn lock(&self) -> MutexGuard<'_, Tracker> {
        self.tracker
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// What the dashboard and the admin API read of one limit.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LimitView {
    pub domain: String,
    pub limit: String,
    /// The rule's limits in force as the configuration says them (filled by the admin port).
    pub in_force: Vec<String>,
    /// Hits and denials over the last minute, as counted by the sketches' totals.
    pub hits_last_minute: u64,
    pub denials_last_minute: u64,
    /// The last hour in 10-second steps.
    pub timeline: Vec<Point>,
    pub top_hits: Top,
    pub top_denials: Top,
    /// The values denied in the last 10 to 20 seconds, most denied first.
    pub denied_now: Top,
}

/// Every limit's tracking.
pub struct HeavyHitters {
    settings: HittersSettings,
    hasher: foldhash::fast::RandomState,
    /// The clock: seconds since the epoch are `unix_at_start + started.elapsed()`.
    started: Instant,
    unix_at_start: u64,
    limits: Mutex<Vec<Arc<Tracked>>>,
    /// This replica's name among those sharing a Redis (random, made at start).
    replica: String,
}

impl Default for HeavyHitters {
    fn default() -> Self {
        HeavyHitters::new(HittersSettings::default())
    }
}

impl HeavyHitters {
    pub fn new(settings: HittersSettings) -> HeavyHitters {
        let unix_at_start = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        HeavyHitters {
            settings,
            hasher: foldhash::fast::RandomState::default(),
            started: Instant::now(),
            unix_at_start,
            limits: Mutex::new(Vec::new()),
            replica: format!(
                "{:016x}",
                foldhash::fast::RandomState::default()
                    .hash_one((std::process::id(), unix_at_start))
            ),
        }
    }

    /// This replica's name among those sharing a Redis.
    pub fn replica(&self) -> &str {
        &self.replica
    }

    pub fn settings(&self) -> HittersSettings {
        self.settings
    }

    /// Seconds since the epoch.
    pub fn now(&self) -> u64 {
        self.unix_at_start + self.started.elapsed().as_secs()
    }

    fn registry(&self) -> MutexGuard<'_, Vec<Arc<Tracked>>> {
        self.limits
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The tracking of the limit under `labels`, made when first asked; `None` when tracking
    /// is off or `max_limits` are tracked already.
    pub fn tracker(&self, labels: &LimitLabels) -> Option<Arc<Tracked>> {
        if self.settings.capacity == 0 {
            return None;
        }
        let name = LimitName {
            domain: labels.domain.clone(),
            limit: labels.stats_key.clone(),
        };
        let mut limits = self.registry();
        if let Some(found) = limits.iter().find(|t| t.name == name) {
            return Some(found.clone());
        }
        if limits.len() >= self.settings.max_limits {
            return None;
        }
        let tracked = Arc::new(Tracked {
            name,
            tracker: Mutex::new(Tracker::new(self.settings.capacity)),
        });
        limits.push(tracked.clone());
        Some(tracked)
    }

    /// Counts `cost` hits of the descriptor `entries` on `tracked`, denied or not (a lease's
    /// or a ticket's token is not part of the value).
    pub fn record(&self, tracked: &Tracked, entries: &[Entry], cost: u64, denied: bool) {
        self.record_at(self.now(), tracked, entries, cost, denied);
    }

    /// `record`, at second `now` since the epoch.
    pub fn record_at(
        &self,
        now: u64,
        tracked: &Tracked,
        entries: &[Entry],
        cost: u64,
        denied: bool,
    ) {
        if entries.is_empty() {
            return;
        }
        let mut hasher = self.hasher.build_hasher();
        for entry in entries.iter().filter(|e| is_matched(&e.key)) {
            hasher.write(entry.key.as_bytes());
            hasher.write_u8(b'=');
            hasher.write(entry.value.as_bytes());
            hasher.write_u8(b',');
        }
        let hash = hasher.finish();
        // The value's text, written at most once, when it first takes a counter.
        let text: std::cell::OnceCell<Arc<str>> = std::cell::OnceCell::new();
        let value = || text.get_or_init(|| Arc::from(value_text(entries))).clone();
        let mut tracker = tracked.lock();
        tracker.minute.add(now, hash, cost, denied, &value);
        tracker.hour.add(now, hash, cost, denied, &value);
        tracker.timeline.add(now, cost, denied);
    }

    /// The limits tracked.
    pub fn names(&self) -> Vec<LimitName> {
        self.registry().iter().map(|t| t.name.clone()).collect()
    }

    fn find(&self, name: &LimitName) -> Option<Arc<Tracked>> {
        self.registry().iter().find(|t| &t.name == name).cloned()
    }

    /// The `k` values of `name` with the most hits or denials over `span`; `None` for a limit
    /// not tracked.
    pub fn top(&self, name: &LimitName, span: Span, by: By, k: usize) -> Option<Top> {
        self.top_at(self.now(), name, span, by, k)
    }

    /// `top`, at second `now` since the epoch.
    pub fn top_at(&self, now: u64, name: &LimitName, span: Span, by: By, k: usize) -> Option<Top> {
        let tracked = self.find(name)?;
        let top = tracked.lock().window(span).top(now, by, k);
        Some(top)
    }

    /// The limits tracked, each with its tracking.
    fn tracked(&self) -> Vec<Arc<Tracked>> {
        self.registry().clone()
    }

    /// The bytes every sketch holds.
    pub fn bytes(&self) -> usize {
        self.tracked()
            .iter()
            .map(|t| {
                let tracker = t.lock();
                tracker.minute.sketch_bytes() + tracker.hour.sketch_bytes()
            })
            .sum()
    }

    /// The top values as Prometheus series, when exported: `sluice_heavy_hitter_hits` and
    /// `sluice_heavy_hitter_denials` by `domain`, `limit`, `window` (`1m`, `1h`), `rank` (1 to
    /// `top`) and `value`; `sluice_heavy_hitter_error_bound` by the same less rank and value.
    pub fn exposition(&self) -> String {
        use std::fmt::Write;
        if !self.settings.exported {
            return String::new();
        }
        let tracked = self.tracked();
        if tracked.is_empty() {
            return String::new();
        }
        let now = self.now();
        let mut out = String::new();
        let kinds = [
            (By::Hits, "sluice_heavy_hitter_hits"),
            (By::Denials, "sluice_heavy_hitter_denials"),
        ];
        let mut bounds = String::new();
        for (by, metric) in kinds {
            let kind = by.as_str();
            let _ = writeln!(
                out,
                "# HELP {metric} The {kind} of a limit's heaviest values over the window (never under the true count; over it by at most sluice_heavy_hitter_error_bound).\n# TYPE {metric} gauge"
            );
            for limit in &tracked {
                let name = &limit.name;
                for span in Span::ALL {
                    let top = limit.lock().window(span).top(now, by, self.settings.top);
                    let labels = format!(
                        "domain=\"{}\",limit=\"{}\",window=\"{}\"",
                        escape(&name.domain),
                        escape(&name.limit),
                        span.as_str()
                    );
                    for (rank, heavy) in top.values.iter().enumerate() {
                        let _ = writeln!(
                            out,
                            "{metric}{{{labels},rank=\"{}\",value=\"{}\"}} {}",
                            rank + 1,
                            escape(&heavy.value),
                            heavy.count
                        );
                    }
                    let _ = writeln!(
                        bounds,
                        "sluice_heavy_hitter_error_bound{{{labels},by=\"{kind}\"}} {}",
                        top.bound
                    );
                }
            }
        }
        out.push_str("# HELP sluice_heavy_hitter_error_bound The most a heavy hitter's count may be over the true one.\n# TYPE sluice_heavy_hitter_error_bound gauge\n");
        out.push_str(&bounds);
        out
    }
}

/// A descriptor's entries as one value: `key=value,key=value`, a `\\`, `,` or `=` within a key
/// or value escaped with `\\` (so `entries_of` reads it back), cut at `MAX_VALUE_BYTES`.
pub fn value_text(entries: &[Entry]) -> String {
    let mut text = String::new();
    for (i, entry) in entries.iter().filter(|e| is_matched(&e.key)).enumerate() {
        if i > 0 {
            text.push(',');
        }
        push_escaped(&mut text, &entry.key);
        text.push('=');
        push_escaped(&mut text, &entry.value);
    }
    if text.len() > MAX_VALUE_BYTES {
        let mut cut = MAX_VALUE_BYTES;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push('…');
    }
    text
}

fn push_escaped(text: &mut String, part: &str) {
    for c in part.chars() {
        if matches!(c, '\\' | ',' | '=') {
            text.push('\\');
        }
        text.push(c);
    }
}

/// The entries `value_text` wrote (a cut value's last entry as far as it goes).
pub fn entries_of(value: &str) -> Vec<(String, String)> {
    let mut entries = Vec::new();
    let (mut key, mut part) = (None::<String>, String::new());
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => part.extend(chars.next()),
            '=' if key.is_none() => key = Some(std::mem::take(&mut part)),
            ',' => {
                entries.push((key.take().unwrap_or_default(), std::mem::take(&mut part)));
            }
            c => part.push(c),
        }
    }
    if key.is_some() || !part.is_empty() {
        entries.push((key.unwrap_or_default(), part));
    }
    entries
}

/// A Prometheus label value: backslash, quote and newline escaped.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(key: &str, value: &str) -> Entry {
        Entry {
            key: key.to_string(),
            value: value.to_string(),
        }
    }

    #[test]
    fn a_value_reads_back_as_its_entries() {
        let entries = [entry("tenant", "a,b=c\\d"), entry("path", "/x")];
        let text = value_text(&entries);
        assert_eq!(text, "tenant=a\\,b\\=c\\\\d,path=/x");
        let read: Vec<(String, String)> = entries
            .iter()
            .map(|e| (e.key.clone(), e.value.clone()))
            .collect();
        assert_eq!(entries_of(&text), read);
    }

    /// Zipf(1) over a million values, two million hits: the sketch's lists against the exact
    /// counts.
    #[test]
    fn on_a_skewed_stream_of_a_million_values_the_counts_hold_their_bound() {
        const VALUES: usize = 1_000_000;
        const HITS: usize = 2_000_000;
        const NOW: u64 = 1_800_000_000;
        let hitters = HeavyHitters::new(HittersSettings::default());
        let labels = LimitLabels {
            domain: "d".into(),
            key1: "tenant".into(),
            key2: None,
            from_request: false,
            stats_key: "d.tenant".into(),
            series: Default::default(),
        };
        let tracked = hitters.tracker(&labels).expect("tracked");
        let mut exact = vec![0u64; VALUES];
        for index in zipf::Zipf::new(VALUES, 0x2545_f491_4f6c_dd1d).take(HITS) {
            exact[index] += 1;
            // Every tenth hit of a value is denied.
            let denied = exact[index] % 10 == 0;
            let entries = [entry("tenant", &format!("v{index}"))];
            // One second for the whole stream: one slot, whatever the test's own speed.
            hitters.record_at(NOW, &tracked, &entries, 1, denied);
        }
        let name = LimitName {
            domain: "d".into(),
            limit: "d.tenant".into(),
        };
        let top = hitters
            .top_at(NOW, &name, Span::Minute, By::Hits, 10)
            .expect("tracked");
        assert_eq!(top.total, HITS as u64);
        let capacity = HittersSettings::default().capacity as u64;
        assert!(
            top.bound <= top.total / capacity,
            "bound {} past N/m",
            top.bound
        );
        let mut ranked: Vec<usize> = (0..VALUES).collect();
        ranked.sort_by_key(|i| std::cmp::Reverse(exact[*i]));
        let want: Vec<String> = ranked[..10]
            .iter()
            .map(|i| format!("tenant=v{i}"))
            .collect();
        let got: Vec<String> = top.values.iter().map(|h| h.value.clone()).collect();
        assert_eq!(got, want, "the ten heaviest, in order");
        for heavy in &top.values {
            let index: usize = heavy.value["tenant=v".len()..].parse().expect("an index");
            let truth = exact[index];
            assert!(heavy.count >= truth, "{} under its count", heavy.value);
            assert!(
                heavy.count - truth <= heavy.error,
                "{} past its error",
                heavy.value
            );
            assert!(heavy.error <= top.bound);
        }
        let denials = hitters
            .top_at(NOW, &name, Span::Hour, By::Denials, 3)
            .expect("tracked");
        let truth: u64 = exact[ranked[0]] / 10;
        assert_eq!(denials.values[0].value, want[0]);
        assert!(denials.values[0].count >= truth);
        assert!(denials.values[0].count - truth <= denials.bound);
        // Bounded: two windows of six slots, two sketches a slot, 128 counters a sketch.
        assert!(hitters.bytes() < 4 << 20, "{} bytes", hitters.bytes());
    }

    #[test]
    fn a_token_is_not_part_of_the_value() {
        let entries = [entry("tenant", "a"), entry("sluice.lease", "42")];
        assert_eq!(value_text(&entries), "tenant=a");
    }
}
