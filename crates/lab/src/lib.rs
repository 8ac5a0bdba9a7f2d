//! zmem's lab: what measures the product rather than being it.
//!
//! This crate owns the experiments, the benchmarks, the figures and the
//! peers the product is measured against:
//! - `exp` (feature `plot`): the mailing-list experiments, each with a table,
//!   JSON and a figure;
//! - [`mod@bench`]: the benchmarks (`zmem bench alloc|read-latency|store|serve`);
//! - [`kernel_zram`]: the kernel's own zram, the peer the store is measured
//!   against (the product's `tune::kernel_zram`, re-exported, since
//!   `zmem advise --verify` uses it too); [`fresh_memory`]: untouched anonymous
//!   memory, for the store benchmark's write ceilings;
//! - `plot` and `advise_plot` (feature `plot`), [`ministat`]: figures (among
//!   them `zmem advise --plot`'s), Student's t;
//! - [`Error`]: the error a run ends with (the recipe's, `recipe::Error`).
//!
//! The store flags and configurations, the flag value parsers and the
//! report format are the recipe crate's (`recipe`); the corpus, the replay
//! engine, the advice and the seeded generator are the product's measuring
//! of a user's data (`tune`).
//!
//! The layer rule: product crates (pages, zpool, zsmalloc, the allocators,
//! zcomp, zram, nbd, recipe, serve, tune, capi) never depend on this crate;
//! it may depend on them. The `zmem` command (crates/cli) holds the command
//! tree and dispatches here, with its `lab` feature only. Where a
//! subcommand's `clap::Args` struct lives in this crate, it sits beside the
//! code that reads it: one place per option set, no field-by-field copy in
//! the command tree.

#[cfg(feature = "plot")]
pub mod advise_plot;
pub mod bench;
#[cfg(feature = "plot")]
pub mod exp;
pub mod fresh_memory;
pub use tune::kernel_zram;
pub mod ministat;
#[cfg(feature = "plot")]
pub mod plot;

pub use recipe::Error;
