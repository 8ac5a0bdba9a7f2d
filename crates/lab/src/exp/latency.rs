//! `zmem exp latency`: allocator latency, the zbud-for-zram thread's
//! question in user space. Does zbud give
//! better worst-case latency than zsmalloc, and what does that cost in
//! memory? Same for z3fold and zblock.
//!
//! Every allocator gets the same fixed-seed workload on the same objects:
//! - **objects**: the pages of a data file (default: the Linux source tar of
//!   `scripts/make-corpus`, if present) or of a built-in generator of
//!   realistic compressible pages (text, heap-like words, code-like
//!   binaries, sparse and random pages), compressed with lz4 (or `--comp`)
//!   through zcomp.
//!   As in zram, same-filled pages are not stored. Pages that compress to
//!   more than the smallest `max_object_size` of the allocators compared
//!   (3968 bytes for zbud on 4 KiB pages) are left out for all of them (zram
//!   would keep them raw, one page each, whatever the allocator), so every
//!   allocator stores exactly the same objects;
//! - **fill**: slot `i` of a zram-like slot table stores object `i`;
//! - **mixed phase** (timed): 50% loads of a random live slot (begin a
//!   read, copy the bytes out where a decompressor would read them, end the
//!   read), 35% stores to a random slot (malloc, write, then free the slot's
//!   old object, as zram's write path), 15% frees of a random slot, plus a
//!   burst every `pages / 4` operations freeing a contiguous 1/32 of the
//!   slots (a process exiting). The random frees fragment every allocator's
//!   pages; about 55% of the slots stay live;
//! - **compaction as zram triggers it**: a background thread compacts the
//!   pool every `--compact-ms` milliseconds (zsmalloc's shrinker under
//!   memory pressure, or a periodic write to zram's `compact`; 0 turns it
//!   off, to see what compaction costs). For zsmalloc
//!   it moves objects between zspages; for z3fold it runs the queued in-page
//!   work; for zbud and zblock it is a no-op, as in the kernel. How often
//!   the thread gets to run depends on the scheduler, so at the end of each
//!   round's timed phase the experiment also compacts once itself (unless
//!   `--compact-ms 0`): the end figures are after a compaction whatever the
//!   machine's load, and the report counts the two kinds of runs apart
//!   (`background_runs`, `driven_runs`).
//!   `--compact-every-ops N` asks for a compaction every N operations
//!   instead, and the thread runs every one asked for: the same number of
//!   compactions in every run, so page-fault counts compare between runs
//!   and machines (the wall-clock default gave 81 to 297 per run on one
//!   machine under varying load). The thread's compactions are background
//!   ones (`ZPool::compact_background`): zsmalloc in default mode keeps the
//!   pages they free resident for reuse within its retained share
//!   (`--retain-divisor`; `--retain-others` gives zbud, z3fold and zblock
//!   the same share), the driven one is manual and gives everything back.
//!   The report shows each allocator's resident-set growth over its pool's
//!   bytes and the pages kept for reuse.
//!
//! Each operation's time (allocator work only: compression happens before
//! the run and is the same for every allocator) goes into an HDR histogram
//! per allocator and operation. Memory is sampled every 4096 operations.
//! With `--rounds` above 1 the allocators take turns round by round, so
//! machine noise spreads evenly over them, and their histograms merge.
//!
//! Owns the experiment only; allocators come from `zalloc::open`.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use hdrhistogram::Histogram;
use serde::Serialize;
use zalloc::AllocOptions;
use zpool::{ObjectRead, ZHandle, ZPool};
use zsmalloc::Mode;

use crate::plot::{self, Chart, Series};
use crate::Error;
use recipe::output::{Format, FormatArg};
use tune::rng::Rng;

