//! One client connection, from greeting to close.
//!
//! This module owns the life of a connection: it buffers the reading side,
//! runs the handshake, then the transmission phase on the session the
//! handshake produced, and logs how it ended. It works on any `Read` and
//! `Write` pair, so the server runs it on sockets and the fuzzer on byte
//! slices. Every failure ends only this connection; nothing here can affect
//! another connection or the device beyond the requests it sent.

use std::io::{BufReader, Read, Write};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use log::{debug, info, warn};

use crate::budget::ServerBudget;
use crate::export::{Config, Export, Exports};
use crate::handshake::{self, Outcome};
use crate::transmission;

/// Size of the read buffer in front of the stream: a burst of request
/// headers costs one system call.
const READ_BUFFER: usize = 128 * 1024;

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
}

/// Serves one connection until it ends; `id` labels log lines. `exports`
/// is the table the handshake looks names up in; it is dropped once the
/// handshake ends, so a connection keeps only its own export alive.
pub(crate) fn run<R: Read, W: Write + Send>(
    reader: R,
    mut writer: W,
    exports: Exports,
    config: &Config,
    stopping: &AtomicBool,
    hooks: &Hooks<'_>,
    id: u64,
) {
    let mut reader = BufReader::with_capacity(READ_BUFFER, reader);
    let session = match handshake::negotiate(
        &mut reader,
        &mut writer,
        &exports,
        config,
        stopping,
        hooks.admit,
        id,
    ) {
        Ok(Outcome::Transmission(s)) => {
            drop(exports);
            s
        }
        Ok(Outcome::Aborted) => {
            debug!("conn {id}: client aborted the handshake");
            return;
        }
        Err(e) => {
            handshake::log_failure(id, &e);
            return;
        }
    };
    info!(
        "conn {id}: export {:?}, {} bytes, flags {:#x}, structured replies {}, block status {}",
        session.export.name(),
        session.export.device().size(),
        session.flags,
        session.structured,
        session.meta_context.is_some()
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
}
