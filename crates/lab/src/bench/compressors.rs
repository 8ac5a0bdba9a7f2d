//! `zmem bench compressors`: each compressor's own speed and ratio, page by
//! page, beside the kernel's zram with the same algorithm.
//!
//! For every data set and every compressor (lzo-rle, lzo, lz4 and lz4hc
//! each by liblz4 and by zmem-lz4, the port of the kernel's lib/lz4 that
//! kernel-compat mode runs, zstd at level -1, and any other given with
//! `--comp`), in one run, interleaved
//! round by round so that a noisy machine affects them alike:
//! - compression of every 4 KiB page with one context on one thread, as
//!   zram compresses (into the context's buffer);
//! - decompression of every page into one page buffer;
//! - where the kernel's zram offers the algorithm (root,
//!   `/sys/class/zram-control`, 4 KiB pages), the kernel's zram writing the
//!   same data and reading it back from one thread with direct I/O in 1 MiB
//!   requests, a fresh device each round (as `zmem bench store` runs it).
//!
//! Speeds are MB/s (10^6 bytes a second) of uncompressed data, medians over
//! the rounds; the ratio is the data's bytes over the sum of its pages'
//! compressed lengths. Every page's round trip and the kernel's read-back
//! are checked outside the timed loops. The kernel skips same-filled pages
//! (it stores no compressed bytes for them); the raw figures compress every
//! page.
//!
//! Owns the benchmark; the compressors are zcomp's, the kernel device is
//! [`crate::kernel_zram`]'s.

use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use serde::Serialize;

use super::data::all_data;
use crate::kernel_zram::{KernelZram, PageBuffer};
use crate::Error;
use recipe::output::{write_json, write_stdout, Format, FormatArg};

/// The page size every compressor is measured at: the kernel zram's.
const PAGE: usize = 4096;

/// The compressors always measured: zram's default and its plain variant,
/// lz4, lz4hc and deflate by both encoders (liblz4 and zlib-rs, default
/// mode's, and zmem-lz4 and the C zlib, kernel-compat mode's), and zstd at
/// its fastest common level (name, `algorithm_params`, which encoder).
const DEFAULT_COMPRESSORS: [(&str, &str, zcomp::Encoder); 9] = [
    ("lzo-rle", "", zcomp::Encoder::Fastest),
    ("lzo", "", zcomp::Encoder::Fastest),
    ("lz4", "", zcomp::Encoder::Fastest),
    ("lz4", "", zcomp::Encoder::Kernel),
    ("lz4hc", "", zcomp::Encoder::Fastest),
    ("lz4hc", "", zcomp::Encoder::Kernel),
    ("zstd", "level=-1", zcomp::Encoder::Fastest),
    ("deflate", "", zcomp::Encoder::Fastest),
    ("deflate", "", zcomp::Encoder::Kernel),
];

/// The label's mark of a row run by the kernel's encoder.
const KERNEL_ENCODER_TAG: &str = " [kernel]";

/// Arguments of `zmem bench compressors`.
#[derive(Args, Debug)]
pub struct CompressorsArgs {
    /// Data files, each measured on its own (default: the three data sets
    /// of scripts/make-corpus, linux256.bin, usr256.bin and heap256.bin).
    #[arg(long = "data", visible_alias = "input")]
    data: Vec<PathBuf>,
    /// More compressors to measure, by zram's names (comma list), beside
    /// lzo-rle, lzo, lz4 and lz4hc (each by liblz4 and by zmem-lz4) and
    /// zstd at level -1.
    #[arg(long, value_delimiter = ',')]
    comp: Vec<String>,
    /// Bytes of each file used, from its start (4K to 1T; default: all of it).
    #[arg(long, value_parser = recipe::flags::size(4096, 1 << 40))]
    size: Option<u64>,
    /// Rounds; each speed is the median (1 to 1000).
    #[arg(long, default_value_t = 5, value_parser = recipe::flags::whole_usize(1, 1000))]
    rounds: usize,
    /// Do not run the kernel's zram beside the compressors.
    #[arg(long)]
    no_kernel: bool,
    #[command(flatten)]
    format: FormatArg,
}

