//! How an override is named: its descriptor's id (the domain, then each entry's key and
//! value, between separators no descriptor may hold), and its record's id (the descriptor's,
//! then the name of the limit it replaces, if one). The request path builds a descriptor's id
//! to look it up; the store keeps a record under its record id.

/// Before each entry.
const ENTRY: char = '\u{1f}';
/// Between an entry's key and its value.
const VALUE: char = '\u{1e}';
/// Before the name of the limit a record replaces.
const NAME: char = '\u{1d}';

/// Whether `text` may stand in an id: no control character (the separators are ones).
pub(crate) fn is_clean(text: &str) -> bool {
    !text.chars().any(char::is_control)
}

/// The id of the descriptor of `entries` (key, value) in `domain`.
pub fn descriptor_id<'a>(
    domain: &str,
    entries: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> String {
    let mut id = Vec::with_capacity(domain.len() + 48);
    write_id(domain, entries, |bytes| id.extend_from_slice(bytes));
    // Only whole strings and whole separators were written.
    String::from_utf8(id).unwrap_or_default()
}

/// Writes the bytes of the id of `entries` in `domain` to `sink`, piece by piece (a hash
/// takes them without the id being built).
pub(crate) fn write_id<'a>(
    domain: &str,
    entries: impl IntoIterator<Item = (&'a str, &'a str)>,
    mut sink: impl FnMut(&[u8]),
) {
    let mut entry = [0; 4];
    let entry = ENTRY.encode_utf8(&mut entry).as_bytes();
    let mut value = [0; 4];
    let value = VALUE.encode_utf8(&mut value).as_bytes();
    sink(domain.as_bytes());
    for (k, v) in entries {
        sink(entry);
        sink(k.as_bytes());
        sink(value);
        sink(v.as_bytes());
    }
}

/// The descriptor id a record id names (the record id without its name).
pub fn descriptor_id_of(record_id: &str) -> &str {
    record_id.split(NAME).next().unwrap_or(record_id)
}

/// The name of the limit a record id replaces (`None`: every limit).
pub fn name_of_record(record_id: &str) -> Option<&str> {
    record_id.split_once(NAME).map(|(_, name)| name)
}

/// The domain a record id names.
pub fn domain_of_record(record_id: &str) -> &str {
    record_id.split([ENTRY, NAME]).next().unwrap_or(record_id)
}

/// The id of the record of an override of `descriptor_id`, replacing the limit `name` (or
/// every limit of the rule, without one).
pub fn record_id(descriptor_id: &str, name: Option<&str>) -> String {
    match name {
        Some(name) => format!("{descriptor_id}{NAME}{name}"),
        None => descriptor_id.to_string(),
    }
}

/// What the record ids of `domain` start with.
pub fn record_prefix(domain: &str) -> String {
    format!("{domain}{ENTRY}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_keep_entries_apart_that_underscores_would_join() {
        let a = descriptor_id("rl", [("a_b", "c")]);
        let b = descriptor_id("rl", [("a", "b_c")]);
        assert_ne!(a, b);
    }

    #[test]
    fn a_record_id_gives_back_its_descriptor_and_domain() {
        let descriptor = descriptor_id("rl", [("api_key", "acme"), ("tier", "gold")]);
        let record = record_id(&descriptor, Some("per_minute"));
        assert_eq!(descriptor_id_of(&record), descriptor);
        assert_eq!(domain_of_record(&record), "rl");
        assert_eq!(descriptor_id_of(&descriptor), descriptor);
        assert_eq!(name_of_record(&record), Some("per_minute"));
        assert_eq!(name_of_record(&descriptor), None);
    }

    #[test]
    fn a_domain_prefix_is_no_other_domain_s() {
        let id = descriptor_id("rl2", [("k", "v")]);
        assert!(!id.starts_with(&record_prefix("rl")));
        assert!(id.starts_with(&record_prefix("rl2")));
    }
}
