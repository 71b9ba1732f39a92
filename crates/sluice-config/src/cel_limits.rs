//! Limitador's limits files (docs/kuadrant.md): a YAML list of limits, each of a namespace
//! (the domain), `max_value` hits per `seconds`, CEL `conditions` that must all hold and CEL
//! `variables` whose values name its counter, an optional `name` and `id`. Parsed and
//! compiled here, with each refusal's path, line and reason; at a request, every limit of
//! the namespace is tried against the request's descriptors (`descriptors[i]['key']`, as
//! Limitador binds them) and each that applies names one counter.

use std::cell::OnceCell;
use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::Arc;

use cel::objects::{Key, Map, Value};
use cel::{ExecutionError, Program};
use serde::Deserialize;
use sluice_core::algorithm::fixed_window::FixedWindowParameters;
use sluice_core::limit::{Counting, Limit, Unit};
use sluice_core::modifier::leasing;

use crate::cel_shortcut::Shortcut;
use crate::error::FileError;
use crate::position::Positions;

/// The keys of one limit.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LimitDoc {
    namespace: String,
    max_value: u64,
    seconds: u64,
    #[serde(default)]
    conditions: Vec<String>,
    #[serde(default)]
    variables: Vec<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    id: Option<String>,
}

/// A CEL expression and its source, and its shortcut when it has one of the common shapes.
struct Expression {
    source: String,
    program: Program,
    shortcut: Option<Shortcut>,
}

impl std::fmt::Debug for Expression {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.source)
    }
}

/// One of Limitador's limits, compiled.
#[derive(Debug)]
pub struct CelLimit {
    pub namespace: String,
    pub name: Option<String>,
    pub id: Option<String>,
    pub max_value: u64,
    pub seconds: u64,
    /// The limit sluice counts: a fixed window of `max_value` hits per `seconds`, from each
    /// counter's first hit.
    pub limit: Limit,
    /// What names the limit among its namespace's, whatever its place in the file:
    /// its period, conditions and variables (Limitador's identity of a limit).
    pub identity: String,
    conditions: Vec<Expression>,
    variables: Vec<Expression>,
    /// `limit` as its expressions read it (`limit.name`, `limit.id`), made once.
    binding: Value,
}

/// CEL's standard functions, registered once (a context of its own registers them all again:
/// that cost a call more than the rest of its decision).
static STANDARD: std::sync::LazyLock<Arc<cel::Env>> =
    std::sync::LazyLock::new(|| Arc::new(cel::Env::stdlib()));

/// A request's descriptors as Limitador's expressions read them (`descriptors`, a list of
/// maps of entry key to value), ready for each limit of its namespace: their entries, and
/// CEL's context of them, made when an expression without a shortcut first needs it.
pub struct Bindings<'e> {
    descriptors: Vec<Vec<(&'e str, &'e str)>>,
    context: OnceCell<cel::Context<'static, 'static>>,
}

impl<'e> Bindings<'e> {
    /// The bindings of `descriptors`, each a list of (key, value) entries.
    pub fn of(
        descriptors: impl Iterator<Item = impl Iterator<Item = (&'e str, &'e str)>>,
    ) -> Bindings<'e> {
        Bindings {
            descriptors: descriptors.map(Iterator::collect).collect(),
            context: OnceCell::new(),
        }
    }

    /// CEL's context of the descriptors, made once.
    pub fn context(&self) -> &cel::Context<'static, 'static> {
        self.context.get_or_init(|| {
            // Each map made once, as CEL holds it (no map of strings converted after).
            let list: Vec<Value> = self
                .descriptors
                .iter()
                .map(|entries| {
                    let map: HashMap<Key, Value> = entries
                        .iter()
                        .map(|(key, value)| {
                            let value = Value::String(Arc::new(value.to_string()));
                            (Key::String(Arc::new(key.to_string())), value)
                        })
                        .collect();
                    Value::Map(Map { map: Arc::new(map) })
                })
                .collect();
            let mut context = cel::Context::with_env(STANDARD.clone());
            context.add_variable_from_value("descriptors", Value::List(Arc::new(list)));
            context
        })
    }
}

impl CelLimit {
    /// The values of its variables for a request (its counter), or `None` when it does not
    /// apply: a condition that does not hold, or reads an entry the request lacks, or a
    /// variable the request gives no value for.
    pub fn counter(&self, bindings: &Bindings<'_>) -> Option<Vec<String>> {
        // CEL's scope (with `limit`), made for the first expression without a shortcut.
        let scope = OnceCell::new();
        let by_cel = |expression: &Expression| {
            let scope = scope.get_or_init(|| {
                let mut scope = bindings.context().new_inner_scope();
                scope.add_variable_from_value("limit", self.binding.clone());
                scope
            });
            expression.program.execute(scope)
        };
        for condition in &self.conditions {
            let holds = match &condition.shortcut {
                Some(shortcut) => shortcut.holds(&bindings.descriptors),
                None => matches!(by_cel(condition), Ok(Value::Bool(true))),
            };
            if !holds {
                return None;
            }
        }
        self.variables
            .iter()
            .map(|variable| match &variable.shortcut {
                Some(shortcut) => shortcut.text(&bindings.descriptors),
                None => text_of(by_cel(variable)),
            })
            .collect()
    }

