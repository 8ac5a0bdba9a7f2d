//! TLS: the server's certificates, and one connection's TLS session split
//! into a reading and a writing half.
//!
//! This module owns everything of TLS (rustls with the ring provider):
//! [`Tls`] loads a certificate directory laid out as nbdkit and qemu-nbd
//! read it (`server-cert.pem`, `server-key.pem`, and `ca-cert.pem` to verify
//! client certificates), [`TlsMode`] says whether a server offers or
//! requires TLS, and [`accept`] runs the TLS handshake on a stream after
//! `NBD_OPT_STARTTLS` and returns a [`TlsReader`] and a [`TlsWriter`] that
//! share one TLS session. It knows nothing of NBD messages; the handshake
//! module decides when to call it.
//!
//! rustls has no TLS-PSK (pre-shared keys, gnutls `psktool` files): only
//! X.509 certificates are offered.
//!
//! The two halves: the connection's reading thread and its reply writers
//! run at once, so the session (`rustls::ServerConnection`) sits behind one
//! mutex, the *TLS session mutex*, held only for CPU work (decrypting
//! bytes already read, encrypting a reply into a buffer), never across a
//! system call. The reader reads raw bytes from the socket with no lock and
//! feeds them to the session; the writer (one at a time: the transmission
//! phase keeps it behind its reply writer's mutex) encrypts into its own
//! buffer, drops the session mutex, then writes that buffer to the socket.
//! A plaintext connection never enters this module.

use std::fmt;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig, ServerConnection};

use crate::socket::Stream;

/// The server certificate's file in a certificate directory.
pub const SERVER_CERT: &str = "server-cert.pem";
/// The server's private key's file in a certificate directory.
pub const SERVER_KEY: &str = "server-key.pem";
/// The certificate authority that signs client certificates.
pub const CA_CERT: &str = "ca-cert.pem";

/// Plaintext encrypted at once by a writer: bounds its buffer of
/// ciphertext not yet sent.
const WRITE_CHUNK: usize = 256 * 1024;
/// Raw bytes read from the socket at once by a reader.
const READ_CHUNK: usize = 64 * 1024;

/// Whether a server offers TLS, as nbdkit's `--tls`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsMode {
    /// No TLS: `NBD_OPT_STARTTLS` is answered `NBD_REP_ERR_UNSUP`.
    Off,
    /// TLS offered: a client may upgrade or stay in plaintext.
    On,
    /// TLS required: before `NBD_OPT_STARTTLS`, every option other than
    /// `ABORT` is refused with `NBD_REP_ERR_TLS_REQD` (and
    /// `NBD_OPT_EXPORT_NAME`, which has no error reply, closes).
    Require,
}

/// The server side of TLS: its mode and its rustls configuration.
#[derive(Clone)]
pub struct Tls {
    mode: TlsMode,
    dir: PathBuf,
    verify_peer: bool,
    config: Arc<ServerConfig>,
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tls")
            .field("mode", &self.mode)
            .field("dir", &self.dir)
            .field("verify_peer", &self.verify_peer)
            .finish()
    }
}

impl Tls {
    /// Loads `dir/server-cert.pem` (the certificate, then any chain),
    /// `dir/server-key.pem` (PKCS#8, PKCS#1 or SEC1) and, when
    /// `verify_peer`, `dir/ca-cert.pem`: clients must then present a
    /// certificate it signed. `mode` must be `On` or `Require`. The error is
    /// one line naming the file at fault.
    pub fn from_dir(dir: &Path, mode: TlsMode, verify_peer: bool) -> Result<Tls, String> {
        if mode == TlsMode::Off {
            return Err("TLS certificates given with TLS off".into());
        }
        let file = |name: &str| dir.join(name);
        let certs = read_certs(&file(SERVER_CERT))?;
        let key_path = file(SERVER_KEY);
        let key = PrivateKeyDer::from_pem_file(&key_path)
            .map_err(|e| format!("{}: {}", key_path.display(), pem_error(e)))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS: {e}"))?;
        let builder = if verify_peer {
            let ca_path = file(CA_CERT);
            let mut roots = RootCertStore::empty();
            for c in read_certs(&ca_path)? {
                roots
                    .add(c)
                    .map_err(|e| format!("{}: {e}", ca_path.display()))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| format!("{}: {e}", ca_path.display()))?;
            builder.with_client_cert_verifier(verifier)
        } else {
            builder.with_no_client_auth()
        };
        let config = builder.with_single_cert(certs, key).map_err(|e| {
            format!(
                "{} and {} do not make a usable certificate and key: {e}",
                file(SERVER_CERT).display(),
                key_path.display()
            )
        })?;
        Ok(Tls {
            mode,
            dir: dir.to_path_buf(),
            verify_peer,
            config: Arc::new(config),
        })
    }

    /// Whether TLS is offered or required.
    pub fn mode(&self) -> TlsMode {
        self.mode
    }

    /// Whether clients must present a certificate signed by `ca-cert.pem`.
    pub fn verify_peer(&self) -> bool {
        self.verify_peer
    }