/// Arguments of `zmem exp latency`.
#[derive(Args, Debug)]
pub struct LatencyArgs {
    /// Allocators to compare, comma-separated (zsmalloc, zbud, z3fold,
    /// zblock; default: all).
    #[arg(long = "alloc", value_delimiter = ',')]
    alloc: Vec<String>,
    /// zsmalloc's mode (default or kernel-compat).
    #[arg(long, default_value = "default", value_parser = parse_mode)]
    mode: Mode,
    /// Data file whose pages are the objects (default:
    /// $ZMEM_DATA/linux256.bin, else /var/tmp/zmem-data/linux256.bin, if
    /// present; otherwise the built-in generator).
    #[arg(long)]
    data: Option<PathBuf>,
    /// Use the built-in page generator even if the default data file exists.
    #[arg(long, conflicts_with = "data")]
    synthetic: bool,
    /// Pages (and zram slots) in the workload.
    #[arg(long, default_value_t = 65536, value_parser = recipe::flags::whole::<u64>(64, 16_777_216))]
    pages: u64,
    /// Operations in the timed phase, per allocator and round.
    #[arg(long, default_value_t = 2_000_000, value_parser = recipe::flags::whole::<u64>(1000, u64::MAX))]
    ops: u64,
    /// Rounds (allocators take turns; histograms merge).
    #[arg(long, default_value_t = 1, value_parser = recipe::flags::whole::<u32>(1, 100))]
    rounds: u32,
    /// Bytes per page: 4096, 8192, 16384, 32768 or 65536 (or 4K ... 64K).
    #[arg(long, default_value_t = 4096, value_parser = parse_page_size)]
    page_size: usize,
    /// Compressor (as zram's comp_algorithm: lzo-rle, lzo, lz4, lz4hc, zstd, deflate).
    #[arg(long, default_value = "lz4", value_parser = recipe::spec::parse_comp)]
    comp: zcomp::Algorithm,
    /// Milliseconds between the background thread's compactions (0: no
    /// compaction; the only flag here where 0 is valid, with --seed).
    #[arg(long, default_value_t = 20, value_parser = recipe::flags::whole::<u64>(0, 60_000))]
    compact_ms: u64,
    /// Compact every N operations of the timed phase instead of every
    /// `--compact-ms` milliseconds: the workload asks the background thread
    /// for a compaction every N operations, and the thread runs every one
    /// asked for (late ones too), so each round has exactly `ops / N` of
    /// them whatever the machine's speed and load, and page-fault counts
    /// compare between runs.
    #[arg(long, value_parser = recipe::flags::whole::<u64>(100, u64::MAX), conflicts_with = "compact_ms")]
    compact_every_ops: Option<u64>,
    /// zsmalloc's retained share of freed pages: up to one page in N of the
    /// pages it holds stays resident for reuse after compaction, the trim or
    /// a free gives it back (0: none; default: the mode's, 8 in default
    /// mode, 0 in kernel-compat).
    #[arg(long, value_parser = recipe::flags::whole::<u32>(0, 1 << 20))]
    retain_divisor: Option<u32>,
    /// Give zbud, z3fold and zblock zsmalloc's retained share too (their page
    /// sources keep freed pages the same way; they have no compaction, so
    /// only the bound and the decay by time release them).
    #[arg(long)]
    retain_others: bool,
    /// Seed of the workload (any whole number, 0 too).
    #[arg(long, default_value_t = 4, value_parser = recipe::flags::whole::<u64>(0, u64::MAX))]
    seed: u64,
    #[command(flatten)]
    format: FormatArg,
    /// Path stem of the plot (`.svg` and `.png` are added).
    #[arg(long, default_value = "out/exp-latency")]
    plot: PathBuf,
    /// Do not draw the plot.
    #[arg(long)]
    no_plot: bool,
}

fn parse_mode(s: &str) -> Result<Mode, String> {
    s.parse()
}

/// Percentiles of one histogram, in nanoseconds.
#[derive(Clone, Copy, Debug, Serialize)]
struct Percentiles {
    count: u64,
    p50_ns: u64,
    p99_ns: u64,
    p999_ns: u64,
    p9999_ns: u64,
    max_ns: u64,
}

impl Percentiles {
    fn of(h: &Histogram<u64>) -> Percentiles {
        Percentiles {
            count: h.len(),
            p50_ns: h.value_at_quantile(0.5),
            p99_ns: h.value_at_quantile(0.99),
            p999_ns: h.value_at_quantile(0.999),
            p9999_ns: h.value_at_quantile(0.9999),
            max_ns: h.max(),
        }
    }
}

/// Latency by operation.
#[derive(Debug, Serialize)]
struct OpLatency {
    all: Percentiles,
    store: Percentiles,
    load: Percentiles,
    free: Percentiles,
}

/// Memory of one allocator (means over rounds).
#[derive(Debug, Serialize)]
struct Memory {
    /// Pages after the fill.
    pages_after_fill: f64,
    /// Objects after the fill.
    objects_after_fill: f64,
    /// Mean pages over the timed phase.
    mean_pages: f64,
    /// Mean live compressed bytes over the timed phase.
    mean_stored_bytes: f64,
    /// Pages at the end (after the last compaction).
    pages_at_end: f64,
    /// Objects at the end.
    objects_at_end: f64,
    /// Objects per page at the end.
    objects_per_page: f64,
    /// Pool bytes over stored bytes, mean over the timed phase (1.0 = no
    /// overhead).
    used_over_stored: f64,
    /// Mean pages kept resident for reuse by the page source (not in the
    /// pool's pages) over the timed phase.
    mean_retained_pages: f64,
    /// The retained share's divisor (0: only the fixed cache).
    retain_divisor: usize,
    /// The process's resident set growth since the allocator was opened
    /// over the pool's bytes, mean over the timed phase (1.0: the resident
    /// set follows the pool exactly).
    rss_over_used: f64,
}

