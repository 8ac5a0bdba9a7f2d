//! A running `zmem serve`: its start-up sequence and its shutdown.
//!
//! This module owns the order in which a server comes up and goes down.
//! [`Server::start`] takes a [`ServerConfig`] (what the flags and the
//! configuration file said, already parsed) and:
//! 1. checks the settings that depend on each other (a non-loopback TCP
//!    address needs remote clients allowed, and TLS required unless they
//!    may be served without it; in-flight bounds, the
//!    policy flags against the secondary compressors and backing devices,
//!    one backing device per export at most, swap mode's `mem_limit`s and
//!    its resident reserve);
//! 2. keeps the C heap to one arena; in swap mode raises the kernel
//!    settings it needs (`sysctl`: put back when the server stops) and
//!    enters its first half (the heap that never shrinks, the I/O-flusher
//!    flag the stores' threads inherit, `oom_score_adj`);
//! 3. makes every export given at start with its [`SpecFactory`] (the one
//!    that also makes its store again on `disksize`, `hot_add` and after a
//!    `reset`), uninitialised ones as settings only, and starts their
//!    policies;
//! 4. with ublk, makes a `/dev/ublkbN` per initialised export (after
//!    removing those a killed server left);
//! 5. in swap mode, locks the process's memory (once the stores' tables
//!    and the queues' buffers exist), populates and locks the reserve's
//!    resident part, and runs each ublk device's I/O path once (warm-up),
//!    all before any device is offered;
//! 6. with NBD, binds the listener (or takes the one systemd gave);
//! 7. binds the control socket and the metrics endpoint, starts the
//!    idle-memory trimmer (not in swap mode), announces itself in the log
//!    and, last, writes the PID file.
//!
//! [`Server::shutdown`] goes down in order: the front end first (no new
//! NBD clients, requests in flight finish; ublk devices stopped and
//! deleted), then metrics and control, the trimmer, the NBD threads, then
//! the PID file, and the default socket directory if this server used it
//! and it is empty; last, the kernel settings swap mode raised are put
//! back. Flags, logging and signals are the binary's: this module
//! neither parses arguments nor waits for a signal.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use log::{error, info, warn};
use nbd::{Config, ExportError, InheritedListener, ListenAddr};
use recipe::{FactoryError, PolicyFlags, SpecFactory, StoreFactory, StoreSpec};

use crate::ctl_error::CtlError;
use crate::ctl_socket::{claim_socket_path, CtlServer};
use crate::metrics::MetricsServer;
use crate::paths::{ctl_path_for, default_dir, default_socket, ensure_private_dir, tcp_ctl_path};
use crate::registry::{Registry, Served};
use crate::swap::{self, SwapError};
use crate::sysctl::{Raises, SysctlError};
use crate::trim::Trimmer;
use crate::ublk_exports::{self, UblkExports, UblkSettings};

/// One export to make at start.
#[derive(Clone, Debug)]
pub struct ExportConfig {
    /// Its name.
    pub name: String,
    /// Its disk size in bytes; 0 for an uninitialised export.
    pub size: u64,
    /// Served read-only.
    pub read_only: bool,
    /// Its store configuration.
    pub spec: StoreSpec,
    /// Its `backing_dev`, if any.
    pub backing_dev: Option<PathBuf>,
}

/// The settings every export's stores get, besides their configuration.
#[derive(Clone, Debug, Default)]
pub struct StoreSettings {
    /// The largest disk a store is made with, in bytes.
    pub max_disksize: u64,
    /// `--recomp-algorithm` values.
    pub recomp: Vec<zram::RecompAlgorithm>,
    /// The timed policy and the memory-aware rule.
    pub policy: PolicyFlags,
    /// `--writeback-batch-size`.
    pub writeback_batch: Option<u64>,
    /// `--writeback-compressed`.
    pub writeback_compressed: bool,
}

/// Where the NBD server listens.
#[derive(Debug)]
pub enum Listen {
    /// The socket systemd passed (socket activation).
    Inherited(InheritedListener),
    /// A TCP address.
    Tcp(SocketAddr),
    /// A Unix socket; `None`: the default path, in the private directory.
    Unix(Option<PathBuf>),
}

