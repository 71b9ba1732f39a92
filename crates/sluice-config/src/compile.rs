//! Validation of one parsed file and its compilation into a domain's tree, with the reference
//! server's rules and messages; every error found in the file is reported, not just the first.

use std::cell::OnceCell;
use std::path::Path;

use crate::error::FileError;
use crate::file::{DescriptorDoc, RateLimitDoc};
use crate::metadata;
use crate::pattern::Pattern;
use crate::position::Positions;
use crate::tree::{Level, NamedLimit, Node, RlqsStrategy, Rule};
use crate::LoadOptions;
use sluice_core::limit::{Algorithm, Counting, Limit, Unit, MICROS_PER_SECOND};
use sluice_core::modifier::Carrier;
use sluice_core::modifier::Modifiers;

/// The longest period a limit may have: 100 years (in microseconds, still exact in a double).
const MAX_PERIOD_SECONDS: u64 = 100 * 365 * 86_400;

/// Compiles the descriptors of one file into a domain tree, collecting errors.
pub(crate) struct FileCompiler<'a> {
    path: &'a Path,
    text: &'a str,
    options: LoadOptions,
    positions: OnceCell<Positions>,
    pub(crate) errors: Vec<FileError>,
    pub(crate) warnings: Vec<FileError>,
}

impl<'a> FileCompiler<'a> {
    pub(crate) fn new(path: &'a Path, text: &'a str, options: LoadOptions) -> FileCompiler<'a> {
        FileCompiler {
            path,
            text,
            options,
            positions: OnceCell::new(),
            errors: Vec::new(),
            warnings: Vec::new(),
        }
    }

    /// Records an error at `key_path` (`descriptors[0].rate_limit.unit`; empty for the file).
    pub(crate) fn error(&mut self, key_path: &str, reason: impl Into<String>) {
        let error = self.at(key_path, reason.into());
        self.errors.push(error);
    }

    /// Records a warning at `key_path`: the file loads, but something in it has no effect.
    pub(crate) fn warning(&mut self, key_path: &str, reason: impl Into<String>) {
        let warning = self.at(key_path, reason.into());
        self.warnings.push(warning);
    }

    /// `reason`, placed at `key_path` in this file.
    fn at(&self, key_path: &str, reason: String) -> FileError {
        // A document with no text (an xDS resource) has no lines to point at.
        let position = if self.text.is_empty() {
            None
        } else {
            let positions = self.positions.get_or_init(|| Positions::of(self.text));
            positions.find(key_path).or(Some((1, 1)))
        };
        let reason = if key_path.is_empty() {
            reason
        } else {
            format!("{key_path}: {reason}")
        };
        FileError {
            path: self.path.to_path_buf(),
            position,
            reason,
        }
    }

    /// Adds `docs` below `level`. `yaml_prefix` is the key path of the parent node plus `.`
    /// (empty at the top); `parent_key` the parent's composite key plus `.`.
    pub(crate) fn add_descriptors(
        &mut self,
        level: &mut Level,
        docs: &[DescriptorDoc],
        yaml_prefix: &str,
        parent_key: &str,
    ) {
        for (index, doc) in docs.iter().enumerate() {
            let path = format!("{yaml_prefix}descriptors[{index}]");
            let Some(key) = doc.key.as_deref().filter(|key| !key.is_empty()) else {
                self.error(&path, "descriptor has empty key");
                continue;
            };
            let value = doc.value.as_deref().unwrap_or_default();
            let full_key = if value.is_empty() {
                format!("{parent_key}{key}")
            } else {
                format!("{parent_key}{key}_{value}")
            };
            if doc.share_threshold && !full_key.contains('*') {
                let reason = format!("share_threshold can only be used with wildcard values (containing '*'), but found key '{full_key}'");
                self.error(&format!("{path}.share_threshold"), reason);
            }
            let mut node = Node {
                share_threshold: doc.share_threshold,
                value_to_metric: doc.value_to_metric,
                rule: self.rule(doc, &path, &full_key),
                children: Level::default(),
            };
            if let Some(children) = &doc.descriptors {
                let prefix = format!("{path}.");
                let child_key = format!("{full_key}.");
                self.add_descriptors(&mut node.children, children, &prefix, &child_key);
            }
            if !insert(level, key, value, node) {
                let reason = format!("duplicate descriptor composite key '{full_key}'");
                self.error(&path, reason);
            }
        }
    }

    /// The rule of a node: its `rate_limit`, or its `rate_limits`; `None` without either (or
    /// when they are refused).
    fn rule(&mut self, node: &DescriptorDoc, node_path: &str, full_key: &str) -> Option<Rule> {
        let (limits, replaces) = match (&node.rate_limit, &node.rate_limits) {
            (None, None) => return None,
            (Some(_), Some(_)) => {
                let reason = "rate_limit and rate_limits cannot both be set: list every limit in rate_limits";
                self.error(&format!("{node_path}.rate_limits"), reason);
                return None;
            }
            (Some(doc), None) => {
                let path = format!("{node_path}.rate_limit");
                let (limit, replaces) = self.named_limit(doc, &path, true)?;
                (vec![limit], replaces)
            }
            (None, Some(docs)) => self.several_limits(docs, &format!("{node_path}.rate_limits"))?,
        };
        let mut limits = limits;
        for (key, value) in node.modifiers_of_every_limit() {
            limits = self.modifier_of_every_limit(limits, key, value, node_path)?;
        }
        let rlqs_strategy = self.rlqs_strategy(node, &limits, node_path)?;
        Some(Rule {
            full_key: full_key.to_string(),
            limits,
            replaces,
            shadow_mode: node.shadow_mode,
            quota_mode: node.quota_mode,
            detailed_metric: node.detailed_metric,
            metadata: node.metadata.as_ref().map(metadata::to_struct),
            metric_labels: None,
            rlqs_strategy,
        })
    }

    /// A modifier given beside a node's limits (`key`: one of `DescriptorDoc::modifiers_of_every_limit`), given to each of
    /// them (none of which may have its own).
    fn modifier_of_every_limit(
        &mut self,
        mut limits: Vec<NamedLimit>,
        key: &str,
        value: &serde_yaml::Value,
        node_path: &str,
    ) -> Option<Vec<NamedLimit>> {
        let path = format!("{node_path}.{key}");
        if limits.iter().all(|named| named.limit.is_none()) {
            let reason = format!("an unlimited rule has no limit for {key} to apply to");
            self.error(&path, reason);
            return None;
        }
        for limit in limits.iter_mut().filter_map(|named| named.limit.as_mut()) {
            if limit.modifiers.has(key) {
                let reason = format!("a limit of this rule has a {key} of its own: give it once, here or in the limit");
                self.error(&path, reason);
                return None;
            }
            if let Err(refusal) = limit.modifiers.set(key, value, limit.period_us()) {
                self.error(&format!("{node_path}.{}", refusal.key), refusal.reason);
                return None;
            }
            self.check_modifiers(limit, node_path)?;
            self.check_leasing(limit, &path)?;
            self.check_global(limit, &format!("{node_path}.global"))?;
            *limit = self.as_kept(limit.clone());
        }
        Some(limits)
    }

    /// `limit` as the options keep it: its modifiers with a ticket left out with
    /// `without_tickets`.
    fn as_kept(&self, mut limit: Limit) -> Limit {
        if self.options.without_tickets {
            limit.modifiers.without_tickets();
        }
        limit
    }

    /// Refuses a modifier on a limit it cannot be carried by (`ModifierPolicy::refused_on`),
    /// at its key under `base` (the limit's path, or the node's for a modifier of every limit).
    fn check_modifiers(&mut self, limit: &Limit, base: &str) -> Option<()> {
        let carrier = Carrier {
            algorithm: limit.algorithm().as_str(),
            leases: limit.algorithm().leases(),
            requests_per_unit: limit.requests_per_unit,
            capacity: limit.capacity(),
        };
        match limit.modifiers.refused_on(&carrier) {
            Ok(()) => Some(()),
            Err(refusal) => {
                self.error(&format!("{base}.{}", refusal.key), refusal.reason);
                None
            }
        }
    }

    /// Refuses budget leasing where its bound cannot be kept (`leasing_refusal`).
    fn check_leasing(&mut self, limit: &Limit, path: &str) -> Option<()> {
        if limit.modifiers.budget_leasing.is_none() {
            return Some(());
        }
        match leasing_refusal(limit, self.options.every_hit) {
            Some(reason) => {
                self.error(path, reason);
                None
            }
            None => Some(()),
        }
    }

    /// Refuses a global limit where its bound cannot be kept (`global_refusal`), or where the
    /// server holds no limit across regions.
    fn check_global(&mut self, limit: &Limit, path: &str) -> Option<()> {
        if limit.modifiers.global.is_none() {
            return Some(());
        }
        match global_refusal(limit, self.options) {
            Some(reason) => {
                self.error(path, reason);
                None
            }
            None => Some(()),
        }
    }

    /// `rlqs_strategy`: a known name, and `requests_per_time_unit` only for a limit of one
    /// whole unit (Envoy's strategy counts per unit).
    fn rlqs_strategy(
        &mut self,
        node: &DescriptorDoc,
        limits: &[NamedLimit],
        node_path: &str,
    ) -> Option<RlqsStrategy> {
        let Some(name) = &node.rlqs_strategy else {
            return Some(RlqsStrategy::default());
        };
        let path = format!("{node_path}.rlqs_strategy");
        let Some(strategy) = RlqsStrategy::parse(name) else {
            let reason = format!(
                "unknown RLQS strategy '{name}' (expected token_bucket or requests_per_time_unit)"
            );
            self.error(&path, reason);
            return None;
        };
        let multiplied = limits
            .iter()
            .filter_map(|named| named.limit.clone())
            .any(|limit| limit.unit_multiplier > 1);
        if strategy == RlqsStrategy::RequestsPerTimeUnit && multiplied {
            let reason = "requests_per_time_unit counts per whole unit: the limit cannot have a unit_multiplier";
            self.error(&path, reason);
            return None;
        }
        Some(strategy)
    }

    /// The limits of `rate_limits`, and every name they replace.
    fn several_limits(
        &mut self,
        docs: &[RateLimitDoc],
        path: &str,
    ) -> Option<(Vec<NamedLimit>, Vec<String>)> {
        if docs.is_empty() {
            self.error(path, "must hold at least one limit");
            return None;
        }
        let (mut limits, mut replaces, mut valid) = (Vec::new(), Vec::new(), true);
        for (index, doc) in docs.iter().enumerate() {
            match self.named_limit(doc, &format!("{path}[{index}]"), false) {
                Some((limit, names)) => {
                    limits.push(limit);
                    replaces.extend(names);
                }
                None => valid = false,
            }
        }
        valid.then_some((limits, replaces))
    }

    /// One limit with its name, and the names it replaces; `unlimited` only where
    /// `may_be_unlimited`.
    pub(crate) fn named_limit(
        &mut self,
        doc: &RateLimitDoc,
        path: &str,
        may_be_unlimited: bool,
    ) -> Option<(NamedLimit, Vec<String>)> {
        let name = doc.name.clone().filter(|name| !name.is_empty());
        let replaces = self.replaces(doc, name.as_deref(), path)?;
        let limit = if doc.unlimited && !may_be_unlimited {
            let reason = "a limit among several cannot be unlimited: use rate_limit";
            self.error(&format!("{path}.unlimited"), reason);
            return None;
        } else if doc.unlimited {
            self.check_unlimited(doc, path)?;
            None
        } else {
            Some(self.limit(doc, path)?)
        };
        Some((NamedLimit { name, limit }, replaces))
    }

    fn replaces(
        &mut self,
        doc: &RateLimitDoc,
        own: Option<&str>,
        path: &str,
    ) -> Option<Vec<String>> {
        let mut names = Vec::new();
        let mut valid = true;
        for (index, entry) in doc.replaces.iter().flatten().enumerate() {
            let entry_path = format!("{path}.replaces[{index}]");
            match entry.name.as_deref().filter(|name| !name.is_empty()) {
                None => {
                    self.error(&entry_path, "should not have an empty replaces entry");
                    valid = false;
                }
                Some(name) if Some(name) == own => {
                    let reason = "replaces should not contain name of same descriptor";
                    self.error(&entry_path, reason);
                    valid = false;
                }
                Some(name) => names.push(name.to_string()),
            }
        }
        valid.then_some(names)
    }

    fn check_unlimited(&mut self, doc: &RateLimitDoc, path: &str) -> Option<()> {
        if doc.unit.as_deref().is_some_and(|unit| !unit.is_empty()) {
            let reason = "should not specify rate limit unit when unlimited";
            self.error(&format!("{path}.unit"), reason);
            return None;
        }
        if doc.algorithm.is_some()
            || doc.unit_multiplier.is_some()
            || doc.debt.is_some()
            || !doc.modifiers.is_empty()
            || !doc.parameters.is_empty()
        {
            let mut keys = vec!["algorithm", "unit_multiplier", "debt"];
            keys.extend_from_slice(Modifiers::KEYS);
            keys.extend(Algorithm::parameter_keys());
            let last = keys.pop().unwrap_or_default();
            let reason = format!("unlimited takes no {} or {last}", keys.join(", "));
            self.error(path, reason);
            return None;
        }
        Some(())
    }

    fn limit(&mut self, doc: &RateLimitDoc, path: &str) -> Option<Limit> {
        let unit_text = doc.unit.as_deref().unwrap_or_default();
        let Some(unit) = Unit::parse(unit_text) else {
            let reason = format!(
                "invalid rate limit unit '{unit_text}' (expected second, minute, hour, day, week, month or year)"
            );
            self.error(&format!("{path}.unit"), reason);
            return None;
        };
        let algorithm = self.algorithm(doc.algorithm.as_deref(), path)?;
        let unit_multiplier = doc.unit_multiplier.unwrap_or(1);
        if unit_multiplier == 0 {
            self.error(&format!("{path}.unit_multiplier"), "must be at least 1");
            return None;
        }
        if unit.seconds() * u64::from(unit_multiplier) > MAX_PERIOD_SECONDS {
            let reason = format!("a period of {unit_multiplier} {unit}s is longer than 100 years");
            self.error(&format!("{path}.unit_multiplier"), reason);
            return None;
        }
        // Absent means 0, as in the reference: the limit blocks everything.
        let requests_per_unit = doc.requests_per_unit.unwrap_or(0);
        if let Some((max, why)) = algorithm.max_requests_per_unit() {
            if requests_per_unit > max {
                let reason = format!("{algorithm} {why}: at most {max} requests_per_unit");
                self.error(&format!("{path}.requests_per_unit"), reason);
                return None;
            }
        }
        let counting = self.counting(
            algorithm,
            doc,
            requests_per_unit,
            unit,
            unit_multiplier,
            path,
        )?;
        if doc.debt == Some(true) && !algorithm.owes() {
            let reason =
                format!("{algorithm} takes no debt: a lease that does not fit is not taken");
            self.error(&format!("{path}.debt"), reason);
            return None;
        }
        let no_debt = counting.refuses_debt();
        if let (Some(true), Some(reason)) = (doc.debt, no_debt) {
            self.error(&format!("{path}.debt"), reason);
            return None;
        }
        let period_us = unit.seconds() * u64::from(unit_multiplier) * MICROS_PER_SECOND;
        let mut modifiers = Modifiers::default();
        for (key, value) in &doc.modifiers {
            if let Err(refusal) = modifiers.set(key, value, period_us) {
                self.error(&format!("{path}.{}", refusal.key), refusal.reason);
                return None;
            }
        }
        let limit = Limit {
            counting,
            requests_per_unit,
            unit,
            unit_multiplier,
            // `--debt` applies to the limits that can owe.
            debt: doc.debt.unwrap_or(self.options.debt) && algorithm.owes() && no_debt.is_none(),
            modifiers,
        };
        self.check_modifiers(&limit, path)?;
        self.check_leasing(&limit, &format!("{path}.budget_leasing"))?;
        self.check_global(&limit, &format!("{path}.global"))?;
        Some(self.as_kept(limit))
    }

    /// The algorithm with its own settings: a key of another algorithm is refused, and the
    /// algorithm validates its own (`Counting::parse`).
    fn counting(
        &mut self,
        algorithm: Algorithm,
        doc: &RateLimitDoc,
        requests_per_unit: u32,
        unit: Unit,
        unit_multiplier: u32,
        path: &str,
    ) -> Option<Counting> {
        let own = algorithm.own_keys();
        if let Some(key) = doc
            .parameters
            .keys()
            .find(|key| !own.contains(&key.as_str()))
        {
            let reason = format!(
                "{key} applies only to {}, not to {algorithm}",
                Algorithm::names_taking(key)
            );
            self.error(&format!("{path}.{key}"), reason);
            return None;
        }
        let period_us = unit.seconds() * u64::from(unit_multiplier) * MICROS_PER_SECOND;
        match Counting::parse(algorithm, &doc.parameters, requests_per_unit, period_us) {
            Ok(counting) => Some(counting),
            Err(refusal) => {
                self.error(&format!("{path}.{}", refusal.key), refusal.reason);
                None
            }
        }
    }

    fn algorithm(&mut self, name: Option<&str>, path: &str) -> Option<Algorithm> {
        let Some(name) = name else {
            return Some(Algorithm::default());
        };
        if let Some(algorithm) = Algorithm::parse(name) {
            return Some(algorithm);
        }
        let reason = format!(
            "unknown algorithm '{name}' (expected {})",
            Algorithm::names()
        );
        self.error(&format!("{path}.algorithm"), reason);
        None
    }
}

