//! Writeback to a backing store and recompression, as zram.rst describes
//! them, against a model of the disk: every page, in memory or on the
//! backing store, reads back byte for byte, and the statistics move as the
//! kernel's do.

mod common;

use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use common::{store, PAGE};
use zram::{
    BackingFile, BackingStore, IdleCutoff, RecompressRequest, SlotState, Store, StoreError,
    WritebackRequest,
};

/// A seeded xorshift generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Page contents by kind: 0 same-filled, 1 text (compresses well), 2 random
/// (stored raw by every compressor), 3 random nibbles (lz4 cannot compress
/// them below huge_class_size; zstd's entropy coder can).
fn page(kind: u64, seed: u64) -> Vec<u8> {
    let mut r = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    match kind % 4 {
        0 => vec![(seed % 251) as u8; PAGE],
        1 => (0..PAGE)
            .map(|i| b"zram writes idle pages back "[(i + seed as usize) % 28])
            .collect(),
        2 => (0..PAGE).map(|_| r.next() as u8).collect(),
        _ => (0..PAGE).map(|_| (r.next() % 16) as u8).collect(),
    }
}

/// A backing file of `blocks` pages in this suite's directory.
fn backing_file(name: &str, blocks: u64) -> PathBuf {
    common::backing_file("wb", name, blocks)
}

fn wb(s: &Store, text: &str) -> Result<zram::WritebackReport, StoreError> {
    s.writeback(&WritebackRequest::parse(text, s.disk_pages()).expect("request"))
}

/// Every page reads back as the model says, and `compr_data_size` is the
/// sum of what the slots hold in memory.
fn check(s: &Store, model: &[Option<Vec<u8>>]) {
    let mut buf = vec![0u8; PAGE];
    let mut stored = 0u64;
    for (i, want) in model.iter().enumerate() {
        s.read_page(i as u64, &mut buf).expect("read");
        match want {
            Some(p) => assert!(buf == *p, "page {i} differs"),
            None => assert!(buf.iter().all(|b| *b == 0), "page {i} not zero"),
        }
        match s.slot_info(i as u64).expect("slot").state {
            SlotState::Compressed(n) => stored += n as u64,
            SlotState::Huge => stored += PAGE as u64,
            SlotState::WrittenBack(_) => {}
            SlotState::Empty | SlotState::Same(_) => {}
        }
    }
    let mm = s.mm_stat();
    assert_eq!(mm.compr_data_size, stored);
    let pages = model.iter().filter(|p| p.is_some()).count() as u64;
    assert_eq!(
        mm.orig_data_size,
        pages * PAGE as u64,
        "written-back pages stay stored"
    );
    assert_eq!(
        s.bd_stat().bd_count,
        blocks_named(s),
        "one block per written-back page, or per block of packed objects"
    );
}

/// Distinct backing-store blocks the slots hold (a packed object reaching
/// past its block holds the next one too).
fn blocks_named(s: &Store) -> u64 {
    let mut blocks = std::collections::BTreeSet::new();
    for j in 0..s.disk_pages() {
        let info = s.slot_info(j).unwrap();
        if let SlotState::WrittenBack(block) = info.state {
            blocks.insert(block);
            if info
                .packed
                .is_some_and(|(at, len)| at as usize + len > PAGE)
            {
                blocks.insert(block + 1);
            }
        }
    }
    blocks.len() as u64
}

