//! Moving one page between memory and the store (or the probation slab),
//! race-free against the program's threads: eviction, bringing a page
//! back, and dropping pages the program removed.
//!
//! Eviction, in this order (the order is what makes it safe):
//! 1. take the page (`RESIDENT` -> `EVICTING`); only the taker moves it;
//! 2. write-protect it (`UFFDIO_WRITEPROTECT`, which flushes the TLB): from
//!    here a write blocks in a write-protect fault, reads go on;
//! 3. copy it out (`process_vm_readv`, which fails instead of faulting if
//!    the program unmapped it meanwhile) and store it (compressed, or raw
//!    in a probation slot);
//!    (under the limit and for hints, a window of pages takes each step
//!    once for the window, in its own order: `window`)
//! 4. drop the mapping (`MADV_DONTNEED`; its remove event, which the
//!    handler must read before the kernel zaps, is known as the region's
//!    own by its exact range, registered in `zaps` before the call and
//!    taken by the handler when it serves that event: the kernel counts an
//!    event as read when `read(2)` returns it, which may be before the
//!    handler gets to it in its batch, so the thread then waits for that
//!    batch's events to be served: a program's drop of the same range,
//!    taken for ours, leaves ours to flag the pages while they are held);
//! 5. publish `STORED`/`PROBATION`: a fault from here finds the copy;
//! 6. `UFFDIO_WAKE` the page: writers blocked in step 2 fault again, now as
//!    missing, and get the stored copy with their write still to do.
//!
//! The page stays held over its zap (step 4 before 5): nothing may be
//! mapped at a page between its copy and its zap, or the zap would throw
//! it away. A program's fault on a held page waits for the holder (on the
//! handler thread, in its list of waiting faults).
//!
//! A write-protect fault seen while the page is `EVICTING`, `STORED` or in
//! probation is left to step 6; one on a page found `RESIDENT` meets a
//! protection an abandoned eviction left, which `fault` takes away while it
//! holds the page, so that it cannot be a later eviction's.
//!
//! The program may drop or unmap a page while a thread holds it
//! `EVICTING`. The handler then only flags the page (`REMOVED`,
//! `UNMAPPED`) and never waits for the holder, who may itself be waiting
//! on the handler: its copy (step 3) faults on the page the kernel zapped,
//! and the handler, which knows the faulting thread as one copying
//! (`copies`), maps a write-protected page of zeros there for the copy
//! (a program's write to it after its drop waits for the holder's wake,
//! like any write to a held page); the holder's zap then drops it.
//! Whoever lets go of the page (`settle_removed`) drops it as the program
//! asked; a fault that comes after the holder published the
//! copy and before it let go finds the flag, frees the copy and maps zeros
//! (`bring_in`). If the store refuses the page (step 3), the page is
//! unprotected (which wakes the writers) and stays `RESIDENT`.
//!
//! Owns these sequences; the states are `table`'s, the descriptor calls
//! `uffd`'s. Never allocates. Runs on the evictor, the handler (bringing
//! pages back), threads serving their own faults and hint callers; never
//! holds a store lock while waiting.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crate::report_log;
use crate::shared::Shared;
use crate::stats::Counters;
use crate::table::{
    EVICTING, GONE, LOADING, PROBATION, REFERENCED, REMOVED, RESIDENT, STORED, UNMAPPED, UNTOUCHED,
};

/// Copies `len` bytes at `addr` of this process, pages the caller holds
/// `EVICTING`, into `buf` without faulting: an unmapped address is an
/// error, not a signal. A page the program dropped meanwhile faults (the
/// kernel zapped it) and is served as the holder's (`copies`).
fn read_own(sh: &Shared, addr: usize, buf: *mut u8, len: usize) -> io::Result<()> {
    let remote = [libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: len,
    }];
    read_own_ranges(sh, &remote, buf, len)
}

