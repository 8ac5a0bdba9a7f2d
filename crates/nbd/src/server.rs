//! The server: a listener, a thread per connection, and a clean shutdown.
//!
//! This module owns the threads. [`Server::bind`] binds a Unix socket or a
//! TCP address and starts an *acceptor* thread; each accepted client gets its
//! own connection thread (which starts its own request workers, see
//! `transmission`). A [`ShutdownHandle`] stops the server from any thread:
//! the acceptor stops accepting and removes the Unix socket file, shuts the
//! reading side of every connection so no new requests are read, lets
//! in-flight requests finish and send their replies for up to
//! `Config::shutdown_grace`, then closes whatever is left and joins every
//! thread. It knows nothing of the protocol beyond handing each stream to
//! `connection::run`.
//!
//! Admission: connections in the handshake and connections past it are
//! counted apart (`Config::max_handshakes`, `Config::max_connections`), so
//! clients that stall in the handshake cannot lock out clients that finished
//! it. A new client that finds the handshake slots full closes the client
//! that has negotiated longest; a *reaper* thread closes every client still
//! negotiating `Config::handshake_timeout` after it arrived. Each refusal is
//! logged with its reason.
//!
//! Memory: one `ServerBudget` (`Config::inflight_total`) is shared by every
//! connection for its payload buffers; [`Server::budget_stats`] reads it.
//!
//! Exports come and go while the server runs ([`Server::add_export`],
//! [`Server::replace_export`], [`Server::remove_export`]): each connection's
//! handshake looks names up in a copy of the table taken when it arrived,
//! and admission checks that the export it chose is still the table's, so
//! a client never reaches an export removed or replaced meanwhile. An export
//! with clients connected to it is never removed or replaced.
//!
//! Locks: `Shared::conns` (the registry of open streams, their phase and
//! export, used to count, shed and shut them down) and `Shared::exports`
//! (the export table). `exports` is taken alone (to copy it) or inside
//! `conns` (admission, removal, replacement), never the other way round;
//! neither is held while taking any other lock. Shutting a socket down under
//! `conns` does not block.

use std::collections::HashMap;
use std::io;
use std::net::{Shutdown, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use log::{error, info, warn};

use crate::budget::{BudgetStats, ServerBudget};
use crate::connection::{self, SessionCounters, SessionStats};
use crate::export::{Config, Export, ExportError, Exports};
use crate::handshake::Start;
use crate::socket::{self, AcceptStopper, InheritedListener, ListenAddr, Listener, Stream};
use crate::tls;

/// Where an open connection is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// In the handshake since this instant.
    Negotiating(Instant),
    /// In the transmission phase.
    Served,
    /// Closed by the server (shed, timed out or refused); its thread is
    /// ending.
    Closing,
}

/// One open connection.
struct Conn {
    stream: Arc<Stream>,
    phase: Phase,
    /// The export it was admitted to (set with `Phase::Served`).
    export: Option<String>,
}

/// State shared by the acceptor, the connections and shutdown handles.
struct Shared {
    /// The export table; see the module's notes on locks.
    exports: RwLock<Exports>,
    config: Config,
    /// Payload memory over all connections.
    budget: ServerBudget,
    addr: ListenAddr,
    /// Stops the listener at shutdown; `None` for an inherited listener,
    /// whose acceptor is woken by connecting to it.
    stopper: Option<AcceptStopper>,
    stopping: AtomicBool,
    /// Open connections by id and their phase (streams are thread-safe
    /// themselves).
    conns: Mutex<HashMap<u64, Conn>>,
    accepted: AtomicU64,
    sessions: SessionCounters,
}

