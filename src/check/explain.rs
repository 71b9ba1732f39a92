//! What `sluice check-config` says of each rule beyond its domain's count of limits: its
//! several limits, its debt, its lease limit, and what each modifier of a limit does,
//! in its own words (`ModifierPolicy::explained`).

use sluice_config as config;
use sluice_core::modifier::Described;

/// What `check-config` says of a rule beyond the count: its several limits and its debt.
pub fn explain(rule: &config::Rule) -> Vec<String> {
    let limits: Vec<_> = rule
        .limits
        .iter()
        .filter_map(|named| named.limit.clone())
        .collect();
    let mut lines = Vec::new();
    if limits.len() > 1 {
        let each: Vec<String> = limits.iter().map(ToString::to_string).collect();
        lines.push(format!(
            "{}: {} limits, every one must admit a hit and a denial charges none: {}",
            rule.full_key,
            limits.len(),
            each.join("; ")
        ));
    }
    for limit in limits.iter().filter(|limit| limit.debt) {
        lines.push(format!(
            "{}: {limit}: a hit that does not fit is charged all the same (debt), and the \
             limit denies until the debt is repaid at {} per {}",
            rule.full_key,
            limit.requests_per_unit,
            period_text(limit)
        ));
    }
    for limit in limits.iter().filter(|limit| limit.algorithm().leases()) {
        lines.push(format!(
            "{}: {limit}: a count of requests in flight, not a rate; an admitted request \
             holds its cost in leases until its release (a descriptor carrying the token, \
             {}) or until its lease's life ends",
            rule.full_key,
            sluice_core::lease::LEASE_KEY,
        ));
    }
    for limit in &limits {
        let shown = limit.to_string();
        let period = period_text(limit);
        let described = Described {
            rule: &rule.full_key,
            limit: &shown,
            requests_per_unit: limit.requests_per_unit,
            period: &period,
            windowed: limit.window_end_us(0).is_some(),
            shadow_mode: rule.shadow_mode,
        };
        lines.extend(limit.modifiers.explained(&described));
    }
    lines
}

/// A limit's period in words: `minute`, `5 minutes`.
fn period_text(limit: &sluice_core::limit::Limit) -> String {
    if limit.unit_multiplier > 1 {
        format!("{} {}s", limit.unit_multiplier, limit.unit)
    } else {
        limit.unit.to_string()
    }
}
