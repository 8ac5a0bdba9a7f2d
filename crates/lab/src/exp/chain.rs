//! `zmem exp chain`: chain length, the longer-zspage-chain patch's experiment.
//!
//! The patch's author made a test file of one source file repeated 200 times, then in
//! three rounds wrote files of its first j bytes for j = 1, 513, 1025, ...
//! below 1 MiB onto ext4 on zram, and compared mem_used_total for at most
//! 4, 5 and 6 pages per zspage. Here the files are laid out page-aligned as a
//! filesystem places them, and every chain size is a kernel-compat store fed
//! the same pages. The source file is mm/zsmalloc.c from the Linux source tar
//! when it is there (the patch's own choice), else `--source`, else a zmem
//! source file built into the binary.
//!
//! Owns the experiment and its report; the stages are `replay`'s.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use serde::Serialize;
use zram::MmStat;
use zsmalloc::Mode;

use crate::plot::Series;
use crate::Error;
use recipe::output::FormatArg;
use recipe::spec::StoreSpec;
use tune::corpus::{self, Corpus};
use tune::replay::Replay;

/// A zmem source file, the fallback test text.
const BUILT_IN: &str = include_str!("../../../zsmalloc/src/pool.rs");

/// Arguments of `zmem exp chain`.
#[derive(Args, Debug)]
pub struct ChainArgs {
    /// The file repeated into the test file (default: mm/zsmalloc.c from
    /// the Linux source tar, else a built-in source file).
    #[arg(long)]
    source: Option<PathBuf>,
    /// Times the source is repeated (1 to 100000).
    #[arg(long, default_value_t = 200, value_parser = recipe::flags::whole_usize(1, 100_000))]
    repeat: usize,
    /// Rounds of files (1 to 1000).
    #[arg(long, default_value_t = 3, value_parser = recipe::flags::whole::<u32>(1, 1000))]
    rounds: u32,
    /// Files are shorter than this (1 to 1G).
    #[arg(long, value_parser = recipe::flags::size(1, 1 << 30), default_value = "1M")]
    max_size: u64,
    /// Step between file sizes (1 to 1G).
    #[arg(long, value_parser = recipe::flags::size(1, 1 << 30), default_value = "512")]
    step: u64,
    /// Chain sizes (most pages per zspage, 1 to 16) compared.
    #[arg(long, value_delimiter = ',', default_values_t = [4u32, 5, 6, 8],
          value_parser = recipe::flags::whole::<u32>(1, recipe::spec::MAX_CHAIN))]
    chains: Vec<u32>,
    /// Compressor.
    #[arg(long, default_value = "lz4", value_parser = recipe::spec::parse_comp)]
    comp: zcomp::Algorithm,
    #[command(flatten)]
    format: FormatArg,
    /// Path stem of the plot (`.svg` and `.png` are added).
    #[arg(long, default_value = "out/exp-chain")]
    plot: PathBuf,
    /// Do not draw the plot.
    #[arg(long)]
    no_plot: bool,
}

#[derive(Debug, Serialize)]
struct ChainRow {
    chain: u32,
    mm_stat: MmStat,
    mm_stat_line: String,
    saving_bytes: i64,
    saving_percent: f64,
}

fn source_text(args: &ChainArgs) -> Result<(Vec<u8>, String), Error> {
    if let Some(p) = &args.source {
        let data =
            tune::corpus::read_input(p).map_err(|e| Error::Usage(format!("--source {e}")))?;
        return Ok((data, p.display().to_string()));
    }
    let tar = std::path::Path::new(corpus::LINUX_TAR);
    if tar.exists() {
        if let Some(data) = corpus::tar_member(tar, "/mm/zsmalloc.c")? {
            return Ok((data, format!("mm/zsmalloc.c from {}", tar.display())));
        }
    }
    Ok((
        BUILT_IN.as_bytes().to_vec(),
        format!(
            "built-in crates/zsmalloc/src/pool.rs (no {}; see `zmem exp merge --help` to get it)",
            corpus::LINUX_TAR
        ),
    ))
}

/// Runs `zmem exp chain`.
pub fn run(args: &ChainArgs) -> Result<(), Error> {
    if args.chains.is_empty() || args.step == 0 || args.repeat == 0 {
        return Err(Error::Usage(
            "--chains, --step and --repeat must be nonzero".into(),
        ));
    }
    let (source, source_name) = source_text(args)?;
    let test: Arc<[u8]> = source.repeat(args.repeat).into();
    if (test.len() as u64) < args.max_size {
        return Err(Error::Usage(format!(
            "the test file ({} bytes) is shorter than --max-size; raise --repeat",
            test.len()
        )));
    }
    let mut items = Vec::new();
    for k in 1..=args.rounds {
        let mut j = 1;
        while j < args.max_size {
            items.push((format!("file-{k}-{j}"), Arc::clone(&test), j));
            j += args.step;
        }
    }
    let n_files = items.len();
    let corpus = Corpus::from_buffers(
        items,
        format!(
            "{n_files} files of the first 1, 1+{}, ... bytes of {source_name} x{}, {} rounds",
            args.step, args.repeat, args.rounds
        ),
    );
    let specs: Vec<StoreSpec> = args
        .chains
        .iter()
        .map(|&c| StoreSpec {
            chain: Some(c),
            ..StoreSpec::new("zsmalloc", args.comp, Mode::KernelCompat)
        })
        .collect();
    let description = corpus.description.clone();
    let progress = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let mut replay = Replay::new(specs, corpus, progress)?;
    replay.fill()?;
    let stage = replay.snapshot("fill");
    let verified = replay.verify()?;
    let base = stage.results[0].mm_stat.mem_used_total as i64;
    let rows: Vec<ChainRow> = args
        .chains
        .iter()
        .zip(&stage.results)
        .map(|(&chain, r)| {
            let saving = base - r.mm_stat.mem_used_total as i64;
            ChainRow {
                chain,
                mm_stat: r.mm_stat,
                mm_stat_line: r.mm_stat.to_string(),
                saving_bytes: saving,
                saving_percent: saving as f64 * 100.0 / base.max(1) as f64,
            }
        })
        .collect();
    let plot_paths = super::line_chart_unless(
        args.no_plot,
        &args.plot,
        [
            "Chain length: mem_used_total by most pages per zspage",
            "chain size (pages per zspage, at most)",
            "mem_used_total, MiB",
        ],
        || {
            vec![Series {
                name: "mem_used_total".into(),
                points: rows
                    .iter()
                    .map(|r| {
                        (
                            f64::from(r.chain),
                            r.mm_stat.mem_used_total as f64 / 1048576.0,
                        )
                    })
                    .collect(),
            }]
        },
    )?;
    #[derive(Serialize)]
    struct Found<'a> {
        rows: &'a [ChainRow],
    }
    let report = super::Replayed {
        corpus: &description,
        found: Found { rows: &rows },
        verified_pages: verified,
        plot: plot_paths,
    };
    report.write(args.format.get(), |found| {
        let mut out = format!(
            "corpus: {description}\n\n{:>5}  {:<92} {:>14} {:>8}\n",
            "chain", "mm_stat", "saved vs first", ""
        );
        for r in found.rows {
            out.push_str(&format!(
                "{:>5}  {:<92} {:>12.2}MB {:>7.2}%\n",
                r.chain,
                r.mm_stat_line,
                r.saving_bytes as f64 / 1048576.0,
                r.saving_percent
            ));
        }
        out
    })
}
