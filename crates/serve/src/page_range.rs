//! A store's byte ranges as whole pages: the range check and the page loops
//! both front ends run.
//!
//! This module owns what the NBD adapter ([`crate::device`]) and the ublk
//! target ([`crate::ublk_exports`]) share: a request's byte range turned
//! into pages (refused, not rounded, if it is not whole pages inside the
//! disk: both front ends only pass such ranges, anything else is a bug) and
//! the loops that read and write those pages straight into or out of the
//! request's buffer. Each front end maps a [`PageError`] to its own error
//! type; the store's errors keep the store's errno mapping
//! ([`zram::StoreError::block_errno`]). It takes no lock of its own.

use std::sync::Arc;

use zram::{Store, StoreError};

/// Why a page request failed.
#[derive(Debug)]
pub(crate) enum PageError {
    /// The range is not whole pages inside the disk (`EINVAL`).
    Range(String),
    /// The store refused.
    Store(StoreError),
}

impl PageError {
    /// The errno a block request fails with.
    pub(crate) fn errno(&self) -> i32 {
        match self {
            PageError::Range(_) => libc::EINVAL,
            PageError::Store(e) => e.block_errno(),
        }
    }
}

impl From<StoreError> for PageError {
    fn from(e: StoreError) -> PageError {
        PageError::Store(e)
    }
}

/// A store seen as pages of byte ranges.
pub(crate) struct PageRange {
    store: Arc<Store>,
    page: usize,
}

impl PageRange {
    /// Over `store`, with its page size.
    pub(crate) fn new(store: Arc<Store>) -> PageRange {
        let page = store.page_size();
        PageRange { store, page }
    }

    /// The store.
    pub(crate) fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// The page size in bytes.
    pub(crate) fn page(&self) -> usize {
        self.page
    }

    /// `(first page, page count)` of the byte range `offset..offset+len`.
    pub(crate) fn pages(&self, offset: u64, len: u64) -> Result<(u64, u64), PageError> {
        let size = self.store.disk_size();
        match offset.checked_add(len) {
            Some(end) if end <= size => {}
            _ => {
                return Err(PageError::Range(format!(
                    "range {offset}+{len} is outside the device ({size} bytes)"
                )))
            }
        }
        let page = self.page as u64;
        if offset % page != 0 || len % page != 0 {
            return Err(PageError::Range(format!(
                "{offset}+{len} is not aligned to the {page}-byte page"
            )));
        }
        Ok((offset / page, len / page))
    }

    /// Reads the pages at `offset` into `buf`, stopping at the first error.
    pub(crate) fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), PageError> {
        let (first, _) = self.pages(offset, buf.len() as u64)?;
        for (i, page) in buf.chunks_exact_mut(self.page).enumerate() {
            self.store.read_page(first + i as u64, page)?;
        }
        Ok(())
    }

    /// Writes `data` as the pages at `offset`, stopping at the first error
    /// (the pages before it are written).
    pub(crate) fn write(&self, offset: u64, data: &[u8]) -> Result<(), PageError> {
        let (first, _) = self.pages(offset, data.len() as u64)?;
        for (i, page) in data.chunks_exact(self.page).enumerate() {
            self.store.write_page(first + i as u64, page)?;
        }
        Ok(())
    }

    /// Frees the pages of the range.
    pub(crate) fn discard(&self, offset: u64, len: u64) -> Result<(), PageError> {
        let (first, count) = self.pages(offset, len)?;
        Ok(self.store.discard(first, count)?)
    }

    /// Frees the pages of the range, which then read as zeros.
    pub(crate) fn write_zeroes(&self, offset: u64, len: u64) -> Result<(), PageError> {
        let (first, count) = self.pages(offset, len)?;
        Ok(self.store.write_zeroes(first, count)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range() -> PageRange {
        let pool = zalloc::open("zsmalloc", &zalloc::AllocOptions::default()).unwrap();
        let comp = zcomp::Compressor::with_defaults(zcomp::Algorithm::Lz4);
        PageRange::new(Arc::new(Store::new(pool, comp, 4).unwrap()))
    }

    #[test]
    fn ranges_are_whole_pages_inside_the_disk() {
        let r = range();
        assert_eq!(r.pages(4096, 8192).unwrap(), (1, 2));
        assert_eq!(r.pages(0, 0).unwrap(), (0, 0));
        for (off, len) in [(1, 4096), (0, 100), (4096, 4 * 4096), (u64::MAX, 2)] {
            let e = r.pages(off, len).unwrap_err();
            assert!(matches!(e, PageError::Range(_)), "{off}+{len}: {e:?}");
            assert_eq!(e.errno(), libc::EINVAL);
        }
    }

    #[test]
    fn pages_written_read_back_and_discarded_read_zero() {
        let r = range();
        let data: Vec<u8> = (0..2 * 4096).map(|i| (i * 7 % 251) as u8).collect();
        r.write(4096, &data).unwrap();
        let mut back = vec![0u8; data.len()];
        r.read(4096, &mut back).unwrap();
        assert_eq!(back, data);
        r.discard(4096, 4096).unwrap();
        r.write_zeroes(2 * 4096, 4096).unwrap();
        r.read(4096, &mut back).unwrap();
        assert!(back.iter().all(|&b| b == 0));
    }
}
