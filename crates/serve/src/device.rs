//! A zram [`Store`] as an NBD block device.
//!
//! This module owns the adapter between the two crates: [`PageDevice`]
//! implements [`nbd::BlockDevice`] for a store, one whole page per store
//! call, and [`export_device`] wraps it in [`BlockAligned`] so clients may
//! read and write any byte range.
//!
//! # Requests and pages
//! - `PageDevice` advertises the store's page as its minimum block, so it
//!   only ever sees whole, aligned pages: a READ or WRITE is a loop of
//!   `read_page` / `write_page` straight into or out of the request buffer
//!   (no copy, no bounce page).
//! - Anything smaller or unaligned is cut by `BlockAligned` into a head
//!   page, an aligned middle and a tail page; head and tail are done by
//!   read-modify-write of the whole page. `BlockAligned` holds a lock stripe
//!   exclusively per partly written page from the read to the write-back,
//!   and shared for pages written whole, so two concurrent partial writes to
//!   one page (or a partial write racing a whole-page write) never lose each
//!   other's bytes. The store's own per-slot lock only makes each page call
//!   atomic, which is not enough for read-modify-write on its own.
//! - TRIM frees the whole pages of the range (a partial page keeps its data:
//!   trim is a hint). WRITE_ZEROES frees whole pages (the store's empty slot
//!   reads as zeros) or, with NO_HOLE, stores them as same-filled zero pages
//!   (no allocator memory either, but counted in `same_pages`, as a written
//!   zero page is in zram); partial pages are zeroed by read-modify-write.
//!   Both are fast, so FAST_ZERO is advertised; a fast zero touching a
//!   partial page is refused with `ENOTSUP` before anything changes.
//! - BLOCK_STATUS: empty slots are holes that read as zeros, same-filled
//!   zero pages read as zeros but are allocated, everything else is data.
//! - FLUSH and FUA do nothing: the store is RAM, every completed write is
//!   as durable as it will ever be. They are advertised so that clients
//!   which want them (qemu, filesystems through nbdfuse) can use them.
//! - Every connection sees the same store, and a completed write is visible
//!   to all of them at once, so CAN_MULTI_CONN is advertised.
//!
//! # Errors
//! A failed page call ends the request with the first error; pages before
//! it in the same request are written (the protocol leaves the range's
//! contents unspecified after a failed write), nothing outside the range
//! changes. A full `mem_limit` and an allocator out of memory both answer
//! `ENOSPC`, as a thin-provisioned disk that is full does (the protocol asks
//! servers to avoid `ENOMEM`); a page that does not decompress answers
//! `EIO`.

use std::sync::Arc;

use nbd::{BlockAligned, BlockDevice, BlockSize, DeviceError, DeviceResult, Errno, Extent};
use zram::{SlotState, Store, StoreError};

use crate::page_range::{PageError, PageRange};

/// Largest READ or WRITE payload advertised (the server may cap it lower).
pub(crate) const MAX_REQUEST: u32 = 32 * 1024 * 1024;

/// Most extents one BLOCK_STATUS answer carries (the server sends at most
/// this many descriptors anyway).
const MAX_EXTENTS: usize = 4096;

/// The errno of a store error for an NBD reply: the store's own mapping
/// for block requests ([`StoreError::block_errno`]), which the ublk path
/// uses too.
pub(crate) fn store_errno(e: &StoreError) -> Errno {
    Errno::from_number(e.block_errno()).unwrap_or(Errno::EIO)
}

/// The NBD error for a store error.
pub fn nbd_error(e: &StoreError) -> DeviceError {
    DeviceError::new(store_errno(e), e.to_string())
}

/// A store seen as a block device of whole pages.
pub struct PageDevice {
    range: PageRange,
    page: u64,
    zero_page: Box<[u8]>,
}

/// The NBD error for a failed page request.
fn page_error(e: PageError) -> DeviceError {
    match e {
        PageError::Range(why) => DeviceError::invalid(why),
        PageError::Store(e) => nbd_error(&e),
    }
}

impl PageDevice {
    /// The device over `store`.
    pub fn new(store: Arc<Store>) -> PageDevice {
        let range = PageRange::new(store);
        let page = range.page();
        PageDevice {
            range,
            page: page as u64,
            zero_page: vec![0u8; page].into_boxed_slice(),
        }
    }

    /// The store.
    pub fn store(&self) -> &Arc<Store> {
        self.range.store()
    }

    /// `(first page, page count)` of an aligned range; the server and
    /// `BlockAligned` only pass aligned ranges, anything else is a bug and
    /// is refused rather than rounded.
    fn pages(&self, offset: u64, len: u64) -> DeviceResult<(u64, u64)> {
        self.range.pages(offset, len).map_err(page_error)
    }
}

