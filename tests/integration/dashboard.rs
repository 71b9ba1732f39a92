//! The admin port's dashboard (docs/heavy-hitters.md) in a real browser: headless Chromium
//! opens the page with the admin token as HTTP Basic credentials, three tenants send traffic
//! (one past its limit) while it is open, and the page shows that tenant first in the denied
//! list and draws the limit's chart, updating by itself; without credentials it shows nothing
//! but the refusal. With `SLUICE_DASHBOARD_SCREENSHOT=<file>` it saves what the browser shows
//! (docs/images/dashboard.png comes from there).

use std::time::Duration;

use serde_json::json;

use crate::heavy_hitters::{drive, CONFIG};
use crate::support::admin::{put_override, AdminFlags, TOKEN};
use crate::support::browser::Browser;
use crate::support::Sluice;

#[test]
fn the_page_shows_who_is_denied_within_seconds_and_refuses_without_credentials() {
    let flags = AdminFlags::new();
    let sluice = Sluice::start(CONFIG, &flags.args());
    let addr = sluice.admin_addr.expect("the admin port");
    put_override(
        &sluice,
        &[("tenant", "vip")],
        None,
        json!({"unit": "hour", "requests_per_unit": 500}),
    );
    let mut browser = Browser::start();
    let page = browser.open(&format!("http://ops:{TOKEN}@{addr}/dashboard"));
    // The page has read the dashboard's data once, before any traffic.
    browser.wait_for(
        &page,
        "document.getElementById('status').textContent.startsWith('updated')",
        Duration::from_secs(10),
    );
    assert_eq!(
        browser.eval(
            &page,
            "document.querySelectorAll('#denied-now tr[data-value]').length"
        ),
        json!(0)
    );
    drive(&sluice, "a", 2);
    drive(&sluice, "b", 4);
    drive(&sluice, "c", 12);
    drive(&sluice, "vip", 3);
    // Without a reload: its own polling shows c first among the denied.
    let took = browser.wait_for(
        &page,
        "document.querySelector('#denied-now tr[data-value]')?.dataset.value === 'tenant=c'",
        Duration::from_secs(5),
    );
    assert!(took < Duration::from_secs(5));
    assert_eq!(
        browser.eval(
            &page,
            "[...document.querySelectorAll('#denied-now tr[data-value]')].map(r => r.dataset.value)"
        ),
        json!(["tenant=c"]),
        "only c was denied"
    );
    // The heaviest values by hits, in order, with their counts.
    assert_eq!(
        browser.eval(
            &page,
            "[...document.querySelectorAll('[data-limit=\"tenants.tenant\"] table[data-kind=hits] tr[data-value]')].map(r => [r.dataset.value, Number(r.dataset.count)])"
        ),
        json!([["tenant=c", 12], ["tenant=b", 4], ["tenant=vip", 3], ["tenant=a", 2]])
    );
    // The chart has drawn its points: hits and denials of the last 10 seconds.
    assert!(
        browser
            .eval(
                &page,
                "document.querySelectorAll('svg.chart circle.point.hits').length"
            )
            .as_u64()
            .unwrap_or(0)
            >= 1
    );
    assert_eq!(
        browser.eval(
            &page,
            "document.querySelector('svg.chart polyline[data-series=denials]').getAttribute('points').split(' ').length >= 1"
        ),
        json!(true)
    );
    // The limit in force, as the configuration says it.
    assert_eq!(
        browser.eval(
            &page,
            "document.querySelector('[data-limit=\"tenants.tenant\"] .in-force').textContent"
        ),
        json!("in force: fixed_window: 5 per hour")
    );
    // The override in force is listed.
    assert_eq!(
        browser.eval(
            &page,
            "document.getElementById('overrides').textContent.includes('tenant=vip')"
        ),
        json!(true)
    );
    if let Some(path) = std::env::var_os("SLUICE_DASHBOARD_SCREENSHOT") {
        std::fs::write(path, browser.screenshot(&page)).expect("the screenshot written");
    }
    // Without credentials: the refusal, and no dashboard.
    // (A context of its own: the browser would send the credentials it was given above.)
    let refused = browser.open_isolated(&format!("http://{addr}/dashboard"));
    browser.wait_for(
        &refused,
        "document.readyState === 'complete' && document.body !== null",
        Duration::from_secs(10),
    );
    assert_eq!(
        browser.eval(
            &refused,
            "document.body.innerText.includes('UNAUTHENTICATED')"
        ),
        json!(true)
    );
    assert_eq!(
        browser.eval(&refused, "document.getElementById('denied-now') === null"),
        json!(true)
    );
    // And with a wrong token.
    let wrong = browser.open_isolated(&format!(
        "http://ops:wrong-token-0123456789@{addr}/dashboard"
    ));
    browser.wait_for(
        &wrong,
        "document.readyState === 'complete' && document.body !== null",
        Duration::from_secs(10),
    );
    assert_eq!(
        browser.eval(&wrong, "document.getElementById('denied-now') === null"),
        json!(true)
    );
}