/// The NBD front end.
#[derive(Debug)]
pub struct NbdFront {
    /// Where it listens.
    pub listen: Listen,
    /// The server's configuration; the in-flight bounds and the connection
    /// threads are set from the fields below and swap mode.
    pub config: Config,
    /// `--inflight-per-conn` (default: the server's, or swap mode's).
    pub inflight_per_conn: Option<u64>,
    /// `--inflight-total` (default: the server's, or swap mode's).
    pub inflight_total: Option<u64>,
}

/// The ublk front end.
#[derive(Clone, Copy, Debug, Default)]
pub struct UblkFront {
    /// Queues per device (default: one per CPU, at most 64).
    pub queues: Option<u16>,
    /// Requests in flight per queue (default: by mode).
    pub depth: Option<u16>,
}

/// How the exports are served.
#[derive(Debug)]
pub enum Front {
    /// Over NBD.
    Nbd(NbdFront),
    /// As ublk block devices.
    Ublk(UblkFront),
}

/// Everything [`Server::start`] needs.
#[derive(Debug)]
pub struct ServerConfig {
    /// The exports given at start, in order; the first one's factory is
    /// also `hot_add`'s.
    pub exports: Vec<ExportConfig>,
    /// What every store gets.
    pub store: StoreSettings,
    /// Swap mode (see the `swap` module).
    pub swap: bool,
    /// Swap mode's resident reserve in bytes (`--swap-reserve`; default
    /// `swap::default_resident`).
    pub swap_reserve: Option<u64>,
    /// Seconds the reserve may stay used up, writes failing, before swap
    /// mode asks the OOM killer to run (`--swap-oom-after`; default 10; 0:
    /// never).
    pub swap_oom_after: Option<u32>,
    /// The front end.
    pub front: Front,
    /// The control socket (default: beside the NBD socket, or in the
    /// private directory).
    pub ctl_socket: Option<PathBuf>,
    /// The Prometheus endpoint's address.
    pub metrics: Option<SocketAddr>,
    /// Whether non-loopback addresses are allowed (for the metrics).
    pub allow_remote: bool,
    /// Where to write the PID once everything is up.
    pub pid_file: Option<PathBuf>,
}

/// Why a server did not start, or did not stop cleanly.
#[derive(Debug)]
pub enum ServeError {
    /// A non-loopback TCP address without remote clients allowed.
    NotLoopback(SocketAddr),
    /// Remote clients allowed without TLS required, nor plaintext allowed.
    RemoteWithoutTls(SocketAddr),
    /// `--inflight-total` is below `--inflight-per-conn` plus 1 MiB.
    InflightTotal {
        /// The total bound.
        total: u64,
        /// The per-connection bound.
        per_conn: u64,
    },
    /// Swap mode without a `mem_limit` for this export.
    SwapNeedsMemLimit(String),
    /// A resident reserve larger than the reserve the `mem_limit`s make.
    SwapReserve {
        /// The resident reserve asked for.
        wanted: u64,
        /// The reserve: the `mem_limit`s and the pieces of each store.
        limit: u64,
    },
    /// A kernel setting swap mode needs could not be made.
    Sysctl(SysctlError),
    /// The exports' names make no NBD export table.
    Exports(ExportError),
    /// A store factory refused (a store, a setting or a policy).
    Store(FactoryError),
    /// Swap mode could not be entered.
    Swap(SwapError),
    /// The ublk front end could not start.
    Ublk(io::Error),
    /// An export's ublk device could not be made.
    UblkDevice(CtlError),
    /// Swap mode's warm-up of the ublk devices' I/O path failed.
    WarmUp(io::Error),
    /// A socket or file the server needs: what it is, and the error.
    Io {
        /// What was being done (`cannot listen on ADDR`, `PID file PATH`;
        /// empty where the error names it).
        what: String,
        /// The error.
        error: io::Error,
    },
    /// Devices that did not stop cleanly at shutdown.
    UblkStop(usize),
}

impl ServeError {
    /// Whether the configuration is at fault (a usage error) rather than
    /// the system.
    pub fn is_usage(&self) -> bool {
        match self {
            ServeError::InflightTotal { .. }
            | ServeError::SwapNeedsMemLimit(_)
            | ServeError::SwapReserve { .. }
            | ServeError::Exports(_) => true,
            ServeError::Store(e) => e.is_usage(),
            _ => false,
        }
    }

