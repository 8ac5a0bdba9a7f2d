//! `zmem bench read-latency`: how long a reader waits for an object while
//! compaction runs on another thread, against the same reader alone.
//!
//! The pool holds two interleaved sets of real compressed pages: the
//! reader's and the compactor's. Phase 1 times reads alone. In phase 2
//! another thread loops: free a random half of its set (fragmenting zspages
//! that also hold the reader's objects), compact the pool (which moves the
//! reader's objects too), store its freed objects again. A read is: take
//! the object's shared hold, copy its bytes into a 4 KiB buffer (where a
//! decompressor would read them), drop the hold. Latency per read goes
//! into an HDR histogram.
//!
//! Then the same question for the store's background compactor:
//! a default-mode zram store holds 64 MiB of the data's pages; a reader
//! reads (and decompresses) random even pages while another thread keeps
//! discarding and rewriting a random half of the odd ones, once with the
//! background compactor off and once with its default policy on, each on a
//! fresh store. The ratio of the two p99.9s is what the compactor's pauses
//! cost readers.
//!
//! Owns the benchmark only; the pool and the store are used through their
//! public APIs.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use hdrhistogram::Histogram;
use serde::Serialize;
use zsmalloc::{Handle, Mode, Pool, PoolConfig};

use super::data::{compressed_pages, default_data};
use crate::Error;
use recipe::output::{Format, FormatArg};
use tune::rng::Rng;

/// Arguments of `zmem bench read-latency`.
#[derive(Args, Debug)]
pub struct ReadLatencyArgs {
    /// Data file whose lz4-compressed 4 KiB pages are the objects.
    #[arg(long)]
    data: Option<PathBuf>,
    /// Seconds per phase (above 0, at most 3600).
    #[arg(long, default_value_t = 3.0, value_parser = recipe::flags::real(0.0, 3600.0, true))]
    seconds: f64,
    /// Pool mode.
    #[arg(long, default_value = "kernel-compat", value_parser = parse_mode)]
    mode: Mode,
    /// Bound of the page source's cache of freed zspages, in KiB (0: every
    /// freed zspage goes back to the OS at once; at most 64 GiB; default: the
    /// pages crate's).
    #[arg(long, value_parser = recipe::flags::whole_usize(0, 1 << 26))]
    page_cache_kib: Option<usize>,
    /// Bound of that cache while compaction runs, in KiB (0: none held; at
    /// most 64 GiB; default: the pages crate's).
    #[arg(long, value_parser = recipe::flags::whole_usize(0, 1 << 26))]
    page_hold_kib: Option<usize>,
    #[command(flatten)]
    format: FormatArg,
}

fn parse_mode(s: &str) -> Result<Mode, String> {
    s.parse()
}

/// Percentiles of one phase, in nanoseconds.
#[derive(Serialize, Debug)]
struct Phase {
    name: &'static str,
    reads: u64,
    p50_ns: u64,
    p99_ns: u64,
    p999_ns: u64,
    p9999_ns: u64,
    max_ns: u64,
    compactions: u64,
    objs_moved: u64,
    /// System calls that gave pages back to the OS during the phase (each
    /// ends with a TLB shootdown that interrupts the reader's CPU).
    advise_calls: u64,
    /// Store phases: rounds of discarding and rewriting half the odd pages.
    #[serde(skip_serializing_if = "Option::is_none")]
    churn_rounds: Option<u64>,
}

#[derive(Serialize, Debug)]
struct Report {
    data: String,
    mode: Mode,
    objects: usize,
    page_cache_pages: usize,
    phases: Vec<Phase>,
    p999_ratio: f64,
    /// The store phases: reads with background compaction off, then on.
    store_phases: Vec<Phase>,
    /// p99.9 with background compaction on over off.
    auto_p999_ratio: f64,
}

/// Pages of the store phases (64 MiB of 4 KiB pages at most).
const STORE_PAGES: usize = 16384;