#[test]
fn writeback_idle_takes_exactly_the_idle_pages_in_memory() {
    let s = store(64);
    s.set_backing_dev(&backing_file("idle", 64))
        .expect("backing_dev");
    assert_eq!(
        s.backing_dev(),
        backing_file("idle", 64).display().to_string()
    );
    let mut model = vec![None; 64];
    for i in 0..48u64 {
        let p = page(i, i);
        s.write_page(i, &p).unwrap();
        model[i as usize] = Some(p);
    }
    s.mark_idle(IdleCutoff::All);
    // Pages 0..8 are read (no longer idle), 8..12 rewritten.
    let mut buf = vec![0; PAGE];
    for i in 0..8 {
        s.read_page(i, &mut buf).unwrap();
    }
    for i in 8..12u64 {
        let p = page(1, 100 + i);
        s.write_page(i, &p).unwrap();
        model[i as usize] = Some(p);
    }
    let before = s.mm_stat();
    let expect: Vec<u64> = (12..48).filter(|i| i % 4 != 0).collect();
    let huge: Vec<bool> = (0..48)
        .map(|i| s.slot_info(i).unwrap().state == SlotState::Huge)
        .collect();
    let huge_idle = expect.iter().filter(|i| huge[**i as usize]).count() as u64;
    assert!(huge_idle > 0);
    let report = wb(&s, "idle").unwrap();
    assert_eq!(report.written, expect.len() as u64);
    for i in 0..48 {
        let wb = matches!(s.slot_info(i).unwrap().state, SlotState::WrittenBack(_));
        assert_eq!(wb, expect.contains(&i), "page {i}");
        if wb {
            let info = s.slot_info(i).unwrap();
            assert!(!info.idle, "WB slots are never idle");
            assert_eq!(
                info.huge, huge[i as usize],
                "the HUGE flag stays on page {i}"
            );
        }
    }
    let after = s.mm_stat();
    assert_eq!(after.orig_data_size, before.orig_data_size);
    assert_eq!(after.huge_pages, before.huge_pages - huge_idle);
    assert_eq!(after.huge_pages_since, before.huge_pages_since);
    assert!(after.mem_used_total < before.mem_used_total);
    let bd = s.bd_stat();
    assert_eq!(
        (bd.bd_count, bd.bd_writes, bd.bd_reads),
        (expect.len() as u64, expect.len() as u64, 0)
    );
    check(&s, &model);
    assert_eq!(s.bd_stat().bd_reads, expect.len() as u64);
    // A second writeback finds nothing: the pages were read, so not idle,
    // and written-back pages are never chosen again.
    let in_memory = (0..64)
        .filter(|i| {
            matches!(
                s.slot_info(*i).unwrap().state,
                SlotState::Compressed(_) | SlotState::Huge
            )
        })
        .count() as u64;
    assert_eq!(in_memory, 10, "pages 1-3, 5-7 and 8-11");
    assert_eq!(
        s.mark_idle(IdleCutoff::All),
        in_memory,
        "WB and same-filled slots are not marked"
    );
    let again = wb(&s, "idle").unwrap();
    assert_eq!(again.written, in_memory);
    // Overwrite and discard free blocks.
    let used = s.bd_stat().bd_count;
    s.write_page(13, &page(1, 7)).unwrap();
    model[13] = Some(page(1, 7));
    s.discard(14, 1).unwrap();
    model[14] = None;
    assert_eq!(s.bd_stat().bd_count, used - 2);
    check(&s, &model);
    s.reset();
    assert_eq!(s.bd_stat(), zram::BdStat::default());
    assert_eq!(s.mm_stat().orig_data_size, 0);
}

#[test]
fn huge_page_indexes_and_incompressible_choose_their_pages() {
    let s = store(32);
    s.set_backing_dev(&backing_file("modes", 32)).unwrap();
    s.set_recomp_algorithm("algo=zstd priority=1").unwrap();
    let mut model = vec![None; 32];
    for i in 0..32u64 {
        let p = page(i, i);
        s.write_page(i, &p).unwrap();
        model[i as usize] = Some(p);
    }
    let r = wb(&s, "page_indexes=0-3 page_index=9").unwrap();
    assert_eq!(r.written, 4, "pages 1, 2, 3 and 9; page 0 is same-filled");
    let huge = (0..32)
        .filter(|i| s.slot_info(*i).unwrap().state == SlotState::Huge)
        .count() as u64;
    assert!(huge >= 7, "at least the random pages 6, 10, ..., 30");
    let r = wb(&s, "type=huge").unwrap();
    assert_eq!(r.written, huge);
    assert!((0..32).all(|i| s.slot_info(i).unwrap().state != SlotState::Huge));
    // zstd cannot shrink random pages: with zstd as the last priority they
    // become INCOMPRESSIBLE; only those go with `incompressible`.
    s.write_page(2, &page(2, 99)).unwrap();
    model[2] = Some(page(2, 99));
    let rc = s
        .recompress(&RecompressRequest::parse("type=huge").unwrap())
        .unwrap();
    assert_eq!((rc.chosen, rc.incompressible), (1, 1));
    assert!(s.slot_info(2).unwrap().incompressible);
    let r = wb(&s, "incompressible").unwrap();
    assert_eq!(r.written, 1);
    check(&s, &model);
}

