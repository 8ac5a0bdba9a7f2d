//! What the preload library forwards to: glibc's own allocator under its
//! `__libc_*` names (never the interposed symbols), the kernel's `mmap`,
//! `munmap` and `mremap` by system call, and the next `malloc_usable_size`
//! in the lookup order. The library's Rust code allocates through
//! [`LibcAlloc`], so nothing it does re-enters its own hooks.
//!
//! Owns these entry points; it decides nothing.

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicUsize, Ordering};

use libc::{c_int, c_void, off_t, size_t};

extern "C" {
    fn __libc_malloc(size: size_t) -> *mut c_void;
    fn __libc_calloc(n: size_t, size: size_t) -> *mut c_void;
    fn __libc_realloc(p: *mut c_void, size: size_t) -> *mut c_void;
    fn __libc_free(p: *mut c_void);
    fn __libc_memalign(align: size_t, size: size_t) -> *mut c_void;
}

/// glibc's malloc.
pub fn malloc(size: usize) -> *mut c_void {
    // SAFETY: glibc's allocator, any size.
    unsafe { __libc_malloc(size) }
}

/// glibc's calloc.
pub fn calloc(n: usize, size: usize) -> *mut c_void {
    // SAFETY: glibc's allocator checks the product for overflow.
    unsafe { __libc_calloc(n, size) }
}

/// glibc's realloc of one of its own pointers.
///
/// # Safety
/// `p` is null or from glibc's allocator and not freed.
pub unsafe fn realloc(p: *mut c_void, size: usize) -> *mut c_void {
    // SAFETY: the caller's contract.
    unsafe { __libc_realloc(p, size) }
}

/// glibc's free of one of its own pointers.
///
/// # Safety
/// `p` is null or from glibc's allocator and not freed.
pub unsafe fn free(p: *mut c_void) {
    // SAFETY: the caller's contract.
    unsafe { __libc_free(p) }
}

/// glibc's memalign.
pub fn memalign(align: usize, size: usize) -> *mut c_void {
    // SAFETY: glibc's allocator checks the alignment.
    unsafe { __libc_memalign(align, size) }
}

/// The kernel's mmap (no interposer on the way).
///
/// # Safety
/// As mmap(2): a fixed address replaces whatever was mapped there.
pub unsafe fn mmap(
    addr: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    // SAFETY: the system call checks its arguments; the result is returned
    // as the libc wrapper returns it (MAP_FAILED and errno on failure).
    let r = unsafe { libc::syscall(libc::SYS_mmap, addr, len, prot, flags, fd, off) };
    r as *mut c_void
}

/// The kernel's munmap.
///
/// # Safety
/// The caller gives up every pointer into the range.
pub unsafe fn munmap(addr: *mut c_void, len: usize) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { libc::syscall(libc::SYS_munmap, addr, len) as c_int }
}

/// The kernel's mremap.
///
/// # Safety
/// As mremap(2): the caller owns the old range and gives up pointers into
/// it if it moves.
pub unsafe fn mremap(
    old: *mut c_void,
    old_len: usize,
    new_len: usize,
    flags: c_int,
    new_addr: *mut c_void,
) -> *mut c_void {
    // SAFETY: the caller's contract.
    unsafe {
        libc::syscall(libc::SYS_mremap, old, old_len, new_len, flags, new_addr) as *mut c_void
    }
}

/// The next `malloc_usable_size` (glibc's), found once at load.
static USABLE: AtomicUsize = AtomicUsize::new(0);

/// Looks up glibc's `malloc_usable_size` behind this library's own.
pub fn find_usable_size() {
    // SAFETY: a NUL-terminated name; RTLD_NEXT finds the next definition.
    let f = unsafe { libc::dlsym(libc::RTLD_NEXT, c"malloc_usable_size".as_ptr()) };
    USABLE.store(f as usize, Ordering::Release);
}

/// glibc's usable size of one of its own pointers (`None` before the
/// lookup).
///
/// # Safety
/// `p` is from glibc's allocator and not freed.
pub unsafe fn usable_size(p: *mut c_void) -> Option<usize> {
    let f = USABLE.load(Ordering::Acquire);
    if f == 0 {
        return None;
    }
    // SAFETY: `f` is glibc's malloc_usable_size, found by dlsym.
    let f: extern "C" fn(*mut c_void) -> size_t = unsafe { std::mem::transmute(f) };
    Some(f(p))
}

/// The library's global allocator: glibc's, by its `__libc_*` names, so
/// the region, its store and this library never allocate through the
/// hooks that hand out region memory.
pub struct LibcAlloc;

// SAFETY: forwards to glibc's allocator, which returns memory of at least
// the size asked, aligned as asked (memalign for alignments above 16).
unsafe impl GlobalAlloc for LibcAlloc {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if l.align() <= 16 {
            malloc(l.size()).cast()
        } else {
            memalign(l.align(), l.size()).cast()
        }
    }

    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        if l.align() <= 16 {
            calloc(1, l.size()).cast()
        } else {
            let p = memalign(l.align(), l.size()).cast::<u8>();
            if !p.is_null() {
                // SAFETY: `p` holds `l.size()` bytes just allocated.
                unsafe { p.write_bytes(0, l.size()) };
            }
            p
        }
    }

    unsafe fn dealloc(&self, p: *mut u8, _l: Layout) {
        // SAFETY: `p` came from this allocator, that is glibc's.
        unsafe { free(p.cast()) }
    }

    unsafe fn realloc(&self, p: *mut u8, l: Layout, new_size: usize) -> *mut u8 {
        if l.align() <= 16 {
            // SAFETY: `p` came from glibc's malloc through `alloc`.
            return unsafe { realloc(p.cast(), new_size) }.cast();
        }
        let q = memalign(l.align(), new_size).cast::<u8>();
        if !q.is_null() {
            // SAFETY: both hold at least the smaller size; they differ.
            unsafe { std::ptr::copy_nonoverlapping(p, q, l.size().min(new_size)) };
            // SAFETY: `p` came from glibc's memalign through `alloc`.
            unsafe { free(p.cast()) };
        }
        q
    }
}
