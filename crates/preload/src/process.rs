//! The process's one region and the books of its span: started by the
//! library's constructor, reached by every hook through [`process`].
//!
//! Owns the region, the span under its lock (a pthread mutex held across
//! `fork`, so a child never inherits it locked), the counters of what the
//! hooks served, and the two moves every hook is made of: hand pages out,
//! and take them back (dropped first, so a free page reads as zeros).

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

use libc::c_void;
use region::{Region, RegionConfig, UffdMode, UffdOpen};
use serde_json::json;

use crate::settings::Settings;
use crate::span::Span;

/// What the hooks served, for the statistics.
#[derive(Debug, Default)]
pub struct Served {
    /// Anonymous mappings served from the region.
    pub mmaps: AtomicU64,
    /// Allocations served from the region.
    pub allocs: AtomicU64,
    /// Requests the region could not hold (its span full), served by the
    /// system instead.
    pub span_full: AtomicU64,
    /// Pieces moved to a larger place (realloc, mremap).
    pub moves: AtomicU64,
}

/// The span and the pthread mutex that guards it.
struct Locked {
    mutex: UnsafeCell<libc::pthread_mutex_t>,
    span: UnsafeCell<Span>,
}

/// The process's region and its books.
pub struct Process {
    region: Region,
    locked: Locked,
    base: usize,
    len: usize,
    page: usize,
    /// The smallest request served from the region.
    pub min: usize,
    /// What the hooks served.
    pub served: Served,
    /// The settings.
    pub settings: Settings,
}

// SAFETY: the span is only touched with the mutex held; the region is
// Sync; the rest is read-only or atomic.
unsafe impl Sync for Process {}
// SAFETY: as above; the process value is never moved between threads
// after it is published (it is leaked and shared by reference).
unsafe impl Send for Process {}

static PROCESS: AtomicPtr<Process> = AtomicPtr::new(std::ptr::null_mut());

/// The process's region, once the constructor has made it.
pub fn process() -> Option<&'static Process> {
    let p = PROCESS.load(Ordering::Acquire);
    // SAFETY: published once, leaked, never freed.
    unsafe { p.as_ref() }
}