#[test]
fn writeback_limit_stops_at_the_budget() {
    let s = store(32);
    s.set_backing_dev(&backing_file("limit", 32)).unwrap();
    for i in 0..20u64 {
        s.write_page(i, &page(1, i)).unwrap();
    }
    s.set_writeback_limit_enable(true);
    s.set_writeback_limit(5);
    s.mark_idle(IdleCutoff::All);
    let e = wb(&s, "idle").unwrap_err();
    assert_eq!(e.errno(), libc::EIO, "{e}");
    assert_eq!(s.bd_stat().bd_writes, 5);
    assert_eq!(s.writeback_limit().limit, 0);
    s.set_writeback_limit(3);
    s.mark_idle(IdleCutoff::All);
    assert_eq!(wb(&s, "idle").unwrap_err().errno(), libc::EIO);
    assert_eq!(s.bd_stat().bd_writes, 8);
    s.set_writeback_limit_enable(false);
    assert_eq!(wb(&s, "idle").unwrap().written, 12);
}

#[test]
fn a_full_backing_store_leaves_pages_in_memory() {
    let s = store(32);
    s.set_backing_dev(&backing_file("small", 4)).unwrap();
    let mut model = vec![None; 32];
    for i in 0..10u64 {
        model[i as usize] = Some(page(1, i));
        s.write_page(i, &page(1, i)).unwrap();
    }
    s.mark_idle(IdleCutoff::All);
    let e = wb(&s, "idle").unwrap_err();
    assert_eq!(e.errno(), libc::ENOSPC, "{e}");
    assert!(e.to_string().contains("4 of 10 pages written"), "{e}");
    assert_eq!(s.bd_stat().bd_count, 4);
    let idle_left = (0..10).filter(|i| s.slot_info(*i).unwrap().idle).count();
    assert_eq!(idle_left, 6, "pages not written keep their idle mark");
    check(&s, &model);
}

/// A backing file whose writes fail at random (EIO or ENOSPC), seeded.
#[derive(Debug)]
struct Flaky {
    file: BackingFile,
    state: AtomicU64,
    /// Fail one write in this many.
    one_in: u64,
}

impl BackingStore for Flaky {
    fn describe(&self) -> String {
        format!("flaky {}", self.file.describe())
    }
    fn blocks(&self) -> u64 {
        self.file.blocks()
    }
    fn write_block(&self, block: u64, page: &[u8]) -> io::Result<()> {
        let mut r = Rng(self.state.fetch_add(0x9E37_79B9, Ordering::Relaxed) | 1);
        match r.next() % self.one_in {
            0 => Err(io::Error::from_raw_os_error(libc::EIO)),
            1 if self.one_in > 2 => Err(io::Error::from_raw_os_error(libc::ENOSPC)),
            _ => self.file.write_block(block, page),
        }
    }
    fn read_block(&self, block: u64, buf: &mut [u8]) -> io::Result<()> {
        self.file.read_block(block, buf)
    }
    fn discard_block(&self, block: u64) {
        self.file.discard_block(block)
    }
}

fn flaky(name: &str, blocks: u64, one_in: u64, seed: u64) -> Arc<Flaky> {
    let path = backing_file(name, blocks);
    Arc::new(Flaky {
        file: BackingFile::open(&path, PAGE).unwrap(),
        state: AtomicU64::new(seed),
        one_in,
    })
}

#[test]
fn a_failing_backing_store_loses_nothing() {
    let s = store(64);
    s.set_backing_store(flaky("failing", 64, 2, 7)).unwrap();
    let mut model = vec![None; 64];
    for i in 0..64u64 {
        model[i as usize] = Some(page(i, i));
        s.write_page(i, &page(i, i)).unwrap();
    }
    s.mark_idle(IdleCutoff::All);
    let e = wb(&s, "idle").unwrap_err();
    assert_eq!(e.errno(), libc::EIO);
    let bd = s.bd_stat();
    assert!(bd.failed_writebacks > 0 && bd.bd_writes > 0, "{bd:?}");
    assert_eq!(
        bd.bd_count, bd.bd_writes,
        "failed writes give their block back"
    );
    assert_eq!(
        s.io_stat().failed_writes,
        0,
        "writeback failures are not failed writes"
    );
    check(&s, &model);
}

