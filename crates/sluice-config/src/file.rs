//! The YAML file format of envoyproxy/ratelimit, with sluice's extensions inside `rate_limit`,
//! as serde types (an algorithm's own keys kept as values for it to read). Unknown keys are
//! refused so that a typo cannot silently disable a limit.

use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

use sluice_core::algorithm::params::Given;
use sluice_core::algorithm::Algorithm;
use sluice_core::modifier::Modifiers;

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
#[derive(Debug, Default, Deserialize)]
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
    /// A reservation for every limit of the node (sluice's extension; `reserve` inside a
    /// `rate_limit` gives one limit its own).
    #[serde(default)]
    pub reserve: Option<serde_yaml::Value>,
    /// Priority tiers sharing every limit of the node (sluice's extension; `tiers` inside a
    /// `rate_limit` gives one limit its own).
    #[serde(default)]
    pub tiers: Option<serde_yaml::Value>,
}

impl DescriptorDoc {
    /// The modifiers given beside the node's limits, for every one of them: (YAML key, value).
    pub fn modifiers_of_every_limit(
        &self,
    ) -> impl Iterator<Item = (&'static str, &serde_yaml::Value)> {
        [("reserve", &self.reserve), ("tiers", &self.tiers)]
            .into_iter()
            .filter_map(|(key, value)| value.as_ref().map(|value| (key, value)))
    }
}

/// The limit of a node. `algorithm`, `unit_multiplier` and `debt` are sluice's, and so are
/// the algorithms' own keys (`burst`, `warmup`, ...: `Algorithm::parameter_keys`), kept as
/// YAML values in `parameters` for the algorithm to read (`Counting::parse`).
#[derive(Debug, Default)]
pub struct RateLimitDoc {
    pub unit: Option<String>,
    pub requests_per_unit: Option<u32>,
    pub unlimited: bool,
    pub name: Option<String>,
    pub replaces: Option<Vec<ReplacesDoc>>,
    pub algorithm: Option<String>,
    pub unit_multiplier: Option<u32>,
    /// Charge hits that do not fit (costs reported after the response); default: the
    /// `--debt` setting.
    pub debt: Option<bool>,
    /// The modifiers' keys (`Modifiers::KEYS`), kept as YAML values for each
    /// modifier to read, in file order.
    pub modifiers: Vec<(String, serde_yaml::Value)>,
    pub parameters: Given,
}

/// The keys of `rate_limit` that every algorithm shares.
const RATE_LIMIT_KEYS: &[&str] = &[
    "unit",
    "requests_per_unit",
    "unlimited",
    "name",
    "replaces",
    "algorithm",
    "unit_multiplier",
    "debt",
];

/// A value read as `scalar_string` reads it.
struct Scalar(Option<String>);

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Scalar, D::Error> {
        scalar_string(deserializer).map(Scalar)
    }
}

impl<'de> Deserialize<'de> for RateLimitDoc {
    /// A map of the common keys and the algorithms' own; any other key is refused, with its
    /// place, as `deny_unknown_fields` would.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<RateLimitDoc, D::Error> {
        deserializer.deserialize_map(RateLimitVisitor)
    }
}

struct RateLimitVisitor;

impl<'de> Visitor<'de> for RateLimitVisitor {
    type Value = RateLimitDoc;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a rate limit: a map with unit, requests_per_unit, ...")
    }

    fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<RateLimitDoc, A::Error> {
        let mut doc = RateLimitDoc::default();
        let mut seen: Vec<String> = Vec::new();
        while let Some(RateLimitKey(key)) = map.next_key()? {
            if seen.contains(&key) {
                return Err(de::Error::custom(format_args!("duplicate field `{key}`")));
            }
            match key.as_str() {
                "unit" => doc.unit = map.next_value::<Scalar>()?.0,
                "requests_per_unit" => doc.requests_per_unit = map.next_value()?,
                "unlimited" => doc.unlimited = map.next_value()?,
                "name" => doc.name = map.next_value::<Scalar>()?.0,
                "replaces" => doc.replaces = map.next_value()?,
                "algorithm" => doc.algorithm = map.next_value::<Scalar>()?.0,
                "unit_multiplier" => doc.unit_multiplier = map.next_value()?,
                "debt" => doc.debt = map.next_value()?,
                _ if Modifiers::KEYS.contains(&key.as_str()) => {
                    doc.modifiers.push((key.clone(), map.next_value()?));
                }
                // The algorithms' own keys (`RateLimitKey` let no other through).
                _ => {
                    let value: serde_yaml::Value = map.next_value()?;
                    doc.parameters.insert(key.clone(), value);
                }
            }
            seen.push(key);
        }
        Ok(doc)
    }
}

/// A key of `rate_limit`, refused where it stands (so the error has its place) when it is none
/// of `rate_limit_keys`.
struct RateLimitKey(String);

impl<'de> Deserialize<'de> for RateLimitKey {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<RateLimitKey, D::Error> {
        deserializer.deserialize_identifier(RateLimitKeyVisitor)
    }
}

struct RateLimitKeyVisitor;

impl Visitor<'_> for RateLimitKeyVisitor {
    type Value = RateLimitKey;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a key of rate_limit")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<RateLimitKey, E> {
        if rate_limit_keys().contains(&key) {
            Ok(RateLimitKey(key.to_string()))
        } else {
            Err(de::Error::unknown_field(key, rate_limit_keys()))
        }
    }
}

/// Every key of `rate_limit`: the common ones, the modifiers', then the algorithms' own.
fn rate_limit_keys() -> &'static [&'static str] {
    static KEYS: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    KEYS.get_or_init(|| {
        let mut keys = RATE_LIMIT_KEYS.to_vec();
        keys.extend_from_slice(Modifiers::KEYS);
        keys.extend(Algorithm::parameter_keys());
        keys
    })
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
            // The common keys and the algorithms' own, gathered once.
            Level::RateLimit => rate_limit_keys(),
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
    // Decoded from the value already parsed (a second parse of the text was half of a large
    // file's load); an error has no position then, so without misplaced keys the text itself
    // is decoded again for the same error with its line and column.
    parsed.doc = match serde_yaml::from_value(value) {
        Ok(doc) => doc,
        Err(error) if parsed.misplaced.is_empty() => {
            return Err(serde_yaml::from_str::<FileDoc>(text).err().unwrap_or(error));
        }
        Err(error) => return Err(error),
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
