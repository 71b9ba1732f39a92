//! The YAML file format of envoyproxy/ratelimit, with sluice's extensions inside `rate_limit`,
//! as serde types. Unknown keys are refused so that a typo cannot silently disable a limit.

use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

/// One configuration file: a domain and its descriptor tree.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct FileDoc {
    #[serde(default, deserialize_with = "scalar_string")]
    pub domain: Option<String>,
    #[serde(default)]
    pub descriptors: Option<Vec<DescriptorDoc>>,
}

/// One node of the descriptor tree.
#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a descriptor: a map with key, value, rate_limit, descriptors, ..."
)]
pub struct DescriptorDoc {
    #[serde(default, deserialize_with = "scalar_string")]
    pub key: Option<String>,
    #[serde(default, deserialize_with = "scalar_string")]
    pub value: Option<String>,
    #[serde(default)]
    pub rate_limit: Option<RateLimitDoc>,
    /// Several limits on the node, all of which must admit a hit (sluice's extension).
    #[serde(default)]
    pub rate_limits: Option<Vec<RateLimitDoc>>,
    #[serde(default)]
    pub descriptors: Option<Vec<DescriptorDoc>>,
    #[serde(default)]
    pub shadow_mode: bool,
    #[serde(default)]
    pub quota_mode: bool,
    #[serde(default)]
    pub detailed_metric: bool,
    #[serde(default)]
    pub value_to_metric: bool,
    #[serde(default)]
    pub share_threshold: bool,
    /// Free-form; returned in dynamic metadata.
    #[serde(default)]
    pub metadata: Option<serde_yaml::Value>,
    /// How RLQS clients enforce their share of this node's limit (sluice's extension).
    #[serde(default, deserialize_with = "scalar_string")]
    pub rlqs_strategy: Option<String>,
}

/// The limit of a node. `algorithm`, `unit_multiplier`, `burst`, `debt`, `warmup` and
/// `cold_factor` are sluice's.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct RateLimitDoc {
    #[serde(default, deserialize_with = "scalar_string")]
    pub unit: Option<String>,
    #[serde(default)]
    pub requests_per_unit: Option<u32>,
    #[serde(default)]
    pub unlimited: bool,
    #[serde(default, deserialize_with = "scalar_string")]
    pub name: Option<String>,
    #[serde(default)]
    pub replaces: Option<Vec<ReplacesDoc>>,
    #[serde(default, deserialize_with = "scalar_string")]
    pub algorithm: Option<String>,
    #[serde(default)]
    pub unit_multiplier: Option<u32>,
    #[serde(default)]
    pub burst: Option<u32>,
    /// Charge hits that do not fit (costs reported after the response); default: the
    /// `--debt` setting.
    #[serde(default)]
    pub debt: Option<bool>,
    /// `warm_up`: the warm-up period (`10s`); default one period.
    #[serde(default, deserialize_with = "scalar_string")]
    pub warmup: Option<String>,
    /// `warm_up`: how much slower the coldest rate is; default 3.
    #[serde(default)]
    pub cold_factor: Option<u32>,
}

/// One entry of `replaces`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplacesDoc {
    #[serde(default, deserialize_with = "scalar_string")]
    pub name: Option<String>,
}

/// One file's document and what the flat key check of the reference lets through.
#[derive(Debug, Default)]
pub struct Parsed {
    pub doc: FileDoc,
    /// Key paths (`descriptors[0].rate_limit.shadow_mode`) of keys the reference knows, found
    /// where they have no effect: the reference accepts and ignores them, so sluice does too,
    /// with a warning.
    pub misplaced: Vec<String>,
    /// Key paths of values that are numbers with a fraction or an exponent, which the
    /// reference refuses ("error checking config") outside `metadata`.
    pub fractions: Vec<String>,
}

/// Every key envoyproxy/ratelimit's YAML knows, at any level: its check of a file's keys is
/// flat, and its decoder drops a known key where the level's type has no such field.
const REFERENCE_KEYS: &[&str] = &[
    "domain",
    "key",
    "value",
    "descriptors",
    "rate_limit",
    "unit",
    "requests_per_unit",
    "unlimited",
    "shadow_mode",
    "quota_mode",
    "name",
    "replaces",
    "detailed_metric",
    "value_to_metric",
    "share_threshold",
    "metadata",
];

/// The levels of a file, each with the keys its type has.
#[derive(Debug, Clone, Copy)]
enum Level {
    File,
    Descriptor,
    RateLimit,
    Replaces,
}

