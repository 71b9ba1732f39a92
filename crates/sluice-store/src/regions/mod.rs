//! Limits held across regions (`global` on a limit; the policy and its bounds are
//! `sluice_core::modifier::global`'s, the design docs/regions.md's). Each region runs its
//! replicas on its own Redis; one home Redis owns each window's budget. A replica decides a
//! global limit's hit in its own region's Redis, as any limit, on what its region may admit in
//! the window (`Window::allowance`) rather than on the whole limit: so a call waits on its own
//! region only. A task (`tend`) keeps each window in use topped up from home in the
//! background: every `TICK` it reads what the region counted, and when half a chunk is spent it
//! asks home for what tops it up (one call in flight per window), and for the next window's
//! first chunk before the window ends (`PREFETCH`). Only a key's first call in a window that no
//! replica of the region saw before waits for home (at most the link's timeout).
//!
//! When home cannot be reached the region is cut off: it spends what it holds, then admits up
//! to its share of the window (`Policy::share`; what it took from home counts in it). Each
//! transition is logged once and counted. When home answers again, each window the region
//! admitted past its grants reports how far (home keeps the most it was told, so nothing is
//! counted twice), and home grants nobody that part again.

mod link;
mod window;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

use crate::any::AnyStore;
use crate::redis::regions::{Ask, Held};
use crate::redis::{RedisStore, RedisTarget, RedisTargets, TimeSource};
use crate::series::{Reporting, Series};
use crate::{Clock, Store, StoreError, SystemClock};
use link::Link;
use sluice_core::engine::Charging;
use sluice_core::limit::{Decision, Hit, MICROS_PER_SECOND};
use sluice_core::modifier::global::Policy;
use window::Window;

/// How often the windows in use are looked at.
const TICK: Duration = Duration::from_millis(50);

/// How long before a window ends its successor's first chunk is asked for (at most half the
/// window).
const PREFETCH: Duration = Duration::from_secs(1);

/// A window unused for this long is forgotten (its state stays in Redis).
const IDLE: Duration = Duration::from_secs(10);

/// The most windows a replica follows: a client naming ever new keys cannot grow it past
/// this (about 300 bytes each). A window is only a view of what its region's Redis holds, so
/// when it is full the idlest `EVICTED` are forgotten (each is read again at its next call).
const MAX_WINDOWS: usize = 100_000;

/// How many windows a full table forgets at once (so that a flood of new keys scans it once
/// every so many, not at every key).
const EVICTED: usize = 1_000;

/// How often a replica that could not connect to home tries again.
const RECONNECT: Duration = Duration::from_secs(1);

/// How a replica takes part in limits held across regions.
#[derive(Debug, Clone)]
pub struct RegionSettings {
    /// The region's name, as home knows it (`--region`).
    pub name: String,
    /// The home Redis; its command timeout is the link's.
    pub home: RedisTarget,
    /// The key prefix at home (`CACHE_KEY_PREFIX`, as in the region).
    pub key_prefix: String,
}

/// The windows of global limits a replica follows, its region, and its link to home.
pub struct Regions {
    name: String,
    /// Home, once connected (a replica may start while its region is cut off).
    home: OnceLock<RedisStore>,
    /// How long a call to home may take.
    link_timeout: Duration,
    /// The region's own store (its Redis, with the layers in front of it).
    region: Arc<AnyStore>,
    clock: Arc<dyn Clock>,
    windows: Mutex<HashMap<WindowId, Arc<Window>>>,
    link: Link,
}

/// A window of a key: the key, the limit's period in seconds, the window's start in seconds.
type WindowId = (String, u64, u64);

impl Regions {
    /// The region `settings` names, on `region`'s Redis, asking its home; home is connected
    /// to by a task (until then the region is cut off), and the windows are tended by another,
    /// both on the current runtime.
    pub fn start(
        settings: RegionSettings,
        region: Arc<AnyStore>,
        clock: Arc<dyn Clock>,
    ) -> Arc<Regions> {
        let regions = Arc::new(Regions {
            name: settings.name,
            home: OnceLock::new(),
            link_timeout: settings.home.command_timeout,
            region,
            clock,
            windows: Mutex::new(HashMap::new()),
            link: Link::default(),
        });
        tokio::spawn(connect_home(
            Arc::downgrade(&regions),
            settings.home,
            settings.key_prefix,
        ));
        tokio::spawn(tend(Arc::downgrade(&regions)));
        regions
    }

