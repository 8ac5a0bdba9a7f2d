//! Payload buffers a connection reuses while its requests stream.
//!
//! This module owns the READ and WRITE payload buffers of one connection.
//! A fresh `vec![0; len]` per request costs a zero-fill of every byte (and,
//! when the allocator has trimmed its heap, a page fault per page) before
//! the socket or the device overwrites them all; under a client that keeps
//! dozens of requests in flight that is a visible share of a write's CPU
//! and more of a read's. [`Buffers`] hands out [`Lease`]s instead: a buffer given back is
//! kept and lent again, and only bytes a buffer has never held are zeroed.
//!
//! Nothing is kept while the connection is idle: when the last lease comes
//! back, every kept buffer is freed, so an open but quiet connection holds no
//! payload memory. While requests are in flight, at most [`KEEP_BYTES`] are
//! kept on top of the leases out, and lent plus kept bytes stay under the
//! connection's cap (its budget plus [`SLACK_BYTES`]): kept buffers are
//! freed rather than grow past it. Every byte allocated is first granted by
//! the server-wide budget (`budget::ServerBudget`) and given back when freed,
//! so the budget counts the buffers that exist, kept ones included; a
//! connection about to wait for it first frees what it keeps, and nothing is
//! kept while anyone waits.
//!
//! A lent buffer holds bytes of this connection's earlier requests (data the
//! client wrote, or read from its own export) until they are overwritten:
//! callers fill the whole lease before sending any of it. It knows nothing
//! of the protocol.

use std::ops::{Deref, DerefMut};
use std::sync::Mutex;

use crate::budget::ServerBudget;

/// Most bytes kept for reuse, beyond the buffers lent out.
pub(crate) const KEEP_BYTES: usize = 16 << 20;

/// Most bytes by which the buffers lent out may exceed what their requests
/// asked for (a kept buffer is lent for a shorter request rather than
/// allocating a new one).
pub(crate) const SLACK_BYTES: usize = 1 << 20;

/// One connection's reusable payload buffers.
pub(crate) struct Buffers<'s> {
    state: Mutex<Kept>,
    /// Most bytes lent and kept at once, beyond [`SLACK_BYTES`].
    cap: usize,
    /// Where every byte this connection allocates is granted first.
    server: &'s ServerBudget,
}

#[derive(Default)]
struct Kept {
    /// Buffers given back; every byte of each is initialized.
    free: Vec<Vec<u8>>,
    /// Their total length.
    bytes: usize,
    /// Leases not yet given back.
    out: usize,
    /// Total length of the buffers lent out.
    out_bytes: usize,
    /// How much longer the buffers lent out are than what was asked for.
    excess: usize,
}

