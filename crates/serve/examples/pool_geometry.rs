//! Which zsmalloc geometry wastes least for a data set at a page size.
//!
//! `cargo run --release -p zmem-serve --example pool_geometry -- FILE [PAGE_SIZE] [ALGO]`
//!
//! Compresses every page of FILE once (default 32 KiB pages, zstd at zram's
//! default level), skipping same-filled pages and storing pages that reach
//! the pool's huge class raw, as the store does; then allocates the same
//! object sizes in zsmalloc pools of every chain (1..16), class delta
//! (16..1024 bytes), chain rule and merge setting in default mode, and
//! prints the ten with the least pool overhead (pool bytes over the bytes
//! stored). Pool bytes are counted pages, as `mem_used_total` counts them:
//! in default mode a 32 KiB pool page is resident only up to the end of its
//! last object (4 KiB granules), so this overstates what a geometry costs
//! in RSS and ranks by the wrong measure for large pages. It picked
//! `--delta 256` for `zmem bench serve`; RSS measured per mapping picked
//! `--delta 128` instead (BENCHMARKS.md).

use zpool::ZPool;
use zsmalloc::geometry::{ChainRule, ClassDelta};
use zsmalloc::{Pool, PoolConfig};

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(file) = args.next() else {
        eprintln!("usage: pool_geometry FILE [PAGE_SIZE] [ALGO]");
        std::process::exit(2);
    };
    let ps: usize = args.next().map_or(32768, |s| s.parse().expect("page size"));
    let algo = args.next().unwrap_or_else(|| "zstd".to_string());
    let data = std::fs::read(&file).expect("read the data file");
    let comp = zcomp::Compressor::parse(&algo, "").expect("compressor");
    let mut ctx = comp.context().expect("context");
    let sizes: Vec<usize> = data
        .chunks_exact(ps)
        .filter(|p| zram::same_filled(p).is_none())
        .map(|p| ctx.compress_buffered(p).expect("compress").len())
        .collect();
    println!(
        "{file}: {} pages of {ps} bytes compress to {} bytes ({algo})",
        sizes.len(),
        sizes.iter().sum::<usize>()
    );
    let mut results = Vec::new();
    for rule in [
        ChainRule::MinWaste,
        ChainRule::UsedPercent,
        ChainRule::Balanced,
    ] {
        for merge in [true, false] {
            for delta in [16u32, 32, 64, 128, 192, 256, 320, 384, 512, 1024] {
                for chain in [1u32, 2, 4, 8, 16] {
                    let mut c = PoolConfig::default_mode(ps as u32);
                    c.geometry.chain = chain;
                    c.geometry.delta = ClassDelta::Fixed(delta);
                    c.geometry.chain_rule = rule;
                    c.geometry.merge = merge;
                    let Ok(pool) = Pool::new(c) else { continue };
                    let huge = pool.huge_class_size().min(ps);
                    let mut stored = 0usize;
                    let mut handles = Vec::with_capacity(sizes.len());
                    for &s in &sizes {
                        let s = if s >= huge { ps } else { s };
                        stored += s;
                        handles.push(ZPool::malloc(&pool, s).expect("malloc"));
                    }
                    let used = ZPool::total_pages(&pool) * ps;
                    let ovh = (used as f64 / stored as f64 - 1.0) * 100.0;
                    results.push((
                        ovh,
                        format!("{} merge={merge} delta={delta} chain={chain}", rule.name()),
                    ));
                    for h in handles {
                        ZPool::free(&pool, h).expect("free");
                    }
                }
            }
        }
    }
    results.sort_by(|a, b| a.0.total_cmp(&b.0));
    for (ovh, what) in results.iter().take(10) {
        println!("{ovh:6.2}%  {what}");
    }
}
