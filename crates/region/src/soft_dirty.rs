//! Write references from the kernel's soft-dirty bits: the clock's second
//! source of references, beside faults, on kernels built with
//! `CONFIG_MEM_SOFT_DIRTY` (Debian's are; this project's host is not).
//!
//! Writing `4` to `/proc/self/clear_refs` clears every page's soft-dirty
//! bit in the process and write-protects its page table entries; the
//! first write to a page after that is a fault the kernel serves alone
//! (no userfaultfd message) and sets the bit again, which
//! `/proc/self/pagemap` shows as bit 55. Both files belong to the process:
//! no root needed. A program's reads set no bit, but much of what a
//! program reads it also writes (an interpreter's reference counts).
//!
//! The bits are the process's, so one region per process uses them (the
//! first made with [`RegionConfig::soft_dirty`](crate::RegionConfig)); a
//! program that clears them itself (a checkpointing tool) takes writes
//! from this region's view, never its data.
//!
//! An *epoch* runs from one clear to the next. When the clock hand passes
//! a resident page that no fault referenced, a set bit says it was written
//! this epoch: the hand spares it. Before each clear, a *sweep* reads the
//! bits of every resident page and turns them into `REFERENCED`, so a
//! write made after the hand's pass and before the clear counts at the
//! next pass (without it, a page's reference window would depend on where
//! the hand stood at the clear); a write seen at a pass may so count twice.
//! The region's own `UFFDIO_COPY` sets the bit too: a page it maps is
//! marked `WRITE_SEEN` for the rest of the epoch, its bit ignored (its
//! fault is its reference), and the sweep clears the mark. A clear comes
//! after the hand has covered half the region and at least `MIN_EPOCH_MS`
//! after the last.
//!
//! Owns the two descriptors, the claim and the epochs; changes no page's
//! state, only its `REFERENCED` and `WRITE_SEEN` flags and its stamp.
//! Never allocates after `open` (the evictor calls it).

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};

use std::sync::RwLock;

use crate::mapping::Mapping;
use crate::table::{PageTable, REFERENCED, RESIDENT, WRITE_SEEN};

/// pagemap: the page is present.
const PM_PRESENT: u64 = 1 << 63;
/// pagemap: written since the last clear of soft-dirty bits.
const PM_SOFT_DIRTY: u64 = 1 << 55;

/// Pagemap entries read at once (4 KiB).
pub(crate) const BLOCK: usize = 512;

/// The shortest epoch. Each clear makes every page the process writes
/// after it fault once more (in the kernel alone, but under emulation a
/// fault is dear): clearing at every half turn of the hand found more
/// writes but cost the program more time than it saved; epochs at least
/// this long keep most of the gain (BENCHMARKS.md, "`zmem run` against the
/// kernel's zram and a memory cgroup, in one guest"; docs/region.md,
/// "Writes through soft-dirty bits").
const MIN_EPOCH_MS: u64 = 4000;

/// Whether a region of this process uses the soft-dirty bits.
static CLAIMED: AtomicBool = AtomicBool::new(false);

/// A region's access to the soft-dirty bits: off (`-1` descriptors) where
/// the kernel has none, another region has them, or they were not asked
/// for.
#[derive(Debug)]
pub(crate) struct SoftDirty {
    pagemap: AtomicI32,
    clear_refs: AtomicI32,
    /// The hand's position at the last clear (a running count of steps).
    hand_at_clear: AtomicUsize,
    /// When the last clear was, in the region's milliseconds.
    cleared_ms: AtomicU64,
    /// Bytes per page.
    page_size: usize,
}

/// Opens `/proc/self/` + `name` (a NUL-terminated name), at a high
/// number.
fn open_proc(name: &[u8], flags: libc::c_int) -> libc::c_int {
    debug_assert_eq!(name.last(), Some(&0));
    // SAFETY: a NUL-terminated path.
    let fd = unsafe { libc::open(name.as_ptr().cast(), flags | libc::O_CLOEXEC) };
    crate::descriptors::out_of_the_way(fd)
}

/// Closes `fd` if open.
fn close(fd: libc::c_int) {
    if fd >= 0 {
        // SAFETY: our descriptor, closed once.
        unsafe { libc::close(fd) };
    }
}

/// Clears the process's soft-dirty bits through `fd`.
fn clear(fd: libc::c_int) -> bool {
    // SAFETY: one byte from a static buffer.
    unsafe { libc::pwrite(fd, b"4".as_ptr().cast(), 1, 0) == 1 }
}

/// Reads the pagemap entries of `out.len()` pages (of `ps` bytes) from
/// `addr` through `fd`; returns how many were read.
fn read(fd: libc::c_int, addr: usize, ps: usize, out: &mut [u64]) -> usize {
    let off = (addr / ps * 8) as libc::off_t;
    // SAFETY: reads into `out`, a valid buffer of its length in bytes.
    let r = unsafe { libc::pread(fd, out.as_mut_ptr().cast(), std::mem::size_of_val(out), off) };
    if r <= 0 {
        0
    } else {
        r as usize / 8
    }
}