/// What compaction did (sums over rounds).
#[derive(Debug, Serialize)]
struct Compaction {
    /// Runs in all: `background_runs + driven_runs`.
    runs: u64,
    /// Runs of the background thread during the timed phases (as many as
    /// the scheduler let it make).
    background_runs: u64,
    /// Runs the experiment made itself, one after each round's timed phase
    /// (none with `--compact-ms 0`).
    driven_runs: u64,
    /// Objects moved by all runs.
    objs_moved: u64,
    /// Pages freed by all runs.
    pages_freed: u64,
    /// The longest background run (the ones that ran beside the workload).
    longest_ns: u64,
}

#[derive(Debug, Serialize)]
struct AllocReport {
    name: String,
    latency: OpLatency,
    /// Largest latency of each round (all operations).
    round_max_ns: Vec<u64>,
    /// Their median: the worst case with one-off stalls of a shared machine
    /// (another process preempting the run) voted out.
    median_round_max_ns: u64,
    memory: Memory,
    compaction: Compaction,
}

/// zsmalloc against zbud: the goal is p99.9 and max at most 1.2x zbud's,
/// memory at least 1.8x denser. `max_met` is judged on the median of the
/// rounds' maxima (`median_max_ratio`); `max_ratio` is of the overall maxima.
#[derive(Debug, Serialize)]
struct Goal {
    p999_ratio: f64,
    max_ratio: f64,
    median_max_ratio: f64,
    density_ratio: f64,
    p999_met: bool,
    max_met: bool,
    density_met: bool,
}

#[derive(Debug, Serialize)]
struct Report {
    data: String,
    page_size: usize,
    comp: String,
    zsmalloc_mode: Mode,
    pages: u64,
    same_filled: u64,
    left_out: u64,
    objects: u64,
    mean_object_bytes: f64,
    ops: u64,
    rounds: u32,
    seed: u64,
    compact_ms: u64,
    /// Operations between compactions (`--compact-every-ops`); null when
    /// compaction is timed by `compact_ms`.
    compact_every_ops: Option<u64>,
    allocators: Vec<AllocReport>,
    goal: Option<Goal>,
    plot: Option<(PathBuf, PathBuf)>,
}

/// The objects every allocator stores: compressed pages, back to back.
struct Objects {
    bytes: Vec<u8>,
    spans: Vec<(usize, usize)>,
}

impl Objects {
    fn get(&self, i: usize) -> &[u8] {
        let (off, len) = self.spans[i];
        &self.bytes[off..off + len]
    }
}

fn failed(e: impl std::fmt::Display) -> Error {
    Error::Failed(e.to_string())
}

/// `--page-size`: one of the sizes zsmalloc's geometry takes.
fn parse_page_size(s: &str) -> Result<usize, String> {
    recipe::spec::parse_page_size(s).map(|n| n as usize)
}

fn default_data() -> PathBuf {
    std::env::var_os("ZMEM_DATA")
        .map_or_else(|| PathBuf::from("/var/tmp/zmem-data"), PathBuf::from)
        .join("linux256.bin")
}

const WORDS: [&str; 48] = [
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "with", "be", "on", "not",
    "this", "by", "are", "or", "from", "at", "page", "memory", "struct", "return", "int", "if",
    "else", "static", "void", "unsigned", "long", "const", "char", "case", "break", "size", "lock",
    "free", "alloc", "zspage", "class", "object", "handle", "pool", "error", "0x0", "NULL",
    "#define",
];

/// One page of the built-in generator: a mix of the kinds of pages zram
/// stores, with lz4 ratios from about 1:1 to 40:1.
fn synthetic_page(rng: &mut Rng, page_size: usize) -> Vec<u8> {
    let mut p = Vec::with_capacity(page_size);
    let kind = rng.next_u64() % 100;
    match kind {
        // Text and source code: skewed words, spaces, newlines.
        0..=39 => {
            while p.len() < page_size {
                let r = rng.next_u64();
                let w = WORDS[((r % 48) * ((r >> 8) % 48) / 48) as usize];
                p.extend_from_slice(w.as_bytes());
                p.push(if (r >> 20) % 9 == 0 { b'\n' } else { b' ' });
                if (r >> 30) % 7 == 0 {
                    p.extend_from_slice(format!("{}", (r >> 40) % 10_000).as_bytes());
                }
            }
        }
        // Heap: 8-byte words, zeros, small integers and pointers.
        40..=69 => {
            let base = 0x0000_7f00_0000_0000u64 | (rng.next_u64() & 0xff_ffff) << 16;
            while p.len() < page_size {
                let r = rng.next_u64();
                let w = match r % 10 {
                    0..=3 => 0,
                    4..=6 => (r >> 8) % 1000,
                    _ => base | ((r >> 16) & 0xfff8),
                };
                p.extend_from_slice(&w.to_le_bytes());
            }
        }
        // Code-like binaries: snippets repeated with mutations.
        70..=84 => {
            let snippet: Vec<u8> = (0..64).map(|_| rng.next_u64() as u8).collect();
            while p.len() < page_size {
                let r = rng.next_u64();
                let len = 8 + (r % 56) as usize;
                p.extend_from_slice(&snippet[..len]);
                for _ in 0..(r >> 8) % 6 {
                    p.push(rng.next_u64() as u8);
                }
            }
        }
        // Sparse: mostly zero.
        85..=94 => {
            p.resize(page_size, 0);
            for _ in 0..rng.next_u64() % 64 {
                let at = (rng.next_u64() as usize) % page_size;
                p[at] = rng.next_u64() as u8;
            }
        }
        // Random: incompressible.
        _ => {
            while p.len() < page_size {
                p.extend_from_slice(&rng.next_u64().to_le_bytes());
            }
        }
    }
    p.truncate(page_size);
    p
}

