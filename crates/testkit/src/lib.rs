//! Test support shared by the tests of several zmem crates; no crate depends
//! on it except as a dev-dependency, and it depends on no zmem crate.
//!
//! It owns what more than one crate's tests need and no crate's own test
//! module should keep a copy of: running the Debian NBD clients with a
//! timeout and the qemu-io scenario both NBD servers are put through
//! ([`clients`]), whether a server closed a raw connection
//! ([`peer_closed`]), real data ([`real_data`]), incompressible bytes
//! ([`noise`]), and reading the process's resident set ([`rss`]). What is about one crate (a test server, the
//! `zmem` binary) stays in that crate's tests.

pub mod clients;
pub mod rss;

use std::io::Read;
use std::path::PathBuf;

/// `len` bytes of real data: system libraries and programs, concatenated in
/// a fixed order (padded with a pattern on a very small system).
pub fn real_data(len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    for dir in ["/usr/lib/x86_64-linux-gnu", "/usr/lib", "/usr/bin"] {
        let Ok(rd) = std::fs::read_dir(dir) else {
            continue;
        };
        let mut files: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
        files.sort();
        for f in files {
            if out.len() >= len {
                break;
            }
            if !f.is_file() {
                continue;
            }
            if let Ok(file) = std::fs::File::open(&f) {
                let want = (len - out.len()).min(2 << 20) as u64;
                let _ = file.take(want).read_to_end(&mut out);
            }
        }
    }
    let pad = len.saturating_sub(out.len());
    out.extend(noise(pad, 0x9e37_79b9));
    out.truncate(len);
    out
}

/// `len` incompressible bytes, the same for the same `seed` (not 0): the low
/// byte of each step of xorshift32 from `seed`.
pub fn noise(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

/// Whether the peer has closed the connection `s`: a read sees EOF or a
/// reset. A read that times out (the stream's read timeout) found the
/// connection still open, and so did one that got a byte.
pub fn peer_closed(s: &mut impl Read) -> bool {
    let mut b = [0u8; 1];
    match s.read(&mut b) {
        Ok(n) => n == 0,
        Err(e) => !matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
    }
}
