//! Test support shared by the tests of several zmem crates; no crate depends
//! on it except as a dev-dependency, and it depends on no zmem crate.
//!
//! It owns what more than one crate's tests need and no crate's own test
//! module should keep a copy of: running the Debian NBD clients with a
//! timeout and the qemu-io scenario both NBD servers are put through
//! ([`clients`]), real data ([`real_data`]), and reading the process's
//! resident set ([`rss`]). What is about one crate (a test server, the
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
    let mut x = 0x9e37_79b9u32;
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        out.push(x as u8);
    }
    out.truncate(len);
    out
}