/// One store phase: a fresh default-mode lz4 store with `pages`, the
/// background compactor in `mode`; reads of even pages timed while another
/// thread discards and rewrites odd ones. Returns the phase and whether
/// every page read back intact.
fn store_phase(
    name: &'static str,
    pages: &[u8],
    mode: zram::AutoCompactMode,
    seconds: f64,
) -> Result<Phase, Error> {
    use recipe::spec::StoreSpec;
    let n = pages.len() / 4096;
    let spec = StoreSpec {
        auto_compact: zram::AutoCompactPolicy::new(mode),
        ..StoreSpec::new("zsmalloc", zcomp::Algorithm::Lz4, Mode::Default)
    };
    let store = spec.open(pages.len() as u64)?;
    let page = |i: usize| &pages[i * 4096..(i + 1) * 4096];
    let fail = |e: zram::StoreError| Error::Failed(e.to_string());
    for i in 0..n {
        store.write_page(i as u64, page(i)).map_err(fail)?;
    }
    let stop = AtomicBool::new(false);
    let rounds = AtomicU64::new(0);
    let stats_before = store.auto_compact_stats();
    let hist = std::thread::scope(|scope| -> Result<Histogram<u64>, Error> {
        let churn = scope.spawn(|| -> Result<(), Error> {
            let mut rng = Rng::new(0x51ed_270b_2733_5c65, 2);
            while !stop.load(Ordering::Relaxed) {
                let odd: Vec<usize> = (1..n)
                    .step_by(2)
                    .filter(|_| rng.next_u64() % 2 == 0)
                    .collect();
                for &i in &odd {
                    store.discard(i as u64, 1).map_err(fail)?;
                }
                for &i in &odd {
                    store.write_page(i as u64, page(i)).map_err(fail)?;
                }
                rounds.fetch_add(1, Ordering::Relaxed);
            }
            Ok(())
        });
        let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3)
            .map_err(|e| Error::Failed(e.to_string()))?;
        let mut buf = vec![0u8; 4096];
        let mut rng = Rng::new(0x2545_f491_4f6c_dd1d, 3);
        let end = Instant::now() + Duration::from_secs_f64(seconds);
        while Instant::now() < end {
            for _ in 0..256 {
                let i = (rng.next_u64() % (n as u64 / 2)) * 2;
                let t = Instant::now();
                store.read_page(i, &mut buf).map_err(fail)?;
                hist.saturating_record((t.elapsed().as_nanos() as u64).max(1));
            }
        }
        stop.store(true, Ordering::Relaxed);
        churn
            .join()
            .map_err(|_| Error::Failed("the churn thread panicked".into()))??;
        Ok(hist)
    })?;
    // Every page is intact.
    let mut buf = vec![0u8; 4096];
    for i in 0..n {
        store.read_page(i as u64, &mut buf).map_err(fail)?;
        if buf != page(i) {
            return Err(Error::Failed(format!(
                "store page {i} changed under {name}"
            )));
        }
    }
    let after = store.auto_compact_stats();
    Ok(Phase {
        churn_rounds: Some(rounds.load(Ordering::Relaxed)),
        ..phase(
            name,
            &hist,
            after.runs - stats_before.runs,
            after.objs_moved - stats_before.objs_moved,
            0,
        )
    })
}

fn store(pool: &Pool, data: &[u8]) -> Result<Handle, Error> {
    let h = pool
        .malloc(data.len())
        .map_err(|e| Error::Failed(e.to_string()))?;
    pool.write(h, data)
        .map_err(|e| Error::Failed(e.to_string()))?;
    Ok(h)
}

/// Times reads of random reader objects until `stop`.
fn read_phase(
    pool: &Pool,
    objects: &[(Handle, usize)],
    seconds: f64,
    stop: &AtomicBool,
) -> Result<Histogram<u64>, Error> {
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3)
        .map_err(|e| Error::Failed(e.to_string()))?;
    let mut buf = [0u8; 4096];
    let mut rng = Rng::new(0x2545_f491_4f6c_dd1d, 0);
    let end = Instant::now() + Duration::from_secs_f64(seconds);
    while Instant::now() < end {
        for _ in 0..256 {
            let (h, len) = objects[(rng.next_u64() % objects.len() as u64) as usize];
            let t = Instant::now();
            {
                let obj = pool
                    .read(h, len)
                    .map_err(|e| Error::Failed(e.to_string()))?;
                buf[..len].copy_from_slice(&obj);
            }
            let ns = t.elapsed().as_nanos() as u64;
            hist.saturating_record(ns.max(1));
        }
        std::hint::black_box(&buf);
    }
    stop.store(true, Ordering::Relaxed);
    Ok(hist)
}

