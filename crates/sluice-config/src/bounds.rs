//! What a configuration file may be, checked in linear time before serde_yaml parses it:
//! libyaml's scanner takes time quadratic in flow nesting (200 KB of `[[[...]]]` took 17 s of
//! CPU, 800 KB of nested flow maps 18 s), so a file larger than `MAX_FILE_BYTES` or nesting
//! deeper than `MAX_DEPTH` is refused before it is parsed, by the server and by `check-config`.

use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::Marker;

/// The most levels of maps and lists a file may nest (a descriptor tree 10 levels deep, in
/// flow style, uses 20).
pub const MAX_DEPTH: usize = 64;

/// The largest file loaded: 16 MiB (a config of 100,000 limits is about 10 MB).
pub const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// Where `text` nests deeper than `MAX_DEPTH` (line, column), if it does.
pub fn too_deep(text: &str) -> Option<(usize, usize)> {
    let mut walker = Depth::default();
    // yaml-rust2 scans in linear time; a syntax error is left to serde_yaml to report, except
    // its own nesting limit (255), which is past ours anyway.
    let scanned = Parser::new_from_str(text).load(&mut walker, false);
    if walker.first_too_deep.is_none() {
        if let Err(error) = scanned {
            if error.info().contains("recursion limit") {
                let mark = error.marker();
                return Some((mark.line(), mark.col() + 1));
            }
        }
    }
    walker.first_too_deep
}

/// Counts the open maps and lists while the parser walks the document.
#[derive(Default)]
struct Depth {
    depth: usize,
    first_too_deep: Option<(usize, usize)>,
}

impl MarkedEventReceiver for Depth {
    fn on_event(&mut self, event: Event, mark: Marker) {
        match event {
            Event::MappingStart(..) | Event::SequenceStart(..) => {
                self.depth += 1;
                if self.depth > MAX_DEPTH && self.first_too_deep.is_none() {
                    self.first_too_deep = Some((mark.line(), mark.col() + 1));
                }
            }
            Event::MappingEnd | Event::SequenceEnd => self.depth = self.depth.saturating_sub(1),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deep_nesting_is_found_where_it_passes_the_limit() {
        let fine = format!(
            "a: {}{}\n",
            "[".repeat(MAX_DEPTH - 1),
            "]".repeat(MAX_DEPTH - 1)
        );
        assert_eq!(too_deep(&fine), None);
        let deep = format!("a: {}{}\n", "[".repeat(100_000), "]".repeat(100_000));
        // Found past the limit (the scanner may look ahead of the events), quickly.
        let started = std::time::Instant::now();
        assert!(too_deep(&deep).is_some_and(|(line, column)| line == 1 && column > MAX_DEPTH));
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
        let block = (0..MAX_DEPTH + 1)
            .map(|level| format!("{}k{level}:\n", "  ".repeat(level)))
            .collect::<String>()
            + &"  ".repeat(MAX_DEPTH + 1)
            + "v: 1\n";
        assert!(too_deep(&block).is_some(), "block nesting counts too");
        let maps = format!(
            "a: {}1{}\n",
            "{b: ".repeat(MAX_DEPTH + 1),
            "}".repeat(MAX_DEPTH + 1)
        );
        assert!(too_deep(&maps).is_some());
    }
}