/// Whether the bits work: a page written after a clear shows it, one not
/// written does not (a kernel without `CONFIG_MEM_SOFT_DIRTY` accepts the
/// clear and never sets the bit).
fn works(pagemap: libc::c_int, clear_refs: libc::c_int, ps: usize) -> bool {
    // SAFETY: a fresh private anonymous mapping of two pages.
    let m = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            2 * ps,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if m == libc::MAP_FAILED {
        return false;
    }
    let p = m as *mut u8;
    // SAFETY: both pages are ours; volatile so the writes happen.
    unsafe {
        p.write_volatile(1);
        p.add(ps).write_volatile(1);
    }
    let mut e = [0u64; 2];
    let ok = clear(clear_refs)
        && {
            // SAFETY: the first page is ours.
            unsafe { p.write_volatile(2) };
            read(pagemap, m as usize, ps, &mut e) == 2
        }
        && e[0] & (PM_PRESENT | PM_SOFT_DIRTY) == PM_PRESENT | PM_SOFT_DIRTY
        && e[1] & (PM_PRESENT | PM_SOFT_DIRTY) == PM_PRESENT;
    // SAFETY: our mapping, unmapped once.
    unsafe { libc::munmap(m, 2 * ps) };
    ok
}

impl Drop for SoftDirty {
    fn drop(&mut self) {
        self.close();
    }
}

impl SoftDirty {
    /// Off, for pages of `page_size` bytes.
    pub(crate) fn off(page_size: usize) -> SoftDirty {
        SoftDirty {
            page_size,
            pagemap: AtomicI32::new(-1),
            clear_refs: AtomicI32::new(-1),
            hand_at_clear: AtomicUsize::new(0),
            cleared_ms: AtomicU64::new(0),
        }
    }

    /// The bits for this region (of pages of `page_size` bytes) when
    /// `wanted`, the kernel has them and no other region of the process
    /// uses them; otherwise off.
    pub(crate) fn open(wanted: bool, page_size: usize) -> SoftDirty {
        let sd = SoftDirty::off(page_size);
        if !wanted
            || CLAIMED
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
        {
            return sd;
        }
        if !sd.open_files() {
            CLAIMED.store(false, Ordering::Release);
        }
        sd
    }

    /// Opens and checks the two files; false (and off) if they do not work.
    fn open_files(&self) -> bool {
        let pm = open_proc(b"/proc/self/pagemap\0", libc::O_RDONLY);
        let cr = open_proc(b"/proc/self/clear_refs\0", libc::O_WRONLY);
        if pm < 0 || cr < 0 || !works(pm, cr, self.page_size) {
            close(pm);
            close(cr);
            return false;
        }
        self.pagemap.store(pm, Ordering::Release);
        self.clear_refs.store(cr, Ordering::Release);
        true
    }

    /// Whether the region uses the bits.
    pub(crate) fn on(&self) -> bool {
        self.pagemap.load(Ordering::Acquire) >= 0
    }

    /// In a forked child: the descriptors name the parent's files
    /// (`/proc/self` was the parent when they were opened); opens the
    /// child's own, or turns the bits off.
    pub(crate) fn reopen_in_child(&self) {
        if !self.on() {
            return;
        }
        close(self.pagemap.swap(-1, Ordering::AcqRel));
        close(self.clear_refs.swap(-1, Ordering::AcqRel));
        if !self.open_files() {
            CLAIMED.store(false, Ordering::Release);
        }
    }

    /// Closes the files and gives up the claim.
    fn close(&self) {
        if self.on() {
            close(self.pagemap.swap(-1, Ordering::AcqRel));
            close(self.clear_refs.swap(-1, Ordering::AcqRel));
            CLAIMED.store(false, Ordering::Release);
        }
    }
}

/// One block of pagemap entries, read for the clock hand as it goes.
pub(crate) struct Written {
    /// The first page of the block, its address, and the entries read.
    first: usize,
    addr: usize,
    len: usize,
    bits: [u64; BLOCK],
}

impl Default for Written {
    fn default() -> Written {
        Written::new()
    }
}

impl Written {
    /// An empty block (nothing read yet).
    pub(crate) fn new() -> Written {
        Written {
            first: 0,
            addr: 0,
            len: 0,
            bits: [0; BLOCK],
        }
    }

    /// Whether the block holds pages `p..p + want` (or up to page
    /// `pages`, the region's end).
    pub(crate) fn holds(&self, p: usize, want: usize, pages: usize) -> bool {
        p >= self.first && (p + want).min(pages) <= self.first + self.len
    }

    /// Reads the block from page `p`: the pages after it at consecutive
    /// addresses in `mapping`, up to `BLOCK`. The mapping is read for the
    /// lookup only and let go before the read (it is never held across a
    /// system call).
    pub(crate) fn fill_from(&mut self, sd: &SoftDirty, mapping: &RwLock<Mapping>, p: usize) {
        self.len = 0;
        let fd = sd.pagemap.load(Ordering::Acquire);
        if fd < 0 {
            return;
        }
        let Some((addr, len)) = run_at(mapping, p, sd.page_size) else {
            return;
        };
        self.first = p;
        self.addr = addr;
        self.len = read(fd, addr, sd.page_size, &mut self.bits[..len]);
    }

