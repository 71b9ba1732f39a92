//! The recording format, version 1 (docs/record-replay.md): JSON Lines. The first line
//! is a header naming the format and how the server decided; every other line is one call:
//! when it was decided, what was asked, and what each descriptor got. Other tools may write
//! it (`scripts/csv-to-recording`); `read` refuses a line that is not one, with its number.

use std::io::BufRead;
use std::path::{Path, PathBuf};

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use sluice_proto::rate_limit_descriptor::{Entry, RateLimitOverride};
use sluice_proto::{RateLimitDescriptor, RateLimitRequest};

/// The format's version, in every header.
pub const VERSION: u32 = 1;

/// The first line of a recording.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Header {
    /// The format's version: `1`.
    pub sluice_recording: u32,
    /// Descriptor values are keyed hashes (`#` and 16 hex digits), except those the config
    /// names.
    #[serde(default)]
    pub hashed_values: bool,
    /// How the recording server decided, which a replay decides with too.
    #[serde(default)]
    pub options: RecordedOptions,
}

/// The server-wide settings that change decisions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordedOptions {
    /// `SHADOW_MODE`.
    #[serde(default)]
    pub shadow_mode: bool,
    /// `QUOTA_MODE`.
    #[serde(default)]
    pub quota_mode: bool,
    /// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false`: every hit charged.
    #[serde(default)]
    pub every_hit: bool,
    /// `--debt`: every limit that does not say takes debt.
    #[serde(default)]
    pub debt: bool,
}

/// One call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Call {
    /// When it was decided, µs since the epoch.
    pub t: u64,
    pub domain: String,
    /// The request's `hits_addend` (0: not set).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub hits_addend: u32,
    pub descriptors: Vec<Descriptor>,
    /// The overall code; absent when the writer did not know (a converter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<Code>,
    /// What each descriptor got, in order; absent when the writer did not know (a converter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub statuses: Option<Vec<Status>>,
    /// The lease token the answer carried (`sluice.lease`), so that a replay can send its own
    /// in the releases that carry this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<String>,
    /// The token of what a modifier's ticket opened (a reserved budget's holds,
    /// `sluice.reserve`), for the same reason.
    #[serde(rename = "reserve", default, skip_serializing_if = "Option::is_none")]
    pub ticket: Option<String>,
}

/// One descriptor of a call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Descriptor {
    /// `[key, value]` pairs, in order.
    pub entries: Vec<(String, String)>,
    /// Its own `hits_addend`, when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hits_addend: Option<u64>,
    /// The client's limit override, when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<Override>,
}

/// A client's limit override: requests per unit, the unit as Envoy numbers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Override {
    pub requests_per_unit: u32,
    pub unit: i32,
}

/// What one descriptor got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Status {
    /// `OK` or `OVER_LIMIT`.
    pub code: Code,
    /// The name of the limit that applied (empty when unnamed); absent when none did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<String>,
    #[serde(default)]
    pub remaining: u32,
}

/// A descriptor's code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Code {
    Ok,
    OverLimit,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl Call {
    /// The request as the service takes it.
    pub fn request(&self) -> RateLimitRequest {
        RateLimitRequest {
            domain: self.domain.clone(),
            descriptors: self
                .descriptors
                .iter()
                .map(|d| RateLimitDescriptor {
                    entries: d
                        .entries
                        .iter()
                        .map(|(key, value)| Entry {
                            key: key.clone(),
                            value: value.clone(),
                        })
                        .collect(),
                    limit: d.limit.map(|o| RateLimitOverride {
                        requests_per_unit: o.requests_per_unit,
                        unit: o.unit,
                    }),
                    hits_addend: d.hits_addend,
                })
                .collect(),
            hits_addend: self.hits_addend,
        }
    }
}

/// Why a recording cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}:{line}: {reason}")]
    Line {
        path: PathBuf,
        line: usize,
        reason: String,
    },
}

/// A recording read whole: its header and its calls, in file order.
#[derive(Debug, Clone)]
pub struct Recording {
    pub header: Header,
    pub calls: Vec<Call>,
}

/// Reads the recording at `path`: a header of version 1, then calls; an empty line, a line
/// that is not a call, or a last line cut short is refused with its number.
pub fn read(path: &Path) -> Result<Recording, FormatError> {
    let io = |source| FormatError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let refused = |line: usize, reason: String| FormatError::Line {
        path: path.to_path_buf(),
        line,
        reason,
    };
    // Lines as bytes: one that is not UTF-8 is refused with its number, like any bad line.
    let mut lines = std::io::BufReader::new(file)
        .split(b'\n')
        .enumerate()
        .map(|(index, line)| {
            let number = index + 1;
            let mut bytes = line.map_err(io)?;
            if bytes.last() == Some(&b'\r') {
                bytes.pop();
            }
            String::from_utf8(bytes)
                .map(|text| (number, text))
                .map_err(|e| refused(number, format!("not UTF-8: {}", e.utf8_error())))
        });
    let first = match lines.next() {
        Some(line) => line?.1,
        None => return Err(refused(1, "empty: no header".into())),
    };
    let header: Header = serde_json::from_str(&first)
        .map_err(|e| refused(1, format!("not a sluice recording header: {e}")))?;
    if header.sluice_recording != VERSION {
        let reason = format!(
            "format version {} (this sluice reads {VERSION})",
            header.sluice_recording
        );
        return Err(refused(1, reason));
    }
    let mut calls = Vec::new();
    for line in lines {
        let (number, line) = line?;
        let call: Call =
            serde_json::from_str(&line).map_err(|e| refused(number, format!("not a call: {e}")))?;
        calls.push(call);
    }
    Ok(Recording { header, calls })
}

/// A call's line as `format::Call` writes it, borrowing what it can from the request.
#[derive(Serialize)]
pub(crate) struct Line<'a> {
    pub(crate) t: u64,
    pub(crate) domain: &'a str,
    #[serde(skip_serializing_if = "is_zero")]
    pub(crate) hits_addend: u32,
    pub(crate) descriptors: Vec<LineDescriptor<'a>>,
    pub(crate) code: Code,
    pub(crate) statuses: &'a [Status],
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) lease: Option<&'a str>,
    #[serde(rename = "reserve", skip_serializing_if = "Option::is_none")]
    pub(crate) ticket: Option<&'a str>,
}

#[derive(Serialize)]
pub(crate) struct LineDescriptor<'a> {
    pub(crate) entries: Vec<(&'a str, Cow<'a, str>)>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) hits_addend: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) limit: Option<Override>,
}
