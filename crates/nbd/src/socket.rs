//! Sockets: Unix and TCP listeners and streams behind one type each.
//!
//! This module owns the operating-system side of the server: binding,
//! accepting, shutting a stream down so a thread blocked reading it wakes
//! up, waking a blocked `accept`, giving a stream a send timeout and a
//! larger send buffer, and removing a Unix socket file when its listener
//! goes away. It knows nothing
//! of the protocol, nor of the rule for remote addresses (the server checks
//! it with `Config::check_listen_addr` before binding).

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::time::Duration;

/// The IANA port of NBD, on loopback: where a TCP server listens by default.
pub const DEFAULT_TCP_ADDR: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::LOCALHOST), 10809);

/// Where a server listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListenAddr {
    /// A Unix domain socket at this path (it must not exist yet).
    Unix(PathBuf),
    /// A TCP address (port 0 picks a free port).
    Tcp(SocketAddr),
}

impl fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ListenAddr::Unix(p) => write!(f, "unix:{}", p.display()),
            ListenAddr::Tcp(a) => write!(f, "tcp:{a}"),
        }
    }
}

/// A connected client.
#[derive(Debug)]
pub(crate) enum Stream {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Stream {
    /// Makes a blocking write give up with `WouldBlock` after `limit`
    /// without progress (`SO_SNDTIMEO`); errors are ignored.
    pub(crate) fn set_write_timeout(&self, limit: Duration) {
        let _ = match self {
            Stream::Unix(s) => s.set_write_timeout(Some(limit)),
            Stream::Tcp(s) => s.set_write_timeout(Some(limit)),
        };
    }

    /// Asks for a send buffer of `bytes` (`SO_SNDBUF`; the kernel caps it
    /// at `net.core.wmem_max`); errors are ignored. Whole read replies then
    /// go into the socket in one `send` while the client is still reading
    /// the ones before, instead of the writer sleeping partway through each.
    pub(crate) fn set_send_buffer(&self, bytes: usize) {
        let _ = match self {
            Stream::Unix(s) => rustix::net::sockopt::set_socket_send_buffer_size(s, bytes),
            Stream::Tcp(s) => rustix::net::sockopt::set_socket_send_buffer_size(s, bytes),
        };
    }

    /// Shuts down one or both directions; errors (already closed) are
    /// ignored.
    pub(crate) fn shutdown(&self, how: Shutdown) {
        let _ = match self {
            Stream::Unix(s) => s.shutdown(how),
            Stream::Tcp(s) => s.shutdown(how),
        };
    }
}

impl Read for &Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match *self {
            Stream::Unix(s) => (&mut &*s).read(buf),
            Stream::Tcp(s) => (&mut &*s).read(buf),
        }
    }

    /// One `readv`: the rest of a payload and the read-ahead after it.
    fn read_vectored(&mut self, bufs: &mut [io::IoSliceMut<'_>]) -> io::Result<usize> {
        match *self {
            Stream::Unix(s) => (&mut &*s).read_vectored(bufs),
            Stream::Tcp(s) => (&mut &*s).read_vectored(bufs),
        }
    }
}

impl Write for &Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match *self {
            Stream::Unix(s) => (&mut &*s).write(buf),
            Stream::Tcp(s) => (&mut &*s).write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A bound listener. A Unix listener removes its socket file when dropped.
#[derive(Debug)]
pub(crate) enum Listener {
    /// The path is removed when the listener goes; `None` for a socket made
    /// by someone else (the service manager), whose file is theirs.
    Unix(UnixListener, Option<PathBuf>),
    Tcp(TcpListener),
}

/// A listening socket made by someone else and handed over, such as the
/// sockets systemd passes to a socket-activated service (`LISTEN_FDS`).
#[derive(Debug)]
pub enum InheritedListener {
    /// A Unix stream socket bound to a path.
    Unix(UnixListener),
    /// A TCP socket.
    Tcp(TcpListener),
}

impl Listener {
    /// Binds `addr`; returns the listener and the address actually bound.
    pub(crate) fn bind(addr: &ListenAddr) -> io::Result<(Listener, ListenAddr)> {
        match addr {
            ListenAddr::Unix(path) => {
                let l = UnixListener::bind(path)?;
                Ok((Listener::Unix(l, Some(path.clone())), addr.clone()))
            }
            ListenAddr::Tcp(a) => {
                let l = TcpListener::bind(a)?;
                let bound = l.local_addr()?;
                Ok((Listener::Tcp(l), ListenAddr::Tcp(bound)))
            }
        }
    }

