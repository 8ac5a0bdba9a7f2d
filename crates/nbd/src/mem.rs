//! `MemDevice`: a sparse in-memory block device, the reference backend.
//!
//! This module owns a simple device used by the tests and as the model other
//! backends are compared with: the byte range is cut into fixed pages (4 KiB
//! by default); a page that was never written, or was trimmed or zeroed
//! whole, holds no memory and reads as zeroes. Pages live in `SHARDS` hash
//! maps, each behind its own `RwLock`, chosen by page index, so requests on
//! different pages rarely wait for each other. Every byte range is served
//! directly (no alignment needed), so the device advertises a minimum block
//! size of 1. It knows nothing of the protocol.
//!
//! Locking: each page access takes exactly one shard lock and holds it only
//! while copying that page; no operation holds two shard locks at once. A
//! write is therefore atomic per page, not across pages (the NBD protocol
//! promises no more).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::device::{check_range, BlockDevice, BlockSize, Extent};
use crate::error::{DeviceError, DeviceResult};

/// Number of independently locked page maps.
const SHARDS: usize = 64;
/// Most extents one `block_status` call returns (the protocol lets a server
/// describe less than was asked).
const MAX_EXTENTS: usize = 1024;

type PageMap = HashMap<u64, Box<[u8]>>;

/// A sparse RAM disk: pages are allocated on first write and freed by trim,
/// by write-zeroes, or by a whole-page write of zeroes.
pub struct MemDevice {
    size: u64,
    page_shift: u32,
    shards: Box<[RwLock<PageMap>]>,
    allocated: AtomicU64,
    read_only: bool,
}

impl MemDevice {
    /// A writable device of `size` bytes with 4 KiB pages.
    pub fn new(size: u64) -> MemDevice {
        MemDevice::with_page_size(size, 4096)
    }

    /// A writable device of `size` bytes with pages of `page_size` bytes.
    ///
    /// # Panics
    /// If `page_size` is not a power of two from 512 to 1 MiB (a programming
    /// error, not something a client can cause).
    pub fn with_page_size(size: u64, page_size: u32) -> MemDevice {
        assert!(
            page_size.is_power_of_two() && (512..=1 << 20).contains(&page_size),
            "page size {page_size} must be a power of two from 512 to 1 MiB"
        );
        MemDevice {
            size,
            page_shift: page_size.trailing_zeros(),
            shards: (0..SHARDS).map(|_| RwLock::new(HashMap::new())).collect(),
            allocated: AtomicU64::new(0),
            read_only: false,
        }
    }

    /// The same device, refusing writes (`NBD_FLAG_READ_ONLY`).
    pub fn into_read_only(mut self) -> MemDevice {
        self.read_only = true;
        self
    }

    /// Page size in bytes.
    pub fn page_size(&self) -> u32 {
        1 << self.page_shift
    }

    /// Number of pages holding memory.
    pub fn allocated_pages(&self) -> u64 {
        self.allocated.load(Ordering::Relaxed)
    }

    fn shard(&self, page: u64) -> &RwLock<PageMap> {
        &self.shards[(page % SHARDS as u64) as usize]
    }

