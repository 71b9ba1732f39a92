//! Limitador's `redis_cached` in sluice (docs/kuadrant.md): the limits of a limits file lease
//! their budget (`--limits-file-leasing`). Two replicas on one Redis driving a hot counter at
//! twice its limit admit at most the limit and at least the limit less replicas x chunk, with
//! few calls to Redis; Kuadrant's calls on the same counter stay exact; a limit too small to
//! lease keeps the exact path.

use super::Kuadrant;
use crate::support::redis::{script_calls, RedisServer};
use crate::support::*;

const LIMITS: &str = "\
- namespace: lim
  max_value: 1500
  seconds: 3600
  variables: [\"descriptors[0]['user']\"]
  name: hot
- namespace: lim
  max_value: 10
  seconds: 3600
  conditions: [\"descriptors[0]['user'] == 'small'\"]
  name: small
";

/// What `per_caller` ShouldRateLimit calls for `user` by each of four callers at each of
/// `sluices`, all at once, admitted.
async fn admitted_of(sluices: &[&Sluice], user: &str, per_caller: usize) -> usize {
    let mut tasks = Vec::new();
    for sluice in sluices {
        for _ in 0..4 {
            let mut client = sluice.client().await;
            let user = user.to_string();
            tasks.push(tokio::spawn(async move {
                let mut admitted = 0;
                for _ in 0..per_caller {
                    let ask = request("lim", vec![descriptor(&[("user", &user)])]);
                    admitted += usize::from(overall(&call(&mut client, ask).await) == Code::Ok);
                }
                admitted
            }));
        }
    }
    let mut total = 0;
    for task in tasks {
        total += task.await.expect("a caller");
    }
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_lease_a_limits_files_counter_within_its_bound() {
    let redis = RedisServer::start(&[]);
    let files = [("limits.yaml", LIMITS)];
    let args = ["--limits-file-leasing", "100"];
    let one = Sluice::on_redis_url(&files, &redis.url(), &args, &[]);
    let two = Sluice::on_redis_url(&files, &redis.url(), &args, &[]);
    let (_, rlconfig) = one.http_get("/rlconfig");
    assert!(
        rlconfig.contains("lim hot: 1500 per 3600s, conditions [], variables [descriptors[0]['user']], leased: max_chunk 100"),
        "{rlconfig}"
    );
    assert!(
        !rlconfig.contains("lim small: 10 per 3600s, conditions [descriptors[0]['user'] == 'small'], variables [], leased"),
        "a limit of 10 keeps the exact path: {rlconfig}"
    );
    let before = script_calls(&redis);
    let admitted = admitted_of(&[&one, &two], "u1", 375).await;
    let calls = script_calls(&redis) - before;
    assert!(
        (1_300..=1_500).contains(&admitted),
        "2 replicas admitted {admitted} of 3000: within [1500 - 2 x 100, 1500]"
    );
    assert!(
        calls * 5 < admitted as u64,
        "{calls} calls to Redis for {admitted} admitted"
    );
    // Kuadrant's check reads the counter in Redis, exact: it is spent (the chunks included).
    let mut kuadrant = Kuadrant::connect(&one).await;
    let checked = kuadrant
        .check(request("lim", vec![descriptor(&[("user", "u1")])]))
        .await;
    assert_eq!(checked.overall_code, Code::OverLimit as i32);
    // A limit too small to lease: exactly its 10, every call to Redis.
    let before = script_calls(&redis);
    let small = admitted_of(&[&one, &two], "small", 5).await;
    assert_eq!(small, 10);
    assert!(
        script_calls(&redis) - before >= 40,
        "each call went to Redis"
    );
}