impl Process {
    /// Makes the region (a userfaultfd that serves the kernel's faults too:
    /// the device, then the system call) and publishes it.
    pub fn start(settings: Settings) -> Result<&'static Process, String> {
        let mut config = RegionConfig::new(settings.limit);
        config.store.comp = settings.comp;
        config.store.comp_params = settings.params.clone();
        if let Some(poll) = settings.handler_poll {
            config.handler_poll = Some(poll);
        }
        if let Some(covers) = settings.limit_covers {
            config.limit_covers = covers;
        }
        // The command's first process also counts `zmem run`'s memory (its
        // children count their own alone).
        // SAFETY: getppid has no arguments.
        let parent = unsafe { libc::getppid() } as u32;
        if settings.run_pid == Some(parent) {
            config.limit_also_covers = Some(parent);
        }
        if let Some(on) = settings.soft_dirty {
            config.soft_dirty = on;
        }
        if let Some(follows) = settings.handler_follows {
            config.handler_follows = follows;
        }
        // SAFETY: getpid has no arguments.
        let pid = unsafe { libc::getpid() };
        config.report_log = settings
            .stats_dir
            .as_ref()
            .map(|d| d.join(format!("{pid}.log")));
        let mut last = String::new();
        for how in [UffdOpen::Device, UffdOpen::Syscall] {
            config.uffd = how;
            match Region::new(settings.span, config.clone()) {
                Ok(region) => {
                    debug_assert_ne!(region.uffd_mode(), UffdMode::UserModeOnly);
                    return Ok(Process::publish(region, settings));
                }
                Err(e) => last = e.to_string(),
            }
        }
        Err(last)
    }

    fn publish(region: Region, settings: Settings) -> &'static Process {
        let base = region.as_ptr() as usize;
        let len = region.len();
        let page = region.page_size();
        let p = Box::leak(Box::new(Process {
            locked: Locked {
                mutex: UnsafeCell::new(libc::PTHREAD_MUTEX_INITIALIZER),
                span: UnsafeCell::new(Span::new(base, len, page)),
            },
            region,
            base,
            len,
            page,
            min: settings.min.max(page),
            served: Served::default(),
            settings,
        }));
        PROCESS.store(p, Ordering::Release);
        // SAFETY: three `extern "C"` functions that live for the program.
        unsafe { libc::pthread_atfork(Some(fork_prepare), Some(fork_after), Some(fork_child)) };
        p
    }

    /// Whether `addr` is in the region's span.
    pub fn contains(&self, addr: usize) -> bool {
        addr.wrapping_sub(self.base) < self.len
    }

    /// Bytes per page.
    pub fn page(&self) -> usize {
        self.page
    }

    /// Runs `f` on the span with the lock held. `f` must not fault on the
    /// region or call a hook.
    fn with_span<R>(&self, f: impl FnOnce(&mut Span) -> R) -> R {
        // SAFETY: a mutex initialised statically and never moved (leaked).
        unsafe { libc::pthread_mutex_lock(self.locked.mutex.get()) };
        // SAFETY: the lock is held: this is the only view of the span.
        let r = f(unsafe { &mut *self.locked.span.get() });
        // SAFETY: held by this thread.
        unsafe { libc::pthread_mutex_unlock(self.locked.mutex.get()) };
        r
    }

    /// Hands out `bytes` (rounded up to pages) from the span; `None` when
    /// it has no run that long (counted).
    pub fn alloc(&self, bytes: usize) -> Option<*mut c_void> {
        let len = bytes.max(1).checked_next_multiple_of(self.page)?;
        let got = self.with_span(|s| s.alloc(len));
        if got.is_none() {
            self.served.span_full.fetch_add(1, Ordering::Relaxed);
        }
        got.map(|a| a as *mut c_void)
    }

    /// The bytes handed out at `addr` (`None` if no piece starts there).
    pub fn live_len(&self, addr: usize) -> Option<usize> {
        self.with_span(|s| s.live_len(addr))
    }

    /// Drops the pages of `[addr, addr + len)` (the region frees their
    /// stored copies; they read as zeros after) and takes them back.
    pub fn release(&self, addr: usize, len: usize) {
        let len = len.next_multiple_of(self.page);
        // SAFETY: pages of the span the caller gives up; the region's
        // handler follows the advice (remove event).
        unsafe { libc::madvise(addr as *mut c_void, len, libc::MADV_DONTNEED) };
        self.with_span(|s| s.release(addr, len));
    }

    /// Grows the piece at `addr` from `old` to `new` bytes where it is.
    pub fn grow_in_place(&self, addr: usize, old: usize, new: usize) -> bool {
        self.with_span(|s| s.grow_in_place(addr, old, new))
    }

    /// The statistics of this process: the region's and the hooks'.
    pub fn stats(&self) -> serde_json::Value {
        let (live, peak) = self.with_span(|s| s.live_bytes());
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let region = serde_json::to_value(self.region.stats()).unwrap_or_default();
        json!({
            "pid": std::process::id(),
            "exe": std::env::current_exe().ok(),
            "span_bytes": self.len,
            "min_request_bytes": self.min,
            "handed_out_bytes": live,
            "handed_out_peak_bytes": peak,
            "served": {
                "mmaps": l(&self.served.mmaps),
                "allocs": l(&self.served.allocs),
                "moves": l(&self.served.moves),
                "span_full": l(&self.served.span_full),
            },
            "region": region,
        })
    }
}

/// Before a copy of the process (the `fork()` handler, also run by
/// `forks`): the span's lock taken.
pub(crate) extern "C" fn fork_prepare() {
    if let Some(p) = process() {
        // SAFETY: the span's mutex, held across fork and released by
        // `fork_after` in the parent and in the child.
        unsafe { libc::pthread_mutex_lock(p.locked.mutex.get()) };
    }
}

/// In the child: one thread counted, the span's lock let go.
pub(crate) extern "C" fn fork_child() {
    crate::threads::after_fork_child();
    fork_after();
}

/// In the parent (and the child): the span's lock let go.
pub(crate) extern "C" fn fork_after() {
    if let Some(p) = process() {
        // SAFETY: locked by `fork_prepare` on this thread (in the child,
        // the copy of that thread).
        unsafe { libc::pthread_mutex_unlock(p.locked.mutex.get()) };
    }
}
