//! The rules of a request as tables of behaviour cases, run in this process on every store
//! (`support::stores`: the memory store on a manual clock, Redis against a real
//! `redis-server`): a row per case, the runner once per table. The rows are the reference's
//! service cases (`test/service/ratelimit_test.go`: shadow and quota modes, unlimited,
//! replaces), its metric label cases (`test/config/config_test.go`: `detailed_metric`,
//! `value_to_metric`, the stats names' sanitising) and sluice's own rules (all-or-nothing, the
//! reference's counting, several limits of one descriptor, debt, time passing on the manual
//! clock).

use sluice_core::engine::Charging;
use sluice_core::limit::Unit;
use sluice_limiter::{HeaderNames, LimiterOptions};
use sluice_proto::rate_limit_response::Code;

use crate::support::redis::RedisServer;
use crate::support::stores::{every_store, InProcess};

pub(crate) const OK: Code = Code::Ok;
pub(crate) const OVER: Code = Code::OverLimit;

/// A status's `limit_remaining` a row does not check.
pub(crate) const ANY: i64 = -1;

/// The reference's service config (`ratelimit_test.go`'s limits, named as there).
const SERVICE: &str = include_str!("../fixtures/cases/rules/service.yaml");

/// sluice's own rules: several limits on one descriptor, debt, the algorithms' clocks.
const RULES: &str = include_str!("../fixtures/cases/rules/rules.yaml");

/// One request of a row: milliseconds on the clock before it, its descriptors (`k=v`, with
/// `+N` for N hits), the overall code, and each status's code and remaining.
pub(crate) type Call = (u64, &'static [&'static str], Code, &'static [(Code, i64)]);

/// A case: what it shows, its config, domain and service options, its calls in order, the
/// current limit some statuses (call, status) must carry (its requests_per_unit, or none), the
/// `duration_until_reset` in seconds some must carry, the hits the local cache answered (on
/// the store behind it), and then the series on `/metrics` it must have counted.
pub(crate) struct Case {
    pub(crate) shows: &'static str,
    pub(crate) config: &'static str,
    pub(crate) domain: &'static str,
    pub(crate) options: fn() -> LimiterOptions,
    pub(crate) calls: &'static [Call],
    pub(crate) limits: &'static [(usize, usize, Option<u32>)],
    pub(crate) resets: &'static [(usize, usize, i64)],
    /// Behind the local cache: how many hits it answered in all (Redis not asked).
    pub(crate) cache_hits: Option<f64>,
    /// Series some calls must have counted by the time they are answered: (call, series, value).
    pub(crate) series_after: &'static [(usize, &'static str, f64)],
    /// Response headers some calls must carry (call, name, value), or lack (`None`); the name
    /// `*` with `None`: no header at all.
    pub(crate) headers: &'static [(usize, &'static str, Option<&'static str>)],
    pub(crate) series: &'static [(&'static str, f64)],
}

fn defaults() -> LimiterOptions {
    LimiterOptions::default()
}

/// What a row does not say: the default options, and nothing checked beyond its calls.
pub(crate) const CASE: Case = Case {
    shows: "",
    config: "",
    domain: "",
    options: defaults,
    calls: &[],
    limits: &[],
    resets: &[],
    cache_hits: None,
    series_after: &[],
    headers: &[],
    series: &[],
};

fn global_shadow_mode() -> LimiterOptions {
    LimiterOptions {
        shadow_mode: true,
        ..LimiterOptions::default()
    }
}

pub(crate) fn global_quota_mode() -> LimiterOptions {
    LimiterOptions {
        quota_mode: true,
        ..LimiterOptions::default()
    }
}

fn default_headers() -> LimiterOptions {
    LimiterOptions {
        response_headers: Some(HeaderNames::default()),
        ..LimiterOptions::default()
    }
}

fn custom_headers() -> LimiterOptions {
    LimiterOptions {
        response_headers: Some(HeaderNames {
            limit: "A-Ratelimit-Limit".into(),
            remaining: "A-Ratelimit-Remaining".into(),
            reset: "A-Ratelimit-Reset".into(),
            ..HeaderNames::default()
        }),
        ..LimiterOptions::default()
    }
}

pub(crate) fn every_hit() -> LimiterOptions {
    LimiterOptions {
        charging: Charging::EveryHit,
        ..LimiterOptions::default()
    }
}