/// Loads and compresses the pages; objects above `limit` bytes are left out.
fn load_objects(args: &LatencyArgs, limit: usize) -> Result<(String, Objects, u64, u64), Error> {
    let ps = args.page_size;
    let path = match (&args.data, args.synthetic) {
        (Some(p), _) => Some(p.clone()),
        (None, false) => Some(default_data()).filter(|p| p.is_file()),
        (None, true) => None,
    };
    let mut raw_pages: Box<dyn Iterator<Item = Vec<u8>>> = match &path {
        Some(p) => {
            let data = tune::corpus::read_input(p)?;
            let pages: Vec<Vec<u8>> = data
                .chunks_exact(ps)
                .take(args.pages as usize)
                .map(<[u8]>::to_vec)
                .collect();
            Box::new(pages.into_iter())
        }
        None => {
            let mut rng = Rng::new(args.seed, 0xda7a);
            let n = args.pages;
            Box::new((0..n).map(move |_| synthetic_page(&mut rng, ps)))
        }
    };
    let name = path.as_ref().map_or_else(
        || "built-in generator (no data file; make one with scripts/make-corpus)".to_string(),
        |p| p.display().to_string(),
    );
    let comp = zcomp::Compressor::new(args.comp, &zcomp::Params::default())
        .map_err(|e| Error::Usage(e.to_string()))?;
    let mut ctx = comp.context().map_err(failed)?;
    let mut objects = Objects {
        bytes: Vec::new(),
        spans: Vec::new(),
    };
    let (mut same, mut left_out) = (0, 0);
    for page in raw_pages.by_ref() {
        let word = &page[..8];
        if page.chunks_exact(8).all(|w| w == word) {
            same += 1;
            continue;
        }
        let c = ctx.compress_buffered(&page).map_err(failed)?;
        if c.len() > limit {
            left_out += 1;
            continue;
        }
        objects.spans.push((objects.bytes.len(), c.len()));
        objects.bytes.extend_from_slice(c);
    }
    if objects.spans.is_empty() {
        return Err(Error::Failed(format!(
            "{name} has no page the allocators can store"
        )));
    }
    Ok((name, objects, same, left_out))
}

fn histogram() -> Result<Histogram<u64>, Error> {
    Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).map_err(failed)
}

/// One allocator's run: four histograms (all, store, load, free).
struct Run {
    hist: [Histogram<u64>; 4],
    round_max: Vec<u64>,
    pages_after_fill: u64,
    objects_after_fill: u64,
    pages_sum: f64,
    stored_sum: f64,
    retained_sum: f64,
    rss_sum: f64,
    retain_divisor: usize,
    samples: u64,
    pages_at_end: u64,
    objects_at_end: u64,
    /// Runs of the background thread.
    compactions: u64,
    /// Runs made by the experiment after the timed phase.
    driven_compactions: u64,
    objs_moved: u64,
    pages_freed: u64,
    longest_compaction: u64,
}

const ALL: usize = 0;
const STORE: usize = 1;
const LOAD: usize = 2;
const FREE: usize = 3;

fn record(hist: &mut [Histogram<u64>; 4], op: usize, t: Instant) {
    let ns = (t.elapsed().as_nanos() as u64).max(1);
    hist[op].saturating_record(ns);
    hist[ALL].saturating_record(ns);
}

fn store(pool: &dyn ZPool, data: &[u8]) -> Result<ZHandle, Error> {
    let h = pool.malloc(data.len()).map_err(failed)?;
    pool.write(h, data).map_err(failed)?;
    Ok(h)
}

