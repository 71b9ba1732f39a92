//! What a replay found: per call and per rule of the new config, what each side admitted and
//! denied, what changed, the clients it changed most for, over time (for the picture); the
//! rules no call matched and the descriptors no rule matches. As text, and as data (`--json`).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

use serde::Serialize;

use super::Decided;
use sluice_config::Config;
use sluice_core::lease::LEASE_KEY;
use sluice_core::modifier::Modifiers;
use sluice_limiter::ticket;
use sluice_server::record::format::Call;

/// Time buckets of each rule's timeline.
pub const BUCKETS: usize = 60;
/// The clients listed per rule, most affected first.
const CLIENTS: usize = 5;

/// Admitted and denied.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub admitted: u64,
    pub denied: u64,
}

impl Counts {
    fn add(&mut self, admitted: bool) {
        if admitted {
            self.admitted += 1;
        } else {
            self.denied += 1;
        }
    }
}

/// Admitted and denied on each side, and what changed between them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Comparison {
    pub before: Counts,
    pub after: Counts,
    pub newly_denied: u64,
    pub newly_admitted: u64,
}

impl Comparison {
    /// One call (or descriptor) admitted or not before (`was`) and after (`is`).
    fn add(&mut self, was: bool, is: bool) {
        self.before.add(was);
        self.after.add(is);
        self.newly_denied += u64::from(was && !is);
        self.newly_admitted += u64::from(!was && is);
    }

    /// `admitted 9 -> 7, denied 1 -> 3: newly denied 2 (20.0%), newly admitted 0 (0.0%)`,
    /// shares of `calls`.
    fn line(&self, calls: u64) -> String {
        format!(
            "admitted {} -> {}, denied {} -> {}: newly denied {} ({}), newly admitted {} ({})",
            self.before.admitted,
            self.after.admitted,
            self.before.denied,
            self.after.denied,
            self.newly_denied,
            percent(self.newly_denied, calls),
            self.newly_admitted,
            percent(self.newly_admitted, calls),
        )
    }
}

/// What changed for one client (a descriptor's values) of a rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Client {
    pub client: String,
    pub newly_denied: u64,
    pub newly_admitted: u64,
}

/// Admitted and denied calls of one time bucket, on each side.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Bucket {
    pub before: Counts,
    pub after: Counts,
}

/// One rule of the new config.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Rule {
    /// Its composite key (`edge_proxy.remote_address`), or `(limit override)`.
    pub rule: String,
    /// Descriptors of the recorded calls it matched.
    pub calls: u64,
    #[serde(flatten)]
    pub compared: Comparison,
    /// Most affected first (then by name); at most five.
    pub clients: Vec<Client>,
    pub timeline: Vec<Bucket>,
}

/// The whole comparison.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    /// What the new config is compared with.
    pub baseline: String,
    pub calls: u64,
    pub first_us: u64,
    pub last_us: u64,
    /// Whole calls, by their overall code.
    #[serde(flatten)]
    pub compared: Comparison,
    /// Calls of a domain the new config does not have (answered OK, as the server does).
    pub unknown_domain: u64,
    /// Calls the service refused (INVALID_ARGUMENT) on either side.
    pub refused: u64,
    /// Calls that release leases or return a ticket's token (a descriptor carries
    /// `sluice.lease` or a ticket's entry, as a settle does): never denied, they are left out
    /// of every comparison and share.
    pub releases: u64,
    pub rules: Vec<Rule>,
    /// Rules of the new config no recorded call matched.
    pub never_matched: Vec<String>,
    /// Descriptors no rule of the new config matches, and a few of them.
    pub unmatched: u64,
    pub unmatched_examples: Vec<String>,
}

/// A rule's running tally.
#[derive(Default)]
struct Tally {
    calls: u64,
    compared: Comparison,
    clients: BTreeMap<String, (u64, u64)>,
    timeline: Vec<Bucket>,
}

