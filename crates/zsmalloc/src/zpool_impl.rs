//! The pool behind the shared allocator trait ([`zpool::ZPool`]).
//!
//! A thin mapping of handles, errors and counters; it adds no state and takes
//! no lock of its own.

use std::ptr::NonNull;

use zpool::{RetainedPages, ZCompacted, ZHandle, ZPool, ZPoolError, ZPoolStats};

use crate::handle::Handle;
use crate::pool::{Pool, PoolError};
use crate::CompactResult;

impl From<CompactResult> for ZCompacted {
    fn from(r: CompactResult) -> Self {
        ZCompacted {
            pages_freed: r.pages_freed,
            objs_moved: r.objs_moved,
            objs_moved_trim: r.objs_moved_trim,
        }
    }
}

impl From<PoolError> for ZPoolError {
    fn from(e: PoolError) -> Self {
        match e {
            PoolError::ZeroSize => ZPoolError::ZeroSize,
            PoolError::TooLarge { len, max } => ZPoolError::TooLarge { len, max },
            PoolError::OutOfMemory(_) | PoolError::TableFull => {
                ZPoolError::OutOfMemory(e.to_string())
            }
            PoolError::InvalidHandle => ZPoolError::InvalidHandle("not a handle of this pool"),
            PoolError::FreedHandle => ZPoolError::InvalidHandle("the object was freed"),
            PoolError::StaleHandle => {
                ZPoolError::InvalidHandle("stale: its slot holds another object")
            }
            PoolError::TooLong { len, capacity } => ZPoolError::TooLong { len, capacity },
            PoolError::Geometry(_) | PoolError::Pages(_) => ZPoolError::Config(e.to_string()),
        }
    }
}

fn handle(h: ZHandle) -> Result<Handle, ZPoolError> {
    Handle::from_raw(h.to_raw()).ok_or(ZPoolError::InvalidHandle("not a handle of this pool"))
}

fn zhandle(h: Handle) -> ZHandle {
    // A zsmalloc handle is never 0 (its slot field is slot + 1).
    ZHandle::from_raw(h.to_raw()).expect("zsmalloc handles are nonzero")
}

impl ZPool for Pool {
    fn name(&self) -> &'static str {
        "zsmalloc"
    }

    fn page_size(&self) -> usize {
        Pool::page_size(self)
    }

    fn max_object_size(&self) -> usize {
        Pool::unit(self)
    }

    fn huge_class_size(&self) -> usize {
        Pool::huge_class_size(self)
    }

    fn class_size(&self, len: usize) -> usize {
        u32::try_from(len)
            .ok()
            .and_then(|l| self.geometry().class_for(l))
            .map_or(len, |class| class.size as usize)
    }

    fn malloc(&self, len: usize) -> Result<ZHandle, ZPoolError> {
        Ok(zhandle(Pool::malloc(self, len)?))
    }

    fn free(&self, h: ZHandle) -> Result<(), ZPoolError> {
        Ok(Pool::free(self, handle(h)?)?)
    }

    fn write(&self, h: ZHandle, data: &[u8]) -> Result<(), ZPoolError> {
        Ok(Pool::write(self, handle(h)?, data)?)
    }

    fn read_begin(&self, h: ZHandle, len: usize) -> Result<NonNull<[u8]>, ZPoolError> {
        Ok(Pool::read(self, handle(h)?, len)?.into_raw())
    }

    // The guard's drop ends the hold through the cell it already has (no
    // second lookup of the handle, nothing kept for a framed pool).
    fn read_with(
        &self,
        h: ZHandle,
        len: usize,
        f: &mut dyn FnMut(&[u8]),
    ) -> Result<(), ZPoolError> {
        let obj = Pool::read(self, handle(h)?, len)?;
        f(&obj);
        Ok(())
    }

    unsafe fn read_end(&self, h: ZHandle) {
        if let Ok(h) = handle(h) {
            // SAFETY: the caller has an outstanding read of `h`, begun by
            // `read_begin`, which kept the guard's hold with `into_raw`.
            unsafe { self.release_read(h) }
        }
    }

    fn total_pages(&self) -> usize {
        Pool::total_pages(self)
    }

    fn stats(&self) -> ZPoolStats {
        let s = Pool::stats(self);
        ZPoolStats {
            total_pages: s.total_pages,
            objects: s.objs_used,
            pages_compacted: s.pages_compacted,
            objs_moved: s.objs_moved,
        }
    }

    fn compact(&self) -> ZCompacted {
        Pool::compact(self).into()
    }

    fn compact_background(&self) -> ZCompacted {
        Pool::compact_background(self).into()
    }

    fn can_compact(&self) -> u64 {
        Pool::can_compact(self)
    }

    fn retained_pages(&self) -> RetainedPages {
        let s = self.page_stats();
        RetainedPages {
            pages: s.cached_pages + s.pending_pages,
            bound: s.bound_pages,
            divisor: s.retain_divisor,
        }
    }

    fn set_page_retain_divisor(&self, divisor: usize) {
        Pool::set_page_retain_divisor(self, divisor);
    }

    fn decay_retained_pages(&self) -> usize {
        Pool::decay_page_cache(self)
    }

    fn release_retained_pages(&self) -> usize {
        self.pages.release_retained()
    }

    // One step per class, and in a framed pool one more that empties
    // sparsely used system pages: step 0, so that a compactor going from the
    // last step down (largest classes first) runs it after the classes have
    // given their frames back.
    fn compaction_steps(&self) -> usize {
        self.geometry().classes().len() + usize::from(self.is_framed())
    }

    fn step_can_compact(&self, step: usize) -> u64 {
        match step_target(self, step) {
            Step::SystemPages => Pool::system_pages_reclaimable(self),
            Step::Class(id) => Pool::class_reclaimable(self, id),
        }
    }

    fn step_lower_bound(&self, step: usize) -> Option<u64> {
        // The system-page step moves frames, not a count of objects one
        // can bound by the class's fullness.
        match step_target(self, step) {
            Step::SystemPages => None,
            Step::Class(id) => Some(Pool::class_compaction_lower_bound(self, id)),
        }
    }

    fn compact_step(&self, step: usize) -> ZCompacted {
        let r = match step_target(self, step) {
            Step::SystemPages => Pool::compact_system_pages_background(self),
            Step::Class(id) => Pool::compact_class_background(self, id),
        };
        ZCompacted {
            pages_freed: r.pages_freed,
            objs_moved: r.objs_moved,
            objs_moved_trim: r.objs_moved_trim,
        }
    }

    fn format_classes(&self) -> Option<String> {
        Some(Pool::format_classes(self))
    }

    fn check_invariants(&self) -> Result<(), String> {
        Pool::check_invariants(self)
    }
}

/// What one compaction step of the shared trait compacts.
enum Step {
    /// A framed pool's sparsely used system pages.
    SystemPages,
    /// One physical class.
    Class(usize),
}

/// Step `step`: in a framed pool, step 0 is the system pages and step `n`
/// class `n - 1`; otherwise step `n` is class `n`.
fn step_target(pool: &Pool, step: usize) -> Step {
    match (pool.is_framed(), step) {
        (true, 0) => Step::SystemPages,
        (true, n) => Step::Class(n - 1),
        (false, n) => Step::Class(n),
    }
}
