//! Teardown: dropping a region stops its two threads, unregisters and
//! unmaps it. Alone in its test binary, so that no other test's region
//! threads come and go while it counts them.

mod common;

use common::{fill, ps, region_or_skip, Deadline};
use region::RegionConfig;

const MIB: usize = 1 << 20;

fn region_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter(|t| {
            let comm = t.as_ref().unwrap().path().join("comm");
            std::fs::read_to_string(comm)
                .map(|c| c.trim_end() == "zmem-fault" || c.trim_end() == "zmem-evict")
                .unwrap_or(false)
        })
        .count()
}

fn userfaultfds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter(|e| {
            std::fs::read_link(e.as_ref().unwrap().path())
                .map(|l| l.to_string_lossy().contains("userfaultfd"))
                .unwrap_or(false)
        })
        .count()
}

fn mapped(addr: *mut u8, len: usize) -> bool {
    let mut vec = vec![0u8; len / ps()];
    // SAFETY: mincore on a page-aligned range; ENOMEM if unmapped.
    unsafe { libc::mincore(addr.cast(), len, vec.as_mut_ptr()) == 0 }
}

#[test]
fn drop_unregisters_stops_its_threads_and_unmaps() {
    let _d = Deadline::new("drop", 60);
    let Some(r) = region_or_skip(4 * MIB, RegionConfig::new(MIB)) else {
        return;
    };
    let ps = ps();
    let base = r.as_ptr();
    for i in 0..r.len() / ps {
        // SAFETY: page i.
        fill(unsafe { base.add(i * ps) }, ps, i as u64, 1);
    }
    assert!(r.stats().stored_pages > 0);
    let during = region_threads();
    assert!(during >= 2, "{during} region threads");
    let len = r.len();
    assert!(mapped(base, len));
    assert_eq!(userfaultfds(), 1);
    drop(r);
    assert!(!mapped(base, len), "still mapped after drop");
    let after = region_threads();
    assert_eq!(
        (during, after),
        (2, 0),
        "region threads while alive, after drop"
    );
}
