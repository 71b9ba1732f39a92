//! Store keys, built in one place. A descriptor's key is envoyproxy/ratelimit's cache key
//! without its window suffix: `domain_key1_value1_key2_value2_`. The Redis store appends the
//! window start for fixed windows (so the two servers share counters) and the memory store
//! keeps the window in the state.

/// The key of a descriptor counted under `entries` (key, value) in `domain`.
pub fn descriptor_key<'a, I>(domain: &str, entries: I) -> String
where
    I: IntoIterator<Item = (&'a str, &'a str)>,
{
    let entries = entries.into_iter();
    let mut key = String::with_capacity(domain.len() + 1 + 32 * entries.size_hint().0);
    key.push_str(domain);
    key.push('_');
    for (name, value) in entries {
        key.push_str(name);
        key.push('_');
        key.push_str(value);
        key.push('_');
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_reference_layout() {
        let key = descriptor_key("domain", [("key1", "value1"), ("key2", "value2")]);
        assert_eq!(key, "domain_key1_value1_key2_value2_");
    }
}
