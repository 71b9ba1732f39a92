//! `test/config/config_test.go`: loading, refusals, overrides, shadow mode, share_threshold
//! and metadata through the binary. Its matching and stats key cases (`TestBasicConfig`,
//! `TestWildcardConfig`, `TestDetailedMetric`, `TestValueToMetric_*`) are rows of the
//! in-process tables of `rules.rs`.

use super::*;

/// Shaped like the reference's `basic_config.yaml`: nested keys, defaults and specific
/// values, a value with no limit, names, unlimited, detailed_metric.
const BASIC: &str = include_str!("../../fixtures/cases/rules/basic.yaml");

const MERGE_1: &str = "domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n    rate_limit: {unit: minute, requests_per_unit: 10}\n";
const MERGE_2: &str = "domain: test-domain\ndescriptors:\n  - key: key2\n    value: value2\n    rate_limit: {unit: minute, requests_per_unit: 20}\n";

#[tokio::test]
async fn test_domain_merge() {
    let files = [("merge_1.yaml", MERGE_1), ("merge_2.yaml", MERGE_2)];
    for on in on_both_stores(&files, &[], &[("MERGE_DOMAIN_CONFIG", "true")]) {
        let s = &on.sluice;
        assert_eq!(
            limit_of(s, "test-domain", &[("key1", "value1")])
                .await
                .map(|l| l.0),
            Some(10)
        );
        assert_eq!(
            limit_of(s, "test-domain", &[("key2", "value2")])
                .await
                .map(|l| l.0),
            Some(20)
        );
    }
}

#[tokio::test]
async fn test_config_limit_override() {
    for on in on_both_stores(&[("basic.yaml", BASIC)], &[], &[]) {
        let s = &on.sluice;
        // The client's limit wins over the configured one, and needs no configured one.
        let overridden = descriptor_with_limit(
            &[("key1", "value1"), ("subkey1", "something")],
            42,
            Unit::Hour as i32,
        );
        let status = status_of(s, "test-domain", overridden).await;
        let limit = status.current_limit.expect("the override");
        assert_eq!(
            (limit.requests_per_unit, limit.unit),
            (42, Unit::Hour as i32),
            "{}",
            on.store
        );
        let fresh = descriptor_with_limit(&[("nowhere", "x")], 7, Unit::Day as i32);
        let status = status_of(s, "test-domain", fresh).await;
        assert_eq!(status.current_limit.map(|l| l.requests_per_unit), Some(7));
        // An override is counted under the descriptor's keys (sluice leaves the values out:
        // one series per value is the reference's metric leak).
        let total = counter(
            s,
            "ratelimit_service_rate_limit_total_hits",
            r#"{domain="test-domain",key1="nowhere"}"#,
        );
        assert_eq!(total, 1.0);
    }
}

/// `TestConfigLimitOverride`'s counting: an override has its own counter, named by its unit,
/// in a window aligned to the epoch; it never reads the configured limit's count.
#[tokio::test]
async fn test_config_limit_override_counts_on_its_own_window() {
    const FIVE_A_SECOND: &str = "domain: o\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5}\n";
    for on in on_both_stores(&[("o.yaml", FIVE_A_SECOND)], &[], &[]) {
        let s = &on.sluice;
        let mut last = None;
        for _ in 0..2 {
            last = Some(status_of(s, "o", descriptor(&[("k", "v")])).await);
        }
        assert_eq!(last.map(|s| s.limit_remaining), Some(3), "{}", on.store);
        for (requests, unit, seconds) in [(10, Unit::Day, 86_400), (42, Unit::Hour, 3_600)] {
            let before = now_seconds();
            let overridden = descriptor_with_limit(&[("k", "v")], requests, unit as i32);
            let status = status_of(s, "o", overridden).await;
            let after = now_seconds();
            assert_eq!(
                status.limit_remaining,
                requests - 1,
                "{}: {requests} per {unit:?} reads no other count",
                on.store
            );
            let reset = status.duration_until_reset.map_or(0, |d| d.seconds as u64);
            // The window's end, aligned to the epoch (whole seconds, rounded up).
            let ends = [before, after].map(|now| seconds - now % seconds);
            assert!(
                ends.contains(&reset),
                "{}: {requests} per {unit:?} resets in {reset} s, not {ends:?}",
                on.store
            );
        }
    }
}

/// A refused config: the reference test it replays, its files, the flags, and what the refusal
/// must say (with the file and line, as `assert_refused` checks).
type Refused = (
    &'static str,
    &'static [(&'static str, &'static str)],
    &'static [&'static str],
    &'static str,
);

