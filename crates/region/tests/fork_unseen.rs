//! A copy of the process that glibc's `fork()` handlers do not see (here
//! the raw `clone` system call, as `_Fork()` or a program's own
//! `syscall(SYS_clone, ...)` makes one), made between
//! `region::fork::before_fork` and `after_fork_parent` /
//! `after_fork_child` while threads fault: the child gets its own copy of
//! every page, evicted ones included, and its own working region; the
//! parent's pages do not change. The page the "forking call" writes after
//! `before_fork` (as glibc's `clone()` writes the child's stack) was
//! evicted (the fill went on past the limit) and is brought back by the
//! touch: without it that write
//! would wait for ever on a stopped fault service (the deadline).
//!
//! One test alone in its binary: a raw clone's child does not get glibc's
//! allocator locks reset, and its rebuild allocates, so no other test's
//! thread may be allocating at the instant of the copy.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::{check_pages, fill_pages, filled_region, spawn_page_readers, Deadline, Ptr};
use region::RegionConfig;

const MIB: usize = 1 << 20;

#[test]
fn a_raw_clone_between_the_public_steps_gives_the_child_its_own_copy() {
    let _d = Deadline::new("fork_unseen", 120);
    let Some((r, n)) = filled_region(16 * MIB, RegionConfig::new(2 * MIB), 1) else {
        return;
    };
    let ps = region::page_size();
    let base = Ptr(r.as_ptr());
    assert!(r.stats().stored_pages as usize > n / 2);
    let stop = Arc::new(AtomicBool::new(false));
    let readers = spawn_page_readers(base, n, 1, 2, 91, &stop);
    for k in 0..5 {
        // The first page is long evicted: the fill went on past the limit.
        let page = base.0.wrapping_add(k * ps);
        let touch = || {
            // SAFETY: page k of the region, the same value written back.
            unsafe { page.write_volatile(page.read_volatile()) };
        };
        region::fork::before_fork(touch);
        // What the forking call writes (glibc's `clone()`: the child's
        // function at the top of its stack): the page's own first word.
        // SAFETY: page k; its index word, unchanged.
        unsafe { (page as *mut u64).write_volatile(k as u64) };
        // SAFETY: a copy of the process (no shared memory, no new stack);
        // the child runs only the checks below and exits.
        let pid = unsafe { libc::syscall(libc::SYS_clone, libc::SIGCHLD, 0, 0, 0, 0) };
        assert!(pid >= 0, "clone: {}", std::io::Error::last_os_error());
        if pid == 0 {
            region::fork::after_fork_child();
            // SAFETY: alarm in the child: a hang kills it.
            unsafe { libc::alarm(60) };
            let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                check_pages(base.0, n, 1);
                fill_pages(base.0, n, 2);
                check_pages(base.0, n, 2);
                assert_eq!(r.stats().fork_reinits, 1);
            }))
            .is_ok();
            // SAFETY: leaves the child without the parent's destructors.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        region::fork::after_fork_parent();
        let mut status = 0;
        // SAFETY: waits for our child.
        let waited = unsafe { libc::waitpid(pid as libc::pid_t, &mut status, 0) };
        assert_eq!(waited, pid as libc::pid_t);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "child {k}: wait status {status:#x}"
        );
    }
    stop.store(true, Ordering::Relaxed);
    for h in readers {
        h.join().unwrap();
    }
    check_pages(base.0, n, 1);
    let s = r.stats();
    assert_eq!(s.fork_reinits, 0);
    assert!(s.faults.missing_store > 1000, "{s:?}");
}
