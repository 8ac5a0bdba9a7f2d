//! The policies that run by themselves (`zram::policy`): the memory-aware
//! rule keeps a store under its `mem_limit` by writing pages back instead
//! of failing writes, and the timed rule marks, recompresses and writes
//! back on its own, each checked by reading every page back.

mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::PAGE;
use zram::{
    IdleCutoff, PolicyConfig, PolicyRunner, RecompressRequest, SlotState, Store, WritebackRequest,
};

/// A store of `pages` pages, shared with the policy's thread.
fn store(pages: u64) -> Arc<Store> {
    Arc::new(common::store(pages))
}

/// A backing file of `blocks` pages in this suite's directory.
fn backing_file(name: &str, blocks: u64) -> PathBuf {
    common::backing_file("policy", name, blocks)
}

/// Writes `data` page by page from page 0.
fn write_all(s: &Store, data: &[u8]) {
    for (i, p) in data.chunks_exact(PAGE).enumerate() {
        s.write_page(i as u64, p).expect("write");
    }
}

/// `pages` pages of real data and a store of that size with a backing
/// file `name` of as many blocks, nothing written yet.
fn backed_store(pages: u64, name: &str) -> (Vec<u8>, Arc<Store>) {
    let data = testkit::real_data(pages as usize * PAGE);
    let s = store(pages);
    s.set_backing_dev(&backing_file(name, pages))
        .expect("backing_dev");
    (data, s)
}

fn read_all_back(s: &Store, data: &[u8]) {
    let mut buf = vec![0u8; PAGE];
    for (i, want) in data.chunks_exact(PAGE).enumerate() {
        s.read_page(i as u64, &mut buf).expect("read");
        assert!(buf == want, "page {i} differs");
    }
}

/// A quarter of the compressed size as the limit, the rule at 90%: every
/// write succeeds, memory never passes the rule's ceiling (the limit minus
/// the store's own metadata, the slot table and the block bitmap, and the
/// writeback's buffers), pages go
/// to the backing file, and all of them read back.
#[test]
fn memory_aware_rule_keeps_every_write_under_the_limit() {
    let pages = 2048u64;
    let data = testkit::real_data(pages as usize * PAGE);
    // The compressed size, measured on a store without a limit.
    let free = store(pages);
    write_all(&free, &data);
    let full = free.mm_stat().mem_used_total;
    drop(free);

    let s = store(pages);
    s.set_backing_dev(&backing_file("cap.img", pages))
        .expect("backing_dev");
    s.set_mem_limit(full / 4);
    let limit = s.mem_limit();
    s.set_writeback_near_limit(90).expect("rule on");
    // 16 bytes a slot and a bit a block (in 64-bit words); with the
    // writeback's four buffers of 32 pages, in whole pages; never below
    // half the limit.
    let metadata = pages * 16 + pages.div_ceil(64) * 8;
    assert_eq!(s.metadata_bytes(), metadata);
    assert_eq!(s.writeback_buffer_bytes(), 4 * 32 * PAGE as u64);
    let room = (metadata + 4 * 32 * PAGE as u64).div_ceil(PAGE as u64) * PAGE as u64;
    let ceiling = s.writeback_ceiling();
    assert_eq!(ceiling, limit.saturating_sub(room).max(limit / 2));
    let runner = PolicyRunner::start(
        &s,
        PolicyConfig {
            interval: Duration::from_secs(3600),
            idle_after: None,
            recompress: None,
            writeback: None,
        },
    )
    .expect("thread");
    let mut peak = 0;
    for (i, p) in data.chunks_exact(PAGE).enumerate() {
        s.write_page(i as u64, p).expect("every write succeeds");
        peak = peak.max(s.mm_stat().mem_used_total);
    }
    runner.stop();
    let mm = s.mm_stat();
    assert_eq!(s.io_stat().failed_writes, 0);
    assert!(peak <= ceiling, "peak {peak} over the ceiling {ceiling}");
    assert!(mm.mem_used_max <= ceiling, "{mm}");
    let stats = s.policy_stats();
    assert!(
        stats.reclaimed_pages > 0 && stats.limit_failures == 0,
        "{stats}"
    );
    assert!(s.bd_stat().bd_count > 0);
    // Nothing was idle: the pages written back were the least recently
    // accessed.
    assert_eq!(stats.reclaimed_not_idle, stats.reclaimed_pages);
    assert!(s.debug_stat().to_string().contains("\npolicy: ticks 0 "));
    read_all_back(&s, &data);
}

