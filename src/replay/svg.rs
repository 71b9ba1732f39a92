//! The picture of a replay (`--svg FILE`): per rule, admitted and denied calls over time under
//! both sides, as four lines in one panel. Each line carries its counts (`data-counts`) and
//! its series (`data-series`), so that tools and tests can read the numbers back.

use std::fmt::Write;

use super::report::{Bucket, Report, BUCKETS};

const WIDTH: usize = 760;
const PANEL: usize = 150;
const PLOT: usize = 110;
const LEFT: usize = 40;

/// The four series: name, colour, dashes, and which count of a bucket it draws.
type Series = (&'static str, &'static str, &'static str, fn(&Bucket) -> u64);

const SERIES: [Series; 4] = [
    ("before-admitted", "#2b8a3e", "4 3", |b| b.before.admitted),
    ("before-denied", "#c92a2a", "4 3", |b| b.before.denied),
    ("after-admitted", "#2b8a3e", "", |b| b.after.admitted),
    ("after-denied", "#c92a2a", "", |b| b.after.denied),
];

/// The report as an SVG document.
pub fn svg(report: &Report) -> String {
    let height = 40 + PANEL * report.rules.len().max(1);
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        out,
        r#"<text x="{LEFT}" y="20">{} calls, compared with {}: dashed before, solid after; green admitted, red denied</text>"#,
        report.calls,
        escape(&report.baseline)
    );
    for (index, rule) in report.rules.iter().enumerate() {
        let top = 40 + index * PANEL;
        let most = rule
            .timeline
            .iter()
            .flat_map(|b| SERIES.iter().map(move |(_, _, _, count)| count(b)))
            .max()
            .unwrap_or(0)
            .max(1);
        let _ = writeln!(
            out,
            r#"<g data-rule="{}"><text x="{LEFT}" y="{}">{} ({} calls; newly denied {}, newly admitted {})</text>"#,
            escape(&rule.rule),
            top + 12,
            escape(&rule.rule),
            rule.calls,
            rule.compared.newly_denied,
            rule.compared.newly_admitted
        );
        let base = top + 20 + PLOT;
        let _ = writeln!(
            out,
            r##"<line x1="{LEFT}" y1="{base}" x2="{}" y2="{base}" stroke="#868e96"/><text x="4" y="{}">{most}</text>"##,
            WIDTH - 10,
            top + 30
        );
        for (name, colour, dashes, count) in SERIES {
            let counts: Vec<u64> = rule.timeline.iter().map(count).collect();
            let points: Vec<String> = counts
                .iter()
                .enumerate()
                .map(|(i, &c)| {
                    let x = LEFT + i * (WIDTH - LEFT - 10) / (BUCKETS - 1);
                    let y = base - (c as usize * PLOT) / most as usize;
                    format!("{x},{y}")
                })
                .collect();
            let counts: Vec<String> = counts.iter().map(u64::to_string).collect();
            let _ = writeln!(
                out,
                r#"<polyline data-series="{name}" data-counts="{}" points="{}" fill="none" stroke="{colour}" stroke-dasharray="{dashes}" stroke-width="1.5"/>"#,
                counts.join(","),
                points.join(" ")
            );
        }
        out.push_str("</g>\n");
    }
    out.push_str("</svg>\n");
    out
}

/// Text as XML character data.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}