impl Shared {
    fn conns(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Conn>> {
        self.conns.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn exports(&self) -> std::sync::RwLockReadGuard<'_, Exports> {
        self.exports.read().unwrap_or_else(|e| e.into_inner())
    }

    fn exports_mut(&self) -> std::sync::RwLockWriteGuard<'_, Exports> {
        self.exports.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Connections in the transmission phase on the export called `name`.
    fn served_on(conns: &HashMap<u64, Conn>, name: &str) -> usize {
        conns
            .values()
            .filter(|c| c.phase == Phase::Served && c.export.as_deref() == Some(name))
            .count()
    }

    /// Runs `change` on the export table unless clients are connected to
    /// the export called `name`.
    fn change_unless_busy<T>(
        &self,
        name: &str,
        change: impl FnOnce(&mut Exports) -> Result<T, ExportError>,
    ) -> Result<T, ExportError> {
        let conns = self.conns();
        let connections = Shared::served_on(&conns, name);
        if connections > 0 {
            return Err(ExportError::Busy {
                name: name.to_string(),
                connections,
            });
        }
        let result = change(&mut self.exports_mut());
        drop(conns);
        result
    }

    /// Connections in the transmission phase and connections negotiating.
    fn counts(conns: &HashMap<u64, Conn>) -> (usize, usize) {
        conns
            .values()
            .fold((0, 0), |(served, neg), c| match c.phase {
                Phase::Served => (served + 1, neg),
                Phase::Negotiating(_) => (served, neg + 1),
                Phase::Closing => (served, neg),
            })
    }

    /// Moves connection `id` from the handshake to the transmission phase on
    /// `export` if fewer than `max_connections` are served, nothing closed
    /// it, and `export` is still the table's (not removed or replaced since
    /// the connection copied the table).
    fn admit(&self, id: u64, export: &Arc<Export>) -> Result<(), String> {
        let mut conns = self.conns();
        let (served, _) = Shared::counts(&conns);
        let Some(c) = conns.get_mut(&id) else {
            return Err("the connection was closed by the server".into());
        };
        let why = if !matches!(c.phase, Phase::Negotiating(_)) {
            "the connection was closed by the server".to_string()
        } else if served >= self.config.max_connections {
            format!(
                "{} connections are served already (the limit)",
                self.config.max_connections
            )
        } else if !self
            .exports()
            .exact(export.name())
            .is_some_and(|e| Arc::ptr_eq(e, export))
        {
            format!(
                "export {:?} was removed or changed during the handshake",
                export.name()
            )
        } else {
            c.phase = Phase::Served;
            c.export = Some(export.name().to_string());
            return Ok(());
        };
        c.phase = Phase::Closing;
        Err(why)
    }

    /// Closes every connection that has negotiated for longer than the
    /// handshake timeout.
    fn reap(&self, now: Instant) {
        let limit = self.config.handshake_timeout;
        for (id, c) in self.conns().iter_mut() {
            if let Phase::Negotiating(since) = c.phase {
                if now.duration_since(since) >= limit {
                    warn!("conn {id}: handshake not finished in {limit:?}: closed");
                    c.phase = Phase::Closing;
                    c.stream.shutdown(Shutdown::Both);
                }
            }
        }
    }

    /// Closes the connection that has negotiated longest, to make room for a
    /// new one.
    fn shed_oldest_negotiating(&self, newcomer: &str) {
        let mut conns = self.conns();
        let oldest = conns
            .iter_mut()
            .filter_map(|(id, c)| match c.phase {
                Phase::Negotiating(since) => Some((since, *id, c)),
                _ => None,
            })
            .min_by_key(|(since, id, _)| (*since, *id));
        if let Some((since, id, c)) = oldest {
            warn!(
                "conn {id}: closed after {:?} in the handshake to admit a client from {newcomer} \
                 ({} connections negotiating)",
                since.elapsed(),
                self.config.max_handshakes
            );
            c.phase = Phase::Closing;
            c.stream.shutdown(Shutdown::Both);
        }
    }
}

/// A running NBD server. Dropping it shuts it down (see
/// [`Server::shutdown`]).
pub struct Server {
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

/// Stops a server from any thread (for example a signal handler's).
#[derive(Clone)]
pub struct ShutdownHandle {
    shared: Arc<Shared>,
}

impl ShutdownHandle {
    /// Asks the server to stop; returns at once. Calling it again does
    /// nothing.
    pub fn shutdown(&self) {
        if self.shared.stopping.swap(true, Ordering::SeqCst) {
            return;
        }
        info!("nbd: shutting down the server on {}", self.shared.addr);
        let woken = match &self.shared.stopper {
            Some(stopper) => stopper.stop(),
            None => socket::wake(&self.shared.addr),
        };
        if let Err(e) = woken {
            error!("nbd: cannot wake the acceptor on {}: {e}", self.shared.addr);
        }
    }

