//! Rendering a simulation: a text chart of admitted and rejected requests per time bucket, and
//! CSV of every decision.

use std::fmt::Write;

use crate::simulate::{DescriptorRun, Report};
use sluice_core::limit::MICROS_PER_SECOND;

/// Width of the longest bar, in characters.
const BAR_WIDTH: u64 = 50;

/// The report as text: per descriptor, a summary and one chart row per bucket; with requests
/// of several descriptors, first how many requests were admitted as a whole.
pub fn text(report: &Report) -> String {
    let mut out = String::new();
    if let Some(admitted) = report.requests_admitted {
        let total = report.runs.first().map_or(0, |run| run.decisions.len());
        let _ = writeln!(
            out,
            "requests of every descriptor together: {total} requests, {admitted} admitted \
             (a denied request charges none of its descriptors)\n"
        );
    }
    for run in &report.runs {
        let admitted = run.decisions.iter().filter(|d| d.admitted).count();
        let total = run.decisions.len();
        let _ = writeln!(out, "{}: {}", run.descriptor, run.limit);
        let left = run.decisions.last().map_or(0, |d| d.remaining);
        let _ = writeln!(
            out,
            "  {} requests, {} admitted, {} rejected, {} remaining at the end",
            total,
            admitted,
            total - admitted,
            left
        );
        write_events(&mut out, run);
        let _ = writeln!(out, "  {:>8}  {:>8}  {:>8}", "time", "admitted", "rejected");
        let rows = buckets(run, report.bucket_us, report.duration_us);
        let most = rows.iter().map(|(a, r)| a + r).max().unwrap_or(0).max(1);
        for (index, (admitted, rejected)) in rows.iter().enumerate() {
            let bar = |count: u64| (count * BAR_WIDTH).div_ceil(most) as usize;
            let _ = writeln!(
                out,
                "  {:>8}  {:>8}  {:>8}  {}{}",
                seconds(index as u64 * report.bucket_us),
                admitted,
                rejected,
                "#".repeat(bar(*admitted)),
                ".".repeat(bar(*rejected)),
            );
        }
        out.push('\n');
    }
    out
}

/// What the modifiers marked on requests, one line each: what, when, and the detail.
fn write_events(out: &mut String, run: &DescriptorRun) {
    for d in &run.decisions {
        if let Some(event) = &d.event {
            let _ = writeln!(
                out,
                "  {} at {}: {}",
                event.verb,
                seconds(d.time_us),
                event.detail
            );
        }
    }
}

/// Every decision as CSV.
pub fn csv(report: &Report) -> String {
    let mut out = String::from("descriptor,time_us,code,limit_remaining,duration_until_reset_s\n");
    for run in &report.runs {
        for d in &run.decisions {
            let code = if d.admitted { "OK" } else { "OVER_LIMIT" };
            let _ = writeln!(
                out,
                "{},{},{},{},{}",
                run.descriptor, d.time_us, code, d.remaining, d.reset_s
            );
        }
    }
    out
}

/// (admitted, rejected) per bucket of `bucket_us`.
fn buckets(run: &DescriptorRun, bucket_us: u64, duration_us: u64) -> Vec<(u64, u64)> {
    let count = duration_us.div_ceil(bucket_us).max(1) as usize;
    let mut rows = vec![(0, 0); count];
    for d in &run.decisions {
        let row = &mut rows[((d.time_us / bucket_us) as usize).min(count - 1)];
        if d.admitted {
            row.0 += 1;
        } else {
            row.1 += 1;
        }
    }
    rows
}

/// `12s`, or `12.5s` when not whole.
fn seconds(us: u64) -> String {
    let whole = us / MICROS_PER_SECOND;
    let fraction = format!("{:06}", us % MICROS_PER_SECOND);
    let fraction = fraction.trim_end_matches('0');
    if fraction.is_empty() {
        format!("{whole}s")
    } else {
        format!("{whole}.{fraction}s")
    }
}