/// A backing file that counts the write calls it gets.
#[derive(Debug)]
struct Counting {
    file: BackingFile,
    /// Calls of `write_blocks` and the pages they carried.
    calls: AtomicU64,
    pages: AtomicU64,
}

impl BackingStore for Counting {
    fn describe(&self) -> String {
        self.file.describe()
    }
    fn blocks(&self) -> u64 {
        self.file.blocks()
    }
    fn write_block(&self, block: u64, page: &[u8]) -> io::Result<()> {
        self.write_blocks(block, page, PAGE)
    }
    fn write_blocks(&self, first: u64, pages: &[u8], page_size: usize) -> io::Result<()> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.pages
            .fetch_add((pages.len() / page_size) as u64, Ordering::Relaxed);
        self.file.write_blocks(first, pages, page_size)
    }
    fn read_block(&self, block: u64, buf: &mut [u8]) -> io::Result<()> {
        self.file.read_block(block, buf)
    }
    fn discard_block(&self, block: u64) {
        self.file.discard_block(block)
    }
}

#[test]
fn batched_writeback_writes_runs_of_adjacent_blocks_with_one_call() {
    for (batch, calls) in [(1u64, 60u64), (16, 4), (32, 2), (256, 1)] {
        let s = store(64);
        assert_eq!(s.writeback_batch_size(), 32, "the default");
        s.set_writeback_batch_size(batch).unwrap();
        assert_eq!(s.writeback_batch_size(), batch as usize);
        let dev = Arc::new(Counting {
            file: BackingFile::open(&backing_file(&format!("batch{batch}"), 64), PAGE).unwrap(),
            calls: AtomicU64::new(0),
            pages: AtomicU64::new(0),
        });
        s.set_backing_store(dev.clone()).unwrap();
        let mut model = vec![None; 64];
        // 60 pages of text and noise (4 same-filled are never written).
        for i in 0..64u64 {
            let p = page(if i % 16 == 0 { 0 } else { 1 + i % 2 }, i);
            s.write_page(i, &p).unwrap();
            model[i as usize] = Some(p);
        }
        s.mark_idle(IdleCutoff::All);
        let r = wb(&s, "idle").unwrap();
        assert_eq!(
            (r.chosen, r.written, r.failed),
            (60, 60, 0),
            "batch {batch}"
        );
        assert_eq!(dev.calls.load(Ordering::Relaxed), calls, "batch {batch}");
        assert_eq!(dev.pages.load(Ordering::Relaxed), 60);
        assert_eq!(s.bd_stat().bd_count, 60);
        assert_eq!(s.bd_stat().bd_writes, 60);
        // Blocks 0..60 in the order the pages were taken.
        let blocks: Vec<u64> = (0..64)
            .filter_map(|i| match s.slot_info(i).unwrap().state {
                SlotState::WrittenBack(block) => Some(block),
                _ => None,
            })
            .collect();
        let mut sorted = blocks.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..60).collect::<Vec<_>>());
        check(&s, &model);
    }
    let s = store(4);
    for bad in [0, 257] {
        assert_eq!(
            s.set_writeback_batch_size(bad).unwrap_err().errno(),
            libc::EINVAL
        );
    }
}

