//! The backing store a store writes pages back to (the kernel's
//! `backing_dev`), and the bitmap of its blocks.
//!
//! Owns the backing file and its block bitmap; may not touch slots or any
//! module but `error` (floor 1).
//!
//! A backing store is a run of page-sized blocks numbered from 0: a regular
//! file (zmem's addition; the kernel takes only block devices) or a block
//! device, opened read-write (block devices exclusively, as the kernel opens
//! them) and with `O_DIRECT` where the file system allows it, so that pages
//! written back do not come back into memory as page cache. [`Blocks`] keeps
//! which blocks hold a page: one bit per block, the lowest free block taken
//! first, as the kernel's bitmap. A block may also be shared by several
//! compressed objects (`compressed_writeback` packs them): it then has a
//! count of the objects living in it, and is freed when the last goes. A
//! freed block of a file is given back to
//! the file system by punching a hole (`FALLOC_FL_PUNCH_HOLE |
//! FALLOC_FL_KEEP_SIZE`; on a block device the same call discards it).
//!
//! [`BackingStore`] is the block I/O a store needs; [`BackingFile`] is the
//! real one, and tests may give a store another (one that fails, say).
//!
//! This module owns the file and the bitmap. It never looks at a slot: the
//! store decides which page goes to which block and records it in the slot.

use std::collections::HashMap;
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::StoreError;

/// Page-sized block I/O on a backing store.
pub trait BackingStore: Send + Sync + fmt::Debug {
    /// What `backing_dev` shows: the path.
    fn describe(&self) -> String;

    /// Blocks of one page the store holds.
    fn blocks(&self) -> u64;

    /// Writes one page at `block`.
    fn write_block(&self, block: u64, page: &[u8]) -> io::Result<()>;

    /// Writes `pages.len() / page size` whole pages at the adjacent blocks
    /// from `first` (batched writeback). The default writes them one by
    /// one; a real file writes them with one call. An error may leave some
    /// of them written: the caller treats the whole run as failed.
    fn write_blocks(&self, first: u64, pages: &[u8], page_size: usize) -> io::Result<()> {
        for (k, page) in pages.chunks_exact(page_size).enumerate() {
            self.write_block(first + k as u64, page)?;
        }
        Ok(())
    }

    /// Reads one page from `block` into `buf`.
    fn read_block(&self, block: u64, buf: &mut [u8]) -> io::Result<()>;

    /// `block` holds nothing any more: give its space back if the store can
    /// (a hint; failures are ignored).
    fn discard_block(&self, block: u64);

    /// The `count` blocks from `first` hold nothing any more (a hint, as
    /// [`BackingStore::discard_block`]); a real file punches one hole.
    fn discard_blocks(&self, first: u64, count: u64) {
        for block in first..first + count {
            self.discard_block(block);
        }
    }
}

/// A regular file or block device as a backing store.
#[derive(Debug)]
pub struct BackingFile {
    file: File,
    path: PathBuf,
    blocks: u64,
    page_size: usize,
    /// Opened with `O_DIRECT`: buffers and offsets must be page-aligned.
    direct: bool,
}

fn refused(errno: i32, reason: String) -> StoreError {
    StoreError::Os { errno, reason }
}

