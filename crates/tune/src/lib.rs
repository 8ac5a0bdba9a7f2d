//! zmem's measuring of a user's own data: what `zmem replay` and `zmem
//! advise` run.
//!
//! This crate owns, one concept per module:
//! - [`corpus`]: input data laid out page by page, opened by kind (files,
//!   trees, tar members, block devices, pipes, FIFOs, standard input, ELF
//!   core segments via [`elf_core`], a process's memory via
//!   [`process_memory`]);
//! - [`replay`]: the stage engine (fill, discard, compact, idle marking,
//!   recompression, writeback, verify) that `zmem replay` and the lab's
//!   experiments run on [`recipe::StoreSpec`]s;
//! - [`advise`]: every compressor and allocator measured on a sample of the
//!   user's data, and the advice (its figures are drawn by the lab);
//! - [`rng`]: the seeded generator the sampling and discards use.
//!
//! It sits above the recipe and the stores and below the lab and the `zmem`
//! command; runs end with a [`recipe::Error`].

pub mod advise;
pub mod corpus;
pub mod elf_core;
pub mod process_memory;
pub mod replay;
pub mod rng;