#[test]
fn algorithm_params_per_priority_reach_recompression() {
    // The same idle pages recompressed with zstd at level -5 and at 19:
    // the level given with algorithm_params is the one used, by priority
    // or by name; a recomp_algorithm write resets it (Linux 7.x).
    let words = [
        "zram ", "keeps ", "idle ", "pages ", "in ", "memory ", "until ", "the ", "backing ",
        "store ", "takes ", "them; ",
    ];
    let mut r = Rng(7);
    let text: Vec<Vec<u8>> = (0..64)
        .map(|_| {
            let mut p = Vec::new();
            while p.len() < PAGE {
                p.extend_from_slice(words[(r.next() % 12) as usize].as_bytes());
            }
            p.truncate(PAGE);
            p
        })
        .collect();
    let params = [
        "priority=1 level=-5",
        "priority=1 level=19",
        "algo=zstd level=19",
    ];
    let sizes: Vec<u64> = params
        .iter()
        .enumerate()
        .map(|(k, params)| {
            let s = store(64);
            if k == 0 {
                // Set before the algorithm, and reset by it.
                s.set_algorithm_params("priority=1 level=19").unwrap();
                s.set_recomp_algorithm("algo=zstd priority=1").unwrap();
                assert_eq!(s.secondary_params(1).level, None);
            }
            s.set_recomp_algorithm("algo=zstd priority=1").unwrap();
            s.set_algorithm_params(params).unwrap();
            assert!(s.secondary_params(1).level.is_some());
            for (i, p) in text.iter().enumerate() {
                s.write_page(i as u64, p).unwrap();
            }
            s.mark_idle(IdleCutoff::All);
            s.recompress(&RecompressRequest::parse("type=idle").unwrap())
                .unwrap();
            s.mm_stat().compr_data_size
        })
        .collect();
    assert!(sizes[1] < sizes[0], "level 19 beats level -5: {sizes:?}");
    assert_eq!(sizes[1], sizes[2], "algo=zstd names the same compressor");
    let s = store(8);
    s.set_recomp_algorithm("algo=zstd priority=1").unwrap();
    let errno = |t: &str| s.set_algorithm_params(t).unwrap_err().errno();
    assert_eq!(errno("priority=4 level=3"), libc::EINVAL);
    assert_eq!(errno("priority=1 colour=red"), libc::EINVAL);
    assert_eq!(errno("priority=1 level"), libc::EINVAL);
    assert_eq!(
        errno("algo=deflate level=3"),
        libc::EINVAL,
        "no such secondary"
    );
    assert_eq!(
        errno("priority=1 algo=deflate"),
        libc::EINVAL,
        "not priority 1's"
    );
    assert_eq!(
        errno("priority=2 algo=zstd"),
        libc::EINVAL,
        "no compressor at priority 2"
    );
    assert_eq!(
        errno("level=3"),
        libc::EBUSY,
        "the primary's are the store's"
    );
    s.write_page(0, &page(1, 0)).unwrap();
    assert_eq!(
        errno("priority=1 level=3"),
        libc::EBUSY,
        "after the first write"
    );
}

#[test]
fn bad_requests_get_the_kernels_errnos() {
    let s = store(16);
    assert_eq!(wb(&s, "idle").unwrap_err().errno(), libc::ENODEV);
    assert_eq!(s.backing_dev(), "none");
    let bad = s
        .set_backing_dev(std::path::Path::new("/nonexistent/file"))
        .unwrap_err();
    assert_eq!(bad.errno(), libc::ENOENT);
    assert!(bad.to_string().contains("/nonexistent/file"), "{bad}");
    assert_eq!(
        s.set_recomp_algorithm("algo=zstd priority=4")
            .unwrap_err()
            .errno(),
        libc::EINVAL
    );
    assert_eq!(
        s.set_recomp_algorithm("algo=nosuch").unwrap_err().errno(),
        libc::EINVAL
    );
    assert_eq!(
        s.set_recomp_algorithm("priority=1").unwrap_err().errno(),
        libc::EINVAL
    );
    assert_eq!(
        s.recompress(&RecompressRequest::default())
            .unwrap_err()
            .errno(),
        libc::EINVAL
    );
    s.set_recomp_algorithm("algo=zstd priority=1").unwrap();
    s.set_recomp_algorithm("algo=deflate priority=3").unwrap();
    assert_eq!(s.recomp_algorithms(), vec![(1, "zstd"), (3, "deflate")]);
    let rq = |t: &str| s.recompress(&RecompressRequest::parse(t).unwrap());
    assert_eq!(
        rq("priority=2").unwrap_err().errno(),
        libc::EINVAL,
        "nothing at 2"
    );
    assert_eq!(rq("priority=0").unwrap_err().errno(), libc::EINVAL);
    assert_eq!(
        rq("algo=zstd priority=3").unwrap_err().errno(),
        libc::EINVAL
    );
    assert_eq!(
        rq("algo=lz4").unwrap_err().errno(),
        libc::EINVAL,
        "the primary is no target"
    );
    assert_eq!(rq("threshold=4096").unwrap_err().errno(), libc::EINVAL);
    assert!(rq("algo=deflate").is_ok());
    s.write_page(0, &page(1, 0)).unwrap();
    let path = backing_file("late", 4);
    assert_eq!(s.set_backing_dev(&path).unwrap_err().errno(), libc::EBUSY);
    assert_eq!(
        s.set_recomp_algorithm("algo=lz4hc").unwrap_err().errno(),
        libc::EBUSY
    );
    s.reset();
    s.set_backing_dev(&path)
        .expect("after reset the store is not initialised");
}

