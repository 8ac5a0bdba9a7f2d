//! The process's `SIGBUS` disposition beside a region whose faults are
//! served in the faulting thread: a `SIGBUS` sent by `kill` (no fault) goes
//! to the disposition that was there before (here: ignored), and the
//! region's service goes on. A test binary of its own: the disposition is
//! the process's, and the region's handler saves it once.

mod common;

use common::{check, fill, region_or_skip, Deadline};
use region::{FaultService, RegionConfig};

#[test]
fn a_sent_sigbus_goes_to_the_previous_disposition_and_faults_are_still_served() {
    let _d = Deadline::new("sent_sigbus", 30);
    // SAFETY: ignores SIGBUS for the whole process (this binary's only test).
    unsafe { libc::signal(libc::SIGBUS, libc::SIG_IGN) };
    let mut cfg = RegionConfig::new(4 << 20);
    cfg.fault_service = FaultService::FaultingThread;
    let Some(r) = region_or_skip(4 << 20, cfg) else {
        return;
    };
    let ps = region::page_size();
    let base = r.as_ptr();
    for round in 0..3u64 {
        fill(base, ps, 0, round);
        assert_eq!(r.cold(0..ps).unwrap(), 1);
        // SAFETY: sends SIGBUS to this thread; ignored before the region.
        assert_eq!(unsafe { libc::raise(libc::SIGBUS) }, 0);
        // The stored page comes back by the region's handler still.
        assert_eq!(check(base, ps), (0, round));
    }
    assert!(r.stats().faults.missing_store >= 3);
}
