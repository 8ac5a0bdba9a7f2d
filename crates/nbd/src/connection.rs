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

use log::{debug, info, warn};

use crate::export::{Config, Exports};
use crate::handshake::{self, Outcome};
use crate::transmission;

/// Size of the read buffer in front of the stream: a burst of request
/// headers costs one system call.
const READ_BUFFER: usize = 128 * 1024;

/// Serves one connection until it ends. `on_dead` must make further reads
/// of `reader` fail or end (the server shuts the socket down); `id` labels
/// log lines.
pub(crate) fn run<R: Read, W: Write + Send>(
    reader: R,
    mut writer: W,
    exports: &Exports,
    config: &Config,
    stopping: &AtomicBool,
    on_dead: &(dyn Fn() + Sync),
    id: u64,
) {
    let mut reader = BufReader::with_capacity(READ_BUFFER, reader);
    let session =
        match handshake::negotiate(&mut reader, &mut writer, exports, config, stopping, id) {
            Ok(Outcome::Transmission(s)) => s,
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
    match transmission::serve(&mut reader, writer, &session, config, on_dead, id) {
        Ok(end) => info!("conn {id}: {end}"),
        Err(e) if e.is_disconnect() => info!("conn {id}: client went away mid-request"),
        Err(e) => warn!("conn {id}: closed: {e}"),
    }
}
