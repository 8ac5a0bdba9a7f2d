//! The handshake phase: fixed newstyle negotiation up to transmission.
//!
//! This module owns the option haggling of one connection: it sends the
//! greeting, checks the client flags, answers options (`EXPORT_NAME`, `GO`,
//! `INFO`, `LIST`, `ABORT`, `STRUCTURED_REPLY`, `EXTENDED_HEADERS`,
//! `LIST_META_CONTEXT`, `SET_META_CONTEXT`; anything else gets `NBD_REP_ERR_UNSUP` and the
//! connection stays up), and produces the [`Session`] the transmission phase
//! runs on: the export, whether structured replies (or extended headers,
//! which imply them) are on, the selected
//! metadata context and the transmission flags that were advertised. It reads
//! and writes through generic `Read`/`Write` handles and knows nothing of
//! sockets, threads or the device's data operations (it only asks the
//! device's size, block sizes and capabilities).
//!
//! TLS: when the server offers it (`Config::tls`), `NBD_OPT_STARTTLS` is
//! acknowledged and the negotiation ends with [`Outcome::StartTls`]; the
//! caller runs the TLS handshake (`tls`) and calls [`negotiate`] again over
//! the TLS session with [`Start::Secured`], which starts with no greeting
//! and forgets every option agreed before. Under `TlsMode::Require` a
//! plaintext client's options other than `STARTTLS` and `ABORT` get
//! `NBD_REP_ERR_TLS_REQD` (`EXPORT_NAME`, which has no error reply, closes).
//!
//! Extended headers: `NBD_OPT_EXTENDED_HEADERS` is acknowledged (after
//! structured replies or without them); afterwards `STRUCTURED_REPLY` gets
//! `NBD_REP_ERR_EXT_HEADER_REQD` (no downgrade) and `EXPORT_NAME`, which a
//! client must not send then, closes the connection. Old-style negotiation
//! is not offered.

use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use log::{debug, warn};

use crate::conn_error::ConnError;
use crate::device::{BlockDevice, BlockSize};
use crate::export::{Config, Export, Exports};
use crate::tls::TlsMode;
use crate::wire::{self, hs, info, opt, rep, tf, InfoRequest, MetaContextRequest, OptionHeader};

/// The only metadata context offered.
pub const BASE_ALLOCATION: &str = "base:allocation";
/// The id the server gives `base:allocation` when a client selects it.
pub const BASE_ALLOCATION_ID: u32 = 1;
/// Option data above this size is answered with `NBD_REP_ERR_TOO_BIG`.
const MAX_OPTION_DATA: u32 = 64 * 1024;
/// Option data above this size is not even skipped: the connection is closed.
const MAX_OPTION_SKIP: u32 = 16 * 1024 * 1024;
/// A client that sends this many options without choosing an export is
/// disconnected.
const MAX_OPTIONS: usize = 4096;

/// What the handshake agreed on; the transmission phase runs on it.
#[derive(Clone, Debug)]
pub(crate) struct Session {
    /// The export chosen.
    pub export: Arc<Export>,
    /// Whether structured replies were negotiated (always true with
    /// extended headers).
    pub structured: bool,
    /// Whether extended headers were negotiated: 32-byte requests with
    /// 64-bit lengths, and every reply an extended chunk.
    pub extended: bool,
    /// Id of `base:allocation` if the client selected it for this export.
    pub meta_context: Option<u32>,
    /// Transmission flags sent to the client.
    pub flags: u16,
    /// Block size constraints sent (maximum capped by the server's limit).
    pub block: BlockSize,
}

/// How the handshake ended.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// The client chose an export.
    Transmission(Session),
    /// The client sent `NBD_OPT_ABORT`.
    Aborted,
    /// `NBD_OPT_STARTTLS` was acknowledged: the TLS handshake comes next,
    /// then [`negotiate`] again with [`Start::Secured`].
    StartTls {
        /// The client's `NBD_FLAG_C_NO_ZEROES`, which still holds.
        no_zeroes: bool,
    },
}

/// Where a negotiation starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Start {
    /// A new connection: the greeting and the client's flags come first.
    Greeting,
    /// Option haggling goes on over TLS after `NBD_OPT_STARTTLS`.
    Secured {
        /// The client's `NBD_FLAG_C_NO_ZEROES` from the greeting.
        no_zeroes: bool,
    },
}