/// Idle pages go before pages that are in use.
#[test]
fn reclaim_takes_idle_pages_first() {
    let pages = 512u64;
    let (data, s) = backed_store(pages, "idle.img");
    s.set_writeback_near_limit(90).expect("rule on");
    write_all(&s, &data);
    // All idle, then the lower half read (a read clears the mark): the
    // upper half is idle, the lower half older but in use.
    s.mark_idle(IdleCutoff::All);
    let mut buf = vec![0u8; PAGE];
    for i in 0..pages / 2 {
        s.read_page(i, &mut buf).expect("read");
    }
    assert!((0..pages / 2).all(|i| !s.slot_info(i).expect("slot").idle));
    // A quarter of memory back: the idle half has enough.
    let used = s.mm_stat().mem_used_total / PAGE as u64;
    let report = s.reclaim_to(used * 3 / 4, 0);
    assert!(report.written > 0 && report.reached, "{report:?}");
    // A page in use went only once no idle page was left in memory.
    let in_memory = |i: u64| {
        let info = s.slot_info(i).expect("slot");
        matches!(info.state, SlotState::Compressed(_) | SlotState::Huge)
    };
    let idle_left = (pages / 2..pages).filter(|&i| in_memory(i)).count();
    let busy_gone = (0..pages / 2)
        .filter(|&i| {
            !in_memory(i)
                && s.slot_info(i).expect("slot").state != SlotState::Empty
                && !matches!(s.slot_info(i).expect("slot").state, SlotState::Same(_))
        })
        .count() as u64;
    assert_eq!(busy_gone, report.not_idle, "{report:?}");
    assert!(
        busy_gone == 0 || idle_left == 0,
        "{busy_gone} pages in use written back before {idle_left} idle ones"
    );
    assert!(s.mm_stat().mem_used_total / PAGE as u64 <= used * 3 / 4);
    read_all_back(&s, &data);
}

/// The timed rule marks pages idle after `idle_after`, recompresses them
/// with the secondary and writes them back, by itself.
#[test]
fn the_timed_rule_marks_recompresses_and_writes_back() {
    let pages = 256u64;
    let (data, s) = backed_store(pages, "timed.img");
    s.set_recomp_algorithm("algo=zstd priority=1")
        .expect("secondary");
    write_all(&s, &data);
    let before = s.mm_stat().compr_data_size;
    let recompress = RecompressRequest::parse("type=idle").expect("request");
    let runner = PolicyRunner::start(
        &s,
        PolicyConfig {
            interval: Duration::from_millis(100),
            idle_after: Some(Duration::ZERO),
            recompress: Some(recompress),
            writeback: None,
        },
    )
    .expect("thread");
    let deadline = Instant::now() + Duration::from_secs(20);
    while s.policy_stats().recompressed == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    runner.stop();
    let stats = s.policy_stats();
    assert!(stats.ticks >= 1 && stats.marked_idle > 0, "{stats}");
    assert!(stats.recompressed > 0, "{stats}");
    assert!(s.mm_stat().compr_data_size < before);
    read_all_back(&s, &data);

    let runner = PolicyRunner::start(
        &s,
        PolicyConfig {
            interval: Duration::from_millis(100),
            idle_after: Some(Duration::ZERO),
            recompress: None,
            writeback: Some(WritebackRequest::parse("idle", pages).expect("request")),
        },
    )
    .expect("thread");
    let deadline = Instant::now() + Duration::from_secs(20);
    while s.policy_stats().written_back == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(runner);
    assert!(s.policy_stats().written_back > 0);
    assert!(s.bd_stat().bd_writes > 0);
    read_all_back(&s, &data);
}

/// The rule refuses marks outside 50..=99, and a store dropped while its
/// thread runs is not kept alive by it.
#[test]
fn bad_marks_are_refused_and_the_thread_lets_the_store_go() {
    let s = store(16);
    assert_eq!(
        s.set_writeback_near_limit(49).unwrap_err().errno(),
        libc::EINVAL
    );
    assert_eq!(
        s.set_writeback_near_limit(100).unwrap_err().errno(),
        libc::EINVAL
    );
    s.set_writeback_near_limit(0).expect("off");
    let weak = Arc::downgrade(&s);
    let runner = PolicyRunner::start(
        &s,
        PolicyConfig {
            interval: Duration::from_millis(10),
            idle_after: Some(Duration::from_secs(1)),
            recompress: None,
            writeback: None,
        },
    )
    .expect("thread");
    std::thread::sleep(Duration::from_millis(50));
    drop(s);
    let deadline = Instant::now() + Duration::from_secs(5);
    while weak.upgrade().is_some() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(weak.upgrade().is_none());
    runner.stop();
}