    fn io(what: impl Into<String>) -> impl FnOnce(io::Error) -> ServeError {
        let what = what.into();
        move |error| ServeError::Io { what, error }
    }
}

impl fmt::Display for ServeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServeError::NotLoopback(addr) => write!(
                f,
                "refusing to listen on {addr}: not a loopback address (pass --allow-remote to \
                 serve remote clients)"
            ),
            ServeError::RemoteWithoutTls(addr) => write!(
                f,
                "--tcp {addr} serves remote clients: use --tls require with --tls-certificates \
                 DIR, or --insecure to serve them without TLS"
            ),
            ServeError::InflightTotal { total, per_conn } => write!(
                f,
                "--inflight-total {total} must be at least --inflight-per-conn ({per_conn}) plus 1M"
            ),
            ServeError::SwapNeedsMemLimit(name) => write!(
                f,
                "--swap needs --mem-limit: the pages of export {name:?} come from a reserve \
                 locked at start, sized by it"
            ),
            ServeError::SwapReserve { wanted, limit } => write!(
                f,
                "--swap-reserve {wanted} is more than the reserve the exports' mem_limit make \
                 ({limit} bytes: each mem_limit plus 4 MiB)"
            ),
            ServeError::Sysctl(e) => write!(f, "--swap: {e}"),
            ServeError::Exports(e) => write!(f, "{e}"),
            ServeError::Store(e) => write!(f, "{e}"),
            ServeError::Swap(e) => write!(f, "--swap: {e}"),
            ServeError::Ublk(e) => write!(f, "--ublk: {e}"),
            ServeError::UblkDevice(e) => write!(f, "--ublk: {e}"),
            ServeError::WarmUp(e) => write!(f, "--swap: {e}"),
            ServeError::Io { what, error } if what.is_empty() => write!(f, "{error}"),
            ServeError::Io { what, error } => write!(f, "{what}: {error}"),
            ServeError::UblkStop(n) => write!(f, "{n} ublk device(s) did not stop cleanly"),
        }
    }
}

impl std::error::Error for ServeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ServeError::Exports(e) => Some(e),
            ServeError::Store(e) => Some(e),
            ServeError::Swap(e) => Some(e),
            ServeError::Sysctl(e) => Some(e),
            ServeError::Ublk(e) | ServeError::WarmUp(e) | ServeError::Io { error: e, .. } => {
                Some(e)
            }
            _ => None,
        }
    }
}

impl From<FactoryError> for ServeError {
    fn from(e: FactoryError) -> ServeError {
        ServeError::Store(e)
    }
}

impl From<SwapError> for ServeError {
    fn from(e: SwapError) -> ServeError {
        ServeError::Swap(e)
    }
}

/// A server that is up: its exports, front end, control socket and
/// metrics.
pub struct Server {
    registry: Arc<Registry>,
    nbd: Option<Arc<nbd::Server>>,
    ctl: CtlServer,
    metrics: Option<MetricsServer>,
    trimmer: Option<Trimmer>,
    pid_file: Option<PathBuf>,
    /// The default directory, when this server's sockets are in it: removed
    /// at shutdown if nothing else is left in it.
    own_dir: Option<PathBuf>,
    /// The kernel settings swap mode raised: put back when dropped, last.
    sysctls: Option<Raises>,
}

impl fmt::Debug for Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Server")
            .field("exports", &self.registry.names())
            .field(
                "nbd",
                &self.nbd.as_ref().map(|s| s.local_addr().to_string()),
            )
            .field("pid_file", &self.pid_file)
            .finish()
    }
}

