//! Each algorithm through the real binary, in real time, with short periods: the behaviour that
//! tells them apart.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::support::*;

const CONFIG: &str = include_str!("../fixtures/cases/algorithms_live/config.yaml");

async fn hit(client: &mut Client, key: &str) -> DescriptorStatus {
    let response = call(client, request("algo", vec![descriptor(&[(key, "v")])])).await;
    response.statuses.into_iter().next().expect("one status")
}

/// Sleeps until `fraction` (0..1) of a wall-clock second.
async fn sleep_until_fraction(fraction: f64) {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let into = f64::from(now.subsec_micros()) / 1e6;
    let wait = if into < fraction {
        fraction - into
    } else {
        1.0 - into + fraction
    };
    tokio::time::sleep(Duration::from_secs_f64(wait)).await;
}

#[tokio::test]
async fn token_bucket_bursts_then_refills_at_its_rate() {
    let sluice = Sluice::start(CONFIG, &[]);
    let mut client = sluice.client().await;
    for expected in (0..5).rev() {
        let status = hit(&mut client, "token").await;
        assert_eq!(code(&status), Code::Ok);
        assert_eq!(status.limit_remaining, expected);
    }
    let denied = hit(&mut client, "token").await;
    assert_eq!(code(&denied), Code::OverLimit);
    // The next token comes in 0.1 s: rounded up to a whole second.
    assert_eq!(denied.duration_until_reset.unwrap().seconds, 1);
    tokio::time::sleep(Duration::from_millis(350)).await;
    let mut admitted = 0;
    while code(&hit(&mut client, "token").await) == Code::Ok {
        admitted += 1;
    }
    assert!(
        (2..=5).contains(&admitted),
        "10/s for 0.35 s refilled {admitted}"
    );
}

#[tokio::test]
async fn leaky_bucket_paces_one_request_per_interval() {
    let sluice = Sluice::start(CONFIG, &[]);
    let mut client = sluice.client().await;
    assert_eq!(code(&hit(&mut client, "leaky").await), Code::Ok);
    assert_eq!(
        code(&hit(&mut client, "leaky").await),
        Code::OverLimit,
        "5/s: one per 0.2 s"
    );
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert_eq!(code(&hit(&mut client, "leaky").await), Code::Ok);
    assert_eq!(code(&hit(&mut client, "leaky").await), Code::OverLimit);
}

#[tokio::test]
async fn sliding_windows_reject_across_a_fixed_window_boundary() {
    let sluice = Sluice::start(CONFIG, &[]);
    let mut client = sluice.client().await;
    sleep_until_fraction(0.70).await;
    for key in ["fixed", "log", "counter"] {
        for _ in 0..4 {
            assert_eq!(code(&hit(&mut client, key).await), Code::Ok, "{key}");
        }
    }
    // 0.1 s into the next second: a fresh fixed window; the sliding ones still see the four.
    sleep_until_fraction(0.10).await;
    assert_eq!(code(&hit(&mut client, "fixed").await), Code::Ok);
    assert_eq!(code(&hit(&mut client, "log").await), Code::OverLimit);
    // Counter: 4 x 0.9 + 1 = 4.6 > 4.
    assert_eq!(code(&hit(&mut client, "counter").await), Code::OverLimit);
    // Half-way: the counter weighs 4 x 0.5 = 2, so 2 more fit; the log frees all at about 0.75 + 1.
    sleep_until_fraction(0.55).await;
    assert_eq!(code(&hit(&mut client, "counter").await), Code::Ok);
    assert_eq!(code(&hit(&mut client, "log").await), Code::OverLimit);
    sleep_until_fraction(0.95).await;
    assert_eq!(code(&hit(&mut client, "log").await), Code::Ok);
}
