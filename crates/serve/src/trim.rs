//! Giving idle memory back to the OS: the thread that, once a server's I/O
//! goes quiet, drops the stores' idle compression contexts and trims the C
//! heap (`malloc_trim`), and the one-arena setting that lets the trim reach
//! every free page.
//!
//! The only module of this crate with `unsafe` code: the two glibc calls
//! (`mallopt`, `malloc_trim`), each with its SAFETY argument.

use std::io;
use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::registry::Registry;

/// Gives idle memory back to the OS once I/O goes quiet.
///
/// Two kinds of memory serve a burst of I/O and nothing after it:
/// - request buffers (up to tens of MiB while a client streams data), freed
///   to glibc's arenas, which keep most of them;
/// - the stores' compression contexts: zstd's at level 3 on 32 KiB pages is
///   about 0.5 MiB each (workspace, decompression context, scratch), one
///   per stripe, four on two CPUs: 1.9 MiB resident after a write, 3% of
///   the compressed data of a 256 MiB disk.
///
/// A RAM disk that exists to save memory should not sit on them. Every
/// [`IDLE_TICK`] the thread compares the stores' page I/O counts; after a
/// tick with no I/O following some, it drops the contexts no thread holds
/// (`Store::release_idle_streams`), then calls [`release_free_heap`], which
/// returns every free page of every arena. Doing this only when idle keeps
/// it off the I/O path (a fixed mmap threshold would trim per request and
/// cost 15-45% more CPU); the next burst makes its contexts again, a few
/// tens of microseconds per stripe.
#[derive(Debug)]
pub struct Trimmer {
    stop: Sender<()>,
    thread: JoinHandle<()>,
}

/// How often the [`Trimmer`] compares the stores' I/O counts.
pub const IDLE_TICK: Duration = Duration::from_millis(250);

impl Trimmer {
    /// Starts the thread (named `trim`) watching the stores `registry`
    /// serves.
    pub fn start(registry: Arc<Registry>) -> io::Result<Trimmer> {
        let (stop, rx) = channel::<()>();
        let thread = std::thread::Builder::new()
            .name("trim".into())
            .spawn(move || {
                let io = || -> u64 {
                    registry
                        .served()
                        .iter()
                        .map(|s| {
                            let (r, w) = s.store.io_counts();
                            r.wrapping_add(w)
                        })
                        .fold(0u64, u64::wrapping_add)
                };
                let mut last = io();
                let mut dirty = false;
                while let Err(RecvTimeoutError::Timeout) = rx.recv_timeout(IDLE_TICK) {
                    let now = io();
                    if now != last {
                        last = now;
                        dirty = true;
                    } else if dirty {
                        dirty = false;
                        let contexts: usize = registry
                            .served()
                            .iter()
                            .map(|s| s.store.release_idle_streams())
                            .sum();
                        log::debug!("idle: released {contexts} compression context(s)");
                        release_free_heap();
                    }
                }
            })?;
        Ok(Trimmer { stop, thread })
    }

    /// Stops the thread and waits for it.
    pub fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.thread.join();
    }
}

/// Puts every thread's allocations in glibc's main arena, so that
/// [`release_free_heap`] can give all free heap memory back: `malloc_trim`
/// leaves the free top of each per-thread arena resident (measured: about
/// 5 MiB per NBD connection thread after a 256 MiB copy), while the main
/// arena's top is trimmed. The server allocates little (a buffer per
/// request), so one arena costs no measurable CPU. Call it before any
/// thread starts. Does nothing off glibc.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn one_heap_arena() {
    // SAFETY: mallopt only sets a glibc tunable; no thread allocates
    // concurrently yet.
    if unsafe { libc::mallopt(libc::M_ARENA_MAX, 1) } != 1 {
        log::warn!("mallopt(M_ARENA_MAX, 1) failed; idle memory may stay resident");
    }
}

/// Puts every thread's allocations in one heap arena: nothing to do off
/// glibc.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn one_heap_arena() {}

/// Gives every free page of the C heap back to the OS (`malloc_trim(0)`).
/// Does nothing off glibc.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn release_free_heap() {
    // SAFETY: malloc_trim only walks glibc's own arenas under their locks
    // and has no preconditions.
    let released = unsafe { libc::malloc_trim(0) };
    log::debug!("idle: malloc_trim released memory: {}", released != 0);
}

/// Gives the free C heap back to the OS: nothing to do off glibc.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn release_free_heap() {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_and_stops_with_nothing_served() {
        let registry = Arc::new(Registry::default());
        let trimmer = Trimmer::start(registry.clone()).expect("spawn");
        std::thread::sleep(IDLE_TICK * 2);
        trimmer.stop();
        // The thread has exited and dropped its reference.
        assert_eq!(Arc::strong_count(&registry), 1);
    }
}
