//! `zmem exp merge`: class merging, the class-merging patch's experiment.
//!
//! The patch's author untarred the kernel source onto ext4 on zram (mounted with
//! discard), then removed the top-level directories in descending order of
//! size, printing orig, compr, used, overhead and overhead ratio after each
//! step, with and without size-class merging. Here the tar's files are laid
//! out page-aligned as a filesystem places them (metadata aside), each
//! removal discards its directory's pages, and the same steps run on a
//! kernel-compat store without merging, one with merging (the patch's
//! geometry: chain 4 unless `--chain` says otherwise), zmem's default mode
//! without background compaction, and default mode with it (the
//! store compacts itself after each removal, within its CPU budget; the
//! figures are taken once it is idle).
//!
//! Owns the experiment and its report; the stages are `replay`'s.

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::Args;
use serde::Serialize;
use zram::{AutoCompactMode, AutoCompactPolicy};
use zsmalloc::Mode;

use crate::plot::Series;
use crate::Error;
use recipe::output::FormatArg;
use recipe::spec::StoreSpec;
use tune::corpus::{self, Corpus};
use tune::replay::Replay;

/// Arguments of `zmem exp merge`.
#[derive(Args, Debug)]
pub struct MergeArgs {
    /// The Linux source tar (made from Debian's linux-source-6.1 when
    /// missing).
    #[arg(long, default_value = corpus::LINUX_TAR)]
    tar: PathBuf,
    /// zsmalloc chain of the kernel-compat stores (the patch's kernel had 4).
    #[arg(long, default_value_t = 4, value_parser = recipe::flags::whole::<u32>(1, recipe::spec::MAX_CHAIN))]
    chain: u32,
    /// Directories to remove, largest first (1 to 1000).
    #[arg(long, default_value_t = 10, value_parser = recipe::flags::whole_usize(1, 1000))]
    dirs: usize,
    /// Compressor.
    #[arg(long, default_value = "lz4", value_parser = recipe::spec::parse_comp)]
    comp: zcomp::Algorithm,
    #[command(flatten)]
    format: FormatArg,
    /// Path stem of the plot (`.svg` and `.png` are added).
    #[arg(long, default_value = "out/exp-merge")]
    plot: PathBuf,
    /// Do not draw the plot.
    #[arg(long)]
    no_plot: bool,
}

#[derive(Debug, Serialize)]
struct Row {
    step: String,
    /// Background compaction's CPU time so far, seconds (when it is on).
    auto_compact_cpu: Option<f64>,
    orig: u64,
    compr: u64,
    used: u64,
    overhead: i64,
    overhead_ratio: f64,
}

#[derive(Debug, Serialize)]
struct ConfigRows {
    config: String,
    rows: Vec<Row>,
}

/// The directory of an item: the first path component, or the second when
/// every item shares the first (`linux-source-6.1/drivers/...`).
fn dir_key(names: &[&str]) -> Vec<String> {
    let first = |n: &str| {
        n.trim_start_matches("./")
            .split('/')
            .next()
            .unwrap_or("")
            .to_string()
    };
    let common = names.first().map(|n| first(n));
    let shared = common
        .as_ref()
        .is_some_and(|c| names.iter().all(|n| first(n) == *c && n.contains('/')));
    names
        .iter()
        .map(|n| {
            let mut parts = n.trim_start_matches("./").split('/');
            if shared {
                parts.next();
            }
            let top = parts.next().unwrap_or("");
            // Files directly in the top level stay together.
            if parts.next().is_none() {
                "(files)".to_string()
            } else {
                top.to_string()
            }
        })
        .collect()
}

fn mb(b: u64) -> String {
    format!("{:.2}MB", b as f64 / 1048576.0)
}

