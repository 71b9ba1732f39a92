//! What a client asks of a bucket's budget and the claim it then holds: the terms both the
//! budget (`budget`) and one bucket's claims (`claims`) speak, below either of them.

/// What a client asks of a bucket's budget.
#[derive(Debug, Clone, Copy)]
pub struct Ask<'a> {
    pub bucket: &'a str,
    pub client: &'a str,
    pub demand: u64,
    pub limit: u64,
    pub now_us: u64,
    pub expires_at_us: u64,
}

/// One client's claim on a bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claim {
    /// Requests per period the client would send.
    pub demand: u64,
    /// Requests per period it may admit now.
    pub assigned: u64,
    pub expires_at_us: u64,
}