/// `read_own` of several ranges (`remote`, `len` bytes in all) one after
/// the other into `buf`, in one call.
pub(crate) fn read_own_ranges(
    sh: &Shared,
    remote: &[libc::iovec],
    buf: *mut u8,
    len: usize,
) -> io::Result<()> {
    let _copy = sh.copies.begin();
    let local = libc::iovec {
        iov_base: buf.cast(),
        iov_len: len,
    };
    // SAFETY: copies from this process's own address space into `buf`,
    // which the caller owns for `len` bytes, the sum of the `remote`
    // lengths; the kernel checks the remote addresses.
    let n = unsafe {
        libc::process_vm_readv(
            libc::getpid(),
            &local,
            1,
            remote.as_ptr(),
            remote.len() as libc::c_ulong,
            0,
        )
    };
    if n < 0 || n as usize != len {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Drops the mapping of `pages` pages from page `first`, at `addr`, which
/// the caller holds `EVICTING` and has copied out: the region's own zap
/// (`zaps`), made before the pages are published, so that nothing the
/// program maps there after its own drop can be lost to it.
pub(crate) fn zap(sh: &Shared, first: usize, pages: usize, addr: usize) -> bool {
    let z = sh.zaps.register(first, pages);
    // SAFETY: drops the mapping of pages of the region that the caller
    // holds and whose contents it has copied; a fault brings them back.
    let rc = unsafe {
        libc::madvise(
            addr as *mut libc::c_void,
            pages * sh.page_size,
            libc::MADV_DONTNEED,
        )
    };
    if rc != 0 {
        // No remove event came (the program unmapped the pages meanwhile):
        // the registration must not mark a later remove of the program's
        // as ours.
        sh.zaps.cancel(z);
        return false;
    }
    // The handler has read the event (`madvise` returned); the events of
    // its batch are served before the pages are published. A program's
    // drop of exactly this range, taken for ours, leaves ours to be served
    // as the program's: it must flag the pages while they are held, not
    // drop them once they are published and written again.
    drop(sh.events.read().unwrap_or_else(|e| e.into_inner()));
    true
}

/// Probes page `p` (see the module's order): its mapping is dropped and
/// its raw copy kept in a probation slot. False if the page was not
/// resident, was taken by another thread, no slot was free, or it could not
/// go now.
pub(crate) fn probe(sh: &Shared, p: usize) -> bool {
    let ps = sh.page_size;
    if !sh.table.cas(p, RESIDENT, EVICTING) {
        return false;
    }
    let addr = sh.read_mapping().addr_of(p);
    let Some(addr) = addr else {
        sh.table.set(p, GONE);
        return false;
    };
    let Some(slot) = sh.probation.take(p, sh.now_ms()) else {
        sh.table.set(p, RESIDENT);
        settle_removed(sh, p);
        return false;
    };
    let undo = |unprotect: bool| {
        if unprotect {
            // Wakes any writer blocked since the protection.
            let _ = sh.uffd().write_protect(addr, ps, false);
        }
        sh.probation.give(slot);
        sh.table.set(p, RESIDENT);
        settle_removed(sh, p);
    };
    let uffd = sh.uffd();
    if uffd.write_protect(addr, ps, true).is_err() {
        // EAGAIN while the program changes its mapping: try later.
        undo(false);
        return false;
    }
    if read_own(sh, addr, sh.probation.slot_ptr(slot), ps).is_err() {
        undo(true);
        return false;
    }
    zap(sh, p, 1, addr);
    sh.table.set_stamp(p, slot);
    sh.table.set_flag(p, REFERENCED, false);
    sh.resident.fetch_sub(1, Ordering::AcqRel);
    sh.table.set(p, PROBATION);
    let _ = uffd.wake(addr, ps);
    settle_removed(sh, p);
    true
}

/// What bringing a page back did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BringIn {
    /// Mapped (and the waiting threads woken).
    Done,
    /// Already mapped: only woken.
    AlreadyThere,
    /// Not now (the mapping is changing, another thread holds the page, or
    /// the page is not stored); try again after reading events.
    Later,
    /// The store could not read the page (a slot that no longer
    /// decompresses, a backing store's I/O error): its data is lost, and
    /// trying again would fail again. The page stays stored; the report is
    /// made (`report_log::unreadable`) for a fault's.
    Unreadable,
}

/// One missing-from-store fault in this many is timed part by part
/// (`StoreFaultTime`): a clock read costs tens of nanoseconds on most
/// machines, but microseconds in a guest whose clock is an emulated device
/// (the HPET under TCG), and a fault would need four.
pub(crate) const SPLIT_EVERY: u64 = 8;

/// Zeros to copy in for a write fault on a page never written (the largest
/// page size Linux has on the architectures zmem builds for).
static ZEROS: [u8; 65536] = [0; 65536];

/// Maps page `p` at `addr` from wherever it is (zero page, store,
/// probation slot), using `buf` (one page) to decompress into; counts the
/// fault kind when `fault`. A never-written page gets the zero page on a
/// read, and a page of zeros of its own on a write (`write`: one fault
/// instead of the zero page's and then the kernel's copy-on-write one).
/// `holders_copy`: the fault is an evicting thread's copy (`copies`), the
/// only fault served on a page held `EVICTING`. Never allocates beyond the
/// store's own read.
pub(crate) fn bring_in(
    sh: &Shared,
    p: usize,
    addr: usize,
    buf: &mut [u8],
    fault: bool,
    write: bool,
    holders_copy: bool,
) -> BringIn {
    let ps = sh.page_size;
    let uffd = sh.uffd();
    let c = &sh.counters;
    let state = sh.table.state(p);
    match state {
        UNTOUCHED => {
            if !sh.table.cas(p, UNTOUCHED, LOADING) {
                return BringIn::Later;
            }
            // Counted first, mapped and woken in one call, then published
            // (as for a stored page, below).
            let kind = fault.then_some(&c.missing_zero);
            account(sh, p, kind);
            let done = if write && ps <= ZEROS.len() {
                uffd.copy(addr, ZEROS.as_ptr(), ps)
            } else {
                uffd.zeropage(addr, ps)
            };
            match done {
                Ok(()) => {
                    sh.table.set(p, RESIDENT);
                    BringIn::Done
                }
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
                    // Mapped all the same: resident, but not this fault's.
                    if let Some(k) = kind {
                        k.fetch_sub(1, Ordering::Relaxed);
                    }
                    sh.table.set(p, RESIDENT);
                    let _ = uffd.wake(addr, ps);
                    BringIn::AlreadyThere
                }
                Err(_) => {
                    unaccount(sh, p, kind);
                    sh.table.set(p, UNTOUCHED);
                    BringIn::Later
                }
            }
        }
        STORED | PROBATION => {
            if !sh.table.cas(p, state, LOADING) {
                return BringIn::Later;
            }
            if sh.table.take_flags(p, REMOVED) != 0 {
                // The program dropped the page while it was being evicted,
                // and faults on it before the evicting thread has let go
                // (between its publish and `settle_removed`): the copy is
                // older than the drop, and the page reads as zeros.
                if state == STORED {
                    let _ = sh.store.discard(p as u64, 1);
                } else {
                    sh.probation.give(sh.table.stamp(p));
                }
                sh.table.set(p, UNTOUCHED);
                return bring_in(sh, p, addr, buf, fault, write, holders_copy);
            }
            // A probation page's stamp is its slot (until `account` stamps
            // the page's age over it); kept to restore on failure.
            let stamp = sh.table.stamp(p);
            let timed = fault
                && state == STORED
                && c.missing_store.load(Ordering::Relaxed) % SPLIT_EVERY == 0;
            let t0 = timed.then(Instant::now);
            let (src, t1) = if state == STORED {
                #[cfg(test)]
                let read = failing_reads::of(sh, p)
                    .map_or_else(|| sh.store.read_page(p as u64, &mut buf[..ps]), Err);
                #[cfg(not(test))]
                let read = sh.store.read_page(p as u64, &mut buf[..ps]);
                if let Err(e) = read {
                    sh.table.set(p, state);
                    if fault {
                        report_log::unreadable(sh, addr, p, &e);
                    }
                    return BringIn::Unreadable;
                }
                (buf.as_ptr(), timed.then(Instant::now))
            } else {
                (sh.probation.slot_ptr(stamp).cast_const(), None)
            };
            // The counters first: the copy wakes the faulting thread, which
            // may read them as soon as it runs. The page stays `LOADING`
            // (no eviction takes it, a remove of it waits in the
            // descriptor for this thread) until published below.
            let kind = fault.then_some(if state == STORED {
                &c.missing_store
            } else {
                &c.missing_probation
            });
            account(sh, p, kind);
            match uffd.copy(addr, src, ps) {
                Ok(()) => {
                    let t2 = timed.then(Instant::now);
                    if state == STORED {
                        // Freed later, off the fault path (see `discards`);
                        // inline only if the ring is full.
                        if !sh.discards.push(p) {
                            let _ = sh.store.discard(p as u64, 1);
                        }
                    } else {
                        sh.probation.give(stamp);
                    }
                    sh.table.set(p, RESIDENT);
                    if let (Some(t0), Some(t1), Some(t2)) = (t0, t1, t2) {
                        let ns = |d: std::time::Duration| d.as_nanos() as u64;
                        c.decompress_ns.fetch_add(ns(t1 - t0), Ordering::Relaxed);
                        c.copy_ns.fetch_add(ns(t2 - t1), Ordering::Relaxed);
                        c.store_fault_ns
                            .fetch_add(ns(t0.elapsed()), Ordering::Relaxed);
                        Counters::bump(&c.split_faults);
                    }
                    BringIn::Done
                }
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
                    // A stale message: the page was mapped meanwhile (a
                    // hint brought it back, the copy stays).
                    unaccount(sh, p, kind);
                    sh.table.set_stamp(p, stamp);
                    sh.table.set(p, state);
                    let _ = uffd.wake(addr, ps);
                    BringIn::AlreadyThere
                }
                Err(_) => {
                    unaccount(sh, p, kind);
                    sh.table.set_stamp(p, stamp);
                    sh.table.set(p, state);
                    BringIn::Later
                }
            }
        }
        RESIDENT => {
            // A second fault on a page already served, or a page dropped
            // behind the region's back: the zero page goes in only where
            // nothing is mapped.
            match uffd.zeropage(addr, ps) {
                Ok(()) => BringIn::Done,
                Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => BringIn::Later,
                Err(_) => {
                    let _ = uffd.wake(addr, ps);
                    if fault {
                        Counters::bump(&c.missing_duplicate);
                    }
                    BringIn::AlreadyThere
                }
            }
        }
        GONE => {
            let _ = uffd.wake(addr, ps);
            BringIn::AlreadyThere
        }
        EVICTING if holders_copy => {
            // The program dropped the page while it was being evicted, and
            // the holder's copy faults on it: the page reads as zeros now.
            // Its state stays the holder's, whose zap drops what is mapped
            // here and who drops the page after (`settle_removed`). Mapped
            // write-protected: the program may write the page again as soon
            // as its drop returns, and a write to the zero page would be
            // copied by the kernel alone, then thrown away by the holder's
            // zap; protected, it waits for the holder's wake like any write
            // to a held page. A fault of the program's on a held page waits
            // (`Later`, below).
            match uffd.copy_protected(addr, ZEROS.as_ptr(), ps) {
                Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => BringIn::Later,
                Ok(()) => BringIn::AlreadyThere,
                Err(_) => {
                    let _ = uffd.wake(addr, ps);
                    BringIn::AlreadyThere
                }
            }
        }
        _ => BringIn::Later,
    }
}

