//! A limit as an algorithm sees it (`Rate`): L, the period W, the capacity, and whether a hit
//! that does not fit is charged all the same (debt, or the reference's counting).

/// What an algorithm needs of a limit: L, the period W, the capacity, and whether it takes
/// debt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    /// L, requests per period.
    pub requests_per_unit: u32,
    period_us: u64,
    capacity: u64,
    /// A hit that does not fit is charged all the same (costs reported after the response),
    /// and what it leaves above the limit carries over (a fixed window's excess included).
    pub debt: bool,
    /// A hit that does not fit is charged all the same, without carrying over windows: the
    /// reference's counting (`STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false`).
    pub charges_denied: bool,
}

impl Rate {
    /// L per `period_us`, holding at most `capacity` at once.
    pub fn new(requests_per_unit: u32, period_us: u64, capacity: u64) -> Rate {
        Rate {
            requests_per_unit,
            period_us,
            capacity,
            debt: false,
            charges_denied: false,
        }
    }

    /// The same rate, taking debt or not.
    pub fn with_debt(self, debt: bool) -> Rate {
        Rate { debt, ..self }
    }

    /// The same rate, charging a hit that does not fit or not.
    pub fn with_denied_charged(self, charges_denied: bool) -> Rate {
        Rate {
            charges_denied,
            ..self
        }
    }

    /// Whether a hit that does not fit is charged: in debt, or by the reference's counting.
    pub fn charges_what_does_not_fit(&self) -> bool {
        self.debt || self.charges_denied
    }

    /// The period W in microseconds.
    pub fn period_us(&self) -> u64 {
        self.period_us
    }

    /// The bucket capacity (the burst), or L for the window algorithms.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }
}
