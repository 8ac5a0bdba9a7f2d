//! Where a zsmalloc pool's memory beyond the compressed bytes goes.
//!
//! `cargo run --release -p zmem-lab --example waste -- FILE...` compresses
//! each file's blocks (lz4 and zstd; same-filled blocks skipped, as zram
//! does), fills a real pool with objects of those lengths in each
//! configuration (4, 16 and 64 KiB pages; 16 and 64 KiB compression units
//! on 4 KiB pages; default and kernel-compat modes), and splits the memory
//! over `compr_data_size` into: rounding up to the class (with
//! kernel-compat's 8-byte header), the tails of full zspages, the partly
//! filled last zspage of each class, and, in a framed pool (default mode on
//! pages above 4 KiB, whose zspages are 4 KiB frames of shared system
//! pages), the free frames of the system pages it counts. It then frees a seeded half,
//! compacts, and prints the overhead again. Only the pool is used: no
//! store, no bytes written, so the figures are the geometry's and the
//! placement's alone. The pool's metadata (handle table, owner arrays,
//! zspage records) is outside `mem_used_total`, as in the kernel, and is
//! not counted here. Compressed lengths are cached in the temporary
//! directory, by file, size, modification time, block and compressor. It
//! owns nothing but its own output and that cache.

use std::path::PathBuf;

use zsmalloc::{Mode, Pool, PoolConfig};

/// One configuration: page size, unit, mode.
struct Config {
    page: usize,
    unit: usize,
    mode: Mode,
}

/// The memory of one filled pool, split by cause, in bytes.
struct Waste {
    compr: u64,
    mem: u64,
    rounding: u64,
    tails: u64,
    partial: u64,
    /// Framed pools: free frames of the system pages counted.
    shared: u64,
    huge: u64,
    half: f64,
}

fn pool_for(c: &Config) -> Pool {
    let mut config = match c.mode {
        Mode::Default => PoolConfig::default_mode_for_unit(c.page as u32, c.unit as u32),
        Mode::KernelCompat => {
            let mut k = PoolConfig::kernel_compat();
            k.geometry.page_size = c.page as u32;
            k
        }
    };
    if c.unit > c.page {
        config.geometry.unit = c.unit as u32;
    }
    Pool::new(config).expect("a valid configuration")
}

fn measure(c: &Config, lens: &[usize]) -> Waste {
    let pool = pool_for(c);
    let huge_at = pool.huge_class_size().min(c.unit);
    let header = match c.mode {
        Mode::KernelCompat => 8,
        Mode::Default => 0,
    };
    let mut handles = Vec::with_capacity(lens.len());
    let (mut compr, mut rounding, mut huge) = (0u64, 0u64, 0u64);
    for &len in lens {
        let stored = if len >= huge_at {
            huge += 1;
            c.unit
        } else {
            len
        };
        compr += stored as u64;
        let h = pool.malloc(stored).expect("malloc");
        let class = pool
            .geometry()
            .class_for(((stored + header).min(c.unit)) as u32)
            .expect("a class");
        rounding += u64::from(class.size) - stored as u64;
        handles.push(h);
    }
    let ps = c.page as u64;
    let mem = pool.total_pages() as u64 * ps;
    // A class counts pages of its geometry: 4 KiB frames in a framed pool.
    let class_page = u64::from(pool.geometry().page_size());
    let mut tails = 0;
    let mut partial = 0;
    let mut counted = 0;
    for (row, info) in pool.class_stats().iter().zip(pool.geometry().classes()) {
        counted += row.pages_used * class_page;
        if row.obj_used == 0 {
            continue;
        }
        let slack = row.pages_used * class_page - row.obj_used * u64::from(row.size);
        let full = row.obj_used / u64::from(info.objs_per_zspage);
        let t = (full * u64::from(info.tail_waste)).min(slack);
        tails += t;
        partial += slack - t;
    }
    // Free a seeded half (a fixed xorshift stream), compact, measure again.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut left = 0u64;
    for (h, &len) in handles.into_iter().zip(lens) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if x & 1 == 0 {
            pool.free(h).expect("free");
        } else {
            left += if len >= huge_at { c.unit } else { len } as u64;
        }
    }
    pool.compact();
    let after = pool.total_pages() as u64 * ps;
    Waste {
        compr,
        mem,
        rounding,
        tails,
        partial,
        shared: mem - counted,
        huge,
        half: pct(after, left),
    }
}

fn pct(mem: u64, compr: u64) -> f64 {
    (mem as f64 - compr as f64) / compr as f64 * 100.0
}

fn lengths(path: &PathBuf, block: usize, comp: &str) -> Vec<usize> {
    let meta = std::fs::metadata(path).expect("input");
    let stamp = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_secs());
    let name = path
        .file_name()
        .map_or(String::new(), |s| s.to_string_lossy().into_owned());
    let cache = std::env::temp_dir().join(format!(
        "zmem-waste-{name}-{}-{stamp}-{block}-{comp}.lens",
        meta.len()
    ));
    if let Ok(text) = std::fs::read_to_string(&cache) {
        return text
            .lines()
            .map(|l| l.parse().expect("cached length"))
            .collect();
    }
    let out = compressed_lengths(path, block, comp);
    let text: String = out.iter().map(|l| format!("{l}\n")).collect();
    // The cache only saves time: a failed write changes no figure.
    let _ = std::fs::write(&cache, text);
    out
}

fn compressed_lengths(path: &PathBuf, block: usize, comp: &str) -> Vec<usize> {
    let corpus = tune::corpus::Corpus::from_paths(std::slice::from_ref(path), true).expect("input");
    let compressor = zcomp::Compressor::parse(comp, "").expect("compressor");
    let mut ctx = compressor.context().expect("context");
    let mut out = Vec::new();
    corpus
        .for_each_page(block, |_, page| {
            let w = &page[..8];
            if page.chunks_exact(8).all(|c| c == w) {
                return Ok(());
            }
            out.push(ctx.compress_buffered(page).expect("compress").len());
            Ok(())
        })
        .expect("read");
    out
}

fn main() {
    let paths: Vec<PathBuf> = std::env::args().skip(1).map(PathBuf::from).collect();
    let configs = [
        (4096, 4096),
        (16384, 16384),
        (65536, 65536),
        (4096, 16384),
        (4096, 65536),
    ];
    println!("| input | comp | configuration | mode | over compr | rounding | full-zspage tails | partial zspages | free frames | huge | half + compact |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for path in &paths {
        let name = path
            .file_stem()
            .map_or(String::new(), |s| s.to_string_lossy().into_owned());
        for comp in ["lz4", "zstd"] {
            for &(page, unit) in &configs {
                let lens = lengths(path, unit, comp);
                for mode in [Mode::Default, Mode::KernelCompat] {
                    let c = Config { page, unit, mode };
                    let w = measure(&c, &lens);
                    let label = if unit > page {
                        format!("--unit {}K", unit / 1024)
                    } else {
                        format!("--page-size {}K", page / 1024)
                    };
                    let share = |b: u64| format!("{:.2}%", b as f64 / w.compr as f64 * 100.0);
                    println!(
                        "| {name} | {comp} | {label} | {mode} | {:.2}% | {} | {} | {} | {} | {} | {:.2}% |",
                        pct(w.mem, w.compr),
                        share(w.rounding),
                        share(w.tails),
                        share(w.partial),
                        share(w.shared),
                        w.huge,
                        w.half,
                    );
                }
            }
        }
    }
}
