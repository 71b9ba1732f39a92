//! Kuadrant's protocol (docs/kuadrant.md) on the gRPC port, through Envoy's own messages and
//! Limitador's Reserve and Commit messages declared here from Limitador's field numbers:
//! `CheckRateLimit` charges nothing, `Report` is never denied (hits_addend 0 counts 1), an
//! empty domain is UNKNOWN; the wasm-shim's sequences (a token limit checked then reported,
//! Reserve at the request and Commit at stream end, with 64 clients on one budget); and
//! reservations off answer UNIMPLEMENTED. On the memory store and on Redis, in-process, and
//! a check across the slots of a Redis Cluster.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tonic::transport::Channel;

use crate::support::redis::RedisServer;
use crate::support::*;

mod http_api;
mod leased;

const CONFIG: &str = "\
domain: ns
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: tokens
    rate_limit: {unit: hour, requests_per_unit: 1000}
";

/// Limitador's `ReserveRequest`, from its field numbers.
#[derive(Clone, PartialEq, prost::Message)]
struct ReserveRequest {
    #[prost(string, tag = "1")]
    domain: String,
    #[prost(message, repeated, tag = "2")]
    descriptors:
        Vec<envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor>,
    #[prost(uint64, tag = "3")]
    amount: u64,
    #[prost(message, optional, tag = "4")]
    ttl: Option<envoy_types::pb::google::protobuf::Duration>,
}

/// Limitador's `ReserveResponse`.
#[derive(Clone, PartialEq, prost::Message)]
struct ReserveResponse {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    reservation_id: String,
}

/// Limitador's `CommitRequest`.
#[derive(Clone, PartialEq, prost::Message)]
struct CommitRequest {
    #[prost(string, tag = "1")]
    domain: String,
    #[prost(message, repeated, tag = "2")]
    descriptors:
        Vec<envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor>,
    #[prost(string, tag = "3")]
    reservation_id: String,
    #[prost(uint64, tag = "4")]
    actual_amount: u64,
}

/// Limitador's `CommitResponse`.
#[derive(Clone, PartialEq, prost::Message)]
struct CommitResponse {
    #[prost(bool, tag = "1")]
    reservation_released: bool,
}

/// A client of `kuadrant.service.ratelimit.v1.RateLimitService`.
struct Kuadrant(tonic::client::Grpc<Channel>);

impl Kuadrant {
    async fn connect(sluice: &Sluice) -> Kuadrant {
        Kuadrant(tonic::client::Grpc::new(sluice.channel().await))
    }

    async fn unary<Q, R>(&mut self, method: &str, message: Q) -> Result<R, tonic::Status>
    where
        Q: prost::Message + Send + Sync + 'static,
        R: prost::Message + Default + Send + Sync + 'static,
    {
        self.0.ready().await.expect("the channel is ready");
        let path = format!("/kuadrant.service.ratelimit.v1.RateLimitService/{method}");
        let path = tonic::codegen::http::uri::PathAndQuery::try_from(path).expect("a path");
        let codec = tonic_prost::ProstCodec::<Q, R>::default();
        self.0
            .unary(tonic::Request::new(message), path, codec)
            .await
            .map(tonic::Response::into_inner)
    }

    async fn check(&mut self, request: RateLimitRequest) -> RateLimitResponse {
        self.unary("CheckRateLimit", request)
            .await
            .expect("checked")
    }

    async fn report(&mut self, request: RateLimitRequest) -> RateLimitResponse {
        self.unary("Report", request).await.expect("reported")
    }

    async fn reserve(&mut self, descriptor: (&str, &str), amount: u64) -> ReserveResponse {
        self.reserve_in("ns", descriptor_of(descriptor), amount)
            .await
    }

    async fn reserve_in(
        &mut self,
        domain: &str,
        descriptor: envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor,
        amount: u64,
    ) -> ReserveResponse {
        let request = ReserveRequest {
            domain: domain.into(),
            descriptors: vec![descriptor],
            amount,
            ttl: None,
        };
        self.unary("Reserve", request).await.expect("reserved")
    }