/// One compressor on one data set.
#[derive(Debug, Serialize)]
struct Row {
    /// The data file.
    corpus: String,
    /// The compressor: its zram name, its settings if not zram's
    /// defaults, and `[kernel]` for the kernel's encoder (zmem-lz4, the C
    /// zlib) where default mode runs another.
    compressor: String,
    /// The code that compressed (`zmem-lz4`, `liblz4 1.10`, ...).
    implementation: String,
    pages: usize,
    /// The bytes compressed (`pages` times 4096).
    input_bytes: u64,
    /// The sum of every page's compressed length.
    compressed_bytes: u64,
    /// `input_bytes / compressed_bytes`.
    ratio: f64,
    /// MB/s of uncompressed data, one thread, median of the rounds.
    compress_mb_s: f64,
    /// MB/s of uncompressed data, one thread, median of the rounds.
    decompress_mb_s: f64,
    /// The kernel's zram writing the same data (MB/s, median), if it ran.
    kernel_write_mb_s: Option<f64>,
    /// The kernel's zram reading it back (MB/s, median), if it ran.
    kernel_read_mb_s: Option<f64>,
    /// The kernel's `compr_data_size` after writing the data, if it ran.
    kernel_compr_data_size: Option<u64>,
    /// Why the kernel's zram did not run.
    kernel_skipped: Option<String>,
}

/// The whole report.
#[derive(Debug, Serialize)]
struct Report {
    page_size: usize,
    rounds: usize,
    rows: Vec<Row>,
}

/// One compressor being measured on one data set: its context, its pages'
/// compressed bytes and the figures of each round.
struct Subject {
    label: String,
    implementation: &'static str,
    ctx: zcomp::Context,
    /// The kernel's device for this algorithm, or why there is none.
    kernel: Result<(KernelZram, String), String>,
    compressed: Vec<u8>,
    spans: Vec<(usize, usize)>,
    compress: Vec<f64>,
    decompress: Vec<f64>,
    kernel_write: Vec<f64>,
    kernel_read: Vec<f64>,
    kernel_compr_data_size: Option<u64>,
}

fn median(v: &mut [f64]) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied()
}

fn failed(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Failed(format!("{what}: {e}"))
}

/// The compressors asked for: the defaults, then the others of `--comp`
/// (each with zram's default settings) not already among them.
fn compressors(extra: &[String]) -> Result<Vec<(String, zcomp::Compressor)>, Error> {
    let mut out = Vec::new();
    for (name, params, encoder) in DEFAULT_COMPRESSORS {
        let comp = zcomp::Compressor::parse(name, params)
            .map_err(|e| failed(name, e))?
            .with_encoder(encoder);
        let mut label = if params.is_empty() {
            name.to_string()
        } else {
            format!("{name} {params}")
        };
        if encoder == zcomp::Encoder::Kernel {
            label.push_str(KERNEL_ENCODER_TAG);
        }
        out.push((label, comp));
    }
    for name in extra {
        let comp =
            zcomp::Compressor::parse(name, "").map_err(|e| Error::Usage(format!("--comp: {e}")))?;
        if !out.iter().any(|(label, _)| label == name) {
            out.push((name.clone(), comp));
        }
    }
    Ok(out)
}

/// The kernel's zram device for `name` with `params`, or why not.
fn kernel_device(
    args: &CompressorsArgs,
    name: &str,
    params: bool,
    bytes: u64,
) -> Result<(KernelZram, String), String> {
    if args.no_kernel {
        return Err("not asked for (--no-kernel)".into());
    }
    if KernelZram::page_size() != PAGE {
        return Err(format!(
            "the kernel's pages are {} bytes, not {PAGE}",
            KernelZram::page_size()
        ));
    }
    // lz4-flex is zmem's second lz4 implementation; the kernel has one.
    let kernel_name = if name == "lz4-flex" { "lz4" } else { name };
    let dev = KernelZram::create(kernel_name, bytes)?;
    if params {
        // The device goes again when dropped.
        return Err("compressor settings are not passed to the kernel".into());
    }
    Ok((dev, kernel_name.to_string()))
}

