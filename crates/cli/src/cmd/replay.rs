//! `zmem replay`: real data through one or more stores, with the kernel's
//! statistics after each stage.
//!
//! This module owns the command: its flags, the order of the stages it asks
//! for (fill; discard with `--free-fraction F --seed S` or
//! `--discard-pages FILE`; `--compact`; `--mark-idle all|SECONDS`;
//! `--recompress REQUEST`; `--writeback TYPE` (`--writeback-compressed`
//! 1, or 0,1 for both side by side), with the pages marked idle
//! again first, inside that stage, when `--mark-idle` and `--recompress`
//! both ran, since recompression takes the mark off; verify unless
//! `--no-verify`) and the report. With no `--mode` each configuration runs
//! in default mode and in kernel-compat (what the kernel's zram would use,
//! to the byte), and for each pair of them one line per stage says how
//! their `mem_used_total` differ. The stages themselves are
//! the replay engine ([`tune::replay::Replay`]), which the experiments run
//! too.

use std::io::IsTerminal;
use std::path::PathBuf;

use clap::Args;
use recipe::output::{write_json, write_stdout, Format, FormatArg};
use recipe::spec::{StoreArgs, StoreSpec};
use serde::Serialize;
use tune::corpus::Corpus;
use tune::front::{beside_line, zswap_table, ZswapReplay, ZswapSettings, ZswapStage, ZswapVerify};
use tune::replay::{stage_table, Replay, Stage, WritebackSettings};
use zram::{IdleCutoff, RecompressRequest, WritebackRequest};
use zsmalloc::Mode;

use crate::error::CliError;

/// Arguments of `zmem replay`.
#[derive(Args, Debug)]
#[command(after_long_help = row_definitions())]
pub struct ReplayArgs {
    /// Files, directories, tar archives, ELF core files, block devices,
    /// pipes, FIFOs, or - for standard input. None (and no --pid): a
    /// built-in default corpus of real files from /usr (see --default-size).
    paths: Vec<PathBuf>,
    /// Also replay the private anonymous memory (heap, stacks, anonymous
    /// mappings) of process PID: its touched pages, read through
    /// /proc/PID/mem (needs ptrace access to it, or CAP_SYS_PTRACE).
    #[arg(long, value_name = "PID", value_parser = recipe::flags::whole::<u32>(1, PID_MAX))]
    pid: Vec<u32>,
    #[command(flatten)]
    store: StoreArgs,
    /// Store tar archives and ELF core files as raw bytes instead of their
    /// members' files and their memory segments.
    #[arg(long)]
    raw: bool,
    /// After the fill, discard this fraction of the pages (0..=1), chosen
    /// with --seed.
    #[arg(long, value_parser = recipe::flags::real(0.0, 1.0, false))]
    free_fraction: Option<f64>,
    /// Seed of the --free-fraction choice (any whole number, 0 too).
    #[arg(long, default_value_t = 1, value_parser = recipe::flags::whole::<u64>(0, u64::MAX))]
    seed: u64,
    /// After the fill, discard the page indexes in FILE (one per line, in
    /// units of each store's page size, applied in file order).
    #[arg(long)]
    discard_pages: Option<PathBuf>,
    /// Write the discarded page indexes (in discard order) to FILE, so an
    /// outside tool can apply the same discards to a kernel zram device.
    #[arg(long)]
    write_discards: Option<PathBuf>,
    /// Compact after the fill and discards.
    #[arg(long)]
    compact: bool,
    /// After the fill (and discards and compaction), mark pages idle as
    /// `echo all > idle` or `echo SECONDS > idle` does: `all`, or the pages
    /// not written for at least SECONDS (0 is every page).
    #[arg(long, value_name = "all|SECONDS", value_parser = parse_idle)]
    mark_idle: Option<IdleCutoff>,
    /// Then recompress pages as `echo REQUEST > recompress` does, e.g.
    /// "type=idle" or "type=huge_idle threshold=3000 algo=zstd" (needs
    /// --recomp-algorithm).
    #[arg(long, value_name = "REQUEST")]
    recompress: Option<String>,
    /// A secondary compressor for --recompress, "algo=NAME priority=N"
    /// with N from 1 to 3 (zram's `recomp_algorithm`); repeatable, for
    /// every configuration.
    #[arg(long = "recomp-algorithm", value_name = "\"algo=NAME priority=N\"")]
    recomp_algorithms: Vec<String>,
    /// Then write pages back to a backing file as `echo TYPE > writeback`
    /// does: idle, huge, huge_idle or incompressible (or any writeback
    /// request, e.g. "page_indexes=0-99").
    #[arg(long, value_name = "TYPE")]
    writeback: Option<String>,
    /// The backing file or block device of --writeback (zram's
    /// `backing_dev`), one per configuration in order. Without it a
    /// temporary sparse file per configuration, the size of its disk, is
    /// used (in $TMPDIR or /tmp, removed at once; the output says so).
    #[arg(long = "backing-dev", value_name = "PATH")]
    backing_devs: Vec<PathBuf>,
    /// With --writeback: write pages back compressed, several objects
    /// packed into each block (zram's `writeback_compressed`, Linux 7.0).
    /// Alone it means 1 for every configuration; "0,1" replays each
    /// configuration both ways, side by side (those written back
    /// compressed are labelled /wb-compressed).
    #[arg(
        long,
        value_name = "0|1",
        num_args = 0..=1,
        default_missing_value = "1",
        value_delimiter = ',',
        value_parser = parse_bool01
    )]
    writeback_compressed: Vec<bool>,
    /// Do not read back and verify every page at the end.
    #[arg(long)]
    no_verify: bool,
    /// Size of the built-in default corpus (4K to 1T).
    #[arg(long, value_parser = recipe::flags::size(4096, 1 << 40), default_value = "64M")]
    default_size: u64,
    /// The kernel's front end of the pages: zram (alone), or zswap: every
    /// page also stored as Linux 7.3's zswap would (page i at swap offset
    /// i; zero-filled pages to the zero map; discards invalidate; verify
    /// loads), with zswap's debugfs counters and its metadata in a table
    /// of its own and one line per stage beside the kernel-compat zram's
    /// memory for the same pages.
    #[arg(long, value_name = "zram|zswap", default_value = "zram", value_parser = ["zram", "zswap"])]
    front: String,
    #[command(flatten)]
    format: FormatArg,
    /// Never draw a progress line (it is drawn only when stderr is a
    /// terminal).
    #[arg(long)]
    quiet: bool,
    #[command(flatten)]
    zswap: ZswapArgs,
}

