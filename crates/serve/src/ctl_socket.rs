//! The control socket: a line protocol on a Unix socket, server and client.
//!
//! This module owns the transport of control commands (their meaning is in
//! `control`). A client connects, sends lines and reads one reply
//! per line, as many times as it likes:
//!
//! ```text
//! request := "export" [" " NAME] "\n"      select the export for later lines
//!                                          (no name: the default export)
//!          | COMMAND [" " VALUE] "\n"      see crate::control
//! reply   := "ok " LEN "\n" BODY           BODY is LEN bytes: what the sysfs
//!                                          file reads ("" for a write)
//!          | "err " ERRNO " " MESSAGE "\n" ERRNO is an nbd::Errno's name:
//!                                          EINVAL, ENOENT, EBUSY, ...
//! ```
//!
//! so `socat - UNIX-CONNECT:PATH` works by hand and `zmem ctl` prints BODY
//! unchanged. Lines are at most [`MAX_LINE`] bytes; a longer one gets an
//! error and the connection is closed.
//!
//! [`CtlServer`] accepts on one thread and serves each client on its own
//! thread (at most [`MAX_CLIENTS`] at once). When all are taken, a new
//! client closes the one that has waited longest for its next line, so idle
//! connections never lock an operator out; only when every client is in the
//! middle of a command is the newcomer refused with `EBUSY`. Shutting the
//! server down closes every client, joins every thread and removes the socket
//! file. [`request`] is
//! the client `zmem ctl` uses.

use std::collections::HashMap;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::Shutdown;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Instant;

use log::{debug, info, warn};

use nbd::Errno;

use crate::control;
use crate::ctl_error::CtlError;
use crate::registry::Registry;

/// Longest request line, in bytes.
pub const MAX_LINE: usize = 4096;
/// Clients served at once; past it the longest-idle client is closed to make
/// room (or, if none is idle, the newcomer is answered `EBUSY`).
pub const MAX_CLIENTS: usize = 16;

/// Makes `path` free for a new listening socket: a stale socket file (no
/// server answers on it) is removed; a live one, or a file that is not a
/// socket, is an error.
pub fn claim_socket_path(path: &Path) -> io::Result<()> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    if !meta.file_type().is_socket() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{} exists and is not a socket", path.display()),
        ));
    }
    if UnixStream::connect(path).is_ok() {
        return Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!("a server is already listening on {}", path.display()),
        ));
    }
    info!("removing the stale socket {}", path.display());
    std::fs::remove_file(path)
}

/// One connected control client.
struct Client {
    stream: UnixStream,
    /// Since when it has been waiting for its next line; `None` while a
    /// command of its runs.
    idle_since: Option<Instant>,
    /// Closed by the server to make room; its thread is ending.
    shed: bool,
}

struct Shared {
    registry: Arc<Registry>,
    path: PathBuf,
    /// Stops the listener at shutdown, also when its file was removed.
    stopper: nbd::AcceptStopper,
    stopping: AtomicBool,
    clients: Mutex<HashMap<u64, Client>>,
}