    /// Home, or why it cannot be asked yet.
    fn home(&self) -> Result<&RedisStore, StoreError> {
        self.home.get().ok_or_else(|| StoreError::Unreachable {
            store: "home Redis",
            source: "not connected yet".into(),
        })
    }

    fn windows(&self) -> MutexGuard<'_, HashMap<WindowId, Arc<Window>>> {
        self.windows
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// `hits` with each global limit's hit decided on what its region may admit now (for a
    /// request with such a hit: `has_global`).
    pub async fn allowances(self: &Arc<Self>, hits: &[Hit]) -> Vec<Hit> {
        let now_us = self.clock.now_us();
        let mut regional = hits.to_vec();
        for hit in &mut regional {
            let Some(policy) = hit.limit.modifiers.global else {
                continue;
            };
            let window = self.window_of(hit, policy, now_us);
            if !window.heard() {
                window.first_heard(self.link_timeout).await;
            }
            let allowance = window.allowance();
            let allowed = if self.link.cut_off() {
                allowance.max(u64::from(policy.share(hit.limit.requests_per_unit)))
            } else {
                allowance
            };
            hit.limit.requests_per_unit = u32::try_from(allowed).unwrap_or(u32::MAX);
        }
        regional
    }

    /// The window of `hit` holding `now_us`, made (and its first call to home started) when
    /// new.
    fn window_of(self: &Arc<Self>, hit: &Hit, policy: Policy, now_us: u64) -> Arc<Window> {
        let period_us = hit.limit.period_us().max(1);
        let start_s = (now_us - now_us % period_us) / MICROS_PER_SECOND;
        let (window, new) = self.follow(hit, policy, start_s, now_us);
        window.touch(now_us);
        if new {
            self.spawn_call(window.clone());
        }
        window
    }

    /// The window of `hit` starting at `start_s`, and whether it is new.
    fn follow(&self, hit: &Hit, policy: Policy, start_s: u64, now_us: u64) -> (Arc<Window>, bool) {
        let period_s = hit.limit.period_us() / MICROS_PER_SECOND;
        let id = (hit.key.clone(), period_s, start_s);
        let mut windows = self.windows();
        if let Some(window) = windows.get(&id) {
            let same = window.hit.limit.requests_per_unit == hit.limit.requests_per_unit
                && window.policy == policy;
            if same {
                return (window.clone(), false);
            }
            // The limit changed (a reload): the window is followed afresh, from what the
            // region holds in its Redis, and home is asked with the new limit.
        } else if windows.len() >= MAX_WINDOWS {
            let forgotten = forget_idlest(&mut windows, EVICTED);
            self.link.forgot(forgotten);
        }
        let template = Hit {
            cost: 1,
            lease: None,
            ..hit.clone()
        };
        let window = Arc::new(Window::new(template, policy, start_s, now_us));
        windows.insert(id, window.clone());
        (window, true)
    }

    fn spawn_call(self: &Arc<Self>, window: Arc<Window>) {
        let regions = self.clone();
        tokio::spawn(async move { regions.call_home(&window).await });
    }

    /// Reads what the region counted and holds of `window`, then asks home for what tops it
    /// up, or tells home what the region admitted alone (one call in flight per window).
    async fn call_home(&self, window: &Window) {
        if !window.start_call() {
            return;
        }
        self.look_and_ask(window).await;
        window.end_call();
    }