    /// Page `p`'s address when the block was read, if the block holds it:
    /// the hand's test then needs no lookup of its own. A page moved since
    /// (`mremap`) is judged by the bit at its old address, which at worst
    /// spares it or not once for a wrong reason.
    pub(crate) fn addr_of(&self, p: usize, ps: usize) -> Option<usize> {
        (p >= self.first && p < self.first + self.len).then(|| self.addr + (p - self.first) * ps)
    }

    /// Whether page `p`, now at `addr`, was written since the last clear,
    /// by the block; false if the block does not hold it there.
    fn written(&self, p: usize, addr: usize, ps: usize) -> bool {
        p >= self.first
            && p < self.first + self.len
            && addr == self.addr + (p - self.first) * ps
            && entry_written(self.bits[p - self.first])
    }
}

/// The address of page `p` and how many pages from it, up to `BLOCK`, lie
/// at consecutive addresses (the mapping held for the lookup only).
fn run_at(mapping: &RwLock<Mapping>, p: usize, ps: usize) -> Option<(usize, usize)> {
    let map = mapping.read().unwrap_or_else(|e| e.into_inner());
    let addr = map.addr_of(p)?;
    let mut len = 1;
    while len < BLOCK && map.addr_of(p + len) == Some(addr + len * ps) {
        len += 1;
    }
    Some((addr, len))
}

fn entry_written(e: u64) -> bool {
    e & (PM_PRESENT | PM_SOFT_DIRTY) == PM_PRESENT | PM_SOFT_DIRTY
}

impl SoftDirty {
    /// The clock's second test of a resident page the hand passes, after
    /// its fault reference (`REFERENCED`): page `p`, now at `addr`, was
    /// written this epoch (by the block `w`, read before), and not by the
    /// region's own mapping of it. True: spare the page. No lock, no
    /// system call.
    pub(crate) fn spares(&self, table: &PageTable, p: usize, addr: usize, w: &Written) -> bool {
        self.on() && w.written(p, addr, self.page_size) && !table.flag(p, WRITE_SEEN)
    }

    /// Marks page `p`, about to be mapped by the region (`UFFDIO_COPY`
    /// sets its soft-dirty bit), so its bit is not taken for the
    /// program's write this epoch.
    pub(crate) fn mapped_by_region(&self, table: &PageTable, p: usize) {
        if self.on() {
            table.set_flag(p, WRITE_SEEN, true);
        }
    }

    /// Ends the epoch when it is due (the hand, at running count `hand`,
    /// has passed half the region's pages since the last clear, and
    /// `MIN_EPOCH_MS` have gone by since it, `now_ms` in the region's
    /// milliseconds): sweeps the resident pages' bits into their flags
    /// and their stamps (`stamp`), then clears the bits. Returns the time
    /// the sweep and the clear took when the bits were cleared. Called by
    /// the evictor.
    pub(crate) fn end_epoch_if_due(
        &self,
        table: &PageTable,
        mapping: &RwLock<Mapping>,
        hand: usize,
        now_ms: u64,
        stamp: u32,
    ) -> Option<std::time::Duration> {
        let (pm, cr) = (
            self.pagemap.load(Ordering::Acquire),
            self.clear_refs.load(Ordering::Acquire),
        );
        if pm < 0
            || cr < 0
            || hand.wrapping_sub(self.hand_at_clear.load(Ordering::Relaxed)) < table.len() / 2
            || now_ms < self.cleared_ms.load(Ordering::Relaxed) + MIN_EPOCH_MS
        {
            return None;
        }
        let start = std::time::Instant::now();
        self.sweep(table, mapping, pm, stamp);
        self.hand_at_clear.store(hand, Ordering::Relaxed);
        self.cleared_ms.store(now_ms, Ordering::Relaxed);
        clear(cr).then(|| start.elapsed())
    }

    /// Turns the epoch's writes into references (and fresh stamps), block
    /// by block of resident pages, except where the bit is the region's
    /// own mapping; clears every resident page's `WRITE_SEEN` for the next
    /// epoch.
    fn sweep(&self, table: &PageTable, mapping: &RwLock<Mapping>, pm: libc::c_int, stamp: u32) {
        let n = table.len();
        let mut bits = [0u64; BLOCK];
        let mut p = 0;
        while p < n {
            if table.state(p) != RESIDENT {
                p += 1;
                continue;
            }
            let Some((addr, len)) = run_at(mapping, p, self.page_size) else {
                p += 1;
                continue;
            };
            let len = len.min(n - p);
            let got = read(pm, addr, self.page_size, &mut bits[..len]);
            for (k, &e) in bits[..got].iter().enumerate() {
                let q = p + k;
                if table.state(q) != RESIDENT {
                    continue;
                }
                if !table.set_flag(q, WRITE_SEEN, false) && entry_written(e) {
                    table.set_flag(q, REFERENCED, true);
                    table.set_stamp(q, stamp);
                }
            }
            p += len;
        }
    }
}