impl Shared {
    fn clients(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Client>> {
        self.clients.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records whether client `id` waits for a line (`true`) or runs one. A
    /// client already waiting keeps the instant it started to.
    fn set_idle(&self, id: u64, idle: bool) {
        if let Some(c) = self.clients().get_mut(&id) {
            if !idle {
                c.idle_since = None;
            } else if c.idle_since.is_none() {
                c.idle_since = Some(Instant::now());
            }
        }
    }

    /// Makes room for one more client: with [`MAX_CLIENTS`] connected (not
    /// counting those being closed), closes the one idle longest. False if
    /// there is no room and every client is running a command.
    fn make_room(&self) -> bool {
        let mut clients = self.clients();
        if clients.values().filter(|c| !c.shed).count() < MAX_CLIENTS {
            return true;
        }
        let oldest = clients
            .iter_mut()
            .filter(|(_, c)| !c.shed)
            .filter_map(|(id, c)| c.idle_since.map(|t| (t, *id, c)))
            .min_by_key(|(t, id, _)| (*t, *id));
        match oldest {
            Some((since, id, c)) => {
                warn!(
                    "ctl client {id}: idle for {:?} with {MAX_CLIENTS} clients connected: \
                     closed to admit a new one",
                    since.elapsed()
                );
                c.shed = true;
                let _ = c.stream.shutdown(Shutdown::Both);
                true
            }
            None => false,
        }
    }
}

/// A running control socket. Dropping it shuts it down.
pub struct CtlServer {
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

impl CtlServer {
    /// Listens on `path` (a stale socket there is replaced) and serves
    /// commands on `registry`.
    pub fn bind(path: impl Into<PathBuf>, registry: Arc<Registry>) -> io::Result<CtlServer> {
        let path = path.into();
        claim_socket_path(&path)?;
        let listener = UnixListener::bind(&path)?;
        let stopper = nbd::AcceptStopper::new(&listener)?;
        let shared = Arc::new(Shared {
            registry,
            path,
            stopper,
            stopping: AtomicBool::new(false),
            clients: Mutex::new(HashMap::new()),
        });
        let s = shared.clone();
        let acceptor = thread::Builder::new()
            .name("ctl-accept".into())
            .spawn(move || accept_loop(listener, s))?;
        info!("ctl: listening on {}", shared.path.display());
        Ok(CtlServer {
            shared,
            acceptor: Some(acceptor),
        })
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// Stops accepting, closes every client, joins every thread and removes
    /// the socket file.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        let Some(acceptor) = self.acceptor.take() else {
            return;
        };
        self.shared.stopping.store(true, Ordering::SeqCst);
        // Wake the acceptor: stop its socket, or connect to it should that
        // fail; if both fail it is already gone.
        if self.shared.stopper.stop().is_err() {
            let _ = UnixStream::connect(&self.shared.path);
        }
        if acceptor.join().is_err() {
            warn!("ctl: the acceptor thread panicked");
        }
    }
}

impl Drop for CtlServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn accept_loop(listener: UnixListener, shared: Arc<Shared>) {
    let mut handles: Vec<JoinHandle<()>> = Vec::new();
    let mut next_id = 0u64;
    for conn in listener.incoming() {
        if shared.stopping.load(Ordering::SeqCst) {
            break;
        }
        let mut stream = match conn {
            Ok(s) => s,
            Err(e) => {
                warn!("ctl: accept failed: {e}");
                thread::sleep(std::time::Duration::from_millis(50));
                continue;
            }
        };
        handles.retain(|h| !h.is_finished());
        if !shared.make_room() {
            warn!("ctl: refusing a client: {MAX_CLIENTS} clients are all running commands");
            let busy = Err(CtlError::new(Errno::EBUSY, "too many control clients"));
            let _ = write_reply(&mut stream, &busy);
            continue;
        }
        next_id += 1;
        let id = next_id;
        match stream.try_clone() {
            Ok(c) => {
                shared.clients().insert(
                    id,
                    Client {
                        stream: c,
                        idle_since: Some(Instant::now()),
                        shed: false,
                    },
                );
            }
            Err(e) => {
                warn!("ctl: cannot register a client: {e}");
                continue;
            }
        }
        let s = shared.clone();
        let spawned = thread::Builder::new()
            .name(format!("ctl-{id}"))
            .spawn(move || {
                if let Err(e) = serve_client(&stream, &s.registry, &|idle| s.set_idle(id, idle)) {
                    debug!("ctl client {id}: {e}");
                }
                s.clients().remove(&id);
            });
        match spawned {
            Ok(h) => handles.push(h),
            Err(e) => {
                warn!("ctl: cannot start a client thread: {e}");
                shared.clients().remove(&id);
            }
        }
    }
    drop(listener);
    let _ = std::fs::remove_file(&shared.path);
    for c in shared.clients().values() {
        let _ = c.stream.shutdown(Shutdown::Both);
    }
    for h in handles {
        let _ = h.join();
    }
    info!("ctl: stopped");
}

/// Reads one line of at most `MAX_LINE` bytes, without its newline.
/// `Ok(None)` at a clean end of stream.
fn read_line<R: BufRead>(r: &mut R) -> io::Result<Option<String>> {
    let mut buf = Vec::new();
    let n = r
        .by_ref()
        .take(MAX_LINE as u64 + 1)
        .read_until(b'\n', &mut buf)?;
    if n == 0 {
        return Ok(None);
    }
    if buf.last() == Some(&b'\n') {
        buf.pop();
    } else if buf.len() > MAX_LINE {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("request line over {MAX_LINE} bytes"),
        ));
    }
    if buf.last() == Some(&b'\r') {
        buf.pop();
    }
    String::from_utf8(buf)
        .map(Some)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "request is not UTF-8"))
}

