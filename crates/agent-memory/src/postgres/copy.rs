//! PostgreSQL's binary `COPY` format, written for `COPY … FROM STDIN (FORMAT binary)`: the
//! bulk path of [`store_batch`](super::PostgresBackend::store_batch).
//!
//! The format (PostgreSQL docs, "COPY", "Binary Format"): an 11-byte signature
//! `PGCOPY\n\377\r\n\0`, a 32-bit flags field (0: no OIDs) and a 32-bit header-extension
//! length (0); then per row a 16-bit field count and each field as a 32-bit length followed
//! by that many bytes in the type's binary form (the `*recv` function's input); then a
//! 16-bit -1 as trailer. Every integer is big-endian. The fields written here:
//!
//! - `bigint`: 8 bytes;
//! - `text`: the UTF-8 bytes (the connection's client encoding is UTF-8);
//! - pgvector's `vector` (`vector_recv`): a 16-bit dimension, a 16-bit unused word (0),
//!   then each element as a big-endian `float4`.
//!
//! Rows are encoded into a buffer that is sent whenever it passes [`CHUNK`] bytes, so a
//! large batch never sits in memory twice.

/// The signature, flags and header extension length that open every binary COPY stream.
const HEADER: &[u8] = b"PGCOPY\n\xff\r\n\0\0\0\0\0\0\0\0\0";

/// The 16-bit -1 that ends the stream.
const TRAILER: &[u8] = &[0xff, 0xff];

/// How many encoded bytes are gathered before they are sent.
pub(super) const CHUNK: usize = 1 << 20;

/// Why a value cannot be written in the binary COPY format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TooLarge {
    /// A field longer than a 32-bit length can say (PostgreSQL's limit is 1 GB anyway).
    Field(usize),
    /// A vector with more elements than a 16-bit dimension can say.
    Dimensions(usize),
}

impl std::error::Error for TooLarge {}

impl std::fmt::Display for TooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TooLarge::Field(bytes) => write!(f, "a field of {bytes} bytes is too large to copy"),
            TooLarge::Dimensions(n) => {
                write!(f, "a vector of {n} dimensions is too large for pgvector")
            }
        }
    }
}

/// A binary COPY stream being written.
pub(super) struct Encoder {
    buf: Vec<u8>,
}

impl Encoder {
    /// A stream with its header written.
    pub(super) fn new() -> Encoder {
        let mut buf = Vec::with_capacity(CHUNK + CHUNK / 4);
        buf.extend_from_slice(HEADER);
        Encoder { buf }
    }

    /// Starts a row of `fields` fields.
    pub(super) fn row(&mut self, fields: i16) {
        self.buf.extend_from_slice(&fields.to_be_bytes());
    }

    /// A `bigint` field.
    pub(super) fn bigint(&mut self, value: i64) {
        self.buf.extend_from_slice(&8i32.to_be_bytes());
        self.buf.extend_from_slice(&value.to_be_bytes());
    }

    /// A `text` field.
    pub(super) fn text(&mut self, value: &str) -> Result<(), TooLarge> {
        let len = i32::try_from(value.len()).map_err(|_| TooLarge::Field(value.len()))?;
        self.buf.extend_from_slice(&len.to_be_bytes());
        self.buf.extend_from_slice(value.as_bytes());
        Ok(())
    }

    /// A pgvector `vector` field.
    pub(super) fn vector(&mut self, value: &[f32]) -> Result<(), TooLarge> {
        let dims = i16::try_from(value.len()).map_err(|_| TooLarge::Dimensions(value.len()))?;
        // 2 + 2 + 4 per element: at most 4 + 4 × 32,767 bytes, which fits an i32.
        let len = 4 + 4 * i32::from(dims);
        self.buf.extend_from_slice(&len.to_be_bytes());
        self.buf.extend_from_slice(&dims.to_be_bytes());
        self.buf.extend_from_slice(&0i16.to_be_bytes());
        for x in value {
            self.buf.extend_from_slice(&x.to_be_bytes());
        }
        Ok(())
    }

    /// The bytes encoded so far, when there are at least [`CHUNK`] of them; the encoder
    /// starts over empty (the header is only at the stream's start).
    pub(super) fn full_chunk(&mut self) -> Option<Vec<u8>> {
        if self.buf.len() < CHUNK {
            return None;
        }
        Some(std::mem::replace(
            &mut self.buf,
            Vec::with_capacity(CHUNK + CHUNK / 4),
        ))
    }

    /// The rest of the stream, trailer included.
    pub(super) fn finish(mut self) -> Vec<u8> {
        self.buf.extend_from_slice(TRAILER);
        self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_is_header_rows_and_trailer() {
        let mut e = Encoder::new();
        e.row(3);
        e.bigint(0x0102_0304_0506_0708);
        e.text("hé").expect("small");
        e.vector(&[1.0, -2.5]).expect("small");
        assert!(e.full_chunk().is_none(), "far below a chunk");
        let bytes = e.finish();
        let mut expected = b"PGCOPY\n\xff\r\n\0".to_vec();
        expected.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0]); // flags, extension length
        expected.extend_from_slice(&[0, 3]); // three fields
        expected.extend_from_slice(&[0, 0, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8]);
        expected.extend_from_slice(&[0, 0, 0, 3, b'h', 0xc3, 0xa9]);
        expected.extend_from_slice(&[0, 0, 0, 12, 0, 2, 0, 0]); // length, dim, unused
        expected.extend_from_slice(&1.0f32.to_be_bytes());
        expected.extend_from_slice(&(-2.5f32).to_be_bytes());
        expected.extend_from_slice(&[0xff, 0xff]);
        assert_eq!(bytes, expected);
    }

    #[test]
    fn chunks_split_the_stream_without_repeating_the_header() {
        let mut e = Encoder::new();
        let text = "x".repeat(1000);
        let mut sent = Vec::new();
        for i in 0..3000 {
            e.row(2);
            e.bigint(i);
            e.text(&text).expect("small");
            if let Some(chunk) = e.full_chunk() {
                assert!(chunk.len() >= CHUNK);
                sent.extend(chunk);
            }
        }
        sent.extend(e.finish());
        assert_eq!(&sent[..HEADER.len()], HEADER);
        let row = 2 + 12 + 4 + 1000;
        assert_eq!(sent.len(), HEADER.len() + 3000 * row + TRAILER.len());
        assert_eq!(
            sent.windows(HEADER.len()).filter(|w| *w == HEADER).count(),
            1
        );
    }

    #[test]
    fn oversized_vectors_are_refused() {
        let mut e = Encoder::new();
        let huge = vec![0.0; 40_000];
        assert_eq!(e.vector(&huge), Err(TooLarge::Dimensions(40_000)));
        assert!(e.vector(&vec![0.0; 16_000]).is_ok());
    }
}
