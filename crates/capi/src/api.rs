//! The exported `extern "C"` functions, one per prototype in
//! `include/zsmalloc.h`, in the header's order.
//!
//! Every function:
//! - accepts a NULL pool and returns its documented error (or does nothing);
//! - accepts any handle value: 0 and error values are refused before the
//!   pool sees them, and the pool refuses stale and forged ones;
//! - runs its body under `catch_unwind`, so a panic becomes the error return
//!   instead of unwinding into C.
//!
//! What no check can catch is the caller's to avoid, and is listed under
//! `# Safety`: a non-NULL pool pointer that is not a live pool, and buffers
//! shorter than the length passed with them.
//!
//! This module owns argument checking and error translation; holds are
//! `pool.rs`'s, the numbers `errno.rs`'s and `config.rs`'s.

use std::ffi::{c_char, c_int, c_ulong, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;

use zs::{Handle, Pool, PoolConfig};

use crate::config::{ZsPoolConfig, ZsPoolStats, ZS_MODE_DEFAULT, ZS_MODE_KERNEL_COMPAT};
use crate::errno::{err_value, errno_of, is_err_value, EBUSY, EINVAL, EUCLEAN};
use crate::pool::ZsPool;

/// Runs `body`, turning a panic into `on_panic` so it never unwinds into C.
///
/// `AssertUnwindSafe` is sound here: after a panic the pool's own locks may
/// be poisoned, which makes later calls fail (and be caught) rather than
/// see broken state; the hold table ignores poisoning because its every
/// change is a single map operation.
fn ffi<T>(on_panic: T, body: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(on_panic)
}

/// The pool behind a C pointer, `None` for NULL.
///
/// # Safety
///
/// `pool` is NULL or a pointer returned by `zs_create_pool(_ex)` and not yet
/// given to `zs_destroy_pool`, and stays so for `'a`.
unsafe fn pool_ref<'a>(pool: *const ZsPool) -> Option<&'a ZsPool> {
    // SAFETY: by the contract, a non-NULL `pool` points at a live `ZsPool`
    // (made by `Box::into_raw`), which only `zs_destroy_pool` frees.
    unsafe { pool.as_ref() }
}

/// The handle a C value names, `None` for 0 and for error values.
fn handle_of(value: c_ulong) -> Option<Handle> {
    if is_err_value(value) {
        None
    } else {
        Handle::from_raw(value)
    }
}

/// The name from a C string; NULL is the empty name.
///
/// # Safety
///
/// `name` is NULL or a NUL-terminated string.
unsafe fn name_of(name: *const c_char) -> CString {
    if name.is_null() {
        return CString::default();
    }
    // SAFETY: by the contract, a non-NULL `name` is NUL-terminated.
    unsafe { CStr::from_ptr(name) }.to_owned()
}

fn create(name: CString, config: PoolConfig) -> *mut ZsPool {
    match Pool::new(config) {
        Ok(pool) => Box::into_raw(Box::new(ZsPool::new(pool, name))),
        Err(_) => ptr::null_mut(),
    }
}

/// `zs_create_pool`: a kernel-compatible pool (4 KiB pages, chain 8, the
/// kernel's layout, keep-destination compaction). Returns NULL if no pool can be made.
///
/// # Safety
///
/// `name` is NULL (an unnamed pool) or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn zs_create_pool(name: *const c_char) -> *mut ZsPool {
    ffi(ptr::null_mut(), || {
        // SAFETY: passed on from this function's contract.
        let name = unsafe { name_of(name) };
        create(name, PoolConfig::kernel_compat())
    })
}

/// `zs_create_pool_ex`: a pool made from `cfg`. Returns NULL if `cfg` is NULL
/// or out of range.
///
/// # Safety
///
/// `name` is NULL or a NUL-terminated string; `cfg` is NULL or points at a
/// readable `struct zs_pool_config`.
#[no_mangle]
pub unsafe extern "C" fn zs_create_pool_ex(
    name: *const c_char,
    cfg: *const ZsPoolConfig,
) -> *mut ZsPool {
    ffi(ptr::null_mut(), || {
        // SAFETY: by the contract, a non-NULL `cfg` is readable; the struct
        // is plain integers, so any bit pattern is a value.
        let Some(cfg) = (unsafe { cfg.as_ref() }) else {
            return ptr::null_mut();
        };
        let Some(config) = cfg.to_pool_config() else {
            return ptr::null_mut();
        };
        // SAFETY: passed on from this function's contract.
        let name = unsafe { name_of(name) };
        create(name, config)
    })
}

