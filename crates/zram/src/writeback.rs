//! Writeback: moving stored pages out of memory to the backing store, as
//! the kernel's `writeback` attribute does (reading them back is the core
//! store's read path, in `disk`).
//!
//! Owns the writeback path, its settings (budget, batch size,
//! `compressed_writeback`) and request format; may not touch slots but
//! through the core's API, nor recompression or the policy (floor 6).
//!
//! - **Setting up** (`Store::set_backing_dev`): only before the store is
//!   initialised (see the `postprocess` module), else `EBUSY`.
//! - **Choosing pages** ([`WritebackRequest`]): `idle`, `huge`, `huge_idle`
//!   or `incompressible` (a bare word, or `type=`), over the whole disk or
//!   over `page_index=N` / `page_indexes=N-M` ranges. Empty, same-filled
//!   and already written-back slots are never chosen. Chosen slots get
//!   `PP_SLOT` and are taken largest first (the kernel's buckets).
//! - **Writing pages**, `writeback_batch_size` at a time (the kernel's
//!   attribute; 32 by default): a run of adjacent free blocks is reserved
//!   (none free: `ENOSPC`, stop), each page is read (decompressed) into one
//!   aligned buffer under its slot lock, the lock is dropped, and the run
//!   is written with one call (one `pwrite`) by one of two writer threads
//!   (two writes in flight) while this thread reads the next batch into
//!   another buffer; a failed run is retried page by page. Then the writer,
//!   under each slot's lock again,
//!   if the slot still has `PP_SLOT` (nobody read, wrote or freed it
//!   meanwhile) its object is freed: `compr_data_size` loses its length,
//!   `huge_pages` loses a raw page, `pages_stored` stays, and the slot holds
//!   the block with the `WB` flag (keeping its length and `HUGE`, losing
//!   `IDLE`). Otherwise the block is freed and the page stays where it is.
//! - **Compressed writeback** (`compressed_writeback`, the attribute Linux
//!   7.0 adds, named `writeback_compressed` before its release; 0 by
//!   default, set only before the store is initialised, else `EBUSY`): a
//!   compressed page is written as its compressed object, not
//!   decompressed, and a read of it reads the object back and decompresses
//!   it with the compressor (priority) that made it, which the slot keeps.
//!   The kernel's patch writes each object into a block of its own, so it
//!   saves the decompression but not one byte of the backing store;
//!   kernel-compat stores do the same, so that their `bd_stat` is the
//!   kernel's (`Store::set_writeback_one_object_per_block`). zmem
//!   packs instead, to write at least 2x fewer bytes:
//!   a batch fills its run of blocks with objects back to back, an object
//!   that does not fit in the rest of a block running on into the next
//!   block of the run (never past the run: it waits for the next batch);
//!   the slot records first block, byte offset and length
//!   (`WB_PACKED` in `slot`), and each block keeps a count of the objects
//!   living in it, a running-on object counting in both
//!   ([`Blocks::share`]), so that a block is freed (bit cleared, hole
//!   punched) when its last object is overwritten or discarded. A huge
//!   (raw) page still takes a whole block of its own. `writeback_batch_size`
//!   then counts blocks, and `bd_stat` counts blocks, as always: `bd_count`
//!   the blocks in use, `bd_writes` and `bd_reads` the blocks written and
//!   read (a read of a packed page reads its block, and the next if its
//!   object runs on).
//! - **Failures**: a backing store that fails a write leaves the pages of
//!   the block in memory, frees the block, gives the budget back and counts
//!   a failed writeback per page; the other pages are still tried and the
//!   last error is returned, as the kernel does.
//! - **Budget**: with `writeback_limit_enable`, each block written takes
//!   `PAGE_SIZE / 4096` from `writeback_limit` (a page each without
//!   `compressed_writeback`); at 0 writeback stops with `EIO`.
//! - **Reading** a written-back page reads its block under the slot lock
//!   (`bd_reads`); the page stays on the backing store. Overwriting or
//!   discarding it frees the block (a hole is punched), or for a packed
//!   page its share of the block.
//!
//! This module owns the writeback path and its request format; the block
//! bitmap and file are the `backing` module's.