    /// Whether a shutdown was asked for.
    pub fn is_stopping(&self) -> bool {
        self.shared.stopping.load(Ordering::SeqCst)
    }
}

impl Server {
    /// Binds `addr` and starts serving `exports`.
    ///
    /// Fails if `exports` is empty, if the Unix socket path exists, or if a
    /// TCP address is not loopback and `config.allow_remote` is false, or
    /// is not loopback, TLS is not required and `config.insecure` is false.
    pub fn bind(addr: ListenAddr, exports: Exports, config: Config) -> io::Result<Server> {
        if exports.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a server needs at least one export",
            ));
        }
        if let ListenAddr::Tcp(a) = &addr {
            config.check_listen_addr(a)?;
        }
        let (listener, bound) = Listener::bind(&addr)?;
        let stopper = listener.stopper()?;
        Server::start(listener, bound, exports, config, Some(stopper))
    }

    /// Starts serving `exports` on a listener made by someone else (a
    /// socket-activated service's, from systemd). Its Unix socket file, if
    /// any, is left in place at exit.
    pub fn from_listener(
        inherited: InheritedListener,
        exports: Exports,
        config: Config,
    ) -> io::Result<Server> {
        if exports.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a server needs at least one export",
            ));
        }
        let (listener, bound) = Listener::inherit(inherited)?;
        if let ListenAddr::Tcp(a) = &bound {
            // An inherited TCP socket meets the same rule as one bound here.
            config.check_listen_addr(a)?;
        }
        Server::start(listener, bound, exports, config, None)
    }

    fn start(
        listener: Listener,
        bound: ListenAddr,
        exports: Exports,
        config: Config,
        stopper: Option<AcceptStopper>,
    ) -> io::Result<Server> {
        let shared = Arc::new(Shared {
            stopper,
            exports: RwLock::new(exports),
            budget: ServerBudget::new(config.total_budget()),
            config,
            addr: bound,
            stopping: AtomicBool::new(false),
            conns: Mutex::new(HashMap::new()),
            accepted: AtomicU64::new(0),
            sessions: SessionCounters::default(),
        });
        let s = shared.clone();
        let acceptor = thread::Builder::new()
            .name("nbd-accept".into())
            .spawn(move || accept_loop(listener, s))?;
        info!(
            "nbd: listening on {} with exports {:?}",
            shared.addr,
            shared
                .exports()
                .iter()
                .map(|e| e.name())
                .collect::<Vec<_>>()
        );
        Ok(Server {
            shared,
            acceptor: Some(acceptor),
        })
    }

    /// Serves `exports` on a new Unix socket at `path` with default settings.
    pub fn bind_unix(path: impl Into<PathBuf>, exports: Exports) -> io::Result<Server> {
        Server::bind(ListenAddr::Unix(path.into()), exports, Config::default())
    }

    /// Serves `exports` on a loopback TCP address with default settings
    /// ([`DEFAULT_TCP_ADDR`](crate::DEFAULT_TCP_ADDR) is the usual one).
    pub fn bind_tcp(addr: SocketAddr, exports: Exports) -> io::Result<Server> {
        Server::bind(ListenAddr::Tcp(addr), exports, Config::default())
    }

    /// The address bound (with the real port if port 0 was asked for).
    pub fn local_addr(&self) -> &ListenAddr {
        &self.shared.addr
    }

    /// Connections open right now (in any phase).
    pub fn connections(&self) -> usize {
        self.shared.conns().len()
    }

    /// Connections in the transmission phase on the export called `name`.
    pub fn export_connections(&self, name: &str) -> usize {
        Shared::served_on(&self.shared.conns(), name)
    }

    /// The export table now (a copy: later changes do not show in it).
    pub fn exports(&self) -> Exports {
        self.shared.exports().clone()
    }

    /// Adds an export while serving; new clients see it at once (checks as
    /// [`Exports::add`]).
    pub fn add_export(&self, export: Export) -> Result<(), ExportError> {
        let name = export.name().to_string();
        self.shared.exports_mut().add(export)?;
        info!("nbd: export {name:?} added");
        Ok(())
    }

    /// Puts `export` in the place of the export of the same name, unless
    /// clients are connected to it ([`ExportError::Busy`]); clients
    /// negotiating with the old one are refused when they choose it.
    pub fn replace_export(&self, export: Export) -> Result<(), ExportError> {
        let name = export.name().to_string();
        self.shared
            .change_unless_busy(&name, |table| table.replace(export))?;
        info!("nbd: export {name:?} replaced");
        Ok(())
    }

    /// Removes the export called exactly `name`, unless clients are
    /// connected to it ([`ExportError::Busy`]).
    pub fn remove_export(&self, name: &str) -> Result<(), ExportError> {
        self.shared
            .change_unless_busy(name, |table| table.remove(name))?;
        info!("nbd: export {name:?} removed");
        Ok(())
    }

    /// Connections in the handshake right now.
    pub fn negotiating(&self) -> usize {
        Shared::counts(&self.shared.conns()).1
    }

    /// The payload memory budget: bound, bytes in use, waits.
    pub fn budget_stats(&self) -> BudgetStats {
        self.shared.budget.stats()
    }

    /// Sessions that reached transmission since the start, by the reply
    /// form they negotiated.
    pub fn session_stats(&self) -> SessionStats {
        self.shared.sessions.stats()
    }

    /// Connections accepted since the start.
    pub fn accepted(&self) -> u64 {
        self.shared.accepted.load(Ordering::Relaxed)
    }

    /// A handle that can stop this server from another thread.
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        ShutdownHandle {
            shared: self.shared.clone(),
        }
    }

    /// Stops accepting, lets in-flight requests finish (for up to
    /// `shutdown_grace`), closes every connection and joins every thread.
    pub fn shutdown(mut self) {
        self.shutdown_handle().shutdown();
        self.join();
    }

    /// Blocks until a [`ShutdownHandle`] stops the server and it has
    /// drained.
    pub fn wait(mut self) {
        self.join();
    }

    fn join(&mut self) {
        if let Some(h) = self.acceptor.take() {
            if h.join().is_err() {
                error!("nbd: the acceptor thread panicked");
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.acceptor.is_some() {
            self.shutdown_handle().shutdown();
            self.join();
        }
    }
}

fn accept_loop(listener: Listener, shared: Arc<Shared>) {
    let reaper = {
        let s = shared.clone();
        thread::Builder::new()
            .name("nbd-reaper".into())
            .spawn(move || reap_loop(&s))
    };
    let reaper = match reaper {
        Ok(h) => Some(h),
        Err(e) => {
            error!("nbd: cannot start the handshake reaper: {e}; handshakes have no time limit");
            None
        }
    };
    let mut handles: Vec<JoinHandle<()>> = Vec::new();
    let mut next_id = 1u64;
    loop {
        let res = listener.accept();
        if shared.stopping.load(Ordering::SeqCst) {
            break;
        }
        let (stream, peer) = match res {
            Ok(x) => x,
            Err(e) => {
                // Out of file descriptors, or the client left before accept:
                // back off a little rather than spin.
                warn!("nbd: accept on {} failed: {e}", shared.addr);
                thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        handles.retain(|h| !h.is_finished());
        let (served, negotiating) = Shared::counts(&shared.conns());
        if served >= shared.config.max_connections {
            warn!("nbd: refusing a client from {peer}: {served} connections served (the limit)");
            continue;
        }
        if negotiating >= shared.config.max_handshakes {
            shared.shed_oldest_negotiating(&peer);
        }
        let id = next_id;
        next_id += 1;
        shared.accepted.fetch_add(1, Ordering::Relaxed);
        let stream = Arc::new(stream);
        shared.conns().insert(
            id,
            Conn {
                stream: stream.clone(),
                phase: Phase::Negotiating(Instant::now()),
                export: None,
            },
        );
        let s = shared.clone();
        let mut builder = thread::Builder::new().name(format!("nbd-conn-{id}"));
        if let Some(bytes) = shared.config.conn_thread_stack {
            builder = builder.stack_size(bytes);
        }
        let spawned = builder.spawn(move || connection_main(s, id, stream, peer));
        match spawned {
            Ok(h) => handles.push(h),
            Err(e) => {
                warn!("nbd: cannot start a thread for conn {id}: {e}");
                shared.conns().remove(&id);
            }
        }
    }
    // New clients are refused from here on (and the socket file goes away).
    drop(listener);
    drain(&shared, handles);
    if let Some(h) = reaper {
        if h.join().is_err() {
            error!("nbd: the handshake reaper panicked");
        }
    }
    info!("nbd: server on {} stopped", shared.addr);
}

/// Closes clients that overstay the handshake, until the server stops.
fn reap_loop(shared: &Shared) {
    // Check a few times per timeout, at least every 250 ms, so a stalled
    // client is closed within a quarter of the limit past it and a shutdown
    // never waits long for this thread.
    let tick = (shared.config.handshake_timeout / 4)
        .clamp(Duration::from_millis(5), Duration::from_millis(250));
    while !shared.stopping.load(Ordering::SeqCst) {
        thread::sleep(tick);
        shared.reap(Instant::now());
    }
}

/// Send buffer asked for each connection in transmission: room for a few
/// large read replies in the kernel while the client reads earlier ones.
const SEND_BUFFER: usize = 1 << 20;

fn connection_main(shared: Arc<Shared>, id: u64, stream: Arc<Stream>, peer: String) {
    if let Some(start) = shared.config.on_conn_thread_start {
        start();
    }
    info!("conn {id}: accepted from {peer}");
    let s: &Stream = &stream;
    let on_dead = || s.shutdown(Shutdown::Both);
    let admit = |export: &Arc<Export>| {
        let admitted = shared.admit(id, export);
        if admitted.is_ok() {
            // Replies are written with a short send timeout so that one a
            // client does not read can be given up (`Config::stall_timeout`).
            let tick = (shared.config.stall_timeout / 4)
                .clamp(Duration::from_millis(5), Duration::from_millis(250));
            s.set_write_timeout(tick);
            s.set_send_buffer(SEND_BUFFER);
        }
        admitted
    };
    let hooks = connection::Hooks {
        admit: &admit,
        on_dead: &on_dead,
        budget: &shared.budget,
        sessions: &shared.sessions,
    };
    // A copy: the handshake reads it without a lock, and exports added
    // later are seen by the next client.
    let exports = shared.exports().clone();
    let (config, stopping) = (&shared.config, &shared.stopping);
    let upgrade = connection::run(s, s, exports, config, stopping, &hooks, Start::Greeting, id);
    // The handshake acknowledges NBD_OPT_STARTTLS only when TLS is on.
    if let (Some((start, exports)), Some(tls)) = (upgrade, &config.tls) {
        match tls::accept(s, tls) {
            Ok((reader, writer, client_cert)) => {
                info!("conn {id}: TLS established (client certificate: {client_cert})");
                connection::run(reader, writer, exports, config, stopping, &hooks, start, id);
            }
            Err(e) => warn!("conn {id}: TLS handshake failed: {e}"),
        }
    }
    s.shutdown(Shutdown::Both);
    shared.conns().remove(&id);
}

/// Ends every connection: no more requests are read, in-flight ones get
/// `shutdown_grace` to finish, then the sockets are closed.
fn drain(shared: &Shared, handles: Vec<JoinHandle<()>>) {
    let open: Vec<Arc<Stream>> = shared.conns().values().map(|c| c.stream.clone()).collect();
    for s in &open {
        s.shutdown(Shutdown::Read);
    }
    drop(open);
    let deadline = Instant::now() + shared.config.shutdown_grace;
    while handles.iter().any(|h| !h.is_finished()) && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(5));
    }
    let left: Vec<Arc<Stream>> = shared.conns().values().map(|c| c.stream.clone()).collect();
    if !left.is_empty() {
        warn!(
            "nbd: closing {} connections whose requests did not finish in time",
            left.len()
        );
        for s in &left {
            s.shutdown(Shutdown::Both);
        }
    }
    for h in handles {
        if h.join().is_err() {
            error!("nbd: a connection thread panicked");
        }
    }
}