/// Counts `p` (held `LOADING`, about to be mapped) as resident and
/// referenced now, and its fault as `kind`; done before the call that maps
/// it and wakes its faulting thread, which may read the counters at once.
/// The caller publishes the page (`RESIDENT`) after the call.
fn account(sh: &Shared, p: usize, kind: Option<&AtomicU64>) {
    if let Some(k) = kind {
        Counters::bump(k);
    }
    sh.table.set_stamp(p, sh.stamp_ms() as u32);
    sh.table.set_flag(p, REFERENCED, true);
    sh.soft_dirty.mapped_by_region(&sh.table, p);
    sh.resident.fetch_add(1, Ordering::AcqRel);
}

/// Takes back `account` when the page could not be mapped (the caller
/// restores the page's stamp where it holds a probation slot).
fn unaccount(sh: &Shared, p: usize, kind: Option<&AtomicU64>) {
    if let Some(k) = kind {
        k.fetch_sub(1, Ordering::Relaxed);
    }
    sh.table.set_flag(p, REFERENCED, false);
    sh.resident.fetch_sub(1, Ordering::AcqRel);
}

/// The program dropped page `p` (madvise) or unmapped it: frees its copy
/// and sets it `to` (`UNTOUCHED` or `GONE`). A page held `EVICTING` is only
/// flagged, for its holder to drop (the holder may be waiting on the
/// handler, which calls this); a load (CPU work only, never waiting on the
/// caller) is waited out. Returns whether the page held data.
pub(crate) fn drop_page(sh: &Shared, p: usize, to: u8) -> bool {
    loop {
        let s = sh.table.state(p);
        match s {
            EVICTING => {
                let flag = if to == GONE { UNMAPPED } else { REMOVED };
                sh.table.set_flag(p, flag, true);
                if sh.table.state(p) == EVICTING {
                    // The holder drops it when it lets go.
                    return true;
                }
                if sh.table.take_flags(p, flag) == 0 {
                    // The holder let go and took the flag: it dropped it.
                    return true;
                }
            }
            LOADING => std::thread::yield_now(),
            STORED => {
                if sh.table.cas(p, s, to) {
                    let _ = sh.store.discard(p as u64, 1);
                    return true;
                }
            }
            PROBATION => {
                let slot = sh.table.stamp(p);
                if sh.table.cas(p, s, to) {
                    sh.probation.give(slot);
                    return true;
                }
            }
            RESIDENT => {
                if sh.table.cas(p, s, to) {
                    sh.resident.fetch_sub(1, Ordering::AcqRel);
                    return true;
                }
            }
            _ => {
                if sh.table.cas(p, s, to) {
                    return false;
                }
            }
        }
    }
}