impl Server {
    /// Starts a server as the module documentation says, in that order.
    /// On an error nothing already started is stopped: the caller exits.
    pub fn start(config: ServerConfig) -> Result<Server, ServeError> {
        let ServerConfig {
            exports,
            store,
            swap,
            front,
            ctl_socket,
            metrics,
            allow_remote,
            pid_file,
            swap_reserve,
            swap_oom_after,
        } = config;
        let nbd_config = match &front {
            Front::Nbd(n) => {
                check_remote(n)?;
                Some(inflight_config(n, swap)?)
            }
            Front::Ublk(_) => None,
        };
        store.policy.check(
            !store.recomp.is_empty(),
            exports.iter().any(|e| e.backing_dev.is_some()),
        )?;
        crate::trim::one_heap_arena();
        let registry = Arc::new(Registry::default());
        // Swap mode's first half (the kernel settings, the heap, the
        // I/O-flusher flag that the stores' threads inherit); the second
        // locks memory once they exist. Dropped on an error below, the
        // settings are put back.
        let mut sysctls = None;
        let swap_plan = if swap {
            let mut limits = Vec::new();
            for e in &exports {
                if e.spec.mem_limit == 0 {
                    return Err(ServeError::SwapNeedsMemLimit(e.name.clone()));
                }
                limits.push(e.spec.mem_limit);
            }
            // What the front end may have in flight at once: NBD's
            // in-flight bound, or every ublk queue full of the largest
            // requests.
            let burst = match (&front, &nbd_config) {
                (_, Some(c)) => c.inflight_total,
                (Front::Ublk(u), None) => {
                    let s = ublk_settings(u, true);
                    u64::from(s.queues) * u64::from(s.depth) * u64::from(s.max_io_bytes)
                }
                (Front::Nbd(_), None) => 0,
            };
            let reserve = swap::reserve_for(&limits);
            let resident = swap_reserve.unwrap_or_else(|| swap::default_resident(&limits, burst));
            if resident > reserve {
                return Err(ServeError::SwapReserve {
                    wanted: resident,
                    limit: reserve,
                });
            }
            let raises = sysctls.insert(Raises::default());
            let min_free_was = raises
                .raise("vm.min_free_kbytes", swap::ADVISED_MIN_FREE_KBYTES)
                .map_err(ServeError::Sysctl)?;
            // The heap is grown ahead for NBD's request buffers; ublk's are
            // its queues' own mappings.
            let total = nbd_config.as_ref().map_or(0, |c| c.inflight_total);
            let heap = swap::enter(total, limits.iter().sum())?;
            Some((reserve, resident, heap, min_free_was))
        } else {
            None
        };
        for (i, export) in exports.iter().enumerate() {
            make_export(&registry, &store, export, i == 0)?;
        }
        // The devices' queue threads and buffers exist before swap mode
        // locks the process's memory (and inherit the I/O-flusher flag).
        let ublk = match &front {
            Front::Ublk(u) => Some(start_ublk(u, swap, &registry)?),
            Front::Nbd(_) => None,
        };
        if let Some((reserve, resident, heap, min_free_was)) = swap_plan {
            // ublk runs each device's I/O path once below, so its code is
            // locked as touched; NBD's is locked whole.
            let oom_after = match swap_oom_after {
                None => Some(swap::DEFAULT_OOM_AFTER),
                Some(0) => None,
                Some(s) => Some(std::time::Duration::from_secs(u64::from(s))),
            };
            let mode = swap::lock(
                reserve,
                resident,
                heap,
                ublk.is_some(),
                min_free_was,
                oom_after,
                failed_writes(Arc::downgrade(&registry)),
            )?;
            if let Some(front) = &ublk {
                front.warm_up_all().map_err(ServeError::WarmUp)?;
            }
            info!("swap mode: {mode}");
            if let Front::Nbd(NbdFront {
                listen: Listen::Tcp(_),
                ..
            }) = &front
            {
                warn!(
                    "--swap over TCP: a kernel in this machine swapping onto this server \
                     stalls more often over loopback TCP than over the Unix socket \
                     (--socket, nbd-client -u; docs/serve.md has the runs)"
                );
            }
            registry.set_swap_mode(mode);
        }
        let (nbd, ctl_path, announced) = match (front, nbd_config) {
            (Front::Nbd(n), Some(config)) => {
                let (server, ctl) = start_nbd(n.listen, config, ctl_socket, &registry)?;
                let announced = format!("NBD on {}", server.local_addr());
                (Some(server), ctl, announced)
            }
            _ => {
                let ctl = match ctl_socket {
                    Some(p) => p,
                    None => {
                        private_dir()?;
                        ctl_path_for(&default_socket())
                    }
                };
                let devices: Vec<String> = registry
                    .names()
                    .iter()
                    .filter_map(|n| registry.ublk_device(n))
                    .map(|p| p.display().to_string())
                    .collect();
                (None, ctl, format!("ublk {}", devices.join(" ")))
            }
        };
        let own_dir = Some(default_dir()).filter(|d| ctl_path.parent() == Some(d.as_path()));
        let ctl = CtlServer::bind(&ctl_path, registry.clone()).map_err(ServeError::io(format!(
            "cannot listen on the control socket {}",
            ctl_path.display()
        )))?;
        let metrics = match metrics {
            Some(a) => Some(
                MetricsServer::bind(a, allow_remote, registry.clone())
                    .map_err(ServeError::io(format!("metrics on {a}")))?,
            ),
            None => None,
        };
        // Swap mode keeps every page it has: nothing to trim.
        let trimmer = if swap {
            None
        } else {
            Some(
                Trimmer::start(registry.clone())
                    .map_err(ServeError::io("cannot start a thread"))?,
            )
        };
        // In swap mode, the reserve as it is now: its resident part locked
        // before any device was offered.
        let reserve = match pages::reserve::stats() {
            Some(r) if swap => format!(
                ", swap reserve resident={} locked={} ready={}",
                r.resident, r.locked, r.ready
            ),
            _ => String::new(),
        };
        info!(
            "ready: {announced}, control on {}, {} export(s), pid {}{reserve}",
            ctl_path.display(),
            registry.len(),
            std::process::id()
        );
        // Last: whoever waits for the PID file finds everything up.
        if let Some(p) = &pid_file {
            write_pid_file(p).map_err(ServeError::io(format!("PID file {}", p.display())))?;
        }
        Ok(Server {
            registry,
            nbd,
            ctl,
            metrics,
            trimmer,
            pid_file,
            own_dir,
            sysctls,
        })
    }

