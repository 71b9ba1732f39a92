//! How a held state is written into the memory store's snapshot and read back
//! (`store::memory::snapshot` owns the file around it): fixed-width little-endian fields, a
//! list as a `u32` count and its items. Each state type says its own layout (`Persist`, beside
//! the type); reading never panics: too few bytes, or a count larger than what is left, is
//! `None`.

/// A state's bytes in a snapshot.
pub trait Persist: Sized {
    /// Appends the state's bytes to `out`.
    fn put(&self, out: &mut Vec<u8>);

    /// Reads one state from the front of `input`.
    fn take(input: &mut Input<'_>) -> Option<Self>;
}

/// The bytes a state is read from, consumed from the front.
#[derive(Debug)]
pub struct Input<'a>(&'a [u8]);

impl<'a> Input<'a> {
    /// `bytes`, to be read from the front.
    pub fn new(bytes: &'a [u8]) -> Input<'a> {
        Input(bytes)
    }

    /// Whether every byte has been read.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The next `n` bytes.
    pub fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.bytes(N)?.try_into().ok()
    }

    pub fn u8(&mut self) -> Option<u8> {
        self.array::<1>().map(|[b]| b)
    }

    pub fn u32(&mut self) -> Option<u32> {
        self.array().map(u32::from_le_bytes)
    }

    pub fn u64(&mut self) -> Option<u64> {
        self.array().map(u64::from_le_bytes)
    }

    pub fn u128(&mut self) -> Option<u128> {
        self.array().map(u128::from_le_bytes)
    }

    pub fn i128(&mut self) -> Option<i128> {
        self.array().map(i128::from_le_bytes)
    }

    /// A `bool` written as one byte, 0 or 1.
    pub fn bool(&mut self) -> Option<bool> {
        match self.u8()? {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        }
    }

    /// A list's count, when `item_bytes` times it fits in what is left.
    pub fn count(&mut self, item_bytes: usize) -> Option<usize> {
        let count = self.u32()? as usize;
        (count.checked_mul(item_bytes)? <= self.0.len()).then_some(count)
    }
}

/// Writes a list's count (lists longer than `u32::MAX` are never held).
pub fn put_count(out: &mut Vec<u8>, count: usize) {
    out.extend_from_slice(&u32::try_from(count).unwrap_or(u32::MAX).to_le_bytes());
}

/// A list of times, counts or ids: the sliding log, a modifier's record of times.
impl Persist for Vec<u64> {
    fn put(&self, out: &mut Vec<u8>) {
        put_count(out, self.len());
        for value in self {
            out.extend_from_slice(&value.to_le_bytes());
        }
    }

    fn take(input: &mut Input<'_>) -> Option<Self> {
        let count = input.count(8)?;
        (0..count).map(|_| input.u64()).collect()
    }
}

impl<T: Persist> Persist for Box<T> {
    fn put(&self, out: &mut Vec<u8>) {
        (**self).put(out);
    }

    fn take(input: &mut Input<'_>) -> Option<Self> {
        T::take(input).map(Box::new)
    }
}

/// One state read from all of `bytes`: bytes left over are a state of another layout.
pub fn read_whole<T: Persist>(bytes: &[u8]) -> Option<T> {
    let mut input = Input::new(bytes);
    let state = T::take(&mut input)?;
    input.is_empty().then_some(state)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_reads_back_and_a_short_or_long_one_does_not() {
        let log: Vec<u64> = vec![1, 2, u64::MAX];
        let mut bytes = Vec::new();
        log.put(&mut bytes);
        assert_eq!(read_whole::<Vec<u64>>(&bytes), Some(log));
        assert_eq!(read_whole::<Vec<u64>>(&bytes[..bytes.len() - 1]), None);
        bytes.push(0);
        assert_eq!(read_whole::<Vec<u64>>(&bytes), None);
        // A count far beyond the bytes is refused before anything is allocated.
        assert_eq!(read_whole::<Vec<u64>>(&u32::MAX.to_le_bytes()), None);
    }
}