use std::io;
use std::ops::Range;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard};

use zpool::ObjectRead;

use crate::backing::{BackingFile, BackingStore, Blocks, PageRun};
use crate::disk::Disk;
use crate::error::StoreError;
use crate::postprocess::{PostProcess, BUCKET_BYTES};
use crate::slot::{self, SlotContent};
use crate::stats::{BdStat, Counter};

/// Writer threads of one writeback, each with one batch in flight: the
/// backing store sees up to this many writes at once (a queue depth of
/// two; one left the disk idle while each write's completion came back).
const WRITEBACK_WRITERS: usize = 2;

/// Batch buffers of one writeback: one per writer, one being filled and
/// one queued, so that neither writer waits for the decompression.
pub(crate) const WRITEBACK_BUFFERS: usize = WRITEBACK_WRITERS + 2;

/// Bits of a [`bucket_key`] that hold the index (a disk has at most 2^28
/// pages).
const INDEX_MASK: u64 = (1 << 40) - 1;

/// A candidate as one word that sorts as [`by_bucket`](crate::postprocess::by_bucket) orders candidates:
/// the complement of its 64-byte bucket above its index.
fn bucket_key(index: u64, stored: usize) -> u64 {
    let bucket = (stored / BUCKET_BYTES) as u64;
    ((u64::from(u16::MAX) - bucket.min(u64::from(u16::MAX))) << 40) | (index & INDEX_MASK)
}

/// One page of a batch: its slot, the block it goes to (counted from the
/// batch's first) and whether it runs on into the next, and for a packed
/// object its byte offset in that block,
/// and the priority of the compressor that made it.
struct Placed {
    index: u64,
    block: usize,
    /// A packed object that runs on into the next block.
    spans: bool,
    packed: Option<(u32, usize)>,
}

/// One batch of pages on its way to the backing store: the blocks' bytes,
/// the first of the adjacent blocks they go to, how many of them hold
/// pages, and the pages.
struct Batch {
    run: PageRun,
    first: u64,
    blocks: usize,
    pages: Vec<Placed>,
}

/// Writes `job`'s blocks with one call; if that fails, again block by
/// block, so that a bad block costs only its own pages. Returns the blocks
/// (positions in the batch) that could not be written, in order.
fn write_run(dev: &dyn BackingStore, job: &mut Batch, page_size: usize) -> Vec<(usize, io::Error)> {
    let n = job.blocks;
    let all = &job.run.bytes()[..n * page_size];
    let mut failures = Vec::new();
    if let Err(e) = dev.write_blocks(job.first, all, page_size) {
        if n == 1 {
            failures.push((0, e));
        } else {
            for (k, page) in all.chunks_exact(page_size).enumerate() {
                if let Err(e) = dev.write_block(job.first + k as u64, page) {
                    failures.push((k, e));
                }
            }
        }
    }
    failures
}

/// Which pages a writeback takes (the kernel's `*_WRITEBACK` modes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WritebackMode {
    /// Only pages marked idle.
    pub idle: bool,
    /// Only pages stored uncompressed.
    pub huge: bool,
    /// Only pages recompression marked incompressible.
    pub incompressible: bool,
}

impl std::str::FromStr for WritebackMode {
    type Err = StoreError;

    fn from_str(s: &str) -> Result<WritebackMode, StoreError> {
        WritebackMode::parse(s)
    }
}

