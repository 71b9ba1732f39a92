//! The configuration cases of envoyproxy/ratelimit's own fixtures, in the project's files
//! (`tests/fixtures/config/`): every valid file loads as the reference loads it, every invalid
//! one is refused naming the file, the line, the column and the reason.

use std::path::{Path, PathBuf};

use sluice_config::{load, load_str, ConfigErrors, LoadOptions};
use sluice_core::limit::Algorithm;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/config")
}

pub fn valid(name: &str) -> PathBuf {
    fixtures().join("valid").join(name)
}

pub fn invalid(name: &str) -> PathBuf {
    fixtures().join("invalid").join(name)
}

const NO_MERGE: LoadOptions = LoadOptions {
    merge_domain_config: false,
    debt: false,
    without_tickets: false,
    every_hit: false,
    limits_file_leasing: None,
    regions: false,
};
const MERGE: LoadOptions = LoadOptions {
    merge_domain_config: true,
    debt: false,
    without_tickets: false,
    every_hit: false,
    limits_file_leasing: None,
    regions: false,
};

fn refused(paths: &[PathBuf], options: LoadOptions) -> String {
    match load(paths, options) {
        Ok(_) => panic!("{paths:?} loaded but must be refused"),
        Err(ConfigErrors(errors)) => errors
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

#[test]
fn every_valid_fixture_loads_on_its_own() {
    let dir = fixtures().join("valid");
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).expect("the fixtures directory") {
        let path = entry.expect("a directory entry").path();
        let config = load(std::slice::from_ref(&path), NO_MERGE)
            .unwrap_or_else(|e| panic!("{} must load:\n{e}", path.display()));
        assert_eq!(config.domains().len(), 1, "{}", path.display());
        count += 1;
    }
    assert_eq!(count, 10, "valid fixtures in {}", dir.display());
}

/// The limit (requests per unit) a descriptor of `entries` falls under in `domain`;
/// `Some(None)` for an unlimited rule, `None` for no rule.
fn limit_of(
    config: &sluice_config::Config,
    domain: &str,
    entries: &[(&str, &str)],
) -> Option<Option<u32>> {
    let domain = config.domain(domain).expect("the domain is loaded");
    let matched = domain.resolve(entries.iter().copied())?;
    Some(
        matched.rule.limits[0]
            .limit
            .as_ref()
            .map(|limit| limit.requests_per_unit),
    )
}

#[test]
fn nested_keys_defaults_values_and_unlimited_resolve_as_the_reference() {
    let config = load(&[valid("nested.yaml")], NO_MERGE).expect("loads");
    let d = "storefront";
    assert_eq!(
        limit_of(&config, d, &[("tenant", "acme"), ("plan", "silver")]),
        Some(Some(4))
    );
    assert_eq!(
        limit_of(&config, d, &[("tenant", "acme"), ("plan", "gold")]),
        Some(Some(12))
    );
    // No limit on `tenant` itself, and no fallback from a child to its parent.
    assert_eq!(limit_of(&config, d, &[("tenant", "acme")]), None);
    assert_eq!(
        limit_of(&config, d, &[("tenant", "other"), ("plan", "gold")]),
        None
    );
    assert_eq!(limit_of(&config, d, &[("path", "/cart")]), Some(Some(40)));
    assert_eq!(
        limit_of(&config, d, &[("path", "/checkout")]),
        Some(Some(15))
    );
    // A value listed without a limit exempts it from the key's default.
    assert_eq!(limit_of(&config, d, &[("path", "/health")]), None);
    assert_eq!(limit_of(&config, d, &[("internal", "x")]), Some(None));
    let domain = config.domain(d).expect("domain");
    let rule = domain
        .resolve([("api_key", "k")].into_iter())
        .expect("api_key")
        .rule;
    assert_eq!(rule.limits[0].name.as_deref(), Some("per_api_key"));
    assert_eq!(rule.replaces, ["per_ip"]);
    let rule = domain
        .resolve([("user", "u")].into_iter())
        .expect("user")
        .rule;
    assert!(rule.detailed_metric);
    let rule = domain
        .resolve([("region", "eu"), ("city", "paris")].into_iter())
        .expect("region and city")
        .rule;
    assert_eq!(
        rule.limits[0]
            .limit
            .as_ref()
            .map(|l| (l.requests_per_unit, l.unit.as_str())),
        Some((3, "day"))
    );
}

#[test]
fn shadow_mode_sits_on_the_rule_it_is_written_on() {
    let config = load(&[valid("shadow.yaml")], NO_MERGE).expect("loads");
    let domain = config.domain("canary").expect("domain");
    let shadow = |entries: &[(&str, &str)]| {
        domain
            .resolve(entries.iter().copied())
            .expect("a rule")
            .rule
            .shadow_mode
    };
    assert!(shadow(&[("route", "search"), ("method", "POST")]));
    assert!(!shadow(&[("route", "search"), ("method", "GET")]));
    assert!(shadow(&[("country", "fr")]));
    assert!(!shadow(&[("country", "nz")]));
}

#[test]
fn known_keys_in_the_wrong_place_load_with_a_warning_and_no_effect() {
    let config = load(&[valid("misplaced_keys.yaml")], NO_MERGE).expect("loads");
    let warnings: Vec<String> = config.warnings().iter().map(ToString::to_string).collect();
    let file = valid("misplaced_keys.yaml").display().to_string();
    assert_eq!(
        warnings,
        [
            format!("{file}:6:5: descriptors[0].unit: 'unit' has no effect here and is ignored (envoyproxy/ratelimit ignores it too)"),
            format!("{file}:10:7: descriptors[0].rate_limit.shadow_mode: 'shadow_mode' has no effect here and is ignored (envoyproxy/ratelimit ignores it too)"),
            format!("{file}:17:11: descriptors[1].rate_limit.replaces[0].key: 'key' has no effect here and is ignored (envoyproxy/ratelimit ignores it too)"),
        ]
    );
    let domain = config.domain("misplaced").expect("domain");
    let api = domain
        .resolve([("api", "a")].into_iter())
        .expect("a rule")
        .rule;
    assert!(
        !api.shadow_mode,
        "shadow_mode inside rate_limit has no effect"
    );
    assert_eq!(
        limit_of(&config, "misplaced", &[("api", "a")]),
        Some(Some(10))
    );
    // A well-placed file has none; a key nobody knows is still refused.
    assert!(load(&[valid("nested.yaml")], NO_MERGE)
        .expect("loads")
        .warnings()
        .is_empty());
    let message = refused(&[invalid("misspelled_rate_limit.yaml")], NO_MERGE);
    assert!(message.contains("unknown field `ratelimit`"), "{message}");
}

#[test]
fn wildcards_match_at_the_end_in_the_middle_and_several_times() {
    let config = load(&[valid("wildcards.yaml")], NO_MERGE).expect("loads");
    let d = "media";
    assert_eq!(
        limit_of(&config, d, &[("image", "thumb_small")]),
        Some(Some(30))
    );
    // An exact value is tried before the wildcards.
    assert_eq!(limit_of(&config, d, &[("image", "thumb")]), Some(Some(5)));
    assert_eq!(limit_of(&config, d, &[("image", "full")]), None);
    assert_eq!(
        limit_of(&config, d, &[("video", "clip-01.mp4")]),
        Some(Some(8))
    );
    assert_eq!(limit_of(&config, d, &[("video", "clip-01.mov")]), None);
    assert_eq!(
        limit_of(&config, d, &[("asset", "cdn-eu-1-static")]),
        Some(Some(6))
    );
    assert_eq!(limit_of(&config, d, &[("asset", "cdn-us-1-static")]), None);
    assert_eq!(
        limit_of(&config, d, &[("bucket", "public"), ("object", "tmp/a")]),
        Some(Some(2))
    );
    assert_eq!(
        limit_of(&config, d, &[("bucket", "public"), ("object", "keep/a")]),
        None
    );
}

#[test]
fn share_threshold_counts_every_matching_value_under_the_pattern() {
    let config = load(&[valid("shared_counter.yaml")], NO_MERGE).expect("loads");
    let domain = config.domain("downloads").expect("domain");
    let counted = |entries: &[(&str, &str)]| -> Vec<String> {
        let matched = domain.resolve(entries.iter().copied()).expect("a rule");
        matched
            .counted_entries()
            .map(|(k, v)| format!("{k}={v}"))
            .collect()
    };
    assert_eq!(
        counted(&[("archive", "releases/1.0.tar")]),
        ["archive=releases/*"]
    );
    assert_eq!(
        counted(&[("archive", "nightly/x.tar")]),
        ["archive=nightly/x.tar"]
    );
    assert_eq!(counted(&[("mirror", "m1")]), ["mirror=m*"]);
    assert_eq!(counted(&[("sha", "abc")]), ["sha=*"]);
}

#[test]
fn metadata_quota_mode_replaces_and_a_zero_limit_load_as_written() {
    let config = load(&[valid("metadata.yaml")], NO_MERGE).expect("loads");
    let domain = config.domain("billing").expect("domain");
    let rule = domain
        .resolve([("account", "trial"), ("endpoint", "x")].into_iter())
        .expect("a rule")
        .rule;
    let metadata = rule.metadata.as_ref().expect("metadata");
    let owner = metadata.fields.get("owner").and_then(|v| v.kind.clone());
    assert_eq!(
        owner,
        Some(prost_types::value::Kind::StringValue("growth-team".into()))
    );
    let config = load(&[valid("policy.yaml")], NO_MERGE).expect("loads");
    let domain = config.domain("gateway").expect("domain");
    let rule = domain
        .resolve([("model", "small")].into_iter())
        .expect("model")
        .rule;
    assert!(rule.quota_mode && rule.metadata.is_some());
    let rule = domain
        .resolve([("plan", "enterprise")].into_iter())
        .expect("plan")
        .rule;
    assert_eq!(rule.replaces, ["per_team", "per_service"]);
    assert_eq!(
        limit_of(&config, "gateway", &[("team", "t"), ("agent", "scraper")]),
        Some(Some(0))
    );
    assert_eq!(
        limit_of(&config, "gateway", &[("team", "t"), ("agent", "bot")]),
        Some(None)
    );
}

#[test]
fn scalar_values_are_read_as_strings() {
    let config = load(&[valid("scalars.yaml")], NO_MERGE).expect("loads");
    assert_eq!(
        limit_of(&config, "status_codes", &[("status", "503")]),
        Some(Some(50))
    );
    assert_eq!(
        limit_of(&config, "status_codes", &[("retry", "true")]),
        Some(Some(0))
    );
    assert_eq!(limit_of(&config, "status_codes", &[("ratio", "0.5")]), None);
}

#[test]
fn split_domain_loads_only_with_merging() {
    let both = [valid("split_first.yaml"), valid("split_second.yaml")];
    let config = load(&both, MERGE).expect("merged");
    assert_eq!(
        limit_of(&config, "split", &[("color", "red")]),
        Some(Some(3))
    );
    assert_eq!(
        limit_of(&config, "split", &[("color", "blue")]),
        Some(Some(4))
    );
    let message = refused(&both, NO_MERGE);
    assert!(message.contains("split_second.yaml"), "{message}");
    assert!(message.contains("duplicate domain 'split'"), "{message}");
}

#[test]
fn the_same_file_twice_with_merging_is_a_duplicate_key() {
    let twice = [valid("split_first.yaml"), valid("split_first.yaml")];
    let message = refused(&twice, MERGE);
    assert!(
        message.contains("duplicate descriptor composite key 'split.color_red'"),
        "{message}"
    );
}

#[test]
fn duplicate_domain_across_files_is_refused() {
    let message = refused(
        &[valid("nested.yaml"), invalid("duplicate_domain.yaml")],
        NO_MERGE,
    );
    assert!(
        message.contains("duplicate_domain.yaml:1:1: domain: duplicate domain 'storefront'"),
        "{message}"
    );
}

/// Each invalid fixture, with (line, column) where its fault is and words of the reason.
const INVALID: &[(&str, &str, &str)] = &[
    (
        "unknown_unit.yaml",
        ":6:7:",
        "invalid rate limit unit 'fortnight'",
    ),
    ("not_yaml.yaml", ":", "found unexpected end of stream"),
    (
        "duplicate_key.yaml",
        ":6:5:",
        "duplicate descriptor composite key 'orders.shop_north'",
    ),
    (
        "empty_domain.yaml",
        ":1:1:",
        "config file cannot have empty domain",
    ),
    ("empty_key.yaml", ":3:5:", "descriptor has empty key"),
    (
        "misspelled_rate_limit.yaml",
        ":5:5:",
        "unknown field `ratelimit`",
    ),
    (
        "misspelled_requests_per_unit.yaml",
        ":7:7:",
        "unknown field `requestsPerUnit`",
    ),
    ("scalar_descriptors.yaml", ":3:5:", "expected a descriptor"),
    ("number_as_key.yaml", ":1:1:", "unknown field `42`"),
    (
        "fraction_value.yaml",
        ":6:5:",
        "descriptors[0].value: a number with a fraction or an exponent is not a valid value",
    ),
    (
        "share_threshold_without_wildcard.yaml",
        ":7:5:",
        "share_threshold can only be used with wildcard values (containing '*'), but found key 'shared.path_/api'",
    ),
    (
        "replaces_empty.yaml",
        ":10:15:",
        "should not have an empty replaces entry",
    ),
    (
        "replaces_self.yaml",
        ":10:15:",
        "replaces should not contain name of same descriptor",
    ),
    (
        "unlimited_with_unit.yaml",
        ":6:7:",
        "should not specify rate limit unit when unlimited",
    ),
];

#[test]
fn every_invalid_fixture_is_refused_with_file_position_and_reason() {
    for (name, position, reason) in INVALID {
        let message = refused(&[invalid(name)], NO_MERGE);
        let expected_prefix = format!("{}{position}", invalid(name).display());
        assert!(message.starts_with(&expected_prefix), "{name}: {message}");
        assert!(message.contains(reason), "{name}: {message}");
    }
    let listed = std::fs::read_dir(fixtures().join("invalid"))
        .expect("the fixtures directory")
        .count();
    // duplicate_domain.yaml is only invalid beside nested.yaml (tested above).
    assert_eq!(
        listed,
        INVALID.len() + 1,
        "an invalid fixture is not covered"
    );
}

#[test]
fn a_directory_loads_every_file_below_it_whatever_its_name_but_not_hidden_ones() {
    let dir = tempfile::tempdir().unwrap();
    let write = |relative: &str, domain: &str| {
        let path = dir.path().join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, format!("domain: {domain}\ndescriptors: []\n")).unwrap();
    };
    write("a.yaml", "a");
    write("nested/b.yml", "b");
    // The reference loads every file of its directory (its own `another-limits` has no
    // extension): limits in such a file must not vanish.
    write("another-limits", "another");
    // A ConfigMap mount: real files under ..data, linked from the top level.
    write("..data/c.yaml", "c");
    write("..2026_11_29_00_00_00.1/c.yaml", "c");
    #[cfg(unix)]
    std::os::unix::fs::symlink("..data/c.yaml", dir.path().join("c.yaml")).unwrap();
    let config = load(&[dir.path().to_path_buf()], NO_MERGE).expect("loads");
    let names: Vec<&str> = config.domains().iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["a", "another", "b", "c"]);
}

