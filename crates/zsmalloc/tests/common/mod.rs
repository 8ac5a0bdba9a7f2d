//! Helpers shared by the pool's integration tests: a deterministic generator
//! and deterministic object contents.

#![allow(dead_code)] // each test binary uses its own subset

/// xorshift64; the seed must not be zero.
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Deterministic bytes for object `id` of `len` bytes.
pub fn pattern(id: u64, len: usize) -> Vec<u8> {
    let mut rng = Rng(id.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    (0..len).map(|_| rng.next() as u8).collect()
}