impl WritebackMode {
    /// The mode a `writeback` type names: `idle`, `huge`, `huge_idle` or
    /// `incompressible`; `EINVAL` for anything else.
    pub fn parse(word: &str) -> Result<WritebackMode, StoreError> {
        let m = |idle, huge, incompressible| WritebackMode {
            idle,
            huge,
            incompressible,
        };
        Ok(match word {
            "idle" => m(true, false, false),
            "huge" => m(false, true, false),
            "huge_idle" => m(true, true, false),
            "incompressible" => m(false, false, true),
            other => {
                return Err(StoreError::os(
                    libc::EINVAL,
                    format!(
                        "writeback: unknown type {other:?} (idle, huge, huge_idle, incompressible)"
                    ),
                ))
            }
        })
    }
}

/// A parsed `writeback` command.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WritebackRequest {
    /// Which pages.
    pub mode: WritebackMode,
    /// Page ranges to look at; empty: the whole disk.
    pub ranges: Vec<Range<u64>>,
}

fn number(key: &str, v: &str) -> Result<u64, StoreError> {
    v.parse()
        .map_err(|_| StoreError::os(libc::EINVAL, format!("{key}: {v:?} is not a number")))
}

impl WritebackRequest {
    /// Parses what is written to `writeback`: `idle`, `huge`, `huge_idle`,
    /// `incompressible` (bare, or as `type=...`), `page_index=N` and
    /// `page_indexes=N-M` (several allowed) for a disk of `pages` pages.
    /// Errors are the kernel's: `EINVAL` for an unknown type, a valueless
    /// word that is not a type, or a malformed number; `ERANGE` for an index
    /// past the disk or a range whose end is before its start. Other
    /// `key=value` words are ignored, as the kernel ignores them.
    ///
    /// A type and ranges combine in any order (the kernel's parser stops at
    /// the type, so there a range must come first).
    pub fn parse(text: &str, pages: u64) -> Result<WritebackRequest, StoreError> {
        let mut req = WritebackRequest::default();
        let range_err = |what: String| StoreError::os(libc::ERANGE, what);
        for word in text.split_whitespace() {
            match word.split_once('=') {
                None | Some((_, "")) => {
                    req.mode = WritebackMode::parse(word.trim_end_matches('='))?;
                }
                Some(("type", v)) => req.mode = WritebackMode::parse(v)?,
                Some(("page_index", v)) => {
                    let n = number("page_index", v)?;
                    if n >= pages {
                        return Err(range_err(format!(
                            "page_index={n} is past the {pages}-page disk"
                        )));
                    }
                    req.ranges.push(n..n + 1);
                }
                Some(("page_indexes", v)) => {
                    let (lo, hi) = v.split_once('-').ok_or_else(|| {
                        StoreError::os(libc::EINVAL, format!("page_indexes={v}: not N-M"))
                    })?;
                    let (lo, hi) = (number("page_indexes", lo)?, number("page_indexes", hi)?);
                    if lo >= pages || hi >= pages || lo > hi {
                        return Err(range_err(format!(
                            "page_indexes={lo}-{hi}: not a range of the {pages}-page disk"
                        )));
                    }
                    req.ranges.push(lo..hi + 1);
                }
                Some(_) => {}
            }
        }
        Ok(req)
    }
}

/// What one writeback did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WritebackReport {
    /// Pages chosen.
    pub chosen: u64,
    /// Pages now on the backing store.
    pub written: u64,
    /// Pages the backing store failed to take (they stayed in memory).
    pub failed: u64,
}

/// Pages one batched write takes by default (`writeback_batch_size`).
pub const DEFAULT_WRITEBACK_BATCH: usize = 32;

/// The largest `writeback_batch_size` (its buffer is this many pages).
pub const MAX_WRITEBACK_BATCH: usize = 256;

/// The writeback budget (`writeback_limit_enable`, `writeback_limit`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WritebackLimit {
    /// Whether the budget applies.
    pub enabled: bool,
    /// 4 KiB units writeback may still write.
    pub limit: u64,
}

