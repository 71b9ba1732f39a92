//! The RLQS service's own series: requests its clients report, the shares it assigns and the
//! clients holding one, and the buckets it refuses.

use metrics::Label;

use sluice_store::series::Series;

/// The labels of one rule's series.
fn of_rule(domain: &str, rule: &str) -> Vec<Label> {
    vec![
        Label::new("domain", domain.to_string()),
        Label::new("rule", rule.to_string()),
    ]
}

/// A bucket's usage report under `rule`: the requests the client allowed and denied.
pub fn usage(series: &Series, domain: &str, rule: &str, allowed: u64, denied: u64) {
    for (decision, count) in [("allowed", allowed), ("denied", denied)] {
        let mut labels = of_rule(domain, rule);
        labels.push(Label::new("decision", decision));
        series
            .counter("sluice_rlqs_reported_requests_total", labels)
            .increment(count);
    }
}

/// The share just assigned under `rule`, and how many clients hold one.
pub fn assignment(series: &Series, domain: &str, rule: &str, share: u64, clients: usize) {
    series
        .gauge("sluice_rlqs_assigned_requests", of_rule(domain, rule))
        .set(share as f64);
    series
        .gauge("sluice_rlqs_active_clients", of_rule(domain, rule))
        .set(clients as f64);
    series
        .counter("sluice_rlqs_assignments_total", of_rule(domain, rule))
        .increment(1);
}

/// A bucket of a report refused, and why.
pub fn rejected(series: &Series, reason: &'static str) {
    series
        .counter(
            "sluice_rlqs_rejected_buckets_total",
            vec![Label::new("reason", reason)],
        )
        .increment(1);
}
