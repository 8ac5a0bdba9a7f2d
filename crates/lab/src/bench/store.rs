//! `zmem bench store`: the store's speed against the compressor's own.
//!
//! On the same pages, in one run, interleaved round by round so that a
//! noisy machine affects both sides alike:
//! - raw compression of every page with one context (the floor a store
//!   cannot beat) against `Store::write_page` of every page on one thread;
//! - raw compression plus one copy of the compressed bytes into memory
//!   that is already resident, on one and on two threads: the ceiling of
//!   any store that places objects by their compressed size (it must
//!   compress before it knows where the bytes go, so it copies them once,
//!   as the kernel's zram does), and the best case of that copy, since
//!   the bytes land side by side and no page is faulted in;
//!   The same on one thread into fresh memory (a new mapping each round,
//!   faulted in by the copies, 4 KiB pages or transparent huge pages): the
//!   ceiling of a user-space store filling new pool pages, which the
//!   kernel zeroes and maps for it where the kernel's zram takes pages
//!   from its own allocator unzeroed;
//! - raw decompression against `Store::read_page`;
//! - the store's writes and reads on two threads (each its own half of the
//!   pages) against one;
//! - churn on one thread: in a filled store, discard every other page and
//!   write it again, twice (evens, then odds), as a filesystem that deletes
//!   and rewrites files does; the store's background compactor (on by
//!   default in default mode) works meanwhile, its counters are reported,
//!   and the same churn with it off runs in the same round for the ratio;
//! - where the kernel's zram can be used (root, `/sys/class/zram-control`,
//!   4 KiB pages, a compressor it has), the kernel's own zram on the same
//!   pages: a new device each round, written and read with direct I/O in
//!   1 MiB requests from one thread (`dd bs=1M oflag=direct`), the peer
//!   whose overheads the store's are compared with.
//!
//! Each figure is the median over the rounds; the report gives the ratios.
//! Owns the benchmark; the store and compressors are their crates'.

use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use serde::Serialize;
use zram::{AutoCompactMode, AutoCompactPolicy, Store};

use crate::kernel_zram::{KernelZram, PageBuffer};

use crate::fresh_memory::{Backing, FreshMemory};
use crate::Error;
use recipe::output::{write_stdout, Format, FormatArg};
use recipe::spec::{StoreArgs, StoreSpec};
use tune::corpus::Corpus;

/// Arguments of `zmem bench store`.
#[derive(Args, Debug)]
pub struct StoreBenchArgs {
    /// Input files (default: the built-in corpus of /usr files).
    paths: Vec<PathBuf>,
    #[command(flatten)]
    store: StoreArgs,
    /// Bytes of input used (4K to 1T).
    #[arg(long, value_parser = recipe::flags::size(4096, 1 << 40), default_value = "64M")]
    size: u64,
    /// Rounds; each figure is the median (1 to 1000).
    #[arg(long, default_value_t = 5, value_parser = recipe::flags::whole_usize(1, 1000))]
    rounds: usize,
    #[command(flatten)]
    format: FormatArg,
    /// Do not run the kernel's zram beside the store.
    #[arg(long)]
    no_kernel: bool,
}

/// The kernel's zram as the peer of one configuration, or why not.
fn kernel_peer(
    args: &StoreBenchArgs,
    spec: &StoreSpec,
    bytes: u64,
) -> Result<(KernelZram, String), String> {
    if args.no_kernel {
        return Err("not asked for (--no-kernel)".into());
    }
    if spec.unit.is_some() {
        return Err("the kernel's zram compresses one page at a time, not a larger unit".into());
    }
    if spec.page_size != KernelZram::page_size() {
        return Err(format!(
            "the kernel's pages are {} bytes, not {}",
            KernelZram::page_size(),
            spec.page_size
        ));
    }
    if !spec.comp_params.is_empty() {
        return Err("compressor settings are not passed to the kernel".into());
    }
    // lz4-flex is zmem's second lz4 implementation; the kernel has one.
    let comp = if spec.comp == zcomp::Algorithm::Lz4Flex {
        "lz4"
    } else {
        spec.comp.name()
    };
    Ok((KernelZram::create(comp, bytes)?, comp.to_string()))
}

