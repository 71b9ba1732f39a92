//! Building the response: one `DescriptorStatus` per descriptor, in request order, and the
//! overall code.

use sluice_core::engine::vetoed;
use sluice_core::limit::{ceil_seconds, Decision, Limit, Role};
use sluice_proto::rate_limit_response::{Code, DescriptorStatus, RateLimit};

/// What applies to one descriptor after matching, overrides and `replaces`. `Limited` is the
/// common case, kept inline: boxing it would allocate for every descriptor of every request.
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::large_enum_variant)]
pub enum Verdict<'a> {
    /// Unknown domain, no matching limit, or a limit replaced by another.
    NoLimit,
    /// `unlimited: true`: always OK, never stored.
    Unlimited,
    /// Charged in the store.
    Limited(Applied<'a>),
}

/// A limit being applied, and the flags that shape its status.
#[derive(Debug, Clone, PartialEq)]
pub struct Applied<'a> {
    pub limit: Limit,
    pub name: &'a str,
    pub shadow_mode: bool,
    pub quota_mode: bool,
    /// The matched rule's `metadata`, for dynamic metadata.
    pub metadata: Option<&'a prost_types::Struct>,
    /// Of a rule of several limits, the limit's place among them: its state's key says it, so
    /// a limit keeps its key when another is replaced or left out (a release).
    pub slot: Option<usize>,
    /// With the global `QUOTA_MODE`, the request holds a descriptor no limit applies to,
    /// which counts as a quota descriptor that passed (as in the reference): not every quota
    /// descriptor can be over, so this limit's denial never denies the request.
    pub beside_passing_quota: bool,
}

impl Applied<'_> {
    /// How the limit's denial weighs on the request: a shadow-mode limit never denies it, a
    /// quota-mode limit only with every other quota-mode limit of the request; a quota-mode
    /// limit in shadow mode, or beside a descriptor that counts as a passing quota one, is a
    /// quota limit that passes (as in the reference).
    pub fn role(&self) -> Role {
        if self.quota_mode && (self.shadow_mode || self.beside_passing_quota) {
            Role::PassingQuota
        } else if self.shadow_mode {
            Role::Shadow
        } else if self.quota_mode {
            Role::Quota
        } else {
            Role::Enforced
        }
    }
}

/// The status of one descriptor; `decision` is present for `Limited` verdicts.
pub fn status(verdict: &Verdict<'_>, decision: Option<&Decision>) -> DescriptorStatus {
    match (verdict, decision) {
        (Verdict::Limited(applied), Some(decision)) => limited_status(applied, decision),
        (Verdict::Unlimited, _) => DescriptorStatus {
            code: Code::Ok as i32,
            limit_remaining: u32::MAX,
            ..Default::default()
        },
        _ => DescriptorStatus {
            code: Code::Ok as i32,
            ..Default::default()
        },
    }
}

fn limited_status(applied: &Applied<'_>, decision: &Decision) -> DescriptorStatus {
    // A limit in shadow mode is charged and counted, but never denies.
    let code = if decision.admitted || applied.shadow_mode {
        Code::Ok
    } else {
        Code::OverLimit
    };
    let seconds = ceil_seconds(decision.duration_until_reset_us());
    DescriptorStatus {
        code: code as i32,
        current_limit: Some(RateLimit {
            name: applied.name.to_string(),
            requests_per_unit: applied.limit.requests_per_unit,
            unit: applied.limit.unit.proto_number(),
        }),
        // A denied hit reports nothing left, as the reference does, even when a smaller
        // request would fit (a cost above what remains).
        limit_remaining: if decision.admitted {
            decision.remaining
        } else {
            0
        },
        duration_until_reset: Some(prost_types::Duration {
            seconds: i64::try_from(seconds).unwrap_or(i64::MAX),
            nanos: 0,
        }),
    }
}

/// OVER_LIMIT iff the limited descriptors veto the request (`engine::vetoed`: any
/// enforced one over, or every quota one over, when there are any), the rule by which the
/// store charged it. (Global shadow mode turns it into OK afterwards, in the service.)
pub fn overall_code<'v, 'a: 'v>(
    verdicts: impl IntoIterator<Item = &'v Verdict<'a>>,
    statuses: &[DescriptorStatus],
) -> Code {
    let outcomes =
        verdicts
            .into_iter()
            .zip(statuses)
            .filter_map(|(verdict, status)| match verdict {
                Verdict::Limited(applied) => {
                    Some((applied.role(), status.code != Code::OverLimit as i32))
                }
                _ => None,
            });
    if vetoed(outcomes) {
        Code::OverLimit
    } else {
        Code::Ok
    }
}
