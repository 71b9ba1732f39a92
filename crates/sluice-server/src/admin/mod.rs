//! The admin API (docs/admin.md): tenant overrides put, read, listed and deleted, and a
//! descriptor's counters read, reset and credited, without a reload. Overrides are data in
//! the store (`sluice-store`'s `AdminStore`), compiled by sluice-config (`overrides`) into
//! the index the rate limit service looks descriptors up in; `sync` keeps every replica's
//! index in step with the store. Every change is one log line (who, what, before, after) and
//! a count. `auth` checks who calls; `http` and `grpc` are the two faces of the same calls
//! (`Admin`), the reset and credit of counters are `counters`; the server's `admin_port`
//! serves them on the port they share.

pub mod auth;
pub mod body;
mod counters;
pub mod dashboard;
mod error;
pub mod grpc;
pub mod http;
pub mod model;
pub mod sync;
pub mod top;

use std::sync::Arc;

use arc_swap::ArcSwap;
use smallvec::SmallVec;

use crate::metrics::Metrics;
pub use error::AdminError;
use model::{DescriptorRef, DescriptorState, LimitState, PutOverride};
use sluice_config::overrides::{
    self, check_descriptor, configured_rule, EntryDoc, OverrideDoc, OverrideIndex,
};
use sluice_config::{Config, LoadOptions};
use sluice_limiter::plan::{self, DescriptorInForce, InForce, LimitInForce};
use sluice_proto::rate_limit_descriptor::Entry;
use sluice_proto::RateLimitDescriptor;
use sluice_store::admin::{AdminStore, Reading};
use sluice_store::any::AnyStore;
use sluice_store::series::Series;
use sluice_store::{Clock, SystemClock};

/// The most overrides one page lists, and how many without `page_size`.
pub const MAX_PAGE: usize = 1000;
const DEFAULT_PAGE: usize = 100;

/// The admin API's operations over the server's configuration, store and override index.
pub struct Admin {
    config: Arc<ArcSwap<Config>>,
    store: Arc<AnyStore>,
    overrides: Arc<OverrideIndex>,
    options: LoadOptions,
    metrics: Arc<Metrics>,
    /// Told after each change of the records (the memory store writes its snapshot).
    changed: Arc<tokio::sync::Notify>,
}

/// Now, in µs since the epoch.
fn now_us() -> u64 {
    SystemClock.now_us()
}

