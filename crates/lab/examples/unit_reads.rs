//! What a compression unit larger than a page costs a 4 KiB read.
//!
//! `cargo run --release -p zmem-lab --example unit_reads -- FILE [MIB]`
//! stores the first MIB (64 by default) of FILE in a default-mode store on
//! 4 KiB pages with each unit (4, 16, 64 KiB) and compressor (lz4, zstd),
//! on one thread, and prints: the write speed, the memory used, and for
//! 4 KiB reads at random offsets and in order the mean latency, the
//! throughput of useful bytes and the read amplification (bytes
//! decompressed per byte asked for). A read of 4 KiB decompresses its
//! whole unit, as the NBD export's read-modify-write path does. It also
//! counts how often the unit of a read is one of the last 16 read (what a
//! small cache of decompressed units would hit). As root, where the
//! kernel's zram can be used, it first does the same with a new kernel
//! zram device (lz4, 4 KiB pages, direct I/O; removed at the end, never
//! zram0) and gives each row's memory as a multiple of the kernel's. It
//! owns nothing but its own output.

use std::collections::VecDeque;
use std::fs::OpenOptions;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use lab::kernel_zram::{KernelZram, PageBuffer};
use zram::Store;

const READS: usize = 100_000;
const CACHE_UNITS: usize = 16;

fn store(unit: usize, comp: &str, blocks: u64) -> Store {
    let opts = zalloc::AllocOptions {
        unit: (unit > 4096).then_some(unit),
        ..zalloc::AllocOptions::default()
    };
    let pool = zalloc::open("zsmalloc", &opts).expect("pool");
    let comp = zcomp::Compressor::parse(comp, "").expect("compressor");
    Store::with_block_size(Arc::clone(&pool), comp, blocks, unit).expect("store")
}

/// 4 KiB reads at `offsets` (4 KiB indexes): (mean ns, useful MB/s, hits of
/// a 16-unit cache in percent).
fn reads(s: &Store, unit: usize, offsets: &[u64]) -> (f64, f64, f64) {
    let per = (unit / 4096) as u64;
    let mut block = vec![0u8; unit];
    let mut out = [0u8; 4096];
    let mut recent: VecDeque<u64> = VecDeque::new();
    let mut hits = 0usize;
    let t = Instant::now();
    for &o in offsets {
        let b = o / per;
        if recent.contains(&b) {
            hits += 1;
        } else {
            recent.push_back(b);
            if recent.len() > CACHE_UNITS {
                recent.pop_front();
            }
        }
        s.read_page(b, &mut block).expect("read");
        let at = ((o % per) * 4096) as usize;
        out.copy_from_slice(&block[at..at + 4096]);
        std::hint::black_box(&out);
    }
    let secs = t.elapsed().as_secs_f64();
    let n = offsets.len() as f64;
    (
        secs / n * 1e9,
        n * 4096.0 / secs / 1e6,
        hits as f64 / n * 100.0,
    )
}

/// The kernel's zram with lz4 on the same data: (write MB/s, mem_used_total,
/// random and in-order 4 KiB reads as (mean ns, MB/s)), or why not.
fn kernel(data: &[u8], random: &[u64], in_order: &[u64]) -> Result<KernelRow, String> {
    let dev = KernelZram::create("lz4", data.len() as u64)?;
    let input = PageBuffer::copy_of(data);
    let t = Instant::now();
    dev.write_all(&input).map_err(|e| e.to_string())?;
    let write = data.len() as f64 / t.elapsed().as_secs_f64() / 1e6;
    let mem = dev.mm_stat()?[2];
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(dev.node())
        .map_err(|e| e.to_string())?;
    let mut out = PageBuffer::zeroed(4096);
    let mut run = |offsets: &[u64]| -> Result<(f64, f64), String> {
        let t = Instant::now();
        for &o in offsets {
            file.read_exact_at(&mut out, o * 4096)
                .map_err(|e| e.to_string())?;
            std::hint::black_box(&out[..]);
        }
        let secs = t.elapsed().as_secs_f64();
        let n = offsets.len() as f64;
        Ok((secs / n * 1e9, n * 4096.0 / secs / 1e6))
    };
    let random = run(random)?;
    let in_order = run(in_order)?;
    Ok(KernelRow {
        write,
        mem,
        random,
        in_order,
    })
}

/// The kernel's figures (see [`kernel`]).
struct KernelRow {
    write: f64,
    mem: u64,
    random: (f64, f64),
    in_order: (f64, f64),
}

fn main() {
    let mut args = std::env::args().skip(1);
    let path = PathBuf::from(args.next().expect("FILE"));
    let mib: usize = args.next().map_or(64, |m| m.parse().expect("MIB"));
    let mut data = std::fs::read(&path).expect("read FILE");
    data.truncate(mib << 20);
    data.truncate(data.len() / 65536 * 65536);
    let pages = (data.len() / 4096) as u64;
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    let random: Vec<u64> = (0..READS)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % pages
        })
        .collect();
    let in_order: Vec<u64> = (0..READS as u64).map(|i| i % pages).collect();
    let peer = kernel(&data, &random, &in_order);
    println!("| comp | unit | write MB/s | mem_used_total | x kernel lz4 | random 4K read ns | random MB/s | in-order 4K read ns | in-order MB/s | amplification | 16-unit cache hits, random / in order |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    let kernel_mem = match &peer {
        Ok(k) => {
            println!(
                "| lz4 | kernel zram, 4K | {:.0} | {} | 1.000x | {:.0} | {:.0} | {:.0} | {:.0} | 1x | |",
                k.write, k.mem, k.random.0, k.random.1, k.in_order.0, k.in_order.1
            );
            Some(k.mem)
        }
        Err(why) => {
            eprintln!("kernel zram not run: {why}");
            None
        }
    };
    for comp in ["lz4", "zstd"] {
        for unit in [4096usize, 16384, 65536] {
            let blocks = (data.len() / unit) as u64;
            let s = store(unit, comp, blocks);
            let t = Instant::now();
            for (i, b) in data.chunks_exact(unit).enumerate() {
                s.write_page(i as u64, b).expect("write");
            }
            let write = data.len() as f64 / t.elapsed().as_secs_f64() / 1e6;
            let (rn, rmb, rhit) = reads(&s, unit, &random);
            let (sn, smb, shit) = reads(&s, unit, &in_order);
            let mem = s.mm_stat().mem_used_total;
            let ratio =
                kernel_mem.map_or(String::new(), |k| format!("{:.3}x", mem as f64 / k as f64));
            println!(
                "| {comp} | {}K | {write:.0} | {mem} | {ratio} | {rn:.0} | {rmb:.0} | {sn:.0} | {smb:.0} | {}x | {rhit:.1}% / {shit:.1}% |",
                unit / 1024,
                unit / 4096,
            );
        }
    }
}