impl<'s> Buffers<'s> {
    /// Buffers of one connection whose bound is `cap` bytes, allocated
    /// within `server`'s budget.
    pub(crate) fn new(cap: usize, server: &'s ServerBudget) -> Buffers<'s> {
        Buffers {
            state: Mutex::new(Kept::default()),
            cap,
            server,
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Frees kept buffers and returns their bytes to the server's budget.
    fn free(&self, bufs: Vec<Vec<u8>>) {
        let n: usize = bufs.iter().map(Vec::len).sum();
        drop(bufs);
        self.server.release(n as u64);
    }

    /// Lends a buffer of `len` bytes whose contents are unspecified. Bytes
    /// not yet allocated are granted by the server's budget first (waiting
    /// for them if needed); `len` must already be admitted by the
    /// connection's own budget.
    pub(crate) fn take(&self, len: usize) -> Lease<'_> {
        let (mut buf, grow, unused) = {
            let mut k = self.state();
            // A kept buffer long enough if there is one (the newest such),
            // so that mixed request sizes do not regrow small buffers; but
            // only while the lent buffers' excess stays small.
            let room = SLACK_BYTES - k.excess;
            let fit = k
                .free
                .iter()
                .rposition(|b| b.len() >= len && b.len() - len <= room);
            let b = match fit {
                Some(i) => k.free.swap_remove(i),
                None => match k.free.iter().rposition(|b| b.len() < len) {
                    Some(i) => k.free.swap_remove(i),
                    None => Vec::new(),
                },
            };
            k.bytes -= b.len();
            let grow = len.saturating_sub(b.len());
            // Keep lent and kept bytes under the cap: free kept buffers
            // first (oldest first) rather than grow past it.
            let mut unused = Vec::new();
            while !k.free.is_empty() && k.out_bytes + k.bytes + b.len() + grow > self.cap {
                let old = k.free.remove(0);
                k.bytes -= old.len();
                unused.push(old);
            }
            let lent = b.len().max(len);
            k.out += 1;
            k.out_bytes += lent;
            k.excess += lent - len;
            (b, grow, unused)
        };
        self.free(unused);
        if grow > 0 {
            let grow = grow as u64;
            if !self.server.try_acquire(grow) {
                // Before waiting for others, give back what this connection
                // keeps idle.
                let kept = {
                    let mut k = self.state();
                    k.bytes = 0;
                    std::mem::take(&mut k.free)
                };
                self.free(kept);
                self.server.acquire(grow);
            }
            // Only the bytes this buffer never held are zeroed.
            buf.resize(len, 0);
        }
        Lease {
            buf,
            len,
            from: self,
        }
    }

    fn give(&self, buf: Vec<u8>, len: usize) {
        let mut k = self.state();
        k.out -= 1;
        k.out_bytes -= buf.len();
        k.excess -= buf.len() - len;
        let mut unused = Vec::new();
        if k.out == 0 {
            // Idle: keep nothing.
            unused = std::mem::take(&mut k.free);
            k.bytes = 0;
            unused.push(buf);
        } else if k.bytes + buf.len() <= KEEP_BYTES
            && k.out_bytes + k.bytes + buf.len() <= self.cap
            && !self.server.has_waiters()
        {
            k.bytes += buf.len();
            k.free.push(buf);
        } else {
            unused.push(buf);
        }
        drop(k);
        self.free(unused);
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
    from: &'b Buffers<'b>,
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
        self.from.give(std::mem::take(&mut self.buf), self.len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `f` on buffers with no bound of their own.
    fn with_buffers(f: impl FnOnce(&Buffers<'_>)) {
        let server = ServerBudget::unlimited();
        f(&Buffers::new(usize::MAX / 4, &server));
        assert_eq!(server.stats().in_use, 0, "every byte went back");
    }

    #[test]
    fn a_buffer_given_back_is_lent_again_without_losing_its_length() {
        with_buffers(|b| {
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
        });
    }

    #[test]
    fn a_long_enough_buffer_is_preferred() {
        with_buffers(|b| {
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
        });
    }

    #[test]
    fn nothing_is_kept_once_the_last_lease_is_back() {
        with_buffers(|b| {
            let leases: Vec<_> = (0..5).map(|_| b.take(1000)).collect();
            let mut it = leases.into_iter();
            drop(it.next());
            drop(it.next());
            assert_eq!(b.kept(), (2, 2000));
            drop(it);
            assert_eq!(b.kept(), (0, 0));
        });
    }

    #[test]
    fn kept_bytes_stay_under_the_cap() {
        with_buffers(|b| {
            let hold = b.take(1);
            let big: Vec<_> = (0..3).map(|_| b.take(KEEP_BYTES / 2)).collect();
            drop(big);
            let (n, bytes) = b.kept();
            assert_eq!(n, 2);
            assert!(bytes <= KEEP_BYTES);
            drop(hold);
            assert_eq!(b.kept(), (0, 0));
        });
    }

    #[test]
    fn every_byte_is_granted_by_the_server_budget_and_given_back() {
        let server = ServerBudget::new(1 << 20);
        let b = Buffers::new(600 << 10, &server);
        let hold = b.take(100 << 10);
        let two: Vec<_> = (0..2).map(|_| b.take(200 << 10)).collect();
        assert_eq!(server.stats().in_use, 500 << 10);
        drop(two);
        // Kept for reuse while `hold` is out, and still counted.
        assert_eq!(b.kept(), (2, 400 << 10));
        assert_eq!(server.stats().in_use, 500 << 10);
        // A request that would take lent and kept bytes over the cap frees
        // kept buffers instead of growing past it.
        let big = b.take(450 << 10);
        assert!(server.stats().in_use <= 600 << 10);
        drop(big);
        drop(hold);
        assert_eq!(b.kept(), (0, 0));
        assert_eq!(server.stats().in_use, 0);
        assert_eq!(server.stats().peak, 550 << 10);
    }

    #[test]
    fn a_long_kept_buffer_is_not_lent_for_a_much_shorter_request() {
        with_buffers(|b| {
            let hold = b.take(1);
            let long = b.take(SLACK_BYTES + 8192);
            let addr = long.as_ptr();
            drop(long);
            // Lending it for 4 KiB would hold more than the slack beyond
            // what was asked for.
            let short = b.take(4096);
            assert_ne!(short.as_ptr(), addr);
            drop(short);
            drop(hold);
        });
    }
}