/// Runs the workload on a fresh allocator.
fn run_one(
    name: &str,
    opts: &AllocOptions,
    objects: &Objects,
    args: &LatencyArgs,
    round: u32,
) -> Result<Run, Error> {
    let n = objects.spans.len();
    // Slot -> (handle, object index), touched before the resident set's
    // base is read, so that its growth is the pool's (and the histograms'
    // few touched pages).
    let mut slots: Vec<Option<(ZHandle, usize)>> = vec![None; n];
    let hist = [histogram()?, histogram()?, histogram()?, histogram()?];
    let rss_base = rss_bytes();
    let pool: Arc<dyn ZPool> = zalloc::open(name, opts).map_err(failed)?;
    if name == "zsmalloc" || args.retain_others {
        let divisor = args.retain_divisor.map_or(
            match opts.mode {
                Mode::Default => zsmalloc::DEFAULT_RETAIN_DIVISOR,
                Mode::KernelCompat => 0,
            },
            |d| d as usize,
        );
        pool.set_page_retain_divisor(divisor);
    }
    let mut stored: u64 = 0;
    for (i, slot) in slots.iter_mut().enumerate() {
        *slot = Some((store(&*pool, objects.get(i))?, i));
        stored += objects.spans[i].1 as u64;
    }
    let mut run = Run {
        hist,
        round_max: Vec::new(),
        pages_after_fill: pool.total_pages() as u64,
        objects_after_fill: pool.stats().objects,
        pages_sum: 0.0,
        stored_sum: 0.0,
        retained_sum: 0.0,
        rss_sum: 0.0,
        retain_divisor: pool.retained_pages().divisor,
        samples: 0,
        pages_at_end: 0,
        objects_at_end: 0,
        compactions: 0,
        driven_compactions: 0,
        objs_moved: 0,
        pages_freed: 0,
        longest_compaction: 0,
    };

    let stop = Arc::new(AtomicBool::new(false));
    // Compactions the workload asked for (`--compact-every-ops`).
    let asked = Arc::new(AtomicU64::new(0));
    let compactor = {
        let (pool, stop, asked) = (pool.clone(), stop.clone(), asked.clone());
        let every = Duration::from_millis(args.compact_ms);
        let by_ops = args.compact_every_ops.is_some();
        std::thread::spawn(move || {
            let (mut runs, mut moved, mut freed, mut longest) = (0u64, 0u64, 0u64, 0u64);
            loop {
                // Woken early by `unpark` when the run ends, or when the
                // workload asks for a compaction.
                if by_ops {
                    if runs >= asked.load(Ordering::Acquire) {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        std::thread::park();
                        continue;
                    }
                } else {
                    if every.is_zero() {
                        std::thread::park();
                    } else {
                        std::thread::park_timeout(every);
                    }
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    if every.is_zero() {
                        continue;
                    }
                }
                let t = Instant::now();
                let r = pool.compact_background();
                longest = longest.max(t.elapsed().as_nanos() as u64);
                runs += 1;
                moved += r.objs_moved;
                freed += r.pages_freed;
            }
            (runs, moved, freed, longest)
        })
    };

    let mut rng = Rng::new(args.seed, 1 + u64::from(round));
    let mut buf = vec![0u8; args.page_size];
    let burst_every = (n as u64 / 4).max(64);
    let burst_len = (n / 32).max(1);
    let pick = |rng: &mut Rng| (rng.next_u64() % n as u64) as usize;
    let mut result = Ok(());
    let ask_every = args.compact_every_ops.unwrap_or(u64::MAX);
    for op in 0..args.ops {
        if op % ask_every == ask_every - 1 {
            asked.fetch_add(1, Ordering::Release);
            compactor.thread().unpark();
        }
        if op % 4096 == 0 {
            run.pages_sum += pool.total_pages() as f64;
            run.stored_sum += stored as f64;
            run.retained_sum += pool.retained_pages().pages as f64;
            run.rss_sum += rss_bytes().saturating_sub(rss_base) as f64;
            run.samples += 1;
        }
        if op % burst_every == burst_every - 1 {
            let start = pick(&mut rng);
            for k in 0..burst_len {
                let s = (start + k) % n;
                if let Some((h, i)) = slots[s].take() {
                    let t = Instant::now();
                    let r = pool.free(h);
                    record(&mut run.hist, FREE, t);
                    r.map_err(failed)?;
                    stored -= objects.spans[i].1 as u64;
                }
            }
        }
        let r = rng.unit();
        let s = pick(&mut rng);
        if r < 0.50 {
            // Load: the first live slot from a random one.
            let Some(s) = (0..n).map(|k| (s + k) % n).find(|&s| slots[s].is_some()) else {
                continue;
            };
            let (h, i) = slots[s].expect("found live");
            let len = objects.spans[i].1;
            let t = Instant::now();
            let read = ObjectRead::begin(&*pool, h, len).map(|obj| {
                buf[..len].copy_from_slice(&obj);
            });
            record(&mut run.hist, LOAD, t);
            std::hint::black_box(&buf);
            if let Err(e) = read {
                result = Err(failed(e));
                break;
            }
        } else if r < 0.85 {
            let i = pick(&mut rng);
            let data = objects.get(i);
            let t = Instant::now();
            let new = store(&*pool, data);
            let old = slots[s].take();
            let freed = old.map(|(h, _)| pool.free(h));
            record(&mut run.hist, STORE, t);
            let h = new?;
            if let Some(f) = freed {
                f.map_err(failed)?;
            }
            if let Some((_, oi)) = old {
                stored -= objects.spans[oi].1 as u64;
            }
            stored += data.len() as u64;
            slots[s] = Some((h, i));
        } else if let Some((h, i)) = slots[s].take() {
            let t = Instant::now();
            let r = pool.free(h);
            record(&mut run.hist, FREE, t);
            r.map_err(failed)?;
            stored -= objects.spans[i].1 as u64;
        }
    }
    stop.store(true, Ordering::Relaxed);
    compactor.thread().unpark();
    let (runs, moved, freed, longest) = compactor
        .join()
        .map_err(|_| failed("the compaction thread panicked"))?;
    result?;
    run.round_max = vec![run.hist[ALL].max()];
    run.compactions = runs;
    run.objs_moved = moved;
    run.pages_freed = freed;
    run.longest_compaction = longest;
    if compaction_on(args) {
        // One compaction by construction, whatever the scheduler allowed
        // the thread: the end figures are after a compaction.
        let r = pool.compact();
        run.driven_compactions = 1;
        run.objs_moved += r.objs_moved;
        run.pages_freed += r.pages_freed;
    }

    // Every live object is intact.
    for (h, i) in slots.iter().flatten() {
        let want = objects.get(*i);
        let obj = ObjectRead::begin(&*pool, *h, want.len()).map_err(failed)?;
        if *obj != *want {
            return Err(failed(format!("{name}: an object changed")));
        }
    }
    pool.check_invariants()
        .map_err(|e| failed(format!("{name}: {e}")))?;
    run.pages_at_end = pool.total_pages() as u64;
    run.objects_at_end = pool.stats().objects;
    for (h, _) in slots.into_iter().flatten() {
        pool.free(h).map_err(failed)?;
    }
    if pool.total_pages() != 0 {
        return Err(failed(format!(
            "{name}: pages left after freeing everything"
        )));
    }
    Ok(run)
}

