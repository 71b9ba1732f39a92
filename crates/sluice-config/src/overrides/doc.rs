//! An override as the admin API takes it and the store keeps it (JSON), checked field by
//! field: its syntax alone (`compile`, as a replica loading the store does), and against the
//! configuration in force (`check_against`, as a put does). Every error names its field.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::id::{self, is_clean};
use super::index::OverrideLimit;
use crate::compile::FileCompiler;
use crate::file::RateLimitDoc;
use crate::{Config, LoadOptions};

/// One override: for the descriptor of `descriptor` in `domain`, `limit` replaces the limits
/// of the rule it falls under (or, with `name`, only the one of that name) until
/// `expires_at`, if given.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OverrideDoc {
    pub domain: String,
    /// The descriptor's entries, in order, with their exact values.
    pub descriptor: Vec<EntryDoc>,
    /// The name of the rule's limit replaced; absent: every limit of the rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// A limit as `rate_limit` holds it in the YAML (`unit`, `requests_per_unit`,
    /// `algorithm` and its keys, modifiers), or `{unlimited: true}`.
    pub limit: serde_json::Value,
    /// Shadow mode for the descriptor; absent: the rule's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadow_mode: Option<bool>,
    /// When the override stops applying, RFC 3339; absent: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// Who put it (set by the server).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_by: Option<String>,
    /// When it was put, RFC 3339 (set by the server).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<String>,
}

/// One entry of a descriptor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EntryDoc {
    pub key: String,
    pub value: String,
}

/// Why an override (or the descriptor it names) is refused: the field, and the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct OverrideError {
    /// As the JSON names it: `limit.unit`, `descriptor[1].value`, `domain`.
    pub field: String,
    pub reason: String,
}

impl OverrideError {
    pub fn new(field: impl Into<String>, reason: impl Into<String>) -> OverrideError {
        OverrideError {
            field: field.into(),
            reason: reason.into(),
        }
    }
}

/// Checks a descriptor's domain and entries: present, and free of control characters.
pub fn check_descriptor(domain: &str, entries: &[EntryDoc]) -> Result<(), OverrideError> {
    if domain.is_empty() {
        return Err(OverrideError::new("domain", "must not be empty"));
    }
    if !is_clean(domain) {
        return Err(OverrideError::new(
            "domain",
            "must not hold control characters",
        ));
    }
    if entries.is_empty() {
        return Err(OverrideError::new(
            "descriptor",
            "must hold at least one entry",
        ));
    }
    for (index, entry) in entries.iter().enumerate() {
        if entry.key.is_empty() {
            return Err(OverrideError::new(
                format!("descriptor[{index}].key"),
                "must not be empty",
            ));
        }
        if entry.value.is_empty() {
            let reason = "an override is for exact values: give the value";
            return Err(OverrideError::new(
                format!("descriptor[{index}].value"),
                reason,
            ));
        }
        for (field, text) in [("key", &entry.key), ("value", &entry.value)] {
            if !is_clean(text) {
                let reason = "must not hold control characters";
                return Err(OverrideError::new(
                    format!("descriptor[{index}].{field}"),
                    reason,
                ));
            }
        }
    }
    Ok(())
}

/// Checks that `domain` is configured and that the descriptor of `entries` falls under one
/// of its rules; returns that rule.
pub fn configured_rule<'a>(
    config: &'a Config,
    domain: &str,
    entries: &'a [EntryDoc],
) -> Result<&'a crate::Rule, OverrideError> {
    let Some(configured) = config.domain(domain) else {
        return Err(OverrideError::new(
            "domain",
            format!("no domain '{domain}' is configured"),
        ));
    };
    let pairs = entries.iter().map(|e| (e.key.as_str(), e.value.as_str()));
    match configured.resolve(pairs) {
        Some(matched) => Ok(matched.rule),
        None => Err(OverrideError::new(
            "descriptor",
            format!("no rule of domain '{domain}' matches it: an override replaces the limits of a configured rule"),
        )),
    }
}

impl OverrideDoc {
    /// The id of its descriptor (what requests look it up by).
    pub fn descriptor_id(&self) -> String {
        id::descriptor_id(
            &self.domain,
            self.descriptor
                .iter()
                .map(|e| (e.key.as_str(), e.value.as_str())),
        )
    }

    /// The id the store keeps it under.
    pub fn record_id(&self) -> String {
        id::record_id(&self.descriptor_id(), self.name.as_deref())
    }

    /// When it stops applying, in µs since the epoch (0: never).
    pub fn expires_at_us(&self) -> Result<u64, OverrideError> {
        let Some(text) = &self.expires_at else {
            return Ok(0);
        };
        let at: jiff::Timestamp = text.parse().map_err(|e| {
            OverrideError::new(
                "expires_at",
                format!("'{text}' is not an RFC 3339 time: {e}"),
            )
        })?;
        u64::try_from(at.as_microsecond())
            .map_err(|_| OverrideError::new("expires_at", "must be after 1970"))
    }

