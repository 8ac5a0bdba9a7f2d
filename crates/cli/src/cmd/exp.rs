//! `zmem exp ...`: the command tree of the experiments of the kernel patches
//! zmem grew from (docs/design.md lists them). Each experiment, its flags and
//! its report are in `lab::exp`; this module only names them and dispatches.

use clap::Subcommand;
use lab::exp::{chain, compaction, latency, merge, untar};

use crate::error::CliError;

/// The experiments.
#[derive(Subcommand, Debug)]
pub enum ExpCommand {
    /// Fullness groups and compaction: objects moved by compaction under the
    /// kernel's fullness groups and algorithms before and since 6.4 and
    /// zmem's, per class, with Student's t.
    Compaction(compaction::CompactionArgs),
    /// Chain length: mem_used_total for several most-pages-per-zspage limits
    /// on files of growing size.
    Chain(chain::ChainArgs),
    /// Class merging: overhead ratio with and without class merging as the
    /// Linux source's directories are removed.
    Merge(merge::MergeArgs),
    /// Allocator latency: per-operation latency (p50..max) and memory of
    /// zsmalloc, zbud, z3fold and zblock under one fixed-seed zram-like
    /// workload.
    Latency(latency::LatencyArgs),
    /// Class merging on a real file system (root): ext4 mounted with discard
    /// on the kernel's zram and on zmem exports, untar the Linux source,
    /// remove its largest directories; mm_stat and overhead ratio after each
    /// step.
    Untar(untar::UntarArgs),
}

/// Runs `zmem exp`.
pub fn run(cmd: &ExpCommand) -> Result<(), CliError> {
    Ok(match cmd {
        ExpCommand::Compaction(args) => compaction::run(args),
        ExpCommand::Chain(args) => chain::run(args),
        ExpCommand::Merge(args) => merge::run(args),
        ExpCommand::Latency(args) => latency::run(args),
        ExpCommand::Untar(args) => untar::run(args),
    }?)
}
