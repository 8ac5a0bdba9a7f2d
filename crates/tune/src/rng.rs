//! A small deterministic generator (xorshift64) for the experiments and
//! benchmarks: fixed seeds give the same workload on every run and machine.

/// xorshift64; never zero.
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed`, on an independent stream per `stream`.
    pub fn new(seed: u64, stream: u64) -> Rng {
        Rng((seed ^ stream.wrapping_mul(0x9e37_79b9_7f4a_7c15)) | 1)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}
