//! `zmem exp ...`: the seeds' experiments, reproduced, each with a table, JSON
//! and a plot.

pub mod compaction;
pub mod latency;

use clap::Subcommand;

use crate::CliError;

/// The experiments.
#[derive(Subcommand, Debug)]
pub enum ExpCommand {
    /// Seed 001: objects moved by compaction under each fullness grouping and
    /// algorithm, per class, with Student's t.
    Compaction(compaction::CompactionArgs),
    /// Seed 004: per-operation latency (p50..max) and memory of zsmalloc,
    /// zbud, z3fold and zblock under one fixed-seed zram-like workload.
    Latency(latency::LatencyArgs),
}

/// Runs `zmem exp`.
pub fn run(cmd: &ExpCommand) -> Result<(), CliError> {
    match cmd {
        ExpCommand::Compaction(args) => compaction::run(args),
        ExpCommand::Latency(args) => latency::run(args),
    }
}
