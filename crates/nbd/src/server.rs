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
//! Locks: `Shared::conns` (the registry of open streams, used only to shut
//! them down) is the only lock here; it is never held while doing I/O or
//! while taking another lock.

use std::collections::HashMap;
use std::io;
use std::net::{Shutdown, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use log::{error, info, warn};

use crate::connection;
use crate::export::{Config, Exports};
use crate::socket::{self, ListenAddr, Listener, Stream};

/// State shared by the acceptor, the connections and shutdown handles.
struct Shared {
    exports: Exports,
    config: Config,
    addr: ListenAddr,
    stopping: AtomicBool,
    /// Open connections by id; protects only the map (streams are
    /// thread-safe themselves).
    conns: Mutex<HashMap<u64, Arc<Stream>>>,
    accepted: AtomicU64,
}

impl Shared {
    fn conns(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Stream>>> {
        self.conns.lock().unwrap_or_else(|e| e.into_inner())
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
        if let Err(e) = socket::wake(&self.shared.addr) {
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
    /// TCP address is not loopback and `config.allow_remote` is false.
    pub fn bind(addr: ListenAddr, exports: Exports, config: Config) -> io::Result<Server> {
        if exports.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a server needs at least one export",
            ));
        }
        let (listener, bound) = Listener::bind(&addr, config.allow_remote)?;
        let shared = Arc::new(Shared {
            exports,
            config,
            addr: bound,
            stopping: AtomicBool::new(false),
            conns: Mutex::new(HashMap::new()),
            accepted: AtomicU64::new(0),
        });
        let s = shared.clone();
        let acceptor = thread::Builder::new()
            .name("nbd-accept".into())
            .spawn(move || accept_loop(listener, s))?;
        info!(
            "nbd: listening on {} with exports {:?}",
            shared.addr,
            shared.exports.iter().map(|e| e.name()).collect::<Vec<_>>()
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

    /// Connections open right now.
    pub fn connections(&self) -> usize {
        self.shared.conns().len()
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
        if handles.len() >= shared.config.max_connections {
            warn!(
                "nbd: refusing a client from {peer}: {} connections open",
                handles.len()
            );
            continue;
        }
        let id = next_id;
        next_id += 1;
        shared.accepted.fetch_add(1, Ordering::Relaxed);
        let stream = Arc::new(stream);
        shared.conns().insert(id, stream.clone());
        let s = shared.clone();
        let spawned = thread::Builder::new()
            .name(format!("nbd-conn-{id}"))
            .spawn(move || connection_main(s, id, stream, peer));
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
    info!("nbd: server on {} stopped", shared.addr);
}

fn connection_main(shared: Arc<Shared>, id: u64, stream: Arc<Stream>, peer: String) {
    info!("conn {id}: accepted from {peer}");
    let s: &Stream = &stream;
    let on_dead = || s.shutdown(Shutdown::Both);
    connection::run(
        s,
        s,
        &shared.exports,
        &shared.config,
        &shared.stopping,
        &on_dead,
        id,
    );
    s.shutdown(Shutdown::Both);
    shared.conns().remove(&id);
}

/// Ends every connection: no more requests are read, in-flight ones get
/// `shutdown_grace` to finish, then the sockets are closed.
fn drain(shared: &Shared, handles: Vec<JoinHandle<()>>) {
    let open: Vec<Arc<Stream>> = shared.conns().values().cloned().collect();
    for s in &open {
        s.shutdown(Shutdown::Read);
    }
    drop(open);
    let deadline = Instant::now() + shared.config.shutdown_grace;
    while handles.iter().any(|h| !h.is_finished()) && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(5));
    }
    let left: Vec<Arc<Stream>> = shared.conns().values().cloned().collect();
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
