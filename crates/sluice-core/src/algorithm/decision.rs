//! What deciding one hit gives: the common answer every algorithm makes (`Decision`), the
//! mark the unit that decided leaves on it (`Mark`: a lease limit's lease counts, or a
//! modifier's note), and the state to store with it (`Outcome`). A new algorithm that reports
//! something of its own adds a variant to `Mark`, never a field to `Decision`; a modifier
//! notes numbers of its own (`Noted`).

use super::kept::Noted;
use super::State;

/// What an algorithm decided for one hit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Decision {
    pub admitted: bool,
    /// Requests still admitted after this one; for a denial, what remained before it (the
    /// response says 0; metrics split the denied hits by it, as the reference does).
    pub remaining: u32,
    /// Time until the limit is fully replenished.
    pub reset_after_us: u64,
    /// Time until this same request would be admitted; 0 when admitted.
    pub retry_after_us: u64,
    /// What the unit that decided adds: at most one (a modifier that answers in place of the
    /// limit replaces its decision whole).
    pub mark: Mark,
    /// When the store decided it (its clock, µs since the epoch); 0 when no store did. The
    /// memory store reads it under the locks the decision holds, so that two decisions on
    /// one key are in the order of their times (what a recording replays by).
    pub decided_at_us: u64,
}

/// What a unit leaves on a decision besides the common answer: one variant per unit that
/// reports something (the registry of marks).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Mark {
    /// Nothing beside the common answer.
    #[default]
    None,
    /// A lease limit's leases this hit released (its token's), and those it found
    /// past their life and dropped.
    Leases { released: u32, expired: u32 },
    /// A modifier of the limit noted what it did (`crate::modifier`).
    Noted(Noted),
}

impl Mark {
    /// The mark of a lease limit's hit: none when it neither released nor dropped a
    /// lease, so that every store marks the same decision alike.
    pub fn leases(released: u32, expired: u32) -> Mark {
        if released == 0 && expired == 0 {
            Mark::None
        } else {
            Mark::Leases { released, expired }
        }
    }
}

impl Decision {
    /// The `duration_until_reset` Envoy gets: time to full replenishment when admitted, time
    /// until the same request would pass when not.
    pub fn duration_until_reset_us(&self) -> u64 {
        if self.admitted {
            self.reset_after_us
        } else {
            self.retry_after_us
        }
    }

    /// The leases the hit released and found expired: (0, 0) unless a lease limit
    /// decided it.
    pub fn leases(&self) -> (u32, u32) {
        match self.mark {
            Mark::Leases { released, expired } => (released, expired),
            _ => (0, 0),
        }
    }

    /// What the modifier whose YAML key is `by` noted on the decision, if it did.
    pub fn noted(&self, by: &str) -> Option<Noted> {
        match self.mark {
            Mark::Noted(noted) if noted.by == by => Some(noted),
            _ => None,
        }
    }
}

/// The result of one check: the decision, and the state to store (with the time after which
/// it no longer matters) when it changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub decision: Decision,
    pub new_state: Option<(State, u64)>,
}