    /// The sources of its conditions.
    pub fn condition_sources(&self) -> impl Iterator<Item = &str> {
        self.conditions.iter().map(|c| c.source.as_str())
    }

    /// The sources of its variables, in the order `counter` gives their values.
    pub fn variable_sources(&self) -> impl Iterator<Item = &str> {
        self.variables.iter().map(|v| v.source.as_str())
    }

    /// Leases the limit's budget as `policy` says, in chunks of at most a tenth of its
    /// `max_value` too; a limit whose tenth is below leasing's smallest chunk keeps the
    /// exact path.
    pub fn lease(&mut self, policy: leasing::Policy) {
        let tenth = u32::try_from(self.max_value / 10).unwrap_or(u32::MAX);
        let max_chunk = policy.max_chunk.min(tenth);
        if u64::from(max_chunk) >= leasing::MIN_CHUNK {
            self.limit.modifiers.budget_leasing = Some(leasing::Policy {
                max_chunk,
                ..policy
            });
        }
    }

    /// The limit as `/limits` and `check-config` show it, and its leasing when it has one.
    pub fn describe(&self) -> String {
        let name = self
            .name
            .as_deref()
            .map(|n| format!(" {n}"))
            .unwrap_or_default();
        let leased = self
            .limit
            .modifiers
            .budget_leasing
            .map(|policy| {
                format!(
                    ", leased: max_chunk {} ({})",
                    policy.max_chunk,
                    policy.bound()
                )
            })
            .unwrap_or_default();
        format!(
            "{}{name}: {} per {}s, conditions [{}], variables [{}]{leased}",
            self.namespace,
            self.max_value,
            self.seconds,
            sources(&self.conditions),
            sources(&self.variables)
        )
    }
}

fn sources(expressions: &[Expression]) -> String {
    let sources: Vec<&str> = expressions.iter().map(|e| e.source.as_str()).collect();
    sources.join(", ")
}