    async fn look_and_ask(&self, window: &Window) {
        let Some(region) = self.region.redis() else {
            return;
        };
        let now_us = self.clock.now_us();
        let ttl_ms = window.end_us.saturating_sub(now_us) / 1_000 + 60_000;
        let region_key = region.global_key(&window.hit, window.start_s, "region");
        let counter = region.counter_key(&window.hit, window.start_s * MICROS_PER_SECOND);
        // A region whose own Redis fails answers its requests as the failure layer says;
        // there is nothing to top up meanwhile.
        let Ok((held, count)) = region.region_read(&region_key, &counter).await else {
            return;
        };
        window.raise(held.granted, held.allowance());
        window.counted(count);
        if window.unspent() > 0 {
            // Another replica of the region filled it: callers go on while home is asked.
            window.hear();
        }
        let want = window.wanted();
        // While cut off, every look asks home: the first answer joins the region again.
        if want == 0 && !window.admitted_alone() && !self.link.cut_off() {
            return;
        }
        let home = match self.home() {
            Ok(home) => home,
            Err(error) => {
                self.link.failed(&error, self.clock.now_us());
                return;
            }
        };
        let home_key = home.global_key(&window.hit, window.start_s, "home");
        let known = window.granted();
        let ask = Ask {
            key: &home_key,
            region: &self.name,
            known,
            count: window.count(),
            want,
            limit: window.limit(),
            ttl_ms,
        };
        let started = Instant::now();
        let held = match home.global_grant(&ask).await {
            Ok(held) => {
                self.link.answered(started.elapsed(), self.clock.now_us());
                held
            }
            Err(error) => {
                self.link.failed(&error, self.clock.now_us());
                return;
            }
        };
        window.home_used(held.used);
        self.link.granted(held.granted.saturating_sub(known));
        let held = region
            .region_raise(&region_key, held, ttl_ms)
            .await
            .map_or(held, |in_region| Held {
                granted: in_region.granted.max(held.granted),
                alone: in_region.alone.max(held.alone),
                used: held.used,
            });
        window.raise(held.granted, held.allowance());
    }

    /// One look at every window followed: those that ended or went idle are forgotten, those
    /// used since the last look are topped up, and a window about to end has its successor's
    /// first chunk asked for.
    fn look(self: &Arc<Self>) {
        let now_us = self.clock.now_us();
        let idle_us = IDLE.as_micros() as u64;
        let recent_us = now_us.saturating_sub(2 * TICK.as_micros() as u64);
        let mut tended = Vec::new();
        let mut next = Vec::new();
        {
            let mut windows = self.windows();
            windows.retain(|_, window| {
                now_us < window.end_us && now_us.saturating_sub(window.used_us()) < idle_us
                    || window.start_s * MICROS_PER_SECOND > now_us
            });
            let cut_off = self.link.cut_off();
            for window in windows.values() {
                let started = window.start_s * MICROS_PER_SECOND <= now_us;
                let alone = window.admitted_alone() || cut_off;
                if window.used_us() >= recent_us || (alone && started) {
                    tended.push(window.clone());
                }
                let period_us = window.end_us - window.start_s * MICROS_PER_SECOND;
                let lead_us = (PREFETCH.as_micros() as u64).min(period_us / 2);
                if started && window.used_us() >= recent_us && window.end_us - now_us <= lead_us {
                    next.push(window.clone());
                }
            }
        }
        for window in next {
            let start_s = window.end_us / MICROS_PER_SECOND;
            if let (successor, true) =
                self.follow(&window.hit, window.policy, start_s, window.used_us())
            {
                self.spawn_call(successor);
            }
        }
        for window in tended {
            self.spawn_call(window);
        }
    }

    /// What the region holds unspent of the windows in progress, as last seen.
    fn unspent(&self) -> u64 {
        let now_us = self.clock.now_us();
        self.windows()
            .values()
            .filter(|w| w.start_s * MICROS_PER_SECOND <= now_us && now_us < w.end_us)
            .map(|w| w.unspent())
            .sum()
    }
}

/// Connects to home (with its scripts loaded, and the region's), trying again every
/// `RECONNECT` until it answers or the regions are gone.
async fn connect_home(regions: Weak<Regions>, home: RedisTarget, key_prefix: String) {
    loop {
        let targets = RedisTargets {
            main: &home,
            per_second: None,
        };
        let connected = RedisStore::connect(
            targets,
            home.command_timeout,
            key_prefix.clone(),
            TimeSource::Sluice,
            Arc::new(SystemClock),
        )
        .await;
        let Some(regions) = regions.upgrade() else {
            return;
        };
        let loaded = match connected {
            Ok(store) => store.load_global_scripts().await.map(|()| store),
            Err(error) => Err(error),
        };
        match loaded {
            Ok(store) => {
                if let Some(region) = regions.region.redis() {
                    // Without them the first calls send each script twice: no harm.
                    let _ = region.load_global_scripts().await;
                }
                tracing::info!(home = %home.describe(), region = %regions.name, "global limits: connected to home");
                let _ = regions.home.set(store);
                return;
            }
            Err(error) => regions.link.failed(&error, regions.clock.now_us()),
        }
        drop(regions);
        tokio::time::sleep(RECONNECT).await;
    }
}