/// The report of `calls`, decided `before` and `after` (one `Decided` per call each), with
/// rules named by `config` (the new one).
pub fn build(
    config: &Config,
    calls: &[Call],
    before: &[Decided],
    after: &[Decided],
    baseline: String,
) -> Report {
    let first_us = calls.first().map_or(0, |c| c.t);
    let last_us = calls.last().map_or(0, |c| c.t);
    let span = (last_us - first_us).max(1);
    let bucket_of = |t: u64| {
        (((t - first_us) as u128 * BUCKETS as u128 / (span as u128 + 1)) as usize).min(BUCKETS - 1)
    };
    let mut report = Report {
        baseline,
        calls: calls.len() as u64,
        first_us,
        last_us,
        compared: Comparison::default(),
        unknown_domain: 0,
        refused: 0,
        releases: 0,
        rules: Vec::new(),
        never_matched: Vec::new(),
        unmatched: 0,
        unmatched_examples: Vec::new(),
    };
    let mut tallies: BTreeMap<String, Tally> = BTreeMap::new();
    let mut unmatched_examples = BTreeSet::new();
    for ((call, before), after) in calls.iter().zip(before).zip(after) {
        if releases(call) {
            report.releases += 1;
            continue;
        }
        report.compared.add(before.admitted, after.admitted);
        report.unknown_domain += u64::from(after.unknown_domain);
        report.refused += u64::from(before.refused || after.refused);
        for (index, descriptor) in call.descriptors.iter().enumerate() {
            let client = client_of(&descriptor.entries);
            let Some(rule) = rule_of(config, call, index) else {
                report.unmatched += 1;
                if unmatched_examples.len() < CLIENTS {
                    unmatched_examples.insert(client);
                }
                continue;
            };
            // What the rule decided now, against what the descriptor got before (no limit
            // admits); a rule that did not decide it now (replaced, unlimited) counts nothing.
            let Some(is) = after.descriptors.get(index).copied().flatten() else {
                continue;
            };
            let was = before
                .descriptors
                .get(index)
                .copied()
                .flatten()
                .unwrap_or(true);
            let tally = tallies.entry(rule).or_default();
            if tally.timeline.is_empty() {
                tally.timeline = vec![Bucket::default(); BUCKETS];
            }
            tally.calls += 1;
            tally.compared.add(was, is);
            let bucket = &mut tally.timeline[bucket_of(call.t)];
            bucket.before.add(was);
            bucket.after.add(is);
            if was != is {
                let changed = tally.clients.entry(client).or_default();
                if was {
                    changed.0 += 1;
                } else {
                    changed.1 += 1;
                }
            }
        }
    }
    report.unmatched_examples = unmatched_examples.into_iter().collect();
    let matched: BTreeSet<&String> = tallies.keys().collect();
    report.never_matched = config
        .domains()
        .into_iter()
        .flat_map(|domain| domain.rules())
        .map(|rule| rule.full_key.clone())
        .filter(|key| !matched.contains(key))
        .collect();
    report.never_matched.sort();
    report.rules = tallies
        .into_iter()
        .map(|(rule, tally)| rule_report(rule, tally))
        .collect();
    report
}

fn rule_report(rule: String, tally: Tally) -> Rule {
    let mut clients: Vec<Client> = tally
        .clients
        .into_iter()
        .map(|(client, (newly_denied, newly_admitted))| Client {
            client,
            newly_denied,
            newly_admitted,
        })
        .collect();
    clients.sort_by(|a, b| {
        (b.newly_denied + b.newly_admitted)
            .cmp(&(a.newly_denied + a.newly_admitted))
            .then_with(|| a.client.cmp(&b.client))
    });
    clients.truncate(CLIENTS);
    Rule {
        rule,
        calls: tally.calls,
        compared: tally.compared,
        clients,
        timeline: tally.timeline,
    }
}

/// Whether `call` releases leases or returns a ticket's token (settles holds): one of its
/// descriptors carries a token.
fn releases(call: &Call) -> bool {
    let tickets = Modifiers::tickets();
    call.descriptors.iter().any(|d| {
        d.entries
            .iter()
            .any(|(key, _)| key == LEASE_KEY || tickets.iter().any(|(_, t)| t.key == key))
    })
}

/// Whether an entry names a client or a rule: a lease's token and a ticket's do not.
fn counted(key: &str) -> bool {
    key != LEASE_KEY && ticket::is_matched(key)
}

/// A descriptor's values as a client: `key=value,key2=value2` (a lease token left out).
fn client_of(entries: &[(String, String)]) -> String {
    let parts: Vec<String> = entries
        .iter()
        .filter(|(key, _)| counted(key))
        .map(|(key, value)| format!("{key}={value}"))
        .collect();
    parts.join(",")
}

