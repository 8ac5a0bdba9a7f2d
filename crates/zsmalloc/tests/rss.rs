//! The process's resident set follows the pool: pages come from the OS when
//! zspages are made and go back when they are freed or compacted away. In a
//! framed pool (default mode on 64 KiB pages) the system page is the unit:
//! it is resident while any frame of it is taken.
//!
//! One test per binary so nothing else allocates while RSS is read.

use testkit::rss::{free_every_other, rss_kib};
use zsmalloc::{Handle, Mode, Pool, PoolConfig};

fn fill(pool: &Pool, bytes: usize, seed: u64, handles: &mut Vec<Handle>) {
    let mut x = seed;
    let mut stored = 0;
    let chunk: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
    while stored < bytes {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let len = (x % 4000 + 64) as usize;
        let h = pool.malloc(len).unwrap();
        pool.write(h, &chunk[..len]).unwrap();
        handles.push(h);
        stored += len;
    }
}

#[test]
#[cfg_attr(miri, ignore = "reads /proc/self/smaps, which Miri cannot open")]
fn rss_follows_the_pool() {
    const MIB: u64 = 1024;
    for (mode, page) in [
        (Mode::KernelCompat, 4096u64),
        (Mode::Default, 4096),
        (Mode::Default, 65536),
    ] {
        let config = match mode {
            Mode::KernelCompat => PoolConfig::kernel_compat(),
            Mode::Default => PoolConfig::default_mode(page as u32),
        };
        let pool = Pool::new(config).unwrap();
        let page_kib = page / 1024;
        // The test's own handle list is made (and its pages touched) before
        // the first reading, so only the pool's memory is measured.
        let mut handles = vec![Handle::from_raw(1).unwrap(); 200_000];
        handles.clear();
        let start = rss_kib();
        fill(&pool, 256 << 20, 7, &mut handles);
        let pool_kib = pool.total_pages() as u64 * page_kib;
        let full = rss_kib();
        let grew = full - start;
        eprintln!("{mode:?} {page}: pool {pool_kib} KiB, RSS {start} -> {full} KiB");
        assert!(pool_kib > 250 * MIB);
        // RSS grows by the pool's pages plus a little metadata.
        assert!(
            grew + 2 * MIB >= pool_kib,
            "RSS grew {grew} KiB for a {pool_kib} KiB pool"
        );
        assert!(
            grew <= pool_kib + 8 * MIB,
            "RSS grew {grew} KiB for a {pool_kib} KiB pool"
        );

        // Free every other object and compact in the background: the pages
        // the compaction frees may stay resident for reuse, within the
        // retained share's bound (default mode: 1 MiB plus 1/8 of the
        // pool's pages; kernel-compat: 1 MiB).
        free_every_other(&mut handles, |h| pool.free(h).unwrap());
        pool.compact_background();
        let kept = pool.page_stats();
        let bound_kib = kept.bound_pages as u64 * page_kib;
        let kept_kib = (kept.cached_pages + kept.pending_pages) as u64 * page_kib;
        let bg_kib = pool.total_pages() as u64 * page_kib;
        let bg = rss_kib();
        eprintln!(
            "{mode:?} {page}: after freeing half and a background compaction: pool {bg_kib} KiB, RSS {bg} KiB, kept {kept_kib} KiB (bound {bound_kib} KiB)"
        );
        assert!(
            kept_kib <= bound_kib,
            "{kept_kib} KiB kept over {bound_kib}"
        );
        let expect = match mode {
            Mode::KernelCompat => 0,
            Mode::Default => zsmalloc::DEFAULT_RETAIN_DIVISOR,
        };
        assert_eq!(kept.retain_divisor, expect);
        assert!(
            bg <= start + bg_kib + bound_kib + 8 * MIB,
            "RSS {bg} KiB for a {bg_kib} KiB pool keeping up to {bound_kib} KiB"
        );

        // A manual compaction gives every kept page back: RSS follows the
        // pool down.
        pool.compact();
        let cache = pool.page_stats();
        assert_eq!((cache.cached_pages, cache.pending_pages), (0, 0));
        let half_kib = pool.total_pages() as u64 * page_kib;
        let half = rss_kib();
        eprintln!(
            "{mode:?} {page}: after freeing half and compacting: pool {half_kib} KiB, RSS {half} KiB"
        );
        assert!(half_kib < pool_kib * 6 / 10);
        assert!(
            half <= start + half_kib + 8 * MIB,
            "RSS {half} KiB for a {half_kib} KiB pool"
        );

        for h in handles.drain(..) {
            pool.free(h).unwrap();
        }
        assert_eq!(pool.total_pages(), 0);
        // An empty pool keeps nothing in its page source's cache either.
        let cache = pool.page_stats();
        assert_eq!((cache.cached_pages, cache.pending_pages), (0, 0));
        let end = rss_kib();
        eprintln!("{mode:?} {page}: all freed: RSS {end} KiB (started at {start})");
        if std::env::var_os("ZMEM_RSS_DEBUG").is_some() {
            let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
            let mut cur = String::new();
            for l in smaps.lines() {
                if l.contains('-') && !l.starts_with(|c: char| c.is_ascii_uppercase()) {
                    cur = l.to_string();
                } else if let Some(v) = l.strip_prefix("Rss:") {
                    let kb: u64 = v.trim().trim_end_matches("kB").trim().parse().unwrap();
                    if kb > 256 {
                        eprintln!("  {kb:>8} KiB  {cur}");
                    }
                }
            }
        }
        // What stays is the handle tables sized for the peak (8 bytes per
        // object: about 1 MiB here) and what glibc keeps of freed metadata
        // (measured here: 3.6 MiB above the start in all).
        assert!(
            end <= start + 5 * MIB,
            "RSS {end} KiB did not fall back to {start} KiB"
        );
    }
}
