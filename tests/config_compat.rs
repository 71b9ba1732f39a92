//! envoyproxy/ratelimit's own config fixtures (`../shared/compat/envoy-ratelimit/`), read from
//! there: every valid file loads, every invalid one is refused naming the file and the reason.

use std::path::{Path, PathBuf};

use sluice::config::{load, ConfigErrors, LoadOptions};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/compat/envoy-ratelimit")
}

fn valid(name: &str) -> PathBuf {
    fixtures().join("valid").join(name)
}

fn invalid(name: &str) -> PathBuf {
    fixtures().join("invalid").join(name)
}

const NO_MERGE: LoadOptions = LoadOptions {
    merge_domains: false,
};
const MERGE: LoadOptions = LoadOptions {
    merge_domains: true,
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
    for entry in std::fs::read_dir(&dir).expect("fixtures beside the project") {
        let path = entry.unwrap().path();
        let config = load(std::slice::from_ref(&path), NO_MERGE)
            .unwrap_or_else(|e| panic!("{} must load:\n{e}", path.display()));
        assert_eq!(config.domains().len(), 1, "{}", path.display());
        count += 1;
    }
    assert!(
        count >= 13,
        "only {count} valid fixtures found in {}",
        dir.display()
    );
}

#[test]
fn basic_config_has_its_limits_and_unlimited() {
    let config = load(&[valid("basic_config.yaml")], NO_MERGE).unwrap();
    let domain = config.domain("test-domain").expect("domain");
    let entries = [("key1", "value1"), ("subkey1", "subvalue1")];
    let rule = domain
        .resolve(entries.into_iter())
        .expect("specific subkey limit")
        .rule;
    assert_eq!(rule.limit.unwrap().requests_per_unit, 10);
    let rule = domain
        .resolve([("key6", "anything")].into_iter())
        .unwrap()
        .rule;
    assert_eq!(rule.limit, None, "key6 is unlimited");
    let rule = domain.resolve([("key4", "x")].into_iter()).unwrap().rule;
    assert_eq!(rule.name.as_deref(), Some("key4_rate_limit"));
    // key2=value3 is listed without a limit: it whitelists the value.
    assert!(domain.resolve([("key2", "value3")].into_iter()).is_none());
}

#[test]
fn split_domain_loads_only_with_merging() {
    let both = [
        valid("merge_domain_key1.yaml"),
        valid("merge_domain_key2.yaml"),
    ];
    let config = load(&both, MERGE).expect("merged");
    let domain = config.domain("test-domain").unwrap();
    assert!(domain.resolve([("key1", "value1")].into_iter()).is_some());
    assert!(domain.resolve([("key2", "value2")].into_iter()).is_some());
    let message = refused(&both, NO_MERGE);
    assert!(message.contains("merge_domain_key2.yaml"), "{message}");
    assert!(
        message.contains("duplicate domain 'test-domain'"),
        "{message}"
    );
}

#[test]
fn the_same_file_twice_with_merging_is_a_duplicate_key() {
    let twice = [
        valid("merge_domain_key1.yaml"),
        valid("merge_domain_key1.yaml"),
    ];
    let message = refused(&twice, MERGE);
    assert!(
        message.contains("duplicate descriptor composite key 'test-domain.key1_value1'"),
        "{message}"
    );
}

#[test]
fn duplicate_domain_across_files_is_refused() {
    let message = refused(
        &[valid("basic_config.yaml"), invalid("duplicate_domain.yaml")],
        NO_MERGE,
    );
    assert!(
        message.contains("duplicate_domain.yaml:1:1: domain: duplicate domain 'test-domain'"),
        "{message}"
    );
}

/// Each invalid fixture, with (line, column) where its fault is and words of the reason.
const INVALID: &[(&str, &str, &str)] = &[
    (
        "bad_limit_unit.yaml",
        ":6:7:",
        "invalid rate limit unit 'foo'",
    ),
    ("bad_yaml.yaml", ":", "end of stream"),
    (
        "duplicate_key.yaml",
        ":6:5:",
        "duplicate descriptor composite key 'test-domain.key1_value1'",
    ),
    (
        "empty_domain.yaml",
        ":1:1:",
        "config file cannot have empty domain",
    ),
    ("empty_key.yaml", ":3:5:", "descriptor has empty key"),
    ("misspelled_key.yaml", ":5:5:", "unknown field `ratelimit`"),
    (
        "misspelled_key2.yaml",
        ":7:7:",
        "unknown field `requestsperunit`",
    ),
    ("non_map_list.yaml", ":3:5:", "expected a descriptor"),
    ("non_string_key.yaml", ":1:1:", "unknown field `0.25`"),
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
        .unwrap()
        .count();
    // duplicate_domain.yaml is only invalid beside basic_config.yaml (tested above).
    assert_eq!(
        listed,
        INVALID.len() + 1,
        "an invalid fixture is not covered"
    );
}

#[test]
fn a_directory_loads_every_yaml_below_it_but_not_hidden_ones() {
    let dir = tempfile::tempdir().unwrap();
    let write = |relative: &str, domain: &str| {
        let path = dir.path().join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, format!("domain: {domain}\ndescriptors: []\n")).unwrap();
    };
    write("a.yaml", "a");
    write("nested/b.yml", "b");
    write("notes.txt", "ignored");
    // A ConfigMap mount: real files under ..data, linked from the top level.
    write("..data/c.yaml", "c");
    write("..2026_11_29_00_00_00.1/c.yaml", "c");
    #[cfg(unix)]
    std::os::unix::fs::symlink("..data/c.yaml", dir.path().join("c.yaml")).unwrap();
    let config = load(&[dir.path().to_path_buf()], NO_MERGE).expect("loads");
    let names: Vec<&str> = config.domains().iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["a", "b", "c"]);
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
        let message = refused(
            &[write_limit(&format!("requests_per_unit: 1\n      {extra}"))],
            NO_MERGE,
        );
        assert!(message.contains(expected), "{extra}: {message}");
    }
    let message = refused(
        &[write_limit(
            "algorithm: sliding_window_log\n      requests_per_unit: 10001",
        )],
        NO_MERGE,
    );
    assert!(message.contains(":7:7: descriptors[0].rate_limit.requests_per_unit: sliding_window_log keeps one entry per request: at most 10000"), "{message}");
    for algorithm in [
        "fixed_window",
        "sliding_window_log",
        "sliding_window_counter",
        "token_bucket",
        "leaky_bucket",
    ] {
        let path = write_limit(&format!(
            "requests_per_unit: 10000\n      algorithm: {algorithm}"
        ));
        load(&[path], NO_MERGE).unwrap_or_else(|e| panic!("{algorithm}: {e}"));
    }
    load(
        &[write_limit(
            "requests_per_unit: 1\n      algorithm: leaky_bucket\n      burst: 5",
        )],
        NO_MERGE,
    )
    .expect("burst on a bucket");
}

/// A file with one limit on key `k`: `unit: second` and then `lines`, in one temporary
/// directory for the whole test run.
fn write_limit(lines: &str) -> PathBuf {
    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    static COUNT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let dir = DIR.get_or_init(|| tempfile::tempdir().unwrap());
    let n = COUNT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let path = dir.path().join(format!("x{n}.yaml"));
    let text = format!(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      {lines}\n"
    );
    std::fs::write(&path, text).unwrap();
    path
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
