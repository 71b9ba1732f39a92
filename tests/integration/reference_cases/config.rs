//! `test/config/config_test.go`: loading, refusals, overrides, shadow mode, share_threshold
//! and metadata through the binary. Its matching and stats key cases (`TestBasicConfig`,
//! `TestWildcardConfig`, `TestDetailedMetric`, `TestValueToMetric_*`) are rows of the
//! in-process tables of `rules.rs`.

use super::*;

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

/// `TestConfigLimitOverride`'s counting: an override has its own counter, named by its unit,
/// in a window aligned to the epoch; it never reads the configured limit's count.
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
