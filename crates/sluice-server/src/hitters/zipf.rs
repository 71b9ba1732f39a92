//! A skewed stream of value indexes, Zipf(1) over `values`: value i comes about 1/(i+1) as
//! often as value 0. The test and the benchmark that hold the sketches to their bound draw
//! from it (a fixed seed: the same stream every run).

/// The stream.
pub struct Zipf {
    cumulative: Vec<f64>,
    state: u64,
}

impl Zipf {
    /// Over `values` values (at least one), from `seed` (not 0).
    pub fn new(values: usize, seed: u64) -> Zipf {
        let mut cumulative = Vec::with_capacity(values.max(1));
        let mut sum = 0.0;
        for rank in 1..=values.max(1) {
            sum += 1.0 / rank as f64;
            cumulative.push(sum);
        }
        Zipf {
            cumulative,
            state: seed.max(1),
        }
    }
}

impl Iterator for Zipf {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        // xorshift64
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        let total = self.cumulative.last().copied().unwrap_or(1.0);
        let u = (self.state >> 11) as f64 / (1u64 << 53) as f64 * total;
        let index = self.cumulative.partition_point(|c| *c < u);
        Some(index.min(self.cumulative.len() - 1))
    }
}
