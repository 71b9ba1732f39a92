//! Field by field, what two answers to one request do not share: the error, the overall code,
//! each status's code, `current_limit`, `limit_remaining` and `duration_until_reset` (within a
//! second: the servers read their clocks a moment apart), the response and request headers
//! (a reset within a second too), and the dynamic metadata; and which Redis keys came to hold
//! different values.

use std::collections::BTreeMap;

use crate::wire::{Answer, Outcome, Status};

/// One field two answers disagree on.
#[derive(Debug, Clone)]
pub struct Difference {
    /// The field, e.g. `statuses[1].limit_remaining` or `header RateLimit-Reset`.
    pub field: String,
    /// The descriptor the field belongs to, when it belongs to one.
    pub descriptor: Option<usize>,
    pub reference: String,
    pub sluice: String,
}

impl Difference {
    fn new(
        field: impl Into<String>,
        descriptor: Option<usize>,
        r: impl ToString,
        s: impl ToString,
    ) -> Self {
        Difference {
            field: field.into(),
            descriptor,
            reference: r.to_string(),
            sluice: s.to_string(),
        }
    }
}

/// The headers whose value is a time to the reset, compared within a second.
const RESET_HEADERS: [&str; 2] = ["ratelimit-reset", "retry-after"];

pub fn differences(reference: &Outcome, sluice: &Outcome) -> Vec<Difference> {
    match (reference, sluice) {
        (Ok(r), Ok(s)) => answers(r, s),
        (Err((rc, rm)), Err((sc, sm))) if rc != sc => vec![Difference::new(
            "error",
            None,
            format!("{rc} {rm}"),
            format!("{sc} {sm}"),
        )],
        (Err(_), Err(_)) => Vec::new(),
        (Err((rc, rm)), Ok(_)) => vec![Difference::new(
            "error",
            None,
            format!("{rc} {rm}"),
            "an answer",
        )],
        (Ok(_), Err((sc, sm))) => vec![Difference::new(
            "error",
            None,
            "an answer",
            format!("{sc} {sm}"),
        )],
    }
}

fn answers(r: &Answer, s: &Answer) -> Vec<Difference> {
    let mut out = Vec::new();
    if r.overall != s.overall {
        out.push(Difference::new("overall_code", None, r.overall, s.overall));
    }
    if r.statuses.len() != s.statuses.len() {
        out.push(Difference::new(
            "statuses",
            None,
            r.statuses.len(),
            s.statuses.len(),
        ));
    } else {
        for (i, (rs, ss)) in r.statuses.iter().zip(&s.statuses).enumerate() {
            statuses(i, rs, ss, &mut out);
        }
    }
    headers("header", &r.headers, &s.headers, &mut out);
    headers(
        "request header",
        &r.request_headers,
        &s.request_headers,
        &mut out,
    );
    metadata(r.metadata.as_ref(), s.metadata.as_ref(), &mut out);
    out
}

fn statuses(i: usize, r: &Status, s: &Status, out: &mut Vec<Difference>) {
    let field = |name: &str| format!("statuses[{i}].{name}");
    if r.code != s.code {
        out.push(Difference::new(field("code"), Some(i), r.code, s.code));
    }
    if r.limit != s.limit {
        out.push(Difference::new(
            field("current_limit"),
            Some(i),
            format!("{:?}", r.limit),
            format!("{:?}", s.limit),
        ));
    }
    if r.remaining != s.remaining {
        out.push(Difference::new(
            field("limit_remaining"),
            Some(i),
            r.remaining,
            s.remaining,
        ));
    }
    let reset_agrees = match (r.reset, s.reset) {
        (Some(a), Some(b)) => (a - b).abs() <= 1,
        (a, b) => a == b,
    };
    if !reset_agrees {
        out.push(Difference::new(
            field("duration_until_reset"),
            Some(i),
            format!("{:?}", r.reset),
            format!("{:?}", s.reset),
        ));
    }
}

