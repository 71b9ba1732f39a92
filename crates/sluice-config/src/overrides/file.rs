//! A file of overrides, for the tools that run without a store (`sluice replay --overrides`,
//! `sluice check-config --overrides`): a YAML or JSON list of overrides as the admin API puts
//! them, or the admin API's list answer (`{"overrides": [...]}`), compiled all or nothing
//! against a configuration.

use std::path::Path;

use serde::Deserialize;

use super::{OverrideDoc, OverrideIndex};
use crate::{Config, LoadOptions};

/// The two shapes a file may have.
#[derive(Deserialize)]
#[serde(untagged)]
enum Shape {
    List(Vec<OverrideDoc>),
    Listed { overrides: Vec<OverrideDoc> },
}

/// The overrides of the file at `path`; the error names the file and why.
pub fn read_file(path: &Path) -> Result<Vec<OverrideDoc>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let shape: Shape = serde_yaml::from_str(&text).map_err(|e| {
        format!(
            "{}: not a list of overrides (nor {{overrides: [...]}}): {e}",
            path.display()
        )
    })?;
    Ok(match shape {
        Shape::List(docs) | Shape::Listed { overrides: docs } => docs,
    })
}

/// The index of `docs`, each checked against `config`; every refused one is reported, as
/// `overrides[<i>].<field>: <reason>`, and then none is in force.
pub fn index_of(
    docs: &[OverrideDoc],
    config: &Config,
    options: LoadOptions,
) -> Result<OverrideIndex, Vec<String>> {
    let index = OverrideIndex::default();
    let mut refused = Vec::new();
    for (position, doc) in docs.iter().enumerate() {
        let compiled = doc
            .compile(options)
            .and_then(|limit| doc.check_against(config).map(|()| limit));
        match compiled {
            Ok(limit) => index.insert(&doc.descriptor_id(), limit),
            Err(error) => refused.push(format!("overrides[{position}].{error}")),
        }
    }
    if refused.is_empty() {
        Ok(index)
    } else {
        Err(refused)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_or_a_list_answer_reads_and_a_bad_one_is_refused_by_place() {
        let dir = tempfile::tempdir().unwrap();
        let config = crate::load_str(
            "c.yaml",
            "domain: rl\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n",
            LoadOptions::default(),
        )
        .unwrap();
        let list = dir.path().join("list.yaml");
        std::fs::write(&list, "- domain: rl\n  descriptor: [{key: k, value: a}]\n  limit: {unit: hour, requests_per_unit: 9}\n").unwrap();
        let answer = dir.path().join("answer.json");
        std::fs::write(&answer, r#"{"overrides": [{"domain": "rl", "descriptor": [{"key": "k", "value": "b"}], "limit": {"unlimited": true}}], "next_page_token": ""}"#).unwrap();
        for path in [&list, &answer] {
            let docs = read_file(path).unwrap();
            assert_eq!(
                index_of(&docs, &config, LoadOptions::default())
                    .unwrap()
                    .len(),
                1
            );
        }
        let bad = dir.path().join("bad.yaml");
        std::fs::write(
            &bad,
            "- domain: rl\n  descriptor: [{key: k, value: a}]\n  limit: {unit: fortnight}\n",
        )
        .unwrap();
        let errors =
            index_of(&read_file(&bad).unwrap(), &config, LoadOptions::default()).unwrap_err();
        assert!(
            errors[0].starts_with("overrides[0].limit.unit: "),
            "{errors:?}"
        );
    }
}