#[test]
fn sluice_extensions_are_validated() {
    // (lines added to a 1-per-second limit, where and why it is refused)
    let cases = [
        ("algorithm: no_such", ":7:7: descriptors[0].rate_limit.algorithm: unknown algorithm 'no_such'"),
        ("unit_multiplier: 0", ":7:7: descriptors[0].rate_limit.unit_multiplier: must be at least 1"),
        ("unit_multiplier: 4000000000", ":7:7: descriptors[0].rate_limit.unit_multiplier: a period of 4000000000 seconds is longer than 100 years"),
        ("burst: 5", ":7:7: descriptors[0].rate_limit.burst: burst applies only to token_bucket and leaky_bucket"),
        ("algorithm: token_bucket\n      burst: 0", ":8:7: descriptors[0].rate_limit.burst: must be at least 1"),
        ("algorithm: sliding_window_counter\n      burst: 2", ":8:7: descriptors[0].rate_limit.burst: burst applies only"),
    ];
    for (extra, expected) in cases {
        let message = refused_limit(&format!("requests_per_unit: 1\n      {extra}"));
        assert!(message.contains(expected), "{extra}: {message}");
    }
    let message = refused_limit("algorithm: sliding_window_log\n      requests_per_unit: 10001");
    assert!(message.contains(":7:7: descriptors[0].rate_limit.requests_per_unit: sliding_window_log keeps one entry per request (use sliding_window_counter for larger limits): at most 10000 requests_per_unit"), "{message}");
    for &algorithm in Algorithm::ALL {
        load_limit(&format!(
            "requests_per_unit: 10000\n      algorithm: {algorithm}"
        ))
        .unwrap_or_else(|e| panic!("{algorithm}: {e}"));
    }
    load_limit("requests_per_unit: 1\n      algorithm: leaky_bucket\n      burst: 5")
        .expect("burst on a bucket");
}

