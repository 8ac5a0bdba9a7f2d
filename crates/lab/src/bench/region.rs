//! `zmem bench region`: a region's fault service and the memory it saves,
//! on real data, with the plain kernel as the reference in the same run.
//!
//! - **Faults**: for each compressor, a region holding the first data set's
//!   pages, all compressed (`cold`), is read one page at a time in random
//!   order, each load timed on the faulting thread: faults served from the
//!   store. Beside it, in the same run: first touches of never-written
//!   region pages (the zero page) and of fresh anonymous memory (the
//!   kernel's own fault, the reference). p50, p99, p99.9 and max, and the
//!   handler's mean time per store fault by part.
//! - **Memory at a limit**: each data set laid out in a region whose
//!   resident limit is `--limit-percent` of it, read by a skewed pattern
//!   (Zipf over a seeded shuffle of the pages) and by sequential scans; the
//!   region's memory at the end (resident pages plus the store's
//!   `mem_used_total`) against the data's size, and the run time against
//!   the same reads of the same data in ordinary memory.
//! - **The promotion rate** (`--promotion-run SECONDS`, instead of the
//!   two above): the controller against its target over time, with a
//!   phase change, on the first data set with the first compressor
//!   ([`super::promotion`]).
//!
//! Owns the benchmark; regions are used through their public API.

use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use region::{Region, RegionConfig};
use serde::Serialize;
use zcomp::Algorithm;

use super::data::{all_data, shuffled};
use super::promotion::{self, PromotionArgs};
use crate::Error;
use recipe::output::{write_json, write_stdout, Format, FormatArg};
use tune::rng::Rng;

/// Arguments of `zmem bench region`.
#[derive(Args, Debug)]
pub struct RegionBenchArgs {
    /// Data files (default: the three data sets of scripts/make-corpus,
    /// linux256.bin, usr256.bin and heap256.bin).
    #[arg(long = "data")]
    data: Vec<PathBuf>,
    /// Compressors, by zram's names (comma list).
    #[arg(long, value_delimiter = ',', default_value = "lz4,zstd,lzo-rle", value_parser = recipe::spec::parse_comp)]
    comp: Vec<Algorithm>,
    /// Bytes of each data set laid out in a region (1M to 4G).
    #[arg(long, default_value = "64M", value_parser = recipe::flags::size(1 << 20, 1 << 32))]
    size: u64,
    /// The resident limit, in percent of `--size` (1 to 100).
    #[arg(long, default_value_t = 25.0, value_parser = recipe::flags::real(1.0, 100.0, false))]
    limit_percent: f64,
    /// Page reads of the skewed pattern (1 to 10^9).
    #[arg(long, default_value_t = 400_000, value_parser = recipe::flags::whole_usize(1, 1_000_000_000))]
    accesses: usize,
    /// The Zipf exponent of the skewed pattern (0.1 to 3).
    #[arg(long, default_value_t = 0.99, value_parser = recipe::flags::real(0.1, 3.0, false))]
    zipf: f64,
    /// The compressors' settings, as zram's `algorithm_params` takes them
    /// (`'level=N dict=FILE'`; a zstd dictionary from `zstd --train`),
    /// for every compressor of `--comp`.
    #[arg(long, value_name = "PARAMS", value_parser = parse_params)]
    algorithm_params: Option<String>,
    #[command(flatten)]
    promotion: PromotionArgs,
    #[command(flatten)]
    format: FormatArg,
}

impl RegionBenchArgs {
    /// `--algorithm-params`, or none.
    fn params(&self) -> &str {
        self.algorithm_params.as_deref().unwrap_or("")
    }
}

/// How long the memory-at-a-limit rows wait after the reads for the
/// settled figures: a scan interval of the region's evictor (1 s by
/// default) and a half.
const SETTLE: std::time::Duration = std::time::Duration::from_millis(1500);

/// Checks `--algorithm-params` (syntax, and that a dictionary file reads).
fn parse_params(s: &str) -> Result<String, String> {
    let p = zcomp::AlgorithmParams::parse(s).map_err(|e| e.to_string())?;
    if p.algo.is_some() || p.priority.is_some() {
        return Err(
            "algo= and priority= are not taken here: the settings apply to every --comp".into(),
        );
    }
    Ok(s.to_string())
}

