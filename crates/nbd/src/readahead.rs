//! The reading side of a connection: a small read-ahead buffer for request
//! headers, and payloads read straight into the buffer they are used from.
//!
//! This module owns how bytes come off a connection's stream. Request
//! headers are small and come in bursts, so they are read through a buffer:
//! one system call takes many. A WRITE payload is large, and going through
//! that buffer would copy it once more (the socket copies it already);
//! [`ReadAhead::read_payload`] takes what the buffer holds, then reads the
//! rest of the payload straight into the caller's buffer with one vectored
//! read that also asks for [`PAYLOAD_TAIL`] bytes after it into the
//! read-ahead buffer, so that the next request's header usually arrives
//! with the payload's last bytes, without a system call of its own. It knows
//! nothing of the protocol.

use std::io::{self, IoSliceMut, Read};

/// Size of the read-ahead buffer: a burst of 28- or 32-byte request
/// headers (hundreds of them) costs one system call, and at most this much
/// of a payload that arrives with a header is copied.
pub(crate) const READ_AHEAD: usize = 16 * 1024;

/// Bytes asked for after a payload, into the read-ahead buffer: room for the
/// next request's header and a little more.
pub(crate) const PAYLOAD_TAIL: usize = 4096;

/// A stream with a read-ahead buffer in front of it.
pub(crate) struct ReadAhead<R> {
    inner: R,
    buf: Box<[u8]>,
    /// `buf[pos..filled]` is read from the stream and not yet consumed.
    pos: usize,
    filled: usize,
}

impl<R: Read> ReadAhead<R> {
    /// `inner` with an empty buffer of [`READ_AHEAD`] bytes.
    pub(crate) fn new(inner: R) -> ReadAhead<R> {
        ReadAhead {
            inner,
            buf: vec![0u8; READ_AHEAD].into_boxed_slice(),
            pos: 0,
            filled: 0,
        }
    }

    /// The bytes read from the stream and not yet consumed.
    pub(crate) fn buffer(&self) -> &[u8] {
        &self.buf[self.pos..self.filled]
    }

    /// Fills all of `out`: first from the buffer, then straight from the
    /// stream (the buffer takes up to [`PAYLOAD_TAIL`] bytes that follow).
    /// An end of stream before `out` is full is `UnexpectedEof`.
    pub(crate) fn read_payload(&mut self, out: &mut [u8]) -> io::Result<()> {
        let n = self.buffer().len().min(out.len());
        out[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
        self.pos += n;
        let mut got = n;
        while got < out.len() {
            // The buffer is empty here: the copy above took all of it.
            let rest = &mut out[got..];
            let want = rest.len();
            let (head, _) = self.buf.split_at_mut(PAYLOAD_TAIL.min(READ_AHEAD));
            let mut iov = [IoSliceMut::new(rest), IoSliceMut::new(head)];
            match self.inner.read_vectored(&mut iov) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(k) if k <= want => got += k,
                Ok(k) => {
                    got += want;
                    self.pos = 0;
                    self.filled = k - want;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

impl<R: Read> Read for ReadAhead<R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.pos == self.filled {
            if out.len() >= self.buf.len() {
                // Nothing buffered and a long read: no point in copying.
                return self.inner.read(out);
            }
            self.filled = self.inner.read(&mut self.buf)?;
            self.pos = 0;
        }
        let n = self.buffer().len().min(out.len());
        out[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream that returns at most `step` bytes per call, and counts
    /// its calls (vectored reads fill every slice in turn, like `readv`).
    struct Trickle<'a> {
        data: &'a [u8],
        step: usize,
        calls: usize,
    }

    impl Read for Trickle<'_> {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            self.read_vectored(&mut [IoSliceMut::new(out)])
        }

        fn read_vectored(&mut self, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
            self.calls += 1;
            let mut budget = self.step.min(self.data.len());
            let mut n = 0;
            for b in bufs.iter_mut() {
                let k = b.len().min(budget);
                b[..k].copy_from_slice(&self.data[..k]);
                self.data = &self.data[k..];
                budget -= k;
                n += k;
            }
            Ok(n)
        }
    }

    fn bytes(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 + i / 251) as u8).collect()
    }

    #[test]
    fn headers_and_payloads_come_back_in_order_whatever_the_chunking() {
        // Requests of a 32-byte header and a payload of varying size.
        let sizes = [0usize, 1, 4096, 100_000, 3, 262_144, 17];
        let mut stream = Vec::new();
        for (i, &s) in sizes.iter().enumerate() {
            stream.extend(std::iter::repeat_n(i as u8, 32));
            stream.extend(bytes(s));
        }
        for step in [1, 7, 32, 4096, 65_536, usize::MAX] {
            let mut r = ReadAhead::new(Trickle {
                data: &stream,
                step,
                calls: 0,
            });
            for (i, &s) in sizes.iter().enumerate() {
                let mut header = [0u8; 32];
                r.read_exact(&mut header).unwrap();
                assert_eq!(header, [i as u8; 32], "step {step}, request {i}");
                let mut payload = vec![0xAAu8; s];
                r.read_payload(&mut payload).unwrap();
                assert!(payload == bytes(s), "step {step}, request {i}");
            }
            let mut end = [0u8; 1];
            assert_eq!(r.read(&mut end).unwrap(), 0);
        }
    }

    #[test]
    fn the_next_header_arrives_with_the_payloads_last_bytes() {
        // Two 256 KiB writes; the stream hands over everything it has.
        let mut stream = Vec::new();
        for i in 0..2u8 {
            stream.extend([i; 32]);
            stream.extend(bytes(262_144));
        }
        let mut r = ReadAhead::new(Trickle {
            data: &stream,
            step: usize::MAX,
            calls: 0,
        });
        let mut header = [0u8; 32];
        r.read_exact(&mut header).unwrap();
        let mut payload = vec![0u8; 262_144];
        r.read_payload(&mut payload).unwrap();
        // One fill for the header (and the payload's first bytes), one
        // vectored read for the rest of the payload and the next header.
        assert_eq!(r.inner.calls, 2);
        assert!(r.buffer().len() >= 32, "the next header is buffered");
        r.read_exact(&mut header).unwrap();
        assert_eq!(header, [1u8; 32]);
        assert_eq!(r.inner.calls, 2, "no system call for the next header");
        r.read_payload(&mut payload).unwrap();
        assert!(payload == bytes(262_144));
    }

    #[test]
    fn a_stream_ending_inside_a_payload_is_unexpected_eof() {
        let stream = bytes(1000);
        let mut r = ReadAhead::new(Trickle {
            data: &stream,
            step: 300,
            calls: 0,
        });
        let mut payload = vec![0u8; 2000];
        let e = r.read_payload(&mut payload).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
    }
}