    /// The exports.
    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// Stops everything in order (see the module documentation). `Err` if
    /// a ublk device did not stop cleanly; the rest is stopped all the same.
    pub fn shutdown(self) -> Result<(), ServeError> {
        // New clients are refused and requests in flight finish first; ublk
        // devices are stopped (their requests drain) and deleted.
        if let Some(server) = &self.nbd {
            server.shutdown_handle().shutdown();
        }
        let mut result = Ok(());
        if let Some(front) = self.registry.ublk() {
            let failed = front.stop_all();
            if failed > 0 {
                result = Err(ServeError::UblkStop(failed));
            }
        }
        if let Some(m) = self.metrics {
            m.shutdown();
        }
        self.ctl.shutdown();
        if let Some(t) = self.trimmer {
            t.stop();
        }
        // The policy threads stop with their exports, when the registry goes.
        if let Some(server) = self.nbd {
            match Arc::try_unwrap(server) {
                Ok(s) => s.wait(),
                Err(_) => error!("the NBD server is still referenced; leaving it to exit"),
            }
        }
        if let Some(p) = &self.pid_file {
            remove_pid_file(p);
        }
        if let Some(dir) = &self.own_dir {
            // Only an empty directory goes: another server's sockets keep it.
            let _ = std::fs::remove_dir(dir);
        }
        // No device is served any more: the kernel settings go back.
        drop(self.sysctls);
        info!("stopped");
        result
    }
}

