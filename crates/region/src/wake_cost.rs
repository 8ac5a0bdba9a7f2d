//! What waking a sleeping thread costs on this machine, measured once per
//! process: the price a fault pays when the handler sleeps, and so what
//! the handler's poll after a fault is weighed against.
//!
//! Two threads hand a token back and forth through two eventfds, each
//! sleeping in `poll(2)` between turns, as a faulting thread and a
//! sleeping handler do. They run on two different CPUs of the process's
//! set (where it has two): left to the scheduler, both may land on one CPU
//! and measure a local switch, several times cheaper than a wake-up across
//! CPUs. A round trip is two wake-ups; the median of the rounds, halved, is
//! the figure. It differs between machines by more than tenfold: a virtual
//! machine whose idle CPUs halt pays an interrupt and a VM exit a wake-up,
//! an emulated guest far more (BENCHMARKS.md, "A region's faults and cold
//! policy").
//!
//! Owns the measurement and its process-wide result; uses the region's
//! eventfd calls (`shared`) and touches no region.

use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::own::OwnCode;
use crate::shared::{drain, kick, new_eventfd};

/// Round trips measured (the first two are warm-up and not counted).
const ROUNDS: usize = 18;

/// The measured cost in nanoseconds; 0 until measured.
static MEASURED_NS: AtomicU64 = AtomicU64::new(0);

/// The cost of one wake-up of a sleeping thread, measured the first time
/// it is asked for in this process (a forked child inherits it); `None`
/// if the measurement could not run (no eventfd, no thread).
pub(crate) fn wake_cost() -> Option<Duration> {
    let known = MEASURED_NS.load(Ordering::Relaxed);
    if known > 0 {
        return Some(Duration::from_nanos(known));
    }
    let ns = measure()?.max(1);
    MEASURED_NS.store(ns, Ordering::Relaxed);
    Some(Duration::from_nanos(ns))
}

/// One of the region's eventfds (`shared::new_eventfd`), closed on drop.
struct EventFd(AtomicI32);

impl EventFd {
    fn new() -> Option<EventFd> {
        new_eventfd().ok().map(|fd| EventFd(AtomicI32::new(fd)))
    }

    fn post(&self) {
        kick(&self.0);
    }

    /// Sleeps until posted, then takes the count; false after a second
    /// without a post, or on an error other than an interruption.
    fn wait(&self) -> bool {
        let fd = self.0.load(Ordering::Relaxed);
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        loop {
            // SAFETY: one valid pollfd.
            let r = unsafe { libc::poll(&mut p, 1, 1000) };
            if r > 0 {
                drain(fd);
                return true;
            }
            if r == 0 || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
                return false;
            }
        }
    }
}

impl Drop for EventFd {
    fn drop(&mut self) {
        // SAFETY: our descriptor, closed once.
        unsafe { libc::close(*self.0.get_mut()) };
    }
}

/// Two different CPUs of the calling thread's set, if it has two.
fn two_cpus() -> Option<(usize, usize)> {
    // SAFETY: an all-zero cpu_set_t is an empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: fills `set`, whose size is passed.
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) } != 0 {
        return None;
    }
    // SAFETY: CPU_ISSET reads the set within its size.
    let mut cpus = (0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) });
    Some((cpus.next()?, cpus.next()?))
}

/// Keeps the calling thread on `cpu` (a thread of the measurement's own).
fn pin(cpu: Option<usize>) {
    let Some(cpu) = cpu else {
        return;
    };
    // SAFETY: an all-zero cpu_set_t is an empty set; CPU_SET writes
    // within it; sched_setaffinity reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set);
    }
}

/// Runs the ping-pong on two threads of its own (the caller's thread is
/// the program's: its CPUs are not changed); the median round trip
/// halved, in nanoseconds.
fn measure() -> Option<u64> {
    let _own = OwnCode::enter();
    let (ping, pong) = (EventFd::new()?, EventFd::new()?);
    let cpus = two_cpus();
    let spawn = |name: &str| {
        std::thread::Builder::new()
            .name(name.into())
            .stack_size(64 * 1024)
    };
    std::thread::scope(|s| {
        let echo = spawn("zmem-wake-echo")
            .spawn_scoped(s, || {
                let _own = OwnCode::enter();
                pin(cpus.map(|c| c.1));
                for _ in 0..ROUNDS {
                    if !ping.wait() {
                        return;
                    }
                    pong.post();
                }
            })
            .ok()?;
        let timer = spawn("zmem-wake-cost").spawn_scoped(s, || {
            let _own = OwnCode::enter();
            pin(cpus.map(|c| c.0));
            let mut trips = [0u64; ROUNDS];
            for t in trips.iter_mut() {
                let t0 = Instant::now();
                ping.post();
                if !pong.wait() {
                    return None;
                }
                *t = t0.elapsed().as_nanos() as u64;
            }
            let counted = &mut trips[2..];
            counted.sort_unstable();
            Some(counted[counted.len() / 2] / 2)
        });
        // Without a timer, the echo thread gives up after a second.
        let got = timer.ok().and_then(|t| t.join().ok().flatten());
        let _ = echo.join();
        got
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wake_up_costs_something_and_is_measured_once() {
        let a = wake_cost().expect("eventfds and a thread are available here");
        assert!(a > Duration::ZERO);
        // Well under the 1 s a lost wake-up would take.
        assert!(a < Duration::from_millis(500), "{a:?}");
        assert_eq!(wake_cost(), Some(a), "the first measurement is kept");
    }
}