/// The process's resident set in bytes (`/proc/self/statm`; 0 where it
/// cannot be read).
fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| {
            // SAFETY: sysconf has no preconditions; it only reads a constant.
            let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u64;
            pages * page
        })
}

/// Runs `zmem exp latency`.
pub fn run(args: &LatencyArgs) -> Result<(), Error> {
    let names: Vec<String> = if args.alloc.is_empty() {
        zalloc::NAMES.iter().map(|s| s.to_string()).collect()
    } else {
        args.alloc.clone()
    };
    let opts = AllocOptions {
        page_size: args.page_size,
        mode: args.mode,
        ..AllocOptions::default()
    };
    let mut limit = usize::MAX;
    for name in &names {
        let pool = zalloc::open(name, &opts).map_err(|e| Error::Usage(e.to_string()))?;
        limit = limit.min(pool.max_object_size());
    }
    let (data, objects, same_filled, left_out) = load_objects(args, limit)?;

    let mut runs: Vec<Option<Run>> = names.iter().map(|_| None).collect();
    for round in 0..args.rounds {
        for (k, name) in names.iter().enumerate() {
            let r = run_one(name, &opts, &objects, args, round)?;
            match &mut runs[k] {
                None => runs[k] = Some(r),
                Some(acc) => {
                    for (a, b) in acc.hist.iter_mut().zip(&r.hist) {
                        a.add(b).map_err(failed)?;
                    }
                    acc.round_max.extend(&r.round_max);
                    acc.pages_after_fill += r.pages_after_fill;
                    acc.objects_after_fill += r.objects_after_fill;
                    acc.pages_sum += r.pages_sum;
                    acc.stored_sum += r.stored_sum;
                    acc.retained_sum += r.retained_sum;
                    acc.rss_sum += r.rss_sum;
                    acc.samples += r.samples;
                    acc.pages_at_end += r.pages_at_end;
                    acc.objects_at_end += r.objects_at_end;
                    acc.compactions += r.compactions;
                    acc.driven_compactions += r.driven_compactions;
                    acc.objs_moved += r.objs_moved;
                    acc.pages_freed += r.pages_freed;
                    acc.longest_compaction = acc.longest_compaction.max(r.longest_compaction);
                }
            }
        }
    }
    let rounds = f64::from(args.rounds);
    let ps = args.page_size as f64;
    let allocators: Vec<AllocReport> = names
        .iter()
        .zip(&runs)
        .map(|(name, r)| {
            let r = r.as_ref().expect("every allocator ran");
            let samples = r.samples.max(1) as f64;
            let mean_pages = r.pages_sum / samples;
            let mean_stored = r.stored_sum / samples;
            let pages_at_end = r.pages_at_end as f64 / rounds;
            let objects_at_end = r.objects_at_end as f64 / rounds;
            let mut maxima = r.round_max.clone();
            maxima.sort_unstable();
            AllocReport {
                name: name.clone(),
                median_round_max_ns: maxima[maxima.len() / 2],
                round_max_ns: r.round_max.clone(),
                latency: OpLatency {
                    all: Percentiles::of(&r.hist[ALL]),
                    store: Percentiles::of(&r.hist[STORE]),
                    load: Percentiles::of(&r.hist[LOAD]),
                    free: Percentiles::of(&r.hist[FREE]),
                },
                memory: Memory {
                    pages_after_fill: r.pages_after_fill as f64 / rounds,
                    objects_after_fill: r.objects_after_fill as f64 / rounds,
                    mean_pages,
                    mean_stored_bytes: mean_stored,
                    pages_at_end,
                    objects_at_end,
                    objects_per_page: objects_at_end / pages_at_end.max(1.0),
                    used_over_stored: mean_pages * ps / mean_stored.max(1.0),
                    mean_retained_pages: r.retained_sum / samples,
                    retain_divisor: r.retain_divisor,
                    rss_over_used: r.rss_sum / samples / (mean_pages * ps).max(1.0),
                },
                compaction: Compaction {
                    runs: r.compactions + r.driven_compactions,
                    background_runs: r.compactions,
                    driven_runs: r.driven_compactions,
                    objs_moved: r.objs_moved,
                    pages_freed: r.pages_freed,
                    longest_ns: r.longest_compaction,
                },
            }
        })
        .collect();
    let find = |n: &str| allocators.iter().find(|a| a.name == n);
    let goal = match (find("zsmalloc"), find("zbud")) {
        (Some(zs), Some(zb)) => {
            let p999_ratio = zs.latency.all.p999_ns as f64 / zb.latency.all.p999_ns.max(1) as f64;
            let max_ratio = zs.latency.all.max_ns as f64 / zb.latency.all.max_ns.max(1) as f64;
            let median_max_ratio =
                zs.median_round_max_ns as f64 / zb.median_round_max_ns.max(1) as f64;
            let density_ratio = zb.memory.mean_pages / zs.memory.mean_pages.max(1.0);
            Some(Goal {
                p999_ratio,
                max_ratio,
                median_max_ratio,
                density_ratio,
                p999_met: p999_ratio <= 1.2,
                max_met: median_max_ratio <= 1.2,
                density_met: density_ratio >= 1.8,
            })
        }
        _ => None,
    };
    let plot = if args.no_plot {
        None
    } else {
        Some(draw(args, &names, &runs)?)
    };
    let n = objects.spans.len() as u64;
    let report = Report {
        data,
        page_size: args.page_size,
        comp: args.comp.name().to_string(),
        zsmalloc_mode: args.mode,
        pages: args.pages,
        same_filled,
        left_out,
        objects: n,
        mean_object_bytes: objects.bytes.len() as f64 / n as f64,
        ops: args.ops,
        rounds: args.rounds,
        seed: args.seed,
        compact_ms: args.compact_ms,
        compact_every_ops: args.compact_every_ops,
        allocators,
        goal,
        plot,
    };
    let text = match args.format.get() {
        Format::Json => serde_json::to_string_pretty(&report).map_err(failed)? + "\n",
        Format::Table => table(&report),
    };
    recipe::output::write_stdout(&text)
}

