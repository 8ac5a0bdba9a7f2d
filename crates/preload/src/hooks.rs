//! The interposed symbols: glibc's allocator entry points and `mmap`,
//! `munmap`, `mremap`. A request at least the smallest size (and
//! `mmap`'s only for private, anonymous, read-write memory at an address
//! of the kernel's choosing) is served from the region's span; every other
//! request, every request made by the region's own code, and every request
//! once the span is full goes to glibc or the kernel as if this library
//! were not loaded. Frees and unmaps of span pages take them back.
//!
//! Owns the rules of which request goes where; the books are `process`'s,
//! the forwarding `system`'s. Compiled out of the crate's own unit tests,
//! whose test binary must keep glibc's allocator.

use std::sync::atomic::Ordering::Relaxed;

use libc::{c_int, c_void, off_t, size_t};

use crate::process::{process, Process};
use crate::system;

/// The process's region, when this request may be served from it.
fn serving(bytes: usize) -> Option<&'static Process> {
    let p = process()?;
    (bytes >= p.min && !region::in_own_code()).then_some(p)
}

/// The region's piece holding `ptr`, if `ptr` is in the span.
fn owner(ptr: *mut c_void) -> Option<&'static Process> {
    process().filter(|p| p.contains(ptr as usize))
}

fn set_errno(e: c_int) {
    // SAFETY: the calling thread's errno.
    unsafe { *libc::__errno_location() = e };
}

/// Takes back a piece the program frees.
fn free_piece(p: &Process, ptr: *mut c_void) {
    if let Some(len) = p.live_len(ptr as usize) {
        p.release(ptr as usize, len);
    }
}

/// Resizes a piece of the span: shrinks or grows in place, else moves it
/// (when `may_move`), copying `old` bytes. Null when it cannot.
fn resize_piece(
    p: &Process,
    ptr: *mut c_void,
    old: usize,
    new: usize,
    may_move: bool,
) -> *mut c_void {
    let a = ptr as usize;
    let Some(new_r) = new.max(1).checked_next_multiple_of(p.page()) else {
        return std::ptr::null_mut();
    };
    if new_r <= old {
        if new_r < old {
            p.release(a + new_r, old - new_r);
        }
        return ptr;
    }
    if p.grow_in_place(a, old, new_r) {
        return ptr;
    }
    if !may_move {
        return std::ptr::null_mut();
    }
    let q = p.alloc(new_r).unwrap_or_else(|| system::malloc(new));
    if q.is_null() {
        return q;
    }
    // SAFETY: both hold at least `old` bytes (q at least `new` > `old`);
    // they do not overlap (q is a different piece or glibc's).
    unsafe { std::ptr::copy_nonoverlapping(ptr as *const u8, q as *mut u8, old) };
    p.release(a, old);
    p.served.moves.fetch_add(1, Relaxed);
    q
}

/// # Safety
/// As malloc(3).
#[no_mangle]
pub unsafe extern "C" fn malloc(size: size_t) -> *mut c_void {
    if let Some(p) = serving(size) {
        if let Some(a) = p.alloc(size) {
            p.served.allocs.fetch_add(1, Relaxed);
            return a;
        }
    }
    system::malloc(size)
}

/// # Safety
/// As calloc(3).
#[no_mangle]
pub unsafe extern "C" fn calloc(n: size_t, size: size_t) -> *mut c_void {
    let Some(total) = n.checked_mul(size) else {
        set_errno(libc::ENOMEM);
        return std::ptr::null_mut();
    };
    if let Some(p) = serving(total) {
        // A piece of the span reads as zeros.
        if let Some(a) = p.alloc(total) {
            p.served.allocs.fetch_add(1, Relaxed);
            return a;
        }
    }
    system::calloc(n, size)
}

/// # Safety
/// As free(3).
#[no_mangle]
pub unsafe extern "C" fn free(ptr: *mut c_void) {
    if ptr.is_null() {
        return;
    }
    match owner(ptr) {
        Some(p) => free_piece(p, ptr),
        // SAFETY: not the span's, so glibc's (the caller's contract).
        None => unsafe { system::free(ptr) },
    }
}

/// # Safety
/// As realloc(3).
#[no_mangle]
pub unsafe extern "C" fn realloc(ptr: *mut c_void, size: size_t) -> *mut c_void {
    if ptr.is_null() {
        // SAFETY: as malloc.
        return unsafe { malloc(size) };
    }
    if let Some(p) = owner(ptr) {
        if size == 0 {
            free_piece(p, ptr);
            return std::ptr::null_mut();
        }
        let Some(old) = p.live_len(ptr as usize) else {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        };
        let q = resize_piece(p, ptr, old, size, true);
        if q.is_null() {
            set_errno(libc::ENOMEM);
        }
        return q;
    }
    // glibc's block grown past the smallest size moves into the region.
    if let Some(p) = serving(size) {
        // SAFETY: not the span's, so glibc's.
        if let Some(old) = unsafe { system::usable_size(ptr) } {
            if let Some(q) = p.alloc(size) {
                // SAFETY: glibc's block holds `old` bytes, the piece at
                // least `size`; they do not overlap.
                unsafe {
                    std::ptr::copy_nonoverlapping(ptr as *const u8, q as *mut u8, old.min(size));
                    system::free(ptr);
                }
                p.served.allocs.fetch_add(1, Relaxed);
                p.served.moves.fetch_add(1, Relaxed);
                return q;
            }
        }
    }
    // SAFETY: glibc's block.
    unsafe { system::realloc(ptr, size) }
}