/// Whether a request's `hits` include a global limit's.
fn has_global(hits: &[Hit]) -> bool {
    hits.iter().any(|hit| hit.limit.modifiers.global.is_some())
}

/// Forgets the `count` windows of `windows` used longest ago; how many it forgot.
fn forget_idlest<K: Clone + Eq + std::hash::Hash>(
    windows: &mut HashMap<K, Arc<Window>>,
    count: usize,
) -> usize {
    let mut by_use: Vec<(u64, K)> = windows
        .iter()
        .map(|(id, window)| (window.used_us(), id.clone()))
        .collect();
    let count = count.min(by_use.len());
    if count == 0 {
        return 0;
    }
    by_use.select_nth_unstable_by_key(count - 1, |(used_us, _)| *used_us);
    for (_, id) in by_use.into_iter().take(count) {
        windows.remove(&id);
    }
    count
}

/// Looks at the windows every `TICK` until the regions are gone.
async fn tend(regions: Weak<Regions>) {
    let mut ticks = tokio::time::interval(TICK);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(regions) = regions.upgrade() else {
            return;
        };
        regions.look();
    }
}

impl Reporting for Regions {
    fn report(&self, series: &Series) {
        let windows = self.windows().len() as u64;
        self.link.report(
            series,
            &self.name,
            windows,
            self.unspent(),
            self.clock.now_us(),
        );
    }
}

/// A store whose global limits' hits are decided on their region's allowance.
pub struct WithRegions<S> {
    inner: S,
    regions: Option<Arc<Regions>>,
}

impl<S: Store> WithRegions<S> {
    /// `inner`, with `regions` when the server holds limits across regions.
    pub fn new(inner: S, regions: Option<Arc<Regions>>) -> WithRegions<S> {
        WithRegions { inner, regions }
    }

    /// The store behind the layer.
    pub fn inner(&self) -> &S {
        &self.inner
    }
}

impl<S: Store> Store for WithRegions<S> {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    async fn charge(&self, hits: &[Hit], charging: Charging) -> Result<Vec<Decision>, StoreError> {
        // A request without a global limit's hit (most) goes straight through: nothing is
        // boxed or copied for it.
        match &self.regions {
            Some(regions) if has_global(hits) => {
                let regional = Box::pin(regions.allowances(hits)).await;
                self.inner.charge(&regional, charging).await
            }
            _ => self.inner.charge(hits, charging).await,
        }
    }

    async fn healthy(&self) -> bool {
        self.inner.healthy().await
    }

    /// A window whose limit changed is followed afresh at its next hit (`Regions::follow`).
    fn config_changed(&self) {
        self.inner.config_changed();
    }
}

impl<S: Store> Reporting for WithRegions<S> {
    fn report(&self, series: &Series) {
        self.inner.report(series);
        if let Some(regions) = &self.regions {
            regions.report(series);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::limit::{Limit, Role, Unit};

    fn window_used_at(used_us: u64) -> Arc<Window> {
        let hit = Hit {
            key: "d_k_v_".into(),
            limit: Limit::fixed_window(100, Unit::Minute),
            cost: 1,
            role: Role::Enforced,
            joins_previous: false,
            lease: None,
        };
        let policy = Policy {
            chunk: 10,
            regions: 2,
            cut_off_share: None,
        };
        Arc::new(Window::new(hit, policy, 0, used_us))
    }

    #[test]
    fn a_full_table_forgets_its_idlest_windows_only() {
        let mut windows: HashMap<u64, Arc<Window>> =
            (0..10).map(|i| (i, window_used_at(1_000 + i))).collect();
        assert_eq!(forget_idlest(&mut windows, 3), 3);
        let mut kept: Vec<u64> = windows.keys().copied().collect();
        kept.sort_unstable();
        assert_eq!(
            kept,
            (3..10).collect::<Vec<_>>(),
            "the three used longest ago go"
        );
        assert_eq!(
            forget_idlest(&mut windows, 100),
            7,
            "never more than there are"
        );
        assert!(windows.is_empty());
    }
}
