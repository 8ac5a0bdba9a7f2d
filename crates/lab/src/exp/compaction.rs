//! `zmem exp compaction`: fullness groups and compaction, the experiment of
//! the fine-grained fullness and compaction series.
//!
//! A fragmentation generator with a fixed seed fills every class of a pool
//! with `--zspages` zspages' worth of objects, then frees a pattern that
//! leaves partly used zspages at every fill level (each zspage keeps a
//! fraction of its objects drawn uniformly from 0..1). Then each class is
//! compacted on its own and the objects moved are counted, under:
//! 1. old fullness grouping, old compaction algorithm (the kernel before 6.4);
//! 2. old grouping, new algorithm;
//! 3. new grouping, new algorithm (the kernel since 6.4);
//! 4. zmem's optimal algorithm on the same pool;
//! 5. zmem's default mode (its own geometry and layout).
//!
//! Variants 1-4 share the kernel's geometry, so the same seed gives them the
//! same objects in the same zspages: their per-class counts are paired.
//! Owns the experiment and its report; the algorithms live in `zsmalloc`.

use std::path::PathBuf;

use clap::Args;
use serde::Serialize;
use zsmalloc::{CompactionAlgo, FullnessScheme, Mode, Pool, PoolConfig};

use crate::ministat;
use crate::plot::Series;
use crate::Error;
use recipe::output::{Format, FormatArg};
use tune::rng::Rng;

/// Arguments of `zmem exp compaction`.
#[derive(Args, Debug)]
pub struct CompactionArgs {
    /// Seed of the fragmentation generator (any whole number, 0 too).
    #[arg(long, default_value_t = 1, value_parser = recipe::flags::whole::<u64>(0, u64::MAX))]
    seed: u64,
    /// Zspages' worth of objects allocated per class before the frees.
    #[arg(long = "zspages", default_value_t = 128, value_parser = recipe::flags::whole::<u32>(2, 4096))]
    zspages: u32,
    #[command(flatten)]
    format: FormatArg,
    /// Path stem of the plot (`.svg` and `.png` are added).
    #[arg(long, default_value = "out/exp-compaction")]
    plot: PathBuf,
    /// Do not draw the plot.
    #[arg(long)]
    no_plot: bool,
}

/// One variant's result for one class.
#[derive(Clone, Copy, Debug, Serialize)]
struct ClassResult {
    size: u32,
    objs_per_zspage: u32,
    objs_moved: u64,
    objs_moved_trim: u64,
    pages_freed: u64,
    lower_bound: u64,
}

#[derive(Debug, Serialize)]
struct VariantResult {
    name: &'static str,
    mode: Mode,
    fullness: FullnessScheme,
    compaction: CompactionAlgo,
    objs_moved: u64,
    objs_moved_trim: u64,
    pages_freed: u64,
    lower_bound: u64,
    classes: Vec<ClassResult>,
}

#[derive(Debug, Serialize)]
struct Comparison {
    x: &'static str,
    y: &'static str,
    x_summary: ministat::Summary,
    y_summary: ministat::Summary,
    difference: ministat::Difference,
}

#[derive(Debug, Serialize)]
struct Report {
    seed: u64,
    zspages_per_class: u32,
    variants: Vec<VariantResult>,
    comparisons: Vec<Comparison>,
    plot: Option<(PathBuf, PathBuf)>,
}

const VARIANTS: [(&str, Mode, FullnessScheme, CompactionAlgo); 5] = [
    (
        "Old fullness grouping, old compaction algorithm",
        Mode::KernelCompat,
        FullnessScheme::ThreeQuarters,
        CompactionAlgo::DrainSource,
    ),
    (
        "Old fullness grouping, new compaction algorithm",
        Mode::KernelCompat,
        FullnessScheme::ThreeQuarters,
        CompactionAlgo::KeepDestination,
    ),
    (
        "New fullness grouping, new compaction algorithm",
        Mode::KernelCompat,
        FullnessScheme::InuseRatio,
        CompactionAlgo::KeepDestination,
    ),
    (
        "zmem optimal algorithm, same pool",
        Mode::KernelCompat,
        FullnessScheme::InuseRatio,
        CompactionAlgo::Optimal,
    ),
    (
        "zmem default mode (own geometry)",
        Mode::Default,
        FullnessScheme::InuseRatio,
        CompactionAlgo::Optimal,
    ),
];

