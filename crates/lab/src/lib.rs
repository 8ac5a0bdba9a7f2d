//! zmem's lab: what measures the product rather than being it.
//!
//! This crate owns the data the measurements run on, the engines that run
//! them and the reports they print:
//! - [`corpus`]: input data laid out page by page, opened by kind (files,
//!   trees, tar members, block devices, pipes, FIFOs, standard input, ELF
//!   core segments via [`elf_core`], a process's memory via
//!   [`process_memory`]);
//! - [`replay`]: the stage engine (fill, discard, compact, verify) that
//!   `zmem replay` and the experiments run;
//! - `exp` (feature `plot`): the mailing-list experiments, each with a table,
//!   JSON and a figure;
//! - [`advise`]: `zmem advise`, every compressor and allocator measured on
//!   a sample of the user's data, and the advice;
//! - [`mod@bench`]: the benchmarks (`zmem bench alloc|read-latency|store|serve`);
//! - [`kernel_zram`]: a hot-added device of the kernel's own zram, the peer
//!   the store is measured against; [`fresh_memory`]: untouched anonymous
//!   memory, for the store benchmark's write ceilings;
//! - `plot` (feature `plot`), [`ministat`], [`rng`]: figures, Student's t, the
//!   seeded generator;
//! - [`Error`]: the error a run ends with (the recipe's, `recipe::Error`).
//!
//! The store flags and configurations, the flag value parsers and the
//! report format are the recipe crate's (`recipe`).
//!
//! The layer rule: product crates (pages, zpool, zsmalloc, the allocators,
//! zcomp, zram, nbd, serve, capi) never depend on this crate; it may depend
//! on them. The `zmem` command (crates/cli) holds the command tree and
//! dispatches here. Where a subcommand's `clap::Args` struct lives in this
//! crate, it sits beside the code that reads it: one place per option set,
//! no field-by-field copy in the command tree.

pub mod advise;
pub mod bench;
pub mod corpus;
pub mod elf_core;
#[cfg(feature = "plot")]
pub mod exp;
pub mod fresh_memory;
pub mod kernel_zram;
pub mod ministat;
#[cfg(feature = "plot")]
pub mod plot;
pub mod process_memory;
pub mod replay;
pub mod rng;

pub use recipe::Error;
