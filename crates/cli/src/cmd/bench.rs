//! `zmem bench ...`: the command tree of the benchmarks. Each benchmark, its
//! flags and its report are in `lab::bench`; this module only names them and
//! dispatches.

use clap::Subcommand;
use lab::bench::{alloc, compressors, read_latency, region, serve, store};

use crate::error::CliError;

/// `zmem bench ...`
#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// zsmalloc against glibc, jemalloc and mimalloc on real object sizes.
    Alloc(alloc::AllocArgs),
    /// Object read latency with and without compaction on another thread.
    ReadLatency(read_latency::ReadLatencyArgs),
    /// The store's write and read speed against raw compression, on one and
    /// two threads.
    Store(Box<store::StoreBenchArgs>),
    /// `zmem serve` beside nbdkit's memory plugin: throughput and RSS.
    Serve(serve::ServeBenchArgs),
    /// Each compressor's speed on one core and ratio, page by page, beside
    /// the kernel's zram with the same algorithm.
    Compressors(compressors::CompressorsArgs),
    /// A region's fault service beside the kernel's own fault, and the
    /// memory it saves at a limit on real data, skewed and sequential; or,
    /// with --promotion-run, its promotion rate against the controller's
    /// target over a phase change.
    Region(Box<region::RegionBenchArgs>),
}

/// Runs `zmem bench`.
pub fn run(cmd: &BenchCommand) -> Result<(), CliError> {
    Ok(match cmd {
        BenchCommand::Alloc(args) => alloc::run(args),
        BenchCommand::ReadLatency(args) => read_latency::run(args),
        BenchCommand::Store(args) => store::run(args),
        BenchCommand::Serve(args) => serve::run(args),
        BenchCommand::Compressors(args) => compressors::run(args),
        BenchCommand::Region(args) => region::run(args),
    }?)
}