/// The transmission flags advertised for `export`: exactly what its device
/// supports, and no writing for a read-only export.
pub(crate) fn transmission_flags(export: &Export, structured: bool) -> u16 {
    let device: &dyn BlockDevice = export.device().as_ref();
    let ro = export.is_read_only();
    let mut f = tf::HAS_FLAGS;
    if ro {
        f |= tf::READ_ONLY;
    }
    if device.can_flush() {
        f |= tf::SEND_FLUSH;
    }
    if !ro && device.can_fua() {
        f |= tf::SEND_FUA;
    }
    if !ro && device.can_trim() {
        f |= tf::SEND_TRIM;
    }
    if !ro && device.can_zero() {
        f |= tf::SEND_WRITE_ZEROES;
        if device.can_fast_zero() {
            f |= tf::SEND_FAST_ZERO;
        }
    }
    if device.can_multi_conn() {
        f |= tf::CAN_MULTI_CONN;
    }
    if device.can_cache() {
        f |= tf::SEND_CACHE;
    }
    if structured {
        // Reads are always answered with a single data chunk.
        f |= tf::SEND_DF;
    }
    f
}

/// State of one negotiation.
struct Negotiation<'a, W> {
    w: &'a mut W,
    exports: &'a Exports,
    config: &'a Config,
    /// Whether the server takes one more connection into transmission on
    /// this export (`Err` says why not).
    admit: &'a dyn Fn(&Arc<Export>) -> Result<(), String>,
    /// Set when a `GO` was refused for want of a place: the end of it.
    refused: Option<ConnError>,
    conn: u64,
    no_zeroes: bool,
    structured: bool,
    extended: bool,
    /// Export and context id selected by `NBD_OPT_SET_META_CONTEXT`.
    meta: Option<(Arc<Export>, u32)>,
}