/// `zs_pool_config_init`: fills `cfg` with the defaults of `mode`
/// (`ZS_MODE_KERNEL_COMPAT`: as `zs_create_pool`; `ZS_MODE_DEFAULT`: zmem's
/// default pool on 4 KiB pages). Returns 0, or -EINVAL for a NULL `cfg` or an
/// unknown mode.
///
/// # Safety
///
/// `cfg` is NULL or points at a writable `struct zs_pool_config`.
#[no_mangle]
pub unsafe extern "C" fn zs_pool_config_init(cfg: *mut ZsPoolConfig, mode: u32) -> c_int {
    ffi(-EINVAL, || {
        let config = match mode {
            ZS_MODE_KERNEL_COMPAT => PoolConfig::kernel_compat(),
            ZS_MODE_DEFAULT => PoolConfig::default_mode(4096),
            _ => return -EINVAL,
        };
        // SAFETY: by the contract, a non-NULL `cfg` is writable.
        let Some(cfg) = (unsafe { cfg.as_mut() }) else {
            return -EINVAL;
        };
        *cfg = ZsPoolConfig::from_pool_config(&config);
        0
    })
}

/// `zs_destroy_pool`: frees the pool and every object in it. NULL is a no-op.
///
/// # Safety
///
/// `pool` is NULL or a live pool that no other thread is using; neither it
/// nor any address `zs_obj_read_begin` returned for it is used afterwards.
#[no_mangle]
pub unsafe extern "C" fn zs_destroy_pool(pool: *mut ZsPool) {
    ffi((), || {
        if !pool.is_null() {
            // SAFETY: by the contract, `pool` came from `Box::into_raw` in
            // `create` and is destroyed once, with no other user.
            drop(unsafe { Box::from_raw(pool) });
        }
    })
}

/// `zs_pool_name`: the name the pool was created with ("" for NULL), valid
/// until the pool is destroyed.
///
/// # Safety
///
/// `pool` is NULL or a live pool.
#[no_mangle]
pub unsafe extern "C" fn zs_pool_name(pool: *mut ZsPool) -> *const c_char {
    ffi(c"".as_ptr(), || {
        // SAFETY: passed on from this function's contract.
        match unsafe { pool_ref(pool) } {
            Some(p) => p.name.as_ptr(),
            None => c"".as_ptr(),
        }
    })
}

/// `zs_malloc`: allocates an object of `size` bytes. Returns its handle, or
/// an error value: -EINVAL for size 0 or a NULL pool, -ENOSPC for more than a
/// page, -ENOMEM when out of memory or over the page limit.
///
/// # Safety
///
/// `pool` is NULL or a live pool.
#[no_mangle]
pub unsafe extern "C" fn zs_malloc(pool: *mut ZsPool, size: usize) -> c_ulong {
    ffi(err_value(crate::errno::ENOMEM), || {
        // SAFETY: passed on from this function's contract.
        let Some(p) = (unsafe { pool_ref(pool) }) else {
            return err_value(EINVAL);
        };
        match p.pool.malloc(size) {
            Ok(h) => h.to_raw(),
            Err(e) => err_value(errno_of(e.kind())),
        }
    })
}

/// `zs_free_checked`: frees an object. Returns 0, -EINVAL for a NULL pool, a
/// 0 or error value, or a handle that is stale, freed or not this pool's, and
/// -EBUSY (freeing nothing) while a read of it has begun and not ended.
///
/// # Safety
///
/// `pool` is NULL or a live pool.
#[no_mangle]
pub unsafe extern "C" fn zs_free_checked(pool: *mut ZsPool, handle: c_ulong) -> c_int {
    ffi(-EINVAL, || {
        // SAFETY: passed on from this function's contract.
        let Some(p) = (unsafe { pool_ref(pool) }) else {
            return -EINVAL;
        };
        let Some(h) = handle_of(handle) else {
            return -EINVAL;
        };
        if p.is_held(handle) {
            return -EBUSY;
        }
        match p.pool.free(h) {
            Ok(()) => 0,
            Err(e) => -errno_of(e.kind()),
        }
    })
}

