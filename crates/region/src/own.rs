//! Which code on a thread is the region's own: its worker threads for their
//! whole life, and any thread while it runs inside an [`OwnCode`] guard
//! (the fork handlers, and a preload library's calls into a region). A
//! library that interposes `mmap` or `malloc` asks [`in_own_code`] and
//! sends the region's own requests to the system, never into a region.
//!
//! Owns one thread-local depth; it makes no system call and allocates
//! nothing (the thread-local is a const-initialised `Cell`, with no
//! destructor to register).

use std::cell::Cell;

thread_local! {
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// Whether the calling thread is running the region's own code now.
pub fn in_own_code() -> bool {
    DEPTH.with(|d| d.get() > 0)
}

/// While it lives, the calling thread counts as running the region's own
/// code. Guards nest.
#[derive(Debug)]
pub struct OwnCode {
    _not_send: std::marker::PhantomData<*const ()>,
}

impl OwnCode {
    /// Marks the calling thread until the guard drops.
    pub fn enter() -> OwnCode {
        DEPTH.with(|d| d.set(d.get() + 1));
        OwnCode {
            _not_send: std::marker::PhantomData,
        }
    }
}

impl Drop for OwnCode {
    fn drop(&mut self) {
        DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guards_nest_and_stay_on_their_thread() {
        assert!(!in_own_code());
        let a = OwnCode::enter();
        let b = OwnCode::enter();
        drop(a);
        assert!(in_own_code());
        assert!(!std::thread::spawn(in_own_code).join().unwrap());
        drop(b);
        assert!(!in_own_code());
    }
}
