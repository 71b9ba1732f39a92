//! The gRPC codec of every service sluice serves and calls: prost's, with smaller buffers.
//! tonic gives each stream an 8 KiB buffer to decode into and another to encode into, held
//! for the stream's life: 16 KiB of an RLQS stream's ~35 KiB, which 10,000 Envoys keep open
//! (BENCHMARKS.md, "How does the cost hold as rules, keys, descriptors and clients grow?"). A buffer of 1 KiB holds any request sluice expects; a larger
//! message grows it as it would have grown the default one.

use std::marker::PhantomData;

use tonic::codec::BufferSettings;
use tonic_prost::{ProstDecoder, ProstEncoder};

/// The initial size of a stream's decode and encode buffers.
const BUFFER_BYTES: usize = 1024;
/// How much a response stream encodes before it yields (tonic's default).
const YIELD_THRESHOLD_BYTES: usize = 32 * 1024;

/// Prost's encoding with `BUFFER_BYTES` buffers; the generated services name it
/// (`build.rs`, `codec_path`).
#[derive(Debug)]
pub struct Codec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for Codec<T, U> {
    fn default() -> Self {
        Codec(PhantomData)
    }
}

fn buffers() -> BufferSettings {
    BufferSettings::new(BUFFER_BYTES, YIELD_THRESHOLD_BYTES)
}

impl<T, U> tonic::codec::Codec for Codec<T, U>
where
    T: prost::Message + Send + 'static,
    U: prost::Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = ProstDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder::new(buffers())
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstDecoder::new(buffers())
    }
}
