//! What the crate's unit tests share (compiled for tests only): a region
//! of four pages that evicts only when told (no age eviction, no
//! probation), or a skip where this machine has no userfaultfd; and a wait
//! under a deadline.
//!
//! Owns nothing the crate runs; may reach any module.

use std::time::{Duration, Instant};

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

/// Waits until `f` holds, at most 10 s (then fails, naming `what`).
pub(crate) fn wait_until(what: &str, f: impl Fn() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < Duration::from_secs(10), "never {what}");
        std::thread::yield_now();
    }
}
