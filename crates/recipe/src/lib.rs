//! The store recipe: how zmem's flags become stores.
//!
//! This crate sits above the stores (zsmalloc, the other allocators, zcomp,
//! zram) and below what serves or measures them (serve, tune, the lab, the
//! `zmem` command). It owns, one concept per module:
//! - [`spec`]: the store flags ([`StoreArgs`]: `--alloc`, `--comp`,
//!   `--page-size`, `--unit`, `--mode`, ...) and the configurations they
//!   expand to ([`StoreSpec`]), with the default compressor and background
//!   compaction of each mode. `--comp` is parsed there, once, into a
//!   [`zcomp::Algorithm`];
//! - [`kernel`]: which kernel kernel-compat mode stands for (its zram's
//!   default compressor and the ones it offers, read from the running
//!   kernel or given with `--kernel-comp`);
//! - [`size`]: the one size parser (the kernel's `memparse`: K, M, G, T, P,
//!   E) and the round-up to whole pages;
//! - [`flags`]: the value parsers of numeric flags, each with its range;
//! - [`factory`]: what an export holds before `disksize` ([`Settings`]), the
//!   [`StoreFactory`] a server makes stores with, and [`SpecFactory`], the
//!   one made of a [`StoreSpec`] and the server's policy flags, with typed
//!   errors ([`FactoryError`]);
//! - [`output`] and [`mod@error`]: the `--format table|json` option, report
//!   writing, and the error a run ends with.
//!
//! It parses text and makes stores; it serves nothing and measures nothing
//! (reading which kernel kernel-compat stands for is its one look outside).

pub mod error;
pub mod factory;
pub mod flags;
pub mod kernel;
pub mod output;
pub mod size;
pub mod spec;

pub use error::Error;
pub use factory::{FactoryError, PolicyFlags, Settings, SpecFactory, StoreFactory};
pub use kernel::KernelCompat;
pub use spec::{default_comp, StoreArgs, StoreSpec};