/// zswap's settings, for `replay --front zswap` and for `advise`'s
/// zram-or-zswap comparison: each flag, else the running kernel's
/// parameter, else Linux 7.3's default.
#[derive(Args, Debug)]
#[command(next_help_heading = "zswap's settings")]
pub(crate) struct ZswapArgs {
    /// zswap's compressor (the crypto API's name; default: the running
    /// kernel's /sys/module/zswap/parameters/compressor, else lzo).
    #[arg(long, value_name = "NAME")]
    zswap_comp: Option<String>,
    /// The RAM zswap's max_pool_percent is a share of (default: this
    /// machine's MemTotal).
    #[arg(long, value_name = "SIZE", value_parser = recipe::flags::size(4096, 1 << 50))]
    ram: Option<u64>,
    /// zswap's max_pool_percent (0..=100; default: the running kernel's,
    /// else 20).
    #[arg(long, value_name = "PERCENT", value_parser = recipe::flags::whole::<u32>(0, 100))]
    max_pool_percent: Option<u32>,
    /// zswap's accept_threshold_percent (0..=100; default: the running
    /// kernel's, else 90).
    #[arg(long, value_name = "PERCENT", value_parser = recipe::flags::whole::<u32>(0, 100))]
    accept_threshold_percent: Option<u32>,
}

impl ZswapArgs {
    /// The settings the flags give, the rest filled in as the type says.
    pub(crate) fn settings(&self) -> Result<ZswapSettings, CliError> {
        Ok(ZswapSettings::resolve(
            self.zswap_comp.as_deref(),
            self.ram,
            self.max_pool_percent,
            self.accept_threshold_percent,
        )?)
    }

    /// The first of the flags that was given, by its name.
    fn first_given(&self) -> Option<&'static str> {
        [
            ("--zswap-comp", self.zswap_comp.is_some()),
            ("--ram", self.ram.is_some()),
            ("--max-pool-percent", self.max_pool_percent.is_some()),
            (
                "--accept-threshold-percent",
                self.accept_threshold_percent.is_some(),
            ),
        ]
        .into_iter()
        .find_map(|(flag, given)| given.then_some(flag))
    }
}