/// Drops page `p` as the program asked while this thread held it
/// `EVICTING` (see the module's comment), now that the thread has let go.
pub(crate) fn settle_removed(sh: &Shared, p: usize) {
    let f = sh.table.take_flags(p, REMOVED | UNMAPPED);
    if f & UNMAPPED != 0 {
        drop_page(sh, p, GONE);
    } else if f != 0 {
        drop_page(sh, p, UNTOUCHED);
    }
}

/// Compresses probation page `p` (no mapping to drop: it already is)
/// into the store. False if it was not in probation or the store refused.
pub(crate) fn settle_probation(sh: &Shared, p: usize) -> bool {
    if !sh.table.cas(p, PROBATION, EVICTING) {
        return false;
    }
    let slot = sh.table.stamp(p);
    let ps = sh.page_size;
    // SAFETY: the slot holds page `p`'s copy and the `EVICTING` state makes
    // this thread its only user until the state changes.
    let bytes = unsafe { std::slice::from_raw_parts(sh.probation.slot_ptr(slot), ps) };
    if sh.store.write_page(p as u64, bytes).is_err() {
        Counters::bump(&sh.counters.evict_failed);
        sh.table.set(p, PROBATION);
        settle_removed(sh, p);
        return false;
    }
    sh.probation.give(slot);
    sh.table.set(p, STORED);
    settle_removed(sh, p);
    true
}

