//! The manual's links: every relative link in README.md, BENCHMARKS.md and `docs/` names a
//! file of the repository and, when it has a `#fragment`, a heading of that page (as GitHub
//! makes anchors from headings), so a renamed section or page cannot leave a dead link.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The manual's pages, relative to the repository's root.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![PathBuf::from("README.md"), PathBuf::from("BENCHMARKS.md")];
    let docs = std::fs::read_dir(root().join("docs")).expect("docs/ is readable");
    let mut topics: Vec<PathBuf> = docs
        .filter_map(|entry| entry.ok())
        .map(|entry| Path::new("docs").join(entry.file_name()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    topics.sort();
    pages.extend(topics);
    pages
}

/// GitHub's anchor of a heading: lower case, punctuation other than `-` and `_` dropped,
/// spaces made `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a page's headings (outside fenced code blocks, where `#` is a comment).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut in_code = false;
    let mut found = BTreeSet::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        let level = line.chars().take_while(|&c| c == '#').count();
        if level > 0 && line[level..].starts_with(' ') {
            found.insert(anchor(&line[level..]));
        }
    }
    found
}

/// The targets of a page's inline links `[text](target)`.
fn link_targets(text: &str) -> Vec<&str> {
    text.match_indices("](")
        .filter_map(|(at, _)| {
            let rest = &text[at + 2..];
            let end = rest.find(')')?;
            let target = &rest[..end];
            (!target.contains(char::is_whitespace)).then_some(target)
        })
        .collect()
}

/// What is wrong with one link of `page`, if anything.
fn dead_link(page: &Path, target: &str) -> Option<String> {
    if target.contains("://") || target.starts_with("mailto:") {
        return None;
    }
    let (path, fragment) = target.split_once('#').unwrap_or((target, ""));
    let file = if path.is_empty() {
        page.to_path_buf()
    } else {
        page.parent().unwrap_or(Path::new("")).join(path)
    };
    let on_disk = root().join(&file);
    if !on_disk.exists() {
        return Some(format!(
            "{}: {target}: no file {}",
            page.display(),
            file.display()
        ));
    }
    if fragment.is_empty() || on_disk.extension().is_none_or(|ext| ext != "md") {
        return None;
    }
    let text = std::fs::read_to_string(&on_disk).ok()?;
    (!anchors(&text).contains(fragment))
        .then(|| format!("{}: {target}: no heading #{fragment}", page.display()))
}

#[test]
fn every_relative_link_of_the_manual_reaches_a_page_and_a_heading() {
    let mut dead = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let text = std::fs::read_to_string(root().join(&page)).expect("a page of the manual");
        for target in link_targets(&text) {
            checked += 1;
            dead.extend(dead_link(&page, target));
        }
    }
    assert!(
        checked > 50,
        "only {checked} links found: is the parser broken?"
    );
    assert!(dead.is_empty(), "dead links:\n{}", dead.join("\n"));
}

#[test]
fn a_heading_anchor_is_made_as_github_makes_it() {
    assert_eq!(
        anchor(" Recording (`serve --record FILE`)"),
        "recording-serve---record-file"
    );
    assert_eq!(
        anchor("Costs reported after the response (debt)"),
        "costs-reported-after-the-response-debt"
    );
    let page = "# Top\n```yaml\n# not a heading\n```\n## Where leasing is refused\n";
    let found = anchors(page);
    assert!(found.contains("where-leasing-is-refused"));
    assert!(!found.contains("not-a-heading"));
    assert_eq!(
        dead_link(Path::new("docs/hot-keys.md"), "redis.md#no-such-heading"),
        Some("docs/hot-keys.md: redis.md#no-such-heading: no heading #no-such-heading".into())
    );
}
