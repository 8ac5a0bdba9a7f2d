//! `zmem replay`: real data through one or more stores, with the kernel's
//! statistics after each stage.
//!
//! This module owns the command: its flags, the order of the stages it asks
//! for (fill; discard with `--free-fraction F --seed S` or
//! `--discard-pages FILE`; `--compact`; verify unless `--no-verify`) and the
//! report. The stages themselves are the lab's replay engine
//! ([`lab::replay::Replay`]), which the experiments run too.

use std::io::IsTerminal;
use std::path::PathBuf;

use clap::Args;
use lab::corpus::Corpus;
use lab::output::{write_json, write_stdout, Format, FormatArg};
use lab::replay::{stage_table, Replay, Stage};
use lab::store_spec::{StoreArgs, StoreSpec};
use serde::Serialize;

use crate::error::CliError;

/// Arguments of `zmem replay`.
#[derive(Args, Debug)]
pub struct ReplayArgs {
    /// Files, directories, tar archives, ELF core files, block devices,
    /// pipes, FIFOs, or - for standard input. None (and no --pid): a
    /// built-in default corpus of real files from /usr (see --default-size).
    paths: Vec<PathBuf>,
    /// Also replay the private anonymous memory (heap, stacks, anonymous
    /// mappings) of process PID: its touched pages, read through
    /// /proc/PID/mem (needs ptrace access to it, or CAP_SYS_PTRACE).
    #[arg(long, value_name = "PID", value_parser = lab::flags::whole::<u32>(1, PID_MAX))]
    pid: Vec<u32>,
    #[command(flatten)]
    store: StoreArgs,
    /// Store tar archives and ELF core files as raw bytes instead of their
    /// members' files and their memory segments.
    #[arg(long)]
    raw: bool,
    /// After the fill, discard this fraction of the pages (0..=1), chosen
    /// with --seed.
    #[arg(long, value_parser = lab::flags::real(0.0, 1.0, false))]
    free_fraction: Option<f64>,
    /// Seed of the --free-fraction choice (any whole number, 0 too).
    #[arg(long, default_value_t = 1, value_parser = lab::flags::whole::<u64>(0, u64::MAX))]
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
    /// Do not read back and verify every page at the end.
    #[arg(long)]
    no_verify: bool,
    /// Size of the built-in default corpus (4K to 1T).
    #[arg(long, value_parser = lab::flags::size(4096, 1 << 40), default_value = "64M")]
    default_size: u64,
    #[command(flatten)]
    format: FormatArg,
    /// Never draw a progress line (it is drawn only when stderr is a
    /// terminal).
    #[arg(long)]
    quiet: bool,
}

/// The largest process ID Linux allows (PID_MAX_LIMIT, 2^22).
const PID_MAX: u32 = 1 << 22;

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
    stages: &'a [Stage],
    verified_pages: Option<u64>,
}

/// Runs `zmem replay`.
pub fn run(args: &ReplayArgs) -> Result<(), CliError> {
    let specs = args.store.specs()?;
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
    let progress = !args.quiet && std::io::stderr().is_terminal();
    let mut replay = Replay::new(specs.clone(), corpus, progress)?;
    if args.format.get() == Format::Table {
        write_stdout(&format!(
            "{read}\ncorpus: {}\n",
            replay.corpus().description
        ))?;
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
    }
    if args.compact {
        replay.compact();
        stages.push(replay.snapshot("compact"));
        emit(&stages[stages.len() - 1])?;
    }
    let verified = if args.no_verify {
        None
    } else {
        Some(replay.verify()?)
    };
    match args.format.get() {
        Format::Table => {
            if let Some(n) = verified {
                write_stdout(&format!(
                    "verify: every page of every store read back identical ({n} pages per store)\n"
                ))?;
            }
            Ok(())
        }
        Format::Json => {
            let report = Report {
                corpus: &replay.corpus().description,
                read,
                corpus_bytes: replay.corpus().bytes(),
                configs: &specs,
                stages: &stages,
                verified_pages: verified,
            };
            Ok(write_json(&report)?)
        }
    }
}