impl BackingFile {
    /// Opens `path` as a backing store of `page_size`-byte blocks. Fails
    /// with the kernel's errnos: `ENOENT` (and any other open error) as the
    /// open gives it, `EISDIR` for a directory, `ENOTBLK` for anything but a
    /// regular file or block device, `EBUSY` for a block device someone else
    /// holds, `EINVAL` for one smaller than a block.
    pub fn open(path: &Path, page_size: usize) -> Result<BackingFile, StoreError> {
        let shown = path.display();
        let os = |e: io::Error| {
            let errno = e.raw_os_error().unwrap_or(libc::EIO);
            refused(errno, format!("backing_dev {shown}: {e}"))
        };
        let meta = std::fs::metadata(path).map_err(os)?;
        let kind = meta.file_type();
        if kind.is_dir() {
            return Err(refused(
                libc::EISDIR,
                format!("backing_dev {shown}: is a directory, not a file or block device"),
            ));
        }
        let block_dev = kind.is_block_device();
        if !block_dev && !kind.is_file() {
            return Err(refused(
                libc::ENOTBLK,
                format!("backing_dev {shown}: not a regular file or block device"),
            ));
        }
        let open = |direct: bool| {
            let mut flags = if block_dev { libc::O_EXCL } else { 0 };
            if direct {
                flags |= libc::O_DIRECT;
            }
            OpenOptions::new()
                .read(true)
                .write(true)
                .custom_flags(flags)
                .open(path)
        };
        // Some file systems (tmpfs) refuse O_DIRECT: fall back to buffered.
        let (file, direct) = match open(true) {
            Ok(f) => (f, true),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => (open(false).map_err(os)?, false),
            Err(e) => return Err(os(e)),
        };
        let bytes = if block_dev {
            use std::io::Seek;
            (&file).seek(io::SeekFrom::End(0)).map_err(os)?
        } else {
            meta.len()
        };
        let blocks = bytes / page_size as u64;
        if blocks == 0 {
            return Err(refused(
                libc::EINVAL,
                format!(
                    "backing_dev {shown}: {bytes} bytes is smaller than one {page_size}-byte block"
                ),
            ));
        }
        Ok(BackingFile {
            file,
            path: path.to_path_buf(),
            blocks,
            page_size,
            direct,
        })
    }

    fn offset(&self, block: u64) -> u64 {
        block * self.page_size as u64
    }
}

/// A page-aligned buffer of one page, for `O_DIRECT` I/O.
fn aligned(storage: &mut Vec<u8>, page_size: usize) -> &mut [u8] {
    storage.resize(page_size * 2, 0);
    let skip = storage.as_ptr().align_offset(page_size).min(page_size);
    &mut storage[skip..skip + page_size]
}

/// `O_DIRECT` needs buffers aligned to the device's logical block; 4 KiB
/// covers every device.
const DIRECT_ALIGN: usize = 4096;

/// A buffer of whole pages aligned for `O_DIRECT`, kept across the writes
/// of one writeback so that a batch costs no allocation.
pub struct PageRun {
    storage: Vec<u8>,
    skip: usize,
    len: usize,
}

impl PageRun {
    /// A buffer of `bytes` bytes, 4 KiB-aligned.
    pub fn new(bytes: usize) -> PageRun {
        let storage = vec![0u8; bytes + DIRECT_ALIGN];
        let skip = storage
            .as_ptr()
            .align_offset(DIRECT_ALIGN)
            .min(DIRECT_ALIGN);
        PageRun {
            storage,
            skip,
            len: bytes,
        }
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The aligned bytes.
    pub fn bytes(&mut self) -> &mut [u8] {
        &mut self.storage[self.skip..self.skip + self.len]
    }
}

impl BackingStore for BackingFile {
    fn describe(&self) -> String {
        self.path.display().to_string()
    }

    fn blocks(&self) -> u64 {
        self.blocks
    }

    fn write_block(&self, block: u64, page: &[u8]) -> io::Result<()> {
        if self.direct {
            let mut storage = Vec::new();
            let buf = aligned(&mut storage, self.page_size);
            buf.copy_from_slice(page);
            self.file.write_all_at(buf, self.offset(block))
        } else {
            self.file.write_all_at(page, self.offset(block))
        }
    }

    fn write_blocks(&self, first: u64, pages: &[u8], page_size: usize) -> io::Result<()> {
        debug_assert_eq!(page_size, self.page_size);
        let offset = self.offset(first);
        if self.direct && pages.as_ptr().align_offset(DIRECT_ALIGN) != 0 {
            let mut run = PageRun::new(pages.len());
            run.bytes().copy_from_slice(pages);
            self.file.write_all_at(run.bytes(), offset)
        } else {
            // One pwrite for the run (write_all_at repeats it only for a
            // short write).
            self.file.write_all_at(pages, offset)
        }
    }

    fn read_block(&self, block: u64, buf: &mut [u8]) -> io::Result<()> {
        if self.direct {
            let mut storage = Vec::new();
            let bounce = aligned(&mut storage, self.page_size);
            self.file.read_exact_at(bounce, self.offset(block))?;
            buf.copy_from_slice(bounce);
            Ok(())
        } else {
            self.file.read_exact_at(buf, self.offset(block))
        }
    }