fn phase(
    name: &'static str,
    h: &Histogram<u64>,
    compactions: u64,
    objs_moved: u64,
    advise_calls: u64,
) -> Phase {
    Phase {
        name,
        reads: h.len(),
        p50_ns: h.value_at_quantile(0.5),
        p99_ns: h.value_at_quantile(0.99),
        p999_ns: h.value_at_quantile(0.999),
        p9999_ns: h.value_at_quantile(0.9999),
        max_ns: h.max(),
        compactions,
        objs_moved,
        advise_calls,
        churn_rounds: None,
    }
}

/// Writes `phases` as rows: the latency columns, then the three named
/// counts (compactions, objects moved, and `last`'s figure).
fn phase_table(out: &mut String, phases: &[Phase], counts: [&str; 3], last: fn(&Phase) -> u64) {
    use std::fmt::Write as _;
    let _ = writeln!(
        out,
        "{:<24} {:>10} {:>8} {:>8} {:>8} {:>9} {:>9} {:>11} {:>11} {:>8}",
        "phase",
        "reads",
        "p50 ns",
        "p99 ns",
        "p99.9 ns",
        "p99.99 ns",
        "max ns",
        counts[0],
        counts[1],
        counts[2]
    );
    for p in phases {
        let _ = writeln!(
            out,
            "{:<24} {:>10} {:>8} {:>8} {:>8} {:>9} {:>9} {:>11} {:>11} {:>8}",
            p.name,
            p.reads,
            p.p50_ns,
            p.p99_ns,
            p.p999_ns,
            p.p9999_ns,
            p.max_ns,
            p.compactions,
            p.objs_moved,
            last(p)
        );
    }
}

