//! A read-only loop over a filled store, for profiling and timing the store's
//! read path alone (`perf record`, `perf stat`): it fills a store with the
//! pages of a file, then reads every page back `ROUNDS` times and prints the
//! thread's CPU time per page. It owns nothing of the store and changes none
//! of it; `zmem bench store` is the benchmark of record.
//!
//! ```sh
//! cargo run --release -p zmem-zram --example read_loop -- FILE [MIB] [ROUNDS] [MODE] [COMP]
//! ```
//!
//! MODE is `kernel-compat` (the default) or `default`; COMP a zram
//! compressor name (default `lzo-rle`).

use std::sync::Arc;

use zalloc::AllocOptions;
use zcomp::Compressor;
use zram::Store;
use zsmalloc::Mode;

fn thread_cpu_seconds() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let path = args
        .get(1)
        .expect("usage: read_loop FILE [MIB] [ROUNDS] [MODE] [COMP]");
    let mib: usize = args.get(2).map_or(64, |s| s.parse().expect("MIB"));
    let rounds: usize = args.get(3).map_or(10, |s| s.parse().expect("ROUNDS"));
    let mode = match args.get(4).map_or("kernel-compat", String::as_str) {
        "kernel-compat" => Mode::KernelCompat,
        "default" => Mode::Default,
        other => panic!("unknown mode {other}"),
    };
    let comp = args.get(5).map_or("lzo-rle", String::as_str);
    let mut data = std::fs::read(path).expect("read the input");
    data.truncate(mib << 20);
    let ps = 4096;
    let pages = data.len() / ps;
    let opts = AllocOptions {
        mode,
        ..AllocOptions::default()
    };
    let pool = zalloc::open("zsmalloc", &opts).expect("pool");
    let compressor = Compressor::parse(comp, "").expect("compressor");
    let mut ctx = compressor.context().expect("context");
    let compressed: Vec<Vec<u8>> = data
        .chunks_exact(ps)
        .map(|p| ctx.compress_buffered(p).expect("compress").to_vec())
        .collect();
    let store = Store::new(Arc::clone(&pool), compressor, pages as u64).expect("store");
    for (i, page) in data.chunks_exact(ps).enumerate() {
        store.write_page(i as u64, page).expect("write");
    }
    let mut buf = vec![0u8; ps];
    for (i, page) in data.chunks_exact(ps).enumerate() {
        store.read_page(i as u64, &mut buf).expect("read");
        assert!(buf == page, "page {i} read back different bytes");
    }
    // Raw decompression and store reads alternate round by round, so both
    // see the same machine.
    let (mut raw, mut reads) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let t = thread_cpu_seconds();
        for c in &compressed {
            ctx.decompress(c, &mut buf).expect("decompress");
            std::hint::black_box(&buf);
        }
        raw.push(thread_cpu_seconds() - t);
        let t = thread_cpu_seconds();
        for i in 0..pages {
            store.read_page(i as u64, &mut buf).expect("read");
            std::hint::black_box(&buf);
        }
        reads.push(thread_cpu_seconds() - t);
    }
    raw.sort_by(f64::total_cmp);
    reads.sort_by(f64::total_cmp);
    let mb = (pages * ps) as f64 / 1e6;
    let ns = |s: f64| s * 1e9 / pages as f64;
    println!(
        "{path}: {pages} pages, {rounds} rounds, MB/s by CPU time (best / median): raw decompress {:.1} / {:.1}, store read {:.1} / {:.1} ({:.3}x raw); ns a page (best): raw {:.1}, store {:.1}, store - raw {:.1}",
        mb / raw[0],
        mb / raw[rounds / 2],
        mb / reads[0],
        mb / reads[rounds / 2],
        raw[0] / reads[0],
        ns(raw[0]),
        ns(reads[0]),
        ns(reads[0]) - ns(raw[0]),
    );
}