#[test]
fn rlqs_strategy_is_validated() {
    let config = |extra: &str| {
        format!("domain: d\ndescriptors:\n  - key: k\n    {extra}\n    rate_limit: {{unit: second, requests_per_unit: 5, unit_multiplier: 2}}\n")
    };
    let unknown = load_str("x.yaml", &config("rlqs_strategy: leaky"), NO_MERGE)
        .unwrap_err()
        .to_string();
    assert!(
        unknown.contains("descriptors[0].rlqs_strategy: unknown RLQS strategy 'leaky'"),
        "{unknown}"
    );
    let multiplied = load_str(
        "x.yaml",
        &config("rlqs_strategy: requests_per_time_unit"),
        NO_MERGE,
    )
    .unwrap_err()
    .to_string();
    assert!(multiplied.contains("counts per whole unit"), "{multiplied}");
    load_str("x.yaml", &config("rlqs_strategy: token_bucket"), NO_MERGE).expect("a token bucket");
}

#[test]
fn warm_up_takes_a_warmup_and_a_cold_factor_within_what_its_integers_hold() {
    let cases = [
        ("requests_per_unit: 1\n      warmup: 10s", ":7:7: descriptors[0].rate_limit.warmup: warmup applies only to warm_up, not to fixed_window"),
        ("requests_per_unit: 1\n      algorithm: token_bucket\n      cold_factor: 3", ":8:7: descriptors[0].rate_limit.cold_factor: cold_factor applies only to warm_up"),
        ("requests_per_unit: 1\n      algorithm: warm_up\n      cold_factor: 0", ":8:7: descriptors[0].rate_limit.cold_factor: must be between 1 and 100"),
        ("requests_per_unit: 1\n      algorithm: warm_up\n      warmup: soon", ":8:7: descriptors[0].rate_limit.warmup:"),
        ("requests_per_unit: 1\n      algorithm: warm_up\n      warmup: 500ms", ":8:7: descriptors[0].rate_limit.warmup: 500 ms is shorter than one interval of the stable rate (1000 ms)"),
        ("requests_per_unit: 1000000\n      algorithm: warm_up\n      warmup: 1h", "descriptors[0].rate_limit.warmup: the warm-up covers 3600000000 requests at the stable rate, too many"),
        ("requests_per_unit: 2000000\n      algorithm: warm_up", "descriptors[0].rate_limit.requests_per_unit: warm_up paces at most one request per microsecond"),
    ];
    for (lines, expected) in cases {
        let message = refused_limit(lines);
        assert!(message.contains(expected), "{lines}: {message}");
    }
    let config = load_limit(
        "requests_per_unit: 10\n      algorithm: warm_up\n      warmup: 30s\n      cold_factor: 4",
    )
    .expect("a warm_up limit");
    let text = format!("{:?}", config.domains()[0]);
    assert!(
        text.contains("warmup_us: Some(30000000)") && text.contains("cold_factor: Some(4)"),
        "{text}"
    );
    // Unlimited takes none of it.
    let text =
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, warmup: 1s}\n";
    let message = load_str("x.yaml", text, NO_MERGE).unwrap_err().to_string();
    assert!(
        message.contains(
            "unlimited takes no algorithm, unit_multiplier, debt, penalty, reserve, budget_leasing, on_store_failure, tiers, global, window, burst, warmup or cold_factor"
        ),
        "{message}"
    );
}

