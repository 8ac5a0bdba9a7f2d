//! Evicting a window of pages at once: one write-protect, one copy call
//! and one zap for every victim in it, however scattered. Under the limit
//! the clock chooses the victims (`Choice::Clock`, below); a `cold` hint
//! takes every resident page of a run (`Choice::All`).
//!
//! Victims are rarely neighbours: with a quarter of a region resident and
//! the hot pages spread over it, a run of resident unreferenced pages is
//! one page long, and each page evicted alone costs a write-protect and a
//! zap, each a TLB flush (an inter-processor interrupt wherever the
//! program runs), and a remove event for the handler to read. A window
//! from the clock hand's victim takes every page up to the last victim:
//! - *victims*: resident, unreferenced: compressed into the store;
//! - *spared*: resident and referenced since the hand last passed (the
//!   hand clears the flag, as it does passing them alone), or written this
//!   epoch where the clock sees soft-dirty bits (`soft_dirty`): copied out with
//!   the victims and mapped back (`UFFDIO_COPY`, no flush) right after the
//!   zap;
//! - *absent*: stored or in probation: nothing mapped (never by
//!   construction: a page is mapped only from `LOADING`), held only so
//!   that nothing is mapped there before the zap. A never-written page
//!   ends the window: `UNTOUCHED` is also the state of a page the program
//!   dropped whose zap may still be to come.
//!
//! The order (`evict`'s, for a window):
//! 1. take every page of the window (`EVICTING`), in address order, up to
//!    the first that cannot be taken;
//! 2. write-protect the window (one flush): writes block from here;
//! 3. copy the resident pages out (`process_vm_readv`, one call);
//! 4. zap the window (`madvise`, one flush, one remove event: `zaps`);
//! 5. let go of the absent pages (nothing can have been mapped there);
//! 6. map the spared pages back and let go of them (below: a page the
//!    program dropped meanwhile is not mapped back);
//! 7. store each victim and publish it (`STORED`); a victim the store
//!    refuses is mapped back like a spared page;
//! 8. wake the window: writers blocked in step 2 fault again.
//!
//! A page mapped back must not outlive a drop of the program's, nor be
//! seen after one: the program's `madvise` returns after its zap, which
//! comes after the handler has read its remove event, and the handler
//! flags a held page (`REMOVED`) when it serves that event. So a page is
//! mapped back with the events lock held for reading (`Shared::events`):
//! an event read before is served and its flag seen (the page, which the
//! window's zap dropped, stays unmapped and is dropped); no event is read
//! meanwhile; one read after zaps after the page was mapped back, as the
//! program asked; and one sent but still unread makes `UFFDIO_COPY` fail
//! (`EAGAIN`), so that page goes to the store instead. The lock is never
//! held across a zap (which waits for the handler to read its event).
//!
//! Owns the window's choice and its sequence; the single-page and run
//! sequences, the copy and the zap are `evict`'s. Never allocates (the
//! window's bookkeeping is on the stack).

use std::sync::atomic::Ordering;

use crate::evict::{read_own_ranges, settle_removed, zap};
use crate::shared::Shared;
use crate::soft_dirty::Written;
use crate::stats::Counters;
use crate::table::{
    EVICTING, GONE, PROBATION, REFERENCED, REMOVED, RESIDENT, STORED, UNMAPPED, UNTOUCHED,
};

/// The longest window, in pages (1 MiB of 4 KiB pages).
pub(crate) const WINDOW_MAX: usize = 256;

/// The resident pages (victims and spared) a window copies out at most: its
/// buffer holds this many pages.
pub(crate) const RESIDENT_MAX: usize = 64;

/// The victims the evictor asks of a window under the limit at least,
/// whatever it still needs: half the buffer. Sized to the need alone, a
/// window held a few victims, and each of its zaps (a TLB flush, and a wait
/// for the handler to read the remove event) is dear under emulation: the
/// floor makes fewer zaps, and fewer faults wait for room (BENCHMARKS.md,
/// "`zmem run` against the kernel's zram and a memory cgroup, in one
/// guest"). A larger floor with a larger buffer held pages longer than
/// faults would wait for.
pub(crate) const VICTIMS_MIN: usize = RESIDENT_MAX / 2;

/// A window stops growing when its spared pages outnumber twice its victims
/// by this many: past a hot stretch, each spared page costs a copy out and
/// back for no flush saved.
const SPARED_SLACK: usize = 4;

/// What the window does with a page it holds.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    /// Resident, unreferenced: goes to the store.
    Victim,
    /// Resident, referenced: mapped back after the zap.
    Spared,
    /// Nothing mapped: its state before the window took it.
    Absent(u8),
}

