//! `zmem bench alloc`: zsmalloc (both modes) against general-purpose
//! allocators on the object sizes real data compresses to.
//!
//! Each allocator runs in its own child process (the running `zmem` binary
//! again, as `zmem bench alloc --worker NAME`, so the command tree must keep
//! that spelling), one after the other in one run, so every process's resident
//! set belongs to one allocator and the figures compare side by side. The
//! parent prints absolute figures and ratios to glibc.
//!
//! The workload, per allocator and thread count:
//! 1. *fill*: every page of the data set compressed with lz4 (zram's same-filled
//!    pages skipped) is stored as one object: allocate, write;
//! 2. *memory*: resident set growth over the bytes stored, after the fill and
//!    after freeing every other object (zsmalloc then compacts; the others
//!    cannot);
//! 3. *churn*: for as many operations again, free a random object and store
//!    a new one of the next size (malloc + write + free per operation), on
//!    `--threads` threads sharing the allocator.
//!
//! jemalloc and mimalloc are linked only with the `bench-peers` feature.
//! This module owns the benchmark; it changes no allocator.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use clap::Args;
use serde::{Deserialize, Serialize};
use zsmalloc::{Handle, Pool, PoolConfig};

use crate::Error;
use recipe::output::{Format, FormatArg};

use super::data::{compressed_pages, default_data};

/// Arguments of `zmem bench alloc`.
#[derive(Args, Debug)]
pub struct AllocArgs {
    /// Data files whose 4 KiB pages give the object sizes (lz4). Default: the
    /// Linux source tar and system binaries made by scripts/make-corpus.
    #[arg(long = "data")]
    data: Vec<PathBuf>,
    /// Thread counts to run the churn with (1 to 1024 each).
    #[arg(long, value_delimiter = ',', default_values_t = [1usize, 2],
          value_parser = recipe::flags::whole_usize(1, 1024))]
    threads: Vec<usize>,
    /// Allocators to compare (default: all built in).
    #[arg(long, value_delimiter = ',')]
    alloc: Vec<String>,
    #[command(flatten)]
    format: FormatArg,
    /// Internal: run one allocator and print its figures as JSON.
    #[arg(long, hide = true)]
    worker: Option<String>,
}

/// Runs `zmem bench alloc`: the parent, or (with the hidden `--worker`)
/// one allocator's worker.
pub fn run(args: &AllocArgs) -> Result<(), Error> {
    match &args.worker {
        Some(name) => worker(args, name),
        None => parent(args),
    }
}

/// The allocators this build can run.
fn built_in() -> Vec<&'static str> {
    let mut v = vec!["zsmalloc-compat", "zsmalloc-default", "glibc"];
    if cfg!(feature = "bench-peers") {
        v.extend(["jemalloc", "mimalloc"]);
    }
    v
}

/// What one worker measured.
#[derive(Serialize, Deserialize, Debug, Clone)]
struct WorkerReport {
    alloc: String,
    data: String,
    threads: usize,
    objects: u64,
    live_bytes: u64,
    fill_ops_per_s: f64,
    fill_overhead_pct: f64,
    /// zsmalloc only: the pool's own page count over the bytes stored (what
    /// zram reports as mem_used_total against compr_data_size).
    pool_overhead_pct: Option<f64>,
    half_live_bytes: u64,
    half_overhead_pct: f64,
    churn_ops_per_s: f64,
}

