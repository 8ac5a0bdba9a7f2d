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