/// One kind of fault.
#[derive(Debug, Serialize)]
struct FaultRow {
    kind: String,
    compressor: Option<String>,
    faults: usize,
    p50_us: f64,
    p99_us: f64,
    p999_us: f64,
    max_us: f64,
    /// The handler's mean per store fault: decompress, copy (with the
    /// faulting thread's wake-up), bookkeeping (ns).
    handler_ns: Option<[u64; 3]>,
}

/// One data set, pattern and compressor at the limit.
#[derive(Debug, Serialize)]
struct LimitRow {
    corpus: String,
    pattern: &'static str,
    compressor: String,
    data_bytes: u64,
    limit_bytes: u64,
    resident_bytes: u64,
    /// Bytes of the pages in the store (`orig_data_size`).
    orig_data_size: u64,
    /// Their compressed bytes (`compr_data_size`).
    compr_data_size: u64,
    mem_used_total: u64,
    /// (resident + mem_used_total) / data.
    memory_ratio: f64,
    /// `mem_used_total` once the reads stop and the region's evictor has
    /// had its next scan (it compacts the store then, if worth it).
    settled_mem_used_total: u64,
    /// (resident + settled_mem_used_total) / data.
    settled_memory_ratio: f64,
    faults_from_store: u64,
    seconds: f64,
    plain_seconds: f64,
    /// seconds / plain_seconds.
    time_ratio: f64,
}

#[derive(Debug, Serialize)]
struct Report {
    faults: Vec<FaultRow>,
    at_limit: Vec<LimitRow>,
}

fn quantiles(
    kind: &str,
    comp: Option<&str>,
    mut ns: Vec<u64>,
    handler: Option<[u64; 3]>,
) -> FaultRow {
    ns.sort_unstable();
    let at = |q: f64| ns[((ns.len() as f64 * q) as usize).min(ns.len() - 1)] as f64 / 1000.0;
    FaultRow {
        kind: kind.into(),
        compressor: comp.map(str::to_string),
        faults: ns.len(),
        p50_us: at(0.5),
        p99_us: at(0.99),
        p999_us: at(0.999),
        max_us: *ns.last().unwrap_or(&0) as f64 / 1000.0,
        handler_ns: handler,
    }
}

fn region(len: usize, limit: usize, comp: Algorithm, params: &str) -> Result<Region, Error> {
    region_with(RegionConfig::new(limit), len, comp, params)
}

fn region_with(
    mut cfg: RegionConfig,
    len: usize,
    comp: Algorithm,
    params: &str,
) -> Result<Region, Error> {
    cfg.store.comp = comp;
    cfg.store.comp_params = params.to_string();
    cfg.probation_pages = Some(0);
    cfg.age_eviction = false;
    Region::new(len, cfg).map_err(|e| Error::Failed(format!("region: {e}")))
}

/// Reads one byte of a page (a load the compiler keeps).
fn load(p: *const u8) -> u8 {
    // SAFETY: callers pass a page of a live mapping.
    unsafe { std::ptr::read_volatile(p) }
}

