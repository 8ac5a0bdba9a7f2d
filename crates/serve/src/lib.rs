//! zram stores served over NBD or ublk: what `zmem serve` is made of.
//!
//! `zmem serve` exports one or more [`zram::Store`]s as NBD block devices
//! with the [`nbd`] crate's server (or as ublk block devices), and offers a
//! control interface that mirrors zram's sysfs attributes plus a Prometheus
//! endpoint. The public API is what this file re-exports, and three small
//! modules:
//! - [`Server`]: a running `zmem serve` as a whole ([`Server::start`] from
//!   a [`ServerConfig`], and [`Server::shutdown`]), with [`ServeError`];
//! - [`Registry`]: the exports by name and the life of each ([`Served`],
//!   [`Settings`], [`StoreFactory`], [`ExportView`]);
//! - [`PageDevice`] and [`export_device`]: a store as an
//!   [`nbd::BlockDevice`]; [`nbd_error`]: a store error as NBD's;
//! - [`CtlServer`], [`request`] and [`CtlError`]: the control socket and
//!   its errors; [`MetricsServer`] and [`render`]: the Prometheus endpoint;
//! - [`SwapMode`], [`SwapError`], [`SysctlError`], [`UblkExports`]: what
//!   swap mode set, why it could not (a setting of its own, or a kernel
//!   setting it needs), and the ublk front end, as the registry reports
//!   them;
//! - [`ctl_socket`] (the control socket's line protocol), [`paths`] (the
//!   default socket paths `zmem serve` and `zmem ctl` share) and [`trim`]
//!   (giving idle memory back to the OS once I/O goes quiet).
//!
//! Inside, one concept per module (all `pub(crate)`): `device` (the NBD
//! adapter: whole pages, with read-modify-write for partial ones through
//! [`nbd::BlockAligned`]), `page_range` (the page-range check and loops
//! the NBD adapter and the ublk target share), `registry`, `attrs` (the
//! table of control commands, one entry per zram attribute with its read
//! and write functions and the export states it is valid in), `control`
//! (how a command runs, answering exactly what sysfs would), `ctl_error`
//! (its errors, each with the kernel's errno), `metrics`, `server` (the
//! order the parts come up and go down in), `swap` (swap mode: locked
//! memory, a reserve the stores draw from, the I/O-flusher flag), `sysctl`
//! (the kernel settings swap mode raises, put back when it stops) and
//! `ublk_exports` (the exports as `/dev/ublkbN`, and the store as their
//! target).
//!
//! The command line, the configuration file, logging and signal handling
//! live in the `zmem` binary. The only `unsafe` code is [`trim`]'s two
//! glibc calls, `swap`'s C calls, and `ublk_exports::warm_up`'s aligned
//! buffer and its affinity and discard calls.

#![deny(unsafe_code)]
#![warn(missing_docs)]
#![warn(unreachable_pub)]

mod attrs;
mod control;
mod ctl_error;
pub mod ctl_socket;
mod device;
mod metrics;
mod page_range;
pub mod paths;
mod registry;
mod server;
#[allow(unsafe_code)]
mod swap;
mod sysctl;
#[cfg(test)]
mod test_factory;
#[allow(unsafe_code)]
pub mod trim;
#[allow(unsafe_code)]
mod ublk_exports;

pub use ctl_error::CtlError;
pub use ctl_socket::{request, CtlServer};
pub use device::{export_device, nbd_error, PageDevice};
pub use metrics::{render, MetricsServer};
pub use registry::{ExportView, Registry, Served, Settings, StoreFactory};
pub use server::{
    ExportConfig, Front, Listen, NbdFront, ServeError, Server, ServerConfig, StoreSettings,
    UblkFront,
};
pub use swap::{SwapError, SwapMode};
pub use sysctl::SysctlError;
pub use ublk_exports::UblkExports;