impl BlockDevice for PageDevice {
    fn size(&self) -> u64 {
        self.store().disk_size()
    }

    fn block_size(&self) -> BlockSize {
        let page = self.page as u32;
        BlockSize {
            minimum: page,
            preferred: page,
            maximum: MAX_REQUEST - MAX_REQUEST % page,
        }
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> DeviceResult<()> {
        self.range.read(offset, buf).map_err(page_error)
    }

    fn write_at(&self, offset: u64, data: &[u8], _fua: bool) -> DeviceResult<()> {
        self.range.write(offset, data).map_err(page_error)
    }

    fn flush(&self) -> DeviceResult<()> {
        Ok(())
    }

    fn trim(&self, offset: u64, len: u64) -> DeviceResult<()> {
        self.range.discard(offset, len).map_err(page_error)
    }

    fn write_zeroes(&self, offset: u64, len: u64, may_trim: bool, _fast: bool) -> DeviceResult<()> {
        if may_trim {
            return self.range.write_zeroes(offset, len).map_err(page_error);
        }
        let (first, count) = self.pages(offset, len)?;
        for index in first..first + count {
            self.store()
                .write_page(index, &self.zero_page)
                .map_err(|e| nbd_error(&e))?;
        }
        Ok(())
    }

    fn block_status(&self, offset: u64, len: u64) -> DeviceResult<Vec<Extent>> {
        let (first, count) = self.pages(offset, len)?;
        let mut out: Vec<Extent> = Vec::new();
        for index in first..first + count {
            let info = self.store().slot_info(index).map_err(|e| nbd_error(&e))?;
            let flags = match info.state {
                SlotState::Empty => Extent::HOLE | Extent::ZERO,
                SlotState::Same(0) => Extent::ZERO,
                _ => 0,
            };
            let full = out.len() == MAX_EXTENTS;
            match out.last_mut() {
                Some(e) if e.flags == flags => e.length += self.page,
                _ if full => break,
                _ => out.push(Extent {
                    length: self.page,
                    flags,
                }),
            }
        }
        Ok(out)
    }

    fn can_trim(&self) -> bool {
        true
    }

    fn can_zero(&self) -> bool {
        true
    }

    fn can_fast_zero(&self) -> bool {
        true
    }

    fn can_flush(&self) -> bool {
        true
    }

    fn can_fua(&self) -> bool {
        true
    }

    fn can_multi_conn(&self) -> bool {
        true
    }
}

/// The device to export for `store`: any byte range, read-modify-write for
/// partial pages.
pub fn export_device(store: Arc<Store>) -> BlockAligned<PageDevice> {
    // A block above 4 KiB (a compression unit) is the preferred size; the
    // minimum is the sector, 512 bytes, not a byte: a smaller write would
    // recompress a whole unit.
    let large = store.page_size() > 4096;
    let dev = BlockAligned::new(PageDevice::new(store));
    if large {
        dev.with_advertised_minimum(512)
    } else {
        dev
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(page_size: usize, pages: u64) -> Arc<Store> {
        let opts = zalloc::AllocOptions {
            page_size,
            ..zalloc::AllocOptions::default()
        };
        let pool = zalloc::open("zsmalloc", &opts).unwrap();
        let comp = zcomp::Compressor::parse("lz4", "").unwrap();
        Arc::new(Store::new(pool, comp, pages).unwrap())
    }

    /// A store of `pages` blocks of `unit` bytes over 4 KiB pages.
    fn unit_store(unit: usize, pages: u64) -> Arc<Store> {
        let opts = zalloc::AllocOptions {
            unit: Some(unit),
            ..zalloc::AllocOptions::default()
        };
        let pool = zalloc::open("zsmalloc", &opts).unwrap();
        let comp = zcomp::Compressor::parse("lz4", "").unwrap();
        Arc::new(Store::with_block_size(pool, comp, pages, unit).unwrap())
    }

    fn text(len: usize, salt: u8) -> Vec<u8> {
        (0..len)
            .map(|i| b"the quick brown fox "[i % 20] ^ (salt & (i as u8 >> 5)))
            .collect()
    }

    #[test]
    fn unaligned_io_matches_a_model() {
        for (page, unit) in [(4096usize, false), (16384, false), (65536, true)] {
            // The last is a 64 KiB compression unit on 4 KiB pages.
            let dev = export_device(if unit {
                unit_store(page, 16)
            } else {
                store(page, 16)
            });
            let size = dev.size() as usize;
            assert_eq!(size, 16 * page);
            // A block above 4 KiB is preferred, with the sector as minimum;
            // smaller requests are still served (read-modify-write).
            let want = if page > 4096 { 512 } else { 1 };
            assert_eq!(dev.block_size().minimum, want);
            assert_eq!(dev.block_size().preferred, page as u32);
            let mut model = vec![0u8; size];
            let mut seed = 7u64;
            let mut next = || {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (seed >> 33) as usize
            };
            for round in 0..400 {
                let off = next() % (size - 1);
                let len = 1 + next() % (size - off).min(3 * page);
                match round % 4 {
                    0 | 1 => {
                        let data = text(len, round as u8);
                        dev.write_at(off as u64, &data, false).unwrap();
                        model[off..off + len].copy_from_slice(&data);
                    }
                    2 => {
                        let trim = round % 8 == 2;
                        dev.write_zeroes(off as u64, len as u64, trim, false)
                            .unwrap();
                        model[off..off + len].fill(0);
                    }
                    _ => {
                        let mut buf = vec![0u8; len];
                        dev.read_at(off as u64, &mut buf).unwrap();
                        assert!(buf == model[off..off + len], "page {page} round {round}");
                    }
                }
            }
            let mut all = vec![0u8; size];
            dev.read_at(0, &mut all).unwrap();
            assert!(all == model);
        }
    }

    #[test]
    fn trim_and_zero_free_pages_and_status_shows_holes() {
        let s = store(4096, 8);
        let dev = export_device(s.clone());
        dev.write_at(0, &text(8 * 4096, 1), false).unwrap();
        assert_eq!(s.mm_stat().orig_data_size, 8 * 4096);
        // A trim over pages 1..3 plus a bit of page 0 and 3: only 1 and 2 go.
        dev.trim(4000, 8192 + 200).unwrap();
        assert_eq!(s.mm_stat().orig_data_size, 6 * 4096);
        // Zero with NO_HOLE: stored as same-filled zero pages.
        dev.write_zeroes(5 * 4096, 4096, false, true).unwrap();
        assert_eq!(s.mm_stat().same_pages, 1);
        // A fast zero on a partial page is refused and changes nothing.
        let e = dev.write_zeroes(10, 100, true, true).unwrap_err();
        assert_eq!(e.errno(), Errno::EOPNOTSUPP);
        let ext = dev.block_status(0, 8 * 4096).unwrap();
        let flags: Vec<(u64, u32)> = ext.iter().map(|e| (e.length, e.flags)).collect();
        assert_eq!(
            flags,
            vec![
                (4096, 0),
                (8192, Extent::HOLE | Extent::ZERO),
                (8192, 0),
                (4096, Extent::ZERO),
                (8192, 0)
            ]
        );
        let mut back = vec![1u8; 4096 * 8];
        dev.read_at(0, &mut back).unwrap();
        assert!(back[4096..3 * 4096].iter().all(|&b| b == 0));
        assert!(back[5 * 4096..6 * 4096].iter().all(|&b| b == 0));
        assert_eq!(back[..4000], text(8 * 4096, 1)[..4000]);
    }

    #[test]
    fn mem_limit_answers_enospc_and_keeps_other_pages() {
        let s = store(4096, 4096);
        let dev = export_device(s.clone());
        let first = text(4096, 3);
        dev.write_at(0, &first, false).unwrap();
        s.set_mem_limit(s.mm_stat().mem_used_total.max(4096));
        // Incompressible pages soon pass the limit.
        let noise = testkit::noise(1 << 20, 1);
        let e = dev.write_at(4096, &noise, false).unwrap_err();
        assert_eq!(e.errno(), Errno::ENOSPC);
        assert!(s.io_stat().failed_writes >= 1);
        let mut back = vec![0u8; 4096];
        dev.read_at(0, &mut back).unwrap();
        assert_eq!(back, first);
    }

    #[test]
    fn concurrent_partial_writes_to_one_page_keep_every_byte() {
        let dev = Arc::new(export_device(store(4096, 2)));
        std::thread::scope(|sc| {
            for t in 0..4u8 {
                let dev = dev.clone();
                sc.spawn(move || {
                    // Thread t owns bytes i with i % 4 == t of both pages.
                    for round in 0..300u64 {
                        let i = (round * 37 % 2048) * 4 + t as u64;
                        dev.write_at(i, &[t + 1], false).unwrap();
                    }
                });
            }
        });
        let mut all = vec![0u8; 8192];
        dev.read_at(0, &mut all).unwrap();
        for (i, &b) in all.iter().enumerate() {
            assert!(b == 0 || b as usize == i % 4 + 1, "byte {i} = {b}");
        }
        // Every byte written is there.
        for t in 0..4u64 {
            for round in 0..300u64 {
                let i = (round * 37 % 2048) * 4 + t;
                assert_eq!(all[i as usize], t as u8 + 1);
            }
        }
    }
}
