//! Many clients at once on one key admit exactly the limit.

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_clients_on_one_key_get_exactly_the_limit() {
    let config = "domain: c\ndescriptors:\n  - key: hot\n    rate_limit: {unit: day, requests_per_unit: 100}\n";
    let sluice = Sluice::start(config, &[]);
    let mut tasks = Vec::new();
    for _ in 0..16 {
        // Each client has its own connection.
        let mut client = sluice.client().await;
        tasks.push(tokio::spawn(async move {
            let mut admitted = 0;
            for _ in 0..20 {
                let response =
                    call(&mut client, request("c", vec![descriptor(&[("hot", "k")])])).await;
                admitted += usize::from(overall(&response) == Code::Ok);
            }
            admitted
        }));
    }
    let mut admitted = 0;
    for task in tasks {
        admitted += task.await.expect("client task");
    }
    assert_eq!(admitted, 100, "16 x 20 = 320 calls on a limit of 100");
}
