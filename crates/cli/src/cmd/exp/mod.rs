//! `zmem exp ...`: the experiments of the kernel patches zmem grew from
//! (seeds 000..004), reproduced, each with a table, JSON
//! and a plot.

pub mod chain;
pub mod compaction;
pub mod latency;
pub mod merge;

use clap::Subcommand;

use crate::CliError;

/// The experiments.
#[derive(Subcommand, Debug)]
pub enum ExpCommand {
    /// Fine-grained fullness and the new compaction algorithm (seed 001):
    /// objects moved by compaction under each fullness grouping and
    /// algorithm, per class, with Student's t.
    Compaction(compaction::CompactionArgs),
    /// Longer zspage chains (seed 000): mem_used_total for several
    /// most-pages-per-zspage limits on files of growing size.
    Chain(chain::ChainArgs),
    /// Class merging (seed 003): overhead ratio with and without class
    /// merging as the Linux source's directories are removed.
    Merge(merge::MergeArgs),
    /// zbud for zram, latency against density (seed 004): per-operation
    /// latency (p50..max) and memory of zsmalloc, zbud, z3fold and zblock
    /// under one fixed-seed zram-like workload.
    Latency(latency::LatencyArgs),
}

/// Runs `zmem exp`.
pub fn run(cmd: &ExpCommand) -> Result<(), CliError> {
    match cmd {
        ExpCommand::Compaction(args) => compaction::run(args),
        ExpCommand::Chain(args) => chain::run(args),
        ExpCommand::Merge(args) => merge::run(args),
        ExpCommand::Latency(args) => latency::run(args),
    }
}