    async fn commit(&mut self, descriptor: (&str, &str), id: &str, actual: u64) -> bool {
        let request = CommitRequest {
            domain: "ns".into(),
            descriptors: vec![descriptor_of(descriptor)],
            reservation_id: id.into(),
            actual_amount: actual,
        };
        let response: CommitResponse = self.unary("Commit", request).await.expect("committed");
        response.reservation_released
    }
}

fn descriptor_of(
    (key, value): (&str, &str),
) -> envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor {
    descriptor(&[(key, value)])
}

/// A request in `ns` of one descriptor, of `hits_addend`.
fn asked(entry: (&str, &str), hits_addend: u32) -> RateLimitRequest {
    RateLimitRequest {
        hits_addend,
        ..request("ns", vec![descriptor_of(entry)])
    }
}

/// The memory store and a Redis, each serving `CONFIG` in this process with `args`.
fn every_server(redis: &RedisServer, args: &[&str]) -> Vec<(&'static str, Sluice)> {
    serving(redis, &[("config.yaml", CONFIG)], args)
}

/// The memory store and a Redis, each serving `files` in this process with `args`.
fn serving(
    redis: &RedisServer,
    files: &[(&str, &str)],
    args: &[&str],
) -> Vec<(&'static str, Sluice)> {
    vec![
        ("memory", Sluice::start_with(files, args, &[])),
        (
            "redis",
            Sluice::on_redis_url(files, &redis.url(), args, &[]),
        ),
    ]
}

#[tokio::test]
async fn a_check_charges_nothing_and_a_report_is_never_denied() {
    let redis = RedisServer::start(&[]);
    for (store, sluice) in every_server(&redis, &[]) {
        let mut kuadrant = Kuadrant::connect(&sluice).await;
        let user = ("user", "u1");
        for _ in 0..5 {
            let checked = kuadrant.check(asked(user, 7)).await;
            assert_eq!(checked.overall_code, Code::Ok as i32, "{store}");
            assert!(checked.statuses.is_empty(), "{store}: Limitador's answer");
        }
        // hits_addend 0 counts 1: two of three used, and the checks charged nothing.
        for hits in [0, 1] {
            let reported = kuadrant.report(asked(user, hits)).await;
            assert_eq!(reported.overall_code, Code::Ok as i32, "{store}: {hits}");
        }
        let checked = kuadrant.check(asked(user, 0)).await;
        assert_eq!(checked.overall_code, Code::Ok as i32, "{store}: 2 of 3");
        // A report past the limit is still OK; then a check is over.
        let reported = kuadrant.report(asked(user, 5)).await;
        assert_eq!(reported.overall_code, Code::Ok as i32, "{store}");
        let checked = kuadrant.check(asked(user, 0)).await;
        assert_eq!(checked.overall_code, Code::OverLimit as i32, "{store}");
        // A check reads one hit whatever hits_addend says: 2 of 3 used, one more fits.
        let other = ("user", "u2");
        kuadrant.report(asked(other, 2)).await;
        let checked = kuadrant.check(asked(other, 50)).await;
        assert_eq!(checked.overall_code, Code::Ok as i32, "{store}");
        kuadrant.report(asked(other, 1)).await;
        let checked = kuadrant.check(asked(other, 0)).await;
        assert_eq!(checked.overall_code, Code::OverLimit as i32, "{store}");
        // A namespace no limit of which applies.
        let unmatched = kuadrant.check(asked(("path", "/"), 1)).await;
        assert_eq!(unmatched.overall_code, Code::Ok as i32, "{store}");
        // An empty domain is UNKNOWN, as Limitador answers it.
        for empty in [
            kuadrant.check(RateLimitRequest::default()).await,
            kuadrant.report(RateLimitRequest::default()).await,
        ] {
            assert_eq!(empty.overall_code, Code::Unknown as i32, "{store}");
            assert!(empty.statuses.is_empty());
        }
    }
}