/// Fault service times, one row per kind.
fn faults(data: &[u8], comps: &[Algorithm], params: &str) -> Result<Vec<FaultRow>, Error> {
    let ps = region::page_size();
    let len = data.len() / ps * ps;
    let n = len / ps;
    let order = shuffled(n, 7);
    let mut rows = Vec::new();
    // The first compressor three times more: served in the faulting thread
    // itself, with a handler that follows the faulting thread's CPU, and
    // with one that sleeps between faults instead of polling; what each is
    // worth, in the same run.
    let runs = comps.iter().map(|&c| (c, "from the store")).chain([
        (comps[0], "from the store, in the faulting thread"),
        (comps[0], "from the store, handler following"),
        (comps[0], "from the store, handler sleeping"),
    ]);
    for (comp, kind) in runs {
        let mut cfg = RegionConfig::new(len);
        cfg.handler_follows = kind.ends_with("following");
        if kind.ends_with("sleeping") {
            cfg.handler_poll = Some(std::time::Duration::ZERO);
        }
        if kind.ends_with("faulting thread") {
            cfg.fault_service = region::FaultService::FaultingThread;
        }
        let r = region_with(cfg, len, comp, params)?;
        let base = r.as_ptr();
        // SAFETY: the region holds `len` bytes; the data as many.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), base, len) };
        r.cold(0..len).map_err(|e| Error::Failed(e.to_string()))?;
        let mut ns = Vec::with_capacity(n);
        for &p in &order {
            let t = Instant::now();
            // SAFETY: page p of the region.
            load(unsafe { base.add(p * ps) });
            ns.push(t.elapsed().as_nanos() as u64);
        }
        let t = r.stats().store_fault_time;
        rows.push(quantiles(
            kind,
            Some(comp.name()),
            ns,
            Some([t.decompress_ns, t.copy_ns, t.bookkeeping_ns]),
        ));
    }
    let fresh = region(len, len, comps[0], params)?;
    let base = fresh.as_ptr();
    let zero: Vec<u64> = order
        .iter()
        .map(|&p| {
            let t = Instant::now();
            // SAFETY: page p of the region, never written.
            load(unsafe { base.add(p * ps) });
            t.elapsed().as_nanos() as u64
        })
        .collect();
    rows.push(quantiles("never written (zero page)", None, zero, None));
    let mut plain = vec![0u8; 0];
    plain.reserve_exact(len);
    let pbase = plain.as_mut_ptr();
    let kernel: Vec<u64> = order
        .iter()
        .map(|&p| {
            let t = Instant::now();
            // SAFETY: page p of the vector's fresh allocation (a write: the
            // kernel maps a page of its own).
            unsafe { std::ptr::write_volatile(pbase.add(p * ps), 1) };
            t.elapsed().as_nanos() as u64
        })
        .collect();
    rows.push(quantiles(
        "reference: the kernel's anonymous fault",
        None,
        kernel,
        None,
    ));
    rows.push(quantiles(
        "ceiling: a thread woken by a polling one",
        None,
        wake_round_trips(n)?,
        None,
    ));
    rows.push(quantiles(
        "ceiling: a signal to the thread itself",
        None,
        signal_round_trips(n)?,
        None,
    ));
    Ok(rows)
}

extern "C" fn on_signal(_: libc::c_int) {}

/// The floor under a fault served in the faulting thread: `n` times, a
/// signal sent to this thread and its (empty) handler returned from.
fn signal_round_trips(n: usize) -> Result<Vec<u64>, Error> {
    // SAFETY: an all-zero `sigaction` is valid; an empty handler for
    // SIGURG (ignored by default, used by nothing here), restored after.
    let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
    sa.sa_sigaction = on_signal as *const () as usize;
    // SAFETY: as above.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: valid actions.
    if unsafe { libc::sigaction(libc::SIGURG, &sa, &mut old) } != 0 {
        return Err(Error::Failed(format!(
            "sigaction: {}",
            std::io::Error::last_os_error()
        )));
    }
    let ns = (0..n)
        .map(|_| {
            let t = Instant::now();
            // SAFETY: a signal to the calling thread, handled above.
            unsafe { libc::raise(libc::SIGURG) };
            t.elapsed().as_nanos() as u64
        })
        .collect();
    // SAFETY: puts the previous action back.
    unsafe { libc::sigaction(libc::SIGURG, &old, std::ptr::null_mut()) };
    Ok(ns)
}

/// The floor under any fault served by another thread: `n` round trips
/// in which this thread blocks in `read(2)` on an eventfd and a second
/// thread, polling another without sleeping, wakes it. A userfaultfd fault
/// is that round trip plus the handler's work.
fn wake_round_trips(n: usize) -> Result<Vec<u64>, Error> {
    let new_efd = |flags: libc::c_int| {
        // SAFETY: eventfd takes an initial count and flags.
        let fd = unsafe { libc::eventfd(0, flags | libc::EFD_CLOEXEC) };
        if fd < 0 {
            Err(Error::Failed(format!(
                "eventfd: {}",
                std::io::Error::last_os_error()
            )))
        } else {
            Ok(fd)
        }
    };
    let ask = new_efd(libc::EFD_NONBLOCK)?;
    let answer = match new_efd(0) {
        Ok(fd) => fd,
        Err(e) => {
            // SAFETY: closes the descriptor made above, once.
            unsafe { libc::close(ask) };
            return Err(e);
        }
    };
    let one = 1u64.to_ne_bytes();
    let poller = std::thread::spawn(move || {
        let mut v = [0u8; 8];
        for _ in 0..n {
            // SAFETY: reads and writes 8 bytes of local buffers on the
            // eventfds, which stay open until this thread is joined.
            unsafe {
                while libc::read(ask, v.as_mut_ptr().cast(), 8) != 8 {
                    std::hint::spin_loop();
                }
                libc::write(answer, one.as_ptr().cast(), 8);
            }
        }
    });
    let mut ns = Vec::with_capacity(n);
    let mut v = [0u8; 8];
    for _ in 0..n {
        let t = Instant::now();
        // SAFETY: as above; the answer's read blocks until the poller
        // writes.
        unsafe {
            libc::write(ask, one.as_ptr().cast(), 8);
            libc::read(answer, v.as_mut_ptr().cast(), 8);
        }
        ns.push(t.elapsed().as_nanos() as u64);
    }
    let _ = poller.join();
    // SAFETY: both descriptors are this function's, closed once, after the
    // poller is done with them.
    unsafe {
        libc::close(ask);
        libc::close(answer);
    }
    Ok(ns)
}