/// A variable's value as Limitador writes it into a counter; `None` for a missing entry.
fn text_of(result: Result<Value, ExecutionError>) -> Option<String> {
    match result.ok()? {
        Value::String(text) => Some(text.to_string()),
        Value::Int(n) => Some(n.to_string()),
        Value::UInt(n) => Some(n.to_string()),
        Value::Float(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Null => Some("null".into()),
        _ => None,
    }
}

/// Whether `text` is a limits file of Limitador's: a YAML list at its top.
pub fn is_limits_file(text: &str) -> bool {
    text.lines()
        .map(str::trim_start)
        .find(|line| !line.is_empty() && !line.starts_with('#') && !line.starts_with("---"))
        .is_some_and(|line| line.starts_with('-') || line.starts_with('['))
}

/// The limits of a limits file, each compiled; every refusal names `path`, the line and the
/// reason. Of two limits alike (namespace, period, conditions and variables), the first is
/// kept, as Limitador keeps it.
pub fn parse(path: &Path, text: &str) -> Result<Vec<CelLimit>, Vec<FileError>> {
    let error = |position, reason: String| FileError {
        path: path.to_path_buf(),
        position,
        reason,
    };
    let docs: Vec<LimitDoc> = serde_yaml::from_str(text).map_err(|e| {
        let position = e.location().map(|l| (l.line(), l.column()));
        vec![error(position, e.to_string())]
    })?;
    let positions = Positions::of(text);
    let mut errors = Vec::new();
    let mut limits: Vec<CelLimit> = Vec::new();
    for (index, doc) in docs.into_iter().enumerate() {
        match compile(doc, index) {
            Ok(limit) => {
                if !limits
                    .iter()
                    .any(|l| l.namespace == limit.namespace && l.identity == limit.identity)
                {
                    limits.push(limit);
                }
            }
            Err((key_path, reason)) => {
                let position = positions.find(&key_path);
                errors.push(error(position, format!("{key_path}: {reason}")));
            }
        }
    }
    if errors.is_empty() {
        Ok(limits)
    } else {
        Err(errors)
    }
}

/// Compiles limit `index`; a refusal names its key path (`conditions[1]`) and the reason.
fn compile(doc: LimitDoc, index: usize) -> Result<CelLimit, (String, String)> {
    let path = |key: &str| format!("[{index}].{key}");
    if doc.namespace.is_empty() {
        return Err((path("namespace"), "must not be empty".into()));
    }
    let max_value = u32::try_from(doc.max_value).map_err(|_| {
        let reason = format!("must be at most {} (sluice's largest limit)", u32::MAX);
        (path("max_value"), reason)
    })?;
    let seconds = u32::try_from(doc.seconds)
        .ok()
        .filter(|&s| s > 0)
        .ok_or_else(|| {
            (
                path("seconds"),
                format!("must be a whole number from 1 to {}", u32::MAX),
            )
        })?;
    let compiled = |sources: Vec<String>, key: &str| -> Result<Vec<Expression>, (String, String)> {
        sources
            .into_iter()
            .enumerate()
            .map(|(i, source)| match Program::compile(&source) {
                Ok(program) => Ok(Expression {
                    shortcut: Shortcut::of(&source),
                    source,
                    program,
                }),
                Err(e) => Err((
                    format!("{}[{i}]", path(key)),
                    format!("is not a CEL expression: {e}"),
                )),
            })
            .collect()
    };
    let conditions = compiled(doc.conditions, "conditions")?;
    let variables = compiled(doc.variables, "variables")?;
    let sorted = |expressions: &[Expression]| -> BTreeSet<String> {
        expressions.iter().map(|e| e.source.clone()).collect()
    };
    let identity = format!(
        "{}s|{}|{}",
        doc.seconds,
        sorted(&conditions)
            .into_iter()
            .collect::<Vec<_>>()
            .join("&&"),
        sorted(&variables).into_iter().collect::<Vec<_>>().join(",")
    );
    // Limitador's windows: each counter's starts at its first hit.
    let limit = Limit {
        counting: Counting::FixedWindow(FixedWindowParameters::FROM_FIRST_HIT),
        unit_multiplier: seconds,
        ..Limit::fixed_window(max_value, Unit::Second)
    };
    let binding = Value::from(HashMap::from([
        ("name", doc.name.clone().map_or(Value::Null, Value::from)),
        ("id", doc.id.clone().map_or(Value::Null, Value::from)),
    ]));
    Ok(CelLimit {
        binding,
        namespace: doc.namespace,
        name: doc.name,
        id: doc.id,
        max_value: doc.max_value,
        seconds: doc.seconds,
        limit,
        identity,
        conditions,
        variables,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "\
---
- namespace: ns
  max_value: 2
  seconds: 60
  conditions:
    - \"descriptors[0]['req.method'] == 'GET'\"
  variables:
    - \"descriptors[0]['user_id']\"
- namespace: ns
  max_value: 5
  seconds: 60
  conditions: [\"descriptors[0]['req.method'] == 'GET'\"]
  variables: [\"descriptors[0]['user_id']\"]
- namespace: ns
  max_value: 10
  seconds: 3600
  name: per-hour
";

    fn bindings<'a>(descriptors: &[&[(&'a str, &'a str)]]) -> Bindings<'a> {
        Bindings::of(descriptors.iter().map(|d| d.iter().copied()))
    }

    #[test]
    fn a_limit_applies_when_its_conditions_hold_and_its_variables_resolve() {
        let limits = parse(Path::new("limits.yaml"), FILE).expect("parsed");
        // The second limit is the first's twin: the first is kept.
        assert_eq!(limits.len(), 2);
        assert_eq!(limits[0].max_value, 2);
        let get = bindings(&[&[("req.method", "GET"), ("user_id", "u1")]]);
        assert_eq!(limits[0].counter(&get), Some(vec!["u1".to_string()]));
        assert_eq!(limits[1].counter(&get), Some(vec![]));
        let post = bindings(&[&[("req.method", "POST"), ("user_id", "u1")]]);
        assert_eq!(limits[0].counter(&post), None, "a condition that fails");
        let anonymous = bindings(&[&[("req.method", "GET")]]);
        assert_eq!(limits[0].counter(&anonymous), None, "a missing variable");
        assert_eq!(limits[0].counter(&bindings(&[])), None, "no descriptor");
    }

    #[test]
    fn a_limit_reads_its_own_name() {
        let text = "- {namespace: ns, max_value: 1, seconds: 1, name: gold, conditions: [\"limit.name == 'gold'\"]}";
        let limits = parse(Path::new("l.yaml"), text).expect("parsed");
        assert_eq!(limits[0].counter(&bindings(&[])), Some(vec![]));
    }

    #[test]
    fn refusals_name_the_line_and_the_key() {
        let text = "- namespace: ns\n  max_value: 1\n  seconds: 1\n  conditions:\n    - \"descriptors[0]['a'] ==\"\n";
        let errors = parse(Path::new("l.yaml"), text).expect_err("refused");
        let shown = errors[0].to_string();
        assert!(shown.starts_with("l.yaml:5:"), "{shown}");
        assert!(shown.contains("not a CEL expression"), "{shown}");
        let unknown = parse(
            Path::new("l.yaml"),
            "- {namespace: ns, max_value: 1, seconds: 1, limit: 3}",
        )
        .expect_err("an unknown key");
        assert!(
            unknown[0].to_string().contains("unknown field `limit`"),
            "{}",
            unknown[0]
        );
        let zero = parse(
            Path::new("l.yaml"),
            "- {namespace: ns, max_value: 1, seconds: 0}",
        )
        .expect_err("a period of 0");
        assert!(zero[0].to_string().contains("seconds"), "{}", zero[0]);
    }

    #[test]
    fn only_a_list_at_the_top_is_a_limits_file() {
        assert!(is_limits_file("# limits\n---\n- namespace: a\n"));
        assert!(!is_limits_file("domain: d\ndescriptors: []\n"));
    }
}
