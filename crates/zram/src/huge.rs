//! Whole pages kept beside the allocator, for allocators whose largest
//! object is smaller than a page (zbud's is `PAGE_SIZE - 2 × 64`, zblock's
//! its largest slot).
//!
//! Owns the pages kept beside the allocator; may not touch slots or any
//! module but `error` (floor 1).
//!
//! zram stores a page that does not compress below `huge_class_size` raw, as
//! one page-sized object. When the allocator cannot hold one, the store keeps
//! such pages here instead: one OS page each, from a [`PageSource`] (so it
//! goes back to the OS when freed) and counted in `mem_used_total` with the
//! allocator's pages. A slot's HUGE flag says its page is raw; the store's
//! `slot::HugeHome` says whether its handle word is a [`HugePageId`].
//!
//! Owns its page table; callers serialise access to one page (the store holds
//! the slot lock while it reads, writes or frees a slot's page).

use std::num::NonZeroU64;
use std::sync::Mutex;

use pages::{PageSource, Run};

use crate::error::StoreError;

/// A page kept beside the allocator: its index in the table + 1, so that it
/// is never 0 (an empty slot's handle word).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HugePageId(NonZeroU64);

impl HugePageId {
    /// The id in a slot's handle word, or `None` for 0.
    pub fn from_raw(raw: u64) -> Option<HugePageId> {
        NonZeroU64::new(raw).map(HugePageId)
    }

    /// The word kept in a slot (never 0).
    pub fn to_raw(self) -> u64 {
        self.0.get()
    }

    fn index(self) -> usize {
        usize::try_from(self.0.get() - 1).unwrap_or(usize::MAX)
    }

    fn of_index(index: usize) -> HugePageId {
        HugePageId(NonZeroU64::MIN.saturating_add(index as u64))
    }
}

/// Pages by index, named by [`HugePageId`].
pub struct HugePages {
    source: PageSource,
    table: Mutex<Table>,
}

#[derive(Default)]
struct Table {
    runs: Vec<Option<Run>>,
    free: Vec<usize>,
}

impl HugePages {
    /// Pages of `page_size` bytes.
    pub fn new(page_size: usize) -> Result<HugePages, StoreError> {
        Ok(HugePages {
            source: PageSource::new(page_size, None)
                .map_err(|e| StoreError::Config(format!("huge pages: {e}")))?,
            table: Mutex::new(Table::default()),
        })
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        // Updates under the mutex cannot panic halfway.
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Stores a copy of `page` (exactly one page) and returns its id.
    pub fn store(&self, page: &[u8]) -> Result<HugePageId, StoreError> {
        debug_assert_eq!(page.len(), self.source.page_size());
        let run = self
            .source
            .alloc(1)
            .map_err(|e| StoreError::Alloc(zpool::ZPoolError::OutOfMemory(e.to_string())))?;
        // SAFETY: the run is one fresh page of `page.len()` bytes that
        // nobody else can see yet.
        unsafe { std::ptr::copy_nonoverlapping(page.as_ptr(), run.as_ptr(), page.len()) };
        let mut t = self.table();
        let index = match t.free.pop() {
            Some(i) => {
                t.runs[i] = Some(run);
                i
            }
            None => {
                t.runs.push(Some(run));
                t.runs.len() - 1
            }
        };
        Ok(HugePageId::of_index(index))
    }

    /// Copies the page `id` into `buf` (one page).
    pub fn load(&self, id: HugePageId, buf: &mut [u8]) -> Result<(), StoreError> {
        let ptr = {
            let t = self.table();
            let run = t
                .runs
                .get(id.index())
                .and_then(Option::as_ref)
                .ok_or(StoreError::Alloc(zpool::ZPoolError::InvalidHandle(
                    "not a huge page of this store",
                )))?;
            run.as_ptr()
        };
        let n = buf.len().min(self.source.page_size());
        // SAFETY: the page (`page_size` bytes, at least `n`) stays allocated
        // until `free(id)`, which the store only calls for a slot's old
        // contents after swapping them out under the slot lock that the
        // caller holds, and no one writes a stored page.
        unsafe { std::ptr::copy_nonoverlapping(ptr, buf.as_mut_ptr(), n) };
        Ok(())
    }

    /// Frees the page `id`.
    pub fn free(&self, id: HugePageId) {
        let run = {
            let mut t = self.table();
            let i = id.index();
            let run = t.runs.get_mut(i).and_then(Option::take);
            if run.is_some() {
                t.free.push(i);
            }
            run
        };
        if let Some(run) = run {
            self.source.free(run);
        }
    }

    /// Pages held.
    pub fn pages(&self) -> usize {
        self.source.pages_out()
    }
}