/// Which pages of a window go to the store.
#[derive(Clone, Copy)]
pub(crate) enum Choice<'a> {
    /// The clock's, under the limit: unreferenced resident pages go,
    /// referenced ones and, by the soft-dirty bits the hand read from the
    /// window's first page on, those written this epoch are spared; the
    /// window holds absent pages to reach further victims.
    Clock(&'a Written),
    /// A hint's (`cold`): every resident page before page `end` goes; the
    /// window ends at the first page not resident.
    All {
        /// The first page past the hint's range.
        end: usize,
    },
}

/// Evicts up to `need` victims from page `first` (a resident page), in
/// one window within one segment of the mapping, using `buf`
/// (`RESIDENT_MAX` pages), the victims chosen by `choice`. Returns
/// `(window pages, pages stored)`: the caller moves past the window;
/// `(0, 0)` if `first` could not be taken or the window could not go now.
pub(crate) fn evict_window(
    sh: &Shared,
    first: usize,
    need: usize,
    buf: &mut [u8],
    choice: Choice<'_>,
) -> (usize, usize) {
    let ps = sh.page_size;
    let n = match choice {
        Choice::Clock(_) => sh.pages(),
        Choice::All { end } => end.min(sh.pages()),
    };
    let cap = RESIDENT_MAX.min(buf.len() / ps);
    if need == 0 || cap == 0 || first >= n || !sh.table.cas(first, RESIDENT, EVICTING) {
        return (0, 0);
    }
    let mut role = [Role::Victim; WINDOW_MAX];
    let mut len = 1;
    let (mut victims, mut spared) = (1, 0);
    // The window's address; it stays within the segment `first` is in.
    let addr = {
        let map = sh.read_mapping();
        let Some(addr) = map.addr_of(first) else {
            sh.table.set(first, GONE);
            settle_removed(sh, first);
            return (0, 0);
        };
        while len < WINDOW_MAX.min(n - first)
            && victims < need
            && victims + spared < cap
            && spared <= 2 * victims + SPARED_SLACK
            && map.addr_of(first + len) == Some(addr + len * ps)
        {
            let q = first + len;
            let s = sh.table.state(q);
            let r = match (s, choice) {
                (RESIDENT, _) => Role::Victim,
                (STORED | PROBATION, Choice::Clock(_)) => Role::Absent(s),
                _ => break,
            };
            if !sh.table.cas(q, s, EVICTING) {
                break;
            }
            role[len] = match (r, choice) {
                (Role::Victim, Choice::Clock(written))
                    if sh.table.set_flag(q, REFERENCED, false)
                        || written_this_epoch(sh, q, addr + len * ps, written) =>
                {
                    spared += 1;
                    Role::Spared
                }
                (Role::Victim, _) => {
                    victims += 1;
                    Role::Victim
                }
                (other, _) => other,
            };
            len += 1;
        }
        addr
    };
    // The window ends at its last victim: pages past it gain nothing.
    let end = (0..len).rposition(|k| role[k] == Role::Victim).unwrap_or(0) + 1;
    for (k, &r) in role.iter().enumerate().take(len).skip(end) {
        if r == Role::Spared {
            // Not passed after all: its reference stands.
            sh.table.set_flag(first + k, REFERENCED, true);
        }
        release(sh, first + k, r);
    }
    let len = end;
    let role = &role[..len];
    let release_all = |sh: &Shared| {
        for (k, &r) in role.iter().enumerate() {
            release(sh, first + k, r);
        }
    };
    let uffd = sh.uffd();
    if uffd.write_protect(addr, len * ps, true).is_err() {
        // EAGAIN while the program changes its mapping: try later.
        release_all(sh);
        return (0, 0);
    }
    // The resident pages, neighbours merged, copied out in address order;
    // `slot[k]`: the buffer page of the window's page `k`.
    let mut ranges = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; RESIDENT_MAX];
    let mut slot = [0u8; WINDOW_MAX];
    let (mut nranges, mut copied) = (0usize, 0usize);
    for (k, &r) in role.iter().enumerate() {
        if matches!(r, Role::Absent(_)) {
            continue;
        }
        let a = addr + k * ps;
        match nranges.checked_sub(1).map(|i| &mut ranges[i]) {
            Some(r) if r.iov_base as usize + r.iov_len == a => r.iov_len += ps,
            _ => {
                ranges[nranges] = libc::iovec {
                    iov_base: a as *mut libc::c_void,
                    iov_len: ps,
                };
                nranges += 1;
            }
        }
        slot[k] = copied as u8;
        copied += 1;
    }
    if read_own_ranges(sh, &ranges[..nranges], buf.as_mut_ptr(), copied * ps).is_err() {
        // Wakes any writer blocked since the protection.
        let _ = uffd.write_protect(addr, len * ps, false);
        release_all(sh);
        return (0, 0);
    }
    zap(sh, first, len, addr);
    if let Choice::Clock(_) = choice {
        Counters::bump(&sh.counters.window_zaps);
    }
    for (k, &r) in role.iter().enumerate() {
        if let Role::Absent(_) = r {
            release(sh, first + k, r);
        }
    }
    let page_of = |k: usize| {
        let i = slot[k] as usize;
        i * ps..(i + 1) * ps
    };
    let mut spared = 0;
    for (k, &r) in role.iter().enumerate() {
        if r == Role::Spared {
            put_back(sh, first + k, addr + k * ps, &buf[page_of(k)]);
            spared += 1;
        }
    }
    Counters::add(&sh.counters.window_spared, spared);
    let mut stored = 0;
    for (k, &r) in role.iter().enumerate() {
        if r != Role::Victim {
            continue;
        }
        let q = first + k;
        let bytes = &buf[page_of(k)];
        if sh.store.write_page(q as u64, bytes).is_ok() {
            sh.table.set_flag(q, REFERENCED, false);
            sh.resident.fetch_sub(1, Ordering::AcqRel);
            sh.table.set(q, STORED);
            settle_removed(sh, q);
            stored += 1;
        } else {
            Counters::bump(&sh.counters.evict_failed);
            put_back(sh, q, addr + k * ps, bytes);
        }
    }
    let _ = uffd.wake(addr, len * ps);
    (len, stored)
}

