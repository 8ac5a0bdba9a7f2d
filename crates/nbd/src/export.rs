//! Exports: the named devices a server offers, and the server's settings.
//!
//! This module owns [`Export`] (a name, an optional description, an
//! `Arc<dyn BlockDevice>`, whether clients may only read it, or the reason
//! it refuses clients for now), the [`Exports`] table with its
//! default-export rule and its changes while a server runs (add, replace,
//! remove), and [`Config`], the limits every connection obeys. It checks
//! names and block sizes once, when an export is added, so the protocol code
//! can trust them. It does no I/O.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::device::BlockDevice;
use crate::tls::{Tls, TlsMode};
use crate::wire::MAX_STRING;

/// One device offered under a name.
#[derive(Clone)]
pub struct Export {
    name: String,
    description: Option<String>,
    device: Arc<dyn BlockDevice>,
    read_only: bool,
    unavailable: Option<String>,
}

impl Export {
    /// An export called `name` (may be empty) serving `device`.
    pub fn new(name: impl Into<String>, device: Arc<dyn BlockDevice>) -> Export {
        Export {
            name: name.into(),
            description: None,
            device,
            read_only: false,
            unavailable: None,
        }
    }

    /// The same export offered read-only: `NBD_FLAG_READ_ONLY` is
    /// advertised and writes, trims and zeroes get `EPERM`, whatever the
    /// device could do.
    pub fn read_only(mut self) -> Export {
        self.read_only = true;
        self
    }

    /// Whether clients may only read (the export says so, or its device).
    pub fn is_read_only(&self) -> bool {
        self.read_only || self.device.is_read_only()
    }

    /// An export that refuses every client for now, with `reason` (a device
    /// not set up yet, as an uninitialised zram disk). `INFO`, `GO` and
    /// `EXPORT_NAME` for it are answered `NBD_REP_ERR_UNKNOWN`, the
    /// protocol's "the requested export is not available", with `reason`
    /// as the message; `NBD_OPT_LIST` leaves it out (clients that list and
    /// then open every export, as `nbdinfo --list`, would fail on it). Its
    /// name stays taken, and `reason` is its description.
    pub fn unavailable(name: impl Into<String>, reason: impl Into<String>) -> Export {
        let reason = reason.into();
        Export {
            name: name.into(),
            description: Some(reason.clone()),
            device: Arc::new(crate::MemDevice::new(0)),
            read_only: false,
            unavailable: Some(reason),
        }
    }

    /// Why clients are refused, for an export made with
    /// [`Export::unavailable`].
    pub fn unavailable_reason(&self) -> Option<&str> {
        self.unavailable.as_deref()
    }

    /// The same export with a description for humans (`NBD_INFO_DESCRIPTION`,
    /// shown by `nbdinfo`).
    pub fn with_description(mut self, description: impl Into<String>) -> Export {
        self.description = Some(description.into());
        self
    }

    /// The export name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The description, if any.
    pub fn description(&self) -> Option<&str> {
        self.description.as_deref()
    }

    /// The device.
    pub fn device(&self) -> &Arc<dyn BlockDevice> {
        &self.device
    }
}

impl fmt::Debug for Export {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Export")
            .field("name", &self.name)
            .field("description", &self.description)
            .field("size", &self.device.size())
            .field("read_only", &self.is_read_only())
            .field("unavailable", &self.unavailable)
            .finish()
    }
}

/// Why an export was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExportError {
    /// Another export already has this name.
    Duplicate(String),
    /// The name or description is over 4096 bytes or contains NUL.
    BadString(String),
    /// The device's block sizes break the protocol's rules.
    BadBlockSize(String),
    /// No export has this name.
    NotFound(String),
    /// Clients are connected to this export, so it cannot be removed or
    /// replaced now.
    Busy {
        /// The export.
        name: String,
        /// Clients connected to it.
        connections: usize,
    },
}