/// The help's definitions of the rows of zram's tables and zswap's.
fn row_definitions() -> String {
    format!(
        "{}\n\n{}",
        tune::replay::ROW_DEFINITIONS,
        tune::front::ZSWAP_ROW_DEFINITIONS
    )
}

/// The largest process ID Linux allows (PID_MAX_LIMIT, 2^22).
const PID_MAX: u32 = 1 << 22;

/// `--mark-idle`: `all`, or whole seconds (what zram's `idle` attribute
/// takes).
fn parse_idle(s: &str) -> Result<IdleCutoff, String> {
    IdleCutoff::parse(s).map_err(|e| e.to_string())
}

/// A value of `--writeback-compressed`: 0 or 1, as the sysfs attribute.
fn parse_bool01(s: &str) -> Result<bool, String> {
    match s {
        "0" => Ok(false),
        "1" => Ok(true),
        other => Err(format!("{other:?} is not 0 or 1")),
    }
}

fn read_page_list(path: &PathBuf) -> Result<Vec<u64>, CliError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::Usage(format!("--discard-pages {}: {e}", path.display())))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(n, l)| {
            l.trim().parse::<u64>().map_err(|_| {
                CliError::Usage(format!(
                    "--discard-pages {}: line {}: '{}' is not a page index",
                    path.display(),
                    n + 1,
                    l.trim()
                ))
            })
        })
        .collect()
}

#[derive(Serialize)]
struct Report<'a> {
    corpus: &'a str,
    read: String,
    corpus_bytes: u64,
    configs: &'a [StoreSpec],
    /// The backing files, one per configuration, when --writeback ran.
    backing_devs: &'a [PathBuf],
    /// Whether they were temporary files made for the run.
    backing_devs_temporary: bool,
    /// Each configuration's writeback settings, when --writeback ran.
    writeback: &'a [WritebackSettings],
    stages: &'a [Stage],
    verified_pages: Option<u64>,
    /// Default mode beside kernel-compat after the last stage, when no
    /// --mode was given.
    #[serde(skip_serializing_if = "<[Comparison]>::is_empty")]
    vs_kernel_compat: &'a [Comparison],
    /// The same pages through zswap, with --front zswap.
    #[serde(skip_serializing_if = "Option::is_none")]
    zswap: Option<ZswapReport<'a>>,
}

/// zswap's part of the report (--front zswap).
#[derive(Serialize)]
struct ZswapReport<'a> {
    settings: &'a ZswapSettings,
    stages: &'a [ZswapStage],
    /// The zram configuration each stage is set beside, and the lines.
    beside_config: Option<String>,
    beside: Vec<String>,
    verify: Option<ZswapVerify>,
}

/// A default-mode store's memory beside its kernel-compat twin's (what the
/// kernel's zram would use, to the byte) after one stage.
#[derive(Serialize)]
struct Comparison {
    /// The stage.
    stage: String,
    /// The default-mode configuration.
    config: String,
    /// Its `mem_used_total`.
    mem_used_total: u64,
    /// The kernel-compat configuration.
    kernel_compat_config: String,
    /// Its `mem_used_total`.
    kernel_compat_mem_used_total: u64,
    /// How much less memory default mode used, in percent of
    /// kernel-compat's (negative: more).
    percent_less: f64,
}

/// The modes `zmem replay` compares when no --mode is given: zmem's own
/// beside the kernel's.
const DEFAULT_MODES: [Mode; 2] = [Mode::Default, Mode::KernelCompat];