/// The clock's second test of resident page `p`, now at `addr`, after
/// its fault reference: written this epoch (soft-dirty bits, by the block
/// `w`), counted as a page spared for a write.
pub(crate) fn written_this_epoch(sh: &Shared, p: usize, addr: usize, w: &Written) -> bool {
    let spare = sh.soft_dirty.spares(&sh.table, p, addr, w);
    if spare {
        Counters::bump(&sh.counters.written_spared);
    }
    spare
}

/// Lets go of a page the window took and did not move: resident pages
/// stay resident, absent ones get their state back.
fn release(sh: &Shared, p: usize, role: Role) {
    let to = match role {
        Role::Absent(s) => s,
        Role::Victim | Role::Spared => RESIDENT,
    };
    sh.table.set(p, to);
    settle_removed(sh, p);
}

/// Maps page `p`'s copy `bytes` back at `addr` (the zero page for
/// zeros, which is what a never-written page read was mapped as) and lets
/// go of it, unless the program dropped or unmapped it while it was held:
/// then it stays unmapped and is dropped. See the module's comment for why
/// the flags are looked at, and the page mapped, with the events lock
/// held. A page that cannot be mapped (an event is unread: `EAGAIN`; the
/// program unmapped it) goes to the store instead, so its contents are
/// never lost; if the store refuses too, both are tried again, the lock
/// let go in between (the unread event needs the handler).
fn put_back(sh: &Shared, p: usize, addr: usize, bytes: &[u8]) {
    let uffd = sh.uffd();
    let ps = sh.page_size;
    let zeros = bytes.iter().all(|&b| b == 0);
    sh.soft_dirty.mapped_by_region(&sh.table, p);
    loop {
        let batch = sh.events.read().unwrap_or_else(|e| e.into_inner());
        let f = sh.table.take_flags(p, REMOVED | UNMAPPED);
        if f != 0 {
            sh.resident.fetch_sub(1, Ordering::AcqRel);
            sh.table
                .set(p, if f & UNMAPPED != 0 { GONE } else { UNTOUCHED });
            break;
        }
        let done = if zeros {
            uffd.zeropage(addr, ps)
        } else {
            uffd.copy(addr, bytes.as_ptr(), ps)
        };
        match done {
            // (`EEXIST`: something is mapped there already, which nothing
            // but the holder does to a held page: left as it is.)
            Ok(()) => {
                sh.table.set(p, RESIDENT);
                break;
            }
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
                sh.table.set(p, RESIDENT);
                break;
            }
            Err(_) => {}
        }
        if sh.store.write_page(p as u64, bytes).is_ok() {
            sh.resident.fetch_sub(1, Ordering::AcqRel);
            sh.table.set(p, STORED);
            break;
        }
        drop(batch);
        std::thread::yield_now();
    }
    // A drop whose event the handler read after the lock: the program's
    // zap comes after that read, and so after the page was mapped back.
    settle_removed(sh, p);
}