    /// Compiles the override as its syntax alone allows (any configuration): its
    /// descriptor, its limit as the YAML's `rate_limit` would be, its expiry.
    pub fn compile(&self, options: LoadOptions) -> Result<OverrideLimit, OverrideError> {
        check_descriptor(&self.domain, &self.descriptor)?;
        if let Some(name) = &self.name {
            if name.is_empty() || !is_clean(name) {
                let reason = "must be a limit's name (absent: every limit of the rule)";
                return Err(OverrideError::new("name", reason));
            }
        }
        let expires_at_us = self.expires_at_us()?;
        let doc = RateLimitDoc::deserialize(&self.limit)
            .map_err(|e| OverrideError::new("limit", e.to_string()))?;
        if doc.name.is_some() {
            let reason = "the limit replaced is named beside limit (name), not in it";
            return Err(OverrideError::new("limit.name", reason));
        }
        if doc.replaces.is_some() {
            let reason = "an override cannot replace other limits: replaces stays the rule's";
            return Err(OverrideError::new("limit.replaces", reason));
        }
        let mut compiler = FileCompiler::new(Path::new("override"), "", options);
        let compiled = compiler.named_limit(&doc, "limit", self.name.is_none());
        if let Some(error) = compiler.errors.first() {
            let (field, reason) = error
                .reason
                .split_once(": ")
                .unwrap_or(("limit", &error.reason));
            return Err(OverrideError::new(field, reason));
        }
        let Some((named, _)) = compiled else {
            return Err(OverrideError::new("limit", "refused"));
        };
        Ok(OverrideLimit {
            name: self.name.clone(),
            limit: named.limit,
            shadow_mode: self.shadow_mode,
            expires_at_us,
        })
    }

    /// Checks the override against the configuration in force: its domain is configured,
    /// its descriptor falls under a rule, and the limit it names is one of that rule's.
    pub fn check_against(&self, config: &Config) -> Result<(), OverrideError> {
        check_descriptor(&self.domain, &self.descriptor)?;
        let rule = configured_rule(config, &self.domain, &self.descriptor)?;
        if let Some(name) = &self.name {
            if !rule.limits.iter().any(|l| l.name.as_deref() == Some(name)) {
                let reason = format!("the rule '{}' has no limit named '{name}'", rule.full_key);
                return Err(OverrideError::new("name", reason));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn doc(limit: serde_json::Value) -> OverrideDoc {
        OverrideDoc {
            domain: "rl".into(),
            descriptor: vec![EntryDoc {
                key: "api_key".into(),
                value: "acme".into(),
            }],
            name: None,
            limit,
            shadow_mode: None,
            expires_at: None,
            updated_by: None,
            updated_at: None,
        }
    }

    #[test]
    fn a_limit_compiles_as_the_yaml_would() {
        let compiled = doc(json!({"unit": "minute", "requests_per_unit": 50, "algorithm": "token_bucket", "burst": 5}))
            .compile(LoadOptions::default())
            .unwrap();
        let limit = compiled.limit.unwrap();
        assert_eq!(limit.requests_per_unit, 50);
        assert_eq!(limit.capacity(), 5);
    }

    #[test]
    fn errors_name_the_field() {
        let error = doc(json!({"unit": "fortnight", "requests_per_unit": 5}))
            .compile(LoadOptions::default())
            .unwrap_err();
        assert_eq!(error.field, "limit.unit");
        let error = doc(json!({"unit": "minute", "requests_per_unit": 5, "burst": 3}))
            .compile(LoadOptions::default())
            .unwrap_err();
        assert_eq!(error.field, "limit.burst");
        let mut bad = doc(json!({"unit": "minute"}));
        bad.descriptor[0].value = String::new();
        assert_eq!(
            bad.compile(LoadOptions::default()).unwrap_err().field,
            "descriptor[0].value"
        );
        let mut late = doc(json!({"unit": "minute"}));
        late.expires_at = Some("tomorrow".into());
        assert_eq!(
            late.compile(LoadOptions::default()).unwrap_err().field,
            "expires_at"
        );
    }

    #[test]
    fn unlimited_replaces_every_limit_only() {
        assert!(doc(json!({"unlimited": true}))
            .compile(LoadOptions::default())
            .unwrap()
            .limit
            .is_none());
        let mut named = doc(json!({"unlimited": true}));
        named.name = Some("per_minute".into());
        assert_eq!(
            named.compile(LoadOptions::default()).unwrap_err().field,
            "limit.unlimited"
        );
    }

    #[test]
    fn a_put_needs_a_configured_rule_and_limit_name() {
        let config = crate::load_str(
            "c.yaml",
            "domain: rl\ndescriptors:\n  - key: api_key\n    rate_limits:\n      - {unit: minute, requests_per_unit: 5, name: per_minute}\n",
            LoadOptions::default(),
        )
        .unwrap();
        let good = doc(json!({"unit": "minute", "requests_per_unit": 9}));
        assert!(good.check_against(&config).is_ok());
        let mut other = good.clone();
        other.domain = "nope".into();
        assert_eq!(other.check_against(&config).unwrap_err().field, "domain");
        let mut unmatched = good.clone();
        unmatched.descriptor[0].key = "user".into();
        assert_eq!(
            unmatched.check_against(&config).unwrap_err().field,
            "descriptor"
        );
        let mut misnamed = good.clone();
        misnamed.name = Some("per_hour".into());
        assert_eq!(misnamed.check_against(&config).unwrap_err().field, "name");
    }
}