/// The rule of `config` descriptor `index` of `call` falls under, as the service matches it:
/// a client's override is `(limit override)`, a lease token is set aside; with the class its
/// limits put the call in, when they do (`edge.tenant (<label> <class>)`).
fn rule_of(config: &Config, call: &Call, index: usize) -> Option<String> {
    let descriptor = call.descriptors.get(index)?;
    let domain = config.domain(&call.domain)?;
    if descriptor.limit.is_some() {
        return Some("(limit override)".to_string());
    }
    let entries: smallvec::SmallVec<[(&str, &str); 8]> = descriptor
        .entries
        .iter()
        .filter(|(key, _)| counted(key))
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let matched = domain.resolve_reading(&entries)?;
    let rule = matched.rule.full_key.clone();
    // A rule whose limits put traffic in classes is reported class by class.
    let classed = matched.rule.limits.iter().find_map(|named| {
        let mut limit = named.limit.clone()?;
        limit.modifiers.take_entries(entries.iter().copied());
        let class = limit.modifiers.class()?;
        Some(format!("{rule} ({} {})", class.label, class.name))
    });
    Some(classed.unwrap_or(rule))
}

/// `part` of `whole`, in percent with one decimal.
pub fn percent(part: u64, whole: u64) -> String {
    if whole == 0 {
        return "0.0%".to_string();
    }
    #[allow(clippy::cast_precision_loss)]
    let share = part as f64 * 100.0 / whole as f64;
    format!("{share:.1}%")
}

impl Report {
    /// The report as text.
    pub fn text(&self, config: &str) -> String {
        let mut out = String::new();
        let span = format!(
            "{} to {}",
            sluice_core::duration::utc_text(self.first_us / 1_000_000),
            sluice_core::duration::utc_text(self.last_us.div_ceil(1_000_000))
        );
        let _ = writeln!(
            out,
            "{} calls ({span}) replayed under {config}, compared with {}",
            self.calls, self.baseline
        );
        let _ = writeln!(out, "  {}", self.compared.line(self.calls - self.releases));
        if self.releases > 0 {
            let _ = writeln!(
                out,
                "  releases of leases and settles of holds (never denied, left out of the comparison): {}",
                self.releases
            );
        }
        if self.unknown_domain > 0 || self.refused > 0 {
            let _ = writeln!(
                out,
                "  calls of a domain the config does not have: {}; calls refused: {}",
                self.unknown_domain, self.refused
            );
        }
        for rule in &self.rules {
            write_rule(&mut out, rule);
        }
        if !self.never_matched.is_empty() {
            let _ = writeln!(
                out,
                "\nrules no call matched: {}",
                self.never_matched.join(", ")
            );
        }
        if self.unmatched > 0 {
            let _ = writeln!(
                out,
                "\ndescriptors no rule matches: {} (e.g. {})",
                self.unmatched,
                self.unmatched_examples.join("; ")
            );
        }
        out
    }
}

fn write_rule(out: &mut String, rule: &Rule) {
    let _ = writeln!(out, "\nrule {}: {} calls", rule.rule, rule.calls);
    let _ = writeln!(out, "  {}", rule.compared.line(rule.calls));
    if !rule.clients.is_empty() {
        let clients: Vec<String> = rule
            .clients
            .iter()
            .map(|c| {
                format!(
                    "{} (+{} denied, +{} admitted)",
                    c.client, c.newly_denied, c.newly_admitted
                )
            })
            .collect();
        let _ = writeln!(out, "  most affected: {}", clients.join(", "));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_server::record::format::Descriptor;

    fn call_of(entries: &[(&str, &str)]) -> Call {
        Call {
            t: 0,
            domain: "d".into(),
            hits_addend: 0,
            descriptors: vec![Descriptor {
                entries: entries
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                hits_addend: None,
                limit: None,
            }],
            code: None,
            statuses: None,
            lease: None,
            ticket: None,
        }
    }

    #[test]
    fn a_tiered_rule_is_reported_tier_by_tier() {
        let config = sluice_config::load_str(
            "c.yaml",
            "domain: d\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: second, requests_per_unit: 10}\n    tiers: {from: priority, ceilings: {gold: 1, bronze: 0.5}, otherwise: bronze}\n  - key: plain\n    rate_limit: {unit: second, requests_per_unit: 10}\n",
            Default::default(),
        )
        .expect("config");
        let rule = |entries: &[(&str, &str)]| rule_of(&config, &call_of(entries), 0);
        assert_eq!(
            rule(&[("tenant", "a"), ("priority", "gold")]).as_deref(),
            Some("d.tenant (tier gold)")
        );
        assert_eq!(
            rule(&[("tenant", "a")]).as_deref(),
            Some("d.tenant (tier bronze)")
        );
        assert_eq!(rule(&[("plain", "x")]).as_deref(), Some("d.plain"));
    }
}
