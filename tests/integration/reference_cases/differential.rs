//! What the differential run (`scripts/differential`: envoyproxy/ratelimit and sluice side by
//! side on generated traffic) found, a row each, run in this process on every store without
//! the reference: the causes sluice now answers as the reference does, and the differences it
//! keeps on purpose (docs: "Differences from envoyproxy/ratelimit"), each asserting sluice's
//! answer. The harness reports a kept difference under the row name given in `shows`.

use prost_types::value::Kind;
use sluice_limiter::LimiterOptions;

use crate::rules::{every_hit, global_quota_mode, run_all, Case, CASE, OK, OVER};
use crate::support::redis::RedisServer;
use crate::support::stores::every_store;

const LIMITS: &str = include_str!("../../fixtures/cases/differential/limits.yaml");

/// The causes sluice now answers as the reference does.
const MATCHED: &[Case] = &[
    Case {
        shows: "a limit of 0, every hit counted: the denied hit is counted, and a check (hits_addend 0) answers from that count",
        config: LIMITS,
        domain: "diff",
        options: every_hit,
        calls: &[
            (0, &["zero=b+0"], OK, &[(OK, 0)]),
            (0, &["zero=a"], OVER, &[(OVER, 0)]),
            (0, &["zero=a+0"], OVER, &[(OVER, 0)]),
        ],
        ..CASE
    },
    Case {
        shows: "an override of 0, every hit counted: it counts in its window's key, which another override of that unit reads",
        config: LIMITS,
        domain: "diff",
        options: every_hit,
        calls: &[
            (0, &["user=u@0/hour"], OVER, &[(OVER, 0)]),
            (0, &["user=u@5/hour"], OK, &[(OK, 3)]),
        ],
        ..CASE
    },
    Case {
        shows: "the local cache, every hit counted: a descriptor it answers is not charged, the others of the request are",
        config: LIMITS,
        domain: "diff",
        options: every_hit,
        calls: &[
            (0, &["one=a"], OK, &[(OK, 0)]),
            (0, &["one=a"], OVER, &[(OVER, 0)]),
            (0, &["one=a", "ten=b"], OVER, &[(OVER, 0), (OK, 9)]),
            (0, &["one=a", "ten=b"], OVER, &[(OVER, 0), (OK, 8)]),
        ],
        cache_hits: Some(2.0),
        ..CASE
    },
    Case {
        shows: "the local cache, every hit counted: a check's denial is remembered and a check answered from it, the count being past the limit",
        config: LIMITS,
        domain: "diff",
        options: every_hit,
        calls: &[
            (0, &["one=g@5/minute+3"], OK, &[(OK, 2)]),
            (0, &["one=g+0"], OVER, &[(OVER, 0)]),
            (0, &["one=g"], OVER, &[(OVER, 0)]),
            (0, &["one=g+0"], OVER, &[(OVER, 0)]),
        ],
        cache_hits: Some(2.0),
        ..CASE
    },
    Case {
        shows: "global QUOTA_MODE: a descriptor no limit applies to counts as a quota descriptor that passed",
        config: LIMITS,
        domain: "diff",
        options: global_quota_mode,
        calls: &[
            (0, &["one=q"], OK, &[(OK, 0)]),
            (0, &["one=q", "nothing=x"], OK, &[(OVER, 0), (OK, 0)]),
            (0, &["one=q"], OVER, &[(OVER, 0)]),
        ],
        ..CASE
    },
    Case {
        shows: "global QUOTA_MODE: a shadow-mode limit over its limit counts as a quota descriptor that passed",
        config: LIMITS,
        domain: "diff",
        options: global_quota_mode,
        calls: &[
            (0, &["one=s", "shadowed=s"], OK, &[(OK, 0), (OK, 0)]),
            (0, &["one=s", "shadowed=s"], OK, &[(OVER, 0), (OK, 0)]),
        ],
        ..CASE
    },
];