/// Latency against percentile (in nines) for every allocator, all operations.
fn draw(
    args: &LatencyArgs,
    names: &[String],
    runs: &[Option<Run>],
) -> Result<(PathBuf, PathBuf), Error> {
    let series: Vec<Series> = names
        .iter()
        .zip(runs)
        .filter_map(|(name, r)| r.as_ref().map(|r| (name, &r.hist[ALL])))
        .map(|(name, h)| {
            let top = (h.len().max(10) as f64).log10();
            let mut points: Vec<(f64, f64)> = (0..)
                .map(|i| f64::from(i) * 0.05)
                .take_while(|&x| x < top)
                .map(|x| (x, h.value_at_quantile(1.0 - 10f64.powf(-x)) as f64 / 1000.0))
                .collect();
            points.push((top, h.max() as f64 / 1000.0));
            Series {
                name: name.clone(),
                points,
            }
        })
        .collect();
    let title = format!(
        "Per-operation latency, stores + loads + frees ({} ops x {} rounds, {})",
        args.ops,
        args.rounds,
        compaction_text(args.compact_ms, args.compact_every_ops)
    );
    plot::line_chart_log_y(
        &args.plot,
        &Chart {
            title: &title,
            x_label:
                "percentile in nines (1 = p90, 2 = p99, 3 = p99.9, 4 = p99.99; last point = max)",
            y_label: "latency (µs, log scale)",
            series: &series,
        },
    )
}