/// Each default-mode store beside its kernel-compat twin (the same
/// settings but the mode and, when --comp is not given, each mode's own
/// compressor) after `stage`.
fn compare_modes(
    args: &ReplayArgs,
    specs: &[StoreSpec],
    per_store: &[bool],
    stage: &Stage,
) -> Vec<Comparison> {
    let twins = |d: &StoreSpec, k: &StoreSpec| {
        d.alloc == k.alloc
            && d.page_size == k.page_size
            && d.unit == k.unit
            && d.chain == k.chain
            && d.delta == k.delta
            && d.merge == k.merge
            && (args.store.comp.is_empty() || d.comp == k.comp)
    };
    let mut out = Vec::new();
    for (i, d) in specs.iter().enumerate() {
        if d.mode != Mode::Default || d.alloc != "zsmalloc" {
            continue;
        }
        let Some(j) = (0..specs.len()).find(|&j| {
            specs[j].mode == Mode::KernelCompat
                && per_store[j] == per_store[i]
                && twins(d, &specs[j])
        }) else {
            continue;
        };
        let (Some(ours), Some(theirs)) = (stage.results.get(i), stage.results.get(j)) else {
            continue;
        };
        let (a, b) = (ours.mm_stat.mem_used_total, theirs.mm_stat.mem_used_total);
        out.push(Comparison {
            stage: stage.name.clone(),
            config: ours.config.clone(),
            mem_used_total: a,
            kernel_compat_config: theirs.config.clone(),
            kernel_compat_mem_used_total: b,
            percent_less: if b == 0 {
                0.0
            } else {
                (1.0 - a as f64 / b as f64) * 100.0
            },
        });
    }
    out
}

/// One line per comparison (a pair of stores at one stage): `default mode:
/// mem_used_total 41.2 MiB after fill, 3.1% less than kernel-compat's 42.5
/// MiB` (with the configurations' labels when there are several pairs).
fn comparison_lines(comparisons: &[Comparison]) -> String {
    let mib = |b: u64| b as f64 / 1048576.0;
    // One pair of stores (compared at each stage) goes by the modes' names.
    let single = comparisons
        .iter()
        .filter(|c| c.stage == comparisons[0].stage)
        .count()
        == 1;
    comparisons
        .iter()
        .map(|c| {
            let (ours, theirs) = if single {
                ("default mode".to_string(), "kernel-compat's".to_string())
            } else {
                (c.config.clone(), format!("{}'s", c.kernel_compat_config))
            };
            if c.mem_used_total == 0 && c.kernel_compat_mem_used_total == 0 {
                let theirs = if single {
                    "kernel-compat"
                } else {
                    &c.kernel_compat_config
                };
                return format!(
                    "{ours} and {theirs}: mem_used_total 0 after {} (nothing held)\n",
                    c.stage
                );
            }
            let how = if c.percent_less >= 0.0 {
                format!("{:.1}% less than", c.percent_less)
            } else {
                format!("{:.1}% more than", -c.percent_less)
            };
            format!(
                "{ours}: mem_used_total {:.1} MiB after {}, {how} {theirs} {:.1} MiB\n",
                mib(c.mem_used_total),
                c.stage,
                mib(c.kernel_compat_mem_used_total)
            )
        })
        .collect()
}

