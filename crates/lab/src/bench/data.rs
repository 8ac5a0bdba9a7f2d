//! The benchmarks' data sets: where `scripts/make-corpus` puts them, and a
//! file's pages compressed as zram would store them.
//!
//! This module owns reading and compressing the inputs; it measures nothing.

use std::path::PathBuf;

use crate::Error;

/// Where `scripts/make-corpus` puts the data sets: `$ZMEM_DATA` (default
/// `/var/tmp/zmem-data`).
fn data_dir() -> PathBuf {
    std::env::var_os("ZMEM_DATA").map_or_else(|| PathBuf::from("/var/tmp/zmem-data"), PathBuf::from)
}

/// Two of the data sets `scripts/make-corpus` makes: the Linux source tar and
/// system binaries, under `$ZMEM_DATA` (default `/var/tmp/zmem-data`).
pub fn default_data() -> Vec<PathBuf> {
    let dir = data_dir();
    vec![dir.join("linux256.bin"), dir.join("usr256.bin")]
}

/// All three data sets `scripts/make-corpus` makes: the Linux source tar,
/// system binaries and a process's core dump, under `$ZMEM_DATA` (default
/// `/var/tmp/zmem-data`).
pub fn all_data() -> Vec<PathBuf> {
    let dir = data_dir();
    vec![
        dir.join("linux256.bin"),
        dir.join("usr256.bin"),
        dir.join("heap256.bin"),
    ]
}

/// (offset, length) of one object's bytes in the buffer of compressed pages.
pub type Span = (usize, usize);

/// zs_huge_class_size of the kernel's default pool (4 KiB pages, chain 8).
const KERNEL_HUGE_CLASS_SIZE: usize = 3625;

/// The lz4-compressed pages of a file, same-filled pages skipped, as one
/// buffer with offsets (so the worker's own memory is made before measuring).
pub fn compressed_pages(path: &std::path::Path) -> Result<(Vec<u8>, Vec<Span>), Error> {
    let data = tune::corpus::read_input(path)?;
    let lz4 = zcomp::Compressor::with_defaults(zcomp::Algorithm::Lz4);
    let mut ctx = lz4.context().map_err(|e| Error::Failed(e.to_string()))?;
    let mut buf = Vec::with_capacity(data.len() / 2);
    let mut spans = Vec::with_capacity(data.len() / 4096);
    for page in data.chunks_exact(4096) {
        let word = &page[..8];
        if page.chunks_exact(8).all(|w| w == word) {
            continue;
        }
        let c = ctx
            .compress_buffered(page)
            .map_err(|e| Error::Failed(e.to_string()))?;
        // As zram: a page that does not compress below the kernel's
        // huge_class_size is stored raw, a page-sized object.
        let obj = if c.len() >= KERNEL_HUGE_CLASS_SIZE {
            page
        } else {
            c
        };
        spans.push((buf.len(), obj.len()));
        buf.extend_from_slice(obj);
    }
    Ok((buf, spans))
}

/// A seeded shuffle of `0..n` (Fisher-Yates): the order pages are laid out
/// or visited in, the same in every run.
pub(super) fn shuffled(n: usize, seed: u64) -> Vec<usize> {
    let mut rng = tune::rng::Rng::new(seed, 1);
    let mut v: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        v.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
    }
    v
}