fn parent(args: &AllocArgs) -> Result<(), Error> {
    let data = if args.data.is_empty() {
        default_data()
    } else {
        args.data.clone()
    };
    for d in &data {
        if d.as_os_str() == "-" || (d.exists() && !tune::corpus::is_rereadable(d)) {
            return Err(Error::Usage(format!(
                "--data {}: not a file or block device; each worker reads the data set again, \
                 so save a stream to a file first",
                d.display()
            )));
        }
        if !tune::corpus::is_rereadable(d) {
            return Err(Error::Failed(format!(
                "{} is missing: make the data sets with scripts/make-corpus (Debian's linux-source-6.1 and /usr)",
                d.display()
            )));
        }
    }
    let allocs: Vec<String> = if args.alloc.is_empty() {
        built_in().into_iter().map(String::from).collect()
    } else {
        args.alloc.clone()
    };
    for a in &allocs {
        if !built_in().contains(&a.as_str()) {
            return Err(Error::Usage(format!(
                "allocator '{a}' is not built in (have: {}; jemalloc and mimalloc need --features bench-peers)",
                built_in().join(", ")
            )));
        }
    }
    let exe = std::env::current_exe()
        .map_err(|e| Error::Failed(format!("cannot find zmem itself: {e}")))?;
    let mut reports = Vec::new();
    for d in &data {
        for &threads in &args.threads {
            for a in &allocs {
                let out = Command::new(&exe)
                    .args([
                        "bench",
                        "alloc",
                        "--worker",
                        a,
                        "--threads",
                        &threads.to_string(),
                        "--data",
                    ])
                    .arg(d)
                    .output()
                    .map_err(|e| Error::Failed(format!("cannot run the {a} worker: {e}")))?;
                if !out.status.success() {
                    return Err(Error::Failed(format!(
                        "the {a} worker failed: {}",
                        String::from_utf8_lossy(&out.stderr).trim()
                    )));
                }
                let r: WorkerReport = serde_json::from_slice(&out.stdout)
                    .map_err(|e| Error::Failed(format!("bad worker output: {e}")))?;
                eprintln!(
                    "{:>16} {:>14} {}T: churn {:>10.0} ops/s, fill overhead {:>6.2}%",
                    r.alloc, r.data, r.threads, r.churn_ops_per_s, r.fill_overhead_pct
                );
                reports.push(r);
            }
        }
    }
    let text = if args.format.get() == Format::Json {
        serde_json::to_string_pretty(&reports).map_err(|e| Error::Failed(e.to_string()))? + "\n"
    } else {
        table(&reports)
    };
    recipe::output::write_stdout(&text)
}

fn table(reports: &[WorkerReport]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<14} {:>2} {:<17} {:>12} {:>7} {:>12} {:>7} {:>9} {:>9} {:>9}",
        "data",
        "T",
        "allocator",
        "churn ops/s",
        "x glibc",
        "fill ops/s",
        "x glibc",
        "fill ovh",
        "pool ovh",
        "half ovh"
    );
    for r in reports {
        let glibc = reports
            .iter()
            .find(|g| g.alloc == "glibc" && g.data == r.data && g.threads == r.threads);
        let ratio = |f: fn(&WorkerReport) -> f64| glibc.map_or(f64::NAN, |g| f(r) / f(g));
        let _ = writeln!(
            out,
            "{:<14} {:>2} {:<17} {:>12.0} {:>7.2} {:>12.0} {:>7.2} {:>8.2}% {:>9} {:>8.2}%",
            r.data,
            r.threads,
            r.alloc,
            r.churn_ops_per_s,
            ratio(|x| x.churn_ops_per_s),
            r.fill_ops_per_s,
            ratio(|x| x.fill_ops_per_s),
            r.fill_overhead_pct,
            r.pool_overhead_pct
                .map_or_else(|| "-".to_string(), |p| format!("{p:.2}%")),
            r.half_overhead_pct
        );
    }
    let _ = writeln!(
        out,
        "fill/half ovh: resident set growth above the bytes stored, after the fill and after freeing half \
         (zsmalloc compacted; the others cannot); it includes the benchmark's own handle array (8 bytes per object).\n\
         pool ovh: the pool's page count above the bytes stored (zram's mem_used_total vs compr_data_size)."
    );
    out
}

// ---- the worker -----------------------------------------------------------

/// An object store under test.
trait Store: Send + Sync {
    fn put(&self, data: &[u8]) -> u64;
    fn drop_obj(&self, token: u64, len: usize);
    fn compact(&self) {}
    /// Bytes the store's own accounting says it holds, if it keeps any.
    fn pool_bytes(&self) -> Option<u64> {
        None
    }
}

struct ZsStore(Pool);