/// The first `size` bytes of `path` (all of it without a size), whole
/// pages only.
fn read_pages(path: &PathBuf, size: Option<u64>) -> Result<Vec<u8>, Error> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| failed(&path.display().to_string(), e))?;
    let mut data = Vec::new();
    file.take(size.unwrap_or(u64::MAX))
        .read_to_end(&mut data)
        .map_err(|e| failed(&path.display().to_string(), e))?;
    data.truncate(data.len() - data.len() % PAGE);
    if data.is_empty() {
        return Err(Error::Usage(format!(
            "{} holds no whole {PAGE}-byte page",
            path.display()
        )));
    }
    Ok(data)
}

/// One round of `s` on `data`: compression, decompression and, if it has
/// one, the kernel's device. The first round also keeps every page's
/// compressed bytes and checks each round trip, outside the timed loops.
fn round(s: &mut Subject, data: &[u8], aligned: Option<&PageBuffer>) -> Result<(), Error> {
    let mb = data.len() as f64 / 1e6;
    let label = s.label.clone();
    let t = Instant::now();
    let mut total = 0usize;
    for page in data.chunks_exact(PAGE) {
        total += s
            .ctx
            .compress_buffered(page)
            .map_err(|e| failed(&label, e))?
            .len();
    }
    s.compress.push(mb / t.elapsed().as_secs_f64());
    std::hint::black_box(total);

    if s.spans.is_empty() {
        let mut out = vec![0u8; PAGE];
        for page in data.chunks_exact(PAGE) {
            let c = s
                .ctx
                .compress_buffered(page)
                .map_err(|e| failed(&label, e))?;
            s.spans.push((s.compressed.len(), c.len()));
            s.compressed.extend_from_slice(c);
            let (off, len) = *s.spans.last().expect("just pushed");
            let n = s
                .ctx
                .decompress(&s.compressed[off..off + len], &mut out)
                .map_err(|e| failed(&label, e))?;
            if n != PAGE || out != page {
                return Err(Error::Failed(format!(
                    "{label}: page {} does not round-trip",
                    s.spans.len() - 1
                )));
            }
        }
    }

    let mut out = vec![0u8; PAGE];
    let t = Instant::now();
    for &(off, len) in &s.spans {
        s.ctx
            .decompress(&s.compressed[off..off + len], &mut out)
            .map_err(|e| failed(&label, e))?;
        std::hint::black_box(&out);
    }
    s.decompress.push(mb / t.elapsed().as_secs_f64());

    if let (Ok((dev, name)), Some(input)) = (&s.kernel, aligned) {
        let what = format!("kernel zram{} ({name})", dev.id());
        dev.reinit(name, data.len() as u64)
            .map_err(|e| failed(&what, e))?;
        let t = Instant::now();
        dev.write_all(input).map_err(|e| failed(&what, e))?;
        s.kernel_write.push(mb / t.elapsed().as_secs_f64());
        let mm = dev.mm_stat().map_err(|e| failed(&what, e))?;
        s.kernel_compr_data_size = mm.get(1).copied();
        let mut back = PageBuffer::zeroed(data.len());
        let t = Instant::now();
        dev.read_all(&mut back).map_err(|e| failed(&what, e))?;
        s.kernel_read.push(mb / t.elapsed().as_secs_f64());
        if back[..] != data[..] {
            return Err(Error::Failed(format!("{what}: read back different bytes")));
        }
        // Leave no data in the device between rounds.
        dev.reinit(name, data.len() as u64)
            .map_err(|e| failed(&what, e))?;
    }
    Ok(())
}