/// The page order of a pattern: Zipf over shuffled pages, or scans.
fn pattern(name: &str, n: usize, accesses: usize, s: f64) -> Vec<usize> {
    if name == "sequential" {
        return (0..2 * n).map(|i| i % n).collect();
    }
    let ranks = shuffled(n, 11);
    let mut cum = Vec::with_capacity(n);
    let mut t = 0.0;
    for r in 1..=n {
        t += 1.0 / (r as f64).powf(s);
        cum.push(t);
    }
    let mut rng = Rng::new(13, 2);
    (0..accesses)
        .map(|_| {
            let x = rng.unit() * t;
            ranks[cum.partition_point(|&c| c < x).min(n - 1)]
        })
        .collect()
}

/// Reads every page of `order` at `base` (one 8-byte word each); a sum so
/// the reads stay.
fn walk(base: *const u8, ps: usize, order: &[usize]) -> u64 {
    let mut sum = 0u64;
    for (i, &p) in order.iter().enumerate() {
        // SAFETY: page p of a mapping of at least `(p + 1) * ps` bytes.
        let w =
            unsafe { std::ptr::read_volatile(base.add(p * ps + (i % (ps / 8)) * 8).cast::<u64>()) };
        sum = sum.wrapping_add(w);
    }
    sum
}

fn at_limit(args: &RegionBenchArgs, corpus: &str, data: &[u8]) -> Result<Vec<LimitRow>, Error> {
    let params = args.params();
    let ps = region::page_size();
    let len = data.len() / ps * ps;
    let n = len / ps;
    let limit = ((len as f64 * args.limit_percent / 100.0) as usize / ps).max(1) * ps;
    let mut rows = Vec::new();
    for name in ["zipf", "sequential"] {
        let order = pattern(name, n, args.accesses, args.zipf);
        let t = Instant::now();
        let want = walk(data.as_ptr(), ps, &order);
        let plain_seconds = t.elapsed().as_secs_f64();
        for &comp in &args.comp {
            let r = region(len, limit, comp, params)?;
            let base = r.as_ptr();
            // SAFETY: the region holds `len` bytes; the data as many.
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), base, len) };
            let before = r.stats().faults.missing_store;
            let t = Instant::now();
            let got = walk(base, ps, &order);
            let seconds = t.elapsed().as_secs_f64();
            if got != want {
                return Err(Error::Failed(format!(
                    "{corpus}: the region's {name} reads with {} differ from the data's",
                    comp.name()
                )));
            }
            let s = r.stats();
            let resident = s.resident_pages * ps as u64;
            let used = s.mm_stat.mem_used_total;
            std::thread::sleep(SETTLE);
            let settled = r.stats();
            let settled_resident = settled.resident_pages * ps as u64;
            let settled_used = settled.mm_stat.mem_used_total;
            rows.push(LimitRow {
                corpus: corpus.into(),
                pattern: if name == "zipf" { "zipf" } else { "sequential" },
                compressor: comp.name().into(),
                data_bytes: len as u64,
                limit_bytes: limit as u64,
                resident_bytes: resident,
                orig_data_size: s.mm_stat.orig_data_size,
                compr_data_size: s.mm_stat.compr_data_size,
                mem_used_total: used,
                memory_ratio: (resident + used) as f64 / len as f64,
                settled_mem_used_total: settled_used,
                settled_memory_ratio: (settled_resident + settled_used) as f64 / len as f64,
                faults_from_store: s.faults.missing_store - before,
                seconds,
                plain_seconds,
                time_ratio: seconds / plain_seconds.max(1e-9),
            });
        }
    }
    Ok(rows)
}

