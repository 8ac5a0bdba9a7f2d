//! Giving pages back to the kernel in batches.
//!
//! `madvise(MADV_DONTNEED)` on memory other threads of the process may have
//! in their TLBs ends with a TLB shootdown: an interrupt to every other CPU
//! the process runs on. One call per freed run makes one interrupt per run,
//! and a thread reading objects on another CPU pays for each of them. This
//! module turns a batch of runs into as few shootdowns as the kernel allows:
//!
//! 1. sort the runs by address and coalesce adjacent ones into one range;
//! 2. give all the ranges to one `process_madvise(2)` call on the process
//!    itself (`PIDFD_SELF_THREAD_GROUP`, up to `UIO_MAXIOV` ranges a call).
//!    Recent kernels flush the TLB once per such call instead of once per
//!    range (measured on 6.18: 64 ranges, one shootdown; the batching came
//!    with 6.16's madvise rework). Older kernels that accept the call still
//!    flush once per range, which is no worse than `madvise`;
//! 3. where `process_madvise` is refused (no such call; kernels that do not
//!    take `MADV_DONTNEED` from it, before 6.13, or do not know
//!    `PIDFD_SELF`, before 6.15; a seccomp filter), fall back to one
//!    `madvise` per coalesced range, and stop trying `process_madvise`.
//!    `ZMEM_NO_PROCESS_MADVISE=1` in the environment forces this path (to
//!    measure what older kernels do).
//!
//! It only advises ranges it is given; which ranges may be released is the
//! caller's contract (see [`advise_dontneed`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Once;

/// A byte range `[addr, addr + len)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Range {
    pub(crate) addr: usize,
    pub(crate) len: usize,
}

/// Sorts `ranges` by address and merges those that touch.
pub(crate) fn coalesce(ranges: &mut Vec<Range>) {
    ranges.sort_unstable_by_key(|r| r.addr);
    let mut out: Vec<Range> = Vec::with_capacity(ranges.len());
    for &r in ranges.iter() {
        match out.last_mut() {
            Some(last) if last.addr + last.len == r.addr => last.len += r.len,
            _ => out.push(r),
        }
    }
    *ranges = out;
}

/// Counters of the system calls made, shared by a source's threads.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// `madvise` and `process_madvise` calls.
    pub(crate) calls: AtomicU64,
    /// Ranges advised (after coalescing).
    pub(crate) ranges: AtomicU64,
}

/// Set once `process_madvise` was refused (or `ZMEM_NO_PROCESS_MADVISE` is
/// set in the environment, to measure what older kernels do): from then on
/// every range gets its own `madvise`.
static NO_PROCESS_MADVISE: AtomicBool = AtomicBool::new(false);
static READ_ENV: Once = Once::new();

/// Returns every byte of `ranges` to the kernel (`MADV_DONTNEED`: later reads
/// see zeros), with as few TLB shootdowns as the kernel allows.
///
/// # Safety
/// Every range lies in private anonymous mappings the caller made and still
/// holds, and nobody uses its contents any more (they are dropped).
pub(crate) unsafe fn advise_dontneed(ranges: &[Range], counters: &Counters) {
    if ranges.is_empty() {
        return;
    }
    counters
        .ranges
        .fetch_add(ranges.len() as u64, Ordering::Relaxed);
    if crate::reserve::active() {
        // Locked memory cannot be given back (the kernel refuses
        // `MADV_DONTNEED` on it): zero it, so it reads as released pages do.
        for r in ranges {
            // SAFETY: the range lies in a writable mapping the caller holds
            // and nobody uses its contents (caller's contract).
            unsafe { (r.addr as *mut u8).write_bytes(0, r.len) };
        }
        return;
    }
    READ_ENV.call_once(|| {
        if std::env::var_os("ZMEM_NO_PROCESS_MADVISE").is_some() {
            NO_PROCESS_MADVISE.store(true, Ordering::Relaxed);
        }
    });
    #[cfg_attr(miri, allow(unused_mut))]
    let mut rest = ranges;
    // Miri knows no `process_madvise`.
    #[cfg(all(target_os = "linux", not(miri)))]
    while !rest.is_empty() && !NO_PROCESS_MADVISE.load(Ordering::Relaxed) {
        let n = rest.len().min(libc::UIO_MAXIOV as usize);
        // SAFETY: passed on from the caller's contract for `rest[..n]`.
        match unsafe { process_madvise_dontneed(&rest[..n], counters) } {
            Ok(()) => rest = &rest[n..],
            Err(errno) => {
                // Not supported here (unknown call, pidfd or advice, or
                // filtered out): stop trying. Anything else (a signal, a
                // short count) falls back for this batch only.
                if matches!(
                    errno,
                    libc::ENOSYS | libc::EINVAL | libc::EBADF | libc::EPERM
                ) {
                    NO_PROCESS_MADVISE.store(true, Ordering::Relaxed);
                }
                break;
            }
        }
    }
    for r in rest {
        counters.calls.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the range lies in a private anonymous mapping the caller
        // holds and whose contents nobody uses (caller's contract);
        // MADV_DONTNEED only drops the pages (later reads see zeros).
        let rc = unsafe { madvise_dontneed(r) };
        debug_assert_eq!(rc, 0, "madvise(MADV_DONTNEED) failed");
    }
}