    /// The certificate directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// Every certificate in a PEM file; an empty or unreadable file is an
/// error.
fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("{}: {}", path.display(), pem_error(e)))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{}: {}", path.display(), pem_error(e)))?;
    if certs.is_empty() {
        return Err(format!("{}: no certificate in it", path.display()));
    }
    Ok(certs)
}

/// A PEM error in words.
fn pem_error(e: rustls::pki_types::pem::Error) -> String {
    use rustls::pki_types::pem::Error;
    match e {
        Error::Io(e) => e.to_string(),
        Error::NoItemsFound => "no PEM item of the expected kind in it".into(),
        other => format!("not a valid PEM file ({other:?})"),
    }
}

/// One TLS session shared by a reader and a writer.
type Session = Arc<Mutex<ServerConnection>>;

fn lock(s: &Session) -> MutexGuard<'_, ServerConnection> {
    s.lock().unwrap_or_else(|e| e.into_inner())
}

fn tls_error(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("TLS: {e}"))
}

/// Runs the TLS handshake as the server on `stream` (after the
/// `NBD_OPT_STARTTLS` reply); returns the session's two halves and whether
/// the client presented a verified certificate.
pub(crate) fn accept<'s>(
    stream: &'s Stream,
    tls: &Tls,
) -> io::Result<(TlsReader<'s>, TlsWriter<'s>, bool)> {
    let mut conn = ServerConnection::new(tls.config.clone()).map_err(tls_error)?;
    // The writer bounds what it encrypts at once itself.
    conn.set_buffer_limit(None);
    let mut io = stream;
    while conn.is_handshaking() {
        let (read, written) = conn.complete_io(&mut io)?;
        if read == 0 && written == 0 && conn.is_handshaking() {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
    }
    while conn.wants_write() {
        conn.write_tls(&mut io)?;
    }
    let client_cert = conn.peer_certificates().is_some_and(|c| !c.is_empty());
    let session = Arc::new(Mutex::new(conn));
    Ok((
        TlsReader {
            session: session.clone(),
            stream,
            raw: vec![0; READ_CHUNK].into_boxed_slice(),
            start: 0,
            end: 0,
        },
        TlsWriter {
            session,
            stream,
            out: Vec::new(),
            sent: 0,
        },
        client_cert,
    ))
}

/// The reading half: plaintext from the client.
pub(crate) struct TlsReader<'s> {
    session: Session,
    stream: &'s Stream,
    /// Raw bytes read from the socket; `raw[start..end]` not yet given to
    /// the session.
    raw: Box<[u8]>,
    start: usize,
    end: usize,
}

impl Read for TlsReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            {
                let mut conn = lock(&self.session);
                match conn.reader().read(buf) {
                    Ok(n) => return Ok(n),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    // A client that closes without close_notify ends the
                    // stream as a plaintext client would; a truncated
                    // request is caught by the protocol.
                    Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
                    Err(e) => return Err(e),
                }
                if self.start < self.end {
                    let n = conn.read_tls(&mut &self.raw[self.start..self.end])?;
                    self.start += n;
                    conn.process_new_packets().map_err(tls_error)?;
                    continue;
                }
            }
            // No plaintext and nothing left to decrypt: read the socket,
            // holding no lock.
            let n = match (&mut &*self.stream).read(&mut self.raw) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if n == 0 {
                // Tell the session the stream ended; its reader then says
                // how (close_notify or not).
                let mut conn = lock(&self.session);
                conn.read_tls(&mut &[][..])?;
                conn.process_new_packets().map_err(tls_error)?;
                continue;
            }
            self.start = 0;
            self.end = n;
        }
    }
}

/// The writing half: plaintext to the client. Ciphertext the socket did
/// not take yet is kept and sent first by the next `write` or `flush`; a
/// `WouldBlock` (the socket's send timeout) leaves it for the next call.
pub(crate) struct TlsWriter<'s> {
    session: Session,
    stream: &'s Stream,
    /// Ciphertext; `out[sent..]` is not yet written to the socket.
    out: Vec<u8>,
    sent: usize,
}

impl TlsWriter<'_> {
    /// Writes the ciphertext kept so far to the socket.
    fn drain(&mut self) -> io::Result<()> {
        while self.sent < self.out.len() {
            match (&mut &*self.stream).write(&self.out[self.sent..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.sent += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.out.clear();
        self.sent = 0;
        Ok(())
    }

    /// Moves whatever the session has to send (records, alerts, key
    /// updates) into `out`.
    fn take_records(&mut self, conn: &mut ServerConnection) -> io::Result<()> {
        while conn.wants_write() {
            conn.write_tls(&mut self.out)?;
        }
        Ok(())
    }
}

impl Write for TlsWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.drain()?;
        let n = {
            let session = self.session.clone();
            let mut conn = lock(&session);
            let n = conn.writer().write(&buf[..buf.len().min(WRITE_CHUNK)])?;
            self.take_records(&mut conn)?;
            n
        };
        match self.drain() {
            // The bytes are taken: the rest goes out with the next call.
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                Ok(n)
            }
            Err(e) => Err(e),
            Ok(()) => Ok(n),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        self.drain()?;
        {
            let session = self.session.clone();
            let mut conn = lock(&session);
            self.take_records(&mut conn)?;
        }
        self.drain()
    }
}
