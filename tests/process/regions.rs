//! One limit across regions through a crash (docs/regions.md): a far region's replica killed
//! with SIGKILL mid-window and started again. What a region holds is in its Redis, not in a
//! replica, so nothing is lost with it and nothing counted twice: the window stays within its
//! limit, and home's count covers what the regions admitted.

use std::process::Command;
use std::time::Duration;

use crate::support::link::{global_config, Link};
use crate::support::redis::RedisServer;
use crate::support::*;

const LIMIT: usize = 600;
const CHUNK: usize = 40;
const PERIOD: Duration = Duration::from_secs(20);

fn config() -> String {
    global_config(PERIOD.as_secs(), LIMIT, CHUNK, 2)
}

/// What `per_caller` calls on `tenant=hot` by two callers at each of `sluices`, a call every
/// 25 ms, admitted.
async fn drive(sluices: &[&Sluice], per_caller: usize) -> usize {
    let mut tasks = Vec::new();
    for sluice in sluices {
        for _ in 0..2 {
            let mut client = sluice.client().await;
            tasks.push(tokio::spawn(async move {
                let mut admitted = 0;
                for _ in 0..per_caller {
                    let ask = request("world", vec![descriptor(&[("tenant", "hot")])]);
                    admitted += usize::from(overall(&call(&mut client, ask).await) == Code::Ok);
                    tokio::time::sleep(Duration::from_millis(25)).await;
                }
                admitted
            }));
        }
    }
    let mut admitted = 0;
    for task in tasks {
        admitted += task.await.expect("caller");
    }
    admitted
}

fn window_start_s() -> u64 {
    crate::support::link::window_start_s(PERIOD)
}

/// The flags of a replica of region `name` on its `own` Redis, asking `home`.
fn region_args<'a>(own: &'a str, name: &'a str, home: &'a str) -> [&'a str; 8] {
    [
        "--store",
        "redis",
        "--redis-url",
        own,
        "--region",
        name,
        "--global-home-redis-url",
        home,
    ]
}

fn number(text: &str) -> usize {
    text.trim().parse().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_far_replica_killed_and_restarted_keeps_the_window_within_its_limit() {
    let (home, far) = (RedisServer::start(&[]), RedisServer::start(&[]));
    let home_addr = format!("127.0.0.1:{}", home.port)
        .parse()
        .expect("an address");
    let link = Link::start(home_addr, Duration::from_millis(50));
    let (home_url, far_url, link_url) = (home.url(), far.url(), link.url());
    let config = config();
    let files = [("config.yaml", config.as_str())];
    let args_a = region_args(&home_url, "a", &home_url);
    let args_b = region_args(&far_url, "b", &link_url);
    let a = Sluice::process_with(&files, &args_a, &[]);
    let b1 = Sluice::process_with(&files, &args_b, &[]);
    let b2 = Sluice::process_with(&files, &args_b, &[]);
    clear_of_a_windows_end(PERIOD, Duration::from_secs(15)).await;
    let start_s = window_start_s();
    // Six callers, 200 calls each over two halves: twice the limit.
    let before = drive(&[&a, &b1, &b2], 100).await;
    let status = Command::new("kill")
        .args(["-KILL", &b2.pid().to_string()])
        .status();
    assert!(status.is_ok_and(|s| s.success()));
    drop(b2);
    let restarted = Sluice::process_with(&files, &args_b, &[]);
    let after = drive(&[&a, &b1, &restarted], 100).await;
    assert_eq!(window_start_s(), start_s, "the drive stayed in one window");
    let total = before + after;
    let floor = LIMIT - 2 * CHUNK;
    assert!(
        (floor..=LIMIT).contains(&total),
        "admitted {before} + {after} = {total}: within [{floor}, {LIMIT}]"
    );
    let counter = format!("world_tenant_hot_{start_s}");
    let counted = number(&home.cli(&["GET", &counter])) + number(&far.cli(&["GET", &counter]));
    assert_eq!(
        counted, total,
        "the regions' Redis counted every admission once"
    );
    let fields = home.cli(&[
        "HVALS",
        &format!("global_world_tenant_hot_20_{start_s}_home"),
    ]);
    let used: usize = fields.split_whitespace().map(number).sum();
    assert!(
        (counted..=counted + 2 * CHUNK).contains(&used),
        "home counts {used} for {counted} admitted"
    );
}
