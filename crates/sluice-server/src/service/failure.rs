//! What a request gets when the store cannot decide it: each hit as its limit's
//! `on_store_failure` says, else as `--failure-mode` says. Any hit whose answer is
//! `unavailable` fails the call (gRPC UNAVAILABLE with the reason, so Envoy's
//! `failure_mode_deny` decides); `allow` and `deny` answer the hit so; `local_share` hits are
//! decided together by the store's local shares (`Store::decide_alone`), and fail the call
//! where the store keeps none.

use sluice_core::engine::Charging;
use sluice_core::limit::{Decision, Hit};
use sluice_core::modifier::on_store_failure::Policy;
use sluice_store::{Store, StoreError};

use super::error::DecisionError;
use super::FailureMode;

impl FailureMode {
    /// The answer a limit that names none gets.
    pub fn policy(self) -> Policy {
        match self {
            FailureMode::Unavailable => Policy::Unavailable,
            FailureMode::Allow => Policy::Allow,
            FailureMode::Deny => Policy::Deny,
            FailureMode::LocalShare => Policy::LocalShare,
        }
    }
}

/// The decisions of `hits`, which `store` could not decide (`error`), as their policies say.
pub(super) async fn answer<S: Store>(
    store: &S,
    failure_mode: FailureMode,
    charging: Charging,
    error: StoreError,
    hits: &[Hit],
) -> Result<Vec<Decision>, DecisionError> {
    tracing::debug!(%error, "store failed");
    let policies: Vec<Policy> = hits
        .iter()
        .map(|hit| {
            hit.limit
                .modifiers
                .on_store_failure
                .unwrap_or(failure_mode.policy())
        })
        .collect();
    if policies.contains(&Policy::Unavailable) {
        return Err(error.into());
    }
    let alone = local_share_hits(hits, &policies);
    let mut shared = Vec::new().into_iter();
    if !alone.is_empty() {
        shared = match store.decide_alone(&alone, charging).await {
            Some(Ok(decisions)) => decisions.into_iter(),
            Some(Err(_)) | None => return Err(error.into()),
        };
    }
    policies
        .iter()
        .map(|policy| match policy {
            Policy::Allow | Policy::Deny => Some(fixed(*policy == Policy::Allow)),
            _ => shared.next(),
        })
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| error.into())
}

/// The hits decided on local shares, in order; a hit whose descriptor's earlier hit is not
/// among them starts its own run.
fn local_share_hits(hits: &[Hit], policies: &[Policy]) -> Vec<Hit> {
    let shared = |i: usize| policies[i] == Policy::LocalShare;
    hits.iter()
        .enumerate()
        .filter(|(i, _)| shared(*i))
        .map(|(i, hit)| Hit {
            joins_previous: hit.joins_previous && i > 0 && shared(i - 1),
            ..hit.clone()
        })
        .collect()
}

/// A hit admitted or denied without a store.
fn fixed(admitted: bool) -> Decision {
    Decision {
        admitted,
        remaining: 0,
        reset_after_us: 0,
        retry_after_us: 0,
        ..Decision::default()
    }
}