/// Runs the handshake on a fresh connection (`Start::Greeting`), or its
/// rest over TLS (`Start::Secured`).
///
/// `stopping` makes every later option (except `ABORT`) fail with
/// `NBD_REP_ERR_SHUTDOWN`. `admit` is asked once an export is chosen,
/// before the reply that starts transmission: if the server has no place
/// for one more connection (or the export changed meanwhile), `GO` is
/// answered `NBD_REP_ERR_POLICY` and the connection ends (`EXPORT_NAME` has
/// no error reply, so it just ends). An export made with
/// [`Export::unavailable`] is refused before that, as an unknown one is.
/// `conn` only labels log lines.
#[allow(clippy::too_many_arguments)] // each is a separate input of the phase
pub(crate) fn negotiate<R: Read, W: Write>(
    r: &mut R,
    w: &mut W,
    exports: &Exports,
    config: &Config,
    stopping: &AtomicBool,
    admit: &dyn Fn(&Arc<Export>) -> Result<(), String>,
    start: Start,
    conn: u64,
) -> Result<Outcome, ConnError> {
    let no_zeroes = match start {
        Start::Secured { no_zeroes } => no_zeroes,
        Start::Greeting => {
            w.write_all(&wire::encode_greeting(hs::FIXED_NEWSTYLE | hs::NO_ZEROES))?;
            w.flush()?;
            let mut cf = [0u8; 4];
            r.read_exact(&mut cf)?;
            let client_flags = u32::from_be_bytes(cf);
            if client_flags & !(hs::C_FIXED_NEWSTYLE | hs::C_NO_ZEROES) != 0 {
                return Err(ConnError::Protocol(format!(
                    "unknown client flags {client_flags:#x}"
                )));
            }
            client_flags & hs::C_NO_ZEROES != 0
        }
    };
    let secured = matches!(start, Start::Secured { .. });
    let tls_mode = config.tls.as_ref().map_or(TlsMode::Off, |t| t.mode());
    let mut n = Negotiation {
        w,
        exports,
        config,
        admit,
        refused: None,
        conn,
        no_zeroes,
        structured: false,
        extended: false,
        meta: None,
    };
    for _ in 0..MAX_OPTIONS {
        let mut hb = [0u8; OptionHeader::LEN];
        r.read_exact(&mut hb)?;
        let h = OptionHeader::parse(&hb)?;
        debug!(
            "conn {conn}: option {} ({} bytes of data)",
            h.option, h.length
        );
        if h.length > MAX_OPTION_DATA {
            if h.option == opt::EXPORT_NAME || h.length > MAX_OPTION_SKIP {
                return Err(ConnError::Protocol(format!(
                    "option {} with {} bytes of data",
                    h.option, h.length
                )));
            }
            io::copy(&mut r.by_ref().take(h.length as u64), &mut io::sink())?;
            n.error(h.option, rep::ERR_TOO_BIG, "option data too large")?;
            continue;
        }
        let mut data = vec![0u8; h.length as usize];
        r.read_exact(&mut data)?;
        if stopping.load(Ordering::Relaxed) && h.option != opt::ABORT {
            if h.option == opt::EXPORT_NAME {
                return Err(ConnError::Protocol("server is shutting down".into()));
            }
            n.error(h.option, rep::ERR_SHUTDOWN, "server is shutting down")?;
            continue;
        }
        if tls_mode == TlsMode::Require
            && !secured
            && !matches!(h.option, opt::STARTTLS | opt::ABORT)
        {
            if h.option == opt::EXPORT_NAME {
                return Err(ConnError::Refused(
                    "TLS is required and the client chose an export in plaintext".into(),
                ));
            }
            n.error(
                h.option,
                rep::ERR_TLS_REQD,
                "TLS is required: send NBD_OPT_STARTTLS first",
            )?;
            continue;
        }
        match h.option {
            opt::EXPORT_NAME if n.extended => {
                return Err(ConnError::Protocol(
                    "NBD_OPT_EXPORT_NAME after extended headers were negotiated".into(),
                ))
            }
            opt::EXPORT_NAME => return n.export_name(&data).map(Outcome::Transmission),
            opt::ABORT => {
                // The client may already be gone; it owes us no read.
                let _ = n.reply(opt::ABORT, rep::ACK, &[]);
                return Ok(Outcome::Aborted);
            }
            opt::LIST => n.list(&data)?,
            opt::INFO | opt::GO => {
                let chosen = n.info(h.option, &data)?;
                if let Some(refusal) = n.refused.take() {
                    return Err(refusal);
                }
                if let Some(s) = chosen {
                    return Ok(Outcome::Transmission(s));
                }
            }
            opt::STRUCTURED_REPLY => {
                if !data.is_empty() {
                    n.error(h.option, rep::ERR_INVALID, "option takes no data")?;
                } else if n.extended {
                    n.error(
                        h.option,
                        rep::ERR_EXT_HEADER_REQD,
                        "extended headers are on and cannot be downgraded",
                    )?;
                } else if n.structured {
                    n.error(h.option, rep::ERR_INVALID, "already negotiated")?;
                } else {
                    n.structured = true;
                    n.reply(h.option, rep::ACK, &[])?;
                }
            }
            opt::EXTENDED_HEADERS => {
                if !data.is_empty() {
                    n.error(h.option, rep::ERR_INVALID, "option takes no data")?;
                } else if n.extended {
                    n.error(h.option, rep::ERR_INVALID, "already negotiated")?;
                } else {
                    n.extended = true;
                    n.structured = true;
                    n.reply(h.option, rep::ACK, &[])?;
                }
            }
            opt::LIST_META_CONTEXT | opt::SET_META_CONTEXT => n.meta_context(h.option, &data)?,
            opt::STARTTLS => {
                if tls_mode == TlsMode::Off {
                    n.error(h.option, rep::ERR_UNSUP, "TLS is not offered")?;
                } else if !data.is_empty() {
                    n.error(h.option, rep::ERR_INVALID, "option takes no data")?;
                } else if secured {
                    n.error(h.option, rep::ERR_INVALID, "TLS is already on")?;
                } else {
                    n.reply(h.option, rep::ACK, &[])?;
                    return Ok(Outcome::StartTls { no_zeroes });
                }
            }
            other => n.error(
                other,
                rep::ERR_UNSUP,
                &format!("option {other} is not supported"),
            )?,
        }
    }
    Err(ConnError::Protocol(format!(
        "{MAX_OPTIONS} options without choosing an export"
    )))
}