/// Runs `zmem bench compressors`.
pub fn run(args: &CompressorsArgs) -> Result<(), Error> {
    let paths = if args.data.is_empty() {
        let paths = all_data();
        let missing: Vec<String> = paths
            .iter()
            .filter(|p| !p.is_file())
            .map(|p| p.display().to_string())
            .collect();
        if !missing.is_empty() {
            return Err(Error::Failed(format!(
                "missing {}: make the data sets with scripts/make-corpus, or give files with --data",
                missing.join(", ")
            )));
        }
        paths
    } else {
        args.data.clone()
    };
    let comps = compressors(&args.comp)?;
    let rounds = args.rounds.max(1);
    let mut rows = Vec::new();
    for path in &paths {
        let data = read_pages(path, args.size)?;
        let mut subjects = Vec::new();
        for (label, comp) in &comps {
            let ctx = comp.context().map_err(|e| failed(label, e))?;
            let name = comp.algorithm().name();
            let kernel = if label.ends_with(KERNEL_ENCODER_TAG) {
                Err("the kernel's zram runs on the default encoder's row".to_string())
            } else {
                kernel_device(args, name, label != name, data.len() as u64)
            };
            subjects.push(Subject {
                label: label.clone(),
                implementation: comp.implementation(),
                ctx,
                kernel,
                compressed: Vec::new(),
                spans: Vec::new(),
                compress: Vec::new(),
                decompress: Vec::new(),
                kernel_write: Vec::new(),
                kernel_read: Vec::new(),
                kernel_compr_data_size: None,
            });
        }
        let aligned = subjects
            .iter()
            .any(|s| s.kernel.is_ok())
            .then(|| PageBuffer::copy_of(&data));
        for _ in 0..rounds {
            for s in &mut subjects {
                round(s, &data, aligned.as_ref())?;
            }
        }
        for mut s in subjects {
            let compressed_bytes = s.spans.iter().map(|&(_, len)| len as u64).sum::<u64>();
            rows.push(Row {
                corpus: path.display().to_string(),
                compressor: s.label,
                implementation: s.implementation.to_string(),
                pages: data.len() / PAGE,
                input_bytes: data.len() as u64,
                compressed_bytes,
                ratio: data.len() as f64 / compressed_bytes as f64,
                compress_mb_s: median(&mut s.compress).unwrap_or(f64::NAN),
                decompress_mb_s: median(&mut s.decompress).unwrap_or(f64::NAN),
                kernel_write_mb_s: median(&mut s.kernel_write),
                kernel_read_mb_s: median(&mut s.kernel_read),
                kernel_compr_data_size: s.kernel_compr_data_size,
                kernel_skipped: s.kernel.err(),
            });
        }
    }
    let report = Report {
        page_size: PAGE,
        rounds,
        rows,
    };
    match args.format.get() {
        Format::Json => write_json(&report),
        Format::Table => write_stdout(&table(&report)),
    }
}

/// The report as a table, one line per data set and compressor.
fn table(report: &Report) -> String {
    let mut s = format!(
        "{PAGE}-byte pages, one thread; MB/s of uncompressed data, medians of {} rounds\n\
         kernel: its zram with the same algorithm, direct I/O in 1 MiB requests (same-filled pages not compressed)\n\n",
        report.rounds
    );
    s.push_str(&format!(
        "{:<28} {:<20} {:>8} {:>7} {:>13} {:>15} {:>13} {:>12}\n",
        "corpus",
        "compressor",
        "pages",
        "ratio",
        "compress MB/s",
        "decompress MB/s",
        "kernel write",
        "kernel read"
    ));
    let mut skipped: Vec<String> = Vec::new();
    for r in &report.rows {
        let corpus = std::path::Path::new(&r.corpus)
            .file_name()
            .map_or(r.corpus.clone(), |n| n.to_string_lossy().into_owned());
        let kernel = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.1}"));
        s.push_str(&format!(
            "{:<28} {:<20} {:>8} {:>7.3} {:>13.1} {:>15.1} {:>13} {:>12}\n",
            corpus,
            r.compressor,
            r.pages,
            r.ratio,
            r.compress_mb_s,
            r.decompress_mb_s,
            kernel(r.kernel_write_mb_s),
            kernel(r.kernel_read_mb_s)
        ));
        if let Some(why) = &r.kernel_skipped {
            let line = format!("  kernel zram not run for {}: {why}", r.compressor);
            if !skipped.contains(&line) {
                skipped.push(line);
            }
        }
    }
    if !skipped.is_empty() {
        s.push('\n');
        s.push_str(&skipped.join("\n"));
        s.push('\n');
    }
    s
}