    fn discard_block(&self, block: u64) {
        self.discard_blocks(block, 1);
    }

    fn discard_blocks(&self, first: u64, count: u64) {
        let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        // SAFETY: fallocate only reads its integer arguments; the descriptor
        // belongs to `self.file`, open for writing for as long as `self`.
        let rc = unsafe {
            libc::fallocate(
                self.file.as_raw_fd(),
                mode,
                self.offset(first) as libc::off_t,
                (count * self.page_size as u64) as libc::off_t,
            )
        };
        // A hole is a hint: a file system without holes keeps the bytes.
        let _ = rc;
    }
}

/// The blocks of a backing store and which of them hold a page.
#[derive(Debug)]
pub struct Blocks {
    dev: Arc<dyn BackingStore>,
    bitmap: Mutex<Bitmap>,
    /// Blocks in use (`bd_stat`'s `bd_count`).
    used: AtomicU64,
}

#[derive(Debug)]
struct Bitmap {
    words: Vec<u64>,
    blocks: u64,
    /// No word below this one has a free bit.
    first_free_word: usize,
    /// Blocks shared by packed objects, and how many objects live in each
    /// (a block not here holds one page).
    shared: HashMap<u64, u32>,
}

impl Bitmap {
    /// One holder of `block` lets it go; returns whether the block is now
    /// free (its bit cleared).
    fn drop_holder(&mut self, block: u64) -> bool {
        if let Some(n) = self.shared.get_mut(&block) {
            *n -= 1;
            if *n > 0 {
                return false;
            }
            self.shared.remove(&block);
        }
        let w = (block / 64) as usize;
        let bit = 1u64 << (block % 64);
        let Some(word) = self.words.get_mut(w) else {
            debug_assert!(false, "block {block} is past the backing store");
            return false;
        };
        if *word & bit == 0 {
            debug_assert!(false, "block {block} was free");
            return false;
        }
        *word &= !bit;
        self.first_free_word = self.first_free_word.min(w);
        true
    }
}

impl Blocks {
    /// The bitmap for `dev`, every block free.
    pub fn new(dev: Arc<dyn BackingStore>) -> Blocks {
        let blocks = dev.blocks();
        Blocks {
            bitmap: Mutex::new(Bitmap {
                words: vec![0; blocks.div_ceil(64) as usize],
                blocks,
                first_free_word: 0,
                shared: HashMap::new(),
            }),
            dev,
            used: AtomicU64::new(0),
        }
    }

    /// The backing store.
    pub fn dev(&self) -> &dyn BackingStore {
        &*self.dev
    }

    fn bitmap(&self) -> std::sync::MutexGuard<'_, Bitmap> {
        // Bit updates cannot panic halfway.
        self.bitmap.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes the lowest free block, or `None` if every block holds a page.
    pub fn reserve(&self) -> Option<u64> {
        let mut map = self.bitmap();
        let start = map.first_free_word;
        let found = map.words[start..]
            .iter()
            .position(|w| *w != u64::MAX)
            .map(|i| i + start);
        let Some(w) = found else {
            map.first_free_word = map.words.len();
            return None;
        };
        map.first_free_word = w;
        let bit = (!map.words[w]).trailing_zeros() as u64;
        let block = w as u64 * 64 + bit;
        if block >= map.blocks {
            map.first_free_word = map.words.len();
            return None;
        }
        map.words[w] |= 1 << bit;
        self.used.fetch_add(1, Ordering::Relaxed);
        Some(block)
    }

    /// Takes the lowest free block and the free blocks right after it, at
    /// most `most` in all: `(first, count)`, or `None` if every block holds
    /// a page. Batched writeback writes such a run with one call.
    pub fn reserve_run(&self, most: usize) -> Option<(u64, usize)> {
        let first = self.reserve()?;
        let mut map = self.bitmap();
        let mut count = 1;
        while count < most.max(1) {
            let block = first + count as u64;
            if block >= map.blocks {
                break;
            }
            let (w, bit) = ((block / 64) as usize, 1u64 << (block % 64));
            if map.words[w] & bit != 0 {
                break;
            }
            map.words[w] |= bit;
            count += 1;
        }
        drop(map);
        self.used.fetch_add(count as u64 - 1, Ordering::Relaxed);
        Some((first, count))
    }