#[derive(Debug, Serialize)]
struct Figures {
    config: String,
    corpus: String,
    pages: usize,
    /// MiB/s, medians.
    raw_compress: f64,
    /// Raw compression on two threads against one: the machine's ceiling.
    raw_compress_2t_vs_1t: f64,
    /// Raw compression plus one copy of the compressed bytes into resident
    /// memory, one thread and two (MiB/s of pages, medians): the write
    /// ceiling of a store that places objects by their compressed size.
    compress_copy_1t: f64,
    compress_copy_2t: f64,
    /// The same, one thread, into fresh memory: 4 KiB pages, huge pages.
    compress_copy_fresh_small: f64,
    compress_copy_fresh_huge: f64,
    store_write_1t: f64,
    store_write_2t: f64,
    /// Writing every page again into the filled store (memory recycled).
    store_overwrite_1t: f64,
    /// Churn: half the pages discarded and written again, twice; MiB/s of
    /// pages written.
    store_churn_1t: f64,
    /// The same churn in the same rounds with background compaction off
    /// (when the configuration has it on).
    store_churn_1t_auto_off: Option<f64>,
    /// The background compactor's counters after the last round's churn.
    auto_compact: Option<zram::AutoCompactStats>,
    raw_decompress: f64,
    store_read_1t: f64,
    store_read_2t: f64,
    write_vs_raw: f64,
    overwrite_vs_raw: f64,
    read_vs_raw: f64,
    write_2t_vs_1t: f64,
    read_2t_vs_1t: f64,
    /// The kernel's zram on the same pages (MiB/s, medians), if it ran.
    kernel_write: Option<f64>,
    kernel_read: Option<f64>,
    kernel_write_2t: Option<f64>,
    kernel_read_2t: Option<f64>,
    /// Why the kernel's zram did not run.
    kernel_skipped: Option<String>,
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn parallel(threads: usize, pages: usize, f: impl Fn(std::ops::Range<usize>) + Sync) {
    std::thread::scope(|s| {
        let per = pages.div_ceil(threads);
        for t in 0..threads {
            let f = &f;
            s.spawn(move || f(t * per..((t + 1) * per).min(pages)));
        }
    });
}

/// Compresses every `ps`-byte page of `data` with `ctx` and copies each
/// result right after the previous one in `out`: the work of the write
/// ceilings. Returns the seconds it took.
fn compress_and_copy(
    ctx: &mut zcomp::Context,
    data: &[u8],
    ps: usize,
    out: &mut [u8],
) -> Result<f64, Error> {
    let t = Instant::now();
    let mut at = 0;
    for p in data.chunks_exact(ps) {
        let z = ctx
            .compress_buffered(p)
            .map_err(|e| Error::Failed(e.to_string()))?;
        out.get_mut(at..at + z.len())
            .ok_or_else(|| Error::Failed("compression output changed size".into()))?
            .copy_from_slice(z);
        at += z.len();
    }
    Ok(t.elapsed().as_secs_f64())
}

/// Runs `zmem bench store`.
pub fn run(args: &StoreBenchArgs) -> Result<(), Error> {
    let corpus = if args.paths.is_empty() {
        Corpus::default_corpus(args.size)?
    } else {
        Corpus::from_paths(&args.paths, true)?
    };
    let mut out = Vec::new();
    for spec in args.store.specs()? {
        let ps = spec.block_size();
        let mut data = Vec::new();
        corpus.for_each_page(ps, |_, page| {
            if (data.len() as u64) < args.size {
                data.extend_from_slice(page);
            }
            Ok(())
        })?;
        let pages = data.len() / ps;
        if pages == 0 {
            return Err(Error::Usage("no input pages".into()));
        }
        let mib = data.len() as f64 / 1048576.0;
        let comp = zcomp::Compressor::with_params(spec.comp, &spec.comp_params)
            .map_err(|e| Error::Usage(e.to_string()))?;
        let mut ctx = comp.context().map_err(|e| Error::Failed(e.to_string()))?;
        let compressed: Vec<Vec<u8>> = data
            .chunks_exact(ps)
            .map(|p| ctx.compress_buffered(p).map(<[u8]>::to_vec))
            .collect::<Result<_, _>>()
            .map_err(|e| Error::Failed(e.to_string()))?;
        let store_for = || -> Result<Store, Error> { spec.open(data.len() as u64) };
        let (mut rc, mut rd, mut w1, mut w2, mut r1, mut r2, mut o1) =
            (vec![], vec![], vec![], vec![], vec![], vec![], vec![]);
        let (mut churn, mut churn_off) = (vec![], vec![]);
        let mut auto = None;
        let (mut kw, mut kr, mut kw2, mut kr2) = (vec![], vec![], vec![], vec![]);
        let (mut rc2, mut cc1, mut cc2) = (vec![], vec![], vec![]);
        let (mut ccs, mut cch) = (vec![], vec![]);
        // Where the ceiling's copies go: written once here, so resident.
        let total: usize = compressed.iter().map(Vec::len).sum();
        let mut arena = vec![1u8; total + 2 * ps];
        let kernel = kernel_peer(args, &spec, data.len() as u64);
        let aligned = kernel.is_ok().then(|| PageBuffer::copy_of(&data));
        for _ in 0..args.rounds.max(1) {
            if let (Ok((dev, comp)), Some(input)) = (&kernel, &aligned) {
                let failed = |e: String| Error::Failed(format!("kernel zram{}: {e}", dev.id()));
                dev.reinit(comp, data.len() as u64).map_err(failed)?;
                let t = Instant::now();
                dev.write_all(input).map_err(|e| failed(e.to_string()))?;
                kw.push(mib / t.elapsed().as_secs_f64());
                let mut back = PageBuffer::zeroed(data.len());
                let t = Instant::now();
                dev.read_all(&mut back).map_err(|e| failed(e.to_string()))?;
                kr.push(mib / t.elapsed().as_secs_f64());
                if back[..] != data[..] {
                    return Err(failed("read back different bytes".into()));
                }
                // Two threads, each its own half, as for the store.
                dev.reinit(comp, data.len() as u64).map_err(failed)?;
                let half = pages.div_ceil(2) * ps;
                let t = Instant::now();
                let written: Vec<std::io::Result<()>> = std::thread::scope(|s| {
                    let jobs =
                        [0..half, half..data.len()].map(|r| s.spawn(|| dev.write_range(input, r)));
                    jobs.map(|j| {
                        j.join()
                            .unwrap_or_else(|_| Err(std::io::Error::other("panicked")))
                    })
                    .into()
                });
                written
                    .into_iter()
                    .collect::<std::io::Result<()>>()
                    .map_err(|e| failed(e.to_string()))?;
                kw2.push(mib / t.elapsed().as_secs_f64());
                back.fill(0);
                let (lo, hi) = back.split_at_mut(half);
                let t = Instant::now();
                let read: Vec<std::io::Result<()>> = std::thread::scope(|s| {
                    let jobs = [
                        s.spawn(|| dev.read_range(lo, 0)),
                        s.spawn(|| dev.read_range(hi, half)),
                    ];
                    jobs.map(|j| {
                        j.join()
                            .unwrap_or_else(|_| Err(std::io::Error::other("panicked")))
                    })
                    .into()
                });
                read.into_iter()
                    .collect::<std::io::Result<()>>()
                    .map_err(|e| failed(e.to_string()))?;
                kr2.push(mib / t.elapsed().as_secs_f64());
                if back[..] != data[..] {
                    return Err(failed("two threads read back different bytes".into()));
                }
            }
            let t = Instant::now();
            for p in data.chunks_exact(ps) {
                std::hint::black_box(
                    ctx.compress_buffered(p)
                        .map_err(|e| Error::Failed(e.to_string()))?,
                );
            }
            rc.push(mib / t.elapsed().as_secs_f64());
            let mut buf = vec![0u8; ps];
            let t = Instant::now();
            for c in &compressed {
                ctx.decompress(c, &mut buf)
                    .map_err(|e| Error::Failed(e.to_string()))?;
                std::hint::black_box(&buf);
            }
            rd.push(mib / t.elapsed().as_secs_f64());
            // Raw compression on two threads, each its own context and half:
            // what this machine's two CPUs allow at best.
            let t = Instant::now();
            parallel(2, pages, |range| {
                if let Ok(mut c) = comp.context() {
                    for i in range {
                        let _ =
                            std::hint::black_box(c.compress_buffered(&data[i * ps..(i + 1) * ps]));
                    }
                }
            });
            rc2.push(mib / t.elapsed().as_secs_f64());
            // The ceiling: compression and the one copy, one thread...
            cc1.push(mib / compress_and_copy(&mut ctx, &data, ps, &mut arena)?);
            std::hint::black_box(&arena);
            // ...and two, each its own context, half of the pages and half
            // of the arena.
            let half = pages.div_ceil(2) * ps;
            let split = compressed[..pages.div_ceil(2)]
                .iter()
                .map(Vec::len)
                .sum::<usize>()
                + ps;
            let (lo, hi) = arena.split_at_mut(split);
            let t = Instant::now();
            let copied: Vec<Result<f64, Error>> = std::thread::scope(|sc| {
                let jobs = [(&data[..half], lo), (&data[half..], hi)].map(|(pages, out)| {
                    let comp = &comp;
                    sc.spawn(move || {
                        let mut c = comp.context().map_err(|e| Error::Failed(e.to_string()))?;
                        compress_and_copy(&mut c, pages, ps, out)
                    })
                });
                jobs.map(|j| {
                    j.join()
                        .unwrap_or_else(|_| Err(Error::Failed("a ceiling thread panicked".into())))
                })
                .into()
            });
            copied.into_iter().collect::<Result<Vec<f64>, Error>>()?;
            cc2.push(mib / t.elapsed().as_secs_f64());
            std::hint::black_box(&arena);
            // ...and one thread into fresh memory, mapped outside the timing.
            for (backing, v) in [
                (Backing::SmallPages, &mut ccs),
                (Backing::HugePages, &mut cch),
            ] {
                let mut fresh = FreshMemory::map(total + 2 * ps, backing)
                    .map_err(|e| Error::Failed(format!("fresh memory: {e}")))?;
                let out = fresh.as_mut_slice();
                v.push(mib / compress_and_copy(&mut ctx, &data, ps, out)?);
                std::hint::black_box(&out);
            }
            // Churn, on a filled store with the configuration's background
            // compaction and, in the same round, with it off.
            let off = AutoCompactPolicy::new(AutoCompactMode::Off);
            for (k, (policy, cv)) in [(spec.auto_compact, &mut churn), (off, &mut churn_off)]
                .into_iter()
                .enumerate()
            {
                if k == 1 && spec.auto_compact.mode == AutoCompactMode::Off {
                    continue; // the configuration's own run was this one
                }
                let store = store_for()?;
                store
                    .set_auto_compact(policy)
                    .map_err(|e| Error::Failed(e.to_string()))?;
                let mut ok = true;
                for i in 0..pages {
                    ok &= store
                        .write_page(i as u64, &data[i * ps..(i + 1) * ps])
                        .is_ok();
                }
                let t = Instant::now();
                for parity in 0..2 {
                    for i in (parity..pages).step_by(2) {
                        ok &= store.discard(i as u64, 1).is_ok();
                    }
                    for i in (parity..pages).step_by(2) {
                        ok &= store
                            .write_page(i as u64, &data[i * ps..(i + 1) * ps])
                            .is_ok();
                    }
                }
                cv.push(mib / t.elapsed().as_secs_f64());
                if policy.mode != AutoCompactMode::Off {
                    auto = store.debug_stat().auto_compact;
                }
                if !ok {
                    return Err(Error::Failed(format!(
                        "{}: a churn write or discard failed",
                        spec.label()
                    )));
                }
            }
            for (threads, wv, rv) in [(1usize, &mut w1, &mut r1), (2, &mut w2, &mut r2)] {
                let store = store_for()?;
                let failed = std::sync::atomic::AtomicBool::new(false);
                let t = Instant::now();
                parallel(threads, pages, |range| {
                    for i in range {
                        if store
                            .write_page(i as u64, &data[i * ps..(i + 1) * ps])
                            .is_err()
                        {
                            failed.store(true, std::sync::atomic::Ordering::Relaxed);
                        }
                    }
                });
                wv.push(mib / t.elapsed().as_secs_f64());
                let t = Instant::now();
                parallel(threads, pages, |range| {
                    let mut buf = vec![0u8; ps];
                    for i in range {
                        if store.read_page(i as u64, &mut buf).is_err() {
                            failed.store(true, std::sync::atomic::Ordering::Relaxed);
                        }
                        std::hint::black_box(&buf);
                    }
                });
                rv.push(mib / t.elapsed().as_secs_f64());
                // Checked outside the timed loop.
                let mut buf = vec![0u8; ps];
                for i in 0..pages {
                    if store.read_page(i as u64, &mut buf).is_err()
                        || buf != data[i * ps..(i + 1) * ps]
                    {
                        failed.store(true, std::sync::atomic::Ordering::Relaxed);
                    }
                }
                if threads == 1 {
                    let t = Instant::now();
                    for i in 0..pages {
                        if store
                            .write_page(i as u64, &data[i * ps..(i + 1) * ps])
                            .is_err()
                        {
                            failed.store(true, std::sync::atomic::Ordering::Relaxed);
                        }
                    }
                    o1.push(mib / t.elapsed().as_secs_f64());
                }
                if failed.into_inner() {
                    return Err(Error::Failed(format!(
                        "{}: a page did not store or read back",
                        spec.label()
                    )));
                }
            }
        }
        let (rc, rd) = (median(&mut rc), median(&mut rd));
        let (w1, w2, r1, r2) = (
            median(&mut w1),
            median(&mut w2),
            median(&mut r1),
            median(&mut r2),
        );
        out.push(Figures {
            config: spec.label(),
            corpus: corpus.description.clone(),
            pages,
            raw_compress: rc,
            raw_compress_2t_vs_1t: median(&mut rc2) / rc,
            compress_copy_1t: median(&mut cc1),
            compress_copy_2t: median(&mut cc2),
            compress_copy_fresh_small: median(&mut ccs),
            compress_copy_fresh_huge: median(&mut cch),
            store_write_1t: w1,
            store_write_2t: w2,
            store_overwrite_1t: median(&mut o1),
            store_churn_1t: median(&mut churn),
            store_churn_1t_auto_off: (!churn_off.is_empty()).then(|| median(&mut churn_off)),
            auto_compact: auto,
            raw_decompress: rd,
            store_read_1t: r1,
            store_read_2t: r2,
            write_vs_raw: w1 / rc,
            overwrite_vs_raw: median(&mut o1) / rc,
            read_vs_raw: r1 / rd,
            write_2t_vs_1t: w2 / w1,
            read_2t_vs_1t: r2 / r1,
            kernel_write: (!kw.is_empty()).then(|| median(&mut kw)),
            kernel_read: (!kr.is_empty()).then(|| median(&mut kr)),
            kernel_write_2t: (!kw2.is_empty()).then(|| median(&mut kw2)),
            kernel_read_2t: (!kr2.is_empty()).then(|| median(&mut kr2)),
            kernel_skipped: kernel.err(),
        });
    }
    match args.format.get() {
        Format::Json => write_stdout(
            &(serde_json::to_string_pretty(&out).map_err(|e| Error::Failed(e.to_string()))? + "\n"),
        ),
        Format::Table => {
            let mut s = format!(
                "corpus: {}\nMiB/s, medians of {} rounds\n",
                corpus.description, args.rounds
            );
            for f in &out {
                s.push_str(&format!(
                    "\n{} ({} pages)\n  write: raw compress {:8.1}  store 1 thread {:8.1}  ({:.2}x raw)  2 threads {:8.1}  ({:.2}x one; raw compression {:.2}x one)\n  ceiling: compress + one copy into resident memory {:8.1}  ({:.2}x raw)  2 threads {:8.1}\n           into fresh memory, 4 KiB pages {:8.1}  ({:.2}x raw)  huge pages {:8.1}  ({:.2}x raw)\n  overwrite of a full store, 1 thread {:8.1}  ({:.2}x raw)  churn (discard and rewrite half, twice) {:8.1}\n  read:  raw decompress {:6.1}  store 1 thread {:8.1}  ({:.2}x raw)  2 threads {:8.1}  ({:.2}x one)\n",
                    f.config, f.pages, f.raw_compress, f.store_write_1t, f.write_vs_raw, f.store_write_2t, f.write_2t_vs_1t, f.raw_compress_2t_vs_1t,
                    f.compress_copy_1t, f.compress_copy_1t / f.raw_compress, f.compress_copy_2t,
                    f.compress_copy_fresh_small, f.compress_copy_fresh_small / f.raw_compress,
                    f.compress_copy_fresh_huge, f.compress_copy_fresh_huge / f.raw_compress,
                    f.store_overwrite_1t, f.overwrite_vs_raw, f.store_churn_1t,
                    f.raw_decompress, f.store_read_1t, f.read_vs_raw, f.store_read_2t, f.read_2t_vs_1t
                ));
                if let Some(off) = f.store_churn_1t_auto_off {
                    s.push_str(&format!(
                        "  churn with background compaction off, same rounds {:8.1}  (on: {:.3}x off)\n",
                        off,
                        f.store_churn_1t / off
                    ));
                }
                if let Some(a) = &f.auto_compact {
                    s.push_str(&format!(
                        "  background compaction in the last churn: {} runs, {} pages freed, {} objects moved, {:.1} ms CPU, longest step {} us\n",
                        a.runs, a.pages_freed, a.objs_moved, a.cpu_ns as f64 / 1e6, a.longest_step_ns / 1000
                    ));
                }
                match (f.kernel_write, f.kernel_read, &f.kernel_skipped) {
                    (Some(w), Some(r), _) => {
                        let (w2, r2) = (
                            f.kernel_write_2t.unwrap_or(f64::NAN),
                            f.kernel_read_2t.unwrap_or(f64::NAN),
                        );
                        s.push_str(&format!(
                            "  kernel zram (direct I/O, 1 MiB requests):\n    write: 1 thread {:8.1}  ({:.2}x raw; store {:.2}x kernel, ceiling {:.2}x)  2 threads {:8.1}  ({:.2}x one; store {:.2}x kernel, ceiling {:.2}x)\n    read:  1 thread {:8.1}  ({:.2}x raw; store {:.2}x kernel)  2 threads {:8.1}  ({:.2}x one; store {:.2}x kernel)\n",
                            w, w / f.raw_compress, f.store_write_1t / w, f.compress_copy_1t / w,
                            w2, w2 / w, f.store_write_2t / w2, f.compress_copy_2t / w2,
                            r, r / f.raw_decompress, f.store_read_1t / r, r2, r2 / r, f.store_read_2t / r2
                        ));
                        s.push_str(&format!(
                            "    write ceilings against the kernel, 1 thread: resident {:.2}x, fresh 4 KiB pages {:.2}x, fresh huge pages {:.2}x\n",
                            f.compress_copy_1t / w,
                            f.compress_copy_fresh_small / w,
                            f.compress_copy_fresh_huge / w
                        ))
                    }
                    (_, _, Some(why)) => s.push_str(&format!("  kernel zram: not run ({why})\n")),
                    _ => {}
                }
            }
            write_stdout(&s)
        }
    }
}