/// `madvise(MADV_DONTNEED)` on one range; its return value.
///
/// Miri has no `madvise`: under it, this does what `MADV_DONTNEED` does to a
/// private anonymous mapping as its holder sees it (later reads see zeros)
/// by writing the zeros, and Miri checks that the write conflicts with no
/// reference still held into the range.
///
/// # Safety
/// As for [`advise_dontneed`].
unsafe fn madvise_dontneed(r: &Range) -> libc::c_int {
    if cfg!(miri) {
        // SAFETY: the range lies in a writable mapping the caller holds, and
        // nobody uses its contents (caller's contract). Its address was
        // exposed by the `as usize` cast that made the range.
        unsafe { std::ptr::with_exposed_provenance_mut::<u8>(r.addr).write_bytes(0, r.len) };
        return 0;
    }
    // SAFETY: passed on from the caller's contract.
    unsafe { libc::madvise(r.addr as *mut libc::c_void, r.len, libc::MADV_DONTNEED) }
}

/// One `process_madvise(PIDFD_SELF, ranges, MADV_DONTNEED)`. An error (the
/// errno, or 0 for a short count) if the kernel refused it or did not advise
/// every byte: nothing is lost, the caller advises the same ranges again with
/// `madvise`, and dropping pages twice is harmless.
///
/// # Safety
/// As for [`advise_dontneed`].
#[cfg(all(target_os = "linux", not(miri)))]
unsafe fn process_madvise_dontneed(ranges: &[Range], counters: &Counters) -> Result<(), i32> {
    /// The calling process (`PIDFD_SELF_THREAD_GROUP`, Linux 6.15+): unlike
    /// an opened pidfd it still means "this process" in a forked child.
    const PIDFD_SELF_THREAD_GROUP: libc::c_int = -10001;
    let iov: Vec<libc::iovec> = ranges
        .iter()
        .map(|r| libc::iovec {
            iov_base: r.addr as *mut libc::c_void,
            iov_len: r.len,
        })
        .collect();
    let total: usize = ranges.iter().map(|r| r.len).sum();
    counters.calls.fetch_add(1, Ordering::Relaxed);
    // SAFETY: `iov` holds `iov.len()` valid iovecs; each names a range of
    // this process's private anonymous mappings whose contents nobody uses
    // (caller's contract). The kernel only reads the iovecs and drops the
    // pages, exactly as `madvise(MADV_DONTNEED)` on each range would.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_process_madvise,
            PIDFD_SELF_THREAD_GROUP,
            iov.as_ptr(),
            iov.len(),
            libc::MADV_DONTNEED,
            0u32,
        )
    };
    if rc < 0 {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    } else if rc as usize != total {
        Err(0)
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(addr: usize, len: usize) -> Range {
        Range { addr, len }
    }

    #[test]
    fn coalesce_sorts_and_merges_touching_ranges() {
        let mut v = vec![
            r(0x5000, 0x1000),
            r(0x1000, 0x2000),
            r(0x3000, 0x1000),
            r(0x8000, 0x1000),
        ];
        coalesce(&mut v);
        assert_eq!(
            v,
            vec![r(0x1000, 0x3000), r(0x5000, 0x1000), r(0x8000, 0x1000)]
        );
        let mut empty = Vec::new();
        coalesce(&mut empty);
        assert!(empty.is_empty());
    }
}
