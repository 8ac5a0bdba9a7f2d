//! Bookkeeping zbud, z3fold and zblock do the same way, besides read holds
//! and the unbuddied lists: the page source and tag a new pool starts with,
//! the refusals of a bad handle, the last step of an invariant check, and
//! the methods on the pages their page source keeps for reuse.
//!
//! This module owns the process-wide tag sequence. It may not look at any
//! allocator's records: callers pass in what they counted.

use pages::PageSource;
use zpool::ZPoolError;

/// Refusal of a handle whose tag or bits name no object of this pool.
pub(crate) const FOREIGN: ZPoolError = ZPoolError::InvalidHandle("not a handle of this pool");
/// Refusal of a handle whose object was freed and whose slot is empty.
pub(crate) const FREED: ZPoolError = ZPoolError::InvalidHandle("the object was freed");
/// Refusal of a handle whose slot was freed and taken by another object.
pub(crate) const STALE: ZPoolError =
    ZPoolError::InvalidHandle("stale: its slot holds another object");

/// What a new pool starts with: a page source of `page_size`-byte pages,
/// holding at most `limit` at once if given, and a fresh tag
/// ([`next_pool_tag`]). A page size the source refuses is a
/// [`ZPoolError::Config`].
pub(crate) fn source_and_tag(
    page_size: usize,
    limit: Option<usize>,
) -> Result<(PageSource, u8), ZPoolError> {
    let source =
        PageSource::new(page_size, limit).map_err(|e| ZPoolError::Config(e.to_string()))?;
    Ok((source, next_pool_tag()))
}

/// What `source` keeps resident for reuse, for [`zpool::ZPool::retained_pages`].
pub(crate) fn retained_pages(source: &PageSource) -> zpool::RetainedPages {
    let s = source.stats();
    zpool::RetainedPages {
        pages: s.cached_pages + s.pending_pages,
        bound: s.bound_pages,
        divisor: s.retain_divisor,
    }
}

/// The [`zpool::ZPool`] methods on the pages kept for reuse, inside an
/// allocator's `impl ZPool`: all four are its page source's (`self.$source`).
macro_rules! retained_page_methods {
    ($source:ident) => {
        fn retained_pages(&self) -> zpool::RetainedPages {
            crate::bookkeeping::retained_pages(&self.$source)
        }

        fn set_page_retain_divisor(&self, divisor: usize) {
            self.$source.set_retain_divisor(divisor);
        }

        fn decay_retained_pages(&self) -> usize {
            self.$source.decay()
        }

        fn release_retained_pages(&self) -> usize {
            self.$source.release_retained()
        }
    };
}
pub(crate) use retained_page_methods;

/// A fresh tag for a new allocator instance, in `1..=126`.
///
/// Allocators put it in the top bits of their handles so that a handle of
/// another instance (or another allocator) is refused as foreign in all but
/// one case in 126. One sequence for the whole process keeps the tags of
/// allocators made one after another apart. Never 0 (so a handle with a tag
/// is never 0) and never 127 (so a raw handle stays below the top 4095
/// values, which C callers read as error codes).
pub(crate) fn next_pool_tag() -> u8 {
    use std::sync::atomic::{AtomicU8, Ordering};
    static NEXT: AtomicU8 = AtomicU8::new(0x11);
    loop {
        let tag = NEXT.fetch_add(41, Ordering::Relaxed) & 0x7f;
        if tag != 0 && tag != 0x7f {
            return tag;
        }
    }
}

/// The last step of an allocator's `check_invariants`: the pages and objects
/// its walk `counted` against the counters it `kept`, and the pages against
/// those its page source has out. Returns the first mismatch.
pub(crate) fn check_totals(
    counted: (usize, u64),
    kept: (usize, u64),
    pages_out: usize,
) -> Result<(), String> {
    let (pages, objects) = counted;
    if counted != kept {
        return Err(format!(
            "counted {pages} pages, {objects} objects; kept {}, {}",
            kept.0, kept.1
        ));
    }
    if pages_out != pages {
        return Err(format!(
            "the page source has {pages_out} pages out for {pages} live pages"
        ));
    }
    Ok(())
}