/// Inserts `node` as `key`/`value` below `level`; false when that place is taken.
fn insert(level: &mut Level, key: &str, value: &str, node: Node) -> bool {
    let nodes = level.by_key.entry(key.to_string()).or_default();
    if value.is_empty() {
        if nodes.any_value.is_some() {
            return false;
        }
        nodes.any_value = Some(Box::new(node));
    } else if let Some(pattern) = Pattern::parse(value) {
        return nodes.wildcards.push(pattern, node);
    } else {
        if nodes.exact.contains_key(value) {
            return false;
        }
        nodes.exact.insert(value.to_string(), node);
    }
    true
}

/// Why `limit` cannot be held across regions, if it cannot: regions take chunks of a window's
/// budget from home, which only a fixed window of the replicas' clock without debt bears
/// (its windows are the same in every region); and the server must hold limits across
/// regions (`LoadOptions::regions`), else each region would admit the whole limit.
fn global_refusal(limit: &Limit, options: LoadOptions) -> Option<String> {
    let reason = if limit.algorithm() != Algorithm::FixedWindow {
        "only a fixed_window is held across regions: chunks of a window's budget are taken ahead, which the other algorithms' state cannot bear"
    } else if limit.counting.calendar().is_some() || limit.from_first_hit() {
        "only a window of whole units is held across regions: every region must see the same windows"
    } else if limit.debt {
        "a limit taking debt charges every cost when it lands: there is nothing to take ahead"
    } else if limit.modifiers.budget_leasing.is_some() {
        "a global limit is already taken in chunks by each region: it takes no budget_leasing"
    } else if let Some(reason) = limit.modifiers.chunk_refusal() {
        reason
    } else if options.every_hit {
        "with the reference's counting (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false) a denied hit is charged too, which a region's chunk cannot bear"
    } else if !options.regions {
        "this server holds no limit across regions: start it with --region and --global-home-redis-url (docs/regions.md), else each region would admit the whole limit"
    } else {
        return None;
    };
    Some(reason.to_string())
}

