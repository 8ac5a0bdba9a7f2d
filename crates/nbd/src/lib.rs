//! An NBD (Network Block Device) server.
//!
//! A [`Server`] exports one or more [`BlockDevice`]s by name over a Unix
//! socket or loopback TCP to any NBD client (qemu-img, qemu-io, nbdcopy,
//! nbdinfo, nbdfuse, the kernel's nbd-client). It speaks the fixed newstyle
//! handshake (`EXPORT_NAME`, `GO`, `INFO`, `LIST`, `ABORT`,
//! `STRUCTURED_REPLY`, `EXTENDED_HEADERS` with 64-bit lengths,
//! `base:allocation` metadata), the commands `READ`,
//! `WRITE` (+FUA), `FLUSH`, `TRIM`, `WRITE_ZEROES` (+NO_HOLE, FAST_ZERO),
//! `CACHE`, `BLOCK_STATUS` and `DISC`, and advertises exactly the features
//! the device reports. Each connection reads requests in one thread and
//! serves them on a few workers, so many requests are in flight at once.
//!
//! ```no_run
//! use std::sync::Arc;
//! use nbd::{Export, Exports, MemDevice, Server};
//!
//! let exports = Exports::single(Export::new("", Arc::new(MemDevice::new(1 << 30)))).unwrap();
//! let server = Server::bind_unix("/tmp/nbd.sock", exports).unwrap();
//! // qemu-img convert -n -f raw -O raw disk.img 'nbd+unix:///?socket=/tmp/nbd.sock'
//! server.shutdown();
//! ```
//!
//! Modules, one per concern (after nbdkit's server/ layout):
//! - [`error`]: [`DeviceError`] and [`Errno`], the Linux errno (name and
//!   number) NBD replies and zmem's control errors share.
//! - [`device`]: the [`BlockDevice`] trait, block sizes, extents.
//! - [`mem`]: [`MemDevice`], the sparse in-memory reference device.
//! - [`aligned`]: [`BlockAligned`], read-modify-write for whole-block devices.
//! - [`wire`]: constants and pure encoders/parsers of every message.
//! - `export`: [`Export`], [`Exports`], [`Config`].
//! - `handshake`: option haggling (fixed newstyle).
//! - `transmission`: the request loop, workers and replies.
//! - `budget`: payload memory per connection and server-wide
//!   ([`BudgetStats`]).
//! - `buffers`: payload buffers a connection reuses while it is busy.
//! - `conn_error`: why a connection ended abnormally (logged, never sent).
//! - `connection`: one connection from greeting to close, and the counts
//!   of sessions by reply form ([`SessionStats`]).
//! - `socket`, `server`: listeners, threads, shutdown.
//! - `tls`: [`Tls`] certificates and [`TlsMode`], and a connection's TLS
//!   session split into a reading and a writing half (`NBD_OPT_STARTTLS`).
//!
//! Exports may be added, replaced and removed while the server runs
//! ([`Server::add_export`]); one made with [`Export::unavailable`] keeps its
//! name but is not listed and refuses clients with `NBD_REP_ERR_UNKNOWN` and
//! a reason.
//!
//! Not supported: TLS-PSK (rustls has no pre-shared keys), old-style
//! negotiation, resize, the payload form of `BLOCK_STATUS`.
//! The crate has no `unsafe` code.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod aligned;
mod budget;
mod buffers;
mod conn_error;
mod connection;
pub mod device;
pub mod error;
mod export;
#[doc(hidden)]
pub mod fuzzing;
mod handshake;
pub mod mem;
mod readahead;
mod server;
mod socket;
mod tls;
mod transmission;
pub mod wire;

pub use aligned::BlockAligned;
pub use budget::BudgetStats;
pub use connection::SessionStats;
pub use device::{check_range, BlockDevice, BlockSize, Extent};
pub use error::{DeviceError, DeviceResult, Errno};
pub use export::{Config, Export, ExportError, Exports};
pub use handshake::{BASE_ALLOCATION, BASE_ALLOCATION_ID};
pub use mem::MemDevice;
pub use server::{Server, ShutdownHandle};
pub use socket::{AcceptStopper, InheritedListener, ListenAddr, DEFAULT_TCP_ADDR};
pub use tls::{Tls, TlsMode, CA_CERT, SERVER_CERT, SERVER_KEY};