impl fmt::Display for ExportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExportError::Duplicate(n) => write!(f, "an export named {n:?} already exists"),
            ExportError::BadString(m) => write!(f, "bad export name or description: {m}"),
            ExportError::BadBlockSize(m) => write!(f, "bad block size: {m}"),
            ExportError::NotFound(n) => write!(f, "no export named {n:?}"),
            ExportError::Busy { name, connections } => write!(
                f,
                "{connections} NBD client(s) connected to export {name:?}; disconnect them first"
            ),
        }
    }
}

impl std::error::Error for ExportError {}

/// The exports of a server, in the order they were added.
///
/// The empty name `""` (what clients ask for when given no name) selects an
/// export literally named `""` if there is one, and the first export
/// otherwise.
#[derive(Clone, Debug, Default)]
pub struct Exports {
    list: Vec<Arc<Export>>,
}

impl Exports {
    /// No exports.
    pub fn new() -> Exports {
        Exports::default()
    }

    /// A table holding one export.
    pub fn single(export: Export) -> Result<Exports, ExportError> {
        let mut e = Exports::new();
        e.add(export)?;
        Ok(e)
    }

    /// Adds an export after checking its name, description and block sizes.
    pub fn add(&mut self, export: Export) -> Result<(), ExportError> {
        if self.list.iter().any(|e| e.name == export.name) {
            return Err(ExportError::Duplicate(export.name));
        }
        let export = Exports::checked(export)?;
        self.list.push(export);
        Ok(())
    }

    /// Puts `export` in the place of the export of the same name (keeping
    /// its position) after the checks of [`Exports::add`]; returns the one
    /// it replaced.
    pub fn replace(&mut self, export: Export) -> Result<Arc<Export>, ExportError> {
        let Some(i) = self.list.iter().position(|e| e.name == export.name) else {
            return Err(ExportError::NotFound(export.name));
        };
        let export = Exports::checked(export)?;
        Ok(std::mem::replace(&mut self.list[i], export))
    }

    /// Removes the export called exactly `name` (the default-export rule
    /// does not apply) and returns it.
    pub fn remove(&mut self, name: &str) -> Result<Arc<Export>, ExportError> {
        match self.list.iter().position(|e| e.name == name) {
            Some(i) => Ok(self.list.remove(i)),
            None => Err(ExportError::NotFound(name.to_string())),
        }
    }

    /// The export called exactly `name` (no default-export rule).
    pub(crate) fn exact(&self, name: &str) -> Option<&Arc<Export>> {
        self.list.iter().find(|e| e.name == name)
    }

    /// `export` after checking its strings and block sizes.
    fn checked(export: Export) -> Result<Arc<Export>, ExportError> {
        for s in std::iter::once(export.name()).chain(export.description()) {
            if s.len() > MAX_STRING || s.contains('\0') {
                return Err(ExportError::BadString(format!(
                    "{} bytes, NUL: {}",
                    s.len(),
                    s.contains('\0')
                )));
            }
        }
        export
            .device
            .block_size()
            .validate()
            .map_err(ExportError::BadBlockSize)?;
        Ok(Arc::new(export))
    }

    /// The export a client asking for `name` gets.
    pub fn get(&self, name: &str) -> Option<&Arc<Export>> {
        self.list.iter().find(|e| e.name == name).or_else(|| {
            if name.is_empty() {
                self.list.first()
            } else {
                None
            }
        })
    }

    /// All exports, in order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Export>> {
        self.list.iter()
    }

    /// Number of exports.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
}