fn run_variant(
    seed: u64,
    zspages: u32,
    (name, mode, fullness, compaction): (&'static str, Mode, FullnessScheme, CompactionAlgo),
) -> Result<VariantResult, Error> {
    let mut config = PoolConfig::of_mode(mode);
    config.fullness = fullness;
    config.compaction = compaction;
    let pool = Pool::new(config).map_err(|e| Error::Failed(e.to_string()))?;
    let header = if mode == Mode::KernelCompat { 8 } else { 0 };
    let classes: Vec<_> = pool
        .geometry()
        .classes()
        .iter()
        .filter(|c| !c.huge)
        .copied()
        .collect();

    // Fragment every class: fill whole zspages, then keep a uniform random
    // fraction of each zspage's objects.
    let mut live = Vec::new();
    for class in &classes {
        let mut rng = Rng::new(seed, u64::from(class.index));
        let lowest = if class.first_index == 0 {
            1
        } else {
            pool.geometry().logical()[class.first_index as usize - 1].size + 1
        };
        let (lo, hi) = (lowest.saturating_sub(header).max(1), class.size - header);
        let n = class.objs_per_zspage;
        for _ in 0..zspages {
            let keep = rng.unit();
            for _ in 0..n {
                let len = lo + (rng.next_u64() % u64::from(hi - lo + 1)) as u32;
                let h = pool
                    .malloc(len as usize)
                    .map_err(|e| Error::Failed(e.to_string()))?;
                if rng.unit() < keep {
                    live.push(h);
                } else {
                    // Freed after the fill so the zspage layout is the fill's.
                    live.push(h);
                    live.push(h);
                }
            }
        }
    }
    // Handles listed twice are the ones to free.
    live.sort_by_key(|h| h.to_raw());
    let mut keep = Vec::with_capacity(live.len());
    let mut i = 0;
    while i < live.len() {
        if i + 1 < live.len() && live[i] == live[i + 1] {
            pool.free(live[i])
                .map_err(|e| Error::Failed(e.to_string()))?;
            i += 2;
        } else {
            keep.push(live[i]);
            i += 1;
        }
    }

    let mut results = Vec::new();
    for (id, class) in pool
        .geometry()
        .classes()
        .iter()
        .enumerate()
        .filter(|(_, c)| !c.huge)
    {
        let lower_bound = pool.class_compaction_lower_bound(id);
        let r = pool.compact_class(id);
        results.push(ClassResult {
            size: class.size,
            objs_per_zspage: class.objs_per_zspage,
            objs_moved: r.objs_moved,
            objs_moved_trim: r.objs_moved_trim,
            pages_freed: r.pages_freed,
            lower_bound,
        });
    }
    pool.check_invariants()
        .map_err(|e| Error::Failed(format!("{name}: {e}")))?;
    if pool.can_compact() != 0 {
        return Err(Error::Failed(format!("{name}: pages left to compact")));
    }
    for h in keep {
        pool.free(h).map_err(|e| Error::Failed(e.to_string()))?;
    }
    Ok(VariantResult {
        name,
        mode,
        fullness,
        compaction,
        objs_moved: results.iter().map(|c| c.objs_moved).sum(),
        objs_moved_trim: results.iter().map(|c| c.objs_moved_trim).sum(),
        pages_freed: results.iter().map(|c| c.pages_freed).sum(),
        lower_bound: results.iter().map(|c| c.lower_bound).sum(),
        classes: results,
    })
}

fn compare(variants: &[VariantResult], x: usize, y: usize) -> Comparison {
    let sample = |v: &VariantResult| {
        v.classes
            .iter()
            .map(|c| c.objs_moved as f64)
            .collect::<Vec<_>>()
    };
    let (xs, ys) = (
        ministat::Summary::of(&sample(&variants[x])),
        ministat::Summary::of(&sample(&variants[y])),
    );
    Comparison {
        x: variants[x].name,
        y: variants[y].name,
        x_summary: xs,
        y_summary: ys,
        difference: ministat::difference(&xs, &ys),
    }
}

/// Runs `zmem exp compaction`.
pub fn run(args: &CompactionArgs) -> Result<(), Error> {
    let variants = VARIANTS
        .iter()
        .map(|&v| run_variant(args.seed, args.zspages, v))
        .collect::<Result<Vec<_>, _>>()?;
    let comparisons = vec![
        compare(&variants, 0, 1),
        compare(&variants, 0, 2),
        compare(&variants, 2, 3),
    ];
    let title = format!(
        "Objects moved by compaction per class (fullness groups and compaction; seed {}, {} zspages per class)",
        args.seed, args.zspages
    );
    let plot = super::line_chart_unless(
        args.no_plot,
        &args.plot,
        [&title, "class size (bytes)", "objects moved"],
        || {
            variants[..4]
                .iter()
                .map(|v| Series {
                    name: v.name.to_string(),
                    points: v
                        .classes
                        .iter()
                        .map(|c| (f64::from(c.size), c.objs_moved as f64))
                        .collect(),
                })
                .collect()
        },
    )?;
    let report = Report {
        seed: args.seed,
        zspages_per_class: args.zspages,
        variants,
        comparisons,
        plot,
    };
    let text = match args.format.get() {
        Format::Json => {
            serde_json::to_string_pretty(&report).map_err(|e| Error::Failed(e.to_string()))? + "\n"
        }
        Format::Table => table(&report),
    };
    recipe::output::write_stdout(&text)
}

fn table(r: &Report) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Fullness groups and compaction: every class fragmented ({} zspages each, seed {}), then compacted class by class.\n",
        r.zspages_per_class, r.seed
    );
    let _ = writeln!(out, "Total amount of work (objs_moved)");
    let _ = writeln!(out, "---------------------------------");
    for v in &r.variants {
        let _ = write!(
            out,
            "{}:\n    {} objects moved, {} pages freed; lower bound {} objects",
            v.name, v.objs_moved, v.pages_freed, v.lower_bound
        );
        if v.lower_bound > 0 {
            let _ = write!(
                out,
                " ({:+.2}% over it)",
                (v.objs_moved - v.objs_moved_trim) as f64 / v.lower_bound as f64 * 100.0 - 100.0
            );
        }
        if v.objs_moved_trim > 0 {
            let _ = write!(
                out,
                "\n    of which {} moved after every freeable zspage was freed, to trim partly used zspages",
                v.objs_moved_trim
            );
        }
        let _ = writeln!(out);
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "Per-class compaction objs_moved comparison (T-test)");
    let _ = writeln!(out, "---------------------------------------------------");
    for c in &r.comparisons {
        let sample = |name: &str| {
            r.variants
                .iter()
                .find(|v| v.name == name)
                .map(|v| {
                    v.classes
                        .iter()
                        .map(|c| c.objs_moved as f64)
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
        };
        let _ = writeln!(
            out,
            "{}",
            ministat::block(c.x, &sample(c.x), c.y, &sample(c.y))
        );
    }
    if let Some((svg, png)) = &r.plot {
        let _ = writeln!(out, "Plot: {} and {}", svg.display(), png.display());
    }
    out
}