fn write_reply(w: &mut impl Write, reply: &Result<String, CtlError>) -> io::Result<()> {
    match reply {
        Ok(body) => {
            w.write_all(format!("ok {}\n", body.len()).as_bytes())?;
            w.write_all(body.as_bytes())
        }
        Err(e) => {
            let msg = e.message.replace('\n', " ");
            w.write_all(format!("err {} {msg}\n", e.errno).as_bytes())
        }
    }
}

/// Serves one client's lines; `set_idle(true)` before waiting for a line,
/// `set_idle(false)` once one has arrived.
fn serve_client(
    stream: &UnixStream,
    registry: &Registry,
    set_idle: &dyn Fn(bool),
) -> io::Result<()> {
    let mut reader = BufReader::new(stream);
    let mut writer = stream;
    let mut export: Option<String> = None;
    loop {
        if reader.buffer().is_empty() {
            set_idle(true);
        }
        let line = read_line(&mut reader);
        set_idle(false);
        let line = match line {
            Ok(Some(l)) => l,
            Ok(None) => return Ok(()),
            Err(e) => {
                let err = Err(CtlError::inval(e.to_string()));
                let _ = write_reply(&mut writer, &err);
                return Err(e);
            }
        };
        let trimmed = line.trim();
        if trimmed.is_empty() {
            continue;
        }
        let reply = if trimmed == "export" || trimmed.starts_with("export ") {
            let name = trimmed["export".len()..].trim();
            let name = (!trimmed.eq("export")).then(|| name.to_string());
            if registry.contains(name.as_deref()) {
                export = name;
                Ok(String::new())
            } else {
                Err(CtlError::new(
                    Errno::ENOENT,
                    format!("no export named {:?}", name.unwrap_or_default()),
                ))
            }
        } else {
            debug!("ctl: {:?}: {trimmed}", export.as_deref().unwrap_or(""));
            control::execute(registry, export.as_deref(), trimmed)
        };
        write_reply(&mut writer, &reply)?;
    }
}

/// Sends one command (after selecting `export`, when given) to the control
/// socket at `path`. The outer error is a transport failure; the inner one
/// is the command's own.
pub fn request(
    path: &Path,
    export: Option<&str>,
    line: &str,
) -> io::Result<Result<String, CtlError>> {
    if line.contains('\n') || line.len() > MAX_LINE {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a command is one line of at most 4096 bytes",
        ));
    }
    let stream = UnixStream::connect(path)?;
    let mut reader = BufReader::new(&stream);
    let mut writer = &stream;
    if let Some(name) = export {
        writer.write_all(format!("export {name}\n").as_bytes())?;
        let r = read_reply(&mut reader)?;
        if r.is_err() {
            return Ok(r);
        }
    }
    writer.write_all(format!("{line}\n").as_bytes())?;
    read_reply(&mut reader)
}

