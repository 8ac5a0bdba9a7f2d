//! zmem's measuring of a user's own data: what `zmem replay` and `zmem
//! advise` run.
//!
//! This crate owns, one concept per module:
//! - [`corpus`]: input data laid out page by page, opened by kind (files,
//!   trees, tar members, block devices, pipes, FIFOs, standard input, ELF
//!   core segments via `elf_core`, a process's memory via
//!   `process_memory`);
//! - [`replay`]: the stage engine (fill, discard, compact, idle marking,
//!   recompression, writeback, verify) that `zmem replay` and the lab's
//!   experiments run on [`recipe::StoreSpec`]s;
//! - [`advise`]: every compressor and allocator measured on a sample of the
//!   user's data, and the advice (its figures are drawn by the lab);
//! - [`system_memory`]: the anonymous memory of a whole machine, a cgroup
//!   or chosen processes, scanned and sampled as zram would receive it;
//! - `sizing`: `disksize` and `mem_limit` for a share of RAM, beside the
//!   distributions' defaults;
//! - `swap_costs`: a swap-in from zram against a read from the disk, and
//!   the `vm.swappiness` and `vm.page-cluster` that follow;
//! - [`machine`]: `zmem advise --system`'s steps, choice, idle policy and
//!   kernel check;
//! - [`idle_watch`]: how much of that memory stays untouched over time, and
//!   what idle writeback and recompression would then do;
//! - [`emit`]: the files to install (zram-generator.conf, sysfs lines,
//!   sysctl.d, `zmem serve` flags);
//! - [`kernel_zram`]: a hot-added device of the kernel's own zram, which
//!   `zmem advise --verify` checks the prediction against;
//! - [`front`]: zram or zswap: the same pages through the zswap model
//!   beside the kernel's zram, for `replay --front zswap` and the advice;
//! - [`rng`]: the seeded generator the sampling and discards use.
//!
//! The linked modules are what other crates use; the others are this
//! crate's own. Within a module, what other crates use is `pub` and the
//! rest `pub(crate)` (`unreachable_pub` warns of a `pub` item no other
//! crate can reach); a crate-private struct's fields are plain `pub`,
//! bounded by the struct.
//!
//! It sits above the recipe and the stores and below the lab and the `zmem`
//! command; runs end with a [`recipe::Error`].

#![warn(unreachable_pub)]

pub mod advise;
pub mod corpus;
pub(crate) mod elf_core;
pub mod emit;
pub mod front;
pub mod idle_watch;
pub mod kernel_zram;
pub mod machine;
pub(crate) mod process_memory;
pub mod replay;
pub mod rng;
pub(crate) mod sizing;
pub(crate) mod swap_costs;
pub mod system_memory;
