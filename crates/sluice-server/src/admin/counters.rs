//! The admin API's reset and credit of a descriptor's counters (docs/admin.md, "Reset and
//! credit"): the limits they act on, what each refuses (an unlimited descriptor, a credit an
//! algorithm takes none of, a limit held across regions), and the change logged.

use super::model::{Credit, DescriptorState, Reset, ResetOutcome};
use super::{describe, named, shown_name, used_of, Admin, AdminError, DescriptorRef};
use sluice_config::overrides::EntryDoc;
use sluice_core::limit::Hit;
use sluice_limiter::plan::{DescriptorInForce, LimitInForce};
use sluice_store::admin::AdminStore;

impl Admin {
    /// Clears the counters of a descriptor's limits (or of one by name); a lease limit's
    /// leases in flight and what modifiers hold for requests in flight stay.
    pub async fn reset(&self, who: &str, reset: Reset) -> Result<ResetOutcome, AdminError> {
        let name = named(reset.name);
        let limits = self.targets(&reset.domain, &reset.descriptor, name.as_deref())?;
        refuse_global(&limits, &name, "reset")?;
        let mut kept = Vec::new();
        let hits: Vec<Hit> = limits
            .iter()
            .filter(|limit| {
                let leases = limit.limit.algorithm().leases();
                if leases {
                    kept.push(format!(
                        "{}: leases in flight are never freed",
                        shown_name(limit)
                    ));
                }
                !leases
            })
            .map(|limit| limit.hit.clone())
            .collect();
        let target = DescriptorRef {
            domain: reset.domain,
            descriptor: reset.descriptor,
            name,
        };
        let before = self.get(target.clone()).await?;
        let cleared = self.store.reset(&hits, reset.records).await?;
        let state = self.get(target.clone()).await?;
        let what = describe(&target.domain, &target.descriptor, target.name.as_deref());
        self.changed(who, "reset", &what, &used_of(&before), &used_of(&state));
        Ok(ResetOutcome {
            cleared,
            kept,
            state,
        })
    }

    /// Grants `amount` more now to a descriptor's limits (or one by name): refused whole
    /// when a limit's algorithm takes no credit.
    pub async fn credit(&self, who: &str, credit: Credit) -> Result<DescriptorState, AdminError> {
        if credit.amount == 0 {
            return Err(AdminError::invalid("amount", "must be at least 1"));
        }
        let name = named(credit.name);
        let limits = self.targets(&credit.domain, &credit.descriptor, name.as_deref())?;
        refuse_global(&limits, &name, "credit")?;
        let field = if name.is_some() { "name" } else { "descriptor" };
        for limit in &limits {
            if let Some(reason) = limit.limit.algorithm().credit_refusal() {
                return Err(AdminError::Refused {
                    field: field.to_string(),
                    reason: format!("{}: {reason}", shown_name(limit)),
                });
            }
        }
        let target = DescriptorRef {
            domain: credit.domain,
            descriptor: credit.descriptor,
            name,
        };
        let before = self.get(target.clone()).await?;
        for limit in &limits {
            let hit = Hit {
                cost: credit.amount,
                ..limit.hit.clone()
            };
            self.store.credit(&hit).await?;
        }
        let state = self.get(target.clone()).await?;
        let what = format!(
            "{} by {}",
            describe(&target.domain, &target.descriptor, target.name.as_deref()),
            credit.amount
        );
        self.changed(who, "credit", &what, &used_of(&before), &used_of(&state));
        Ok(state)
    }

    /// The limits a reset or a credit acts on: the descriptor's (or the one named).
    fn targets(
        &self,
        domain: &str,
        entries: &[EntryDoc],
        name: Option<&str>,
    ) -> Result<Vec<LimitInForce>, AdminError> {
        let (in_force, _) = self.in_force(domain, entries)?;
        let limits = match in_force {
            DescriptorInForce::NoRule => {
                return Err(AdminError::invalid(
                    "descriptor",
                    "no rule of the domain matches it",
                ))
            }
            DescriptorInForce::Unlimited { .. } => {
                return Err(AdminError::Refused {
                    field: "descriptor".into(),
                    reason: "it is unlimited: nothing counts it".into(),
                })
            }
            DescriptorInForce::Limits { limits, .. } => limits,
        };
        let Some(name) = name else {
            return Ok(limits);
        };
        let named: Vec<LimitInForce> = limits.into_iter().filter(|l| l.name == name).collect();
        if named.is_empty() {
            return Err(AdminError::invalid(
                "name",
                format!("no limit named '{name}' applies to the descriptor"),
            ));
        }
        Ok(named)
    }
}

/// Refuses a reset or a credit (`what`) of limits among which one is held across regions: its
/// window is counted at home and in every region, and a change of this region's count alone
/// would let the region admit again what home already counted (docs/regions.md).
fn refuse_global(
    limits: &[LimitInForce],
    name: &Option<String>,
    what: &str,
) -> Result<(), AdminError> {
    match limits.iter().find(|l| l.limit.modifiers.global.is_some()) {
        Some(limit) => Err(AdminError::Refused {
            field: if name.is_some() { "name" } else { "descriptor" }.to_string(),
            reason: format!(
                "{}: a global limit's window is counted at home and in every region: a {what} of this region's count would admit again what home already counted",
                shown_name(limit)
            ),
        }),
        None => Ok(()),
    }
}
