//! Serving a fault does not allocate: with a global allocator that counts
//! the allocations made on the handler thread (or on the faulting thread,
//! when faults are served there), thousands of faults served from the
//! store (lz4) and of never-written pages cost none (the store slots of
//! pages brought back are freed by the evictor, which may).

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

use common::{check, fill, region_or_skip, Deadline};
use region::{FaultService, RegionConfig};

struct Counting;

/// Allocations made on the fault handler's thread.
static ALLOCS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Whether this thread is the fault handler (None: not looked yet).
    static HANDLER: std::cell::Cell<Option<bool>> = const { std::cell::Cell::new(None) };
    /// Set while looking, so the look's own allocations are not looked at.
    static LOOKING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Set on a test thread while its own faults are served in it.
    static WATCHED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Allocations on a watched thread (faults served in the faulting thread).
static WATCHED_ALLOCS: AtomicU64 = AtomicU64::new(0);

fn count() {
    if WATCHED.with(|w| w.get()) {
        WATCHED_ALLOCS.fetch_add(1, Ordering::Relaxed);
    }
    let is_handler = HANDLER.with(|h| match h.get() {
        Some(v) => v,
        None => {
            if LOOKING.with(|l| l.replace(true)) {
                return false;
            }
            // The handler is a POSIX thread of the region's (no std
            // name): its name read into the stack, without allocating.
            let mut name = [0u8; 16];
            // SAFETY: the calling thread, a 16-byte buffer.
            let rc = unsafe {
                libc::pthread_getname_np(libc::pthread_self(), name.as_mut_ptr().cast(), name.len())
            };
            let v = rc == 0 && name.starts_with(b"zmem-fault\0");
            LOOKING.with(|l| l.set(false));
            h.set(Some(v));
            v
        }
    });
    if is_handler {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: forwards to the system allocator, counting calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: the caller's layout, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: a pointer from `alloc` with its layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: as `realloc`'s contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn faults_allocate_nothing() {
    faults_allocate_nothing_with(FaultService::HandlerThread, &ALLOCS);
}

/// Served in the faulting thread: the test's own thread, watched while it
/// reads (the loop itself allocates nothing).
#[test]
fn faults_served_in_the_faulting_thread_allocate_nothing() {
    faults_allocate_nothing_with(FaultService::FaultingThread, &WATCHED_ALLOCS);
}

fn faults_allocate_nothing_with(service: FaultService, allocs: &AtomicU64) {
    let _d = Deadline::new("no_alloc", 60);
    let len = 16 << 20;
    let mut cfg = RegionConfig::new(len);
    cfg.fault_service = service;
    cfg.probation_pages = Some(0);
    cfg.age_eviction = false;
    let Some(r) = region_or_skip(len, cfg) else {
        return;
    };
    let ps = region::page_size();
    let n = len / ps;
    let base = r.as_ptr();
    for i in 0..n / 2 {
        // SAFETY: page i.
        fill(unsafe { base.add(i * ps) }, ps, i as u64, 9);
    }
    assert_eq!(r.cold(0..len / 2).unwrap(), n / 2);
    let watch = service == FaultService::FaultingThread;
    let before = allocs.load(Ordering::Relaxed);
    WATCHED.with(|w| w.set(watch));
    let mut sum = 0u64;
    for i in 0..n {
        // SAFETY: page i: the first half from the store, the second never
        // written (the zero page).
        sum += unsafe { std::ptr::read_volatile(base.add(i * ps + 8)) } as u64;
    }
    WATCHED.with(|w| w.set(false));
    let during = allocs.load(Ordering::Relaxed) - before;
    let s = r.stats();
    assert_eq!(s.faults.missing_store as usize, n / 2, "{s:?}");
    assert_eq!(s.faults.missing_zero as usize, n, "{s:?}");
    assert_eq!(
        during,
        0,
        "{during} allocations serving {n} faults ({})",
        service.name()
    );
    for i in 0..n / 2 {
        // SAFETY: page i.
        assert_eq!(check(unsafe { base.add(i * ps) }, ps), (i as u64, 9));
    }
    assert!(sum > 0);
}