    /// Makes the reserved `block` shared by `objects` packed objects (at
    /// least 1): it is freed when [`Blocks::release`] has been called once
    /// for each of them.
    pub fn share(&self, block: u64, objects: u32) {
        debug_assert!(objects > 0);
        self.bitmap().shared.insert(block, objects);
    }

    /// Lets one holder of `block` go: a block of one page is freed at once,
    /// a shared block when its last object goes; a freed block gives its
    /// space back (see [`BackingStore::discard_block`]).
    ///
    /// The space is given back before the bitmap mutex is let go: a block
    /// whose bit is clear may be reserved and written at once (by another
    /// writeback thread, say), and a hole punched after that write would
    /// lose its page.
    pub fn release(&self, block: u64) {
        let mut map = self.bitmap();
        if !map.drop_holder(block) {
            return;
        }
        self.used.fetch_sub(1, Ordering::Relaxed);
        self.dev.discard_block(block);
        drop(map);
    }

    /// [`Blocks::release`] for every entry of `blocks` (sorted here; a
    /// shared block appears once per object), giving the space of the
    /// blocks freed back with one [`BackingStore::discard_blocks`] per run
    /// of adjacent blocks (reset frees a whole disk's blocks this way).
    /// As there, the space is given back under the bitmap mutex.
    pub fn release_many(&self, blocks: &mut Vec<u64>) {
        blocks.sort_unstable();
        let mut map = self.bitmap();
        blocks.retain(|&block| map.drop_holder(block));
        self.used.fetch_sub(blocks.len() as u64, Ordering::Relaxed);
        let mut i = 0;
        while i < blocks.len() {
            let mut j = i + 1;
            while j < blocks.len() && blocks[j] == blocks[j - 1] + 1 {
                j += 1;
            }
            self.dev.discard_blocks(blocks[i], (j - i) as u64);
            i = j;
        }
        drop(map);
    }

    /// Blocks holding a page.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file of `len` bytes in this process's directory under the temp
    /// directory, removed on drop.
    struct TempFile(PathBuf);

