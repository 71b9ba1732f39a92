//! What `sluice check-config` says of each rule beyond its domain's count of limits: its
//! several limits, its debt, its concurrency limit, its penalty, its reserved budget and the
//! budget's bound, its budget leasing and the lease's bound, and its answer when the store
//! fails, in words.

use sluice_config as config;

/// What `check-config` says of a rule beyond the count: its several limits and its debt.
pub fn explain(rule: &config::Rule) -> Vec<String> {
    let limits: Vec<_> = rule.limits.iter().filter_map(|named| named.limit).collect();
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
            sluice_server::lease::LEASE_KEY,
        ));
    }
    for limit in &limits {
        if let Some(policy) = &limit.modifiers.penalty {
            lines.push(penalty_text(rule, limit, policy));
        }
        if let Some(policy) = &limit.modifiers.reserve {
            lines.push(reserve_text(rule, limit, policy));
        }
        if let Some(policy) = &limit.modifiers.budget_leasing {
            lines.push(leasing_text(rule, limit, policy));
        }
        if let Some(policy) = &limit.modifiers.on_store_failure {
            lines.push(format!(
                "{}: {limit}: when the store cannot decide, {}",
                rule.full_key,
                failure_text(limit, *policy)
            ));
        }
    }
    lines
}

/// What a leased limit does, in words, with its bound (docs/hot-keys.md).
fn leasing_text(
    rule: &config::Rule,
    limit: &sluice_core::limit::Limit,
    policy: &sluice_core::modifier::leasing::Policy,
) -> String {
    format!(
        "{}: leased on Redis: each replica takes chunks of the budget (at most {}, sized by the \
         key's rate at it; a key seen fewer than 4 times in the last {} keeps the exact path) and \
         admits from them without a call; a chunk unused for {} is given back; bound: a window \
         never admits more than {}, and at most replicas x {} is denied while budget remains",
        rule.full_key,
        policy.max_chunk,
        sluice_core::duration::human(policy.max_hold_us),
        sluice_core::duration::human(policy.max_hold_us),
        limit.requests_per_unit,
        policy.max_chunk,
    )
}

/// What a limit answers when the store fails, in words.
fn failure_text(
    limit: &sluice_core::limit::Limit,
    policy: sluice_core::modifier::on_store_failure::Policy,
) -> String {
    use sluice_core::modifier::on_store_failure::Policy;
    match policy {
        Policy::Unavailable => "the call fails with UNAVAILABLE (Envoy's failure_mode_deny decides)".into(),
        Policy::Allow => "its hits are admitted".into(),
        Policy::Deny => "its hits are denied".into(),
        Policy::LocalShare => format!(
            "each replica decides alone on its share, {} divided by the replica count (rounded down)",
            limit.requests_per_unit
        ),
    }
}

/// What a limit's reservation does, in words, with its bound (docs/budgets.md).
fn reserve_text(
    rule: &config::Rule,
    limit: &sluice_core::limit::Limit,
    policy: &sluice_core::modifier::reserve::Policy,
) -> String {
    let lapse = if limit.window_end_us(0).is_some() {
        " or its window's end, whichever comes first"
    } else {
        ""
    };
    format!(
        "{}: a reserved budget of {} per {}: a request is admitted only while used + held + its \
         estimate fit; it holds {} (or the descriptor's own hits_addend), at most {}, until its \
         settle (a descriptor carrying {} with hits_addend the actual cost) or for {}{lapse}, \
         charging nothing if it lapses; a settle is never denied and charges once; bound: the \
         charged total stays within {} plus, for each request in flight when the budget filled, \
         its actual less its estimate",
        rule.full_key,
        limit.requests_per_unit,
        period_text(limit),
        policy.amount,
        policy.cap(limit.requests_per_unit),
        sluice_core::modifier::reserve::SETTLE_KEY,
        sluice_core::duration::human(policy.max_hold_us),
        limit.requests_per_unit,
    )
}

/// What a limit's penalty does, in words, with its first blocks.
fn penalty_text(
    rule: &config::Rule,
    limit: &sluice_core::limit::Limit,
    policy: &sluice_core::modifier::penalty::Policy,
) -> String {
    use sluice_core::duration::human;
    let mut blocks: Vec<String> = Vec::new();
    for n in 1..=6 {
        let block = human(policy.nth_block_ms(n) * 1000);
        if blocks.last() == Some(&block) {
            break;
        }
        blocks.push(block);
    }
    let more = if policy.nth_block_ms(7) > policy.nth_block_ms(6) {
        ", ..."
    } else {
        ""
    };
    let times = match policy.after {
        1 => "once".to_string(),
        n => format!("{n} times"),
    };
    let enforced = if rule.shadow_mode {
        "in shadow mode, counted and reported, never enforced"
    } else {
        "every request OVER_LIMIT until the block ends, the limit not charged"
    };
    format!(
        "{}: {limit}: a client denied {times} within {} is blocked: {enforced}; blocks \
         {}{more} (x{} each repeat, {} at most); forgotten after {} without a denial; not \
         applied to RLQS buckets",
        rule.full_key,
        human(policy.within_us),
        blocks.join(", "),
        policy.factor_text(),
        human(policy.max_block_ms * 1000),
        human(policy.forget_us),
    )
}

/// A limit's period in words: `minute`, `5 minutes`.
fn period_text(limit: &sluice_core::limit::Limit) -> String {
    if limit.unit_multiplier > 1 {
        format!("{} {}s", limit.unit_multiplier, limit.unit)
    } else {
        limit.unit.to_string()
    }
}