/// The reference's `test/service/ratelimit_test.go`, a row per test.
const SERVICE_CASES: &[Case] = &[
    Case {
        shows: "TestService: no limit is OK with nothing remaining; a limit of 1 denies its second hit",
        config: SERVICE,
        domain: "test-domain",
        calls: &[
            (0, &["hello=world"], OK, &[(OK, 0)]),
            (0, &["one=a"], OK, &[(OK, 0)]),
            (0, &["one=a", "hello=world"], OVER, &[(OVER, 0), (OK, 0)]),
        ],
        limits: &[(0, 0, None)],
        series: &[(r#"ratelimit_service_rate_limit_over_limit{domain="test-domain",key1="one"}"#, 1.0)],
        ..CASE
    },
    Case {
        shows: "TestServiceGlobalShadowMode: the answer is OK, the statuses stay truthful",
        config: SERVICE,
        domain: "test-domain",
        options: global_shadow_mode,
        calls: &[
            (0, &["one=a"], OK, &[(OK, 0)]),
            (0, &["one=a", "hello=world"], OK, &[(OVER, 0), (OK, 0)]),
        ],
        series: &[("ratelimit_service_global_shadow_mode", 1.0)],
        ..CASE
    },
    Case {
        shows: "TestRuleShadowMode: a shadow rule over its limit answers OK and counts shadow_mode",
        config: SERVICE,
        domain: "test-domain",
        calls: &[
            (0, &["shadow=a"], OK, &[(OK, 0)]),
            (0, &["shadow=a", "hello=world"], OK, &[(OK, 0), (OK, 0)]),
        ],
        series: &[
            (r#"ratelimit_service_rate_limit_shadow_mode{domain="test-domain",key1="shadow"}"#, 1.0),
            ("ratelimit_service_global_shadow_mode", 0.0),
        ],
        ..CASE
    },
    Case {
        shows: "TestMixedRuleShadowMode: an enforced rule over denies beside a shadow rule over",
        config: SERVICE,
        domain: "test-domain",
        calls: &[
            (0, &["shadow=m", "one=m"], OK, &[(OK, 0), (OK, 0)]),
            (0, &["shadow=m", "one=m"], OVER, &[(OK, 0), (OVER, 0)]),
        ],
        ..CASE
    },
    Case {
        shows: "TestBasicConfig: an unlimited rule is OK with remaining u32::MAX and no current limit",
        config: BASIC,
        domain: "test-domain",
        calls: &[(0, &["key6=foo"], OK, &[(OK, u32::MAX as i64)])],
        limits: &[(0, 0, None)],
        ..CASE
    },
    Case {
        shows: "TestUnlimited: an unlimited rule is OK with remaining u32::MAX and no current limit",
        config: SERVICE,
        domain: "test-domain",
        calls: &[(
            0,
            &["ten=u", "free=u", "hello=world"],
            OK,
            &[(OK, 9), (OK, u32::MAX as i64), (OK, 0)],
        )],
        limits: &[(0, 0, Some(10)), (0, 1, None), (0, 2, None)],
        ..CASE
    },
    Case {
        shows: "TestUnlimitedReplaces: an unlimited rule still replaces, so the replaced limit is never charged",
        config: SERVICE,
        domain: "test-domain",
        calls: &[
            (0, &["general=g", "vip=v"], OK, &[(OK, 0), (OK, u32::MAX as i64)]),
            (0, &["general=g", "vip=v"], OK, &[(OK, 0), (OK, u32::MAX as i64)]),
            (0, &["general=g", "vip=v"], OK, &[(OK, 0), (OK, u32::MAX as i64)]),
            // Alone, `general` applies: its 1 was never charged.
            (0, &["general=g"], OK, &[(OK, 0)]),
            (0, &["general=g"], OVER, &[(OVER, 0)]),
        ],
        limits: &[(0, 0, None), (1, 0, None), (2, 0, None), (3, 0, Some(1))],
        ..CASE
    },
    Case {
        shows: "TestServiceWithCustomRatelimitHeaders: the denying limit's headers, under the names configured",
        config: SERVICE,
        domain: "test-domain",
        options: custom_headers,
        calls: &[
            (0, &["one=h"], OK, &[(OK, 0)]),
            (0, &["one=h", "ten=h"], OVER, &[(OVER, 0), (OK, 10)]),
        ],
        // The clock starts 20.123456 s into a minute: 39.88 s left, told as 40.
        headers: &[
            (1, "A-Ratelimit-Limit", Some("1")),
            (1, "A-Ratelimit-Remaining", Some("0")),
            (1, "A-Ratelimit-Reset", Some("40")),
            (1, "RateLimit-Limit", None),
        ],
        ..CASE
    },
    Case {
        shows: "TestServiceWithDefaultRatelimitHeaders: under the limits, the descriptor with the least remaining; no limit, no headers",
        config: SERVICE,
        domain: "test-domain",
        options: default_headers,
        calls: &[
            (0, &["ten=d", "roomy=d"], OK, &[(OK, 9), (OK, 99)]),
            (0, &["hello=world"], OK, &[(OK, 0)]),
        ],
        headers: &[
            (0, "RateLimit-Limit", Some("10")),
            (0, "RateLimit-Remaining", Some("9")),
            (1, "*", None),
        ],
        ..CASE
    },
    Case {
        shows: "TestServiceGlobalQuotaMode: every limit a quota, one over and one under is OK",
        config: SERVICE,
        domain: "test-domain",
        options: global_quota_mode,
        calls: &[
            (0, &["one=q"], OK, &[(OK, 0)]),
            (0, &["one=q", "ten=q"], OK, &[(OVER, 0), (OK, 9)]),
            (0, &["one=q"], OVER, &[(OVER, 0)]),
        ],
        ..CASE
    },
    Case {
        shows: "TestServicePerDescriptorQuotaMode: every quota over denies",
        config: SERVICE,
        domain: "test-domain",
        calls: &[
            (0, &["quota=p"], OK, &[(OK, 0)]),
            (0, &["quota=p"], OVER, &[(OVER, 0)]),
        ],
        ..CASE
    },
    Case {
        shows: "TestServiceMixedPerDescriptorModes: an enforced limit over denies, whatever the quotas say",
        config: SERVICE,
        domain: "test-domain",
        calls: &[
            (0, &["one=m", "quota=m"], OK, &[(OK, 0), (OK, 0)]),
            // The request is denied, so `roomy` is not charged (sluice's all-or-nothing).
            (0, &["one=m", "roomy=m"], OVER, &[(OVER, 0), (OK, 100)]),
        ],
        ..CASE
    },
    Case {
        shows: "TestServiceMixedPerDescriptorModesUnderLimit: all under is OK",
        config: SERVICE,
        domain: "test-domain",
        calls: &[(0, &["ten=u", "roomy=u"], OK, &[(OK, 9), (OK, 99)])],
        ..CASE
    },
    Case {
        shows: "TestServiceQuotaModeOnlyAllOverTheLimit: two quotas over deny",
        config: SERVICE,
        domain: "test-domain",
        calls: &[
            (0, &["quota=o", "quota2=o"], OK, &[(OK, 0), (OK, 0)]),
            (0, &["quota=o", "quota2=o"], OVER, &[(OVER, 0), (OVER, 0)]),
        ],
        ..CASE
    },
    Case {
        shows: "TestServiceQuotaModeOnlySomeOverTheLimit: one quota over beside one under is OK",
        config: SERVICE,
        domain: "test-domain",
        calls: &[
            (0, &["quota=s"], OK, &[(OK, 0)]),
            (0, &["quota=s", "roomy=s"], OK, &[(OVER, 0), (OK, 99)]),
        ],
        ..CASE
    },
    Case {
        shows: "TestServiceQuotaModeWithShadowMode: global shadow mode answers OK over every quota",
        config: SERVICE,
        domain: "test-domain",
        options: global_shadow_mode,
        calls: &[
            (0, &["quota=w", "quota2=w"], OK, &[(OK, 0), (OK, 0)]),
            (0, &["quota=w", "quota2=w"], OK, &[(OVER, 0), (OVER, 0)]),
        ],
        series: &[("ratelimit_service_global_shadow_mode", 1.0)],
        ..CASE
    },
    Case {
        shows: "TestServiceMixedModeWithShadowMode: global shadow mode answers OK over an enforced limit",
        config: SERVICE,
        domain: "test-domain",
        options: global_shadow_mode,
        calls: &[
            (0, &["one=x", "quota=x"], OK, &[(OK, 0), (OK, 0)]),
            (0, &["one=x", "quota=x"], OK, &[(OVER, 0), (OVER, 0)]),
        ],
        series: &[("ratelimit_service_global_shadow_mode", 1.0)],
        ..CASE
    },
];

/// The reference's limiter config (`test/limiter/base_limiter_test.go`'s limits).
const LIMITER: &str = include_str!("../fixtures/cases/reference_cases_limiter/config.yaml");

/// The reference's `test/limiter/base_limiter_test.go` response cases, a row per test.
const LIMITER_CASES: &[Case] = &[
    Case {
        shows: "TestGetResponseStatusEmptyKey: no limit, OK with nothing remaining",
        config: LIMITER,
        domain: "domain",
        calls: &[(0, &["unknown=x"], OK, &[(OK, 0)])],
        limits: &[(0, 0, None)],
        ..CASE
    },
    Case {
        shows: "TestGetResponseStatusOverLimit: 2 used of 5, 5 more: 2 over, 1 near (past 4)",
        config: LIMITER,
        domain: "domain",
        calls: &[
            (0, &["five=o+2"], OK, &[(OK, 3)]),
            (0, &["five=o+5"], OVER, &[(OVER, 0)]),
        ],
        limits: &[(1, 0, Some(5))],
        series: &[
            (r#"ratelimit_service_rate_limit_over_limit{domain="domain",key1="five"}"#, 2.0),
            (r#"ratelimit_service_rate_limit_near_limit{domain="domain",key1="five"}"#, 1.0),
            (r#"ratelimit_service_rate_limit_shadow_mode{domain="domain",key1="five"}"#, 0.0),
        ],
        ..CASE
    },
    Case {
        shows: "TestGetResponseStatusOverLimitShadowMode: the same in shadow mode is OK, and counted shadow",
        config: LIMITER,
        domain: "domain",
        calls: &[
            (0, &["shadow=o+2"], OK, &[(OK, 3)]),
            (0, &["shadow=o+5"], OK, &[(OK, 0)]),
        ],
        series: &[
            (r#"ratelimit_service_rate_limit_over_limit{domain="domain",key1="shadow"}"#, 2.0),
            (r#"ratelimit_service_rate_limit_near_limit{domain="domain",key1="shadow"}"#, 1.0),
            (r#"ratelimit_service_rate_limit_shadow_mode{domain="domain",key1="shadow"}"#, 2.0),
        ],
        ..CASE
    },
    Case {
        shows: "TestGetResponseStatusBelowLimit: 6 of 10, all within, none near",
        config: LIMITER,
        domain: "domain",
        calls: &[
            (0, &["key=value+5"], OK, &[(OK, 5)]),
            (0, &["key=value"], OK, &[(OK, 4)]),
        ],
        series: &[
            (r#"ratelimit_service_rate_limit_near_limit{domain="domain",key1="key_value"}"#, 0.0),
            (r#"ratelimit_service_rate_limit_within_limit{domain="domain",key1="key_value"}"#, 6.0),
        ],
        ..CASE
    },
    Case {
        shows: "TestBasicConfig (integration): duration_until_reset counts down to the day's end",
        config: ANOTHER,
        domain: "another",
        // The clock starts 80,000.123456 s into a day: 6,399.88 s left, told as 6,400.
        calls: &[
            (0, &["key4=durTest"], OK, &[(OK, 19)]),
            (2100, &["key4=durTest"], OK, &[(OK, 18)]),
        ],
        resets: &[(0, 0, 6400), (1, 0, 6398)],
        ..CASE
    },
    Case {
        shows: "TestOverLimitWithLocalCache: a key known over is answered locally, Redis not asked",
        config: LIMITER,
        domain: "domain",
        calls: &[
            (0, &["five=l+5"], OK, &[(OK, 0)]),
            (0, &["five=l"], OVER, &[(OVER, 0)]),
            (0, &["five=l"], OVER, &[(OVER, 0)]),
        ],
        cache_hits: Some(1.0),
        ..CASE
    },
    Case {
        shows: "TestNoOverLimitWithLocalCache: under the limit, Redis decides",
        config: LIMITER,
        domain: "domain",
        calls: &[
            (0, &["five=n"], OK, &[(OK, 4)]),
            (0, &["five=n"], OK, &[(OK, 3)]),
        ],
        cache_hits: Some(0.0),
        ..CASE
    },
    Case {
        shows: "TestGetResponseStatusOverLimitWithLocalCache: 2 hits on a key known over, both over",
        config: LIMITER,
        domain: "domain",
        calls: &[
            (0, &["five=c+5"], OK, &[(OK, 0)]),
            (0, &["five=c"], OVER, &[(OVER, 0)]),
            (0, &["five=c+2"], OVER, &[(OVER, 0)]),
        ],
        limits: &[(2, 0, Some(5))],
        cache_hits: Some(1.0),
        series: &[
            (r#"ratelimit_service_rate_limit_over_limit{domain="domain",key1="five"}"#, 3.0),
            (r#"ratelimit_service_rate_limit_shadow_mode{domain="domain",key1="five"}"#, 0.0),
        ],
        ..CASE
    },
    Case {
        shows: "TestGetResponseStatusOverLimitWithLocalCacheShadowMode: OK, nothing left, counted over and shadow",
        config: LIMITER,
        domain: "domain",
        calls: &[
            (0, &["shadow=c+5"], OK, &[(OK, 0)]),
            (0, &["shadow=c+2"], OK, &[(OK, 0)]),
        ],
        series: &[
            (r#"ratelimit_service_rate_limit_over_limit{domain="domain",key1="shadow"}"#, 2.0),
            (r#"ratelimit_service_rate_limit_shadow_mode{domain="domain",key1="shadow"}"#, 2.0),
        ],
        ..CASE
    },
    Case {
        shows: "TestOverLimitWithLocalCacheShadowRule: a shadow limit over never denies, answered locally or not",
        config: LIMITER,
        domain: "domain",
        calls: &[
            (0, &["shadow=r+5"], OK, &[(OK, 0)]),
            (0, &["shadow=r"], OK, &[(OK, 0)]),
            (0, &["shadow=r"], OK, &[(OK, 0)]),
        ],
        cache_hits: Some(1.0),
        series: &[(r#"ratelimit_service_rate_limit_shadow_mode{domain="domain",key1="shadow"}"#, 2.0)],
        ..CASE
    },
    Case {
        shows: "TestOverLimitWithStopCacheKeyIncrementWhenOverlimitConfig (true): the denied request leaves key4 uncharged",
        config: LIMITER,
        domain: "domain",
        calls: &[
            (0, &["five=s+5"], OK, &[(OK, 0)]),
            (0, &["key4=value4", "five=s"], OVER, &[(OK, 15), (OVER, 0)]),
            (0, &["key4=value4+0"], OK, &[(OK, 15)]),
        ],
        ..CASE
    },
    Case {
        shows: "TestOverLimitWithStopCacheKeyIncrementWhenOverlimitConfig (false): every hit is charged, key4's too",
        config: LIMITER,
        domain: "domain",
        options: every_hit,
        calls: &[
            (0, &["five=s+5"], OK, &[(OK, 0)]),
            (0, &["key4=value4", "five=s"], OVER, &[(OK, 14), (OVER, 0)]),
            (0, &["key4=value4+0"], OK, &[(OK, 14)]),
        ],
        ..CASE
    },
    Case {
        shows: "TestNearLimit: 15 per hour, threshold 12: 10 -> 11 is not near, 11 -> 13 has 1, 13 -> 14 all; 14 used, 3 more: 2 over, 1 near",
        config: LIMITER,
        domain: "domain",
        calls: &[
            (0, &["key4=value4+10"], OK, &[(OK, 5)]),
            (0, &["key4=value4"], OK, &[(OK, 4)]),
            (0, &["key4=value4+2"], OK, &[(OK, 2)]),
            (0, &["key4=value4"], OK, &[(OK, 1)]),
            (0, &["key4=value4+3"], OVER, &[(OVER, 0)]),
        ],
        series_after: &[
            (1, r#"ratelimit_service_rate_limit_near_limit{domain="domain",key1="key4_value4"}"#, 0.0),
            (2, r#"ratelimit_service_rate_limit_near_limit{domain="domain",key1="key4_value4"}"#, 1.0),
            (3, r#"ratelimit_service_rate_limit_near_limit{domain="domain",key1="key4_value4"}"#, 2.0),
            (4, r#"ratelimit_service_rate_limit_near_limit{domain="domain",key1="key4_value4"}"#, 3.0),
        ],
        series: &[(r#"ratelimit_service_rate_limit_over_limit{domain="domain",key1="key4_value4"}"#, 2.0)],
        ..CASE
    },
    Case {
        shows: "TestGetResponseStatusBelowLimitShadowMode: within, nothing counted shadow",
        config: LIMITER,
        domain: "domain",
        calls: &[(0, &["shadow=b"], OK, &[(OK, 4)])],
        series: &[
            (r#"ratelimit_service_rate_limit_shadow_mode{domain="domain",key1="shadow"}"#, 0.0),
            (r#"ratelimit_service_rate_limit_within_limit{domain="domain",key1="shadow"}"#, 1.0),
        ],
        ..CASE
    },
];

/// Each algorithm on the manual clock, with short periods: the behaviour that tells them apart.
const ALGORITHMS: &str = include_str!("../fixtures/cases/rules/algorithms.yaml");

/// The algorithms' behaviour through the service, exactly on the manual clock (which starts
/// 0.123456 s into a second).
const ALGORITHM_CASES: &[Case] = &[
    Case {
        shows: "token bucket: a burst of 5, then refilled at 10 a second (3.5 tokens in 0.35 s)",
        config: ALGORITHMS,
        domain: "algo",
        calls: &[
            (0, &["token=v"], OK, &[(OK, 4)]),
            (0, &["token=v"], OK, &[(OK, 3)]),
            (0, &["token=v"], OK, &[(OK, 2)]),
            (0, &["token=v"], OK, &[(OK, 1)]),
            (0, &["token=v"], OK, &[(OK, 0)]),
            (0, &["token=v"], OVER, &[(OVER, 0)]),
            (350, &["token=v"], OK, &[(OK, 2)]),
            (0, &["token=v"], OK, &[(OK, 1)]),
            (0, &["token=v"], OK, &[(OK, 0)]),
            (0, &["token=v"], OVER, &[(OVER, 0)]),
        ],
        // The next token comes in 0.1 s: rounded up to a whole second.
        resets: &[(5, 0, 1)],
        ..CASE
    },
    Case {
        shows: "leaky bucket: 5 a second paces one request every 0.2 s",
        config: ALGORITHMS,
        domain: "algo",
        calls: &[
            (0, &["leaky=v"], OK, &[(OK, 0)]),
            (0, &["leaky=v"], OVER, &[(OVER, 0)]),
            (250, &["leaky=v"], OK, &[(OK, 0)]),
            (0, &["leaky=v"], OVER, &[(OVER, 0)]),
        ],
        ..CASE
    },
    Case {
        shows: "sliding windows reject across a fixed window's boundary; the counter weighs the last window by its overlap",
        config: ALGORITHMS,
        domain: "algo",
        calls: &[
            // 0.70 into a second: 4 each.
            (577, &["fixed=v+4", "log=v+4", "counter=v+4"], OK, &[(OK, 0), (OK, 0), (OK, 0)]),
            // 0.10 into the next: a fresh fixed window; the sliding ones still see the four
            // (the counter 4 x 0.9 + 1 = 4.6 > 4).
            (400, &["fixed=v"], OK, &[(OK, 3)]),
            (0, &["log=v"], OVER, &[(OVER, 0)]),
            (0, &["counter=v"], OVER, &[(OVER, 0)]),
            // Half-way: the counter weighs 4 x 0.45 = 1.8, so 2 more fit, not 3; the log frees
            // all at 1.70.
            (450, &["counter=v"], OK, &[(OK, ANY)]),
            (0, &["counter=v"], OK, &[(OK, ANY)]),
            (0, &["counter=v"], OVER, &[(OVER, 0)]),
            (0, &["log=v"], OVER, &[(OVER, 0)]),
            (400, &["log=v"], OK, &[(OK, 3)]),
        ],
        ..CASE
    },
];

/// The reference's integration config's second file (`another`).
const ANOTHER: &str = include_str!("../fixtures/cases/reference_cases_integration/another.yaml");

/// `test/config/config_test.go`'s cases that decide, a row per test.
const CONFIG_CASES: &[Case] = &[
    Case {
        shows: "TestShadowModeConfig: a shadow-mode limit over answers OK and counts shadow_mode",
        config: include_str!("../fixtures/cases/rules/shadow_mode_config.yaml"),
        domain: "test-domain",
        calls: &[
            (0, &["key1=value1,subkey1=x+6"], OVER, &[(OVER, 0)]),
            (0, &["key1=value1,subkey1=subvalue1+11"], OK, &[(OK, 0)]),
            (0, &["key2=any+21"], OK, &[(OK, 0)]),
            (0, &["key2=value2+31"], OVER, &[(OVER, 0)]),
        ],
        // The reference's split: of 11 hits on an unused limit of 10, the one past it is over
        // (and shadow), the two between 8 and 10 near; 20 x 0.8 = 16: the 4 hits from 17 to 20.
        series: &[
            (r#"ratelimit_service_rate_limit_shadow_mode{domain="test-domain",key1="key1_value1",key2="subkey1"}"#, 0.0),
            (r#"ratelimit_service_rate_limit_shadow_mode{domain="test-domain",key1="key1_value1",key2="subkey1_subvalue1"}"#, 1.0),
            (r#"ratelimit_service_rate_limit_shadow_mode{domain="test-domain",key1="key2"}"#, 1.0),
            (r#"ratelimit_service_rate_limit_near_limit{domain="test-domain",key1="key2"}"#, 4.0),
            (r#"ratelimit_service_rate_limit_shadow_mode{domain="test-domain",key1="key2_value2"}"#, 0.0),
        ],
        ..CASE
    },
    Case {
        shows: "TestConfigLimitOverride: the client's limit wins over the configured one and needs none; counted under the descriptor's keys",
        config: BASIC,
        domain: "test-domain",
        calls: &[
            (0, &["key1=value1,subkey1=something@42/hour"], OK, &[(OK, 41)]),
            (0, &["nowhere=x@7/day"], OK, &[(OK, 6)]),
        ],
        limits: &[(0, 0, Some(42)), (1, 0, Some(7))],
        // sluice leaves the values out: one series per value is the reference's metric leak.
        series: &[(r#"ratelimit_service_rate_limit_total_hits{domain="test-domain",key1="nowhere"}"#, 1.0)],
        ..CASE
    },
    Case {
        shows: "TestConfigLimitOverride: an override counts on its own window, ending with the day's and the hour's",
        config: include_str!("../fixtures/cases/rules/five_a_second.yaml"),
        domain: "o",
        // The clock starts 80,000.123456 s into a day, 800.123456 s into an hour.
        calls: &[
            (0, &["k=v"], OK, &[(OK, 4)]),
            (0, &["k=v"], OK, &[(OK, 3)]),
            (0, &["k=v@10/day"], OK, &[(OK, 9)]),
            (0, &["k=v@42/hour"], OK, &[(OK, 41)]),
        ],
        resets: &[(2, 0, 6400), (3, 0, 2800)],
        ..CASE
    },
    Case {
        shows: "TestShareThreshold: one counter for every value of a shared wildcard",
        config: include_str!("../fixtures/cases/rules/share_threshold.yaml"),
        domain: "d",
        calls: &[
            (0, &["files=files/a.pdf"], OK, &[(OK, 2)]),
            (0, &["files=files/b.csv"], OK, &[(OK, 1)]),
            (0, &["files=files/c.txt"], OK, &[(OK, 0)]),
            (0, &["files=files/d.doc"], OVER, &[(OVER, 0)]),
            (0, &["path=/api/v1/users"], OK, &[(OK, 1)]),
            (0, &["path=/api/v2/users"], OK, &[(OK, 0)]),
            (0, &["path=/api/v3/users"], OVER, &[(OVER, 0)]),
        ],
        series: &[(r#"ratelimit_service_rate_limit_total_hits{domain="d",key1="files_files/*"}"#, 4.0)],
        ..CASE
    },
    Case {
        shows: "TestWildcardStatsBehavior: without share_threshold each value counts apart, stats under the pattern; with it, one counter",
        config: include_str!("../fixtures/cases/rules/wildcard_stats_behavior.yaml"),
        domain: "d",
        calls: &[
            (0, &["plain=foo1"], OK, &[(OK, 9)]),
            (0, &["plain=foo2"], OK, &[(OK, 9)]),
            (0, &["shared=foo1"], OK, &[(OK, 9)]),
            (0, &["shared=foo2"], OK, &[(OK, 8)]),
            (0, &["plain=foo1"], OK, &[(OK, 8)]),
            (0, &["shared=foo9"], OK, &[(OK, 7)]),
        ],
        limits: &[(0, 0, Some(10))],
        series: &[
            (r#"ratelimit_service_rate_limit_total_hits{domain="d",key1="plain_foo*"}"#, 3.0),
            (r#"ratelimit_service_rate_limit_total_hits{domain="d",key1="shared_foo*"}"#, 3.0),
        ],
        ..CASE
    },
];

/// Shaped like the reference's `basic_config.yaml`: nested keys, defaults and specific
/// values, a value with no limit, names, unlimited, detailed_metric.
const BASIC: &str = include_str!("../fixtures/cases/rules/basic.yaml");

/// sluice's own rules of a request.
const RULE_CASES: &[Case] = &[
    Case {
        shows: "all-or-nothing: a denied request charges none of its descriptors",
        config: RULES,
        domain: "rules",
        calls: &[
            (0, &["five=a", "one=a"], OK, &[(OK, 4), (OK, 0)]),
            (0, &["five=a", "one=a"], OVER, &[(OK, 4), (OVER, 0)]),
            (0, &["five=a", "one=a"], OVER, &[(OK, 4), (OVER, 0)]),
            // Only the first request was charged to `five`.
            (0, &["five=a"], OK, &[(OK, 3)]),
        ],
        ..CASE
    },
    Case {
        shows: "the reference's counting: every hit is charged, the admitting descriptor of a denied request too",
        config: RULES,
        domain: "rules",
        options: every_hit,
        calls: &[
            (0, &["five=a", "one=a"], OK, &[(OK, 4), (OK, 0)]),
            (0, &["five=a", "one=a"], OVER, &[(OK, 3), (OVER, 0)]),
            (0, &["five=a"], OK, &[(OK, 2)]),
        ],
        series: &[(r#"ratelimit_service_rate_limit_total_hits{domain="rules",key1="one"}"#, 2.0)],
        ..CASE
    },
    Case {
        shows: "several limits of one descriptor: all must admit, a denied one charges none, and the binding one reports",
        config: RULES,
        domain: "rules",
        calls: &[
            (0, &["both=b"], OK, &[(OK, 1)]),
            (0, &["both=b"], OK, &[(OK, 0)]),
            (0, &["both=b"], OVER, &[(OVER, 0)]),
            // A second later the per-second limit has room; the hourly one has 1 left.
            (1000, &["both=b"], OK, &[(OK, 0)]),
            (1000, &["both=b"], OVER, &[(OVER, 0)]),
        ],
        ..CASE
    },
    Case {
        shows: "debt: a cost that does not fit is charged all the same, and the limit denies until repaid",
        config: RULES,
        domain: "rules",
        calls: &[
            (0, &["metered=m+8"], OK, &[(OK, 2)]),
            (0, &["metered=m+5"], OVER, &[(OVER, 0)]),
            // 3 in debt, refilled at 1 every 6 minutes: 12 minutes on, 1 is still owed, and the
            // denied hit is charged too (2 owed); 18 minutes later a hit of 1 fits.
            (12 * 60_000, &["metered=m"], OVER, &[(OVER, 0)]),
            (18 * 60_000, &["metered=m"], OK, &[(OK, 0)]),
        ],
        ..CASE
    },
    Case {
        shows: "a sliding log on the manual clock: 2 a second, exactly",
        config: RULES,
        domain: "rules",
        calls: &[
            (0, &["paced=p"], OK, &[(OK, 1)]),
            (500, &["paced=p"], OK, &[(OK, 0)]),
            (499, &["paced=p"], OVER, &[(OVER, 0)]),
            (1, &["paced=p"], OK, &[(OK, 0)]),
        ],
        ..CASE
    },
    Case {
        shows: "the local cache counts only the hits it answered: a request it could partly answer goes to the store whole",
        config: RULES,
        domain: "rules",
        calls: &[
            (0, &["one=h"], OK, &[(OK, 0)]),
            (0, &["one=h"], OVER, &[(OVER, 0)]),
            (0, &["one=h"], OVER, &[(OVER, 0)]),
            (0, &["one=h", "five=h"], OVER, &[(OVER, 0), (OK, 5)]),
        ],
        cache_hits: Some(1.0),
        ..CASE
    },
];

/// A metric label case: what it replays, its config and domain, the requests it sends (one
/// descriptor each, `k=v,k2=v2`), then the total hits each series must have counted, and how
/// many `total_hits` series there are in all.
struct LabelCase {
    replays: &'static str,
    config: &'static str,
    domain: &'static str,
    requests: &'static [&'static str],
    totals: &'static [(&'static str, f64)],
    series: usize,
}

const TREE: &str = include_str!("../fixtures/cases/rules/value_to_metric_tree.yaml");

/// `test/config/config_test.go`'s stats key cases, a row per test.
const LABEL_CASES: &[LabelCase] = &[
    LabelCase {
        replays: "TestDetailedMetric: the runtime values name the series; IPv4 dots, `:` and `|` become `_`",
        config: include_str!("../fixtures/cases/rules/detailed_metric.yaml"),
        domain: "d",
        requests: &[
            "key1=value1,subkey1=a",
            "key1=value1,subkey1=b",
            "key2=x",
            "remote_address=10.0.0.1",
            "remote_address=a:b|c",
        ],
        totals: &[
            (r#"{domain="d",key1="key1_value1",key2="subkey1_a"}"#, 1.0),
            (r#"{domain="d",key1="key1_value1",key2="subkey1_b"}"#, 1.0),
            (r#"{domain="d",key1="key2_x"}"#, 1.0),
            (r#"{domain="d",key1="remote_address_10_0_0_1"}"#, 1.0),
            (r#"{domain="d",key1="remote_address_a_b_c"}"#, 1.0),
        ],
        series: 5,
    },
    LabelCase {
        replays: "TestBasicConfig: the path, with detailed_metric the request's value",
        config: BASIC,
        domain: "test-domain",
        requests: &[
            "key1=value1,subkey1=subvalue1",
            "key7=unspecified_value",
            "key7=another_value",
        ],
        totals: &[
            (r#"{domain="test-domain",key1="key1_value1",key2="subkey1_subvalue1"}"#, 1.0),
            (r#"{domain="test-domain",key1="key7_unspecified_value"}"#, 1.0),
            (r#"{domain="test-domain",key1="key7_another_value"}"#, 1.0),
        ],
        series: 3,
    },
    LabelCase {
        replays: "TestValueToMetric_UsesRuntimeValuesInStats (and FullKeyMatchesStatsKey: one series, the path the limit was found by)",
        config: TREE,
        domain: "domain",
        requests: &["route=draw,http_method=GET,subject_id=123"],
        totals: &[(r#"{domain="domain",key1="route_draw",key2="http_method_GET"}"#, 1.0)],
        series: 1,
    },
    LabelCase {
        replays: "TestValueToMetric_DefaultKeyIncludesValueAtThatLevel, _MidLevelOnly, _NoFlagUnchanged",
        config: include_str!("../fixtures/cases/rules/value_to_metric_levels.yaml"),
        domain: "domain",
        requests: &["k1=A,k2=foo", "m1=X,m2=Y,m3=Z", "n1=X,n2=Y"],
        totals: &[
            (r#"{domain="domain",key1="k1_A",key2="k2"}"#, 1.0),
            (r#"{domain="domain",key1="m1",key2="m2_Y"}"#, 1.0),
            (r#"{domain="domain",key1="n1",key2="n2"}"#, 1.0),
        ],
        series: 3,
    },
    LabelCase {
        replays: "TestValueToMetric_DoesNotOverrideDetailedMetric: the detailed key is the one counted",
        config: include_str!("../fixtures/cases/rules/value_to_metric_tree_detailed.yaml"),
        domain: "domain",
        requests: &["route=draw,http_method=GET,subject_id=123"],
        totals: &[(r#"{domain="domain",key1="route_draw",key2="http_method_GET"}"#, 1.0)],
        series: 1,
    },
    LabelCase {
        replays: "TestValueToMetric_WithConfiguredValues: a configured value and a runtime one",
        config: include_str!("../fixtures/cases/rules/value_to_metric_with_configured_values.yaml"),
        domain: "domain",
        requests: &[
            "route=api,http_method=GET,subject_id=user123",
            "route=api,http_method=POST,subject_id=user456",
        ],
        totals: &[
            (r#"{domain="domain",key1="route_api",key2="http_method_GET"}"#, 1.0),
            (r#"{domain="domain",key1="route_api",key2="http_method_POST"}"#, 1.0),
        ],
        series: 2,
    },
    LabelCase {
        replays: "TestValueToMetric_WithWildcard: the runtime value, not the pattern",
        config: include_str!("../fixtures/cases/rules/value_to_metric_with_wildcard.yaml"),
        domain: "domain",
        requests: &[
            "user=alice,action=readfile,resource=documents",
            "user=bob,action=readdata,resource=database",
        ],
        totals: &[
            (r#"{domain="domain",key1="user_alice",key2="action_readfile"}"#, 1.0),
            (r#"{domain="domain",key1="user_bob",key2="action_readdata"}"#, 1.0),
        ],
        series: 2,
    },
    LabelCase {
        replays: "TestValueToMetric_WithEmptyValue: an empty value leaves the key alone",
        config: TREE,
        domain: "domain",
        requests: &["route=,http_method=GET,subject_id=123", "route=draw,http_method=,subject_id=123"],
        totals: &[
            (r#"{domain="domain",key1="route",key2="http_method_GET"}"#, 1.0),
            (r#"{domain="domain",key1="route_draw",key2="http_method"}"#, 1.0),
        ],
        series: 2,
    },
];

/// Runs `case` on `on`: its requests, then its series.
async fn run_labels(case: &LabelCase, on: &InProcess) {
    for request in case.requests {
        on.ask(case.domain, &[request]).await;
    }
    const TOTAL: &str = "ratelimit_service_rate_limit_total_hits";
    for (labels, value) in case.totals {
        let series = format!("{TOTAL}{labels}");
        assert_eq!(
            on.series(&series),
            *value,
            "{} on {}: {series}",
            case.replays,
            on.store
        );
    }
    let text = on.metrics.render();
    let series = text
        .lines()
        .filter(|l| l.starts_with(&format!("{TOTAL}{{")))
        .count();
    assert_eq!(
        series, case.series,
        "{} on {}: {text}",
        case.replays, on.store
    );
}

#[test]
fn the_reference_metric_label_cases_on_every_store() {
    let redis = RedisServer::start(&[]);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        for case in LABEL_CASES {
            for on in every_store(&redis.url(), case.config, &LimiterOptions::default()).await {
                run_labels(case, &on).await;
            }
        }
    });
}

/// A matching case: what it replays, its config and domain, then each descriptor (`k=v,...`)
/// with the limit it falls under: requests_per_unit, unit and name, or none. Asked with a
/// hit of 0, which charges nothing.
struct MatchCase {
    replays: &'static str,
    config: &'static str,
    domain: &'static str,
    matches: &'static [(&'static str, Option<Matched>)],
}

/// A limit a descriptor falls under: requests_per_unit, unit and name.
type Matched = (u32, &'static str, &'static str);

/// `test/config/config_test.go`'s matching cases, a row per test.
const MATCH_CASES: &[MatchCase] = &[
    MatchCase {
        replays: "TestBasicConfig: nested keys, defaults and specific values, names, unlimited",
        config: include_str!("../fixtures/cases/rules/basic.yaml"),
        domain: "test-domain",
        matches: &[
            ("key1=something", None),
            ("key1=value1", None),
            ("key2=value2,subkey=subvalue", None),
            ("key5=value5,subkey5=subvalue", None),
            ("key1=value1,subkey1=something", Some((5, "second", ""))),
            ("key1=value1,subkey1=subvalue1", Some((10, "second", ""))),
            ("key2=something", Some((20, "minute", ""))),
            ("key2=value2", Some((30, "minute", ""))),
            // A value without a limit whitelists it.
            ("key2=value3", None),
            ("key3=foo", Some((1, "hour", ""))),
            ("key4=foo", Some((1, "day", "key4_rate_limit"))),
            // Unlimited: no limit (and remaining u32::MAX, in `UNLIMITED` below).
            ("key6=foo", None),
            ("key7=unspecified_value", Some((70, "minute", ""))),
            // TestConfigLimitOverride: the request's limit, with its unit.
            (
                "key1=value1,subkey1=something@42/hour",
                Some((42, "hour", "")),
            ),
            ("nowhere=x@7/day", Some((7, "day", ""))),
        ],
    },
    MatchCase {
        replays: "TestWildcardConfig: an exact value wins; `*` matches nothing too, in any place",
        config: include_str!("../fixtures/cases/rules/wildcard.yaml"),
        domain: "test-domain",
        matches: &[
            ("wild=foo1", Some((10, "minute", ""))),
            ("wild=foo2", Some((20, "minute", ""))),
            ("wild=foo", Some((20, "minute", ""))),
            ("wild=bar", None),
            ("nestedWild=val1,wild=goo2", Some((30, "minute", ""))),
            ("nestedWild=val1,wild=foo2", None),
            ("middle=path/x/y/end", Some((40, "minute", ""))),
            ("middle=path/x/y/ends", None),
            ("several=a1b2c", Some((50, "minute", ""))),
            ("several=abc", Some((50, "minute", ""))),
            ("several=acb", None),
        ],
    },
    MatchCase {
        replays: "Overlapping wildcard values of every shape: the first in file order wins",
        config: include_str!("../fixtures/cases/rules/overlapping_wildcards.yaml"),
        domain: "test-domain",
        matches: &[
            ("tenant=team-a-prod", Some((7, "minute", ""))),
            ("tenant=team-b-prod", Some((1, "minute", ""))),
            ("tenant=ax-prod", Some((1, "minute", ""))),
            ("tenant=team-a", Some((2, "minute", ""))),
            ("tenant=team-x", Some((2, "minute", ""))),
            ("tenant=xyz", Some((4, "minute", ""))),
            ("tenant=tod", Some((5, "minute", ""))),
            ("tenant=q", Some((6, "minute", ""))),
        ],
    },
];

#[test]
fn the_reference_matching_cases_on_every_store() {
    let redis = RedisServer::start(&[]);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        for case in MATCH_CASES {
            for on in every_store(&redis.url(), case.config, &LimiterOptions::default()).await {
                for (descriptor, expected) in case.matches {
                    let asked = format!("{descriptor}+0");
                    let response = on.ask(case.domain, &[&asked]).await;
                    let got = response.statuses[0].current_limit.as_ref().map(|l| {
                        let unit = Unit::from_proto_number(l.unit).map_or("?", Unit::as_str);
                        (l.requests_per_unit, unit, l.name.as_str())
                    });
                    let place = format!("{} on {}: {descriptor}", case.replays, on.store);
                    assert_eq!(got, *expected, "{place}");
                }
                // Another domain has none of it.
                let other = on.ask("foo_domain", &["key1=value1+0"]).await;
                assert_eq!(other.statuses[0].current_limit, None, "{}", case.replays);
            }
        }
    });
}

/// Runs `case` on `on`; panics naming the case, the store and the call.
async fn run(case: &Case, on: &InProcess) {
    for (index, (after_ms, descriptors, overall, statuses)) in case.calls.iter().enumerate() {
        on.clock.advance(after_ms * 1000);
        let response = on.ask(case.domain, descriptors).await;
        let got: Vec<(Code, i64)> = response
            .statuses
            .iter()
            .zip(statuses.iter())
            .map(|(status, &(_, remaining))| {
                let got = i64::from(status.limit_remaining);
                (status.code(), if remaining == ANY { ANY } else { got })
            })
            .collect();
        let place = format!(
            "{} on {}, call {index} {descriptors:?}",
            case.shows, on.store
        );
        assert_eq!(response.overall_code(), *overall, "{place}");
        assert_eq!(got, *statuses, "{place}");
        for &(_, status, limit) in case.limits.iter().filter(|(call, ..)| *call == index) {
            let got = response.statuses[status].current_limit.as_ref();
            let got = got.map(|l| l.requests_per_unit);
            assert_eq!(got, limit, "{place}: the current limit of status {status}");
        }
        for &(_, name, value) in case.headers.iter().filter(|(call, ..)| *call == index) {
            let added = &response.response_headers_to_add;
            if name == "*" {
                assert!(added.is_empty(), "{place}: headers {added:?}");
                continue;
            }
            let got = added
                .iter()
                .find(|h| h.key == name)
                .map(|h| h.value.as_str());
            assert_eq!(got, value, "{place}: header {name}");
        }
        for &(_, series, value) in case.series_after.iter().filter(|(call, ..)| *call == index) {
            assert_eq!(on.series(series), value, "{place}: {series}");
        }
        for &(_, status, seconds) in case.resets.iter().filter(|(call, ..)| *call == index) {
            let got = response.statuses[status]
                .duration_until_reset
                .map(|d| d.seconds);
            assert_eq!(got, Some(seconds), "{place}: the reset of status {status}");
        }
    }
    for (series, value) in case.series {
        let place = format!("{} on {}: {series}", case.shows, on.store);
        assert_eq!(on.series(series), *value, "{place}");
    }
    if let (true, Some(hits)) = (on.cached, case.cache_hits) {
        let answered = on.series("sluice_local_cache_hits_total");
        assert_eq!(
            answered, hits,
            "{}: hits the local cache answered",
            case.shows
        );
    }
}

/// Every row of `cases` on every store.
pub(crate) fn run_all(cases: &[Case]) {
    let redis = RedisServer::start(&[]);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        for case in cases {
            for on in every_store(&redis.url(), case.config, &(case.options)()).await {
                run(case, &on).await;
            }
        }
    });
}

#[test]
fn the_reference_service_cases_on_every_store() {
    run_all(SERVICE_CASES);
}

#[test]
fn the_reference_config_cases_on_every_store() {
    run_all(CONFIG_CASES);
}

#[test]
fn the_reference_limiter_cases_on_every_store() {
    run_all(LIMITER_CASES);
}

#[test]
fn each_algorithm_on_the_manual_clock_on_every_store() {
    run_all(ALGORITHM_CASES);
}

#[test]
fn the_rules_of_a_request_on_every_store() {
    run_all(RULE_CASES);
}
