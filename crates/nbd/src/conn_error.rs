//! Why a connection ended abnormally: the socket failed, the client sent
//! bytes that are not a message, or it broke a rule of the protocol.
//!
//! This module owns [`ConnError`], which the handshake and transmission
//! phases return and the connection logs; it is never sent to a client. It
//! sits above `wire` (it wraps [`WireError`]) and apart from `error`, whose
//! device errors know nothing of the wire.

use std::fmt;
use std::io;

use crate::wire::WireError;

/// Why a connection ended abnormally (internal: logged, never sent).
#[derive(Debug)]
pub(crate) enum ConnError {
    /// The socket failed or the client went away.
    Io(io::Error),
    /// The client sent bytes that are not a valid message.
    Wire(WireError),
    /// The client broke a rule of the protocol.
    Protocol(String),
    /// The server had no place for the client (a limit, named in the text).
    Refused(String),
}

impl ConnError {
    /// Whether this is just the client going away (logged quietly).
    pub(crate) fn is_disconnect(&self) -> bool {
        matches!(self, ConnError::Io(e) if matches!(
            e.kind(),
            io::ErrorKind::UnexpectedEof
                | io::ErrorKind::ConnectionReset
                | io::ErrorKind::BrokenPipe
                | io::ErrorKind::ConnectionAborted
        ))
    }
}

impl From<io::Error> for ConnError {
    fn from(e: io::Error) -> Self {
        ConnError::Io(e)
    }
}

impl From<WireError> for ConnError {
    fn from(e: WireError) -> Self {
        ConnError::Wire(e)
    }
}

impl fmt::Display for ConnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConnError::Io(e) => write!(f, "I/O error: {e}"),
            ConnError::Wire(e) => write!(f, "malformed message: {e}"),
            ConnError::Protocol(m) => write!(f, "protocol violation: {m}"),
            ConnError::Refused(m) => write!(f, "refused: {m}"),
        }
    }
}
