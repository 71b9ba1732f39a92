//! The shapes most of Limitador's expressions take, recognized when a limits file loads and
//! answered without CEL: an entry of a descriptor (`descriptors[0]['user_id']`,
//! `descriptors[0].user_id`) and its comparison with a literal (`descriptors[0]['method'] ==
//! 'GET'`, `!=`). CEL builds a context of every entry of the request for each call, which cost a
//! call more than the rest of its decision; these read one entry. Any other expression is
//! CEL's (`cel_limits`), and a test holds the two to the same answers.

/// One expression answered without CEL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shortcut {
    /// `descriptors[index][key]`: the entry's value.
    Entry(EntryOf),
    /// `descriptors[index][key] == value` (`!=` when `equal` is false).
    Compare {
        entry: EntryOf,
        value: String,
        equal: bool,
    },
}

/// An entry of a descriptor, by the descriptor's place in the request and the entry's key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryOf {
    index: usize,
    key: String,
}

impl EntryOf {
    /// The entry's value in `descriptors` (the last of its key, as CEL's map of them keeps);
    /// `None` where CEL fails: no such descriptor or entry.
    fn read<'a>(&self, descriptors: &[Vec<(&'a str, &'a str)>]) -> Option<&'a str> {
        descriptors
            .get(self.index)?
            .iter()
            .rev()
            .find(|(key, _)| *key == self.key)
            .map(|(_, value)| *value)
    }
}

impl Shortcut {
    /// The shortcut of `source`, when it has one of the shapes.
    pub fn of(source: &str) -> Option<Shortcut> {
        let source = source.trim();
        if let Some(entry) = entry(source) {
            return Some(Shortcut::Entry(entry));
        }
        for (operator, equal) in [("==", true), ("!=", false)] {
            let Some((left, right)) = source.split_once(operator) else {
                continue;
            };
            let (left, right) = (left.trim(), right.trim());
            let (entry, value) = match (entry(left), literal(right)) {
                (Some(entry), Some(value)) => (entry, value),
                _ => (entry(right)?, literal(left)?),
            };
            return Some(Shortcut::Compare {
                entry,
                value: value.to_string(),
                equal,
            });
        }
        None
    }

    /// The expression's value as a variable's text (an entry's value; a comparison's `true`
    /// or `false`); `None` where CEL fails (no such entry).
    pub fn text(&self, descriptors: &[Vec<(&str, &str)>]) -> Option<String> {
        match self {
            Shortcut::Entry(entry) => entry.read(descriptors).map(str::to_string),
            Shortcut::Compare { entry, .. } => entry
                .read(descriptors)
                .map(|_| self.holds(descriptors).to_string()),
        }
    }

    /// Whether a comparison holds on `descriptors`: false where CEL fails (no such entry),
    /// and for an entry (not a boolean).
    pub fn holds(&self, descriptors: &[Vec<(&str, &str)>]) -> bool {
        match self {
            Shortcut::Compare {
                entry,
                value,
                equal,
            } => entry
                .read(descriptors)
                .is_some_and(|found| (found == value) == *equal),
            Shortcut::Entry(_) => false,
        }
    }
}