impl Level {
    fn keys(self) -> &'static [&'static str] {
        match self {
            Level::File => &["domain", "descriptors"],
            Level::Descriptor => &[
                "key",
                "value",
                "rate_limit",
                "rate_limits",
                "descriptors",
                "shadow_mode",
                "quota_mode",
                "detailed_metric",
                "value_to_metric",
                "share_threshold",
                "metadata",
                "rlqs_strategy",
            ],
            Level::RateLimit => &[
                "unit",
                "requests_per_unit",
                "unlimited",
                "name",
                "replaces",
                "algorithm",
                "unit_multiplier",
                "burst",
                "debt",
                "warmup",
                "cold_factor",
            ],
            Level::Replaces => &["name"],
        }
    }

    /// The level of the value under `key`, and whether that value is a list of them.
    fn below(key: &str) -> Option<(Level, bool)> {
        match key {
            "descriptors" => Some((Level::Descriptor, true)),
            "rate_limit" => Some((Level::RateLimit, false)),
            "rate_limits" => Some((Level::RateLimit, true)),
            "replaces" => Some((Level::Replaces, true)),
            _ => None,
        }
    }
}

/// Parses one file's text.
pub fn parse(text: &str) -> Result<Parsed, serde_yaml::Error> {
    // A byte order mark (editors on Windows write one) is not part of the document.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    // An empty file (or one holding only comments) is an empty document, as in the reference.
    if text.lines().all(|line| {
        let line = line.trim();
        line.is_empty() || line.starts_with('#') || line == "---"
    }) {
        return Ok(Parsed::default());
    }
    let mut value: serde_yaml::Value = serde_yaml::from_str(text)?;
    let mut parsed = Parsed::default();
    scan(&mut value, Level::File, "", &mut parsed);
    // Without misplaced keys the text itself is decoded, so that errors keep their position.
    parsed.doc = if parsed.misplaced.is_empty() {
        serde_yaml::from_str(text)?
    } else {
        serde_yaml::from_value(value)?
    };
    Ok(parsed)
}

/// Removes the misplaced keys of `value` (a node at `level`, at key path `path`) and notes
/// them and the fractional numbers in `parsed`. `metadata` is free-form and not looked into.
fn scan(value: &mut serde_yaml::Value, level: Level, path: &str, parsed: &mut Parsed) {
    let serde_yaml::Value::Mapping(map) = value else {
        return;
    };
    let mut misplaced = Vec::new();
    for (key, child) in map.iter_mut() {
        let Some(key) = key.as_str() else { continue };
        let child_path = if path.is_empty() {
            key.to_string()
        } else {
            format!("{path}.{key}")
        };
        if !level.keys().contains(&key) && REFERENCE_KEYS.contains(&key) {
            parsed.misplaced.push(child_path);
            misplaced.push(key.to_string());
            continue;
        }
        if key == "metadata" {
            continue;
        }
        match (Level::below(key), child) {
            (Some((below, true)), serde_yaml::Value::Sequence(items)) => {
                for (index, item) in items.iter_mut().enumerate() {
                    scan(item, below, &format!("{child_path}[{index}]"), parsed);
                }
            }
            (Some((below, false)), child) => scan(child, below, &child_path, parsed),
            (None, serde_yaml::Value::Number(number)) if number.is_f64() => {
                parsed.fractions.push(child_path);
            }
            _ => {}
        }
    }
    for key in misplaced {
        map.remove(key.as_str());
    }
}

/// Reads any YAML scalar as a string, as the reference server's Go decoder does for string
/// fields: `value: 200` is the value "200". Null is absent.
fn scalar_string<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<String>, D::Error> {
    deserializer.deserialize_any(ScalarString)
}

struct ScalarString;

impl<'de> Visitor<'de> for ScalarString {
    type Value = Option<String>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Some(v.to_string()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(Some(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        Ok(Some(v.to_string()))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Ok(Some(v.to_string()))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        Ok(Some(v.to_string()))
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
        Ok(Some(v.to_string()))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_read_as_strings() {
        let parsed = parse("domain: d\ndescriptors:\n  - key: status\n    value: 200\n").unwrap();
        let descriptors = parsed.doc.descriptors.unwrap();
        assert_eq!(descriptors[0].value.as_deref(), Some("200"));
    }

    #[test]
    fn unknown_keys_are_refused_with_path_and_line() {
        let err = parse("domain: d\ndescriptors:\n  - key: a\n    ratelimit: {}\n").unwrap_err();
        let message = err.to_string();
        assert!(message.contains("descriptors[0]"), "{message}");
        assert!(message.contains("ratelimit"), "{message}");
        assert_eq!(err.location().map(|l| l.line()), Some(4));
    }
}
