//! Test data shared by the integration tests: real 4 KiB pages cut from
//! files on the machine, plus synthetic edge cases. Everything is
//! deterministic (sorted directory walks, a seeded generator).

#![allow(dead_code)]

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use zcomp::{Algorithm, Compressor, Params};

/// The page size zram uses on x86-64.
pub const PAGE: usize = 4096;

/// Regular files under `root` of at least `PAGE` bytes, in name order,
/// without following symlinks; stops after `limit` files.
fn files(root: &Path, limit: usize, out: &mut Vec<PathBuf>) {
    let Ok(dir) = std::fs::read_dir(root) else {
        return;
    };
    let mut entries: Vec<_> = dir.filter_map(|e| e.ok()).collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        if out.len() >= limit {
            return;
        }
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            files(&entry.path(), limit, out);
        } else if kind.is_file() && entry.metadata().is_ok_and(|m| m.len() >= PAGE as u64) {
            out.push(entry.path());
        }
    }
}

/// Up to `per_root` pages from each of /usr/bin (binaries) and /usr/share
/// (text and data): the first page of each file and one from its middle.
pub fn real_pages(per_root: usize) -> Vec<Vec<u8>> {
    let mut pages = Vec::new();
    for root in ["/usr/bin", "/usr/share"] {
        let mut paths = Vec::new();
        files(Path::new(root), per_root, &mut paths);
        let start = pages.len();
        for path in paths {
            let Ok(mut f) = File::open(&path) else {
                continue;
            };
            let Ok(len) = f.metadata().map(|m| m.len()) else {
                continue;
            };
            let middle = (len / 2 / PAGE as u64) * PAGE as u64;
            for offset in [0, middle] {
                if pages.len() - start >= per_root {
                    break;
                }
                let mut page = vec![0u8; PAGE];
                if f.seek(SeekFrom::Start(offset)).is_ok() && f.read_exact(&mut page).is_ok() {
                    pages.push(page);
                }
                if middle == 0 {
                    break;
                }
            }
        }
    }
    assert!(
        pages.len() >= per_root,
        "found only {} real pages under /usr/bin and /usr/share",
        pages.len()
    );
    pages
}

/// `len` bytes from a seeded generator (splitmix64): incompressible.
pub fn random_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        out.extend_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
    out.truncate(len);
    out
}

/// A small deterministic generator for picking positions in tests.
pub struct Rng(pub u64);

impl Rng {
    /// The next value below `n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) % n as u64) as usize
    }
}

/// Synthetic edge cases: empty and tiny inputs, zero and same-filled
/// pages, random pages, half-random pages, and sizes other than a page.
pub fn edge_inputs() -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = [0usize, 1, 2, 3, 4, 5, 7, 12, 13, 15, 16, 31, 64, 100]
        .iter()
        .map(|&n| random_bytes(n as u64, n))
        .collect();
    v.push(b"a".to_vec());
    v.push(vec![0u8; PAGE]);
    v.push(vec![0xA5u8; PAGE]);
    v.push(0u64.to_le_bytes().repeat(PAGE / 8));
    v.push(random_bytes(1, PAGE));
    v.push(random_bytes(2, PAGE));
    let mut half = vec![0u8; PAGE];
    half[..PAGE / 2].copy_from_slice(&random_bytes(3, PAGE / 2));
    v.push(half);
    v.push(random_bytes(4, 3 * PAGE + 17));
    v.push(vec![7u8; 4 * PAGE]);
    v.push(random_bytes(5, 64 * 1024 + 1));
    v
}

/// Every algorithm at a range of levels (and deflate windows), with no
/// dictionary.
pub fn configurations() -> Vec<Compressor> {
    let mut out = Vec::new();
    let mut add = |algorithm: Algorithm, level: i32, window_bits: Option<u8>| {
        let params = Params {
            level: Some(level),
            window_bits,
            dict: None,
        };
        out.push(Compressor::new(algorithm, &params).expect("valid settings"));
    };
    for level in [1, 2, 8, 64, 65537] {
        add(Algorithm::Lz4, level, None);
    }
    add(Algorithm::Lz4Flex, 1, None);
    add(Algorithm::LzoRle, 1, None);
    add(Algorithm::Lzo, 1, None);
    for level in [1, 4, 9, 12] {
        add(Algorithm::Lz4Hc, level, None);
    }
    for level in [-131072, -5, -1, 0, 1, 3, 9, 19, 22] {
        add(Algorithm::Zstd, level, None);
    }
    for level in [-1, 0, 1, 6, 9] {
        for bits in [9, 11, 15] {
            add(Algorithm::Deflate, level, Some(bits));
        }
    }
    // deflate by the C zlib too, as kernel-compat mode runs it.
    let kernel: Vec<Compressor> = out
        .iter()
        .filter(|c| c.algorithm() == Algorithm::Deflate)
        .map(Compressor::kernel_compat)
        .collect();
    out.extend(kernel);
    out
}