/// `zs_free`: as [`zs_free_checked`], ignoring every error (as the kernel
/// ignores 0 and error values).
///
/// # Safety
///
/// `pool` is NULL or a live pool.
#[no_mangle]
pub unsafe extern "C" fn zs_free(pool: *mut ZsPool, handle: c_ulong) {
    // SAFETY: passed on from this function's contract.
    let _ = unsafe { zs_free_checked(pool, handle) };
}

/// `zs_obj_write_checked`: copies `mem_len` bytes from `src` to the start of
/// the object. Returns 0, -EINVAL for a NULL pool, a bad handle, a NULL `src`
/// with a non-zero length, or more bytes than the object holds, and -EBUSY
/// (writing nothing) while a read of it has begun and not ended.
///
/// # Safety
///
/// `pool` is NULL or a live pool; `src` is NULL or points at `mem_len`
/// readable bytes.
#[no_mangle]
pub unsafe extern "C" fn zs_obj_write_checked(
    pool: *mut ZsPool,
    handle: c_ulong,
    src: *const c_void,
    mem_len: usize,
) -> c_int {
    ffi(-EINVAL, || {
        // SAFETY: passed on from this function's contract.
        let Some(p) = (unsafe { pool_ref(pool) }) else {
            return -EINVAL;
        };
        let Some(h) = handle_of(handle) else {
            return -EINVAL;
        };
        let data: &[u8] = if mem_len == 0 {
            &[]
        } else if src.is_null() || mem_len > p.pool.page_size() {
            return -EINVAL;
        } else {
            // SAFETY: by the contract `src` points at `mem_len` readable
            // bytes; `mem_len` is at most a page, so within `isize::MAX`.
            unsafe { std::slice::from_raw_parts(src.cast::<u8>(), mem_len) }
        };
        if p.is_held(handle) {
            return -EBUSY;
        }
        match p.pool.write(h, data) {
            Ok(()) => 0,
            Err(e) => -errno_of(e.kind()),
        }
    })
}

/// `zs_obj_write`: as [`zs_obj_write_checked`], ignoring errors.
///
/// # Safety
///
/// As [`zs_obj_write_checked`].
#[no_mangle]
pub unsafe extern "C" fn zs_obj_write(
    pool: *mut ZsPool,
    handle: c_ulong,
    src: *const c_void,
    mem_len: usize,
) {
    // SAFETY: passed on from this function's contract.
    let _ = unsafe { zs_obj_write_checked(pool, handle, src, mem_len) };
}

/// `zs_obj_read_begin`: the address of the object's first `mem_len` bytes,
/// held (not written, freed or moved) until `zs_obj_read_end`. In a pool
/// whose zspages are virtually contiguous runs (kernel-compat mode, and
/// default mode on 4 KiB pages) even an object that crosses a page boundary
/// is returned in place; in a framed pool (default mode on pages above
/// 4 KiB) an object that crosses 4 KiB frames is returned as a copy the pool
/// keeps until `zs_obj_read_end`. `local_copy` is never used (it may be
/// NULL).
/// Returns NULL for a NULL pool, a bad handle, `mem_len` larger than the
/// object, or an object already held by 63 reads.
///
/// # Safety
///
/// `pool` is NULL or a live pool. The bytes may only be read, and not after
/// the matching `zs_obj_read_end`.
#[no_mangle]
pub unsafe extern "C" fn zs_obj_read_begin(
    pool: *mut ZsPool,
    handle: c_ulong,
    mem_len: usize,
    local_copy: *mut c_void,
) -> *mut c_void {
    let _ = local_copy;
    ffi(ptr::null_mut(), || {
        // SAFETY: passed on from this function's contract.
        let Some(p) = (unsafe { pool_ref(pool) }) else {
            return ptr::null_mut();
        };
        let Some(h) = handle_of(handle) else {
            return ptr::null_mut();
        };
        match p.begin_read(h, mem_len) {
            Ok(addr) => addr.cast(),
            Err(_) => ptr::null_mut(),
        }
    })
}

