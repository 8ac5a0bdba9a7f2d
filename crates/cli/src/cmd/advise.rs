//! `zmem advise`: which compressor, level and allocator to give zram for
//! this data, measured on this machine.
//!
//! This module owns the command: its flags (inputs as `zmem replay` takes
//! them, the sample's size and seed, the candidates) and printing. The
//! measurement and the advice are the product's ([`tune::advise`]); the
//! `--plot` figures are the lab's (feature `lab`).

use std::path::PathBuf;

use clap::Args;
use recipe::output::{write_json, write_stdout, Format, FormatArg};
use tune::advise::{self, AdviseOptions, Candidate};
use tune::corpus::Corpus;

use crate::error::CliError;

/// Arguments of `zmem advise`.
#[derive(Args, Debug)]
#[command(after_long_help = "\
WHAT IT MEASURES
  Every candidate compressor on one core: compress and decompress MB/s and
  the ratio; its memory in a real default-mode zsmalloc store
  (mem_used_total, not only compressed bytes) and random 4 KiB read latency
  there; the five allocators (zsmalloc default and kernel-compat, zblock,
  z3fold, zbud) with the least-memory compressor and with zram's default
  lzo-rle; and pairs of a fast primary with a strong secondary for idle pages
  (recompression), from each page's two sizes.

  Large inputs are sampled: --sample-pages pages in runs of 16 consecutive
  pages, chosen uniformly with --seed; the first line says what was read and
  the second how it was sampled.

EXAMPLES
  zmem advise /var/tmp/swap-sample.bin
  zmem advise --pid $(pidof firefox) --format json
  zmem advise --comp lz4,zstd:1,zstd:3:dict core.1234")]
pub struct AdviseArgs {
    /// Files, directories, tar archives, ELF core files, block devices,
    /// pipes, FIFOs, or - for standard input. None (and no --pid): the
    /// built-in default corpus of real files from /usr.
    paths: Vec<PathBuf>,
    /// Also measure the private anonymous memory of process PID (needs
    /// ptrace access to it, or CAP_SYS_PTRACE).
    #[arg(long, value_name = "PID", value_parser = recipe::flags::whole::<u32>(1, 1 << 22))]
    pid: Vec<u32>,
    /// Read tar archives and ELF core files as raw bytes.
    #[arg(long)]
    raw: bool,
    /// Pages to measure at most (16 to 4194304; 16384 pages, 64 MiB, keep a
    /// 256 MiB input within about a minute on two cores).
    #[arg(long, default_value_t = 16384, value_parser = recipe::flags::whole::<u64>(16, 1 << 22))]
    sample_pages: u64,
    /// Seed of the sample's choice of runs (any whole number, 0 too).
    #[arg(long, default_value_t = 1, value_parser = recipe::flags::whole::<u64>(0, u64::MAX))]
    seed: u64,
    /// Candidates to measure instead of the default set, comma-separated:
    /// NAME[:LEVEL][:dict] (e.g. lz4,zstd:-1,zstd:3:dict,lz4hc:9).
    #[arg(long, value_delimiter = ',', value_parser = parse_candidate)]
    comp: Vec<Candidate>,
    /// Candidates measured at once (1 to 64; each on one core).
    #[arg(long, default_value_t = 2, value_parser = recipe::flags::whole::<u32>(1, 64))]
    threads: u32,
    /// Random 4 KiB reads timed per candidate (100 to 10000000).
    #[arg(long, default_value_t = 20_000, value_parser = recipe::flags::whole::<u32>(100, 10_000_000))]
    latency_reads: u32,
    /// Which configuration to print as commands: the least memory, the
    /// fastest reads within 5% of that memory, or the fastest reads (all
    /// three are in the JSON).
    #[arg(long, default_value = "balanced", value_parser = clap::builder::PossibleValuesParser::new(advise::GOALS))]
    goal: String,
    /// Size of the built-in default corpus (4K to 1T).
    #[arg(long, value_parser = recipe::flags::size(4096, 1 << 40), default_value = "64M")]
    default_size: u64,
    /// Also draw the Pareto fronts: STEM-write.svg/.png (memory against
    /// compression speed) and STEM-read.svg/.png (memory against read
    /// latency).
    #[cfg(feature = "lab")]
    #[arg(long, value_name = "STEM")]
    plot: Option<PathBuf>,
    #[command(flatten)]
    format: FormatArg,
}

/// `NAME[:LEVEL][:dict]`, checked against the compressor's own levels.
fn parse_candidate(s: &str) -> Result<Candidate, String> {
    let mut parts = s.split(':');
    let name = parts.next().unwrap_or_default();
    let algo = zcomp::Algorithm::from_name(name).map_err(|e| e.to_string())?;
    let mut level = algo.default_level();
    let mut dictionary = false;
    for part in parts {
        if part == "dict" {
            if !algo.supports_dictionary() {
                return Err(format!("{name} takes no dictionary"));
            }
            dictionary = true;
        } else {
            level = part
                .parse()
                .ok()
                .filter(|l| algo.level_range().contains(l))
                .ok_or_else(|| {
                    let r = algo.level_range();
                    format!(
                        "'{part}' is not a level of {name} ({} to {})",
                        r.start(),
                        r.end()
                    )
                })?;
        }
    }
    Ok(Candidate {
        comp: algo,
        level,
        dictionary,
    })
}

/// Runs `zmem advise`.
pub fn run(args: &AdviseArgs) -> Result<(), CliError> {
    let corpus = if args.paths.is_empty() && args.pid.is_empty() {
        Corpus::default_corpus(args.default_size)?
    } else {
        Corpus::from_inputs(&args.paths, &args.pid, args.raw)?
    };
    let opts = AdviseOptions {
        sample_pages: args.sample_pages,
        seed: args.seed,
        threads: args.threads as usize,
        latency_reads: args.latency_reads as usize,
        page_size: 4096,
        progress: std::io::IsTerminal::is_terminal(&std::io::stderr()),
    };
    let read = corpus.read_line(opts.page_size);
    let sample = advise::sample(&corpus, &opts)?;
    let candidates = if args.comp.is_empty() {
        advise::default_candidates()
    } else {
        args.comp.clone()
    };
    let advice = advise::advise(read, &sample, &candidates, &opts)?;
    #[cfg(feature = "lab")]
    if let Some(stem) = &args.plot {
        for f in lab::advise_plot::plot_fronts(&advice, stem)? {
            eprintln!("wrote {}", f.display());
        }
    }
    match args.format.get() {
        Format::Json => Ok(write_json(&advice)?),
        Format::Table => Ok(write_stdout(&advise::format_advice(&advice, &args.goal))?),
    }
}
