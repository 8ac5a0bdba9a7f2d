//! Memory the workers keep for themselves: page buffers, mapped once,
//! touched at once and locked (`mlock`) where the limit allows, so the
//! fault path neither allocates nor faults on its own memory; the
//! probation slab, locked page by page as the evictor first writes its
//! slots (`MLOCK_ONFAULT`: the handler only reads slots written before);
//! and the locking of a worker's stack.
//!
//! Owns these mappings only; it never maps or touches the region.

use std::sync::atomic::{AtomicBool, Ordering};

/// Whether any `mlock` was refused (`RLIMIT_MEMLOCK`).
static MLOCK_REFUSED: AtomicBool = AtomicBool::new(false);

/// Whether an `mlock` of the workers' memory was refused in this process.
pub fn mlock_refused() -> bool {
    MLOCK_REFUSED.load(Ordering::Relaxed)
}

/// Locks `[addr, addr + len)`, noting a refusal.
fn lock(addr: *const u8, len: usize) {
    // SAFETY: mlock only changes residency of mapped memory; a refusal is
    // an error return.
    if unsafe { libc::mlock(addr.cast(), len) } != 0 {
        MLOCK_REFUSED.store(true, Ordering::Relaxed);
    }
}

/// Anonymous memory of whole pages, populated and locked, unmapped on drop.
#[derive(Debug)]
pub(crate) struct LockedBuf {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the buffer is plain memory; whoever shares it synchronises access
// (each worker owns its own; probation slots are owned through page states).
unsafe impl Send for LockedBuf {}
// SAFETY: as above.
unsafe impl Sync for LockedBuf {}

/// `MLOCK_ONFAULT` (Linux 4.4), which the libc crate does not name for
/// glibc targets.
const MLOCK_ONFAULT: libc::c_uint = 1;

impl LockedBuf {
    /// `len` bytes (a multiple of the page size, above 0), populated and
    /// locked now.
    pub(crate) fn new(len: usize) -> std::io::Result<LockedBuf> {
        let buf = LockedBuf::map(len, libc::MAP_POPULATE)?;
        lock(buf.ptr, len);
        Ok(buf)
    }

    /// `len` bytes (a multiple of the page size, above 0) that cost nothing
    /// until written: each page is locked as it is first faulted in
    /// (`mlock2(MLOCK_ONFAULT)`), so once written it stays resident. Where
    /// the kernel has no `MLOCK_ONFAULT`, populated and locked now, as
    /// [`LockedBuf::new`].
    pub(crate) fn on_fault(len: usize) -> std::io::Result<LockedBuf> {
        let buf = LockedBuf::map(len, 0)?;
        // SAFETY: mlock2 only changes how the mapping just made is paged;
        // a refusal is an error return.
        if unsafe { libc::mlock2(buf.ptr.cast(), len, MLOCK_ONFAULT) } != 0 {
            let e = std::io::Error::last_os_error();
            if matches!(e.raw_os_error(), Some(libc::ENOSYS) | Some(libc::EINVAL)) {
                drop(buf);
                return LockedBuf::new(len);
            } else {
                MLOCK_REFUSED.store(true, Ordering::Relaxed);
            }
        }
        Ok(buf)
    }

    /// A private anonymous mapping of `len` bytes with `extra` flags.
    fn map(len: usize, extra: libc::c_int) -> std::io::Result<LockedBuf> {
        // SAFETY: a fresh private anonymous mapping at an address of the
        // kernel's choosing; MAP_POPULATE (if in `extra`) faults it in now.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | extra,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(LockedBuf {
            ptr: ptr.cast(),
            len,
        })
    }

    /// The first byte.
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// The bytes.
    pub(crate) fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: the mapping is ours, `len` bytes, and `&mut self` makes
        // this the only view.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for LockedBuf {
    fn drop(&mut self) {
        // SAFETY: the mapping is ours and no view outlives `self`.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// Locks the memory of `value` (a worker's state, boxed at start).
pub(crate) fn lock_memory<T>(value: &T) {
    lock((value as *const T).cast(), std::mem::size_of::<T>());
}

/// Locks the calling thread's stack from a little above the current frame
/// down by `below` bytes (the worker threads run with stacks of known
/// size, and lock what their loops use).
pub(crate) fn lock_stack(below: usize) {
    let marker = 0u8;
    let here = std::ptr::addr_of!(marker) as usize;
    let page = 4096;
    let top = (here & !(page - 1)) + page;
    let bottom = top.saturating_sub(below);
    lock(bottom as *const u8, top - bottom);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pages of `buf` resident now (`mincore`).
    fn resident_pages(buf: &LockedBuf) -> usize {
        let mut vec = vec![0u8; buf.len.div_ceil(4096)];
        // SAFETY: the buffer's own mapping; `vec` has a byte per page.
        let rc = unsafe { libc::mincore(buf.ptr.cast(), buf.len, vec.as_mut_ptr()) };
        assert_eq!(rc, 0);
        vec.iter().filter(|&&b| b & 1 == 1).count()
    }

    /// `Locked` (KiB) of the mapping that is exactly `buf`'s, from
    /// /proc/self/smaps; None if the kernel merged it with a neighbour.
    fn locked_kib(buf: &LockedBuf) -> Option<u64> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let header = format!("{:x}-{:x} ", buf.ptr as usize, buf.ptr as usize + buf.len);
        smaps
            .lines()
            .skip_while(|l| !l.starts_with(&header))
            .skip(1)
            .find_map(|l| l.strip_prefix("Locked:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
    }

    /// A slab locked on fault costs nothing until written, and a page once
    /// written is resident and locked; a buffer made with `new` is resident
    /// whole at once.
    #[test]
    fn on_fault_buffers_cost_only_the_pages_written() {
        let len = 64 * 4096;
        let mut lazy = LockedBuf::on_fault(len).unwrap();
        assert_eq!(resident_pages(&lazy), 0);
        lazy.bytes()[0] = 1;
        lazy.bytes()[5 * 4096] = 1;
        assert_eq!(resident_pages(&lazy), 2, "the two pages written");
        if !mlock_refused() {
            if let Some(kib) = locked_kib(&lazy) {
                assert_eq!(kib, 8, "the written pages are locked");
            }
        }
        let whole = LockedBuf::new(len).unwrap();
        assert_eq!(resident_pages(&whole), 64);
    }
}