/// Runs `zmem bench read-latency`.
pub fn run(args: &ReadLatencyArgs) -> Result<(), Error> {
    let path = args
        .data
        .clone()
        .unwrap_or_else(|| default_data().remove(0));
    if !path.exists() {
        return Err(Error::Failed(format!(
            "{} is missing: make the data sets with scripts/make-corpus",
            path.display()
        )));
    }
    if !(args.seconds > 0.0 && args.seconds.is_finite()) {
        return Err(Error::Usage("--seconds must be positive".into()));
    }
    let (bytes, spans) = compressed_pages(&path)?;
    let bytes = Arc::new(bytes);
    let config = PoolConfig::of_mode(args.mode);
    let pool = Arc::new(Pool::new(config).map_err(|e| Error::Failed(e.to_string()))?);
    if let Some(kib) = args.page_cache_kib {
        pool.set_page_cache_limit((kib << 10) / pool.page_size());
    }
    if let Some(kib) = args.page_hold_kib {
        pool.set_page_hold_limit((kib << 10) / pool.page_size());
    }
    // Interleave the two sets so they share zspages.
    let mut reader = Vec::new();
    let mut churn = Vec::new();
    for (i, &(off, len)) in spans.iter().enumerate() {
        let h = store(&pool, &bytes[off..off + len])?;
        if i % 2 == 0 {
            reader.push((h, len));
        } else {
            churn.push((h, off, len));
        }
    }

    let stop = AtomicBool::new(false);
    let calls_before = pool.page_stats().advise_calls;
    let quiet = read_phase(&pool, &reader, args.seconds, &stop)?;
    let quiet_calls = pool.page_stats().advise_calls - calls_before;

    let stop = Arc::new(AtomicBool::new(false));
    let compactions = Arc::new(AtomicU64::new(0));
    let moved_before = pool.stats().objs_moved;
    let calls_before = pool.page_stats().advise_calls;
    let compactor = {
        let (pool, stop, compactions, bytes) = (
            pool.clone(),
            stop.clone(),
            compactions.clone(),
            bytes.clone(),
        );
        std::thread::spawn(move || -> Result<Vec<(Handle, usize, usize)>, Error> {
            let mut rng = Rng::new(0x9e37_79b9_7f4a_7c15, 1);
            while !stop.load(Ordering::Relaxed) {
                let mut freed = Vec::new();
                for item in churn.iter_mut() {
                    if rng.next_u64() % 2 == 0 {
                        pool.free(item.0)
                            .map_err(|e| Error::Failed(e.to_string()))?;
                        freed.push(item);
                    }
                }
                pool.compact();
                compactions.fetch_add(1, Ordering::Relaxed);
                for item in freed {
                    item.0 = store(&pool, &bytes[item.1..item.1 + item.2])?;
                }
            }
            Ok(churn)
        })
    };
    let busy = read_phase(&pool, &reader, args.seconds, &stop)?;
    let churn = compactor
        .join()
        .map_err(|_| Error::Failed("the compactor thread panicked".into()))??;
    let moved = pool.stats().objs_moved - moved_before;
    let busy_calls = pool.page_stats().advise_calls - calls_before;

    // Every object is still intact.
    for &(h, len) in &reader {
        pool.read(h, len)
            .map_err(|e| Error::Failed(e.to_string()))?;
    }
    for (h, off, len) in churn {
        let obj = pool
            .read(h, len)
            .map_err(|e| Error::Failed(e.to_string()))?;
        if *obj != bytes[off..off + len] {
            return Err(Error::Failed("an object changed under compaction".into()));
        }
    }
    pool.check_invariants().map_err(Error::Failed)?;

    // The store phases, on the data's first 64 MiB of pages.
    let raw = tune::corpus::read_input(&path)?;
    let take = (raw.len() / 4096).min(STORE_PAGES) * 4096;
    let raw = &raw[..take];
    if raw.len() < 4 * 4096 {
        return Err(Error::Failed(format!(
            "{}: fewer than 4 pages for the store phases",
            path.display()
        )));
    }
    let churn = |name, auto| store_phase(name, raw, auto, args.seconds);
    let off = churn("store, churn, auto off", zram::AutoCompactMode::Off)?;
    let on = churn("store, churn, auto on", zram::AutoCompactMode::On)?;
    let auto_p999_ratio = on.p999_ns as f64 / off.p999_ns as f64;
    let store_phases = vec![off, on];

    let phases = vec![
        phase("reads alone", &quiet, 0, 0, quiet_calls),
        phase(
            "reads while compacting",
            &busy,
            compactions.load(Ordering::Relaxed),
            moved,
            busy_calls,
        ),
    ];
    let report = Report {
        data: path.display().to_string(),
        mode: args.mode,
        objects: reader.len(),
        page_cache_pages: pool.page_stats().cache_limit_pages,
        p999_ratio: phases[1].p999_ns as f64 / phases[0].p999_ns as f64,
        phases,
        store_phases,
        auto_p999_ratio,
    };
    let text = if args.format.get() == Format::Json {
        serde_json::to_string_pretty(&report).map_err(|e| Error::Failed(e.to_string()))? + "\n"
    } else {
        use std::fmt::Write as _;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{} objects read at random from {} ({} mode), {} s per phase, page cache {} KiB",
            report.objects,
            report.data,
            args.mode.name(),
            args.seconds,
            report.page_cache_pages * pool.page_size() / 1024
        );
        phase_table(
            &mut out,
            &report.phases,
            ["compactions", "objs moved", "madvise"],
            |p| p.advise_calls,
        );
        let _ = writeln!(
            out,
            "p99.9 while compacting / alone: {:.2}x",
            report.p999_ratio
        );
        let _ = writeln!(
            out,
            "\nthe store's background compactor: {} pages of the data in a default-mode lz4 store, \
             even pages read (decompressed) while odd ones are discarded and rewritten",
            take / 4096
        );
        phase_table(
            &mut out,
            &report.store_phases,
            ["auto runs", "objs moved", "churns"],
            |p| p.churn_rounds.unwrap_or(0),
        );
        let _ = writeln!(
            out,
            "p99.9 with background compaction on / off: {:.2}x",
            report.auto_p999_ratio
        );
        out
    };
    recipe::output::write_stdout(&text)
}