/// # Safety
/// As reallocarray(3).
#[no_mangle]
pub unsafe extern "C" fn reallocarray(ptr: *mut c_void, n: size_t, size: size_t) -> *mut c_void {
    match n.checked_mul(size) {
        // SAFETY: as realloc.
        Some(total) => unsafe { realloc(ptr, total) },
        None => {
            set_errno(libc::ENOMEM);
            std::ptr::null_mut()
        }
    }
}

/// Memory aligned to `align`: the span's pages are page-aligned, so a
/// large request with an alignment up to a page is served there.
fn aligned(align: usize, size: usize) -> *mut c_void {
    if let Some(p) = serving(size) {
        if align <= p.page() {
            if let Some(a) = p.alloc(size) {
                p.served.allocs.fetch_add(1, Relaxed);
                return a;
            }
        }
    }
    system::memalign(align, size)
}

/// # Safety
/// As posix_memalign(3).
#[no_mangle]
pub unsafe extern "C" fn posix_memalign(
    out: *mut *mut c_void,
    align: size_t,
    size: size_t,
) -> c_int {
    if !align.is_power_of_two() || align % std::mem::size_of::<*mut c_void>() != 0 {
        return libc::EINVAL;
    }
    let p = aligned(align, size);
    if p.is_null() {
        return libc::ENOMEM;
    }
    // SAFETY: the caller gives a place for one pointer.
    unsafe { *out = p };
    0
}

/// # Safety
/// As aligned_alloc(3).
#[no_mangle]
pub unsafe extern "C" fn aligned_alloc(align: size_t, size: size_t) -> *mut c_void {
    aligned(align, size)
}

/// # Safety
/// As memalign(3).
#[no_mangle]
pub unsafe extern "C" fn memalign(align: size_t, size: size_t) -> *mut c_void {
    aligned(align, size)
}

/// # Safety
/// As valloc(3).
#[no_mangle]
pub unsafe extern "C" fn valloc(size: size_t) -> *mut c_void {
    aligned(region::page_size(), size)
}

/// # Safety
/// As pvalloc(3).
#[no_mangle]
pub unsafe extern "C" fn pvalloc(size: size_t) -> *mut c_void {
    let ps = region::page_size();
    match size.max(1).checked_next_multiple_of(ps) {
        Some(s) => aligned(ps, s),
        None => {
            set_errno(libc::ENOMEM);
            std::ptr::null_mut()
        }
    }
}

/// # Safety
/// As malloc_usable_size(3).
#[no_mangle]
pub unsafe extern "C" fn malloc_usable_size(ptr: *mut c_void) -> size_t {
    if ptr.is_null() {
        return 0;
    }
    match owner(ptr) {
        Some(p) => p.live_len(ptr as usize).unwrap_or(0),
        // SAFETY: glibc's block.
        None => unsafe { system::usable_size(ptr) }.unwrap_or(0),
    }
}

/// Flags of a mapping the region may serve: private and anonymous, and
/// these only.
const SERVED_FLAGS: c_int = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;

/// # Safety
/// As mmap(2).
#[no_mangle]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    let anon = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
    if addr.is_null()
        && flags & anon == anon
        && flags & !SERVED_FLAGS == 0
        && prot == libc::PROT_READ | libc::PROT_WRITE
    {
        if let Some(p) = serving(len) {
            if let Some(a) = p.alloc(len) {
                p.served.mmaps.fetch_add(1, Relaxed);
                return a;
            }
        }
    }
    // SAFETY: the caller's request, as mmap(2).
    unsafe { system::mmap(addr, len, prot, flags, fd, off) }
}

/// # Safety
/// As mmap64(2).
#[no_mangle]
pub unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    // SAFETY: as mmap (the same on 64-bit).
    unsafe { mmap(addr, len, prot, flags, fd, off) }
}

/// # Safety
/// As munmap(2).
#[no_mangle]
pub unsafe extern "C" fn munmap(addr: *mut c_void, len: size_t) -> c_int {
    if let Some(p) = owner(addr) {
        let a = addr as usize;
        if a % p.page() != 0 || len == 0 || !p.contains(a + len - 1) {
            set_errno(libc::EINVAL);
            return -1;
        }
        p.release(a, len);
        return 0;
    }
    // SAFETY: not the span's: the caller's own mapping.
    unsafe { system::munmap(addr, len) }
}

/// mremap(2). Declared with its optional fifth argument as a fixed one:
/// on x86-64 and AArch64 Linux a variadic argument arrives where a fifth
/// fixed one would.
///
/// # Safety
/// As mremap(2).
#[no_mangle]
pub unsafe extern "C" fn mremap(
    old: *mut c_void,
    old_len: size_t,
    new_len: size_t,
    flags: c_int,
    new_addr: *mut c_void,
) -> *mut c_void {
    let Some(p) = owner(old) else {
        // SAFETY: not the span's: the caller's own mapping.
        return unsafe { system::mremap(old, old_len, new_len, flags, new_addr) };
    };
    // Moving to an address of the program's choosing, or keeping the old
    // pages too, would put region pages outside the span or twice in it.
    let old_r = old_len.checked_next_multiple_of(p.page());
    if flags & (libc::MREMAP_FIXED | libc::MREMAP_DONTUNMAP) != 0
        || old as usize % p.page() != 0
        || new_len == 0
        || old_r.is_none_or(|o| o == 0 || p.live_len(old as usize) != Some(o))
    {
        set_errno(libc::EINVAL);
        return libc::MAP_FAILED;
    }
    let q = resize_piece(
        p,
        old,
        old_r.unwrap_or(0),
        new_len,
        flags & libc::MREMAP_MAYMOVE != 0,
    );
    if q.is_null() {
        set_errno(libc::ENOMEM);
        return libc::MAP_FAILED;
    }
    q
}
