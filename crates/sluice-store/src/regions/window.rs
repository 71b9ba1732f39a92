//! What a replica knows of one window of one global limit's key: what its region may admit in
//! it (granted by home, plus what it admitted alone while cut off), what the region counted at
//! the last look, and whether a call to home is in flight. Shared by the request path (which
//! reads the allowance, and waits for the first answer of a window it has never seen) and the
//! task that tends the windows.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

use sluice_core::limit::{Hit, MICROS_PER_SECOND};
use sluice_core::modifier::global::Policy;

/// One window of one key.
pub struct Window {
    /// A hit of the key (its limit as configured).
    pub hit: Hit,
    pub policy: Policy,
    /// The window's start, in seconds (as the counter's key names it).
    pub start_s: u64,
    pub end_us: u64,
    /// What the region may admit while it reaches home: granted plus admitted alone.
    allowance: AtomicU64,
    /// What the region knows home granted it.
    granted: AtomicU64,
    /// What the region had admitted at the last look.
    count: AtomicU64,
    /// A call to home answered for this window, or failed: callers stop waiting.
    heard: AtomicBool,
    /// A call to home is in flight.
    calling: AtomicBool,
    /// Home had nothing left at its last answer: ask for no more.
    exhausted: AtomicBool,
    /// When a request last used the window.
    used_us: AtomicU64,
    heard_now: Notify,
}

impl Window {
    /// The window of `hit` starting at `start_s`, used now.
    pub fn new(hit: Hit, policy: Policy, start_s: u64, now_us: u64) -> Window {
        let end_us = (start_s * MICROS_PER_SECOND).saturating_add(hit.limit.period_us());
        Window {
            hit,
            policy,
            start_s,
            end_us,
            allowance: AtomicU64::new(0),
            granted: AtomicU64::new(0),
            count: AtomicU64::new(0),
            heard: AtomicBool::new(false),
            calling: AtomicBool::new(false),
            exhausted: AtomicBool::new(false),
            used_us: AtomicU64::new(now_us),
            heard_now: Notify::new(),
        }
    }

    /// The limit of the window.
    pub fn limit(&self) -> u64 {
        u64::from(self.hit.limit.requests_per_unit)
    }

    pub fn allowance(&self) -> u64 {
        self.allowance.load(Ordering::Acquire)
    }

    pub fn granted(&self) -> u64 {
        self.granted.load(Ordering::Acquire)
    }

    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Acquire)
    }

    /// What the region holds unspent, as last seen.
    pub fn unspent(&self) -> u64 {
        self.allowance().saturating_sub(self.count())
    }

    pub fn exhausted(&self) -> bool {
        self.exhausted.load(Ordering::Acquire)
    }

    pub fn used_us(&self) -> u64 {
        self.used_us.load(Ordering::Relaxed)
    }

    /// A request uses the window at `now_us`.
    pub fn touch(&self, now_us: u64) {
        self.used_us.fetch_max(now_us, Ordering::Relaxed);
    }

    /// What the region holds, as its Redis or home says: each only rises.
    pub fn raise(&self, granted: u64, allowance: u64) {
        self.granted.fetch_max(granted, Ordering::AcqRel);
        self.allowance.fetch_max(allowance, Ordering::AcqRel);
    }

    /// What the region had admitted, as its Redis counted.
    pub fn counted(&self, count: u64) {
        self.count.fetch_max(count, Ordering::AcqRel);
    }

    /// Home answered with `used` of the limit taken or admitted: no more to ask for once it is
    /// all.
    pub fn home_used(&self, used: u64) {
        if used >= self.limit() {
            self.exhausted.store(true, Ordering::Release);
        }
    }

    /// Claims the one call to home of the window; false when one is in flight.
    pub fn start_call(&self) -> bool {
        !self.calling.swap(true, Ordering::AcqRel)
    }

    /// The call to home ended (answered or not): waiting callers go on.
    pub fn end_call(&self) {
        self.calling.store(false, Ordering::Release);
        self.hear();
    }

    /// The region holds something of the window, or home answered: callers go on.
    pub fn hear(&self) {
        self.heard.store(true, Ordering::Release);
        self.heard_now.notify_waiters();
    }

    pub fn heard(&self) -> bool {
        self.heard.load(Ordering::Acquire)
    }

    /// Waits up to `wait` for the window's first call to home to end.
    pub async fn first_heard(&self, wait: Duration) {
        let deadline = tokio::time::Instant::now() + wait;
        while !self.heard() {
            let notified = self.heard_now.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.heard() {
                return;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return;
            }
        }
    }

    /// How much to ask home for: what tops the region's unspent holding up to a chunk, once it
    /// is down to half of one (nothing when home has none left).
    pub fn wanted(&self) -> u64 {
        let chunk = u64::from(self.policy.chunk);
        let unspent = self.unspent();
        if self.exhausted() || unspent * 2 > chunk {
            0
        } else {
            chunk - unspent.min(chunk)
        }
    }

    /// Whether the region admitted past its allowance (alone, while cut off): home must be
    /// told.
    pub fn admitted_alone(&self) -> bool {
        self.count() > self.allowance()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::limit::{Limit, Role, Unit};

    fn window() -> Window {
        let hit = Hit {
            key: "d_k_v_".into(),
            limit: Limit::fixed_window(1000, Unit::Minute),
            cost: 1,
            role: Role::Enforced,
            joins_previous: false,
            lease: None,
        };
        let policy = Policy {
            chunk: 100,
            regions: 3,
            cut_off_share: None,
        };
        Window::new(hit, policy, 60, 60_000_000)
    }

    #[test]
    fn a_region_tops_up_to_a_chunk_once_half_of_it_is_spent() {
        let window = window();
        assert_eq!(window.end_us, 120_000_000);
        assert_eq!(window.wanted(), 100, "nothing held: a whole chunk");
        window.raise(100, 100);
        window.counted(40);
        assert_eq!(window.wanted(), 0, "60 of 100 unspent");
        window.counted(50);
        assert_eq!(window.wanted(), 50, "half spent: topped up to a chunk");
        window.raise(150, 150);
        window.raise(120, 120);
        assert_eq!(window.allowance(), 150, "a slower answer never lowers it");
        window.home_used(1000);
        window.counted(150);
        assert_eq!(window.wanted(), 0, "home has nothing left");
        window.counted(170);
        assert!(window.admitted_alone());
    }

    #[tokio::test]
    async fn callers_wait_for_the_first_answer_only() {
        let window = std::sync::Arc::new(window());
        assert!(window.start_call());
        assert!(!window.start_call(), "one call at a time");
        let waiting = window.clone();
        let waiter = tokio::spawn(async move { waiting.first_heard(Duration::from_secs(5)).await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        window.end_call();
        tokio::time::timeout(Duration::from_secs(1), waiter)
            .await
            .expect("woken at once")
            .expect("joined");
        let started = std::time::Instant::now();
        window.first_heard(Duration::from_secs(5)).await;
        assert!(started.elapsed() < Duration::from_millis(50));
    }
}