#[test]
fn recompress_huge_idle_with_zstd_compresses_huge_pages() {
    let s = store(32);
    s.set_recomp_algorithm("algo=zstd priority=1").unwrap();
    let mut model = vec![None; 32];
    for i in 0..32u64 {
        // Nibble pages are huge for lz4; text pages compress.
        let p = page(if i % 2 == 0 { 3 } else { 1 }, i);
        s.write_page(i, &p).unwrap();
        model[i as usize] = Some(p);
    }
    let before = s.mm_stat();
    assert_eq!(before.huge_pages, 16);
    s.mark_idle(IdleCutoff::All);
    let mut buf = vec![0; PAGE];
    s.read_page(0, &mut buf).unwrap(); // not idle any more
    let r = s
        .recompress(&RecompressRequest::parse("type=huge_idle max_pages=10").unwrap())
        .unwrap();
    assert_eq!((r.chosen, r.recompressed), (15, 10), "max_pages stops it");
    let after = s.mm_stat();
    assert_eq!(after.huge_pages, 6);
    assert_eq!(after.huge_pages_since, before.huge_pages_since);
    assert_eq!(after.orig_data_size, before.orig_data_size);
    assert!(after.compr_data_size < before.compr_data_size);
    let recompressed = (0..32)
        .filter(|i| {
            let info = s.slot_info(*i).unwrap();
            info.priority == 1 && matches!(info.state, SlotState::Compressed(_)) && !info.huge
        })
        .count();
    assert_eq!(recompressed, 10);
    check(&s, &model);
    // Recompressed pages are not chosen again at the same priority.
    s.mark_idle(IdleCutoff::All);
    let r = s
        .recompress(&RecompressRequest::parse("type=huge").unwrap())
        .unwrap();
    assert_eq!(r.chosen, 6);
    // A threshold keeps small objects as they are.
    let r = s
        .recompress(&RecompressRequest::parse("threshold=3000").unwrap())
        .unwrap();
    assert_eq!(r.recompressed, 0);
    check(&s, &model);
}

/// The model-checked workload: writes, reads, discards, overwrites,
/// idle marking, writeback over a backing store that fails at random,
/// recompression and reset; after every step the statistics agree with the
/// slots and, every few steps, every page reads back.
#[test]
fn model_workload_with_writeback_recompression_and_faults() {
    // Odd seeds write pages back decompressed, even ones compressed and
    // packed (`compressed_writeback`).
    for seed in 1..=8u64 {
        let pages = 96u64;
        let s = store(pages);
        let dev = flaky(&format!("model{seed}"), 48, 5, seed);
        s.set_backing_store(dev.clone()).unwrap();
        s.set_compressed_writeback(seed % 2 == 0).unwrap();
        s.set_recomp_algorithm("algo=zstd priority=1").unwrap();
        s.set_recomp_algorithm("algo=deflate priority=2").unwrap();
        let mut model: Vec<Option<Vec<u8>>> = vec![None; pages as usize];
        let mut rng = Rng(seed * 7919);
        let mut buf = vec![0; PAGE];
        // Whether pages ever shared a block.
        let mut packed_seen = false;
        for step in 0..600 {
            let i = rng.next() % pages;
            match rng.next() % 12 {
                0..=3 => {
                    let p = page(rng.next() % 4, rng.next());
                    s.write_page(i, &p).unwrap();
                    model[i as usize] = Some(p);
                }
                4 => {
                    s.read_page(i, &mut buf).unwrap();
                    let want = model[i as usize].clone().unwrap_or_else(|| vec![0; PAGE]);
                    assert!(buf == want, "seed {seed} step {step}: page {i}");
                }
                5 => {
                    let n = (rng.next() % 4).min(pages - i);
                    s.discard(i, n).unwrap();
                    for j in i..i + n {
                        model[j as usize] = None;
                    }
                }
                6 => {
                    s.mark_idle(IdleCutoff::All);
                }
                7 | 8 => {
                    let mode = [
                        "idle",
                        "huge",
                        "huge_idle",
                        "incompressible",
                        "page_indexes=0-40",
                    ][(rng.next() % 5) as usize];
                    match wb(&s, mode) {
                        Ok(_) => {}
                        Err(e) => assert!(
                            [libc::EIO, libc::ENOSPC].contains(&e.errno()),
                            "seed {seed} step {step}: {e}"
                        ),
                    }
                }
                9 | 10 => {
                    let t = [
                        "type=idle",
                        "type=huge",
                        "type=huge_idle priority=2",
                        "max_pages=5 algo=deflate",
                        "",
                    ][(rng.next() % 5) as usize];
                    s.recompress(&RecompressRequest::parse(t).unwrap()).unwrap();
                }
                _ => {
                    if rng.next() % 20 == 0 {
                        s.reset();
                        model.iter_mut().for_each(|p| *p = None);
                    }
                }
            }
            assert_eq!(
                s.bd_stat().bd_count,
                blocks_named(&s),
                "seed {seed} step {step}: blocks and WB slots"
            );
            let wb_slots = (0..pages)
                .filter(|j| matches!(s.slot_info(*j).unwrap().state, SlotState::WrittenBack(_)))
                .count() as u64;
            packed_seen |= wb_slots > s.bd_stat().bd_count;
            if step % 50 == 49 {
                check(&s, &model);
            }
        }
        check(&s, &model);
        assert_eq!(
            packed_seen,
            seed % 2 == 0,
            "seed {seed}: pages share blocks exactly when written back compressed"
        );
        s.reset();
        assert_eq!(s.bd_stat().bd_count, 0);
        assert_eq!(
            s.allocator().total_pages(),
            0,
            "seed {seed}: memory left after reset"
        );
    }
}

