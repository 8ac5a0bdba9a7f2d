//! Forks while the program drops pages and faults, in a test binary of its
//! own: its forks freeze every region of the process, so beside the other
//! tests they would be a test of those too.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{config, filled_region, in_both_services, ps, read_random_pages, Deadline, Ptr, Rng};
use region::FaultService;

const MIB: usize = 1 << 20;

in_both_services!(
    forks_while_dropping_with():
    forks_while_the_program_drops_pages_and_faults_never_hang,
    forks_while_the_program_drops_pages_and_faults_never_hang_in_the_faulting_thread
);

/// Forks for 4 s while three threads fault stored pages and a fourth drops
/// pages with `madvise` (whose events keep the mapping "changing", so a
/// fault's copy fails with `EAGAIN` until the handler reads them): a fork
/// waits for the fault side to leave the gate, and nothing may wait for
/// the handler inside it.
fn forks_while_dropping_with(service: FaultService) {
    let _d = Deadline::new("forks_while_dropping", 60);
    let Some((r, n)) = filled_region(16 * MIB, config(service, 2 * MIB), 1) else {
        return;
    };
    let ps = ps();
    let base = Ptr(r.as_ptr());
    let stop = AtomicBool::new(false);
    let mut forks = 0;
    std::thread::scope(|s| {
        for t in 0..3u64 {
            let (base, stop) = (&base, &stop);
            // The half nobody drops.
            s.spawn(move || read_random_pages(*base, n / 2, 1, &mut Rng(0x1234 + t), stop));
        }
        let (base, stop) = (&base, &stop);
        s.spawn(move || {
            let mut rng = Rng(99);
            while !stop.load(Ordering::Relaxed) {
                let i = n / 2 + rng.below(n as u64 / 2 - 16) as usize;
                // SAFETY: 16 pages of the dropped half, given up.
                let rc = unsafe {
                    libc::madvise(base.0.add(i * ps).cast(), 16 * ps, libc::MADV_DONTNEED)
                };
                assert_eq!(rc, 0);
            }
        });
        let end = std::time::Instant::now() + Duration::from_secs(4);
        while std::time::Instant::now() < end {
            // SAFETY: fork; the child exits at once.
            let pid = unsafe { libc::fork() };
            if pid == 0 {
                // SAFETY: leaves the child without running the parent's
                // exit handlers.
                unsafe { libc::_exit(0) };
            }
            assert!(pid > 0);
            let mut st = 0;
            // SAFETY: waits for our own child.
            unsafe { libc::waitpid(pid, &mut st, 0) };
            assert_eq!(st, 0);
            forks += 1;
        }
        stop.store(true, Ordering::Relaxed);
    });
    assert!(forks > 10, "{forks} forks");
}
