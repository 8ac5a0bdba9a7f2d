//! The mailing-list experiments, reproduced, each with a table, JSON and a
//! figure (so this module comes with the `plot` feature):
//! - [`compaction`]: fullness groups and compaction, objects moved under
//!   each fullness grouping and algorithm (the fine-grained fullness
//!   series);
//! - [`chain`]: chain length, mem_used_total for several pages-per-zspage
//!   limits (the patch that lengthens the chain);
//! - [`merge`]: class merging, overhead with and without it (the
//!   class-merging patch);
//! - [`latency`]: allocator latency, per operation, and memory of every
//!   allocator (the zbud-for-zram thread);
//! - [`untar`]: class merging's workload on a real file system, ext4 with
//!   discard on each store and on the kernel's zram (root).
//!
//! The `zmem exp` command tree and its dispatch are the `zmem` binary's.

pub mod chain;
pub mod compaction;
pub mod latency;
pub mod merge;
pub mod untar;

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::plot::{self, Chart, Series};
use crate::Error;
use recipe::output::{write_json, write_stdout, Format};

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

/// The report of a replayed experiment: what it `found`, and what every one
/// reports with it: the corpus, the pages each store read back identical
/// and the figure's files. In JSON the fields of `found` stand between the
/// corpus and the verified pages.
#[derive(Serialize)]
struct Replayed<'a, T> {
    corpus: &'a str,
    #[serde(flatten)]
    found: T,
    verified_pages: u64,
    plot: Option<(PathBuf, PathBuf)>,
}

impl<T: Serialize> Replayed<'_, T> {
    /// Writes the report to stdout in `format`: JSON, or the table `table`
    /// makes of what was found followed by the verify and plot lines.
    fn write(&self, format: Format, table: impl FnOnce(&T) -> String) -> Result<(), Error> {
        match format {
            Format::Json => write_json(self),
            Format::Table => {
                let mut out = table(&self.found);
                out.push_str(&format!(
                    "verify: every page read back identical ({} pages per store)\n",
                    self.verified_pages
                ));
                if let Some((svg, png)) = &self.plot {
                    out.push_str(&format!("plot: {} {}\n", svg.display(), png.display()));
                }
                write_stdout(&out)
            }
        }
    }
}
