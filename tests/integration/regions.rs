//! One limit across regions (`global`, docs/regions.md): three regions, each its own
//! redis-server and two replicas, the two far regions reaching home through links that add
//! 50 ms each way and can be cut. A hot key driven from every region at twice its limit admits
//! at most the limit and at least the limit less regions x chunk; a region cut off keeps to
//! its share; when the link returns, what it admitted alone is counted at home once.

use std::time::Duration;

use crate::support::link::{global_config, Link};
use crate::support::redis::RedisServer;
use crate::support::{call, clear_of_a_windows_end, descriptor, overall, request, series, Sluice};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;

const LIMIT: usize = 600;
const CHUNK: usize = 40;
const REGIONS: usize = 3;
const PERIOD: Duration = Duration::from_secs(10);

fn config() -> String {
    global_config(PERIOD.as_secs(), LIMIT, CHUNK, REGIONS)
}

/// Three regions: `a` is home (its replicas reach home on their own Redis), `b` and `c` reach
/// it through their links.
struct World {
    redis: Vec<RedisServer>,
    links: Vec<Link>,
    /// Each replica, with its region's place.
    replicas: Vec<(usize, Sluice)>,
}

const NAMES: [&str; REGIONS] = ["a", "b", "c"];

impl World {
    fn start() -> World {
        let redis: Vec<RedisServer> = (0..REGIONS).map(|_| RedisServer::start(&[])).collect();
        let home_addr = format!("127.0.0.1:{}", redis[0].port)
            .parse()
            .expect("an address");
        let links: Vec<Link> = (1..REGIONS)
            .map(|_| Link::start(home_addr, Duration::from_millis(50)))
            .collect();
        let mut world = World {
            redis,
            links,
            replicas: Vec::new(),
        };
        for region in 0..REGIONS {
            for _ in 0..2 {
                let sluice = world.start_replica(region);
                world.replicas.push((region, sluice));
            }
        }
        world
    }

    /// A replica of `region`.
    fn start_replica(&self, region: usize) -> Sluice {
        let home = match region {
            0 => self.redis[0].url(),
            far => self.links[far - 1].url(),
        };
        let own = self.redis[region].url();
        let args = [
            "--store",
            "redis",
            "--redis-url",
            &own,
            "--region",
            NAMES[region],
            "--global-home-redis-url",
            &home,
            // A link slowed by a machine running many tests must not count as cut.
            "--global-link-timeout",
            "3s",
        ];
        Sluice::start_with(&[("config.yaml", &config())], &args, &[])
    }

    /// What each region admitted of `per_caller` calls on `tenant=hot` by two callers at each
    /// replica of the regions `driven`, a call every `pace`.
    async fn drive(&self, driven: &[usize], per_caller: usize, pace: Duration) -> [usize; REGIONS] {
        let mut tasks = Vec::new();
        for (region, sluice) in self.replicas.iter().filter(|(r, _)| driven.contains(r)) {
            for _ in 0..2 {
                let mut client = sluice.client().await;
                let region = *region;
                tasks.push(tokio::spawn(async move {
                    let mut admitted = 0;
                    for _ in 0..per_caller {
                        let ask = request("world", vec![descriptor(&[("tenant", "hot")])]);
                        admitted += usize::from(overall(&call(&mut client, ask).await) == Code::Ok);
                        tokio::time::sleep(pace).await;
                    }
                    (region, admitted)
                }));
            }
        }
        let mut admitted = [0; REGIONS];
        for task in tasks {
            let (region, count) = task.await.expect("caller");
            admitted[region] += count;
        }
        admitted
    }

    /// The sum of `name` over the replicas of `region`.
    fn metric(&self, region: usize, name: &str) -> f64 {
        self.replicas
            .iter()
            .filter(|(r, _)| *r == region)
            .map(|(_, sluice)| series(&sluice.http_get("/metrics").1, name).unwrap_or(0.0))
            .sum()
    }
}

/// The start, in seconds, of the window holding now.
fn window_start_s() -> u64 {
    crate::support::link::window_start_s(PERIOD)
}

