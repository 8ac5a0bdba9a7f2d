//! Helpers for the region's tests: a deadline that aborts a hung test,
//! skipping where no userfaultfd can be opened, page contents with
//! checksums, and a seeded generator.

#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use region::{FaultService, Region, RegionConfig, RegionError};

/// Aborts the whole test process if not disarmed (dropped) within `secs`:
/// a hang fails instead of blocking.
pub struct Deadline {
    done: Arc<AtomicBool>,
}

impl Deadline {
    /// `secs` times `ZMEM_TEST_DEADLINE_SCALE` (default 1; a guest under
    /// software emulation runs these tests 30 to 100 times slower).
    pub fn new(name: &'static str, secs: u64) -> Deadline {
        let scale: u64 = std::env::var("ZMEM_TEST_DEADLINE_SCALE")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(1)
            .max(1);
        let secs = secs * scale;
        let done = Arc::new(AtomicBool::new(false));
        let d = Arc::clone(&done);
        std::thread::spawn(move || {
            let end = Instant::now() + Duration::from_secs(secs);
            while Instant::now() < end {
                if d.load(Ordering::Relaxed) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            eprintln!("{name}: over its {secs} s deadline, aborting");
            std::process::abort();
        });
        Deadline { done }
    }
}

impl Drop for Deadline {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Relaxed);
    }
}

/// The system's page size.
pub fn ps() -> usize {
    region::page_size()
}

/// Defaults with a limit of `limit` bytes, faults served by `service`.
pub fn config(service: FaultService, limit: usize) -> RegionConfig {
    let mut c = RegionConfig::new(limit);
    c.fault_service = service;
    c
}

/// `len` bytes of address space reserved (`PROT_NONE`, nothing mapped),
/// for a test to move a region onto with `mremap`.
pub fn reserve(len: usize) -> *mut libc::c_void {
    // SAFETY: a fresh anonymous mapping of no access; the test owns it.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED, "reserving {len} bytes");
    p
}

/// Fills pages `0..n` from `base` with `fill(page, i, version)`.
pub fn fill_pages(base: *mut u8, n: usize, version: u64) {
    let ps = ps();
    for i in 0..n {
        // SAFETY: the caller's `n` pages from `base` are its to write.
        fill(unsafe { base.add(i * ps) }, ps, i as u64, version);
    }
}

/// Checks that pages `0..n` from `base` hold `(i, version)`.
pub fn check_pages(base: *const u8, n: usize, version: u64) {
    let ps = ps();
    for i in 0..n {
        // SAFETY: the caller's `n` pages from `base` are readable.
        let got = check(unsafe { base.add(i * ps) }, ps);
        assert_eq!(got, (i as u64, version), "page {i}");
    }
}

/// A region, or `None` (printing why) where no userfaultfd can be opened.
pub fn region_or_skip(len: usize, cfg: RegionConfig) -> Option<Region> {
    match Region::new(len, cfg) {
        Ok(r) => Some(r),
        Err(RegionError::Userfaultfd { why, .. }) => {
            eprintln!("skipped: no userfaultfd here ({why})");
            None
        }
        Err(e) => panic!("region: {e}"),
    }
}

/// A region of `len` bytes under `cfg` with all its pages filled by
/// [`fill_pages`] at `version`, and how many pages it has; `None` where
/// [`region_or_skip`] skips.
pub fn filled_region(len: usize, cfg: RegionConfig, version: u64) -> Option<(Region, usize)> {
    let r = region_or_skip(len, cfg)?;
    let n = r.len() / ps();
    fill_pages(r.as_ptr(), n, version);
    Some((r, n))
}

/// Reads random pages of the `n` from `base` until `stop` is set, each
/// checked to hold its own index at `version`; returns how many it read.
pub fn read_random_pages(
    base: Ptr,
    n: usize,
    version: u64,
    rng: &mut Rng,
    stop: &AtomicBool,
) -> u64 {
    let ps = ps();
    let mut reads = 0;
    while !stop.load(Ordering::Relaxed) {
        let i = rng.below(n as u64) as usize;
        // SAFETY: page i of the caller's `n` pages, readable.
        let page = unsafe { base.0.add(i * ps) };
        assert_eq!(check(page, ps), (i as u64, version));
        reads += 1;
    }
    reads
}