/// `us` since the epoch as RFC 3339 (UTC).
pub fn rfc3339(us: u64) -> String {
    let micros = i64::try_from(us).unwrap_or(i64::MAX);
    jiff::Timestamp::from_microsecond(micros)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

/// An empty name is no name (gRPC's strings cannot be absent).
fn named(name: Option<String>) -> Option<String> {
    name.filter(|n| !n.is_empty())
}

impl Admin {
    pub fn new(
        config: Arc<ArcSwap<Config>>,
        store: Arc<AnyStore>,
        overrides: Arc<OverrideIndex>,
        options: LoadOptions,
        metrics: Arc<Metrics>,
    ) -> Admin {
        Admin {
            config,
            store,
            overrides,
            options,
            metrics,
            changed: Arc::new(tokio::sync::Notify::new()),
        }
    }

    /// The server's metrics (the dashboard reads the heavy hitters and gauges there).
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The store the records and counters are in.
    pub fn store(&self) -> &AnyStore {
        &self.store
    }

    /// The limits in force of the rule whose stats key is `stats_key` in `domain` (`name:
    /// limit`, `unlimited` for an unlimited rule), none for a rule whose stats key carries
    /// request values.
    pub fn limits_of(&self, domain: &str, stats_key: &str) -> Vec<String> {
        let config = self.config.load();
        let Some(domain) = config.domain(domain) else {
            return Vec::new();
        };
        let rules = domain.rules();
        let Some(rule) = rules.iter().find(|rule| {
            rule.metric_labels
                .as_ref()
                .is_some_and(|labels| labels.stats_key == stats_key)
        }) else {
            return Vec::new();
        };
        rule.limits
            .iter()
            .map(|named| {
                let limit = named
                    .limit
                    .as_ref()
                    .map_or_else(|| "unlimited".to_string(), ToString::to_string);
                match &named.name {
                    Some(name) => format!("{name}: {limit}"),
                    None => limit,
                }
            })
            .collect()
    }

    /// The domains of the configuration in force.
    pub fn domain_names(&self) -> Vec<String> {
        let config = self.config.load();
        config.domains().iter().map(|d| d.name.clone()).collect()
    }

    /// Notified after each change of the override records.
    pub fn changes(&self) -> Arc<tokio::sync::Notify> {
        self.changed.clone()
    }

    /// Counts a change and logs it: who, what, before and after.
    fn changed(&self, who: &str, operation: &'static str, what: &str, before: &str, after: &str) {
        self.metrics
            .series()
            .counter(
                "sluice_admin_changes_total",
                vec![metrics::Label::new("operation", operation)],
            )
            .increment(1);
        tracing::info!(who, operation, what, before, after, "admin change");
    }

    /// Puts an override: checked whole (its syntax, then against the configuration in
    /// force), stored, then in force on this replica (the others follow the store).
    pub async fn put(
        &self,
        who: &str,
        put: PutOverride,
    ) -> Result<(OverrideDoc, Option<OverrideDoc>), AdminError> {
        let now = now_us();
        let expires_at = match (named(put.expires_at), named(put.ttl)) {
            (Some(_), Some(_)) => {
                return Err(AdminError::invalid(
                    "ttl",
                    "give expires_at or ttl, not both",
                ))
            }
            (Some(at), None) => Some(at),
            (None, Some(ttl)) => {
                let ttl_us = sluice_core::duration::parse_us(&ttl)
                    .map_err(|e| AdminError::invalid("ttl", e.to_string()))?;
                Some(rfc3339(now.saturating_add(ttl_us)))
            }
            (None, None) => None,
        };
        let mut doc = OverrideDoc {
            domain: put.domain,
            descriptor: put.descriptor,
            name: named(put.name),
            limit: put.limit,
            shadow_mode: put.shadow_mode,
            expires_at,
            updated_by: Some(who.to_string()),
            updated_at: Some(rfc3339(now)),
        };
        let compiled = doc.compile(self.options)?;
        if compiled.expires_at_us != 0 && compiled.expires_at_us <= now {
            return Err(AdminError::invalid("expires_at", "is in the past"));
        }
        doc.check_against(&self.config.load())?;
        // Kept in the store as it was given, normalized.
        doc.expires_at = (compiled.expires_at_us != 0).then(|| rfc3339(compiled.expires_at_us));
        let json =
            serde_json::to_string(&doc).map_err(|e| AdminError::invalid("limit", e.to_string()))?;
        let before = self.store.put_override(&doc.record_id(), &json).await?;
        self.overrides.insert(&doc.descriptor_id(), compiled);
        self.changed.notify_one();
        let previous = before.as_deref().and_then(parse_record);
        self.changed(
            who,
            "put_override",
            &describe(&doc.domain, &doc.descriptor, doc.name.as_deref()),
            before.as_deref().unwrap_or("none"),
            &json,
        );
        Ok((doc, previous))
    }

    /// Deletes the override of a descriptor (and name); the one deleted.
    pub async fn delete(
        &self,
        who: &str,
        target: DescriptorRef,
    ) -> Result<OverrideDoc, AdminError> {
        check_descriptor(&target.domain, &target.descriptor)?;
        let name = named(target.name);
        let descriptor_id = descriptor_id(&target.domain, &target.descriptor);
        let record_id = overrides::record_id(&descriptor_id, name.as_deref());
        let before = self.store.delete_override(&record_id).await?;
        self.overrides.remove(&descriptor_id, name.as_deref());
        let what = describe(&target.domain, &target.descriptor, name.as_deref());
        let Some(before) = before else {
            return Err(AdminError::NotFound(format!("no override of {what}")));
        };
        self.changed.notify_one();
        self.changed(who, "delete_override", &what, &before, "none");
        parse_record(&before)
            .ok_or_else(|| AdminError::NotFound(format!("no readable override of {what}")))
    }

    /// A page of a domain's overrides, and the token of the next.
    pub async fn list(
        &self,
        domain: &str,
        page_size: usize,
        page_token: &str,
    ) -> Result<(Vec<OverrideDoc>, Option<String>), AdminError> {
        if domain.is_empty() {
            return Err(AdminError::invalid("domain", "must not be empty"));
        }
        let size = match page_size {
            0 => DEFAULT_PAGE,
            size => size.min(MAX_PAGE),
        };
        let token = decode_token(page_token)
            .ok_or_else(|| AdminError::invalid("page_token", "is not a token a page gave"))?;
        let page = self
            .store
            .list_overrides(&overrides::record_prefix(domain), &token, size)
            .await?;
        let docs = page
            .records
            .iter()
            .filter_map(|(_, json)| parse_record(json))
            .collect();
        Ok((docs, page.next.map(|t| encode_token(&t))))
    }

    /// What applies to a descriptor now, where each limit comes from, and its counters.
    pub async fn get(&self, target: DescriptorRef) -> Result<DescriptorState, AdminError> {
        let (in_force, expiries) = self.in_force(&target.domain, &target.descriptor)?;
        let mut state = DescriptorState {
            domain: target.domain.clone(),
            descriptor: target.descriptor.clone(),
            ..DescriptorState::default()
        };
        match in_force {
            DescriptorInForce::NoRule => {
                return Err(AdminError::invalid(
                    "descriptor",
                    "no rule of the domain matches it",
                ))
            }
            DescriptorInForce::Unlimited { rule, overridden } => {
                state.rule = rule;
                state.unlimited = true;
                state.unlimited_source = Some(source(overridden));
            }
            DescriptorInForce::Limits { rule, limits } => {
                state.rule = rule;
                for limit in limits {
                    let expires_at = expiries
                        .iter()
                        .find(|(name, _)| name.is_none() || name.as_deref() == Some(&limit.name))
                        .filter(|_| limit.overridden)
                        .map(|(_, at)| *at)
                        .unwrap_or(0);
                    state
                        .limits
                        .push(self.limit_state(&limit, expires_at).await?);
                }
            }
        }
        Ok(state)
    }

    /// One limit's counters now: the store's reading of its state (under the key its
    /// modifiers give it, none of them set off), and what its budget holds.
    async fn limit_state(
        &self,
        limit: &LimitInForce,
        expires_at_us: u64,
    ) -> Result<LimitState, AdminError> {
        let Reading {
            decision,
            used,
            held,
        } = self.store.read(&limit.hit).await?;
        let remaining = u64::from(decision.remaining);
        let now = now_us();
        Ok(LimitState {
            name: limit.name.clone(),
            source: source(limit.overridden),
            limit: limit.limit.to_string(),
            algorithm: limit.limit.algorithm().as_str(),
            requests_per_unit: limit.limit.requests_per_unit,
            unit: limit.limit.unit.to_string(),
            unit_multiplier: limit.limit.unit_multiplier,
            shadow_mode: limit.shadow_mode,
            used,
            remaining: remaining.saturating_sub(held),
            held,
            reset_at: rfc3339(now.saturating_add(decision.reset_after_us)),
            reset_after_ms: decision.reset_after_us.div_ceil(1000),
            expires_at: if expires_at_us == 0 {
                String::new()
            } else {
                rfc3339(expires_at_us)
            },
        })
    }

    /// What applies to a descriptor, as a request finds it, and its overrides' expiries
    /// (by the name they replace).
    fn in_force(
        &self,
        domain: &str,
        entries: &[EntryDoc],
    ) -> Result<(DescriptorInForce, Expiries), AdminError> {
        check_descriptor(domain, entries)?;
        let config = self.config.load();
        configured_rule(&config, domain, entries)?;
        let Some(configured) = config.domain(domain) else {
            return Err(AdminError::invalid(
                "domain",
                format!("no domain '{domain}' is configured"),
            ));
        };
        let descriptor = RateLimitDescriptor {
            entries: entries
                .iter()
                .map(|e| Entry {
                    key: e.key.clone(),
                    value: e.value.clone(),
                })
                .collect(),
            limit: None,
            hits_addend: Some(0),
        };
        let found = self.overrides.get(&descriptor_id(domain, entries));
        let now = now_us();
        let in_force = found.as_deref().map(|overrides| InForce {
            overrides,
            now_us: now,
        });
        let expiries = found
            .as_deref()
            .map(|o| {
                o.every
                    .iter()
                    .chain(o.named.iter())
                    .map(|l| (l.name.clone(), l.expires_at_us))
                    .collect()
            })
            .unwrap_or_default();
        Ok((
            plan::in_force(configured, domain, &descriptor, in_force),
            expiries,
        ))
    }
}

/// When each override of a descriptor expires (0: never), by the name it replaces.
type Expiries = SmallVec<[(Option<String>, u64); 2]>;

/// The count of overrides in force, as a series (`sluice_overrides`).
pub struct OverrideCount(pub Arc<OverrideIndex>);

impl sluice_store::series::Reporting for OverrideCount {
    fn report(&self, series: &Series) {
        series.level("sluice_overrides", self.0.len() as u64);
    }
}

/// Where a limit comes from.
fn source(overridden: bool) -> &'static str {
    if overridden {
        "override"
    } else {
        "config"
    }
}

