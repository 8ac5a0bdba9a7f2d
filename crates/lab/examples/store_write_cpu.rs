//! CPU time of the store's write path alone, for A/B runs of two builds
//! (the write targets of issues 17 and 21).
//!
//! `cargo run --release -p zmem-lab --example store_write_cpu -- FILE MODE COMP [ROUNDS] [MIB]`
//! (MODE: default or kernel-compat; COMP: a compressor's name) takes the
//! first MIB (64 by default) of FILE as 4 KiB pages and, each round,
//! measures the process's CPU time (user + system, `getrusage`, all
//! threads) and wall time of: raw compression of every page with one
//! context (`raw`); `write_page` of every page into a fresh store on one
//! thread (`fresh1`); an overwrite of every page of that full store
//! (`over1`); a fresh store written by two threads, each its own half, as
//! `zmem bench store` does (`fresh2`); and compression plus a copy of each
//! result into memory that is resident but cold (`copy`). It prints one
//! line per round and the medians, in nanoseconds per page. CPU time moves
//! much less with the machine's load than wall time; under `chrt -f 10`
//! the threads are not preempted, so wall time is usable too and the two
//! writers of `fresh2` really run at once. `SWC_MORE_OVERWRITES=N` and
//! `SWC_MORE_FRESH2=N` add N unmeasured repeats of a phase, for profiles.
//! It owns nothing but its own output.

use std::io::Read;
use std::time::Instant;

use clap::Parser;
use recipe::spec::StoreArgs;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    store: StoreArgs,
}

fn cpu_ns() -> u64 {
    // SAFETY: rusage is plain data (integers and timevals), for which all
    // zero bytes are a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes one rusage into `ru`, which we own;
    // RUSAGE_SELF is always valid.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let t = |tv: libc::timeval| tv.tv_sec as u64 * 1_000_000_000 + tv.tv_usec as u64 * 1000;
    t(ru.ru_utime) + t(ru.ru_stime)
}

fn measure(f: impl FnOnce()) -> (u64, u64) {
    let (c, t) = (cpu_ns(), Instant::now());
    f();
    (cpu_ns() - c, t.elapsed().as_nanos() as u64)
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a.len() < 4 {
        eprintln!("usage: store_write_cpu FILE MODE COMP [ROUNDS] [MIB]");
        std::process::exit(2);
    }
    let file = &a[1];
    let cli = Cli::parse_from(["x", "--mode", &a[2], "--comp", &a[3]]);
    let rounds: usize = a.get(4).map_or(5, |s| s.parse().unwrap());
    let mib: usize = a.get(5).map_or(64, |s| s.parse().unwrap());
    let spec = cli.store.specs().unwrap().remove(0);
    let mut data = Vec::new();
    std::fs::File::open(file)
        .unwrap()
        .take((mib << 20) as u64)
        .read_to_end(&mut data)
        .unwrap();
    let ps = 4096;
    let pages = data.len() / ps;
    let comp = zcomp::Compressor::new(spec.comp, &zcomp::Params::default()).unwrap();
    let mut ctx = comp.context().unwrap();
    let names = ["raw", "fresh1", "over1", "fresh2", "copy"];
    let mut cpu: Vec<Vec<u64>> = vec![vec![]; 5];
    // A bump arena as large as the data, written once before the rounds so
    // its pages are resident: what copying each compressed page into cold,
    // already-faulted memory costs (the floor of any store that keeps the
    // compressed bytes somewhere other than the compressor's buffer).
    let mut arena = vec![1u8; data.len() + 8192];
    for r in 0..rounds {
        let raw = measure(|| {
            for p in data.chunks_exact(ps) {
                std::hint::black_box(ctx.compress_buffered(p).unwrap());
            }
        });
        let store = spec.open(data.len() as u64).unwrap();
        let write_all = |s: &zram::Store| {
            for (i, p) in data.chunks_exact(ps).enumerate() {
                s.write_page(i as u64, p).unwrap();
            }
        };
        let fresh1 = measure(|| write_all(&store));
        let over1 = measure(|| write_all(&store));
        // SWC_MORE_OVERWRITES=N: N more overwrites, unmeasured (for profiles).
        let more: usize = std::env::var("SWC_MORE_OVERWRITES").map_or(0, |v| v.parse().unwrap());
        for _ in 0..more {
            write_all(&store);
        }
        drop(store);
        let fresh_two = || {
            let store = spec.open(data.len() as u64).unwrap();
            let half = pages.div_ceil(2);
            let m = measure(|| {
                std::thread::scope(|s| {
                    for t in 0..2 {
                        let (store, data) = (&store, &data);
                        s.spawn(move || {
                            for i in t * half..((t + 1) * half).min(pages) {
                                store
                                    .write_page(i as u64, &data[i * ps..(i + 1) * ps])
                                    .unwrap();
                            }
                        });
                    }
                })
            });
            drop(store);
            m
        };
        let fresh2 = fresh_two();
        // SWC_MORE_FRESH2=N: N more two-thread fills, unmeasured (for profiles).
        let more: usize = std::env::var("SWC_MORE_FRESH2").map_or(0, |v| v.parse().unwrap());
        for _ in 0..more {
            fresh_two();
        }
        let copy = measure(|| {
            let mut at = 0;
            for p in data.chunks_exact(ps) {
                let c = ctx.compress_buffered(p).unwrap();
                arena[at..at + c.len()].copy_from_slice(c);
                at += c.len();
            }
            std::hint::black_box(&arena);
        });
        let all = [raw, fresh1, over1, fresh2, copy];
        let mut line = format!("round {r}:");
        for (k, (c, w)) in all.iter().enumerate() {
            cpu[k].push(*c);
            line += &format!(
                "  {} cpu {:6.1} wall {:6.1} ns/page",
                names[k],
                *c as f64 / pages as f64,
                *w as f64 / pages as f64
            );
        }
        println!("{line}");
    }
    let mut line = String::from("median cpu ns/page:");
    for (k, v) in cpu.iter_mut().enumerate() {
        v.sort();
        line += &format!("  {} {:.1}", names[k], v[v.len() / 2] as f64 / pages as f64);
    }
    println!("{line}");
}
