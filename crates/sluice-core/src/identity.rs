//! What names a descriptor's counter, whatever the store: the reference's descriptor key
//! (`domain_key_value_key2_value2_`, byte-identical to envoyproxy/ratelimit's, so both servers
//! share counters during a migration) and, among a descriptor's several limits, each one's.
//! A hit carries it (`Hit::key`); each store derives its own keys from it (`sluice-store`'s
//! `key`: a Redis key's prefix, window and shape).

use std::fmt::Write;

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

/// The key of the limit at `index` among a descriptor's several limits (`rate_limits`): the
/// descriptor's key and `#<index>_`. A descriptor with one limit keeps its key as it is.
pub fn limit_key(descriptor_key: &str, index: usize) -> String {
    let mut key = String::with_capacity(descriptor_key.len() + 4);
    key.push_str(descriptor_key);
    // Writing to a String cannot fail.
    let _ = write!(key, "#{index}_");
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_descriptor_is_named_as_the_reference_names_it_and_a_limit_among_several_by_its_slot() {
        let key = descriptor_key("domain", [("key1", "value1"), ("key2", "value2")]);
        assert_eq!(key, "domain_key1_value1_key2_value2_");
        assert_eq!(limit_key(&key, 1), "domain_key1_value1_key2_value2_#1_");
    }
}