/// A limit as logs and refusals name it: its name, else its numbers.
fn shown_name(limit: &LimitInForce) -> String {
    if limit.name.is_empty() {
        limit.limit.to_string()
    } else {
        limit.name.clone()
    }
}

/// Each limit's use, for a change's log line.
fn used_of(state: &DescriptorState) -> String {
    let parts: Vec<String> = state
        .limits
        .iter()
        .map(|l| {
            format!(
                "{} used {}",
                if l.name.is_empty() {
                    &l.algorithm
                } else {
                    l.name.as_str()
                },
                l.used
            )
        })
        .collect();
    parts.join(", ")
}

/// A descriptor (and limit name) as a log line shows it.
fn describe(domain: &str, entries: &[EntryDoc], name: Option<&str>) -> String {
    let entries: Vec<String> = entries
        .iter()
        .map(|e| format!("{}={}", e.key, e.value))
        .collect();
    match name {
        Some(name) => format!("{domain} [{}] limit {name}", entries.join(", ")),
        None => format!("{domain} [{}]", entries.join(", ")),
    }
}

fn descriptor_id(domain: &str, entries: &[EntryDoc]) -> String {
    overrides::descriptor_id(
        domain,
        entries.iter().map(|e| (e.key.as_str(), e.value.as_str())),
    )
}

/// A stored record, read back (a record this version cannot read is skipped, logged).
pub fn parse_record(json: &str) -> Option<OverrideDoc> {
    match serde_json::from_str(json) {
        Ok(doc) => Some(doc),
        Err(error) => {
            tracing::warn!(%error, "an override record in the store cannot be read; skipped");
            None
        }
    }
}

/// A store's page token as the API shows it: hex, safe in a URL.
fn encode_token(token: &str) -> String {
    token.bytes().map(|b| format!("{b:02x}")).collect()
}

fn decode_token(token: &str) -> Option<String> {
    if token.len() % 2 != 0 {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..token.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(token.get(i..i + 2)?, 16).ok())
        .collect();
    String::from_utf8(bytes?).ok()
}