/// Limits and settings of a server.
#[derive(Clone, Debug)]
pub struct Config {
    /// Worker threads per connection that serve requests while the
    /// connection's own thread keeps reading new ones. 0 serves each request
    /// in the reading thread, one at a time. The default is
    /// [`Config::default_workers`].
    pub workers: usize,
    /// Largest READ or WRITE payload accepted (advertised as the maximum
    /// block size, unless the device's is smaller). Larger requests get
    /// `EINVAL`; a larger WRITE payload is read and discarded first.
    pub max_request: u32,
    /// Bytes of read data and write payloads one connection may have in
    /// flight (read from the client and not yet answered, or being read
    /// from the device and not yet sent); the connection stops reading
    /// requests while it is used up, so a client that does not read its
    /// replies holds no more. Never less than `max_request`. Its buffers,
    /// kept ones included, stay within this plus 1 MiB.
    pub inflight_bytes: u64,
    /// Bytes of payload buffers all connections together may hold. A
    /// buffer is allocated only once this budget grants its bytes; requests
    /// that find it used up wait in arrival order. Never less than one
    /// connection's bound plus 1 MiB.
    pub inflight_total: u64,
    /// How long a reply may make no progress at all (the client reads
    /// nothing) while other requests wait for `inflight_total`; its
    /// connection is then closed, with a log line, and its memory returns.
    /// A slow client that still reads, or a stalled one nobody needs the
    /// memory of, is never closed for this.
    pub stall_timeout: Duration,
    /// Connections past the handshake served at once. A client that arrives
    /// (or finishes its handshake) while this many are served is closed, and
    /// the server logs why.
    pub max_connections: usize,
    /// Connections in the handshake at once, counted apart from
    /// `max_connections` so that clients stalled in the handshake never lock
    /// out clients that finished it. When a new client arrives and this many
    /// are negotiating, the one that has negotiated longest is closed first.
    pub max_handshakes: usize,
    /// How long a client may take from its arrival to the end of the
    /// handshake; it is closed after that (qemu-nbd's `--handshake-limit`
    /// does the same, with the same default).
    pub handshake_timeout: Duration,
    /// How long a shutdown lets in-flight requests finish before it closes
    /// the sockets under them.
    pub shutdown_grace: Duration,
    /// Whether a TCP listener may bind a non-loopback address (default
    /// no). It then also needs `tls` in `TlsMode::Require`, or `insecure`.
    pub allow_remote: bool,
    /// Whether a non-loopback TCP listener may serve clients without TLS
    /// (no encryption, no authentication). Default no.
    pub insecure: bool,
    /// TLS offered or required, with the server's certificates; `None` is
    /// no TLS (`NBD_OPT_STARTTLS` is answered `NBD_REP_ERR_UNSUP`).
    pub tls: Option<Arc<Tls>>,
    /// The stack of each connection's threads (its reader and its
    /// workers), bytes; `None` is Rust's default (2 MiB).
    pub conn_thread_stack: Option<usize>,
    /// Called first in each connection's threads (its reader and its
    /// workers), before they read or serve anything: a server that must
    /// not fault on its I/O path populates and locks the thread's stack
    /// here.
    pub on_conn_thread_start: Option<fn()>,
}

impl Config {
    /// 32 MiB: the request limit of qemu and nbdkit.
    pub const DEFAULT_MAX_REQUEST: u32 = 32 * 1024 * 1024;

    /// 10 seconds, qemu-nbd's default handshake limit: a real client
    /// negotiates in milliseconds, and a loaded machine has room to spare.
    pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

    /// Workers per connection by default: one per CPU this process may run
    /// on, at most 4. More workers than CPUs cannot compress any faster;
    /// they only add threads, each with a stack that stays resident (glibc
    /// caches the stacks of exited threads for the next ones).
    pub fn default_workers() -> usize {
        std::thread::available_parallelism().map_or(1, |n| n.get().min(4))
    }

    /// 32 MiB per connection: twice what nbdcopy (64 requests of 256 KiB)
    /// or the kernel's nbd client (128 of 128 KiB) keep in flight, and one
    /// request of the largest size.
    pub const DEFAULT_INFLIGHT_BYTES: u64 = 32 * 1024 * 1024;

    /// 256 MiB for the whole server: eight connections at their bound.
    pub const DEFAULT_INFLIGHT_TOTAL: u64 = 256 * 1024 * 1024;

    /// 10 seconds, as the handshake limit.
    pub const DEFAULT_STALL_TIMEOUT: Duration = Duration::from_secs(10);