/// `threads` threads of [`read_random_pages`] at `version`, thread `t`
/// drawing from `Rng(seed + t)`, until `stop` is set.
pub fn spawn_page_readers(
    base: Ptr,
    n: usize,
    version: u64,
    threads: u64,
    seed: u64,
    stop: &Arc<AtomicBool>,
) -> Vec<std::thread::JoinHandle<u64>> {
    (0..threads)
        .map(|t| {
            let stop = Arc::clone(stop);
            std::thread::spawn(move || {
                read_random_pages(base, n, version, &mut Rng(seed + t), &stop)
            })
        })
        .collect()
}

/// xorshift64*.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Fills a page with compressible contents derived from `(page, version)`,
/// the first 16 bytes being the page and version, the last 8 a checksum.
pub fn fill(page: *mut u8, ps: usize, index: u64, version: u64) {
    // SAFETY: the caller passes one page of the region it may write.
    let b = unsafe { std::slice::from_raw_parts_mut(page, ps) };
    b[..8].copy_from_slice(&index.to_le_bytes());
    b[8..16].copy_from_slice(&version.to_le_bytes());
    let words = b"the quick brown fox jumps over the lazy dog 0123456789 ";
    let seed = (index ^ version.rotate_left(17)) as usize;
    for (i, x) in b[16..ps - 8].iter_mut().enumerate() {
        *x = words[(i + seed) % words.len()] ^ ((i / 64) as u8 & 3);
    }
    let sum = checksum(&b[..ps - 8]);
    b[ps - 8..].copy_from_slice(&sum.to_le_bytes());
}

/// Checks a page filled by [`fill`]; returns its (index, version).
pub fn check(page: *const u8, ps: usize) -> (u64, u64) {
    // SAFETY: one readable page of the region.
    let b = unsafe { std::slice::from_raw_parts(page, ps) };
    let want = u64::from_le_bytes(b[ps - 8..].try_into().unwrap());
    let sum = checksum(&b[..ps - 8]);
    let index = u64::from_le_bytes(b[..8].try_into().unwrap());
    let version = u64::from_le_bytes(b[8..16].try_into().unwrap());
    assert_eq!(
        sum, want,
        "page {index} version {version}: checksum {sum:#x}, stored {want:#x}"
    );
    (index, version)
}

pub fn checksum(b: &[u8]) -> u64 {
    // FNV-1a.
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| {
        (h ^ x as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Whether every byte of a page is zero.
pub fn is_zero(page: *const u8, ps: usize) -> bool {
    // SAFETY: one readable page.
    unsafe { std::slice::from_raw_parts(page, ps) }
        .iter()
        .all(|&x| x == 0)
}

/// A pointer that may cross threads (the region's memory is shared).
#[derive(Clone, Copy)]
pub struct Ptr(pub *mut u8);
// SAFETY: the tests synchronise who writes which page.
unsafe impl Send for Ptr {}
// SAFETY: as above.
unsafe impl Sync for Ptr {}

/// Two tests of `$body`, a function taking the [`FaultService`] first (and
/// then `$arg`s): `$handler` with faults served by the handler thread,
/// `$faulting` with them served in the faulting thread.
// Not every test binary runs tests in both services.
#[allow(unused_macros)]
macro_rules! in_both_services {
    ($body:ident($($arg:expr),*): $handler:ident, $faulting:ident) => {
        #[test]
        fn $handler() {
            $body(region::FaultService::HandlerThread $(, $arg)*);
        }

        #[test]
        fn $faulting() {
            $body(region::FaultService::FaultingThread $(, $arg)*);
        }
    };
}
#[allow(unused_imports)]
pub(crate) use in_both_services;