const REFUSED: &[Refused] = &[
    (
        "TestEmptyDomain",
        &[("c.yaml", "domain: \"\"\ndescriptors: []\n")],
        &[],
        "config file cannot have empty domain",
    ),
    (
        "TestDuplicateDomain",
        &[("a.yaml", MERGE_1), ("b.yaml", MERGE_1)],
        &[],
        "duplicate domain 'test-domain' in config file",
    ),
    (
        "TestEmptyKey",
        &[("c.yaml", "domain: d\ndescriptors:\n  - value: v\n    rate_limit: {unit: second, requests_per_unit: 1}\n")],
        &[],
        "descriptor has empty key",
    ),
    (
        "TestDuplicateKey",
        &[("c.yaml", "domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n  - key: key1\n    value: value1\n")],
        &[],
        "duplicate descriptor composite key 'test-domain.key1_value1'",
    ),
    (
        "TestDuplicateKeyDomainMerge",
        &[("a.yaml", MERGE_1), ("b.yaml", MERGE_1)],
        &["--merge-domain-config"],
        "duplicate descriptor composite key 'test-domain.key1_value1'",
    ),
    (
        "TestBadLimitUnit",
        &[("c.yaml", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: foo, requests_per_unit: 1}\n")],
        &[],
        "invalid rate limit unit 'foo'",
    ),
    (
        "TestReplacesSelf",
        &[("c.yaml", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      name: me\n      replaces: [{name: me}]\n      unit: second\n      requests_per_unit: 1\n")],
        &[],
        "replaces should not contain name of same descriptor",
    ),
    (
        "TestReplacesEmpty",
        &[("c.yaml", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      name: me\n      replaces: [{name: \"\"}]\n      unit: second\n      requests_per_unit: 1\n")],
        &[],
        "should not have an empty replaces entry",
    ),
    (
        "TestMisspelledKey (a level)",
        &[("c.yaml", "domain: d\ndescriptors:\n  - key: k\n    ratelimit: {unit: second, requests_per_unit: 1}\n")],
        &[],
        "unknown field `ratelimit`",
    ),
    (
        "TestMisspelledKey (a limit)",
        &[("c.yaml", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requestsperunit: 1}\n")],
        &[],
        "unknown field `requestsperunit`",
    ),
    (
        "TestNonStringKey",
        &[("c.yaml", "domain: d\ndescriptors:\n  - key: k\n    0.25: {unit: second, requests_per_unit: 1}\n")],
        &[],
        "c.yaml:4",
    ),
    (
        "TestNonMapList",
        &[("c.yaml", "domain: d\ndescriptors:\n  - a\n  - b\n")],
        &[],
        "expected a descriptor",
    ),
    (
        "TestUnlimitedWithRateLimitUnit",
        &[("c.yaml", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: day}\n")],
        &[],
        "should not specify rate limit unit when unlimited",
    ),
    (
        "TestBadYaml",
        &[("c.yaml", "domain: d\ndescriptors: [oops\n")],
        &[],
        "c.yaml:",
    ),
];

/// `test/config/config_test.go`'s refused configs, a row per case.
#[test]
fn the_reference_refused_configs() {
    for (replays, files, flags, reason) in REFUSED {
        let (loaded, text) = check_config(files, flags);
        assert!(!loaded, "{replays}: must be refused: {text}");
        assert!(text.contains(reason), "{replays}: {reason:?} in: {text}");
        assert!(
            text.contains(".yaml:"),
            "{replays}: names the file and line: {text}"
        );
    }
}

#[test]
fn test_share_threshold() {
    // Its counting is a row of rules.rs (CONFIG_CASES); here, the refusal.
    assert_refused(
        &[(
            "c.yaml",
            "domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n",
        )],
        &[],
        "share_threshold can only be used with wildcard values",
    );
}

#[tokio::test]
async fn test_metadata() {
    let config = include_str!("../../fixtures/cases/reference_cases_config/test_metadata.yaml");
    for on in on_both_stores(
        &[("c.yaml", config)],
        &[],
        &[("RESPONSE_DYNAMIC_METADATA", "true")],
    ) {
        let s = &on.sluice;
        let (status, body) = s.http_post(
            "/json",
            r#"{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}"#,
        );
        assert_eq!(status, 200, "{body}");
        let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            answer["dynamicMetadata"]["metadata"],
            serde_json::json!({"owner": "team-a", "nested": {"level": 2.0, "list": [1.0, "two"]}}),
            "{}",
            on.store
        );
    }
}