#[tokio::test]
async fn the_wasm_shims_token_sequence_checks_then_reports_the_tokens_used() {
    let redis = RedisServer::start(&[]);
    for (store, sluice) in every_server(&redis, &[]) {
        let mut kuadrant = Kuadrant::connect(&sluice).await;
        let key = ("tokens", "k1");
        let mut admitted = 0;
        // Each request is checked at its start and reports 300 tokens at its end.
        for _ in 0..6 {
            let checked = kuadrant.check(asked(key, 0)).await;
            if checked.overall_code != Code::Ok as i32 {
                break;
            }
            admitted += 1;
            kuadrant.report(asked(key, 300)).await;
        }
        // 0, 300, 600, 900 tokens used at the checks: four admitted, then 1,200 is over.
        assert_eq!(admitted, 4, "{store}");
    }
}

#[tokio::test]
async fn reserve_holds_a_share_and_commit_charges_the_actual() {
    let redis = RedisServer::start(&[]);
    for (store, sluice) in every_server(&redis, &[]) {
        let mut kuadrant = Kuadrant::connect(&sluice).await;
        let key = ("tokens", "r1");
        // Each asks 800 and holds Limitador's default share of the limit: 500 of 1,000.
        let first = kuadrant.reserve(key, 800).await;
        assert_eq!(first.code, Code::Ok as i32, "{store}");
        assert_eq!(first.reservation_id.len(), 16, "{store}: {first:?}");
        let second = kuadrant.reserve(key, 800).await;
        assert_eq!(second.code, Code::Ok as i32, "{store}");
        let third = kuadrant.reserve(key, 1).await;
        assert_eq!(third.code, Code::OverLimit as i32, "{store}: 1,000 held");
        assert_eq!(third.reservation_id, "", "{store}");
        let fits = async |kuadrant: &mut Kuadrant, amount: u64| {
            let reserved = kuadrant.reserve(key, amount).await;
            (reserved.code == Code::Ok as i32).then_some(reserved.reservation_id)
        };
        // 120 used, 500 held: 380 more fits, 381 does not.
        assert!(
            kuadrant.commit(key, &first.reservation_id, 120).await,
            "{store}"
        );
        assert!(fits(&mut kuadrant, 381).await.is_none(), "{store}");
        let fourth = fits(&mut kuadrant, 380).await.expect("380 fits");
        assert!(
            kuadrant.commit(key, &fourth, 0).await,
            "{store}: 0 charges nothing"
        );
        // A second commit of an id releases nothing and charges nothing more.
        assert!(!kuadrant.commit(key, &first.reservation_id, 120).await);
        let fifth = fits(&mut kuadrant, 380).await.expect("still 380");
        assert!(kuadrant.commit(key, &fifth, 0).await);
        // An unknown id, or none, degrades to a report of the actual: 30, then 50 more used.
        assert!(!kuadrant.commit(key, "not-a-reservation", 30).await);
        assert!(fits(&mut kuadrant, 351).await.is_none(), "{store}");
        assert!(!kuadrant.commit(key, "", 50).await);
        assert!(fits(&mut kuadrant, 301).await.is_none(), "{store}");
        let sixth = fits(&mut kuadrant, 300).await.expect("300 fits");
        // A check does not count holds (as Limitador's): 200 used of 1,000.
        let checked = kuadrant.check(asked(key, 0)).await;
        assert_eq!(checked.overall_code, Code::Ok as i32, "{store}");
        assert!(kuadrant.commit(key, &sixth, 800).await, "{store}");
        let checked = kuadrant.check(asked(key, 0)).await;
        assert_eq!(checked.overall_code, Code::OverLimit as i32, "{store}");
        assert!(
            kuadrant.commit(key, &second.reservation_id, 0).await,
            "{store}"
        );
    }
}

