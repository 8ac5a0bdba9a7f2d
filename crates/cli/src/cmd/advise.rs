//! `zmem advise`: which compressor, level and allocator to give zram for
//! this data, measured on this machine.
//!
//! This module owns the command: its flags (inputs as `zmem replay` takes
//! them, the sample's size and seed, the candidates, the kernel "what zram
//! would use" stands for) and printing. The
//! measurement and the advice are the product's ([`tune::advise`]); the
//! `--plot` figures are the lab's (feature `lab`).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use clap::Args;
use recipe::output::{write_json, write_stdout, Format, FormatArg};
use tune::advise::{self, AdviseOptions, Candidate};
use tune::corpus::Corpus;
use tune::emit::Emit;
use tune::machine::{self, MachineOptions};
use tune::system_memory::Scope;

use super::replay::ZswapArgs;
use crate::error::CliError;

/// Arguments of `zmem advise`.
#[derive(Args, Debug)]
#[command(after_long_help = "\
WHAT IT MEASURES
  Every candidate compressor on one core: compress and decompress MB/s and
  the ratio; its memory in a real default-mode zsmalloc store
  (mem_used_total, not only compressed bytes) and random 4 KiB read latency
  there; the five allocators (zsmalloc default and kernel-compat, zblock,
  z3fold, zbud) with the least-memory compressor and with the kernel's zram
  default; and pairs of a fast primary with a strong secondary for idle pages
  (recompression), from each page's two sizes.

  What zram would use is kernel-compat mode (the kernel's zsmalloc
  geometry) with the compressor a new zram device of the kernel takes: the
  running kernel's CONFIG_ZRAM_DEF_COMP (lz4 on Debian's 6.12 and later,
  upstream's lzo-rle elsewhere), or --kernel-comp NAME for another machine.
  The report's first line names that kernel, as zmem replay's does, and the
  figure is the one zmem replay prints for kernel-compat.

  Large inputs are sampled: --sample-pages pages in runs of 16 consecutive
  pages, chosen uniformly with --seed; the first line says what was read and
  the second how it was sampled.