fn headers(kind: &str, r: &[(String, String)], s: &[(String, String)], out: &mut Vec<Difference>) {
    let map = |h: &[(String, String)]| -> BTreeMap<String, String> {
        h.iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
            .collect()
    };
    let (r, s) = (map(r), map(s));
    let names: std::collections::BTreeSet<&String> = r.keys().chain(s.keys()).collect();
    for name in names {
        let (rv, sv) = (r.get(name), s.get(name));
        let agrees = match (rv, sv) {
            (Some(a), Some(b)) if RESET_HEADERS.contains(&name.as_str()) => {
                match (a.parse::<i64>(), b.parse::<i64>()) {
                    (Ok(a), Ok(b)) => (a - b).abs() <= 1,
                    _ => a == b,
                }
            }
            (a, b) => a == b,
        };
        if !agrees {
            let show = |v: Option<&String>| v.map_or("(none)".to_string(), Clone::clone);
            out.push(Difference::new(
                format!("{kind} {name}"),
                None,
                show(rv),
                show(sv),
            ));
        }
    }
}

fn metadata(
    r: Option<&serde_json::Value>,
    s: Option<&serde_json::Value>,
    out: &mut Vec<Difference>,
) {
    if r == s {
        return;
    }
    let (Some(r), Some(s)) = (r, s) else {
        out.push(Difference::new(
            "dynamic_metadata",
            None,
            format!("{r:?}"),
            format!("{s:?}"),
        ));
        return;
    };
    let empty = serde_json::Map::new();
    let (rf, sf) = (
        r.as_object().unwrap_or(&empty),
        s.as_object().unwrap_or(&empty),
    );
    let names: std::collections::BTreeSet<&String> = rf.keys().chain(sf.keys()).collect();
    for name in names {
        let (rv, sv) = (rf.get(name), sf.get(name));
        if rv == sv {
            continue;
        }
        if let (
            Some(serde_json::Value::Array(ra)),
            Some(serde_json::Value::Array(sa)),
            "descriptors",
        ) = (rv, sv, name.as_str())
        {
            if ra.len() == sa.len() {
                for (i, (a, b)) in ra.iter().zip(sa).enumerate() {
                    if a != b {
                        out.push(Difference::new(
                            format!("metadata descriptors[{i}]"),
                            Some(i),
                            a,
                            b,
                        ));
                    }
                }
                continue;
            }
        }
        let show =
            |v: Option<&serde_json::Value>| v.map_or("(none)".to_string(), ToString::to_string);
        out.push(Difference::new(
            format!("metadata {name}"),
            None,
            show(rv),
            show(sv),
        ));
    }
}

/// The keys whose pair of values (the reference's, sluice's) changed with the last request
/// and now differ: each a difference `key K`.
pub fn keys(
    before: &BTreeMap<String, (Option<String>, Option<String>)>,
    now: &BTreeMap<String, (Option<String>, Option<String>)>,
) -> Vec<Difference> {
    let show = |v: &Option<String>| v.clone().unwrap_or_else(|| "(absent)".into());
    // A key counts when the request wrote it on either side (a value that came or changed);
    // one that only expired (sluice's at its window's end, the reference's later) does not.
    let written = |key: &String, pair: &(Option<String>, Option<String>)| {
        let old = before.get(key).cloned().unwrap_or_default();
        (pair.0.is_some() && pair.0 != old.0) || (pair.1.is_some() && pair.1 != old.1)
    };
    now.iter()
        .filter(|(key, pair)| pair.0 != pair.1 && written(key, pair))
        .map(|(key, (r, s))| Difference::new(format!("key {key}"), None, show(r), show(s)))
        .collect()
}

/// The two dumps side by side, by key.
pub fn pair_keys(
    reference: Vec<(String, String)>,
    sluice: Vec<(String, String)>,
) -> BTreeMap<String, (Option<String>, Option<String>)> {
    let mut map: BTreeMap<String, (Option<String>, Option<String>)> = BTreeMap::new();
    for (k, v) in reference {
        map.entry(k).or_default().0 = Some(v);
    }
    for (k, v) in sluice {
        map.entry(k).or_default().1 = Some(v);
    }
    map
}