/// `zs_obj_read_end_checked`: ends one read begun by `zs_obj_read_begin` of
/// `handle` that returned `handle_mem`. Returns 0, or -EINVAL (changing
/// nothing) for a NULL pool or when no such read is outstanding. `mem_len`
/// is not needed and not checked.
///
/// # Safety
///
/// `pool` is NULL or a live pool.
#[no_mangle]
pub unsafe extern "C" fn zs_obj_read_end_checked(
    pool: *mut ZsPool,
    handle: c_ulong,
    mem_len: usize,
    handle_mem: *mut c_void,
) -> c_int {
    let _ = mem_len;
    ffi(-EINVAL, || {
        // SAFETY: passed on from this function's contract.
        let Some(p) = (unsafe { pool_ref(pool) }) else {
            return -EINVAL;
        };
        let Some(h) = handle_of(handle) else {
            return -EINVAL;
        };
        match p.end_read(h, handle_mem.cast::<u8>()) {
            Ok(()) => 0,
            Err(_) => -EINVAL,
        }
    })
}

/// `zs_obj_read_end`: as [`zs_obj_read_end_checked`], ignoring errors.
///
/// # Safety
///
/// `pool` is NULL or a live pool.
#[no_mangle]
pub unsafe extern "C" fn zs_obj_read_end(
    pool: *mut ZsPool,
    handle: c_ulong,
    mem_len: usize,
    handle_mem: *mut c_void,
) {
    // SAFETY: passed on from this function's contract.
    let _ = unsafe { zs_obj_read_end_checked(pool, handle, mem_len, handle_mem) };
}

/// `zs_get_total_pages`: pages the pool holds (0 for NULL).
///
/// # Safety
///
/// `pool` is NULL or a live pool.
#[no_mangle]
pub unsafe extern "C" fn zs_get_total_pages(pool: *mut ZsPool) -> c_ulong {
    ffi(0, || {
        // SAFETY: passed on from this function's contract.
        unsafe { pool_ref(pool) }.map_or(0, |p| p.pool.total_pages() as c_ulong)
    })
}

/// `zs_huge_class_size`: objects of this many bytes or more take a page each
/// (0 for NULL).
///
/// # Safety
///
/// `pool` is NULL or a live pool.
#[no_mangle]
pub unsafe extern "C" fn zs_huge_class_size(pool: *mut ZsPool) -> usize {
    ffi(0, || {
        // SAFETY: passed on from this function's contract.
        unsafe { pool_ref(pool) }.map_or(0, |p| p.pool.huge_class_size())
    })
}

/// `zs_compact`: compacts every class; returns the pages freed (0 for NULL,
/// or if another compaction is running). Objects held by a read stay put.
///
/// # Safety
///
/// `pool` is NULL or a live pool.
#[no_mangle]
pub unsafe extern "C" fn zs_compact(pool: *mut ZsPool) -> c_ulong {
    ffi(0, || {
        // SAFETY: passed on from this function's contract.
        unsafe { pool_ref(pool) }.map_or(0, |p| p.pool.compact().pages_freed)
    })
}

/// `zs_can_compact`: pages compaction could free now, over all classes (the
/// kernel's shrinker count; 0 for NULL).
///
/// # Safety
///
/// `pool` is NULL or a live pool.
#[no_mangle]
pub unsafe extern "C" fn zs_can_compact(pool: *mut ZsPool) -> c_ulong {
    ffi(0, || {
        // SAFETY: passed on from this function's contract.
        unsafe { pool_ref(pool) }.map_or(0, |p| p.pool.can_compact())
    })
}

/// `zs_pool_stats`: fills `stats` (all zeros for a NULL pool; nothing for a
/// NULL `stats`).
///
/// # Safety
///
/// `pool` is NULL or a live pool; `stats` is NULL or points at a writable
/// `struct zs_pool_stats`.
#[no_mangle]
pub unsafe extern "C" fn zs_pool_stats(pool: *mut ZsPool, stats: *mut ZsPoolStats) {
    ffi((), || {
        // SAFETY: passed on from this function's contract.
        let value =
            unsafe { pool_ref(pool) }.map_or_else(ZsPoolStats::default, |p| p.pool.stats().into());
        // SAFETY: by the contract, a non-NULL `stats` is writable.
        if let Some(out) = unsafe { stats.as_mut() } {
            *out = value;
        }
    })
}

