//! A replica's link to home, as its calls find it: joined, or cut off since the first call
//! that failed until the first that is answered (each transition logged once and counted),
//! with the calls' latency, what home granted, and the time spent cut off.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use metrics::Label;

use crate::series::Series;
use crate::StoreError;

/// The weight of the last call in the latency's moving average, in 1/16ths.
const LATENCY_WEIGHT: u64 = 4;

#[derive(Default)]
pub struct Link {
    cut: AtomicBool,
    cut_since_us: AtomicU64,
    /// Time cut off, before the current cut.
    cut_us: AtomicU64,
    cut_offs: AtomicU64,
    joins: AtomicU64,
    answered: AtomicU64,
    failed: AtomicU64,
    /// A moving average of the calls' round trips.
    latency_us: AtomicU64,
    refills: AtomicU64,
    granted: AtomicU64,
    forgotten: AtomicU64,
}

impl Link {
    pub fn cut_off(&self) -> bool {
        self.cut.load(Ordering::Acquire)
    }

    /// A call to home was answered after `took`.
    pub fn answered(&self, took: Duration, now_us: u64) {
        self.answered.fetch_add(1, Ordering::Relaxed);
        let took_us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let before = self.latency_us.load(Ordering::Relaxed);
        let average = if before == 0 {
            took_us
        } else {
            (before * (16 - LATENCY_WEIGHT) + took_us * LATENCY_WEIGHT) / 16
        };
        self.latency_us.store(average, Ordering::Relaxed);
        if self.cut.swap(false, Ordering::AcqRel) {
            let since = self.cut_since_us.load(Ordering::Acquire);
            let lasted_us = now_us.saturating_sub(since);
            self.cut_us.fetch_add(lasted_us, Ordering::Relaxed);
            self.joins.fetch_add(1, Ordering::Relaxed);
            tracing::info!(
                cut_off_ms = lasted_us / 1_000,
                "global limits: home answers again; what was admitted alone is reported"
            );
        }
    }

    /// A call to home failed with `error`.
    pub fn failed(&self, error: &StoreError, now_us: u64) {
        self.failed.fetch_add(1, Ordering::Relaxed);
        if !self.cut.swap(true, Ordering::AcqRel) {
            self.cut_since_us.store(now_us, Ordering::Release);
            self.cut_offs.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                "global limits: cut off from home ({error}); spending what the region holds, then its share"
            );
        }
    }

    /// Home granted `amount` more.
    pub fn granted(&self, amount: u64) {
        if amount > 0 {
            self.refills.fetch_add(1, Ordering::Relaxed);
            self.granted.fetch_add(amount, Ordering::Relaxed);
        }
    }

    /// A full table forgot `count` idle windows.
    pub fn forgot(&self, count: usize) {
        if self.forgotten.fetch_add(count as u64, Ordering::Relaxed) == 0 {
            tracing::warn!(
                "global limits: as many windows followed as a replica keeps; the idlest are forgotten and read again at their next call"
            );
        }
    }

    /// The series, labelled with the `region`.
    pub fn report(&self, series: &Series, region: &str, windows: u64, unspent: u64, now_us: u64) {
        let labels = || vec![Label::new("region", region.to_string())];
        let with = |name: &'static str, value: &'static str| {
            let mut labels = labels();
            labels.push(Label::new(name, value));
            labels
        };
        let cut = self.cut_off();
        let current_us = if cut {
            now_us.saturating_sub(self.cut_since_us.load(Ordering::Acquire))
        } else {
            0
        };
        let cut_us = self.cut_us.load(Ordering::Relaxed) + current_us;
        series
            .gauge("sluice_global_unspent", labels())
            .set(unspent as f64);
        series
            .gauge("sluice_global_windows", labels())
            .set(windows as f64);
        series
            .gauge("sluice_global_cut_off", labels())
            .set(f64::from(u8::from(cut)));
        series
            .gauge("sluice_global_link_latency_seconds", labels())
            .set(self.latency_us.load(Ordering::Relaxed) as f64 / 1e6);
        series
            .counter("sluice_global_cut_off_seconds_total", labels())
            .absolute(cut_us / 1_000_000);
        for (to, count) in [("cut_off", &self.cut_offs), ("joined", &self.joins)] {
            series
                .counter("sluice_global_link_transitions_total", with("to", to))
                .absolute(count.load(Ordering::Relaxed));
        }
        for (outcome, count) in [("answered", &self.answered), ("failed", &self.failed)] {
            series
                .counter("sluice_global_link_calls_total", with("outcome", outcome))
                .absolute(count.load(Ordering::Relaxed));
        }
        series
            .counter("sluice_global_refills_total", labels())
            .absolute(self.refills.load(Ordering::Relaxed));
        series
            .counter("sluice_global_granted_total", labels())
            .absolute(self.granted.load(Ordering::Relaxed));
        series
            .counter("sluice_global_windows_forgotten_total", labels())
            .absolute(self.forgotten.load(Ordering::Relaxed));
    }
}