/// `descriptors[N]['key']`, `descriptors[N]["key"]` or `descriptors[N].key`.
fn entry(text: &str) -> Option<EntryOf> {
    let rest = text.strip_prefix("descriptors[")?;
    let (index, rest) = rest.split_once(']')?;
    if index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let index = index.parse().ok()?;
    let key = if let Some(field) = rest.strip_prefix('.') {
        let mut bytes = field.bytes();
        let starts = bytes
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_');
        (starts && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')).then_some(field)?
    } else {
        literal(rest.strip_prefix('[')?.strip_suffix(']')?)?
    };
    Some(EntryOf {
        index,
        key: key.to_string(),
    })
}

/// A quoted string without escapes or raw and byte prefixes: `'GET'` or `"GET"`.
fn literal(text: &str) -> Option<&str> {
    let quote = text.chars().next().filter(|c| *c == '\'' || *c == '"')?;
    let inner = text.strip_prefix(quote)?.strip_suffix(quote)?;
    let plain = !inner.contains(quote) && !inner.contains('\\') && !text.starts_with("'''");
    plain.then_some(inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cel_limits::Bindings;
    use cel::objects::Value;
    use cel::Program;

    #[test]
    fn recognizes_the_shapes_and_nothing_else() {
        let entry = |index, key: &str| EntryOf {
            index,
            key: key.into(),
        };
        assert_eq!(
            Shortcut::of("descriptors[0]['user_id']"),
            Some(Shortcut::Entry(entry(0, "user_id")))
        );
        assert_eq!(
            Shortcut::of(" descriptors[1].user "),
            Some(Shortcut::Entry(entry(1, "user")))
        );
        assert_eq!(
            Shortcut::of("descriptors[0][\"req.method\"] != 'GET'"),
            Some(Shortcut::Compare {
                entry: entry(0, "req.method"),
                value: "GET".into(),
                equal: false
            })
        );
        assert_eq!(
            Shortcut::of("'GET' == descriptors[0]['m']"),
            Some(Shortcut::Compare {
                entry: entry(0, "m"),
                value: "GET".into(),
                equal: true
            })
        );
        for other in [
            "descriptors[0]['a'] + 'x'",
            "descriptors[0]['a'] == 'x' && true",
            "descriptors[0]['a\\'b']",
            "descriptors[0]['a'] == 1",
            "descriptors[x]['a']",
            "descriptors[0].a.b",
            "size(descriptors) == 1",
            "descriptors[0]['a'] == r'x'",
        ] {
            assert_eq!(Shortcut::of(other), None, "{other}");
        }
    }

    /// A small generator, so that the comparison with CEL covers many requests.
    struct Lcg(u64);

    impl Lcg {
        fn below(&mut self, n: u64) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (self.0 >> 33) % n
        }
    }

    #[test]
    fn answers_as_cel_does() {
        let keys = ["a", "b", "req.method"];
        let values = ["x", "y", "GET"];
        let sources: Vec<String> = keys
            .iter()
            .flat_map(|key| {
                (0..2).flat_map(move |index| {
                    let mut found = vec![format!("descriptors[{index}]['{key}']")];
                    for value in values {
                        found.push(format!("descriptors[{index}]['{key}'] == '{value}'"));
                        found.push(format!("descriptors[{index}][\"{key}\"] != \"{value}\""));
                    }
                    found
                })
            })
            .collect();
        let mut rng = Lcg(7);
        for _ in 0..300 {
            let descriptors: Vec<Vec<(&str, &str)>> = (0..rng.below(3))
                .map(|_| {
                    (0..rng.below(4))
                        .map(|_| {
                            let key = keys[rng.below(3) as usize];
                            (key, values[rng.below(3) as usize])
                        })
                        .collect()
                })
                .collect();
            let bindings = Bindings::of(descriptors.iter().map(|d| d.iter().copied()));
            for source in &sources {
                let shortcut = Shortcut::of(source).expect("a shortcut");
                let by_cel = Program::compile(source)
                    .expect("CEL")
                    .execute(bindings.context());
                // As a condition: whether it is true; as a variable: its text.
                let holds = matches!(by_cel, Ok(Value::Bool(true)));
                assert_eq!(
                    shortcut.holds(&descriptors),
                    holds,
                    "{source} on {descriptors:?}"
                );
                let text = match by_cel {
                    Ok(Value::String(text)) => Some(text.to_string()),
                    Ok(Value::Bool(b)) => Some(b.to_string()),
                    _ => None,
                };
                assert_eq!(
                    shortcut.text(&descriptors),
                    text,
                    "{source} on {descriptors:?}"
                );
            }
        }
    }
}