impl<W: Write> Negotiation<'_, W> {
    fn reply(&mut self, option: u32, reply: u32, data: &[u8]) -> io::Result<()> {
        self.w
            .write_all(&wire::encode_option_reply(option, reply, data))?;
        self.w.flush()
    }

    fn error(&mut self, option: u32, reply: u32, message: &str) -> io::Result<()> {
        debug!(
            "conn {}: option {option} refused ({reply:#x}): {message}",
            self.conn
        );
        self.reply(option, reply, message.as_bytes())
    }

    fn block_size(&self, export: &Export) -> BlockSize {
        export.device().block_size().capped(self.config.max_request)
    }

    fn session(&self, export: &Arc<Export>) -> Session {
        let flags = transmission_flags(export, self.structured);
        let meta_context = match &self.meta {
            Some((e, id)) if Arc::ptr_eq(e, export) => Some(*id),
            _ => None,
        };
        Session {
            export: export.clone(),
            structured: self.structured,
            extended: self.extended,
            meta_context,
            flags,
            block: self.block_size(export),
        }
    }

    /// `NBD_OPT_EXPORT_NAME`: no error reply exists, so failure closes.
    fn export_name(&mut self, data: &[u8]) -> Result<Session, ConnError> {
        let name = wire::parse_string(data)?;
        let Some(export) = self.exports.get(&name).cloned() else {
            return Err(ConnError::Protocol(format!("no export named {name:?}")));
        };
        if let Some(why) = export.unavailable_reason() {
            return Err(ConnError::Refused(why.to_string()));
        }
        (self.admit)(&export).map_err(ConnError::Refused)?;
        let s = self.session(&export);
        let size = export.device().size();
        self.w.write_all(&wire::encode_export_name_reply(
            size,
            s.flags,
            self.no_zeroes,
        ))?;
        self.w.flush()?;
        Ok(s)
    }

    fn list(&mut self, data: &[u8]) -> io::Result<()> {
        if !data.is_empty() {
            return self.error(opt::LIST, rep::ERR_INVALID, "option takes no data");
        }
        let exports = self.exports;
        // Unavailable exports are not listed: clients that list, then open
        // each export (nbdinfo --list), would fail on them.
        for e in exports.iter().filter(|e| e.unavailable_reason().is_none()) {
            let d = wire::encode_rep_server(e.name(), e.description());
            self.reply(opt::LIST, rep::SERVER, &d)?;
        }
        self.reply(opt::LIST, rep::ACK, &[])
    }

    /// `NBD_OPT_INFO` and `NBD_OPT_GO`. Returns the session for a successful
    /// `GO`.
    fn info(&mut self, option: u32, data: &[u8]) -> io::Result<Option<Session>> {
        let req = match InfoRequest::parse(data) {
            Ok(r) => r,
            Err(e) => {
                self.error(option, rep::ERR_INVALID, &e.to_string())?;
                return Ok(None);
            }
        };
        let Some(export) = self.exports.get(&req.name).cloned() else {
            let msg = format!("no export named {:?}", req.name);
            self.error(option, rep::ERR_UNKNOWN, &msg)?;
            return Ok(None);
        };
        if let Some(why) = export.unavailable_reason() {
            self.error(option, rep::ERR_UNKNOWN, why)?;
            return Ok(None);
        }
        if option == opt::GO {
            if let Err(why) = (self.admit)(&export) {
                let refusal = ConnError::Refused(why);
                self.error(option, rep::ERR_POLICY, &refusal.to_string())?;
                self.refused = Some(refusal);
                return Ok(None);
            }
        }
        let s = self.session(&export);
        let size = export.device().size();
        self.reply(option, rep::INFO, &wire::encode_info_export(size, s.flags))?;
        let mut sent = [false; 4];
        for &kind in &req.requests {
            match kind {
                info::NAME if !sent[1] => {
                    let d = wire::encode_info_string(info::NAME, export.name());
                    self.reply(option, rep::INFO, &d)?;
                }
                info::DESCRIPTION if !sent[2] => {
                    if let Some(text) = export.description() {
                        let d = wire::encode_info_string(info::DESCRIPTION, text);
                        self.reply(option, rep::INFO, &d)?;
                    }
                }
                _ => {}
            }
            if let Some(flag) = sent.get_mut(kind as usize) {
                *flag = true;
            }
        }
        // Always sent: a client that did not ask may still use it, and the
        // constraints are fixed per export.
        self.reply(option, rep::INFO, &wire::encode_info_block_size(s.block))?;
        self.reply(option, rep::ACK, &[])?;
        if option == opt::GO {
            debug!(
                "conn {}: GO {:?}: size {size}, flags {:#x}, structured {}, extended {}, meta {:?}",
                self.conn,
                export.name(),
                s.flags,
                s.structured,
                s.extended,
                s.meta_context
            );
            return Ok(Some(s));
        }
        Ok(None)
    }

    fn meta_context(&mut self, option: u32, data: &[u8]) -> io::Result<()> {
        if !self.structured {
            return self.error(
                option,
                rep::ERR_INVALID,
                "structured replies or extended headers must be negotiated first",
            );
        }
        let req = match MetaContextRequest::parse(data) {
            Ok(r) => r,
            Err(e) => return self.error(option, rep::ERR_INVALID, &e.to_string()),
        };
        let Some(export) = self.exports.get(&req.export).cloned() else {
            let msg = format!("no export named {:?}", req.export);
            return self.error(option, rep::ERR_UNKNOWN, &msg);
        };
        let list = option == opt::LIST_META_CONTEXT;
        let selected = if req.queries.is_empty() {
            list
        } else {
            req.queries
                .iter()
                .any(|q| q == BASE_ALLOCATION || (list && q == "base:"))
        };
        if selected {
            let id = if list { 0 } else { BASE_ALLOCATION_ID };
            let d = wire::encode_rep_meta_context(id, BASE_ALLOCATION);
            self.reply(option, rep::META_CONTEXT, &d)?;
        }
        if !list {
            self.meta = selected.then_some((export, BASE_ALLOCATION_ID));
        }
        self.reply(option, rep::ACK, &[])
    }
}

