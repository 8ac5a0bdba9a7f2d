//! The object behind a C `struct zs_pool *`: the Rust pool, its name, and the
//! table of read holds that live between `zs_obj_read_begin` and
//! `zs_obj_read_end`.
//!
//! # Holds
//!
//! `zs_obj_read_begin` takes the object's shared hold through
//! [`zs::Pool::read`] and keeps it past the guard with
//! [`zs::ObjectRef::into_raw`]; `zs_obj_read_end` gives it back with
//! [`zs::Pool::release_read`]. Releasing a hold that was never taken would
//! corrupt the object's lock, so every kept hold is counted here, per handle
//! and per address begin returned, under one mutex: end releases only what
//! the table shows outstanding, and a forged or repeated end changes nothing.
//! A held object does not move, so its holds share one address, except in a
//! framed pool (default mode on pages above 4 KiB), where each read of an
//! object across frames returns its own copy.
//! The table is per pool, not per thread, so begin and end may run on
//! different threads, and holds of different handles nest freely.
//!
//! While a handle has holds here, `zs_free` and `zs_obj_write` of it are
//! refused with `-EBUSY` instead of waiting: the waiting thread could be the
//! one holding it, which would never return.
//!
//! This module owns the table and its rules; it does not decode handles or
//! errors (that is `api.rs`'s) and calls the allocator only through its
//! public API.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::ffi::{c_ulong, CString};
use std::sync::{Mutex, MutexGuard};

use zs::{Handle, ObjectRef, Pool};

/// Kept holds of one handle.
#[derive(Debug, Default)]
struct Held {
    /// Each address begin returned and its holds not yet released (one
    /// address, but for a framed pool's copies of an object across frames).
    addrs: Vec<(usize, u32)>,
    /// Holds not yet released, over every address.
    count: u32,
}

/// Why a read could not begin or end.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum HoldError {
    /// The pool refused the read (bad handle, too long).
    Refused,
    /// The object already has the most holds it can have.
    TooMany,
    /// End without a matching begin (or with another address).
    NotHeld,
}

/// A pool created by `zs_create_pool`; C sees it as `struct zs_pool`.
pub struct ZsPool {
    pub(crate) pool: Pool,
    pub(crate) name: CString,
    holds: Mutex<HashMap<c_ulong, Held>>,
}

impl std::fmt::Debug for ZsPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZsPool")
            .field("name", &self.name)
            .field("pool", &self.pool)
            .finish_non_exhaustive()
    }
}

impl ZsPool {
    pub(crate) fn new(pool: Pool, name: CString) -> ZsPool {
        ZsPool {
            pool,
            name,
            holds: Mutex::new(HashMap::new()),
        }
    }

    /// The hold table. A panic while it was locked cannot leave it half
    /// updated (each change is one map operation), so poisoning is ignored.
    fn holds(&self) -> MutexGuard<'_, HashMap<c_ulong, Held>> {
        self.holds.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// True if a read of `raw` has begun and not ended.
    pub(crate) fn is_held(&self, raw: c_ulong) -> bool {
        self.holds().contains_key(&raw)
    }

    /// True if any read has begun and not ended.
    pub(crate) fn any_held(&self) -> bool {
        !self.holds().is_empty()
    }

    /// Takes a shared hold on the first `len` bytes of `handle`'s object and
    /// keeps it; returns their address.
    pub(crate) fn begin_read(&self, handle: Handle, len: usize) -> Result<*mut u8, HoldError> {
        let raw = handle.to_raw();
        // The table stays locked while the pool takes the hold, so the
        // per-object limit cannot be raced past. `read` only waits while a
        // write or free holds the object exclusive, and those never need
        // this table, so the wait is short and cannot deadlock.
        let mut holds = self.holds();
        if holds
            .get(&raw)
            .is_some_and(|h| h.count >= ObjectRef::MAX_PER_OBJECT)
        {
            return Err(HoldError::TooMany);
        }
        let bytes = self
            .pool
            .read(handle, len)
            .map_err(|_| HoldError::Refused)?;
        let addr = bytes.into_raw().cast::<u8>().as_ptr();
        let held = holds.entry(raw).or_default();
        held.count += 1;
        match held.addrs.iter_mut().find(|(a, _)| *a == addr as usize) {
            Some((_, n)) => *n += 1,
            None => held.addrs.push((addr as usize, 1)),
        }
        Ok(addr)
    }

    /// Releases one hold of `handle` kept by [`Self::begin_read`] that
    /// returned `addr`.
    pub(crate) fn end_read(&self, handle: Handle, addr: *const u8) -> Result<(), HoldError> {
        let mut holds = self.holds();
        let Entry::Occupied(mut e) = holds.entry(handle.to_raw()) else {
            return Err(HoldError::NotHeld);
        };
        let held = e.get_mut();
        let Some(at) = held.addrs.iter().position(|&(a, _)| a == addr as usize) else {
            return Err(HoldError::NotHeld);
        };
        held.addrs[at].1 -= 1;
        if held.addrs[at].1 == 0 {
            held.addrs.swap_remove(at);
        }
        held.count -= 1;
        if held.count == 0 {
            e.remove();
        }
        // SAFETY: the table counted an outstanding hold of this handle, kept
        // by `begin_read` on this pool with `into_raw`; the count went down by
        // one under the table lock, so each kept hold is released once. The
        // C caller's contract is not to use the address after end.
        unsafe { self.pool.release_read(handle) };
        Ok(())
    }
}
