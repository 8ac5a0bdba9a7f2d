//! Payload buffers a connection reuses while its requests stream.
//!
//! This module owns the READ and WRITE payload buffers of one connection.
//! A fresh `vec![0; len]` per request costs a zero-fill of every byte (and,
//! when the allocator has trimmed its heap, a page fault per page) before
//! the socket or the device overwrites them all; under a client that keeps
//! dozens of requests in flight that is 3-4% of a write's CPU and more of a
//! read's. [`Buffers`] hands out [`Lease`]s instead: a buffer given back is
//! kept and lent again, and only bytes a buffer has never held are zeroed.
//!
//! Nothing is kept while the connection is idle: when the last lease comes
//! back, every kept buffer is freed, so an open but quiet connection holds no
//! payload memory. While requests are in flight, at most [`KEEP_BYTES`] are
//! kept on top of the leases out.
//!
//! A lent buffer holds bytes of this connection's earlier requests (data the
//! client wrote, or read from its own export) until they are overwritten:
//! callers fill the whole lease before sending any of it. It knows nothing
//! of the protocol.

use std::ops::{Deref, DerefMut};
use std::sync::Mutex;

/// Most bytes kept for reuse, beyond the buffers lent out.
pub(crate) const KEEP_BYTES: usize = 16 << 20;

/// One connection's reusable payload buffers.
#[derive(Default)]
pub(crate) struct Buffers {
    state: Mutex<Kept>,
}

#[derive(Default)]
struct Kept {
    /// Buffers given back; every byte of each is initialized.
    free: Vec<Vec<u8>>,
    /// Their total length.
    bytes: usize,
    /// Leases not yet given back.
    out: usize,
}

impl Buffers {
    fn state(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Lends a buffer of `len` bytes whose contents are unspecified.
    pub(crate) fn take(&self, len: usize) -> Lease<'_> {
        let mut buf = {
            let mut k = self.state();
            k.out += 1;
            // A kept buffer long enough if there is one (the newest such),
            // so that mixed request sizes do not regrow small buffers.
            let fit = k.free.iter().rposition(|b| b.len() >= len);
            let b = match fit {
                Some(i) => k.free.swap_remove(i),
                None => k.free.pop().unwrap_or_default(),
            };
            k.bytes -= b.len();
            b
        };
        if buf.len() < len {
            // Only the bytes this buffer never held are zeroed.
            buf.resize(len, 0);
        }
        Lease {
            buf,
            len,
            from: self,
        }
    }

    fn give(&self, buf: Vec<u8>) {
        let mut k = self.state();
        k.out -= 1;
        if k.out == 0 {
            // Idle: keep nothing.
            let free = std::mem::take(&mut k.free);
            k.bytes = 0;
            drop(k);
            drop(free);
        } else if k.bytes + buf.len() <= KEEP_BYTES {
            k.bytes += buf.len();
            k.free.push(buf);
        }
    }

    /// Buffers kept for reuse and their total length (for tests).
    #[cfg(test)]
    fn kept(&self) -> (usize, usize) {
        let k = self.state();
        (k.free.len(), k.bytes)
    }
}

/// A buffer lent by [`Buffers`], `len` bytes long; it goes back when
/// dropped.
pub(crate) struct Lease<'b> {
    /// Initialized to its full length, which may exceed `len`.
    buf: Vec<u8>,
    len: usize,
    from: &'b Buffers,
}

impl Deref for Lease<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl DerefMut for Lease<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.buf[..self.len]
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        self.from.give(std::mem::take(&mut self.buf));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_given_back_is_lent_again_without_losing_its_length() {
        let b = Buffers::default();
        let first = b.take(100);
        let mut second = b.take(300);
        second.fill(7);
        let addr = second.as_ptr();
        drop(second);
        // `first` is still out, so the 300-byte buffer is kept.
        assert_eq!(b.kept(), (1, 300));
        let third = b.take(200);
        assert_eq!(third.len(), 200);
        assert_eq!(third.as_ptr(), addr, "the kept buffer is reused");
        assert!(third.iter().all(|&x| x == 7), "no zero-fill on reuse");
        drop(third);
        // A longer request than the kept buffer extends it.
        let fourth = b.take(400);
        assert_eq!(fourth.len(), 400);
        assert!(fourth[..300].iter().all(|&x| x == 7));
        assert!(fourth[300..].iter().all(|&x| x == 0));
        drop(fourth);
        drop(first);
    }

    #[test]
    fn a_long_enough_buffer_is_preferred() {
        let b = Buffers::default();
        let hold = b.take(1);
        let (big, small) = (b.take(1000), b.take(10));
        let big_addr = big.as_ptr();
        drop(big);
        drop(small);
        // The small buffer was given back last; a long request still gets
        // the long buffer instead of regrowing the small one.
        let again = b.take(900);
        assert_eq!(again.as_ptr(), big_addr);
        assert_eq!(b.kept(), (1, 10));
        drop(again);
        drop(hold);
    }

    #[test]
    fn nothing_is_kept_once_the_last_lease_is_back() {
        let b = Buffers::default();
        let leases: Vec<_> = (0..5).map(|_| b.take(1000)).collect();
        let mut it = leases.into_iter();
        drop(it.next());
        drop(it.next());
        assert_eq!(b.kept(), (2, 2000));
        drop(it);
        assert_eq!(b.kept(), (0, 0));
    }

    #[test]
    fn kept_bytes_stay_under_the_cap() {
        let b = Buffers::default();
        let hold = b.take(1);
        let big: Vec<_> = (0..3).map(|_| b.take(KEEP_BYTES / 2)).collect();
        drop(big);
        let (n, bytes) = b.kept();
        assert_eq!(n, 2);
        assert!(bytes <= KEEP_BYTES);
        drop(hold);
        assert_eq!(b.kept(), (0, 0));
    }
}