    fn read_shard(&self, page: u64) -> RwLockReadGuard<'_, PageMap> {
        // A panic while a lock was held cannot leave a page half-updated in a
        // way that matters more than a torn write, so poisoning is ignored.
        self.shard(page).read().unwrap_or_else(|e| e.into_inner())
    }

    fn write_shard(&self, page: u64) -> RwLockWriteGuard<'_, PageMap> {
        self.shard(page).write().unwrap_or_else(|e| e.into_inner())
    }

    /// Calls `f(page, offset_in_page, start, len)` for each page piece of
    /// `offset..offset + len`, where `start` counts from `offset`.
    fn for_each_piece(
        &self,
        offset: u64,
        len: u64,
        mut f: impl FnMut(u64, usize, usize, usize) -> DeviceResult<()>,
    ) -> DeviceResult<()> {
        let page_size = 1u64 << self.page_shift;
        let mut done = 0u64;
        while done < len {
            let pos = offset + done;
            let page = pos >> self.page_shift;
            let in_page = pos & (page_size - 1);
            let n = (page_size - in_page).min(len - done);
            f(page, in_page as usize, done as usize, n as usize)?;
            done += n;
        }
        Ok(())
    }

    fn remove_page(&self, map: &mut PageMap, page: u64) {
        if map.remove(&page).is_some() {
            self.allocated.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Zeroes part of a page, or drops the page when the whole page is
    /// covered and `may_free` is set.
    fn zero_piece(&self, page: u64, in_page: usize, n: usize, may_free: bool) {
        let mut map = self.write_shard(page);
        if n == self.page_size() as usize && may_free {
            self.remove_page(&mut map, page);
        } else if let Some(p) = map.get_mut(&page) {
            p[in_page..in_page + n].fill(0);
        }
    }

    fn check_writable(&self, offset: u64, len: u64) -> DeviceResult<()> {
        if self.read_only {
            return Err(DeviceError::read_only());
        }
        check_range(self.size, offset, len)
    }
}

impl BlockDevice for MemDevice {
    fn size(&self) -> u64 {
        self.size
    }

    fn block_size(&self) -> BlockSize {
        BlockSize {
            minimum: 1,
            preferred: self.page_size().max(512),
            maximum: BlockSize::DEFAULT.maximum,
        }
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> DeviceResult<()> {
        check_range(self.size, offset, buf.len() as u64)?;
        self.for_each_piece(offset, buf.len() as u64, |page, in_page, start, n| {
            let dst = &mut buf[start..start + n];
            match self.read_shard(page).get(&page) {
                Some(p) => dst.copy_from_slice(&p[in_page..in_page + n]),
                None => dst.fill(0),
            }
            Ok(())
        })
    }

    fn write_at(&self, offset: u64, data: &[u8], _fua: bool) -> DeviceResult<()> {
        self.check_writable(offset, data.len() as u64)?;
        let page_size = self.page_size() as usize;
        self.for_each_piece(offset, data.len() as u64, |page, in_page, start, n| {
            let src = &data[start..start + n];
            let mut map = self.write_shard(page);
            if n == page_size && src.iter().all(|&b| b == 0) {
                self.remove_page(&mut map, page);
                return Ok(());
            }
            let p = map.entry(page).or_insert_with(|| {
                self.allocated.fetch_add(1, Ordering::Relaxed);
                vec![0u8; page_size].into_boxed_slice()
            });
            p[in_page..in_page + n].copy_from_slice(src);
            Ok(())
        })
    }

    fn flush(&self) -> DeviceResult<()> {
        Ok(())
    }

    /// Frees whole pages and zeroes the covered part of partial pages, so a
    /// trimmed range always reads back as zeroes.
    fn trim(&self, offset: u64, len: u64) -> DeviceResult<()> {
        self.check_writable(offset, len)?;
        self.for_each_piece(offset, len, |page, in_page, _, n| {
            self.zero_piece(page, in_page, n, true);
            Ok(())
        })
    }

    /// Always fast. With `may_trim` whole pages are freed; without it
    /// (`NBD_CMD_FLAG_NO_HOLE`) allocated pages stay allocated and are
    /// zeroed in place. A page that is not allocated is never allocated just
    /// to hold zeroes.
    fn write_zeroes(&self, offset: u64, len: u64, may_trim: bool, _fast: bool) -> DeviceResult<()> {
        self.check_writable(offset, len)?;
        self.for_each_piece(offset, len, |page, in_page, _, n| {
            self.zero_piece(page, in_page, n, may_trim);
            Ok(())
        })
    }

    fn block_status(&self, offset: u64, len: u64) -> DeviceResult<Vec<Extent>> {
        check_range(self.size, offset, len)?;
        let page_size = 1u64 << self.page_shift;
        let mut extents: Vec<Extent> = Vec::new();
        let mut pos = offset;
        while pos < offset + len {
            let page = pos >> self.page_shift;
            let n = (page_size - (pos & (page_size - 1))).min(offset + len - pos);
            let flags = if self.read_shard(page).contains_key(&page) {
                0
            } else {
                Extent::HOLE | Extent::ZERO
            };
            match extents.last_mut() {
                Some(last) if last.flags == flags => last.length += n,
                _ => {
                    if extents.len() == MAX_EXTENTS {
                        // The protocol lets a server describe less than asked.
                        break;
                    }
                    extents.push(Extent { length: n, flags });
                }
            }
            pos += n;
        }
        Ok(extents)
    }

    fn can_trim(&self) -> bool {
        !self.read_only
    }

    fn can_zero(&self) -> bool {
        !self.read_only
    }

    fn can_fast_zero(&self) -> bool {
        !self.read_only
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

    fn is_read_only(&self) -> bool {
        self.read_only
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparse_read_write_trim() {
        let d = MemDevice::new(1 << 20);
        let mut buf = vec![0xffu8; 10000];
        d.read_at(100, &mut buf).unwrap();
        assert!(buf.iter().all(|&b| b == 0));
        assert_eq!(d.allocated_pages(), 0);

        let data: Vec<u8> = (0..10000u32).map(|i| (i % 251) as u8 + 1).collect();
        d.write_at(4000, &data, false).unwrap();
        assert_eq!(d.allocated_pages(), 4);
        d.read_at(4000, &mut buf).unwrap();
        assert_eq!(buf, data);

        // Trim a range covering page 1 and 2 whole, parts of 0 and 3.
        d.trim(4090, 8200).unwrap();
        assert_eq!(d.allocated_pages(), 2);
        let mut all = vec![0u8; 16384];
        d.read_at(0, &mut all).unwrap();
        assert!(all[4090..12290].iter().all(|&b| b == 0));
        assert_eq!(&all[4000..4090], &data[..90]);
        assert_eq!(&all[12290..14000], &data[8290..]);

        let ext = d.block_status(0, 16384).unwrap();
        assert_eq!(
            ext,
            vec![Extent::data(4096), Extent::hole(8192), Extent::data(4096)]
        );
    }

    #[test]
    fn zero_pages_free_memory() {
        let d = MemDevice::new(1 << 16);
        d.write_at(0, &[7u8; 8192], false).unwrap();
        assert_eq!(d.allocated_pages(), 2);
        d.write_zeroes(0, 4096, false, true).unwrap();
        assert_eq!(d.allocated_pages(), 2, "NO_HOLE keeps the page");
        d.write_zeroes(0, 4096, true, true).unwrap();
        assert_eq!(d.allocated_pages(), 1);
        d.write_at(4096, &[0u8; 4096], false).unwrap();
        assert_eq!(d.allocated_pages(), 0);
    }

    #[test]
    fn bounds_and_read_only() {
        let d = MemDevice::new(4096);
        assert!(d.write_at(4000, &[1u8; 97], false).is_err());
        assert!(d.read_at(u64::MAX, &mut [0u8; 2]).is_err());
        let ro = MemDevice::new(4096).into_read_only();
        assert_eq!(
            ro.write_at(0, &[1], false).unwrap_err().errno(),
            crate::Errno::EPERM
        );
        assert!(!ro.can_trim());
    }
}
