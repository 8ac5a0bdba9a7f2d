//! The mailing-list experiments, reproduced, each with a table, JSON and a
//! figure (so this module comes with the `plot` feature):
//! - [`compaction`]: objects moved by compaction under each fullness grouping
//!   and algorithm (seed 001);
//! - [`chain`]: mem_used_total for several pages-per-zspage limits (seed 000);
//! - [`merge`]: overhead with and without class merging (seed 003);
//! - [`latency`]: per-operation latency and memory of every allocator
//!   (seed 004).
//!
//! The `zmem exp` command tree and its dispatch are the `zmem` binary's.

pub mod chain;
pub mod compaction;
pub mod latency;
pub mod merge;

use std::path::{Path, PathBuf};

use crate::plot::{self, Chart, Series};
use crate::Error;

/// An experiment's figure: unless `no_plot`, a line chart of the lines
/// `series` makes, titled and labelled `[title, x label, y label]`, written
/// to the SVG and PNG files at `stem` (their paths).
fn line_chart_unless(
    no_plot: bool,
    stem: &Path,
    [title, x_label, y_label]: [&str; 3],
    series: impl FnOnce() -> Vec<Series>,
) -> Result<Option<(PathBuf, PathBuf)>, Error> {
    if no_plot {
        return Ok(None);
    }
    let chart = Chart {
        title,
        x_label,
        y_label,
        series: &series(),
    };
    Ok(Some(plot::line_chart(stem, &chart)?))
}

/// The last lines of a replayed experiment's table: the pages each store
/// read back identical, and the figure's files if there is one.
fn table_footer(out: &mut String, verified: u64, plot: &Option<(PathBuf, PathBuf)>) {
    out.push_str(&format!(
        "verify: every page read back identical ({verified} pages per store)\n"
    ));
    if let Some((svg, png)) = plot {
        out.push_str(&format!("plot: {} {}\n", svg.display(), png.display()));
    }
}