/// `zs_format_classes`: the per-class table in the layout of the kernel's
/// debugfs `classes` file, with `snprintf` semantics: writes at most
/// `len - 1` bytes and a NUL (nothing if `len` is 0 or `buf` NULL) and
/// returns the length of the whole table (0 for a NULL pool, which writes an
/// empty string).
///
/// # Safety
///
/// `pool` is NULL or a live pool; `buf` is NULL or points at `len` writable
/// bytes.
#[no_mangle]
pub unsafe extern "C" fn zs_format_classes(
    pool: *mut ZsPool,
    buf: *mut c_char,
    len: usize,
) -> usize {
    ffi(0, || {
        // SAFETY: passed on from this function's contract.
        let table = unsafe { pool_ref(pool) }.map_or_else(String::new, |p| p.pool.format_classes());
        if !buf.is_null() && len > 0 {
            let n = table.len().min(len - 1);
            // SAFETY: by the contract `buf` has `len` writable bytes and
            // `n + 1 <= len`; `table` is a separate Rust allocation.
            unsafe {
                ptr::copy_nonoverlapping(table.as_ptr(), buf.cast::<u8>(), n);
                *buf.add(n) = 0;
            }
        }
        table.len()
    })
}

/// `zs_check_invariants`: walks the whole pool re-deriving every count.
/// Returns 0, -EINVAL for a NULL pool, -EBUSY while any read has begun and
/// not ended (the walk expects no object held), or -EUCLEAN if the
/// bookkeeping is inconsistent. Call it while no other thread uses the pool.
///
/// # Safety
///
/// `pool` is NULL or a live pool.
#[no_mangle]
pub unsafe extern "C" fn zs_check_invariants(pool: *mut ZsPool) -> c_int {
    ffi(-EUCLEAN, || {
        // SAFETY: passed on from this function's contract.
        let Some(p) = (unsafe { pool_ref(pool) }) else {
            return -EINVAL;
        };
        if p.any_held() {
            return -EBUSY;
        }
        match p.pool.check_invariants() {
            Ok(()) => 0,
            Err(_) => -EUCLEAN,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each line restates a prototype of `include/zsmalloc.h` in Rust types
    /// (`unsigned long` = `c_ulong`, `size_t` = `usize`, `uint32_t` = `u32`):
    /// changing a Rust signature without the header fails to compile here.
    /// `tests/c_api.rs` checks that both list the same functions.
    #[test]
    fn signatures_match_the_header() {
        type P = *mut ZsPool;
        let _: unsafe extern "C" fn(*const c_char) -> P = zs_create_pool;
        let _: unsafe extern "C" fn(*const c_char, *const ZsPoolConfig) -> P = zs_create_pool_ex;
        let _: unsafe extern "C" fn(*mut ZsPoolConfig, u32) -> c_int = zs_pool_config_init;
        let _: unsafe extern "C" fn(P) = zs_destroy_pool;
        let _: unsafe extern "C" fn(P) -> *const c_char = zs_pool_name;
        let _: unsafe extern "C" fn(P, usize) -> c_ulong = zs_malloc;
        let _: unsafe extern "C" fn(P, c_ulong) = zs_free;
        let _: unsafe extern "C" fn(P, c_ulong) -> c_int = zs_free_checked;
        let _: unsafe extern "C" fn(P, c_ulong, *const c_void, usize) = zs_obj_write;
        let _: unsafe extern "C" fn(P, c_ulong, *const c_void, usize) -> c_int =
            zs_obj_write_checked;
        let _: unsafe extern "C" fn(P, c_ulong, usize, *mut c_void) -> *mut c_void =
            zs_obj_read_begin;
        let _: unsafe extern "C" fn(P, c_ulong, usize, *mut c_void) = zs_obj_read_end;
        let _: unsafe extern "C" fn(P, c_ulong, usize, *mut c_void) -> c_int =
            zs_obj_read_end_checked;
        let _: unsafe extern "C" fn(P) -> c_ulong = zs_get_total_pages;
        let _: unsafe extern "C" fn(P) -> usize = zs_huge_class_size;
        let _: unsafe extern "C" fn(P) -> c_ulong = zs_compact;
        let _: unsafe extern "C" fn(P) -> c_ulong = zs_can_compact;
        let _: unsafe extern "C" fn(P, *mut ZsPoolStats) = zs_pool_stats;
        let _: unsafe extern "C" fn(P, *mut c_char, usize) -> usize = zs_format_classes;
        let _: unsafe extern "C" fn(P) -> c_int = zs_check_invariants;
    }
}
