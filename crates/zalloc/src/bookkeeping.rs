//! Bookkeeping zbud, z3fold and zblock do the same way, besides read holds
//! and the unbuddied lists: the tag in every handle and the last step of an
//! invariant check.
//!
//! This module owns the process-wide tag sequence. It may not look at any
//! allocator's records: callers pass in what they counted.

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
