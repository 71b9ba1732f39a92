//! Descriptor values with `*` wildcards: each `*` matches any run of characters (also none).

/// A value pattern from the config, such as `foo*`, `/api*v1` or `svc*ep*rpc`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    text: String,
}

impl Pattern {
    /// A pattern when `value` holds a `*`; `None` for a plain value.
    pub fn parse(value: &str) -> Option<Pattern> {
        value.contains('*').then(|| Pattern {
            text: value.to_string(),
        })
    }

    /// The pattern as written in the config.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether `value` matches the whole pattern.
    pub fn matches(&self, value: &str) -> bool {
        let mut parts = self.text.split('*');
        // `split` yields at least one part; a pattern always has two or more.
        let first = parts.next().unwrap_or_default();
        let Some(mut rest) = value.strip_prefix(first) else {
            return false;
        };
        let mut parts = parts.peekable();
        while let Some(part) = parts.next() {
            if parts.peek().is_none() {
                // The last part must end the value, after everything matched so far.
                return rest.len() >= part.len() && rest.ends_with(part);
            }
            match rest.find(part) {
                Some(at) => rest = &rest[at + part.len()..],
                None => return false,
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(pattern: &str, value: &str) -> bool {
        Pattern::parse(pattern).unwrap().matches(value)
    }

    #[test]
    fn suffix_middle_and_several_wildcards() {
        assert!(matches("foo*", "foo"));
        assert!(matches("foo*", "foobar"));
        assert!(!matches("foo*", "fo"));
        assert!(matches("bar*b", "barb"));
        assert!(matches("bar*b", "bar-xyz-b"));
        assert!(!matches("bar*b", "bar-xyz"));
        assert!(matches("foo*bar*baz", "foo1bar2baz"));
        assert!(matches("foo*bar*baz", "foobarbaz"));
        assert!(!matches("foo*bar*baz", "foobaz"));
        assert!(!matches("ab*ba", "aba"), "parts must not overlap");
        assert!(matches("*", ""));
    }

    #[test]
    fn plain_values_are_not_patterns() {
        assert!(Pattern::parse("plain").is_none());
    }
}