/// A page whose first `random` bytes are random and the rest text: lz4
/// makes an object a little over `random` bytes.
fn mixed(seed: u64, random: usize) -> Vec<u8> {
    let mut p = page(1, seed);
    let mut r = Rng(seed | 1);
    p[..random].iter_mut().for_each(|b| *b = r.next() as u8);
    p
}

/// `compressed_writeback`: compressed pages go to the backing store as
/// their objects, packed back to back (one running on into the next block
/// where it does not fit); they read back identical (with the compressor
/// that made them, recompressed ones included), and a block is freed only
/// when its last object is discarded or overwritten.
#[test]
fn compressed_writeback_packs_objects_and_frees_blocks_with_the_last() {
    let s = store(64);
    s.set_backing_dev(&backing_file("packed", 64)).unwrap();
    assert!(!s.compressed_writeback(), "0 by default");
    s.set_compressed_writeback(true).unwrap();
    s.set_recomp_algorithm("algo=zstd priority=1").unwrap();
    let mut model = vec![None; 64];
    // 40 pages of 600 to 1800-byte objects, 4 random (huge) and 4
    // same-filled.
    for i in 0..48u64 {
        let p = match i {
            0..=39 => mixed(i, 600 + (i as usize * 37) % 1200),
            40..=43 => page(2, i),
            _ => page(0, i),
        };
        s.write_page(i, &p).unwrap();
        model[i as usize] = Some(p);
    }
    assert_eq!(
        s.set_compressed_writeback(false).unwrap_err().errno(),
        libc::EBUSY,
        "set only before the store is initialised"
    );
    // Some pages compressed by the secondary: they must read back with it.
    s.mark_idle(IdleCutoff::All);
    let r = s
        .recompress(&RecompressRequest::parse("type=idle algo=zstd").unwrap())
        .unwrap();
    assert!(r.recompressed > 0, "{r:?}");
    s.mark_idle(IdleCutoff::All);
    let objects: u64 = (0..40)
        .map(|j| match s.slot_info(j).unwrap().state {
            SlotState::Compressed(n) => n as u64,
            other => panic!("page {j}: {other:?}"),
        })
        .sum();
    let r = wb(&s, "idle").unwrap();
    assert_eq!((r.written, r.failed), (44, 0), "same-filled pages stay");
    let infos: Vec<_> = (0..40).map(|j| s.slot_info(j).unwrap()).collect();
    assert!(
        infos.iter().any(|i| i.priority == 1),
        "written-back pages keep their priority"
    );
    let bd = s.bd_stat();
    assert_eq!(bd.bd_count, blocks_named(&s), "bd_count counts blocks");
    assert_eq!(
        bd.bd_count,
        4 + objects.div_ceil(PAGE as u64),
        "the 4 huge pages a block each, the objects back to back: {bd:?}"
    );
    assert_eq!(bd.bd_writes, bd.bd_count);
    assert_eq!(s.mm_stat().compr_data_size, 0);
    let spanning = infos
        .iter()
        .filter(|i| i.packed.is_some_and(|(at, len)| at as usize + len > PAGE))
        .count() as u64;
    assert!(spanning > 0, "some objects run on into the next block");
    check(&s, &model);
    assert_eq!(
        s.bd_stat().bd_reads,
        44 + spanning,
        "a page read reads its block, and the next if its object runs on"
    );
    // The first block of packed objects (the huge pages went first, so no
    // object runs on into it): free every page starting there but one,
    // by discards and overwrites, and it stays.
    let block_of = |j: u64| match s.slot_info(j).unwrap().state {
        SlotState::WrittenBack(b) => b,
        other => panic!("page {j}: {other:?}"),
    };
    let first = (0..40).map(block_of).min().unwrap();
    let mut sharing: Vec<u64> = (0..40).filter(|&j| block_of(j) == first).collect();
    sharing.sort_by_key(|&j| s.slot_info(j).unwrap().packed);
    assert!(sharing.len() >= 2, "{sharing:?}");
    let before = s.bd_stat().bd_count;
    // The first object of the block is the one kept: it does not run on.
    let (keep, rest) = sharing.split_first().unwrap();
    for (n, &j) in rest.iter().enumerate() {
        if n % 2 == 0 {
            s.discard(j, 1).unwrap();
            model[j as usize] = None;
        } else {
            s.write_page(j, &page(3, j)).unwrap();
            model[j as usize] = Some(page(3, j));
        }
    }
    assert_eq!(s.bd_stat().bd_count, before, "one object still lives there");
    check(&s, &model);
    s.discard(*keep, 1).unwrap();
    model[*keep as usize] = None;
    assert_eq!(
        s.bd_stat().bd_count,
        before - 1,
        "freed with its last object"
    );
    check(&s, &model);
    s.reset();
    assert_eq!(s.bd_stat().bd_count, 0);
    assert!(s.compressed_writeback(), "reset keeps the setting");
}