/// The differences sluice keeps, with its answer.
const KEPT: &[Case] = &[
    Case {
        shows: "rule-found-by-joined-string: an entry matches the node of its own key and value, never `api_key: c` for `api=key_c` nor `user: *` for `user_=a`",
        config: LIMITS,
        domain: "diff",
        calls: &[
            (0, &["api=key_c"], OK, &[(OK, 0)]),
            (0, &["api=key_c"], OK, &[(OK, 0)]),
            (0, &["user_=a"], OK, &[(OK, 0)]),
            (0, &["user_=a"], OK, &[(OK, 0)]),
            (0, &["api_key=c"], OK, &[(OK, 0)]),
            (0, &["api_key=c"], OVER, &[(OVER, 0)]),
        ],
        limits: &[(0, 0, None), (2, 0, None), (4, 0, Some(1))],
        ..CASE
    },
    Case {
        shows: "local-cache-by-window-key: after a denial, another limit on the same key is asked of the store, not answered from the cache",
        config: LIMITS,
        domain: "diff",
        options: every_hit,
        calls: &[
            (0, &["ten=c@1/minute"], OK, &[(OK, 0)]),
            (0, &["ten=c@1/minute"], OVER, &[(OVER, 0)]),
            (0, &["ten=c@5/minute"], OK, &[(OK, 2)]),
        ],
        cache_hits: Some(0.0),
        ..CASE
    },
    Case {
        shows: "stop-increment-charges-the-hit-over: with true (sluice's default) a hit that goes over is not charged",
        config: LIMITS,
        domain: "diff",
        calls: &[
            (0, &["ten=t+11"], OVER, &[(OVER, 0)]),
            (0, &["ten=t"], OK, &[(OK, 9)]),
        ],
        ..CASE
    },
    Case {
        shows: "stop-increment-same-descriptor-twice: the second sees the first's charge, and the denied request charges neither",
        config: LIMITS,
        domain: "diff",
        calls: &[
            (0, &["one=w", "one=w"], OVER, &[(OK, 1), (OVER, 0)]),
            (0, &["one=w"], OK, &[(OK, 0)]),
        ],
        ..CASE
    },
    Case {
        shows: "stop-increment-shadow-or-quota-over: a shadow-mode limit over its limit stops no other charge",
        config: LIMITS,
        domain: "diff",
        calls: &[
            (0, &["shadowed=x", "ten=x"], OK, &[(OK, 0), (OK, 9)]),
            (0, &["shadowed=x", "ten=x"], OK, &[(OK, 0), (OK, 8)]),
        ],
        ..CASE
    },
];

#[test]
fn the_differences_found_that_sluice_now_answers_as_the_reference_on_every_store() {
    run_all(MATCHED);
}

#[test]
fn the_differences_sluice_keeps_on_every_store() {
    run_all(KEPT);
}

/// The `limit` text of each descriptor in the dynamic metadata of a request of `descriptors`.
async fn override_texts(descriptors: &[&str]) -> Vec<Vec<Option<String>>> {
    let redis = RedisServer::start(&[]);
    let options = LimiterOptions {
        response_dynamic_metadata: true,
        ..LimiterOptions::default()
    };
    let mut out = Vec::new();
    for service in every_store(&redis.url(), LIMITS, &options).await {
        let response = service.ask("diff", descriptors).await;
        let metadata = response.dynamic_metadata.expect("dynamic metadata");
        let Some(Kind::ListValue(list)) = metadata.fields["descriptors"].kind.clone() else {
            panic!("{}: descriptors is a list", service.store);
        };
        out.push(
            list.values
                .into_iter()
                .map(|value| match value.kind {
                    Some(Kind::StructValue(s)) => match s.fields.get("limit")?.kind.clone() {
                        Some(Kind::StringValue(text)) => Some(text),
                        _ => None,
                    },
                    _ => None,
                })
                .collect(),
        );
    }
    out
}

#[tokio::test]
async fn an_override_in_the_dynamic_metadata_leaves_out_its_zero_fields_as_the_reference() {
    let texts = override_texts(&["zero=a@0/minute", "one=a@5/hour", "ten=a"]).await;
    for on_store in texts {
        assert_eq!(
            on_store,
            [
                Some("unit:MINUTE".to_string()),
                Some("requests_per_unit:5 unit:HOUR".to_string()),
                None
            ]
        );
    }
}

#[tokio::test]
async fn week_override_in_metadata_is_named_where_the_reference_writes_its_number() {
    // The reference's protos know no name for WEEK (7) in a descriptor's override, so it
    // writes `unit:7`; sluice names it.
    for on_store in override_texts(&["one=a@5/week"]).await {
        assert_eq!(
            on_store,
            [Some("requests_per_unit:5 unit:WEEK".to_string())]
        );
    }
}

#[tokio::test]
async fn metadata_kept_with_metric_flags_where_the_reference_drops_it() {
    let redis = RedisServer::start(&[]);
    let options = LimiterOptions {
        response_dynamic_metadata: true,
        ..LimiterOptions::default()
    };
    for service in every_store(&redis.url(), LIMITS, &options).await {
        let response = service.ask("diff", &["flagged=f"]).await;
        let metadata = response.dynamic_metadata.expect("dynamic metadata");
        let passed = metadata.fields.get("metadata").and_then(|v| match &v.kind {
            Some(Kind::StructValue(s)) => s.fields.get("tier").cloned(),
            _ => None,
        });
        assert_eq!(
            passed.and_then(|v| v.kind),
            Some(Kind::StringValue("gold".into())),
            "{}",
            service.store
        );
    }
}