/// Runs `zmem bench region`.
pub fn run(args: &RegionBenchArgs) -> Result<(), Error> {
    let files = if args.data.is_empty() {
        all_data()
    } else {
        args.data.clone()
    };
    let mut sets = Vec::new();
    for f in &files {
        let mut d = tune::corpus::read_input(f)?;
        d.truncate(args.size as usize);
        if d.len() < args.size as usize {
            return Err(Error::Failed(format!(
                "{}: {} bytes, --size asks for {}",
                f.display(),
                d.len(),
                args.size
            )));
        }
        let name = f.file_name().map_or_else(
            || f.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        sets.push((name, d));
        if args.promotion.seconds.is_some() {
            break;
        }
    }
    if let Some(seconds) = args.promotion.seconds {
        let (name, d) = &sets[0];
        return promotion::run(
            &args.promotion,
            seconds,
            name,
            d,
            args.comp[0],
            args.zipf,
            args.format.get(),
        );
    }
    let report = Report {
        faults: faults(&sets[0].1, &args.comp, args.params())?,
        at_limit: sets
            .iter()
            .map(|(name, d)| at_limit(args, name, d))
            .collect::<Result<Vec<_>, _>>()?
            .into_iter()
            .flatten()
            .collect(),
    };
    match args.format.get() {
        Format::Json => write_json(&report)?,
        Format::Table => write_stdout(&table(&report, &sets[0].0, args))?,
    }
    Ok(())
}

fn table(r: &Report, first: &str, args: &RegionBenchArgs) -> String {
    use std::fmt::Write as _;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "fault service on the faulting thread, {first}, random order (us)"
    );
    let _ = writeln!(
        o,
        "{:<42} {:>8} {:>8} {:>8} {:>9} {:>9}  handler: decompress/copy+wake/rest ns",
        "fault", "faults", "p50", "p99", "p99.9", "max"
    );
    for f in &r.faults {
        let kind = match &f.compressor {
            Some(c) => format!("{} ({c})", f.kind),
            None => f.kind.clone(),
        };
        let h = f
            .handler_ns
            .map_or(String::new(), |h| format!("  {}/{}/{}", h[0], h[1], h[2]));
        let _ = writeln!(
            o,
            "{kind:<42} {:>8} {:>8.2} {:>8.2} {:>8.2} {:>9.1}{h}",
            f.faults, f.p50_us, f.p99_us, f.p999_us, f.max_us
        );
    }
    let _ = writeln!(
        o,
        "\nmemory at a limit of {}% ({} Zipf {} reads, or two sequential scans){}; \
         ratio: (resident + mem_used_total) / data at the reads' end, settled: {:.1} s later",
        args.limit_percent,
        args.accesses,
        args.zipf,
        if args.params().is_empty() {
            String::new()
        } else {
            format!(", algorithm_params '{}'", args.params())
        },
        SETTLE.as_secs_f64()
    );
    let _ = writeln!(
        o,
        "{:<14} {:<10} {:<8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7} {:>7} {:>9} {:>8} {:>8} {:>7}",
        "data",
        "pattern",
        "comp",
        "data MiB",
        "resident",
        "stored",
        "compr",
        "mem_used",
        "ratio",
        "settled",
        "faults",
        "secs",
        "plain s",
        "x time"
    );
    for l in &r.at_limit {
        let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
        let _ = writeln!(
            o,
            "{:<14} {:<10} {:<8} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>7.3} {:>7.3} {:>9} {:>8.2} {:>8.3} {:>7.1}",
            l.corpus,
            l.pattern,
            l.compressor,
            mib(l.data_bytes),
            mib(l.resident_bytes),
            mib(l.orig_data_size),
            mib(l.compr_data_size),
            mib(l.mem_used_total),
            l.memory_ratio,
            l.settled_memory_ratio,
            l.faults_from_store,
            l.seconds,
            l.plain_seconds,
            l.time_ratio
        );
    }
    o
}