/// Runs `zmem replay`.
pub fn run(args: &ReplayArgs) -> Result<(), CliError> {
    let specs = args.store.specs_with_modes(&DEFAULT_MODES)?;
    let corpus = if args.paths.is_empty() && args.pid.is_empty() {
        Corpus::default_corpus(args.default_size)?
    } else {
        Corpus::from_inputs(&args.paths, &args.pid, args.raw)?
    };
    let read = corpus.read_line(specs[0].block_size());
    let listed = match &args.discard_pages {
        Some(p) => Some(read_page_list(p)?),
        None => None,
    };
    // The requests' own syntax is checked before the (maybe long) fill.
    let recompress = match &args.recompress {
        Some(text) => {
            if args.recomp_algorithms.is_empty() {
                return Err(CliError::Usage(
                    "--recompress needs a --recomp-algorithm \"algo=NAME priority=N\"".into(),
                ));
            }
            Some(
                RecompressRequest::parse(text)
                    .map_err(|e| CliError::Usage(format!("--recompress {text:?}: {e}")))?,
            )
        }
        None => None,
    };
    if let Some(text) = &args.writeback {
        WritebackRequest::parse(text, u64::MAX)
            .map_err(|e| CliError::Usage(format!("--writeback {text:?}: {e}")))?;
    } else if !args.backing_devs.is_empty() {
        return Err(CliError::Usage(
            "--backing-dev is for --writeback, which was not given".into(),
        ));
    } else if !args.writeback_compressed.is_empty() {
        return Err(CliError::Usage(
            "--writeback-compressed is for --writeback, which was not given".into(),
        ));
    }
    // Each configuration once per --writeback-compressed value (0 and 1:
    // both, side by side).
    let mut compressed = args.writeback_compressed.clone();
    compressed.sort_unstable();
    compressed.dedup();
    if compressed.is_empty() {
        compressed.push(false);
    }
    let (specs, per_store): (Vec<_>, Vec<bool>) = specs
        .iter()
        .flat_map(|spec| compressed.iter().map(move |&on| (spec.clone(), on)))
        .unzip();
    let zswap_settings = if args.front == "zswap" {
        Some(args.zswap.settings()?)
    } else {
        if let Some(flag) = args.zswap.first_given() {
            return Err(CliError::Usage(format!(
                "{flag} is for --front zswap, which was not given"
            )));
        }
        None
    };
    let mut zswap = match &zswap_settings {
        Some(s) => Some(ZswapReplay::new(s)?),
        None => None,
    };
    let mut zswap_stages: Vec<ZswapStage> = Vec::new();
    let progress = !args.quiet && std::io::stderr().is_terminal();
    let mut replay = Replay::new(specs.clone(), corpus, progress)?;
    replay.set_recomp_algorithms(&args.recomp_algorithms)?;
    replay.set_writeback_compressed(&per_store)?;
    let temporary = args.writeback.is_some() && args.backing_devs.is_empty();
    let backing_devs = if args.writeback.is_none() {
        Vec::new()
    } else if temporary {
        replay.set_temporary_backing_devs(&std::env::temp_dir())?
    } else {
        replay.set_backing_devs(&args.backing_devs)?;
        args.backing_devs.clone()
    };
    // Which kernel kernel-compat stands for, first; a compressor that
    // kernel's zram lacks, named.
    let kernel = args.store.kernel();
    let compat: Vec<_> = specs
        .iter()
        .filter(|s| s.mode == zsmalloc::Mode::KernelCompat)
        .collect();
    for comp in compat.iter().map(|s| s.comp) {
        if let Some(w) = kernel.warning_for(comp) {
            eprintln!("{w}");
        }
    }
    if args.format.get() == Format::Table {
        let first = if compat.is_empty() {
            String::new()
        } else {
            format!("{}\n", kernel.line())
        };
        write_stdout(&format!(
            "{first}{read}\ncorpus: {}\n",
            replay.corpus().description
        ))?;
        for (spec, path) in specs.iter().zip(&backing_devs) {
            let how = if temporary {
                " (a temporary sparse file the size of the disk, no --backing-dev given; removed)"
            } else {
                ""
            };
            write_stdout(&format!(
                "backing_dev {}: {}{how}\n",
                spec.label(),
                path.display()
            ))?;
        }
    }
    let mut stages = Vec::new();
    let emit = |stage: &Stage| -> Result<(), CliError> {
        if args.format.get() == Format::Table {
            write_stdout(&stage_table(stage))?;
        }
        Ok(())
    };
    replay.fill()?;
    stages.push(replay.snapshot("fill"));
    emit(&stages[stages.len() - 1])?;
    if let Some(z) = &mut zswap {
        z.fill(replay.corpus())?;
        zswap_stages.push(z.snapshot("fill"));
    }
    if args.free_fraction.is_some() || listed.is_some() {
        let mut written = Vec::new();
        for ps in replay.page_sizes() {
            let mut pages = listed.clone().unwrap_or_default();
            if let Some(f) = args.free_fraction {
                pages.extend(replay.pick(ps, f, args.seed));
            }
            replay.discard(ps, &pages)?;
            written.push((ps, pages));
        }
        if let Some(path) = &args.write_discards {
            // One list: the first page size's (the others' are in their own
            // units and differ).
            let text: String = written[0].1.iter().map(|p| format!("{p}\n")).collect();
            std::fs::write(path, text)
                .map_err(|e| CliError::Failed(format!("{}: {e}", path.display())))?;
        }
        stages.push(replay.snapshot("discard"));
        emit(&stages[stages.len() - 1])?;
        if let Some(z) = &mut zswap {
            // The same discards in 4 KiB pages: swap slots freed.
            let mut pages = listed.clone().unwrap_or_default();
            if let Some(f) = args.free_fraction {
                pages.extend(replay.pick(tune::front::PAGE, f, args.seed));
            }
            z.discard(&pages)?;
            zswap_stages.push(z.snapshot("discard"));
        }
    }
    if args.compact {
        replay.compact();
        stages.push(replay.snapshot("compact"));
        emit(&stages[stages.len() - 1])?;
        if let Some(z) = &mut zswap {
            z.compact();
            zswap_stages.push(z.snapshot("compact"));
        }
    }
    if let Some(cutoff) = args.mark_idle {
        replay.mark_idle(cutoff);
        stages.push(replay.snapshot("mark-idle"));
        emit(&stages[stages.len() - 1])?;
    }
    if let Some(req) = &recompress {
        replay.recompress(req)?;
        stages.push(replay.snapshot("recompress"));
        emit(&stages[stages.len() - 1])?;
    }
    if let Some(text) = &args.writeback {
        if let (Some(cutoff), Some(_)) = (args.mark_idle, &recompress) {
            // Recompression takes the idle mark off the pages it tries, as
            // zram's does: they are marked again, with the same cutoff,
            // as part of this stage, which the `--mark-idle` asked for.
            replay.mark_idle(cutoff);
            if args.format.get() == Format::Table {
                write_stdout(
                    "writeback: the pages marked idle again first (recompression takes the mark \
                     off the pages it tries, as zram's does)\n",
                )?;
            }
        }
        replay.writeback(text)?;
        stages.push(replay.snapshot("writeback"));
        emit(&stages[stages.len() - 1])?;
    }
    let verified = if args.no_verify {
        None
    } else {
        Some(replay.verify()?)
    };
    let zswap_verified = match (&mut zswap, args.no_verify) {
        (Some(z), false) => Some(z.verify()?),
        _ => None,
    };
    // zswap beside the kernel's zram (the first kernel-compat
    // configuration of 4 KiB pages) at each stage both ran.
    let beside_index = specs
        .iter()
        .position(|s| s.mode == Mode::KernelCompat && s.block_size() == tune::front::PAGE);
    let mut beside = Vec::new();
    if let (Some(settings), Some(j)) = (&zswap_settings, beside_index) {
        let disk_pages = replay.corpus().pages(tune::front::PAGE).max(1);
        for zs in &zswap_stages {
            if let Some(stage) = stages.iter().find(|s| s.name == zs.name) {
                let r = &stage.results[j];
                beside.push(beside_line(
                    zs,
                    &r.config,
                    &r.mm_stat,
                    disk_pages,
                    settings.nr_cpus,
                ));
            }
        }
    }
    // Each stage asked for, default mode beside kernel-compat.
    let comparisons: Vec<Comparison> = stages
        .iter()
        .flat_map(|stage| compare_modes(args, &specs, &per_store, stage))
        .collect();
    match args.format.get() {
        Format::Table => {
            if let Some(n) = verified {
                write_stdout(&format!(
                    "verify: every page of every store read back identical ({n} pages per store)\n"
                ))?;
            }
            write_stdout(&comparison_lines(&comparisons))?;
            if let Some(settings) = &zswap_settings {
                write_stdout(&zswap_table(settings, &zswap_stages))?;
                if let Some(v) = zswap_verified {
                    write_stdout(&format!(
                        "zswap verify: {} pages loaded from zswap and {} from the zero map read \
                         back identical; {} on the swap device, {} discarded\n",
                        v.zswap, v.zero_filled, v.swap_device, v.nothing
                    ))?;
                }
                if beside_index.is_none() {
                    write_stdout(
                        "zswap beside zram: no kernel-compat configuration of 4 KiB pages ran \
                         (add --mode kernel-compat)\n",
                    )?;
                }
                write_stdout(&beside.concat())?;
            }
            Ok(())
        }
        Format::Json => {
            let writeback = if args.writeback.is_some() {
                replay.writeback_settings()
            } else {
                Vec::new()
            };
            let report = Report {
                corpus: &replay.corpus().description,
                read,
                corpus_bytes: replay.corpus().bytes(),
                configs: &specs,
                backing_devs: &backing_devs,
                backing_devs_temporary: temporary,
                writeback: &writeback,
                stages: &stages,
                verified_pages: verified,
                vs_kernel_compat: &comparisons,
                zswap: zswap_settings.as_ref().map(|settings| ZswapReport {
                    settings,
                    stages: &zswap_stages,
                    beside_config: beside_index.map(|j| specs[j].label()),
                    beside: beside.iter().map(|l| l.trim_end().to_string()).collect(),
                    verify: zswap_verified,
                }),
            };
            Ok(write_json(&report)?)
        }
    }
}
