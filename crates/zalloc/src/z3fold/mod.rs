//! z3fold in user space: up to three compressed objects per page.
//!
//! z3fold was zbud's denser successor in the kernel (deprecated in 6.12,
//! removed in 6.15). A page is cut into 64 chunks like zbud's (64 bytes on
//! 4 KiB pages); chunk 0 is the header's, and the other 63 hold up to three
//! *buddies*:
//!
//! ```text
//!   | hdr | FIRST -->   | MIDDLE |        <-- LAST |
//!   0     1             start_middle          page_size
//! ```
//!
//! FIRST starts after the header, LAST ends at the end of the page, MIDDLE
//! starts at a recorded chunk. An object larger than
//! `page_size - header - chunk` (3968 bytes on 4 KiB pages) gets a
//! *headless* page of its own (no header, one object), so any size up to a
//! page is accepted.
//!
//! # Placement
//!
//! A page that can take another object sits on the *unbuddied* list indexed
//! by the largest object it can take now, in chunks:
//! - with a MIDDLE: FIRST can take the space before it (if FIRST is free),
//!   LAST the space after it (if LAST is free);
//! - without: FIRST can take everything but LAST, LAST everything but FIRST,
//!   and MIDDLE (only when FIRST and LAST are both used) the gap between
//!   them, placed right after FIRST.
//!
//! `malloc` of `n` chunks scans the lists from `n` upward, takes the first
//! page found and fills the first buddy that fits in the order FIRST, LAST,
//! MIDDLE; if every list is empty it takes a new page. The kernel kept these
//! lists per CPU; here there is one set (a user-space thread has no stable
//! CPU), which is what the kernel's lists amount to on one CPU. The lists
//! themselves (linking, the scan, their check) are `lists::ChunkLists`
//! (private to this crate), which zbud uses too; this module says which list a
//! page belongs on.
//!
//! # Compaction
//!
//! Every free that leaves objects in a page queues the page for compaction,
//! as the kernel queued a work item. [`ZPool::compact`](zpool::ZPool::compact) (zram's `compact`,
//! or a background thread) works through the queue one page at a time, each
//! under the pool mutex for one page's work only:
//! - a page with a single object moves it to another page with room, if one
//!   is listed, and gives its own page back;
//! - otherwise a MIDDLE alone in its page moves to the FIRST position; a
//!   MIDDLE next to only FIRST (or only LAST) slides against it when that
//!   closes a gap of at least [`BIG_CHUNK_GAP`] chunks.
//!
//! An object with an outstanding read is not moved; its page is queued
//! again. Objects can move because handles are indirect: a handle names an
//! entry of the pool's handle table, and the entry holds the object's page
//! and buddy. (The kernel used a per-page `buddy_slots` block for the same
//! purpose.)
//!
//! # Handles
//!
//! Bits: tag (7) | generation (25) | entry index + 1 (32). Freeing an object
//! bumps its entry's generation, so freed and stale handles are refused with
//! [`ZPoolError::InvalidHandle`](zpool::ZPoolError::InvalidHandle); the tag
//! catches handles of other pools.
//!
//! # Lock order
//!
//! ```text
//!   pool mutex (`Z3Fold::inner`: page records, lists, handle table,
//!               compaction queue, counters, read holds)
//!     -> page source mutex (leaf, inside `PageSource`)
//! ```
//!
//! `read_begin` counts a *read hold* on the object's entry and `read_end`
//! drops it; the bytes are read with the mutex released. `write` and `free`
//! wait (on the condition variable of `Z3Fold::inner`, a `holds::HoldLock`,
//! private to this crate) until an object has no read holds, and compaction
//! skips held objects, so a reader's bytes never move or change. Every update
//! under the mutex completes before anything that can panic, so a poisoned
//! mutex still guards consistent state.
//!
//! # Files
//!
//! `page.rs`: a page's layout (its header record, the buddies' places and
//! room, the list a page belongs on); `pool.rs`: the allocator proper
//! ([`Z3Fold`]: handles, the handle table, malloc, free, reads, writes, the
//! invariant walk); `compact.rs`: in-page compaction and the compaction
//! queue. The tests through the public API are `tests/z3fold.rs` of this
//! crate.

mod compact;
mod page;
mod pool;

pub use compact::BIG_CHUNK_GAP;
pub use page::{HEADER_CHUNKS, NCHUNKS, TOTAL_CHUNKS};
pub use pool::Z3Fold;
