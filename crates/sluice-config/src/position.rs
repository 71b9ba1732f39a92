//! Where each node of a YAML document stands (line, column), by key path
//! (`descriptors[1].rate_limit.unit`, the paths serde_yaml uses in its own errors), so that
//! errors found after parsing can still point at the line. Built only when an error needs it.

use std::collections::HashMap;

use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::Marker;

/// Key path -> (line, column), both 1-based.
#[derive(Debug, Default)]
pub struct Positions(HashMap<String, (usize, usize)>);

impl Positions {
    /// Indexes `text`; a document the parser refuses yields what was indexed before the fault.
    pub fn of(text: &str) -> Positions {
        let mut walker = Walker::default();
        // A syntax error was already reported by serde_yaml with its own position.
        let _ = Parser::new_from_str(text).load(&mut walker, false);
        walker.positions
    }

    /// The position of `path`, or of its nearest indexed ancestor.
    pub fn find(&self, path: &str) -> Option<(usize, usize)> {
        let mut path = path;
        loop {
            if let Some(position) = self.0.get(path) {
                return Some(*position);
            }
            path = &path[..path.rfind(['.', '['])?];
        }
    }
}

enum Frame {
    /// `placed` is false until the map's position is known: a block map's start mark lies
    /// past its first key, so the first key's position stands for the map.
    Map {
        path: String,
        key: Option<String>,
        placed: bool,
    },
    Seq {
        path: String,
        next_index: usize,
    },
}

#[derive(Default)]
struct Walker {
    stack: Vec<Frame>,
    positions: Positions,
}

impl Walker {
    /// Path of the node that starts now, recording it; `None` when the node is a mapping key.
    fn node_path(&mut self, scalar: Option<&str>, mark: Marker) -> Option<String> {
        // yaml-rust2 counts columns from 0, serde_yaml and editors from 1.
        let at = (mark.line(), mark.col() + 1);
        match self.stack.last_mut() {
            None => Some(String::new()),
            Some(Frame::Map { path, key, placed }) => match key.take() {
                Some(key) => Some(join(path, &key)),
                None => {
                    let name = scalar.unwrap_or("?").to_string();
                    if !*placed {
                        self.positions.0.insert(path.clone(), at);
                        *placed = true;
                    }
                    self.positions.0.insert(join(path, &name), at);
                    *key = Some(name);
                    None
                }
            },
            Some(Frame::Seq { path, next_index }) => {
                let item = format!("{path}[{next_index}]");
                *next_index += 1;
                self.positions.0.insert(item.clone(), at);
                Some(item)
            }
        }
    }
}

fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

impl MarkedEventReceiver for Walker {
    fn on_event(&mut self, event: Event, mark: Marker) {
        match event {
            Event::Scalar(value, ..) => {
                self.node_path(Some(&value), mark);
            }
            Event::MappingStart(..) => {
                let path = self.node_path(None, mark).unwrap_or_default();
                self.stack.push(Frame::Map {
                    path,
                    key: None,
                    placed: false,
                });
            }
            Event::SequenceStart(..) => {
                let path = self.node_path(None, mark).unwrap_or_default();
                self.stack.push(Frame::Seq {
                    path,
                    next_index: 0,
                });
            }
            Event::MappingEnd | Event::SequenceEnd => {
                self.stack.pop();
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_keys_and_list_items() {
        let text =
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: foo\n  - key: b\n";
        let positions = Positions::of(text);
        assert_eq!(positions.find("domain"), Some((1, 1)));
        assert_eq!(positions.find("descriptors[0]"), Some((3, 5)));
        assert_eq!(
            positions.find("descriptors[0].rate_limit.unit"),
            Some((5, 7))
        );
        assert_eq!(positions.find("descriptors[1].key"), Some((6, 5)));
        // An unindexed child falls back to its parent.
        assert_eq!(positions.find("descriptors[1].value"), Some((6, 5)));
    }
}