#[tokio::test]
async fn reservations_off_answer_unimplemented() {
    let sluice = Sluice::start(CONFIG, &["--disable-reservations"]);
    let mut kuadrant = Kuadrant::connect(&sluice).await;
    let request = ReserveRequest {
        domain: "ns".into(),
        descriptors: vec![descriptor_of(("tokens", "k"))],
        amount: 10,
        ttl: None,
    };
    let refused = kuadrant
        .unary::<_, ReserveResponse>("Reserve", request)
        .await
        .expect_err("refused");
    assert_eq!(refused.code(), tonic::Code::Unimplemented);
    // The rest of the protocol is served.
    let checked = kuadrant.check(asked(("tokens", "k"), 0)).await;
    assert_eq!(checked.overall_code, Code::Ok as i32);
}

/// 64 clients, 8 requests each, reserve 50 of a budget of 1,000 and commit 50 a few
/// milliseconds later: never more than the budget admitted, on both stores.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_clients_never_hold_and_use_more_than_the_budget() {
    let redis = RedisServer::start(&[]);
    for (store, sluice) in every_server(&redis, &[]) {
        let sluice = Arc::new(sluice);
        let admitted = Arc::new(AtomicU64::new(0));
        let mut clients = Vec::new();
        for client in 0..64u64 {
            let (sluice, admitted) = (sluice.clone(), admitted.clone());
            clients.push(tokio::spawn(async move {
                let mut kuadrant = Kuadrant::connect(&sluice).await;
                let key = ("tokens", "race");
                for request in 0..8u64 {
                    let reserved = kuadrant.reserve(key, 50).await;
                    if reserved.code != Code::Ok as i32 {
                        continue;
                    }
                    admitted.fetch_add(1, Ordering::SeqCst);
                    let pause = (client * 7 + request * 3) % 4 + 1;
                    tokio::time::sleep(std::time::Duration::from_millis(pause)).await;
                    kuadrant.commit(key, &reserved.reservation_id, 50).await;
                }
            }));
        }
        for client in clients {
            client.await.expect("a client ran");
        }
        // Each admission needs used + held + 50 to fit 1,000, and each commit turns 50 held
        // into 50 used: exactly 20 are admitted, and the budget is spent to the token.
        assert_eq!(admitted.load(Ordering::SeqCst), 20, "{store}");
        let mut kuadrant = Kuadrant::connect(&sluice).await;
        let spent = kuadrant.check(asked(("tokens", "race"), 0)).await;
        assert_eq!(spent.overall_code, Code::OverLimit as i32, "{store}");
    }
}

/// On a Redis Cluster a request's descriptors live in different slots: a check decides each
/// slot's hits by the script's read-only call and writes nothing; a report charges them all.
#[tokio::test]
async fn on_a_cluster_a_check_of_several_slots_charges_nothing() {
    let nodes = crate::support::redis::start_cluster();
    let flags = crate::support::redis::cluster_flags(&nodes);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let sluice = Sluice::start(CONFIG, &flags);
    let mut kuadrant = Kuadrant::connect(&sluice).await;
    let both = |hits_addend| RateLimitRequest {
        hits_addend,
        ..request(
            "ns",
            vec![
                descriptor_of(("user", "c1")),
                descriptor_of(("tokens", "c1")),
            ],
        )
    };
    for _ in 0..5 {
        assert_eq!(kuadrant.check(both(1)).await.overall_code, Code::Ok as i32);
    }
    // Two of the user's three: the checks charged nothing.
    kuadrant.report(both(2)).await;
    assert_eq!(kuadrant.check(both(0)).await.overall_code, Code::Ok as i32);
    kuadrant.report(both(1)).await;
    // The user's limit is spent; the tokens' is not: the request is over.
    assert_eq!(
        kuadrant.check(both(0)).await.overall_code,
        Code::OverLimit as i32
    );
    let tokens = asked(("tokens", "c1"), 0);
    assert_eq!(kuadrant.check(tokens).await.overall_code, Code::Ok as i32);
}