impl Store for ZsStore {
    fn put(&self, data: &[u8]) -> u64 {
        let h = self.0.malloc(data.len()).expect("zsmalloc malloc");
        self.0.write(h, data).expect("zsmalloc write");
        h.to_raw()
    }
    fn drop_obj(&self, token: u64, _len: usize) {
        self.0
            .free(Handle::from_raw(token).expect("a live handle"))
            .expect("zsmalloc free");
    }
    fn compact(&self) {
        self.0.compact();
    }
    fn pool_bytes(&self) -> Option<u64> {
        Some(self.0.total_pages() as u64 * self.0.page_size() as u64)
    }
}

/// A C-style allocator: `alloc(len)` and `free(ptr, len)`.
struct RawStore {
    alloc: unsafe fn(usize) -> *mut u8,
    free: unsafe fn(*mut u8, usize),
}

impl Store for RawStore {
    fn put(&self, data: &[u8]) -> u64 {
        // SAFETY: the allocator functions take any non-zero size (data sets
        // skip empty objects) and return memory of at least that size or null.
        let p = unsafe { (self.alloc)(data.len()) };
        assert!(!p.is_null(), "allocation failed");
        // SAFETY: `p` is a fresh allocation of `data.len()` bytes, distinct
        // from `data`.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p, data.len()) };
        p as u64
    }
    fn drop_obj(&self, token: u64, len: usize) {
        // SAFETY: `token` is a pointer `put` returned for `len` bytes and not
        // yet freed (the benchmark frees each token once).
        unsafe { (self.free)(token as *mut u8, len) }
    }
}

unsafe fn glibc_alloc(len: usize) -> *mut u8 {
    // SAFETY: plain malloc; the caller checks for null.
    unsafe { libc::malloc(len).cast() }
}

unsafe fn glibc_free(p: *mut u8, _len: usize) {
    // SAFETY: `p` came from `glibc_alloc` (caller's contract).
    unsafe { libc::free(p.cast()) }
}

#[cfg(feature = "bench-peers")]
mod peers {
    use std::alloc::{GlobalAlloc, Layout};

    fn layout(len: usize) -> Layout {
        Layout::from_size_align(len, 8).expect("object sizes are small")
    }

    pub(super) unsafe fn je_alloc(len: usize) -> *mut u8 {
        // SAFETY: a non-zero-sized layout (caller's contract).
        unsafe { tikv_jemallocator::Jemalloc.alloc(layout(len)) }
    }

    pub(super) unsafe fn je_free(p: *mut u8, len: usize) {
        // SAFETY: `p` came from `je_alloc(len)` with the same layout.
        unsafe { tikv_jemallocator::Jemalloc.dealloc(p, layout(len)) }
    }

    pub(super) unsafe fn mi_alloc(len: usize) -> *mut u8 {
        // SAFETY: a non-zero-sized layout (caller's contract).
        unsafe { mimalloc::MiMalloc.alloc(layout(len)) }
    }

    pub(super) unsafe fn mi_free(p: *mut u8, len: usize) {
        // SAFETY: `p` came from `mi_alloc(len)` with the same layout.
        unsafe { mimalloc::MiMalloc.dealloc(p, layout(len)) }
    }
}

fn make_store(name: &str) -> Result<Arc<dyn Store>, Error> {
    Ok(match name {
        "zsmalloc-compat" => Arc::new(ZsStore(
            Pool::new(PoolConfig::kernel_compat()).map_err(|e| Error::Failed(e.to_string()))?,
        )),
        "zsmalloc-default" => Arc::new(ZsStore(
            Pool::new(PoolConfig::default_mode(4096)).map_err(|e| Error::Failed(e.to_string()))?,
        )),
        "glibc" => Arc::new(RawStore {
            alloc: glibc_alloc,
            free: glibc_free,
        }),
        #[cfg(feature = "bench-peers")]
        "jemalloc" => Arc::new(RawStore {
            alloc: peers::je_alloc,
            free: peers::je_free,
        }),
        #[cfg(feature = "bench-peers")]
        "mimalloc" => Arc::new(RawStore {
            alloc: peers::mi_alloc,
            free: peers::mi_free,
        }),
        other => return Err(Error::Usage(format!("unknown allocator '{other}'"))),
    })
}

fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kib| kib * 1024)
}

fn worker(args: &AllocArgs, name: &str) -> Result<(), Error> {
    let path = args
        .data
        .first()
        .ok_or_else(|| Error::Usage("--data is required".into()))?;
    let threads = *args.threads.first().unwrap_or(&1);
    let (bytes, spans) = compressed_pages(path)?;
    let store = make_store(name)?;
    let n = spans.len();
    let mut tokens: Vec<u64> = vec![0; n];
    let live_bytes: u64 = spans.iter().map(|s| s.1 as u64).sum();

    let rss0 = rss_bytes();
    let t = Instant::now();
    for (tok, &(off, len)) in tokens.iter_mut().zip(&spans) {
        *tok = store.put(&bytes[off..off + len]);
    }
    let fill_s = t.elapsed().as_secs_f64();
    let rss1 = rss_bytes();
    let overhead =
        |rss: u64, live: u64| (rss.saturating_sub(rss0) as f64 - live as f64) / live as f64 * 100.0;
    let fill_overhead_pct = overhead(rss1, live_bytes);
    let pool_overhead_pct = store
        .pool_bytes()
        .map(|pool| (pool as f64 - live_bytes as f64) / live_bytes as f64 * 100.0);

    // Free every other object, compact where possible.
    let mut half_live = 0;
    for (i, &(_, len)) in spans.iter().enumerate() {
        if i % 2 == 0 {
            store.drop_obj(tokens[i], len);
            tokens[i] = 0;
        } else {
            half_live += len as u64;
        }
    }
    store.compact();
    let half_overhead_pct = overhead(rss_bytes(), half_live);

    // Refill the holes, then churn: free one, store one, per operation.
    for (i, &(off, len)) in spans.iter().enumerate() {
        if tokens[i] == 0 {
            tokens[i] = store.put(&bytes[off..off + len]);
        }
    }
    let ops_per_thread = n / threads;
    let chunks: Vec<Vec<u64>> = tokens
        .chunks(ops_per_thread.max(1))
        .map(<[u64]>::to_vec)
        .collect();
    let bytes = Arc::new(bytes);
    let spans = Arc::new(spans);
    let t = Instant::now();
    let handles: Vec<_> = chunks
        .into_iter()
        .take(threads)
        .enumerate()
        .map(|(ti, mut mine)| {
            let (store, bytes, spans) = (store.clone(), bytes.clone(), spans.clone());
            std::thread::spawn(move || {
                let base = ti * ops_per_thread;
                let mut lens: Vec<usize> = (0..mine.len()).map(|i| spans[base + i].1).collect();
                let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ ti as u64;
                for op in 0..mine.len() {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let victim = (x % mine.len() as u64) as usize;
                    store.drop_obj(mine[victim], lens[victim]);
                    let (off, len) = spans[(base + op * 7919) % spans.len()];
                    mine[victim] = store.put(&bytes[off..off + len]);
                    lens[victim] = len;
                }
                (mine, lens)
            })
        })
        .collect();
    let mut left = Vec::new();
    for h in handles {
        left.push(
            h.join()
                .map_err(|_| Error::Failed("a churn thread panicked".into()))?,
        );
    }
    let churn_s = t.elapsed().as_secs_f64();
    let done_ops: usize = left.iter().map(|(mine, _)| mine.len()).sum();
    for (mine, lens) in left {
        for (tok, len) in mine.into_iter().zip(lens) {
            store.drop_obj(tok, len);
        }
    }
    let report = WorkerReport {
        alloc: name.to_string(),
        data: path
            .file_name()
            .map_or_else(String::new, |f| f.to_string_lossy().into_owned()),
        threads,
        objects: n as u64,
        live_bytes,
        fill_ops_per_s: n as f64 / fill_s,
        fill_overhead_pct,
        pool_overhead_pct,
        half_live_bytes: half_live,
        half_overhead_pct,
        churn_ops_per_s: done_ops as f64 / churn_s,
    };
    recipe::output::write_stdout(
        &(serde_json::to_string(&report).map_err(|e| Error::Failed(e.to_string()))? + "\n"),
    )
}