/// Frees the store slots of pages brought back (queued by the handler):
/// each page is held while its slot is freed, and a page stored again
/// meanwhile (its slot holds the new copy) is passed over.
pub(crate) fn drain_discards(sh: &Shared) {
    sh.discards.drain(|p| loop {
        let s = sh.table.state(p);
        match s {
            RESIDENT | UNTOUCHED | GONE => {
                if sh.table.cas(p, s, EVICTING) {
                    let _ = sh.store.discard(p as u64, 1);
                    sh.table.set(p, s);
                    settle_removed(sh, p);
                    return;
                }
            }
            EVICTING | LOADING => std::thread::yield_now(),
            _ => return,
        }
    });
}

/// A test's failing store reads: makes the store's read of one page of
/// one region fail, as a slot that no longer decompresses would.
#[cfg(test)]
pub(crate) mod failing_reads {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use crate::shared::Shared;

    /// The region (its `Shared`'s address; 0: none) and its page.
    static FOR: AtomicUsize = AtomicUsize::new(0);
    static PAGE: AtomicUsize = AtomicUsize::new(0);

    /// From now on the store's reads of page `p` of `sh`'s region fail.
    pub(crate) fn set(sh: &Shared, p: usize) {
        PAGE.store(p, Ordering::Release);
        FOR.store(sh as *const Shared as usize, Ordering::Release);
    }