/// Limitador's limits file: per user for GETs, and one for the whole namespace.
const LIMITS: &str = "\
- namespace: lim
  max_value: 2
  seconds: 60
  conditions: [\"descriptors[0]['req.method'] == 'GET'\"]
  variables: [\"descriptors[0]['user_id']\"]
  name: per-user
- namespace: lim
  max_value: 5
  seconds: 60
  name: namespace-wide
- namespace: lim
  max_value: 99
  seconds: 60
  conditions: [\"descriptors[0]['req.method'] == 'GET'\"]
  variables: [\"descriptors[0]['user_id']\"]
";

/// A ShouldRateLimit of `entries` in `lim`: its overall code.
async fn should(sluice: &Sluice, entries: &[(&str, &str)]) -> i32 {
    let mut client = sluice.client().await;
    call(&mut client, request("lim", vec![descriptor(entries)]))
        .await
        .overall_code
}

#[tokio::test]
async fn limitadors_limits_apply_by_their_conditions_and_variables_on_every_store() {
    let redis = RedisServer::start(&[]);
    let files = [("config.yaml", CONFIG), ("limits.yaml", LIMITS)];
    for (store, sluice) in serving(&redis, &files, &[]) {
        let (ok, over) = (Code::Ok as i32, Code::OverLimit as i32);
        let get = |user| [("req.method", "GET"), ("user_id", user)];
        // Two GETs a user; a denied request charges nothing (the namespace's 5 included).
        assert_eq!(should(&sluice, &get("u1")).await, ok, "{store}");
        assert_eq!(should(&sluice, &get("u1")).await, ok, "{store}");
        assert_eq!(should(&sluice, &get("u1")).await, over, "{store}");
        assert_eq!(should(&sluice, &get("u2")).await, ok, "{store}");
        // A POST meets no condition of the per-user limit; a GET without a user has no
        // value for its variable: only the namespace's limit counts them.
        assert_eq!(should(&sluice, &[("req.method", "POST")]).await, ok);
        assert_eq!(should(&sluice, &[("req.method", "GET")]).await, ok);
        // Five of the namespace's five: every request is over, whoever sends it.
        assert_eq!(should(&sluice, &get("u3")).await, over, "{store}");
        assert_eq!(should(&sluice, &[("req.method", "POST")]).await, over);
    }
}

#[tokio::test]
async fn kuadrants_calls_apply_limitadors_limits() {
    let redis = RedisServer::start(&[]);
    let files = [("config.yaml", CONFIG), ("limits.yaml", LIMITS)];
    for (store, sluice) in serving(&redis, &files, &[]) {
        let (ok, over) = (Code::Ok as i32, Code::OverLimit as i32);
        let get = |user| [("req.method", "GET"), ("user_id", user)];
        let mut kuadrant = Kuadrant::connect(&sluice).await;
        let of = |user, hits_addend| RateLimitRequest {
            hits_addend,
            ..request("lim", vec![descriptor(&get(user))])
        };
        // Two reported for a user spend its two; its next check is over, another user's not.
        assert_eq!(kuadrant.check(of("k1", 0)).await.overall_code, ok);
        kuadrant.report(of("k1", 2)).await;
        let checked = kuadrant.check(of("k1", 0)).await;
        assert_eq!(checked.overall_code, over, "{store}");
        assert_eq!(kuadrant.check(of("k2", 0)).await.overall_code, ok);
        // A reservation holds half of every limit that applies: 2 of the namespace's 5,
        // where 2 are used, so a second hold does not fit until the first is committed.
        let first = kuadrant.reserve_in("lim", descriptor(&get("k2")), 5).await;
        assert_eq!(first.code, ok, "{store}");
        let second = kuadrant.reserve_in("lim", descriptor(&get("k3")), 5).await;
        assert_eq!(second.code, over, "{store}: 2 used + 2 held + 2 > 5");
        let commit = CommitRequest {
            domain: "lim".into(),
            descriptors: vec![descriptor(&get("k2"))],
            reservation_id: first.reservation_id,
            actual_amount: 0,
        };
        let committed: CommitResponse = kuadrant.unary("Commit", commit).await.expect("committed");
        assert!(committed.reservation_released, "{store}");
        let third = kuadrant.reserve_in("lim", descriptor(&get("k3")), 5).await;
        assert_eq!(third.code, ok, "{store}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_lapses_when_its_counters_window_ends_on_every_store() {
    let redis = RedisServer::start(&[]);
    let limits = "- {namespace: short, max_value: 4, seconds: 2, conditions: [], variables: []}\n";
    for (store, sluice) in serving(&redis, &[("limits.yaml", limits)], &[]) {
        let mut kuadrant = Kuadrant::connect(&sluice).await;
        let of = |hits_addend| RateLimitRequest {
            hits_addend,
            ..request("short", vec![descriptor(&[("k", "v")])])
        };
        // The report opens the counter's window of 2 s; a second in, a hold of 2 (half of 4)
        // with the longest ttl, 60 s.
        kuadrant.report(of(1)).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let reserve = async |kuadrant: &mut Kuadrant| {
            let held = kuadrant
                .reserve_in("short", descriptor(&[("k", "v")]), 2)
                .await;
            held.code
        };
        assert_eq!(reserve(&mut kuadrant).await, Code::Ok as i32, "{store}");
        let second = reserve(&mut kuadrant).await;
        assert_eq!(second, Code::OverLimit as i32, "{store}: 1 + 2 held + 2");
        // Past the window's end the hold has lapsed with it: two holds of 2 fit the new 4.
        tokio::time::sleep(Duration::from_millis(1_300)).await;
        for _ in 0..2 {
            let fresh = reserve(&mut kuadrant).await;
            assert_eq!(
                fresh,
                Code::Ok as i32,
                "{store}: a hold outlived its window"
            );
        }
    }
}

#[tokio::test]
async fn a_reload_keeps_the_counters_of_unchanged_limits_and_a_broken_file_is_refused() {
    let files = [("config.yaml", CONFIG), ("limits.yaml", LIMITS)];
    let sluice = Sluice::start_with(&files, &[], &[]);
    let path = sluice.config_dir.path().join("limits.yaml");
    let (ok, over) = (Code::Ok as i32, Code::OverLimit as i32);
    let get = [("req.method", "GET"), ("user_id", "u1")];
    assert_eq!(should(&sluice, &get).await, ok);
    assert_eq!(should(&sluice, &get).await, ok);
    // The namespace's limit raised: the per-user counter, unchanged, still holds 2 of 2.
    std::fs::write(&path, LIMITS.replace("max_value: 5", "max_value: 6")).expect("written");
    eventually(&sluice, "the reload", async || {
        sluice.log().contains("config reloaded")
    })
    .await;
    assert_eq!(should(&sluice, &get).await, over);
    let other = [("req.method", "GET"), ("user_id", "u2")];
    for _ in 0..2 {
        assert_eq!(should(&sluice, &other).await, ok);
    }
    // The raised limit's counter kept its count too: 4 of 6, then 6 of 6.
    assert_eq!(should(&sluice, &[("req.method", "POST")]).await, ok);
    assert_eq!(should(&sluice, &[("req.method", "POST")]).await, ok);
    assert_eq!(should(&sluice, &[("req.method", "POST")]).await, over);
    std::fs::write(
        &path,
        "- namespace: lim\n  max_value: 1\n  seconds: 60\n  conditions: [\"descriptors[0][\"]\n",
    )
    .expect("written");
    eventually(&sluice, "the refusal", async || {
        sluice.log().contains("config refused")
    })
    .await;
    assert!(sluice.log().contains("limits.yaml:4:"), "{}", sluice.log());
    assert_eq!(
        should(&sluice, &get).await,
        over,
        "the last good limits serve"
    );
}