/// Why `limit` cannot be leased to replicas in chunks, if it cannot: a chunk is charged when
/// taken and spent later, which only an algorithm whose state a charge never makes admit more
/// later can bear; and what only the store can see of each hit must reach it. With the
/// reference's counting (`every_hit`) a counter may be shared with envoyproxy/ratelimit
/// during a migration, which would read unspent chunks as admitted requests.
fn leasing_refusal(limit: &Limit, every_hit: bool) -> Option<String> {
    use sluice_core::limit::Algorithm;
    let algorithm = limit.algorithm();
    let reason = match algorithm {
        Algorithm::SlidingWindowCounter => "sliding_window_counter's windows follow Redis's clock, which a replica cannot read: a chunk spent after its window ended would count at the previous window's weight, admitting more than the limit",
        Algorithm::SlidingWindowLog => "sliding_window_log stamps each hit with its time: a chunk's hits would be stamped when taken and leave the window early, admitting more than the limit",
        Algorithm::WarmUp => "warm_up sets its rate by how busy the key was: unspent chunks would count as traffic and warm it early",
        Algorithm::Concurrency => "concurrency counts requests in flight, each released on its own: there is no budget to take ahead",
        _ if limit.debt => "a limit taking debt charges every cost when it lands: there is nothing to take ahead",
        _ if limit.modifiers.chunk_refusal().is_some() => {
            return limit.modifiers.chunk_refusal().map(str::to_string)
        }
        _ if every_hit => "with the reference's counting (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false) a counter may be shared with envoyproxy/ratelimit during a migration, which would count chunks not yet spent as requests",
        _ => return None,
    };
    Some(reason.to_string())
}