/// Makes one export given at start into `registry`: its factory, then its
/// store (by the factory, as every store is made) or, for size 0, its
/// settings only. The first export's factory is also `hot_add`'s.
fn make_export(
    registry: &Registry,
    store: &StoreSettings,
    export: &ExportConfig,
    first: bool,
) -> Result<(), ServeError> {
    let (name, size, read_only, spec) =
        (&export.name, &export.size, &export.read_only, &export.spec);
    let factory = Arc::new(SpecFactory {
        spec: spec.clone(),
        max_disksize: store.max_disksize,
        recomp: store.recomp.clone(),
        policy: store.policy.clone(),
        writeback_batch: store.writeback_batch,
        writeback_compressed: store.writeback_compressed,
    });
    if *read_only {
        info!("export {name:?}: read-only");
    }
    if first {
        registry.set_factory(factory.clone());
    }
    let mut settings = factory.defaults();
    settings.backing_dev = export.backing_dev.clone();
    if *size == 0 {
        info!("export {name:?}: uninitialised, {}", spec.label());
        registry.push_uninitialised(name, settings, Some(factory), *read_only);
        return Ok(());
    }
    let (made, label) = factory.make(&settings, *size)?;
    if let Some(path) = &export.backing_dev {
        info!("export {name:?}: backing_dev {}", path.display());
    }
    info!(
        "export {name:?}: {} bytes, {label}{}",
        made.disk_size(),
        if spec.mem_limit > 0 {
            format!(", mem_limit {}", spec.mem_limit)
        } else {
            String::new()
        }
    );
    let made = Arc::new(made);
    let policy = factory.start_policy(name, &made)?;
    registry.push(
        Served {
            name: name.clone(),
            label,
            store: made,
            policy,
        },
        Some(factory),
        *read_only,
    );
    Ok(())
}

/// Refuses a non-loopback TCP address the configuration does not allow:
/// remote clients need `allow_remote`, and TLS required unless `insecure`.
fn check_remote(front: &NbdFront) -> Result<(), ServeError> {
    let Listen::Tcp(addr) = front.listen else {
        return Ok(());
    };
    if addr.ip().is_loopback() {
        return Ok(());
    }
    if !front.config.allow_remote {
        return Err(ServeError::NotLoopback(addr));
    }
    let required = front
        .config
        .tls
        .as_ref()
        .is_some_and(|t| t.mode() == nbd::TlsMode::Require);
    if !required && !front.config.insecure {
        return Err(ServeError::RemoteWithoutTls(addr));
    }
    Ok(())
}

/// The NBD configuration with the in-flight bounds (the largest request
/// never exceeds a connection's bound, and the server's total must hold
/// one connection) and swap mode's connection threads.
fn inflight_config(front: &NbdFront, swap: bool) -> Result<Config, ServeError> {
    let config = front.config.clone();
    // Swap mode's request buffers come from a heap grown ahead: smaller
    // bounds unless given.
    let (conn_default, total_default) = if swap {
        (swap::INFLIGHT_PER_CONN, swap::INFLIGHT_TOTAL)
    } else {
        (config.inflight_bytes, config.inflight_total)
    };
    let per_conn = front.inflight_per_conn.unwrap_or(conn_default);
    let total = front.inflight_total.unwrap_or(total_default);
    if total < per_conn + (1 << 20) {
        return Err(ServeError::InflightTotal { total, per_conn });
    }
    // Swap mode's connection threads start after its memory is locked:
    // each populates and locks its own (smaller) stack before it serves.
    let (conn_thread_stack, on_conn_thread_start) = if swap {
        (
            Some(swap::IO_THREAD_STACK_BYTES),
            Some(swap::lock_own_stack as fn()),
        )
    } else {
        (config.conn_thread_stack, config.on_conn_thread_start)
    };
    Ok(Config {
        conn_thread_stack,
        on_conn_thread_start,
        max_request: config.max_request.min(per_conn as u32),
        inflight_bytes: per_conn,
        inflight_total: total,
        ..config
    })
}

/// Makes the default directory, private to this user.
fn private_dir() -> Result<(), ServeError> {
    ensure_private_dir(&default_dir()).map_err(ServeError::io(""))
}

/// The stores' failed writes so far, for swap mode's stall watch; 0 once
/// the registry is gone.
fn failed_writes(registry: std::sync::Weak<Registry>) -> impl Fn() -> u64 + Send + 'static {
    move || {
        registry.upgrade().map_or(0, |r| {
            r.served()
                .iter()
                .map(|s| s.store.io_stat().failed_writes)
                .sum()
        })
    }
}

/// The ublk devices' queues, depth and largest request.
fn ublk_settings(front: &UblkFront, swap: bool) -> UblkSettings {
    let queues = front.queues.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, |n| n.get().min(64) as u16)
    });
    // Swap mode locks every buffer from the start: fewer, smaller ones.
    let (depth, max_io_bytes) = if swap {
        (ublk_exports::SWAP_DEPTH, ublk_exports::SWAP_MAX_IO_BYTES)
    } else {
        (ublk_exports::DEFAULT_DEPTH, ublk_exports::MAX_IO_BYTES)
    };
    UblkSettings {
        queues,
        depth: front.depth.unwrap_or(depth),
        max_io_bytes,
    }
}

