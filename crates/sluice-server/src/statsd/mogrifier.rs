//! DogStatsD mogrifiers (`USE_DOG_STATSD_MOGRIFIERS`), as the reference's: each turns a stat
//! name that matches its pattern into another name and tags, `$1`, `$2`... standing for the
//! pattern's groups. The first mogrifier that matches applies; a name none matches is sent as
//! it is.

use regex::{Captures, Regex};

/// One mogrifier: `DOG_STATSD_MOGRIFIER_<KEY>_PATTERN`, `_NAME` and `_TAGS`.
#[derive(Debug, Clone)]
pub struct Mogrifier {
    key: String,
    pattern: Regex,
    name: String,
    /// (tag, value template), in the order written.
    tags: Vec<(String, String)>,
}

impl PartialEq for Mogrifier {
    fn eq(&self, other: &Mogrifier) -> bool {
        self.key == other.key
            && self.pattern.as_str() == other.pattern.as_str()
            && self.name == other.name
            && self.tags == other.tags
    }
}

impl Eq for Mogrifier {}

impl Mogrifier {
    /// The mogrifier `key`, its three variables read through `var` (the environment); every
    /// error names the variable, as the reference's do.
    pub fn from_vars(key: &str, var: impl Fn(&str) -> Option<String>) -> Result<Mogrifier, String> {
        let name_of = |part: &str| format!("DOG_STATSD_MOGRIFIER_{key}_{part}");
        // A variable that must be set and not empty.
        let required = |part: &str| {
            var(&name_of(part))
                .filter(|v| !v.is_empty())
                .ok_or_else(|| {
                    format!(
                        "no {part} specified for mogrifier {key} ({})",
                        name_of(part)
                    )
                })
        };
        let pattern = required("PATTERN")?;
        let pattern = Regex::new(&pattern)
            .map_err(|e| format!("failed to compile pattern for {key}: {pattern}: {e}"))?;
        let name = required("NAME")?;
        let mut tags = Vec::new();
        for entry in var(&name_of("TAGS")).unwrap_or_default().split(',') {
            let entry = entry.trim();
            if entry.is_empty() {
                continue;
            }
            let (tag, value) = entry
                .split_once(':')
                .ok_or_else(|| format!("{}: '{entry}' is not tag:value", name_of("TAGS")))?;
            if tag.is_empty() || value.is_empty() {
                return Err(format!(
                    "{}: '{entry}' needs a tag and a value",
                    name_of("TAGS")
                ));
            }
            tags.push((tag.to_string(), value.to_string()));
        }
        Ok(Mogrifier {
            key: key.to_string(),
            pattern,
            name,
            tags,
        })
    }
}

/// The name and `tag:value`s the first of `mogrifiers` matching `name` makes of it, or `None`
/// when none matches.
pub fn mogrify(mogrifiers: &[Mogrifier], name: &str) -> Option<(String, Vec<String>)> {
    mogrifiers.iter().find_map(|m| {
        let groups = m.pattern.captures(name)?;
        let tags = m
            .tags
            .iter()
            .map(|(tag, value)| format!("{tag}:{}", substitute(value, &groups)))
            .collect();
        Some((substitute(&m.name, &groups), tags))
    })
}

/// `template` with each `$N` replaced by group N of `groups` (empty when the group did not
/// take part); a `$N` past the last group stays as written.
fn substitute(template: &str, groups: &Captures<'_>) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        let index: Option<usize> = after[..digits].parse().ok();
        match index.filter(|&i| i < groups.len()) {
            Some(i) => out.push_str(groups.get(i).map_or("", |g| g.as_str())),
            None => out.push_str(&rest[at..at + 1 + digits]),
        }
        rest = &after[digits..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mogrifier(key: &str, pattern: &str, name: &str, tags: &str) -> Mogrifier {
        let vars = [
            (format!("DOG_STATSD_MOGRIFIER_{key}_PATTERN"), pattern),
            (format!("DOG_STATSD_MOGRIFIER_{key}_NAME"), name),
            (format!("DOG_STATSD_MOGRIFIER_{key}_TAGS"), tags),
        ];
        Mogrifier::from_vars(key, |v| {
            vars.iter()
                .find(|(k, _)| k == v)
                .map(|(_, value)| value.to_string())
        })
        .unwrap()
    }

    #[test]
    fn the_references_readme_examples_mogrify_as_documented() {
        let domain = mogrifier(
            "DOMAIN",
            r"^some\.original\.metric\.(.*)$",
            "some.original.metric",
            "domain:$1",
        );
        let hits = mogrifier(
            "HITS",
            r"^ratelimit\.service\.rate_limit\.([^.]+)\.(.*)\.([^.]+)$",
            "ratelimit.service.rate_limit.$3",
            "domain:$1,descriptor:$2",
        );
        let both = [domain, hits];
        assert_eq!(
            mogrify(&both, "some.original.metric.TAG"),
            Some(("some.original.metric".into(), vec!["domain:TAG".into()]))
        );
        assert_eq!(
            mogrify(
                &both,
                "ratelimit.service.rate_limit.mongo_cps.database_users.total_hits"
            ),
            Some((
                "ratelimit.service.rate_limit.total_hits".into(),
                vec![
                    "domain:mongo_cps".into(),
                    "descriptor:database_users".into()
                ]
            ))
        );
        assert_eq!(
            mogrify(&both, "ratelimit.service.config_load_success"),
            None
        );
    }

    #[test]
    fn placeholders_past_the_groups_stay_and_missing_variables_are_named() {
        let m = mogrifier("X", r"^a\.(b)?(c)$", "n.$1.$2.$3.$", "");
        assert_eq!(
            mogrify(std::slice::from_ref(&m), "a.c"),
            Some(("n..c.$3.$".into(), vec![]))
        );
        let missing = Mogrifier::from_vars("Y", |_| None).unwrap_err();
        assert!(
            missing.contains("DOG_STATSD_MOGRIFIER_Y_PATTERN"),
            "{missing}"
        );
        let bad = Mogrifier::from_vars("Z", |v| {
            Some(if v.ends_with("PATTERN") { "(" } else { "n" }.to_string())
        })
        .unwrap_err();
        assert!(bad.contains("failed to compile pattern for Z"), "{bad}");
    }
}
