//! zram stores served over NBD: what `zmem serve` is made of.
//!
//! `zmem serve` exports one or more [`zram::Store`]s as NBD block devices
//! with the [`nbd`] crate's server, and offers a control interface that
//! mirrors zram's sysfs attributes plus a Prometheus endpoint. This crate
//! holds those parts, one concept per module:
//! - [`device`]: the store as an [`nbd::BlockDevice`] (whole pages, with
//!   read-modify-write for partial ones through [`nbd::BlockAligned`]);
//! - [`registry`]: the exports by name and the life of each (hot_add,
//!   uninitialised, initialised by `disksize`, reset, hot_remove), shared by
//!   the NBD server, the control socket and the metrics endpoint;
//! - [`attrs`]: the table of control commands (`mm_stat`, `compact`,
//!   `reset`, `mem_limit`, ...), one entry per zram attribute with its read
//!   and write functions and the export states it is valid in;
//! - [`control`]: how a control command runs (the table's dispatch),
//!   answering exactly what sysfs would; [`ctl_error`]: its errors, each
//!   with the kernel's errno;
//! - [`ctl_socket`]: the control socket's line protocol, server and client;
//! - [`metrics`]: the Prometheus text format and its tiny HTTP server;
//! - [`paths`]: the default socket paths `zmem serve` and `zmem ctl` share;
//! - [`server`]: a running `zmem serve` as a whole ([`Server::start`] from a
//!   [`ServerConfig`], and its shutdown): the order its parts come up and
//!   go down in;
//! - [`trim`]: giving idle memory back to the OS once I/O goes quiet;
//! - [`swap`]: swap mode, for a server its own kernel swaps onto (locked
//!   memory, a reserve the stores draw from, the I/O-flusher flag);
//! - [`ublk_exports`]: the exports as ublk block devices (`/dev/ublkbN`,
//!   `zmem serve --ublk`), and the store as their target.
//!
//! The command line, the configuration file, logging and signal handling
//! live in the `zmem` binary.
//! The only `unsafe` code is [`trim`]'s two glibc calls, [`swap`]'s
//! C calls, and [`ublk_exports::warm_up`]'s aligned buffer and its
//! affinity and discard calls.

#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod attrs;
pub mod control;
pub mod ctl_error;
pub mod ctl_socket;
pub mod device;
pub mod metrics;
mod page_range;
pub mod paths;
pub mod registry;
pub mod server;
#[allow(unsafe_code)]
pub mod swap;
#[cfg(test)]
mod test_factory;
#[allow(unsafe_code)]
pub mod trim;
#[allow(unsafe_code)]
pub mod ublk_exports;

pub use ctl_error::CtlError;
pub use ctl_socket::{request, CtlServer};
pub use device::{export_device, nbd_error, PageDevice};
pub use metrics::MetricsServer;
pub use registry::{Registry, Served, Settings, StoreFactory};
pub use server::{
    ExportConfig, Front, Listen, NbdFront, ServeError, Server, ServerConfig, StoreSettings,
    UblkFront,
};
