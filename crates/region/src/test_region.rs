//! What the crate's unit tests share (compiled for tests only): a region
//! of four pages that evicts only when told (no age eviction, no
//! probation), or a skip where this machine has no userfaultfd; the end of
//! an eviction a test holds by hand; and a wait under a deadline.
//!
//! Owns nothing the crate runs; may reach any module.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::evict::{settle_removed, zap};
use crate::shared::Shared;
use crate::table::STORED;
use crate::{Region, RegionConfig, RegionError};

/// A four-page region whose pages leave memory only when a test says
/// (`change` adjusts the settings first); `None`, said on standard error,
/// where there is no userfaultfd.
pub(crate) fn four_pages(change: impl FnOnce(&mut RegionConfig)) -> Option<Region> {
    let ps = crate::page_size();
    let mut cfg = RegionConfig::new(4 * ps);
    cfg.age_eviction = false;
    cfg.probation_pages = Some(0);
    change(&mut cfg);
    match Region::new(4 * ps, cfg) {
        Ok(r) => Some(r),
        Err(RegionError::Userfaultfd { why, .. }) => {
            eprintln!("skipped: no userfaultfd here ({why})");
            None
        }
        Err(e) => panic!("region: {e}"),
    }
}

/// Page 1 of a [`four_pages`] region with default settings, written whole
/// with `fill`: the region and the page's address.
pub(crate) fn page_one_filled(fill: u8) -> Option<(Region, usize)> {
    let ps = crate::page_size();
    let r = four_pages(|_| {})?;
    let addr = r.as_ptr() as usize + ps;
    // SAFETY: page 1 of the region, which has four.
    unsafe { std::ptr::write_bytes(addr as *mut u8, fill, ps) };
    Some((r, addr))
}

/// Ends the eviction of page `p` (at `addr`) that a test took by hand, as
/// `evict` ends one: stores `copy`, zaps the page, publishes it `STORED`,
/// wakes the writers waiting on its protection and lets it go.
pub(crate) fn finish_eviction(sh: &Shared, p: usize, addr: usize, copy: &[u8]) {
    let ps = crate::page_size();
    sh.store.write_page(p as u64, copy).unwrap();
    assert!(zap(sh, p, 1, addr));
    sh.resident.fetch_sub(1, Ordering::AcqRel);
    sh.table.set(p, STORED);
    sh.uffd().wake(addr, ps).unwrap();
    settle_removed(sh, p);
}

/// Waits until `f` holds, at most 10 s (then fails, naming `what`).
pub(crate) fn wait_until(what: &str, f: impl Fn() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < Duration::from_secs(10), "never {what}");
        std::thread::yield_now();
    }
}