    /// The error a read of page `p` of `sh`'s region gets, if it must fail.
    pub(crate) fn of(sh: &Shared, p: usize) -> Option<zram::StoreError> {
        (FOR.load(Ordering::Acquire) == sh as *const Shared as usize
            && PAGE.load(Ordering::Acquire) == p)
            .then(|| zram::StoreError::Corrupt {
                index: p as u64,
                reason: "made to fail by a test".to_string(),
            })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;
    use std::time::Duration;

    use super::*;
    use crate::test_region::{finish_eviction, page_one_filled, wait_until};

    /// The program drops a page an evicting thread holds and writes it
    /// again while the holder is still copying it out: the holder's copy
    /// faults and reads zeros, and the program's write after its drop must
    /// outlive the holder's zap.
    #[test]
    fn a_write_after_a_drop_outlives_the_holders_zap() {
        let Some((r, addr)) = page_one_filled(0xaa) else {
            return;
        };
        let sh = r.shared();
        let (p, ps) = (1, crate::page_size());
        // The holder takes the page (published once its fault's copy has
        // woken this thread) and write-protects it.
        wait_until("resident", || sh.table.cas(p, RESIDENT, EVICTING));
        sh.uffd().write_protect(addr, ps, true).unwrap();
        // The program drops it: the handler only flags a held page.
        // SAFETY: a page of the region, given up.
        let rc = unsafe { libc::madvise(addr as *mut libc::c_void, ps, libc::MADV_DONTNEED) };
        assert_eq!(rc, 0);
        // The holder's copy faults on the dropped page and reads zeros.
        let mut buf = vec![0u8; ps];
        read_own(sh, addr, buf.as_mut_ptr(), ps).unwrap();
        assert!(buf.iter().all(|&b| b == 0), "the copy after the drop");
        let wrote = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                // SAFETY: the first byte of page 1.
                unsafe { (addr as *mut u8).write_volatile(0x55) };
                wrote.store(true, Ordering::Release);
            });
            std::thread::sleep(Duration::from_millis(100));
            assert!(
                !wrote.load(Ordering::Acquire),
                "a write landed on a page held for eviction, before its zap"
            );
            // The holder goes on as an eviction does: store, zap, publish,
            // wake, let go.
            finish_eviction(sh, p, addr, &buf);
        });
        assert!(wrote.load(Ordering::Acquire));
        // SAFETY: page 1 of the region, read whole.
        let page = unsafe { std::slice::from_raw_parts(addr as *const u8, ps) };
        assert_eq!(page[0], 0x55, "the write after the drop was lost");
        assert!(page[1..].iter().all(|&b| b == 0), "the rest reads zeros");
        // Published by the handler just after its copy woke the writer.
        wait_until("resident again", || sh.table.state(p) == RESIDENT);
    }
}