/// `compressed_writeback` laid out as Linux 7.x does (kernel-compat
/// stores): each object in a block of its own, so `bd_stat` is the same as
/// without compressed writeback, and every page still reads back right
/// with the compressor that made it.
#[test]
fn compressed_writeback_one_object_per_block_counts_as_the_kernel() {
    let pages: Vec<Vec<u8>> = (0..40u64)
        .map(|i| match i {
            0..=31 => mixed(i, 600 + (i as usize * 37) % 1200),
            32..=35 => page(2, i),
            _ => page(0, i),
        })
        .collect();
    let run = |compressed: bool, own_block: bool| {
        let s = store(64);
        s.set_backing_dev(&backing_file(&format!("own-{compressed}-{own_block}"), 64))
            .unwrap();
        s.set_compressed_writeback(compressed).unwrap();
        s.set_writeback_one_object_per_block(own_block);
        let model: Vec<Option<Vec<u8>>> = pages.iter().cloned().map(Some).collect();
        for (i, p) in pages.iter().enumerate() {
            s.write_page(i as u64, p).unwrap();
        }
        s.mark_idle(IdleCutoff::All);
        let r = wb(&s, "idle").unwrap();
        assert_eq!((r.written, r.failed), (36, 0), "same-filled pages stay");
        check(&s, &model);
        let packed = (0..32).all(|j| s.slot_info(j).unwrap().packed.is_some());
        assert_eq!(packed, compressed, "written as objects");
        let bd = s.bd_stat();
        (bd.bd_count, bd.bd_reads, bd.bd_writes)
    };
    let plain = run(false, true);
    assert_eq!(plain, (36, 36, 36));
    assert_eq!(run(true, true), plain, "one block per object");
    let packed = run(true, false);
    assert!(packed.0 < plain.0, "packed: fewer blocks {packed:?}");
}