/// Runs `zmem exp merge`.
pub fn run(args: &MergeArgs) -> Result<(), Error> {
    let tar = corpus::linux_tar(&args.tar)?;
    let corpus = Corpus::from_paths(&[tar], false)?;
    let spec = |mode: Mode, chain: Option<u32>, merge: bool, auto: AutoCompactMode| StoreSpec {
        chain,
        merge,
        auto_compact: AutoCompactPolicy::new(auto),
        ..StoreSpec::new("zsmalloc", args.comp, mode)
    };
    let off = AutoCompactMode::Off;
    let specs = vec![
        spec(Mode::KernelCompat, Some(args.chain), false, off),
        spec(Mode::KernelCompat, Some(args.chain), true, off),
        spec(Mode::Default, None, true, off),
        spec(Mode::Default, None, true, AutoCompactMode::On),
    ];
    let names: Vec<&str> = corpus.items.iter().map(|i| i.name.as_str()).collect();
    let keys = dir_key(&names);
    let extents = corpus.extents(4096);
    let mut sizes: BTreeMap<&str, u64> = BTreeMap::new();
    for (k, item) in keys.iter().zip(&corpus.items) {
        *sizes.entry(k.as_str()).or_default() += item.len;
    }
    let mut order: Vec<(&str, u64)> = sizes.into_iter().filter(|(k, _)| *k != "(files)").collect();
    order.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    order.truncate(args.dirs);

    let progress = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let description = corpus.description.clone();
    let mut replay = Replay::new(specs.clone(), corpus, progress)?;
    replay.fill()?;
    let mut stages = vec![replay.snapshot("untar")];
    for (dir, _) in &order {
        let pages: Vec<u64> = keys
            .iter()
            .zip(&extents)
            .filter(|(k, _)| k.as_str() == *dir)
            .flat_map(|(_, &(first, n))| first..first + n)
            .collect();
        replay.discard(4096, &pages)?;
        stages.push(replay.snapshot(&format!("rm {dir}")));
    }
    let verified = replay.verify()?;

    let configs: Vec<ConfigRows> = specs
        .iter()
        .enumerate()
        .map(|(i, spec)| ConfigRows {
            config: spec.label(),
            rows: stages
                .iter()
                .map(|st| {
                    let m = st.results[i].mm_stat;
                    Row {
                        step: st.name.clone(),
                        auto_compact_cpu: st.results[i].auto_compact.map(|a| a.cpu_ns as f64 / 1e9),
                        orig: m.orig_data_size,
                        compr: m.compr_data_size,
                        used: m.mem_used_total,
                        overhead: m.mem_used_total as i64 - m.compr_data_size as i64,
                        overhead_ratio: m.overhead_ratio(),
                    }
                })
                .collect(),
        })
        .collect();

    let plot_paths = super::line_chart_unless(
        args.no_plot,
        &args.plot,
        [
            "Class merging: overhead ratio after each directory removal",
            "directories removed (largest first)",
            "(used - compr) / compr, %",
        ],
        || {
            configs
                .iter()
                .map(|c| Series {
                    name: c.config.clone(),
                    points: c
                        .rows
                        .iter()
                        .enumerate()
                        .map(|(k, r)| (k as f64, r.overhead_ratio * 100.0))
                        .collect(),
                })
                .collect()
        },
    )?;

    #[derive(Serialize)]
    struct Found<'a> {
        removed: Vec<&'a str>,
        configs: &'a [ConfigRows],
    }
    let report = super::Replayed {
        corpus: &description,
        found: Found {
            removed: order.iter().map(|(d, _)| *d).collect(),
            configs: &configs,
        },
        verified_pages: verified,
        plot: plot_paths,
    };
    report.write(args.format.get(), |found| {
        let mut out = format!(
            "corpus: {description}\nremoved in order: {}\n",
            found.removed.join(" ")
        );
        for c in found.configs {
            out.push_str(&format!(
                "\n* {}\n{:>22} {:>10} {:>10} {:>10} {:>9} {:>14}\n",
                c.config,
                "step",
                "orig_size",
                "compr_size",
                "used_size",
                "overhead",
                "overhead_ratio"
            ));
            for r in &c.rows {
                out.push_str(&format!(
                    "{:>22} {:>10} {:>10} {:>10} {:>9} {:>13.2}%\n",
                    r.step,
                    mb(r.orig),
                    mb(r.compr),
                    mb(r.used),
                    format!("{:.2}MB", r.overhead as f64 / 1048576.0),
                    r.overhead_ratio * 100.0
                ));
            }
        }
        let (nomerge, merge) = (&found.configs[0].rows, &found.configs[1].rows);
        let better = nomerge
            .iter()
            .zip(merge)
            .filter(|(a, b)| b.used <= a.used)
            .count();
        out.push_str(&format!(
            "\nmerge uses no more memory than no-merge at {better} of {} steps; \
                 last step: {} vs {} used, overhead ratio {:.2}% vs {:.2}%\n",
            merge.len(),
            mb(merge[merge.len() - 1].used),
            mb(nomerge[nomerge.len() - 1].used),
            merge[merge.len() - 1].overhead_ratio * 100.0,
            nomerge[nomerge.len() - 1].overhead_ratio * 100.0,
        ));
        out
    })
}