    /// Whether a listener may serve `a`: a TCP address that is not
    /// loopback needs `allow_remote`, and TLS required unless `insecure`.
    pub(crate) fn check_listen_addr(&self, a: &SocketAddr) -> io::Result<()> {
        if a.ip().is_loopback() {
            return Ok(());
        }
        let tls_required = self
            .tls
            .as_ref()
            .is_some_and(|t| t.mode() == TlsMode::Require);
        let refusal = if !self.allow_remote {
            Some("set allow_remote to serve remote clients")
        } else if !tls_required && !self.insecure {
            Some("remote clients need TLS required, or insecure set")
        } else {
            None
        };
        match refusal {
            Some(why) => Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("refusing to listen on {a}: not a loopback address ({why})"),
            )),
            None => Ok(()),
        }
    }

    /// `inflight_bytes`, raised to at least `max_request`.
    pub(crate) fn budget(&self) -> u64 {
        self.inflight_bytes.max(self.max_request as u64)
    }

    /// `inflight_total`, raised to at least one connection's buffers.
    pub(crate) fn total_budget(&self) -> u64 {
        self.inflight_total
            .max(self.budget() + crate::buffers::SLACK_BYTES as u64)
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            workers: Config::default_workers(),
            max_request: Config::DEFAULT_MAX_REQUEST,
            inflight_bytes: Config::DEFAULT_INFLIGHT_BYTES,
            inflight_total: Config::DEFAULT_INFLIGHT_TOTAL,
            stall_timeout: Config::DEFAULT_STALL_TIMEOUT,
            max_connections: 64,
            max_handshakes: 64,
            handshake_timeout: Config::DEFAULT_HANDSHAKE_TIMEOUT,
            shutdown_grace: Duration::from_secs(5),
            allow_remote: false,
            insecure: false,
            tls: None,
            conn_thread_stack: None,
            on_conn_thread_start: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemDevice;

    #[test]
    fn default_export_rule() {
        let mut e = Exports::new();
        assert!(e.get("").is_none());
        e.add(Export::new("a", Arc::new(MemDevice::new(1))))
            .unwrap();
        e.add(Export::new("b", Arc::new(MemDevice::new(2))))
            .unwrap();
        assert_eq!(e.get("").unwrap().name(), "a");
        assert_eq!(e.get("b").unwrap().device().size(), 2);
        assert!(e.get("c").is_none());
        e.add(Export::new("", Arc::new(MemDevice::new(3)))).unwrap();
        assert_eq!(e.get("").unwrap().device().size(), 3);
        assert!(matches!(
            e.add(Export::new("a", Arc::new(MemDevice::new(1)))),
            Err(ExportError::Duplicate(_))
        ));
        assert!(e
            .add(Export::new("x\0", Arc::new(MemDevice::new(1))))
            .is_err());
    }

    #[test]
    fn exports_are_replaced_in_place_and_removed_by_exact_name() {
        let mut e = Exports::new();
        for n in ["a", "b", "c"] {
            e.add(Export::new(n, Arc::new(MemDevice::new(1)))).unwrap();
        }
        let old = e.replace(Export::unavailable("b", "not set up")).unwrap();
        assert_eq!(old.device().size(), 1);
        let names: Vec<&str> = e.iter().map(|x| x.name()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert_eq!(e.get("b").unwrap().unavailable_reason(), Some("not set up"));
        assert_eq!(e.get("b").unwrap().description(), Some("not set up"));
        assert!(matches!(
            e.replace(Export::new("z", Arc::new(MemDevice::new(1)))),
            Err(ExportError::NotFound(_))
        ));
        // "" is the default export for clients, never for removal.
        assert!(matches!(e.remove(""), Err(ExportError::NotFound(_))));
        assert_eq!(e.remove("a").unwrap().name(), "a");
        assert_eq!(e.get("").unwrap().name(), "b");
        assert!(e.exact("a").is_none());
    }
}