fn read_reply<R: BufRead>(r: &mut R) -> io::Result<Result<String, CtlError>> {
    let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_string());
    let head = read_line(r)?.ok_or_else(|| bad("the server closed the connection"))?;
    if let Some(len) = head.strip_prefix("ok ") {
        let len: usize = len.parse().map_err(|_| bad("bad reply length"))?;
        let mut body = vec![0u8; len];
        r.read_exact(&mut body)?;
        let body = String::from_utf8(body).map_err(|_| bad("reply is not UTF-8"))?;
        return Ok(Ok(body));
    }
    if let Some(rest) = head.strip_prefix("err ") {
        let (errno, message) = rest.split_once(' ').unwrap_or((rest, ""));
        let errno = Errno::from_name(errno).unwrap_or(Errno::EIO);
        return Ok(Err(CtlError::new(errno, message)));
    }
    Err(bad(&format!("unexpected reply {head:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Served;

    fn registry() -> Arc<Registry> {
        let pool = zalloc::open("zsmalloc", &zalloc::AllocOptions::default()).unwrap();
        let comp = zcomp::Compressor::parse("lz4", "").unwrap();
        let store = Arc::new(zram::Store::new(pool, comp, 16).unwrap());
        Arc::new(Registry::new(vec![Served {
            name: "z".into(),
            label: "test".into(),
            store,
            policy: None,
        }]))
    }

    #[test]
    fn requests_round_trip_and_the_socket_goes_away() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ctl");
        let server = CtlServer::bind(&path, registry()).unwrap();
        let mm = request(&path, None, "mm_stat").unwrap().unwrap();
        assert_eq!(mm.split_whitespace().count(), 9);
        assert_eq!(
            request(&path, Some("z"), "mem_limit 1M").unwrap(),
            Ok(String::new())
        );
        assert!(request(&path, None, "mm_stat")
            .unwrap()
            .unwrap()
            .contains(" 1048576 "));
        let e = request(&path, Some("nope"), "mm_stat")
            .unwrap()
            .unwrap_err();
        assert_eq!(e.errno, Errno::ENOENT);
        let e = request(&path, None, "bogus").unwrap().unwrap_err();
        assert_eq!(e.errno, Errno::EINVAL);
        // By hand: several lines on one connection, and an oversize line.
        let s = UnixStream::connect(&path).unwrap();
        (&s).write_all(b"\nexport\r\ndisksize\n").unwrap();
        let mut r = BufReader::new(&s);
        assert_eq!(read_reply(&mut r).unwrap(), Ok(String::new()));
        assert_eq!(read_reply(&mut r).unwrap(), Ok("65536\n".to_string()));
        (&s).write_all(&vec![b'x'; MAX_LINE + 10]).unwrap();
        assert_eq!(
            read_reply(&mut r).unwrap().unwrap_err().errno,
            Errno::EINVAL
        );
        // A second server on the same path is refused while this one runs.
        assert!(CtlServer::bind(&path, registry()).is_err());
        server.shutdown();
        assert!(!path.exists());
        // A stale socket file is replaced.
        let stale = UnixListener::bind(&path).unwrap();
        drop(stale);
        assert!(path.exists());
        let again = CtlServer::bind(&path, registry()).unwrap();
        assert!(request(&path, None, "io_stat").unwrap().is_ok());
        drop(again);
        assert!(!path.exists());
    }

    #[test]
    fn error_replies_carry_the_errno_both_ways() {
        for &errno in Errno::ALL {
            let mut out = Vec::new();
            write_reply(&mut out, &Err(CtlError::new(errno, "why\nnot"))).unwrap();
            assert_eq!(out, format!("err {} why not\n", errno.name()).into_bytes());
            let back = read_reply(&mut &out[..]).unwrap();
            assert_eq!(back, Err(CtlError::new(errno, "why not")));
        }
        let unknown = read_reply(&mut &b"err EWHAT x\n"[..]).unwrap();
        assert_eq!(unknown, Err(CtlError::new(Errno::EIO, "x")));
    }

    #[test]
    fn idle_clients_never_lock_out_an_operator() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ctl");
        let server = CtlServer::bind(&path, registry()).unwrap();
        // Four times as many idle connections as there are places.
        let idle: Vec<UnixStream> = (0..4 * MAX_CLIENTS)
            .map(|_| UnixStream::connect(&path).unwrap())
            .collect();
        let mm = request(&path, None, "mm_stat").unwrap().unwrap();
        assert_eq!(mm.split_whitespace().count(), 9);
        // The acceptor handled every earlier connection before the request's:
        // all but the newest MAX_CLIENTS - 1 idle ones were closed to make
        // room, the oldest first.
        let closed: Vec<bool> = idle
            .iter()
            .map(|s| {
                s.set_nonblocking(true).unwrap();
                let mut b = [0u8; 1];
                matches!((&*s).read(&mut b), Ok(0))
            })
            .collect();
        let keep = MAX_CLIENTS - 1;
        assert!(
            closed[..closed.len() - keep].iter().all(|&c| c),
            "{closed:?}"
        );
        assert!(
            closed[closed.len() - keep..].iter().all(|&c| !c),
            "{closed:?}"
        );
        server.shutdown();
    }
}
