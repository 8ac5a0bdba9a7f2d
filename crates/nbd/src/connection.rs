//! One client connection, from greeting to close.
//!
//! This module owns the life of a connection: it puts a read-ahead buffer in
//! front of the reading side (`readahead`),
//! runs the handshake, then the transmission phase on the session the
//! handshake produced, and logs how it ended. It works on any `Read` and
//! `Write` pair, so the server runs it on sockets (or on a TLS session's two
//! halves) and the fuzzer on byte slices. When the client asks for TLS it
//! returns, and the server calls it again over TLS. Every failure ends only this connection; nothing here can affect
//! another connection or the device beyond the requests it sent.

use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use log::{debug, info, warn};

use crate::budget::ServerBudget;
use crate::export::{Config, Export, Exports};
use crate::handshake::{self, Outcome, Start};
use crate::readahead::ReadAhead;
use crate::transmission;

/// The hooks a connection calls into its server.
pub(crate) struct Hooks<'a> {
    /// Called once the handshake has chosen an export, before the reply that
    /// starts transmission: whether the server admits one more connection
    /// to it (`Err` says why not). If not, the client is refused and the
    /// connection ends.
    pub admit: &'a dyn Fn(&Arc<Export>) -> Result<(), String>,
    /// Must make further reads of the reader fail or end (the server shuts
    /// the socket down); called when a reply cannot be written.
    pub on_dead: &'a (dyn Fn() + Sync),
    /// The server-wide budget of payload memory.
    pub budget: &'a ServerBudget,
    /// Counts of sessions by the reply form they negotiated.
    pub sessions: &'a SessionCounters,
}

/// Sessions that reached transmission, by what they negotiated.
#[derive(Debug, Default)]
pub(crate) struct SessionCounters {
    started: AtomicU64,
    structured: AtomicU64,
    extended: AtomicU64,
}

impl SessionCounters {
    /// A snapshot of the counts.
    pub(crate) fn stats(&self) -> SessionStats {
        SessionStats {
            started: self.started.load(Ordering::Relaxed),
            structured: self.structured.load(Ordering::Relaxed),
            extended: self.extended.load(Ordering::Relaxed),
        }
    }
}

/// How many sessions reached transmission, and how many of them negotiated
/// structured replies and extended headers (extended headers imply
/// structured replies, so `extended <= structured <= started`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SessionStats {
    /// Sessions that entered the transmission phase.
    pub started: u64,
    /// Of those, sessions with structured replies.
    pub structured: u64,
    /// Of those, sessions with extended headers.
    pub extended: u64,
}

/// Serves one connection until it ends; `id` labels log lines. `exports`
/// is the table the handshake looks names up in; it is dropped once the
/// handshake ends, so a connection keeps only its own export alive. `start`
/// says whether this is a new connection or its rest over TLS.
///
/// Returns `Some` when the client asked for TLS and it was acknowledged:
/// the caller runs the TLS handshake on the stream and calls `run` again
/// with the returned [`Start`], the table and the TLS session's halves.
/// Otherwise the connection is over.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run<R: Read, W: Write + Send>(
    reader: R,
    mut writer: W,
    exports: Exports,
    config: &Config,
    stopping: &AtomicBool,
    hooks: &Hooks<'_>,
    start: Start,
    id: u64,
) -> Option<(Start, Exports)> {
    let mut reader = ReadAhead::new(reader);
    let session = match handshake::negotiate(
        &mut reader,
        &mut writer,
        &exports,
        config,
        stopping,
        hooks.admit,
        start,
        id,
    ) {
        Ok(Outcome::Transmission(s)) => {
            drop(exports);
            s
        }
        Ok(Outcome::Aborted) => {
            debug!("conn {id}: client aborted the handshake");
            return None;
        }
        Ok(Outcome::StartTls { no_zeroes }) => {
            // Bytes sent before the client could have seen the reply would
            // be read as if they had come over TLS (the STARTTLS command
            // injection of other protocols): refuse them.
            if !reader.buffer().is_empty() {
                warn!("conn {id}: client sent data between NBD_OPT_STARTTLS and TLS: closed");
                return None;
            }
            debug!("conn {id}: starting TLS");
            return Some((Start::Secured { no_zeroes }, exports));
        }
        Err(e) => {
            handshake::log_failure(id, &e);
            return None;
        }
    };
    let counts = hooks.sessions;
    counts.started.fetch_add(1, Ordering::Relaxed);
    if session.structured {
        counts.structured.fetch_add(1, Ordering::Relaxed);
    }
    if session.extended {
        counts.extended.fetch_add(1, Ordering::Relaxed);
    }
    info!(
        "conn {id}: export {:?}, {} bytes, flags {:#x}, structured replies {}, extended headers {}, \
         block status {}, TLS {}",
        session.export.name(),
        session.export.device().size(),
        session.flags,
        session.structured,
        session.extended,
        session.meta_context.is_some(),
        matches!(start, Start::Secured { .. })
    );
    match transmission::serve(
        &mut reader,
        writer,
        &session,
        config,
        hooks.budget,
        hooks.on_dead,
        id,
    ) {
        Ok(end) => info!("conn {id}: {end}"),
        Err(e) if e.is_disconnect() => info!("conn {id}: client went away mid-request"),
        Err(e) => warn!("conn {id}: closed: {e}"),
    }
    None
}