/// Logs the end of a failed handshake at a level that fits its cause.
pub(crate) fn log_failure(conn: u64, e: &ConnError) {
    if e.is_disconnect() {
        debug!("conn {conn}: client left during the handshake");
    } else {
        warn!("conn {conn}: handshake failed: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{Info, OptionReplyHeader};
    use crate::MemDevice;

    fn exports() -> Exports {
        let mut e = Exports::new();
        e.add(Export::new("disk", Arc::new(MemDevice::new(1 << 20))).with_description("a disk"))
            .unwrap();
        e.add(Export::new(
            "ro",
            Arc::new(MemDevice::new(4096).into_read_only()),
        ))
        .unwrap();
        e
    }

    fn option(code: u32, data: &[u8]) -> Vec<u8> {
        let mut v = OptionHeader {
            option: code,
            length: data.len() as u32,
        }
        .encode()
        .to_vec();
        v.extend_from_slice(data);
        v
    }

    /// Runs a scripted client and returns the outcome and the server's bytes
    /// after the greeting.
    fn run(script: &[u8]) -> (Result<Outcome, ConnError>, Vec<u8>) {
        let mut out = Vec::new();
        let res = negotiate(
            &mut &script[..],
            &mut out,
            &exports(),
            &Config::default(),
            &AtomicBool::new(false),
            &|_| Ok(()),
            Start::Greeting,
            0,
        );
        assert_eq!(&out[..8], b"NBDMAGIC");
        (res, out[wire::GREETING_LEN..].to_vec())
    }

    /// Splits option replies.
    fn replies(mut b: &[u8]) -> Vec<(OptionReplyHeader, Vec<u8>)> {
        let mut v = Vec::new();
        while b.len() >= OptionReplyHeader::LEN {
            let h = OptionReplyHeader::parse(&b[..OptionReplyHeader::LEN]).unwrap();
            let end = OptionReplyHeader::LEN + h.length as usize;
            v.push((h, b[OptionReplyHeader::LEN..end].to_vec()));
            b = &b[end..];
        }
        assert!(b.is_empty());
        v
    }

    #[test]
    fn go_with_structured_and_meta() {
        let mut s = 3u32.to_be_bytes().to_vec();
        s.extend(option(opt::STRUCTURED_REPLY, &[]));
        s.extend(option(
            opt::SET_META_CONTEXT,
            &MetaContextRequest {
                export: "disk".into(),
                queries: vec!["base:allocation".into(), "qemu:dirty-bitmap:x".into()],
            }
            .encode(),
        ));
        s.extend(option(99, b"whatever"));
        s.extend(option(
            opt::GO,
            &InfoRequest {
                name: "".into(),
                requests: vec![info::NAME, info::DESCRIPTION, info::BLOCK_SIZE],
            }
            .encode(),
        ));
        let (res, out) = run(&s);
        let Ok(Outcome::Transmission(sess)) = res else {
            panic!("{res:?}")
        };
        assert!(sess.structured);
        assert_eq!(sess.meta_context, Some(BASE_ALLOCATION_ID));
        assert_eq!(sess.export.name(), "disk");
        let r = replies(&out);
        let kinds: Vec<u32> = r.iter().map(|(h, _)| h.reply).collect();
        assert_eq!(
            kinds,
            vec![
                rep::ACK,
                rep::META_CONTEXT,
                rep::ACK,
                rep::ERR_UNSUP,
                rep::INFO,
                rep::INFO,
                rep::INFO,
                rep::INFO,
                rep::ACK
            ]
        );
        assert_eq!(
            Info::parse(&r[4].1).unwrap(),
            Info::Export {
                size: 1 << 20,
                flags: sess.flags
            }
        );
        assert_eq!(Info::parse(&r[5].1).unwrap(), Info::Name("disk".into()));
        assert_eq!(
            Info::parse(&r[6].1).unwrap(),
            Info::Description("a disk".into())
        );
        assert!(matches!(Info::parse(&r[7].1).unwrap(), Info::BlockSize(_)));
    }

    #[test]
    fn export_name_without_zeroes() {
        for (flags, len) in [(3u32, 10usize), (1, 134)] {
            let mut s = flags.to_be_bytes().to_vec();
            s.extend(option(opt::EXPORT_NAME, b"ro"));
            let (res, out) = run(&s);
            let Ok(Outcome::Transmission(sess)) = res else {
                panic!()
            };
            assert_eq!(out.len(), len);
            assert_eq!(&out[..8], &4096u64.to_be_bytes());
            assert_ne!(sess.flags & tf::READ_ONLY, 0);
            assert_eq!(sess.flags & tf::SEND_TRIM, 0);
        }
    }

    #[test]
    fn read_only_export_of_a_writable_device() {
        let mut e = Exports::new();
        e.add(Export::new("frozen", Arc::new(MemDevice::new(8192))).read_only())
            .unwrap();
        let mut out = Vec::new();
        let mut s = 1u32.to_be_bytes().to_vec();
        s.extend(option(opt::EXPORT_NAME, b"frozen"));
        let res = negotiate(
            &mut &s[..],
            &mut out,
            &e,
            &Config::default(),
            &AtomicBool::new(false),
            &|_| Ok(()),
            Start::Greeting,
            0,
        );
        let Ok(Outcome::Transmission(sess)) = res else {
            panic!("{res:?}")
        };
        assert_ne!(sess.flags & tf::READ_ONLY, 0);
        for write_like in [tf::SEND_FUA, tf::SEND_TRIM, tf::SEND_WRITE_ZEROES] {
            assert_eq!(sess.flags & write_like, 0);
        }
        assert_ne!(sess.flags & tf::SEND_FLUSH, 0);
    }

    #[test]
    fn bad_inputs() {
        // Unknown client flag.
        let (res, _) = run(&8u32.to_be_bytes());
        assert!(matches!(res, Err(ConnError::Protocol(_))));
        // Bad option magic.
        let mut s = 1u32.to_be_bytes().to_vec();
        s.extend_from_slice(&[0u8; 16]);
        assert!(matches!(run(&s).0, Err(ConnError::Wire(_))));
        // Unknown export by EXPORT_NAME closes; by GO is an error reply.
        let mut s = 1u32.to_be_bytes().to_vec();
        s.extend(option(
            opt::GO,
            &InfoRequest {
                name: "nope".into(),
                requests: vec![],
            }
            .encode(),
        ));
        s.extend(option(opt::LIST, b"x"));
        s.extend(option(opt::LIST_META_CONTEXT, &[]));
        s.extend(option(opt::ABORT, &[]));
        let (res, out) = run(&s);
        assert!(matches!(res, Ok(Outcome::Aborted)));
        let kinds: Vec<u32> = replies(&out).iter().map(|(h, _)| h.reply).collect();
        assert_eq!(
            kinds,
            vec![
                rep::ERR_UNKNOWN,
                rep::ERR_INVALID,
                rep::ERR_INVALID,
                rep::ACK
            ]
        );
        // Client gone mid-option.
        let mut s = 1u32.to_be_bytes().to_vec();
        s.extend(&option(opt::LIST, &[])[..10]);
        assert!(run(&s).0.unwrap_err().is_disconnect());
    }

    #[test]
    fn list_exports() {
        let mut s = 1u32.to_be_bytes().to_vec();
        s.extend(option(opt::LIST, &[]));
        s.extend(option(opt::ABORT, &[]));
        let (_, out) = run(&s);
        let r = replies(&out);
        assert_eq!(r.len(), 4);
        assert_eq!(&r[0].1[4..8], b"disk");
        assert_eq!(&r[0].1[8..], b"a disk");
        assert_eq!(&r[1].1[4..], b"ro");
    }
}