A WHOLE MACHINE
  --system (root), --cgroup PATH, or --pid alone: the private anonymous
  memory of every process (of the cgroup, of the pids), as zram would receive
  it when the kernel swaps, each process weighted by its size; zmem itself
  and kernel threads left out. The report starts with the configuration
  chosen among the compressors this kernel's zram offers, as the sysfs and
  zram-generator lines this kernel accepts: its mem_used_total in
  kernel-compat mode, disksize and mem_limit for --target-share of RAM
  (zram-size's factor of RAM rounded down to a tenth), and vm.swappiness
  (rounded to a step of 20) and vm.page-cluster from read costs measured
  until their medians settle. Then, marked as not for this machine, what a
  kernel whose zram offers more compressors would take; then the
  distributions' defaults and the measurements. --watch
  DURATION clears the processes' accessed and soft-dirty bits and reports
  the memory untouched after 1 min, 10 min, 1 h, ... and an idle writeback
  and recompression policy; --verify writes every page into a hot-added
  kernel zram device (never zram0; removed afterwards) and prints its
  mm_stat beside the prediction; --emit prints a file to install instead of
  the report.

EXAMPLES
  zmem advise /var/tmp/swap-sample.bin
  sudo zmem advise --system --verify
  sudo zmem advise --system --watch 1h --backing-dev /dev/sdb2 --emit sysfs
  zmem advise --pid 1234 --pid 5678 --emit zram-generator
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
    /// Measure the whole machine's anonymous memory (root).
    #[arg(long, conflicts_with = "cgroup")]
    system: bool,
    /// Measure the anonymous memory of a cgroup's processes and its
    /// descendants' (a path under /sys/fs/cgroup, absolute or relative to
    /// it; root).
    #[arg(long, value_name = "PATH")]
    cgroup: Option<PathBuf>,
    /// With --system, --cgroup or --pid: the share of RAM compressed pages
    /// may hold, percent (1 to 100), which sizes mem_limit and disksize.
    #[arg(long, value_name = "PERCENT", default_value_t = 25, value_parser = recipe::flags::whole::<u32>(1, 100))]
    target_share: u32,
    /// With --system, --cgroup or --pid: watch the memory for this long
    /// (90s, 10m, 1h, 2d; at most 30 days) and report what stays untouched.
    #[arg(long, value_name = "DURATION", value_parser = tune::idle_watch::parse_duration)]
    watch: Option<std::time::Duration>,
    /// With --system, --cgroup or --pid: write every scanned page into a
    /// hot-added kernel zram device with the chosen configuration and print
    /// its mm_stat beside the prediction (root; the device is removed
    /// afterwards).
    #[arg(long)]
    verify: bool,
    /// With --system, --cgroup or --pid: print this file instead of the
    /// report: zram-generator (a zram-generator.conf for the installed
    /// 1.1.2), sysfs (a shell script of sysfs lines in the order the kernel
    /// requires), sysctl (a sysctl.d file), zmem (the zmem serve command),
    /// zswap (zswap instead of zram: a kernel command line fragment and
    /// /sys/module/zswap/parameters lines, max_pool_percent from zswap's
    /// measured memory and --target-share). A file for zram warns when
    /// zswap is on.
    #[arg(long, value_name = "KIND", value_parser = clap::builder::PossibleValuesParser::new(tune::emit::EMIT_NAMES))]
    emit: Option<String>,
    /// With --system, --cgroup or --pid: the block device idle pages would
    /// be written back to (zram's backing_dev), for the emitted files.
    #[arg(long, value_name = "PATH")]
    backing_dev: Option<PathBuf>,
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
    /// fastest reads within 5% of that memory, or the fastest reads (reads
    /// within 10% of the fastest count as as fast, and the least memory of
    /// them is taken; all three are in the JSON). For a machine, among the
    /// compressors its kernel's zram offers.
    #[arg(long, default_value = "balanced", value_parser = clap::builder::PossibleValuesParser::new(advise::GOALS))]
    goal: String,
    /// The kernel whose zram "what zram would use" stands for, by its zram's
    /// default compressor (to answer for another machine) [default: the
    /// running kernel's CONFIG_ZRAM_DEF_COMP, or a hot-added zram device's;
    /// else upstream's lzo-rle]
    #[arg(long, value_name = "NAME", value_parser = recipe::spec::parse_comp)]
    kernel_comp: Option<zcomp::Algorithm>,
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
    #[command(flatten)]
    zswap: ZswapArgs,
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

/// The machine's processes to measure, when the arguments name them
/// rather than inputs.
fn scope(args: &AdviseArgs) -> Option<Scope> {
    if args.system {
        Some(Scope::System)
    } else if let Some(c) = &args.cgroup {
        Some(Scope::Cgroup(c.clone()))
    } else if args.paths.is_empty() && !args.pid.is_empty() {
        Some(Scope::Pids(args.pid.clone()))
    } else {
        None
    }
}

fn advise_options(args: &AdviseArgs) -> AdviseOptions {
    AdviseOptions {
        sample_pages: args.sample_pages,
        seed: args.seed,
        threads: args.threads as usize,
        latency_reads: args.latency_reads as usize,
        page_size: 4096,
        progress: std::io::IsTerminal::is_terminal(&std::io::stderr()),
        kernel: match args.kernel_comp {
            Some(c) => recipe::KernelCompat::given(c),
            None => recipe::KernelCompat::running().clone(),
        },
    }
}

/// `zmem advise --system`, `--cgroup` or `--pid` alone.
fn run_machine(args: &AdviseArgs, scope: Scope) -> Result<(), CliError> {
    if (args.system || args.cgroup.is_some()) && (!args.paths.is_empty() || !args.pid.is_empty()) {
        return Err(CliError::Usage(
            "--system and --cgroup measure processes: give no inputs or --pid with them".into(),
        ));
    }
    let opts = MachineOptions {
        scope,
        advise: advise_options(args),
        candidates: args.comp.clone(),
        goal: args.goal.clone(),
        target_share: f64::from(args.target_share) / 100.0,
        watch: args.watch,
        backing_dev: args.backing_dev.clone(),
        zswap: Some(args.zswap.settings()?),
    };
    let mut m = machine::run(&opts)?;
    if args.verify {
        m.verify = Some(verify(&m)?);
    }
    if let Some(kind) = &args.emit {
        let what = Emit::from_name(kind).expect("clap checked the name");
        if let Some(w) = tune::emit::zswap_warning(&m, what) {
            eprintln!("warning: {w}");
        }
        return Ok(write_stdout(&tune::emit::emit(&m, what))?);
    }
    match args.format.get() {
        Format::Json => Ok(write_json(&m)?),
        Format::Table => Ok(write_stdout(&machine::format(&m))?),
    }
}

/// `--verify`, with SIGINT and SIGTERM taken by a thread that stops the
/// writing, so that the kernel device is removed however the run ends
/// (every thread of the measurement has ended by now: none is left
/// unmasked for a signal to kill the process through).
fn verify(m: &machine::MachineAdvice) -> Result<machine::Verify, CliError> {
    let blocked = crate::signals::block_termination()
        .map_err(|e| CliError::Failed(format!("--verify: blocking signals: {e}")))?;
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    // Waits for a signal for as long as the process lives.
    std::thread::spawn(move || {
        if blocked.wait().is_ok() {
            flag.store(true, Ordering::Relaxed);
        }
    });
    let result = machine::verify(m, &stop);
    if stop.load(Ordering::Relaxed) {
        // Interrupted: report it however the writing ended.
        return Err(CliError::Failed(match result {
            Err(e) => e.to_string(),
            Ok(_) => "--verify: interrupted; the kernel device was removed".into(),
        }));
    }
    Ok(result?)
}

/// Runs `zmem advise`.
pub fn run(args: &AdviseArgs) -> Result<(), CliError> {
    if let Some(scope) = scope(args) {
        return run_machine(args, scope);
    }
    for (set, flag) in [
        (args.watch.is_some(), "--watch"),
        (args.verify, "--verify"),
        (args.emit.is_some(), "--emit"),
        (args.backing_dev.is_some(), "--backing-dev"),
    ] {
        if set {
            return Err(CliError::Usage(format!(
                "{flag} measures a machine's processes: it needs --system, --cgroup, or --pid \
                 without input files"
            )));
        }
    }
    let corpus = if args.paths.is_empty() && args.pid.is_empty() {
        Corpus::default_corpus(args.default_size)?
    } else {
        Corpus::from_inputs(&args.paths, &args.pid, args.raw)?
    };
    let opts = advise_options(args);
    let read = corpus.read_line(opts.page_size);
    let sample = advise::sample(&corpus, &opts)?;
    let candidates = if args.comp.is_empty() {
        advise::default_candidates()
    } else {
        args.comp.clone()
    };
    let settings = args.zswap.settings()?;
    let mut advice = advise::advise(read, &sample, &candidates, &opts)?;
    advice.zram_or_zswap = Some(tune::front::compare(
        &sample.bytes,
        sample.input_pages,
        opts.kernel.comp,
        &settings,
        None,
    )?);
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