/// Loads a config with one limit on key `k`: `unit: second` and then `lines`.
fn load_limit(lines: &str) -> Result<sluice_config::Config, ConfigErrors> {
    let text = format!(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      {lines}\n"
    );
    load_str("x.yaml", &text, NO_MERGE)
}

/// The errors of a refused `load_limit`, one per line.
fn refused_limit(lines: &str) -> String {
    match load_limit(lines) {
        Ok(_) => panic!("{lines} loaded but must be refused"),
        Err(errors) => errors.to_string(),
    }
}

#[test]
fn every_error_of_a_file_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.yaml");
    let text = "domain: d\ndescriptors:\n  - value: no-key\n  - key: a\n    rate_limit: {unit: fortnight}\n";
    std::fs::write(&path, text).unwrap();
    let message = refused(&[path], NO_MERGE);
    assert!(message.contains("descriptor has empty key"), "{message}");
    assert!(
        message.contains("invalid rate limit unit 'fortnight'"),
        "{message}"
    );
}

#[test]
fn several_limits_and_debt_are_validated() {
    let node = |body: &str| format!("domain: d\ndescriptors:\n  - key: k\n{body}");
    let refused = |body: &str| match load_str("x.yaml", &node(body), NO_MERGE) {
        Ok(_) => panic!("{body} loaded but must be refused"),
        Err(errors) => errors.to_string(),
    };
    let both = refused("    rate_limit: {unit: second, requests_per_unit: 1}\n    rate_limits:\n      - {unit: day, requests_per_unit: 9}\n");
    assert!(
        both.contains("descriptors[0].rate_limits: rate_limit and rate_limits cannot both be set"),
        "{both}"
    );
    let empty = refused("    rate_limits: []\n");
    assert!(
        empty.contains("descriptors[0].rate_limits: must hold at least one limit"),
        "{empty}"
    );
    let unlimited = refused(
        "    rate_limits:\n      - {unit: day, requests_per_unit: 9}\n      - {unlimited: true}\n",
    );
    assert!(unlimited.contains(":6:10: descriptors[0].rate_limits[1].unlimited: a limit among several cannot be unlimited"), "{unlimited}");
    let bad_unit = refused("    rate_limits:\n      - {unit: fortnight, requests_per_unit: 9}\n");
    assert!(
        bad_unit
            .contains("descriptors[0].rate_limits[0].unit: invalid rate limit unit 'fortnight'"),
        "{bad_unit}"
    );
    let unlimited_debt = refused("    rate_limit: {unlimited: true, debt: true}\n");
    assert!(
        unlimited_debt.contains(
            "unlimited takes no algorithm, unit_multiplier, debt, penalty, reserve, budget_leasing, on_store_failure, tiers, global, window, burst"
        ),
        "{unlimited_debt}"
    );
    let config = load_str(
        "x.yaml",
        &node("    rate_limits:\n      - {unit: second, requests_per_unit: 10}\n      - {unit: day, requests_per_unit: 10000, algorithm: token_bucket, debt: true}\n"),
        NO_MERGE,
    )
    .expect("two limits load");
    let domain = config.domain("d").expect("domain");
    let rule = domain.resolve([("k", "v")].into_iter()).expect("k").rule;
    let limits: Vec<_> = rule
        .limits
        .iter()
        .filter_map(|named| named.limit.clone())
        .collect();
    assert_eq!(limits.len(), 2);
    assert!(!limits[0].debt && limits[1].debt);
    assert_eq!(limits[1].algorithm(), Algorithm::TokenBucket);
}