    /// Takes over a listener someone else bound; returns it and its address.
    /// A Unix socket must have a path (the server connects to it to wake its
    /// acceptor at shutdown) and is left in place at exit.
    pub(crate) fn inherit(inherited: InheritedListener) -> io::Result<(Listener, ListenAddr)> {
        match inherited {
            InheritedListener::Unix(l) => {
                let path = l
                    .local_addr()?
                    .as_pathname()
                    .map(PathBuf::from)
                    .ok_or_else(|| {
                        io::Error::new(
                            io::ErrorKind::InvalidInput,
                            "the inherited Unix socket has no path (abstract or unnamed)",
                        )
                    })?;
                Ok((Listener::Unix(l, None), ListenAddr::Unix(path)))
            }
            InheritedListener::Tcp(l) => {
                let a = l.local_addr()?;
                Ok((Listener::Tcp(l), ListenAddr::Tcp(a)))
            }
        }
    }

    /// Waits for a client; returns the stream and a printable peer name.
    pub(crate) fn accept(&self) -> io::Result<(Stream, String)> {
        match self {
            Listener::Unix(l, _) => {
                let (s, _) = l.accept()?;
                Ok((Stream::Unix(s), "unix".to_string()))
            }
            Listener::Tcp(l) => {
                let (s, peer) = l.accept()?;
                // Replies are written whole; do not hold small ones back.
                let _ = s.set_nodelay(true);
                Ok((Stream::Tcp(s), peer.to_string()))
            }
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Listener::Unix(_, Some(path)) = self {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Stops a listening socket this process made, so that a thread blocked in
/// `accept` on it returns at once (Linux answers `EINVAL`), also when its
/// Unix socket file was removed behind the server's back and connecting to
/// the path can no longer wake it. It holds a duplicate of the listener's
/// descriptor, so the descriptor it shuts down is never one reused for
/// something else. Not for a socket inherited from a service manager:
/// shutting that down would stop the manager's socket too.
#[derive(Debug)]
pub struct AcceptStopper(std::os::fd::OwnedFd);

impl AcceptStopper {
    /// A stopper for `listener` (a duplicate of its descriptor).
    pub fn new(listener: &impl std::os::fd::AsFd) -> io::Result<AcceptStopper> {
        Ok(AcceptStopper(listener.as_fd().try_clone_to_owned()?))
    }

    /// Shuts the socket down for both directions: it stops listening and a
    /// blocked `accept` returns.
    pub fn stop(&self) -> io::Result<()> {
        rustix::net::shutdown(&self.0, rustix::net::Shutdown::Both).map_err(io::Error::from)
    }
}

impl Listener {
    /// A stopper for this listener; only for one this process bound (see
    /// [`AcceptStopper`]).
    pub(crate) fn stopper(&self) -> io::Result<AcceptStopper> {
        match self {
            Listener::Unix(l, _) => AcceptStopper::new(l),
            Listener::Tcp(l) => AcceptStopper::new(l),
        }
    }
}

/// Connects to a listener of ours to wake a thread blocked in `accept`.
pub(crate) fn wake(addr: &ListenAddr) -> io::Result<()> {
    match addr {
        ListenAddr::Unix(p) => UnixStream::connect(p).map(drop),
        ListenAddr::Tcp(a) => {
            let mut a = *a;
            if a.ip().is_unspecified() {
                a.set_ip(match a {
                    SocketAddr::V4(_) => Ipv4Addr::LOCALHOST.into(),
                    SocketAddr::V6(_) => Ipv6Addr::LOCALHOST.into(),
                });
            }
            TcpStream::connect(a).map(drop)
        }
    }
}