    impl TempFile {
        fn new(name: &str, len: u64) -> TempFile {
            let dir = std::env::temp_dir().join(format!("zram-backing-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let path = dir.join(name);
            let f = File::create(&path).unwrap();
            f.set_len(len).unwrap();
            TempFile(path)
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    /// The block bitmap of a backing file of `blocks` 4 KiB blocks, and
    /// the file.
    fn blocks_of(name: &str, blocks: u64) -> (TempFile, Blocks) {
        let file = TempFile::new(name, blocks * 4096);
        let dev = Arc::new(BackingFile::open(&file.0, 4096).unwrap());
        (file, Blocks::new(dev))
    }

    #[test]
    fn bitmap_takes_the_lowest_free_block_and_stops_when_full() {
        let file = TempFile::new("bitmap", 70 * 4096 + 100);
        let dev = Arc::new(BackingFile::open(&file.0, 4096).unwrap());
        assert_eq!(dev.blocks(), 70, "a partial block at the end is not used");
        let blocks = Blocks::new(dev);
        let got: Vec<u64> = (0..70).map(|_| blocks.reserve().unwrap()).collect();
        assert_eq!(got, (0..70).collect::<Vec<_>>());
        assert_eq!(blocks.reserve(), None);
        assert_eq!(blocks.used(), 70);
        blocks.release(65);
        blocks.release(3);
        assert_eq!(blocks.reserve(), Some(3));
        assert_eq!(blocks.reserve(), Some(65));
        assert_eq!(blocks.reserve(), None);
        blocks.release_many(&mut vec![9, 2, 8, 64, 7]);
        assert_eq!(blocks.used(), 65);
        let again: Vec<u64> = (0..5).map(|_| blocks.reserve().unwrap()).collect();
        assert_eq!(again, vec![2, 7, 8, 9, 64]);
    }

    #[test]
    fn a_shared_block_is_freed_with_its_last_object() {
        let (_file, blocks) = blocks_of("shared", 4);
        assert_eq!(blocks.reserve_run(2), Some((0, 2)));
        blocks.share(0, 3);
        blocks.release(0);
        blocks.release(0);
        assert_eq!(blocks.used(), 2, "one object still lives in block 0");
        assert_eq!(blocks.reserve(), Some(2));
        blocks.release(0);
        assert_eq!(blocks.used(), 2);
        assert_eq!(blocks.reserve(), Some(0), "freed with its last object");
        blocks.share(0, 2);
        // Reset lists a shared block once per object.
        blocks.release_many(&mut vec![0, 1, 0, 2]);
        assert_eq!(blocks.used(), 0);
    }

    #[test]
    fn runs_take_adjacent_free_blocks() {
        let (_file, blocks) = blocks_of("runs", 10);
        assert_eq!(blocks.reserve_run(4), Some((0, 4)));
        assert_eq!(blocks.reserve_run(3), Some((4, 3)));
        blocks.release(1);
        blocks.release(2);
        blocks.release(5);
        // The lowest free block first, then as many adjacent as are free.
        assert_eq!(blocks.reserve_run(8), Some((1, 2)));
        assert_eq!(blocks.reserve_run(8), Some((5, 1)));
        assert_eq!(blocks.reserve_run(8), Some((7, 3)), "the end stops a run");
        assert_eq!(blocks.reserve_run(8), None);
        assert_eq!(blocks.used(), 10);
    }

    #[test]
    fn a_run_of_blocks_is_written_with_one_call() {
        let file = TempFile::new("run-io", 8 * 4096);
        let dev = BackingFile::open(&file.0, 4096).unwrap();
        let pages: Vec<u8> = (0..3 * 4096)
            .map(|i| (i / 4096 * 50 + i % 7) as u8)
            .collect();
        // Unaligned input (a bounce) and aligned input (written as it is).
        dev.write_blocks(2, &pages, 4096).unwrap();
        let mut run = PageRun::new(3 * 4096);
        run.bytes().copy_from_slice(&pages);
        dev.write_blocks(5, run.bytes(), 4096).unwrap();
        let mut back = vec![0; 4096];
        for (k, block) in [2u64, 3, 4, 5, 6, 7].into_iter().enumerate() {
            dev.read_block(block, &mut back).unwrap();
            assert_eq!(back, pages[(k % 3) * 4096..][..4096], "block {block}");
        }
    }

    #[test]
    fn blocks_round_trip_and_holes_are_punched() {
        let file = TempFile::new("io", 16 * 4096);
        let dev = BackingFile::open(&file.0, 4096).unwrap();
        let page: Vec<u8> = (0..4096).map(|i| (i * 7 % 256) as u8).collect();
        dev.write_block(5, &page).unwrap();
        let mut back = vec![0; 4096];
        dev.read_block(5, &mut back).unwrap();
        assert_eq!(back, page);
        dev.discard_block(5);
        dev.read_block(5, &mut back).unwrap();
        // A punched hole reads as zeros (every Linux file system that
        // supports holes; the temp dir's does).
        assert!(back.iter().all(|b| *b == 0));
        assert_eq!(std::fs::metadata(&file.0).unwrap().len(), 16 * 4096);
    }

    #[test]
    fn bad_paths_get_the_kernels_errnos() {
        let errno = |p: &Path| match BackingFile::open(p, 4096) {
            Err(StoreError::Os { errno, reason }) => {
                assert!(!reason.contains('\n'), "{reason}");
                errno
            }
            other => panic!("{other:?}"),
        };
        assert_eq!(errno(Path::new("/nonexistent/zmem-backing")), libc::ENOENT);
        assert_eq!(errno(&std::env::temp_dir()), libc::EISDIR);
        assert_eq!(errno(Path::new("/dev/null")), libc::ENOTBLK);
        let small = TempFile::new("small", 100);
        assert_eq!(errno(&small.0), libc::EINVAL);
    }
}
