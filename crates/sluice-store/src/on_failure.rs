//! The answer when the store cannot decide, as a layer in front of it: each hit as its
//! limit's `on_store_failure` says, else as the replica's default (`--failure-mode`) says. A
//! hit whose answer is `unavailable` fails the call (the error goes up, and the service
//! answers UNAVAILABLE so that Envoy's `failure_mode_deny` decides); `allow` and `deny`
//! answer the hit so; `local_share` hits are decided together on this replica's own share of
//! their limits (`local_share`, divided by the replica count the shared store learns), and
//! fail the call where there is none (a store of this replica only, as the memory store).
//! Every failure is counted here, by kind (`sluice_store_errors_total`), whatever answers it.

use std::sync::atomic::{AtomicU64, Ordering};

use metrics::Label;
use sluice_core::engine::Charging;
use sluice_core::limit::{Decision, Hit};
use sluice_core::modifier::on_store_failure::Policy;

use crate::any::AnyStore;
use crate::local_share::LocalShare;
use crate::series::{Reporting, Series};
use crate::{Store, StoreError};

/// `inner`, with its failures answered as each limit's policy says.
pub struct WithFailureAnswer<S> {
    inner: S,
    /// The answer of a limit that names none (`--failure-mode`).
    otherwise: Policy,
    /// This replica's shares of the limits, when the store is shared.
    shares: Option<LocalShare>,
    /// Failures so far, by `StoreError::KINDS`.
    errors: [AtomicU64; StoreError::KINDS.len()],
}

impl<S: Store> WithFailureAnswer<S> {
    /// `inner`, answering a limit without its own `on_store_failure` as `otherwise` says,
    /// and its local shares on `shares` (none: a store of this replica only).
    pub fn new(inner: S, otherwise: Policy, shares: Option<LocalShare>) -> WithFailureAnswer<S> {
        WithFailureAnswer {
            inner,
            otherwise,
            shares,
            errors: Default::default(),
        }
    }

    /// The store behind the layer.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// The decisions of `hits`, which the store could not decide (`error`), as their
    /// policies say; the error itself when one of them is `unavailable`, or when local
    /// shares were asked of a store that keeps none.
    async fn answer(
        &self,
        hits: &[Hit],
        charging: Charging,
        error: StoreError,
    ) -> Result<Vec<Decision>, StoreError> {
        tracing::debug!(%error, "store failed");
        let policies: Vec<Policy> = hits
            .iter()
            .map(|hit| {
                hit.limit
                    .modifiers
                    .on_store_failure
                    .unwrap_or(self.otherwise)
            })
            .collect();
        if policies.contains(&Policy::Unavailable) {
            return Err(error);
        }
        let alone = alone_hits(hits, &policies);
        let mut shared = Vec::new().into_iter();
        if !alone.is_empty() {
            let Some(shares) = &self.shares else {
                return Err(error);
            };
            shared = match shares.decide(&alone, charging).await {
                Ok(decisions) => decisions.into_iter(),
                Err(_) => return Err(error),
            };
        }
        let answered = policies
            .iter()
            .map(|policy| match policy {
                Policy::Allow | Policy::Deny => Some(fixed(*policy == Policy::Allow)),
                _ => shared.next(),
            })
            .collect::<Option<Vec<_>>>();
        answered.ok_or(error)
    }
}

impl WithFailureAnswer<std::sync::Arc<AnyStore>> {
    /// `store` behind the layer: a shared store's local shares divided by the replica count
    /// it learns, on its clock; a store of this replica alone has none.
    pub fn over_any(store: std::sync::Arc<AnyStore>, otherwise: Policy) -> Self {
        let shares = store
            .redis()
            .map(|redis| LocalShare::new(redis.replica_count(), redis.clock()));
        WithFailureAnswer::new(store, otherwise, shares)
    }
}

impl<S: Store> Store for WithFailureAnswer<S> {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    async fn charge(&self, hits: &[Hit], charging: Charging) -> Result<Vec<Decision>, StoreError> {
        match self.inner.charge(hits, charging).await {
            Ok(decisions) => Ok(decisions),
            Err(error) => {
                if let Some(kind) = StoreError::KINDS.iter().position(|k| *k == error.kind()) {
                    self.errors[kind].fetch_add(1, Ordering::Relaxed);
                }
                // Boxed: a failure's answer is rare, and its future must not grow every call's.
                Box::pin(self.answer(hits, charging, error)).await
            }
        }
    }

    async fn healthy(&self) -> bool {
        self.inner.healthy().await
    }

    fn config_changed(&self) {
        self.inner.config_changed();
    }
}

impl<S: Store> Reporting for WithFailureAnswer<S> {
    /// The store's series, and its failures by kind.
    fn report(&self, series: &Series) {
        self.inner.report(series);
        for (kind, count) in StoreError::KINDS.iter().zip(&self.errors) {
            series
                .counter("sluice_store_errors_total", vec![Label::new("kind", *kind)])
                .absolute(count.load(Ordering::Relaxed));
        }
    }
}

/// The hits decided on local shares, in order; a hit whose descriptor's earlier hit is not
/// among them starts its own run.
fn alone_hits(hits: &[Hit], policies: &[Policy]) -> Vec<Hit> {
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