/// What home holds of window `start_s`, field by field (`t:<region>`, `a:<region>`).
fn home_fields(world: &World, start_s: u64) -> std::collections::HashMap<String, usize> {
    let key = format!("global_world_tenant_hot_10_{start_s}_home");
    let text = world.redis[0].cli(&["HGETALL", &key]);
    let words: Vec<&str> = text.split_whitespace().collect();
    words
        .chunks(2)
        .filter_map(|pair| Some((pair.first()?.to_string(), pair.get(1)?.parse().ok()?)))
        .collect()
}

/// What region `region`'s own Redis counted in window `start_s`.
fn region_count(world: &World, region: usize, start_s: u64) -> usize {
    let key = format!("world_tenant_hot_{start_s}");
    world.redis[region]
        .cli(&["GET", &key])
        .trim()
        .parse()
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_key_driven_from_three_regions_admits_the_limit_within_its_bound() {
    let world = World::start();
    clear_of_a_windows_end(PERIOD, Duration::from_secs(8)).await;
    let start_s = window_start_s();
    // 12 callers x 100 calls: twice the limit, spread over about 7 seconds of the window.
    let admitted = world
        .drive(&[0, 1, 2], 100, Duration::from_millis(60))
        .await;
    assert_eq!(window_start_s(), start_s, "the drive stayed in one window");
    let total: usize = admitted.iter().sum();
    eprintln!("admitted by region: {admitted:?} = {total}");
    let floor = LIMIT - REGIONS * CHUNK;
    assert!(
        (floor..=LIMIT).contains(&total),
        "admitted {admitted:?} = {total}: within [{floor}, {LIMIT}]"
    );
    for (region, count) in admitted.iter().enumerate() {
        assert!(*count > 0, "region {} admitted nothing", NAMES[region]);
    }
    let rlconfig = world.replicas[3].1.http_get("/rlconfig").1;
    assert!(
        rlconfig.contains(
            "world.tenant: unit=SECOND requests_per_unit=600, shadow_mode: false, algorithm: fixed_window, period: 10 x second, global: chunk 40, regions 3, cut_off_share limit / 3 (bound: never admits more than the limit across 3 regions; denies at most 3 x 40 while budget remains; a region cut off admits at most limit / 3 a window)"
        ),
        "{rlconfig}"
    );
    // Every admission is counted at home: what it granted and was told was admitted alone.
    let home = home_fields(&world, start_s);
    let used: usize = home.values().sum();
    assert!(used <= LIMIT, "home counts {used}: {home:?}");
    assert!(
        used >= total,
        "home counts {used} for {total} admitted: {home:?}"
    );
    // The far regions call home a few times per chunk, not per call.
    for region in [1, 2] {
        let calls = world.metric(
            region,
            &format!(
                "sluice_global_link_calls_total{{region=\"{}\",outcome=\"answered\"}}",
                NAMES[region]
            ),
        );
        let per_admitted = calls / admitted[region].max(1) as f64;
        eprintln!(
            "region {}: {calls} calls to home, {per_admitted:.3} per admitted call",
            NAMES[region]
        );
        assert!(
            per_admitted <= 0.25,
            "region {}: {calls} calls to home for {} admitted",
            NAMES[region],
            admitted[region]
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_region_cut_off_keeps_to_its_share_and_healing_counts_nothing_twice() {
    let world = World::start();
    clear_of_a_windows_end(PERIOD, Duration::from_secs(9)).await;
    let start_s = window_start_s();
    let share = LIMIT / REGIONS;
    // Region c takes its first chunk, then loses its link.
    let before = world.drive(&[2], 5, Duration::from_millis(20)).await;
    world.links[1].cut();
    let during = world.drive(&[0, 1, 2], 80, Duration::from_millis(50)).await;
    assert_eq!(window_start_s(), start_s, "the drive stayed in one window");
    let alone = before[2] + during[2];
    eprintln!("cut off: admitted {during:?}, region c {alone} in all");
    assert!(
        (share - CHUNK..=share).contains(&alone),
        "region c, cut off, admitted {alone}: its share is {share}"
    );
    let connected = during[0] + during[1];
    assert!(connected <= LIMIT, "regions a and b admitted {connected}");
    assert!(
        connected + alone <= LIMIT + share,
        "the window admitted {}: at most the limit and one region's share",
        connected + alone
    );
    // The link returns: region c reports what it admitted past its grants, once.
    world.links[1].join();
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    let counted_c = region_count(&world, 2, start_s);
    assert_eq!(counted_c, alone, "region c's Redis counted its admissions");
    loop {
        let home = home_fields(&world, start_s);
        let reported =
            home.get("t:c").copied().unwrap_or(0) + home.get("a:c").copied().unwrap_or(0);
        if reported >= counted_c {
            assert_eq!(
                reported, counted_c,
                "home counts region c's window as what it admitted: {home:?}"
            );
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "region c's admissions never reached home: {home:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Reported again and again (both replicas, every look), it is counted once.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let home = home_fields(&world, start_s);
    let used: usize = home.values().sum();
    eprintln!("home after healing: {home:?}");
    let counted: usize = (0..REGIONS).map(|r| region_count(&world, r, start_s)).sum();
    assert!(
        (counted..=counted + REGIONS * CHUNK).contains(&used),
        "home counts {used} for {counted} admitted: {home:?}"
    );
    let cut_offs = world.metric(
        2,
        "sluice_global_link_transitions_total{region=\"c\",to=\"cut_off\"}",
    );
    let joins = world.metric(
        2,
        "sluice_global_link_transitions_total{region=\"c\",to=\"joined\"}",
    );
    assert_eq!(
        (cut_offs, joins),
        (2.0, 2.0),
        "each replica of c: one cut, one join"
    );
    for (_, sluice) in world.replicas.iter().filter(|(r, _)| *r == 2) {
        let log = sluice.log();
        assert_eq!(log.matches("cut off from home").count(), 1, "{log}");
        assert_eq!(log.matches("home answers again").count(), 1, "{log}");
    }
}

/// Waits up to 5 seconds for what home counts of region `region`'s window `start_s` to reach
/// what the region's Redis counted; that count.
async fn reported_at_home(world: &World, region: usize, start_s: u64) -> usize {
    let counted = region_count(world, region, start_s);
    let (granted, alone) = (
        format!("t:{}", NAMES[region]),
        format!("a:{}", NAMES[region]),
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let home = home_fields(world, start_s);
        let reported =
            home.get(&granted).copied().unwrap_or(0) + home.get(&alone).copied().unwrap_or(0);
        if reported >= counted {
            assert!(
                reported <= counted + CHUNK,
                "home counts {reported} for {counted}: {home:?}"
            );
            return counted;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "region {}'s {counted} admissions never reached home: {home:?}",
            NAMES[region]
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_started_while_its_region_is_cut_off_serves_its_share_then_joins() {
    let mut world = World::start();
    clear_of_a_windows_end(PERIOD, Duration::from_secs(8)).await;
    let start_s = window_start_s();
    world.links[1].cut();
    let started = world.start_replica(2);
    world.replicas.push((2, started));
    let admitted = world.drive(&[2], 50, Duration::from_millis(10)).await;
    assert_eq!(window_start_s(), start_s, "the drive stayed in one window");
    let share = LIMIT / REGIONS;
    assert!(
        (share - CHUNK..=share).contains(&admitted[2]),
        "region c, cut off from its replicas' start, admitted {}: its share is {share}",
        admitted[2]
    );
    world.links[1].join();
    let counted = reported_at_home(&world, 2, start_s).await;
    assert_eq!(counted, admitted[2]);
    let (_, newest) = world.replicas.last().expect("the new replica");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !newest.log().contains("global limits: connected to home") {
        assert!(std::time::Instant::now() < deadline, "{}", newest.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        newest.log().matches("cut off from home").count(),
        1,
        "{}",
        newest.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_raises_a_global_limit_within_the_window_it_counted() {
    let world = World::start();
    clear_of_a_windows_end(PERIOD, Duration::from_secs(9)).await;
    let start_s = window_start_s();
    let first = world
        .drive(&[0, 1, 2], 100, Duration::from_millis(15))
        .await;
    let first: usize = first.iter().sum();
    assert!(first <= LIMIT, "admitted {first} of {LIMIT}");
    let raised = config().replace("requests_per_unit: 600", "requests_per_unit: 900");
    for (_, sluice) in &world.replicas {
        let file = sluice.config_dir.path().join("config.yaml");
        std::fs::write(&file, &raised).expect("rewrite the config");
    }
    for (_, sluice) in &world.replicas {
        let rlconfig = || sluice.http_get("/rlconfig").1;
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !rlconfig().contains("requests_per_unit=900") {
            assert!(std::time::Instant::now() < deadline, "{}", sluice.log());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let second = world.drive(&[0, 1, 2], 50, Duration::from_millis(15)).await;
    let second: usize = second.iter().sum();
    assert_eq!(window_start_s(), start_s, "the drive stayed in one window");
    let total = first + second;
    eprintln!("before the reload {first}, after {second}");
    assert!(
        (900 - REGIONS * CHUNK..=900).contains(&total),
        "admitted {first} + {second} = {total} in the window: within [{}, 900]",
        900 - REGIONS * CHUNK
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn home_and_a_region_on_a_cluster_keep_the_same_bounds() {
    use crate::support::redis::start_cluster;
    let cluster = start_cluster();
    let single = RedisServer::start(&[]);
    let cluster_urls: Vec<String> = cluster.iter().map(RedisServer::url).collect();
    let cluster_urls = cluster_urls.join(",");
    let single_url = single.url();
    let home = [
        "--global-home-redis-type",
        "cluster",
        "--global-home-redis-url",
        &cluster_urls,
    ];
    // Region a's own Redis is the Cluster that is home; region b is on a single node.
    let mut on_cluster = vec!["--store", "redis", "--redis-type", "cluster", "--redis-url"];
    on_cluster.extend([cluster_urls.as_str(), "--region", "a"]);
    on_cluster.extend(home);
    let mut on_single = vec![
        "--store",
        "redis",
        "--redis-url",
        &single_url,
        "--region",
        "b",
    ];
    on_single.extend(home);
    let files = [("config.yaml", config())];
    let files: Vec<(&str, &str)> = files.iter().map(|(n, t)| (*n, t.as_str())).collect();
    let mut replicas = Vec::new();
    for (region, args) in [
        (0, &on_cluster),
        (0, &on_cluster),
        (1, &on_single),
        (1, &on_single),
    ] {
        replicas.push((region, Sluice::start_with(&files, args, &[])));
    }
    let world = World {
        redis: Vec::new(),
        links: Vec::new(),
        replicas,
    };
    clear_of_a_windows_end(PERIOD, Duration::from_secs(8)).await;
    let start_s = window_start_s();
    let admitted = world.drive(&[0, 1], 150, Duration::from_millis(25)).await;
    assert_eq!(window_start_s(), start_s, "the drive stayed in one window");
    let total = admitted[0] + admitted[1];
    let floor = LIMIT - 2 * CHUNK;
    assert!(
        (floor..=LIMIT).contains(&total) && admitted[0] > 0 && admitted[1] > 0,
        "admitted {admitted:?}: within [{floor}, {LIMIT}]"
    );
}

#[test]
fn a_global_limit_needs_a_region_and_a_region_needs_redis() {
    let redis = RedisServer::start(&[]);
    let url = redis.url();
    let refused = Sluice::try_start_with(
        &[("config.yaml", &config())],
        &["--store", "redis", "--redis-url", &url],
        &[],
    )
    .err()
    .unwrap_or_default();
    assert!(
        refused.contains("descriptors[0].rate_limit.global") && refused.contains("--region"),
        "{refused}"
    );
    let refused = Sluice::try_start_with(
        &[("config.yaml", &config())],
        &["--region", "a", "--global-home-redis-url", &url],
        &[],
    )
    .err()
    .unwrap_or_default();
    assert!(refused.contains("--store redis"), "{refused}");
}

#[test]
fn check_config_states_the_bounds_of_a_global_limit() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("world.yaml");
    std::fs::write(&path, config()).expect("write the config");
    let options = sluice_config::LoadOptions {
        regions: true,
        ..Default::default()
    };
    let report = sluice::check::check(&[path], options, None);
    let text = report.out;
    assert!(report.passed, "{text}{}", report.err);
    assert!(
        text.contains("world.tenant: global across 3 regions")
            && text.contains("a window never admits more than 600 while regions reach home")
            && text.contains("at most 3 x 40 is denied while budget remains")
            && text.contains("a region cut off from home admits at most 200 a window")
            && text.contains("with k regions cut off admits at most 600 + k x 200"),
        "{text}"
    );
}

#[test]
fn the_admin_api_reads_a_global_limit_but_refuses_to_reset_or_credit_it() {
    use crate::support::admin::{admin, block_on, entry_list, AdminFlags};
    use serde_json::json;
    let redis = RedisServer::start(&[]);
    let url = redis.url();
    let flags = AdminFlags::new();
    let mut args = vec![
        "--store",
        "redis",
        "--redis-url",
        &url,
        "--region",
        "a",
        "--global-home-redis-url",
        &url,
    ];
    args.extend(flags.args());
    let sluice = Sluice::start_with(&[("config.yaml", &config())], &args, &[]);
    let admitted = block_on(async {
        let mut client = sluice.client().await;
        let mut admitted = 0;
        for _ in 0..5 {
            let ask = request("world", vec![descriptor(&[("tenant", "hot")])]);
            admitted += usize::from(overall(&call(&mut client, ask).await) == Code::Ok);
        }
        admitted
    });
    assert_eq!(admitted, 5);
    let descriptor = json!({"domain": "world", "descriptor": entry_list(&[("tenant", "hot")])});
    let (status, state) = admin(&sluice, "POST", "/v1/descriptors/get", descriptor.clone());
    assert_eq!(status, 200, "{state}");
    assert_eq!(state["limits"][0]["used"], 5, "{state}");
    for (path, body) in [
        ("/v1/descriptors/reset", descriptor.clone()),
        (
            "/v1/descriptors/credit",
            json!({"domain": "world", "descriptor": entry_list(&[("tenant", "hot")]), "amount": 3}),
        ),
    ] {
        let (status, refused) = admin(&sluice, "POST", path, body);
        assert_eq!(
            (status, refused["code"].as_str()),
            (400, Some("FAILED_PRECONDITION")),
            "{path}: {refused}"
        );
        assert!(
            refused["message"]
                .as_str()
                .is_some_and(|m| m.contains("a global limit's window is counted at home")),
            "{path}: {refused}"
        );
    }
}

#[test]
fn a_global_limit_whose_bound_cannot_hold_is_refused_with_its_place() {
    let cases = [
        (
            "minute",
            "algorithm: token_bucket",
            "only a fixed_window is held across regions",
        ),
        ("minute", "debt: true", "a limit taking debt"),
        (
            "minute",
            "budget_leasing: {max_chunk: 10}",
            "it takes no budget_leasing",
        ),
        (
            "minute",
            "penalty: {after: 3, within: 1m, block: 1m}",
            "penalty",
        ),
        (
            "day",
            "window: {calendar: day, time_zone: UTC}",
            "only a window of whole units",
        ),
    ];
    for (unit, extra, reason) in cases {
        let yaml = format!(
            "domain: world\ndescriptors:\n  - key: tenant\n    rate_limit:\n      unit: {unit}\n      \
             requests_per_unit: 600\n      global: {{chunk: 40, regions: 3}}\n      {extra}\n"
        );
        let dir = tempfile::tempdir().expect("a directory");
        let path = dir.path().join("world.yaml");
        std::fs::write(&path, &yaml).expect("write the config");
        let options = sluice_config::LoadOptions {
            regions: true,
            ..Default::default()
        };
        let refused = match sluice_config::load(&[path], options) {
            Ok(_) => panic!("{yaml} loaded but must be refused"),
            Err(errors) => errors.to_string(),
        };
        assert!(
            refused.contains("world.yaml:")
                && refused.contains("descriptors[0].rate_limit")
                && refused.contains(reason),
            "{extra}: {refused}"
        );
    }
}