/// The writeback settings of one store: its budget, batch size and
/// `compressed_writeback`. The budget's mutex is a leaf, taken with no
/// slot lock held.
#[derive(Default)]
pub(crate) struct Writeback {
    limit: Mutex<WritebackLimit>,
    /// `writeback_batch_size` (0: [`DEFAULT_WRITEBACK_BATCH`]).
    batch: AtomicUsize,
    /// `compressed_writeback`: write compressed objects, packed, instead of
    /// decompressed pages.
    compressed: AtomicBool,
    /// With `compressed_writeback`, each object in a block of its own, as
    /// Linux 7.x lays them out (kernel-compat stores), instead of packed.
    one_object_per_block: AtomicBool,
}

impl Writeback {
    /// The writeback budget, to read or change.
    fn limit(&self) -> MutexGuard<'_, WritebackLimit> {
        // Two plain words: a panic cannot leave them half-updated.
        self.limit.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sets any [`BackingStore`] as the backing store (its blocks are
    /// pages of the store). `EBUSY` once the store is initialised.
    pub(crate) fn set_backing_store(
        &self,
        disk: &Disk,
        dev: Arc<dyn BackingStore>,
    ) -> Result<(), StoreError> {
        disk.refuse_if_initialised("backing_dev")?;
        disk.set_backing(Some(Arc::new(Blocks::new(dev))));
        Ok(())
    }

    /// Opens the file or block device at `path` as the backing store.
    pub(crate) fn set_backing_dev(&self, disk: &Disk, path: &Path) -> Result<(), StoreError> {
        disk.refuse_if_initialised("backing_dev")?;
        let file = BackingFile::open(path, disk.page_size())?;
        self.set_backing_store(disk, Arc::new(file))
    }

    /// What `cat backing_dev` shows: the path, or `none`.
    pub(crate) fn backing_dev(&self, disk: &Disk) -> String {
        disk.backing()
            .map_or_else(|| "none".to_string(), |b| b.dev().describe())
    }

    /// Sets `compressed_writeback`; `EBUSY` once the store is initialised.
    pub(crate) fn set_compressed(&self, disk: &Disk, on: bool) -> Result<(), StoreError> {
        disk.refuse_if_initialised("compressed_writeback")?;
        self.compressed.store(on, Ordering::Relaxed);
        Ok(())
    }

    /// Lays compressed objects out one per block, as Linux 7.x does
    /// (`true`), or packed back to back (`false`, the default).
    pub(crate) fn set_one_object_per_block(&self, on: bool) {
        self.one_object_per_block.store(on, Ordering::Relaxed);
    }

    /// `compressed_writeback`.
    pub(crate) fn compressed(&self) -> bool {
        self.compressed.load(Ordering::Relaxed)
    }

    /// `bd_stat` now.
    pub(crate) fn bd_stat(&self, disk: &Disk) -> BdStat {
        let four_k = (disk.page_size() / 4096) as u64;
        let counters = disk.counters();
        BdStat {
            bd_count: disk.backing().map_or(0, |b| b.used()) * four_k,
            bd_reads: counters.get(Counter::BdReads) * four_k,
            bd_writes: counters.get(Counter::BdWrites) * four_k,
            failed_writebacks: counters.get(Counter::FailedWritebacks),
        }
    }

    /// `writeback_limit_enable` and `writeback_limit`.
    pub(crate) fn budget(&self) -> WritebackLimit {
        *self.limit()
    }

    /// Sets `writeback_limit` (4 KiB units, rounded down to whole pages).
    pub(crate) fn set_budget(&self, disk: &Disk, units: u64) {
        let per_page = (disk.page_size() / 4096) as u64;
        self.limit().limit = units - units % per_page;
    }

    /// Sets `writeback_limit_enable`.
    pub(crate) fn set_budget_enabled(&self, enabled: bool) {
        self.limit().enabled = enabled;
    }

    /// Pages a batched write takes (`writeback_batch_size`).
    pub(crate) fn batch(&self) -> usize {
        match self.batch.load(Ordering::Relaxed) {
            0 => DEFAULT_WRITEBACK_BATCH,
            n => n,
        }
    }

    /// Sets `writeback_batch_size` (1 to 256 pages; `EINVAL` otherwise).
    pub(crate) fn set_batch(&self, pages: u64) -> Result<(), StoreError> {
        if !(1..=MAX_WRITEBACK_BATCH as u64).contains(&pages) {
            return Err(StoreError::os(
                libc::EINVAL,
                format!("writeback_batch_size: {pages} is not 1 to {MAX_WRITEBACK_BATCH}"),
            ));
        }
        self.batch.store(pages as usize, Ordering::Relaxed);
        Ok(())
    }

    /// Bytes of the batch buffers a writeback holds while it runs (up to
    /// four of `writeback_batch_size` pages each).
    pub(crate) fn buffer_bytes(&self, disk: &Disk) -> u64 {
        (WRITEBACK_BUFFERS * self.batch() * disk.page_size()) as u64
    }

    /// Writes the pages `req` chooses to the backing store (`echo ... >
    /// writeback`). `ENODEV` without a backing store; `ENOSPC` when it is
    /// full, `EIO` when the budget runs out, or the last write error: pages
    /// written before the error stay written.
    ///
    /// Pages go out in batches of `writeback_batch_size`: a run of adjacent
    /// free blocks is reserved, the pages are read into one aligned buffer
    /// (each under its own slot lock, held only for the copy) and written
    /// with one call by one of two writer threads, while this thread reads
    /// the next batch into another buffer (up to four); then the writer
    /// gives each slot that nobody touched meanwhile its block and frees
    /// its object. A failed batch is written again page by page, so a bad
    /// block keeps only its own page in memory.
    pub(crate) fn run(
        &self,
        disk: &Disk,
        post: &PostProcess,
        req: &WritebackRequest,
    ) -> Result<WritebackReport, StoreError> {
        let backing = disk
            .backing()
            .ok_or_else(|| StoreError::os(libc::ENODEV, "writeback: no backing_dev is set"))?;
        let _running = post.run();
        let mut chosen = self.choose(disk, req);
        chosen.sort_unstable();
        let mut report = WritebackReport {
            chosen: chosen.len() as u64,
            ..WritebackReport::default()
        };
        let batch = self.batch();
        let mut error = None;
        let mut next = 0;
        // Buffers are made as they are needed, up to WRITEBACK_BUFFERS: one
        // being filled (pages decompressed) here while the writers write
        // and finish the others.
        let mut free: Vec<Batch> = Vec::new();
        let mut made = 0;
        let (to_writer, jobs) = mpsc::sync_channel::<Batch>(WRITEBACK_BUFFERS);
        let jobs = Mutex::new(jobs);
        let (written, done) = mpsc::channel::<Batch>();
        std::thread::scope(|scope| {
            let to_writer = to_writer;
            let dev = backing.dev();
            let page_size = disk.page_size();
            let writers: Vec<_> = (0..WRITEBACK_WRITERS)
                .map(|_| {
                    let (jobs, written, backing) = (&jobs, written.clone(), &backing);
                    scope.spawn(move || {
                        let mut report = WritebackReport::default();
                        let mut error = None;
                        loop {
                            // The queue's mutex is a leaf, held only to take a job.
                            let job = jobs.lock().unwrap_or_else(|p| p.into_inner()).recv();
                            let Ok(mut job) = job else { break };
                            let failures = write_run(dev, &mut job, page_size);
                            self.finish_batch(
                                disk,
                                backing,
                                &job,
                                failures,
                                &mut report,
                                &mut error,
                            );
                            if written.send(job).is_err() {
                                break;
                            }
                        }
                        (report, error)
                    })
                })
                .collect();
            drop(written);
            while next < chosen.len() {
                let mut job = match free.pop().or_else(|| done.try_recv().ok()) {
                    Some(job) => job,
                    None if made < WRITEBACK_BUFFERS => {
                        made += 1;
                        Batch {
                            run: PageRun::new(batch * disk.page_size()),
                            first: 0,
                            blocks: 0,
                            pages: Vec::with_capacity(batch),
                        }
                    }
                    None => match done.recv() {
                        Ok(job) => job,
                        // The writers are gone (they cannot be while jobs
                        // are in flight): stop taking pages.
                        Err(_) => break,
                    },
                };
                match self.fill_batch(disk, &backing, &chosen, &mut next, &mut job) {
                    Ok(0) => free.push(job),
                    Ok(_) => {
                        if to_writer.send(job).is_err() {
                            break;
                        }
                    }
                    Err(e) => {
                        error = Some(e);
                        break;
                    }
                }
            }
            drop(to_writer);
            for writer in writers {
                match writer.join() {
                    Ok((r, e)) => {
                        report.written += r.written;
                        report.failed += r.failed;
                        if e.is_some() {
                            error = e;
                        }
                    }
                    Err(panic) => std::panic::resume_unwind(panic),
                }
            }
        });
        // Slots not reached keep their data and lose the mark.
        for &key in &chosen[next..] {
            disk.clear_pp(key & INDEX_MASK);
        }
        match error {
            Some(StoreError::Os { errno, reason }) => Err(StoreError::Os {
                errno,
                reason: format!(
                    "{reason} ({} of {} pages written, {} failed)",
                    report.written, report.chosen, report.failed
                ),
            }),
            Some(e) => Err(e),
            None => Ok(report),
        }
    }

    /// Reserves a run of blocks and reads the next chosen pages into
    /// `job` (pages that changed since they were chosen are passed over
    /// and take no block): each page in a block of its own, or with
    /// `compressed_writeback` each compressed object packed after the
    /// last. Takes the blocks' share of the budget. Returns the pages in
    /// it, or the error that stops the writeback (budget spent, backing
    /// store full).
    fn fill_batch(
        &self,
        disk: &Disk,
        backing: &Blocks,
        chosen: &[u64],
        next: &mut usize,
        job: &mut Batch,
    ) -> Result<usize, StoreError> {
        let per_page = (disk.page_size() / 4096) as u64;
        let budget = {
            let limit = self.limit();
            if limit.enabled && limit.limit == 0 {
                return Err(StoreError::os(
                    libc::EIO,
                    "writeback: writeback_limit reached",
                ));
            }
            if limit.enabled {
                (limit.limit / per_page).max(1) as usize
            } else {
                usize::MAX
            }
        };
        let pack = self.compressed();
        let own_block = self.one_object_per_block.load(Ordering::Relaxed);
        // Each page opens at most one block (a packed object runs on into
        // one more at most, and all of them are shorter than a block), so
        // the pages left need no more blocks than there are of them.
        let want = (job.run.len() / disk.page_size())
            .min(budget)
            .min(chosen.len() - *next);
        let Some((first, count)) = backing.reserve_run(want) else {
            return Err(StoreError::os(
                libc::ENOSPC,
                format!(
                    "writeback: the backing store {} is full",
                    backing.dev().describe()
                ),
            ));
        };
        job.first = first;
        job.pages.clear();
        let page_size = disk.page_size();
        let bytes = job.run.bytes();
        if pack {
            // Block tails are zeros, not what the buffer held before.
            bytes[..count * page_size].fill(0);
        }
        // Where the next page goes: block and byte in it.
        let (mut block, mut at) = (0usize, 0usize);
        while *next < chosen.len() {
            let index = chosen[*next] & INDEX_MASK;
            let guard = disk.lock(index);
            let object = match guard.content() {
                SlotContent::Compressed { handle, size } if pack => Some((handle, size)),
                _ => None,
            };
            if (object.is_none() || own_block) && at > 0 {
                // A whole page (and, laid out as the kernel's, any object)
                // starts a block of its own.
                (block, at) = (block + 1, 0);
            }
            let need = object.map_or(page_size, |(_, size)| size);
            // An object may run on into the next block of the run.
            if block * page_size + at + need > count * page_size {
                // The run is full: this page starts the next batch.
                break;
            }
            *next += 1;
            let to = block * page_size + at;
            let stored = if !guard.has(slot::PP_SLOT) {
                false
            } else if let Some((handle, size)) = object {
                match ObjectRead::begin(disk.pool(), handle, size) {
                    Ok(obj) => {
                        bytes[to..to + size].copy_from_slice(&obj);
                        true
                    }
                    Err(_) => false,
                }
            } else {
                disk.read_locked(index, &guard, &mut bytes[to..to + page_size])
                    .is_ok()
            };
            if !stored {
                drop(guard);
                disk.clear_pp(index);
                continue;
            }
            let spans = at + need > page_size;
            job.pages.push(Placed {
                index,
                block,
                spans,
                packed: object.map(|_| (at as u32, guard.priority())),
            });
            at += need;
            while at >= page_size {
                (block, at) = (block + 1, at - page_size);
            }
        }
        let used = job
            .pages
            .last()
            .map_or(0, |p| p.block + 1 + usize::from(p.spans));
        job.blocks = used;
        for b in used..count {
            backing.release(first + b as u64);
        }
        // A block holding packed objects is shared by them (an object
        // running on into the next block holds both).
        let mut holders = vec![0u32; used];
        for p in job.pages.iter().filter(|p| p.packed.is_some()) {
            holders[p.block] += 1;
            if p.spans {
                holders[p.block + 1] += 1;
            }
        }
        for (b, &n) in holders.iter().enumerate() {
            if n > 0 {
                backing.share(first + b as u64, n);
            }
        }
        if used > 0 {
            let mut limit = self.limit();
            if limit.enabled {
                limit.limit = limit.limit.saturating_sub(used as u64 * per_page);
            }
        }
        Ok(job.pages.len())
    }

    /// After the writer wrote `job`: each page written goes to its block
    /// if nobody touched its slot meanwhile; the pages of each block that
    /// failed stay in memory, the block freed and its budget given back.
    fn finish_batch(
        &self,
        disk: &Disk,
        backing: &Blocks,
        job: &Batch,
        failures: Vec<(usize, io::Error)>,
        report: &mut WritebackReport,
        error: &mut Option<StoreError>,
    ) {
        let per_page = (disk.page_size() / 4096) as u64;
        let failed_blocks = failures.len() as u64;
        if failed_blocks > 0 {
            let mut limit = self.limit();
            if limit.enabled {
                limit.limit += failed_blocks * per_page;
            }
        }
        disk.counters()
            .add(Counter::BdWrites, job.blocks as u64 - failed_blocks);
        let mut failed = vec![false; job.blocks];
        for (at, e) in failures {
            failed[at] = true;
            let block = job.first + at as u64;
            *error = Some(StoreError::os(
                e.raw_os_error().unwrap_or(libc::EIO),
                format!(
                    "writeback: writing block {block} of {}: {e}",
                    backing.dev().describe()
                ),
            ));
        }
        for page in &job.pages {
            let block = job.first + page.block as u64;
            let release = || {
                backing.release(block);
                if page.spans {
                    backing.release(block + 1);
                }
            };
            if failed[page.block] || (page.spans && failed[page.block + 1]) {
                disk.counters().add(Counter::FailedWritebacks, 1);
                report.failed += 1;
                release();
                disk.clear_pp(page.index);
            } else if self.complete(disk, page, block) {
                report.written += 1;
            } else {
                release();
            }
        }
    }

    /// The slots `req` chooses, marked `PP_SLOT`, each as one word whose
    /// ascending order is the kernel's (see [`by_bucket`](crate::postprocess::by_bucket)): the stored
    /// length's bucket, largest first, above the index (one word a page, so
    /// that a whole disk's list stays small: 2 MiB for 1 GiB of 4 KiB
    /// pages).
    fn choose(&self, disk: &Disk, req: &WritebackRequest) -> Vec<u64> {
        let whole = 0..disk.disk_pages();
        let ranges = if req.ranges.is_empty() {
            std::slice::from_ref(&whole)
        } else {
            &req.ranges[..]
        };
        let page_size = disk.page_size();
        let m = req.mode;
        let mut chosen = Vec::new();
        for range in ranges {
            disk.scan(
                range.clone(),
                |index, guard| {
                    let content = guard.content();
                    if !content.holds_memory()
                        || guard.has(slot::PP_SLOT)
                        || (m.idle && !guard.has(slot::IDLE))
                        || (m.huge && !guard.has(slot::HUGE))
                        || (m.incompressible && !guard.has(slot::INCOMPRESSIBLE))
                    {
                        return None;
                    }
                    guard.update_flags(slot::PP_SLOT, 0);
                    Some(bucket_key(index, content.stored_bytes(page_size)))
                },
                |key| chosen.push(key),
            );
        }
        chosen
    }

    /// Puts `block` in the slot of `page` if nobody touched it since it
    /// was chosen; returns whether it did.
    fn complete(&self, disk: &Disk, page: &Placed, block: u64) -> bool {
        let old = {
            let mut guard = disk.lock(page.index);
            if !guard.has(slot::PP_SLOT) {
                return false;
            }
            let old = guard.content();
            let size = old.stored_bytes(disk.page_size());
            let huge = guard.has(slot::HUGE);
            guard.set(SlotContent::WrittenBack {
                block,
                size,
                huge,
                packed: page.packed.map(|(offset, _)| offset),
            });
            if let Some((_, priority)) = page.packed {
                guard.set_priority(priority);
            }
            old
        };
        disk.free_content(old);
        disk.counters().sub(
            Counter::ComprDataSize,
            old.stored_bytes(disk.page_size()) as u64,
        );
        if old.is_raw() {
            disk.counters().sub(Counter::HugePages, 1);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errno(r: Result<WritebackRequest, StoreError>) -> i32 {
        r.unwrap_err().errno()
    }

    #[test]
    fn bucket_keys_sort_as_the_kernel_takes_candidates() {
        let mut c = vec![(0, 100), (1, 4096), (2, 70), (3, 127), (4, 200), (5, 65536)];
        let mut keys: Vec<u64> = c.iter().map(|&(i, s)| bucket_key(i, s)).collect();
        crate::postprocess::by_bucket(&mut c);
        keys.sort_unstable();
        let by_key: Vec<u64> = keys.iter().map(|k| k & INDEX_MASK).collect();
        let by_pairs: Vec<u64> = c.iter().map(|x| x.0).collect();
        assert_eq!(by_key, by_pairs);
        assert_eq!(by_key, vec![5, 1, 4, 0, 2, 3]);
    }

    #[test]
    fn requests_parse_as_the_kernel_reads_them() {
        let p = |s: &str| WritebackRequest::parse(s, 100).unwrap();
        assert_eq!(
            p("idle").mode,
            WritebackMode {
                idle: true,
                ..Default::default()
            }
        );
        assert_eq!(
            p("type=huge_idle").mode,
            WritebackMode {
                idle: true,
                huge: true,
                incompressible: false
            }
        );
        assert!(p("incompressible").mode.incompressible);
        let r = p("page_index=5 page_indexes=10-12 type=huge");
        assert_eq!(r.ranges, vec![5..6, 10..13]);
        assert!(r.mode.huge);
        assert_eq!(p("").ranges, vec![]);
        assert_eq!(
            p("colour=blue idle"),
            p("idle"),
            "unknown key=value is ignored"
        );
        for (request, want) in [
            ("sleepy", libc::EINVAL),
            ("type=sleepy", libc::EINVAL),
            ("page_index=x", libc::EINVAL),
            ("page_index=100", libc::ERANGE),
            ("page_indexes=5", libc::EINVAL),
            ("page_indexes=9-3", libc::ERANGE),
            ("page_indexes=3-100", libc::ERANGE),
        ] {
            assert_eq!(
                errno(WritebackRequest::parse(request, 100)),
                want,
                "{request}"
            );
        }
    }
}