fn compaction_text(ms: u64, every_ops: Option<u64>) -> String {
    match every_ops {
        Some(n) => format!("compaction every {n} operations"),
        None if ms == 0 => "no compaction".into(),
        None => format!("compaction every {ms} ms"),
    }
}

/// Whether the background thread compacts at all (`--compact-ms 0` without
/// `--compact-every-ops` turns it off).
fn compaction_on(args: &LatencyArgs) -> bool {
    args.compact_every_ops.is_some() || args.compact_ms > 0
}

fn table(r: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "zmem exp latency: {} pages of {} ({} B pages, {}), {} ops x {} round(s), seed {}, {}, zsmalloc {} mode",
        r.pages,
        r.data,
        r.page_size,
        r.comp,
        r.ops,
        r.rounds,
        r.seed,
        compaction_text(r.compact_ms, r.compact_every_ops),
        r.zsmalloc_mode.name()
    );
    let _ = writeln!(
        out,
        "objects: {} (mean {:.0} B compressed); {} same-filled pages not stored; {} pages too large for some allocator left out for all",
        r.objects, r.mean_object_bytes, r.same_filled, r.left_out
    );
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:<10} {:<6} {:>10} {:>8} {:>8} {:>8} {:>9} {:>10}",
        "latency", "op", "count", "p50 ns", "p99 ns", "p99.9 ns", "p99.99 ns", "max ns"
    );
    for a in &r.allocators {
        let l = &a.latency;
        for (i, (op, p)) in [
            ("all", &l.all),
            ("store", &l.store),
            ("load", &l.load),
            ("free", &l.free),
        ]
        .into_iter()
        .enumerate()
        {
            let _ = writeln!(
                out,
                "{:<10} {:<6} {:>10} {:>8} {:>8} {:>8} {:>9} {:>10}",
                if i == 0 { a.name.as_str() } else { "" },
                op,
                p.count,
                p.p50_ns,
                p.p99_ns,
                p.p999_ns,
                p.p9999_ns,
                p.max_ns
            );
        }
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:<10} {:>11} {:>11} {:>11} {:>10} {:>10} {:>12} {:>11} {:>11}",
        "memory",
        "fill pages",
        "mean pages",
        "end pages",
        "objs/page",
        "used/data",
        "compactions",
        "objs moved",
        "longest ms"
    );
    for a in &r.allocators {
        let m = &a.memory;
        let _ = writeln!(
            out,
            "{:<10} {:>11.0} {:>11.0} {:>11.0} {:>10.2} {:>10.3} {:>12} {:>11} {:>11.2}",
            a.name,
            m.pages_after_fill,
            m.mean_pages,
            m.pages_at_end,
            m.objects_per_page,
            m.used_over_stored,
            a.compaction.runs,
            a.compaction.objs_moved,
            a.compaction.longest_ns as f64 / 1e6
        );
    }
    let _ = writeln!(out);
    for a in &r.allocators {
        let m = &a.memory;
        let share = match m.retain_divisor {
            0 => "fixed cache only".to_string(),
            d => format!("share 1/{d} of the pool"),
        };
        let _ = writeln!(
            out,
            "{:<10} resident: {:.3}x the pool's bytes; kept for reuse, not counted: mean {:.0} pages ({share})",
            a.name, m.rss_over_used, m.mean_retained_pages
        );
    }
    let _ = writeln!(out);
    for a in &r.allocators {
        let maxima: Vec<String> = a
            .round_max_ns
            .iter()
            .map(|m| format!("{:.2}", *m as f64 / 1e6))
            .collect();
        let _ = writeln!(
            out,
            "{:<10} max per round (ms): {} (median {:.2})",
            a.name,
            maxima.join(" "),
            a.median_round_max_ns as f64 / 1e6
        );
    }
    if let Some(g) = &r.goal {
        let verdict = |met: bool| if met { "met" } else { "NOT met" };
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "goal, zsmalloc vs zbud: p99.9 {:.2}x (<= 1.2x: {}), max {:.2}x, median of round maxima {:.2}x (<= 1.2x: {}), memory {:.2}x denser (>= 1.8x: {})",
            g.p999_ratio,
            verdict(g.p999_met),
            g.max_ratio,
            g.median_max_ratio,
            verdict(g.max_met),
            g.density_ratio,
            verdict(g.density_met)
        );
    }
    if let Some((svg, png)) = &r.plot {
        let _ = writeln!(out, "plot: {} {}", svg.display(), png.display());
    }
    out
}
