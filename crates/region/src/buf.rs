//! Memory the workers keep for themselves: page buffers and the probation
//! slab, mapped once, touched at once and locked (`mlock`) where the limit
//! allows, so the fault path neither allocates nor faults on its own
//! memory; and the locking of a worker's stack.
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
pub struct LockedBuf {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the buffer is plain memory; whoever shares it synchronises access
// (each worker owns its own; probation slots are owned through page states).
unsafe impl Send for LockedBuf {}
// SAFETY: as above.
unsafe impl Sync for LockedBuf {}

impl LockedBuf {
    /// `len` bytes (a multiple of the page size, above 0).
    pub fn new(len: usize) -> std::io::Result<LockedBuf> {
        // SAFETY: a fresh private anonymous mapping; MAP_POPULATE faults it
        // in now.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        lock(ptr as *const u8, len);
        Ok(LockedBuf {
            ptr: ptr.cast(),
            len,
        })
    }

    /// The first byte.
    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// The bytes.
    pub fn bytes(&mut self) -> &mut [u8] {
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
pub fn lock_memory<T>(value: &T) {
    lock((value as *const T).cast(), std::mem::size_of::<T>());
}

/// Locks the calling thread's stack from a little above the current frame
/// down by `below` bytes (the worker threads run with stacks of known
/// size, and lock what their loops use).
pub fn lock_stack(below: usize) {
    let marker = 0u8;
    let here = std::ptr::addr_of!(marker) as usize;
    let page = 4096;
    let top = (here & !(page - 1)) + page;
    let bottom = top.saturating_sub(below);
    lock(bottom as *const u8, top - bottom);
}