/// Makes a ublk device for each initialised export (after deleting those
/// a killed server left).
fn start_ublk(
    front: &UblkFront,
    swap: bool,
    registry: &Arc<Registry>,
) -> Result<Arc<UblkExports>, ServeError> {
    let ublk = UblkExports::new(ublk_settings(front, swap)).map_err(ServeError::Ublk)?;
    for gone in ublk_exports::remove_abandoned().map_err(ServeError::Ublk)? {
        info!(
            "removed /dev/ublkc{}, left by a server that is gone",
            gone.id
        );
    }
    let ublk = Arc::new(ublk);
    registry
        .attach_ublk(ublk.clone())
        .map_err(ServeError::UblkDevice)?;
    Ok(ublk)
}

/// Binds the NBD listener (or takes systemd's) over the registry's exports,
/// with the control socket's path that goes with it.
fn start_nbd(
    listen: Listen,
    config: Config,
    ctl_socket: Option<PathBuf>,
    registry: &Arc<Registry>,
) -> Result<(Arc<nbd::Server>, PathBuf), ServeError> {
    let exports = registry.nbd_exports().map_err(ServeError::Exports)?;
    let ctl_for = |addr: &ListenAddr| -> Result<PathBuf, ServeError> {
        Ok(match (&ctl_socket, addr) {
            (Some(p), _) => p.clone(),
            (None, ListenAddr::Unix(p)) => ctl_path_for(p),
            (None, ListenAddr::Tcp(a)) => {
                private_dir()?;
                tcp_ctl_path(a.port())
            }
        })
    };
    let (server, ctl) = match listen {
        Listen::Inherited(l) => {
            let addr = match &l {
                InheritedListener::Unix(u) => u
                    .local_addr()
                    .ok()
                    .and_then(|a| a.as_pathname().map(|p| ListenAddr::Unix(p.to_path_buf()))),
                InheritedListener::Tcp(t) => t.local_addr().ok().map(ListenAddr::Tcp),
            }
            .ok_or_else(|| ServeError::Io {
                what: String::new(),
                error: io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "the socket from systemd has no address",
                ),
            })?;
            let ctl = ctl_for(&addr)?;
            let server = nbd::Server::from_listener(l, exports, config).map_err(ServeError::io(
                format!("cannot serve on the socket from systemd ({addr})"),
            ))?;
            (server, ctl)
        }
        Listen::Tcp(tcp) => {
            let addr = ListenAddr::Tcp(tcp);
            let ctl = ctl_for(&addr)?;
            let server = nbd::Server::bind(addr.clone(), exports, config)
                .map_err(ServeError::io(format!("cannot listen on {addr}")))?;
            (server, ctl)
        }
        Listen::Unix(path) => {
            let path = match path {
                Some(p) => p,
                None => {
                    private_dir()?;
                    default_socket()
                }
            };
            claim_socket_path(&path).map_err(ServeError::io(""))?;
            let addr = ListenAddr::Unix(path);
            let ctl = ctl_for(&addr)?;
            let server = nbd::Server::bind(addr.clone(), exports, config)
                .map_err(ServeError::io(format!("cannot listen on {addr}")))?;
            (server, ctl)
        }
    };
    let server = Arc::new(server);
    registry.attach(&server);
    Ok((server, ctl))
}

/// Writes the PID file (via a temporary file and a rename, so readers never
/// see it half written).
fn write_pid_file(path: &Path) -> io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    std::fs::write(&tmp, format!("{}\n", std::process::id()))?;
    std::fs::rename(&tmp, path)
}

/// Removes the PID file if it is still ours.
fn remove_pid_file(path: &Path) {
    let ours = std::fs::read_to_string(path)
        .map(|s| s.trim() == std::process::id().to_string())
        .unwrap_or(false);
    if ours {
        if let Err(e) = std::fs::remove_file(path) {
            error!("cannot remove the PID file {}: {e}", path.display());
        }
    }
}
