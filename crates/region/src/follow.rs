//! Where the fault handler runs: on the CPU of the thread that faults most.
//!
//! A faulting thread blocks until the handler has served it. With the
//! handler on another CPU, every fault pays two cross-CPU wake-ups (the
//! handler's, then the faulting thread's); on a virtual machine whose idle
//! CPUs halt, each is an interrupt and an exit. With the handler on the
//! faulting thread's CPU, that CPU is free the moment the thread blocks, and
//! the handler's wake-up is a local switch. The thread's own wake-up stays
//! local only if its CPU counts as free while the handler still runs there,
//! else the scheduler moves the thread to the idle CPU and the next fault is
//! cross-CPU again: so on a followed CPU the handler runs as `SCHED_IDLE`,
//! which the scheduler treats as free, and the woken thread preempts it.
//! What that saves is what a cross-CPU wake-up costs at the time: it wins
//! where wake-ups are dear (a TCG guest, where every one is emulated) and
//! loses where they are cheap (BENCHMARKS.md, "A region's faults and cold
//! policy" and "`zmem bench region`"). So it is off unless asked for
//! (`RegionConfig::handler_follows`).
//!
//! The steering: the handler counts whose faults it serves (the kernel
//! names the faulting thread with `UFFD_FEATURE_THREAD_ID`); every
//! [`PERIOD_NS`], if one thread sent at least three in four of them, it
//! moves onto the CPU that thread last ran on (`/proc/self/task/TID/stat`,
//! read without allocating). With no such thread, or after [`QUIET_NS`]
//! without a fault, it goes back to the CPUs and the policy it started
//! with. On a followed CPU it does not poll: spinning there would keep the
//! very thread it serves off its CPU.
//!
//! The danger: a `SCHED_IDLE` thread gets almost no CPU while any other
//! thread wants its CPU, so a fault from a second thread, or from the
//! followed one while a CPU-bound program shares the CPU, could wait long.
//! So the handler leaves the CPU, and stops following for [`BACKOFF_NS`]
//! (doubled each time in a row), when the followed thread waited for its
//! CPU more than an eighth of a period, when the handler waited longer
//! than that thread ran plus an eighth (on a followed CPU it waits only
//! while the thread runs), or when work outside the process kept more than
//! half a CPU busy over the last [`MACHINE_PERIODS`] periods. A starved
//! handler cannot look, so the evictor watches too
//! ([`FollowState::watch`]): while the handler is pinned it checks every
//! [`WATCH_MS`] ms and sets a handler that reads too little, or that has
//! served one batch too long, back to `SCHED_OTHER`.
//! Leaving `SCHED_IDLE` needs `CAP_SYS_NICE` or an `RLIMIT_NICE` of 20; a
//! process with neither does not follow.
//!
//! Owns the handler's CPU affinity and scheduling policy and the fault
//! counts that steer them; touches no page state and takes no lock.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering};

use crate::procfs;

/// How often the handler looks at whom it served.
pub(crate) const PERIOD_NS: u64 = 10_000_000;

/// Faults a period needs before it moves the handler.
const MIN_FAULTS: u32 = 16;

/// Threads counted per period.
const TRACKED: usize = 8;

/// How long the handler stays on a followed CPU without a fault.
pub(crate) const QUIET_NS: u64 = 20_000_000;

/// How often the evictor checks a pinned handler, in milliseconds.
pub(crate) const WATCH_MS: u64 = 2;

/// How long following stops after the evictor found the handler starved
/// or the followed thread waited for its CPU; doubled for each time in a
/// row, up to 64 times.
const BACKOFF_NS: u64 = 1_000_000_000;

/// A stretch on a followed CPU this long without trouble forgets the
/// earlier backoffs.
const SETTLED_NS: u64 = 1_000_000_000;

/// How often the handler looks at the machine's other work, in periods.
const MACHINE_PERIODS: u32 = 10;

/// Fewer wake-ups than this across [`UNREAD_CHECKS`] checks in a row that
/// all found a fault unread: the handler is starved. (Serving a fault
/// storm, it wakes tens of times a millisecond natively, and still several
/// times a millisecond in a guest under emulation; a lone fault is read
/// within microseconds.)
const STARVED_WAKES: u64 = 4;

/// Checks in a row that must find a fault unread.
const UNREAD_CHECKS: u32 = 3;

/// Serving one batch of messages longer than this: the handler was
/// preempted in the middle (a batch takes microseconds natively, a few
/// milliseconds at most under emulation).
const STUCK_NS: u64 = 8_000_000;

/// What the handler and the evictor share about the handler's placement.
#[derive(Debug, Default)]
pub(crate) struct FollowState {
    /// The handler's thread id (0 before it starts).
    tid: AtomicI32,
    /// The evictor's, kept off a followed CPU (0 before it starts).
    evictor_tid: AtomicI32,
    /// Whether the handler follows faulting threads at all.
    enabled: AtomicBool,
    /// Whether it is pinned as `SCHED_IDLE` now.
    pinned: AtomicBool,
    /// Its wake-ups so far (changes whenever it reads its descriptor).
    wakes: AtomicU64,
    /// Set by the evictor when it gave a starved handler its policy back.
    rescued: AtomicBool,
    /// Times that happened.
    rescues: AtomicU64,
    /// When the handler began serving what it read (ns on the region's
    /// clock, plus one), 0 while it is not serving.
    busy_since: AtomicU64,
    /// The evictor's checks in a row that found a fault pending, and the
    /// wake count at the first of them.
    pending_checks: AtomicU32,
    streak_wakes: AtomicU64,
}

impl FollowState {
    /// Whether the handler is pinned (the evictor then watches it).
    pub(crate) fn pinned(&self) -> bool {
        self.pinned.load(Ordering::Acquire)
    }

    /// Whether the handler follows faulting threads (asked for, more than
    /// one CPU allowed, and `SCHED_IDLE` can be left).
    pub(crate) fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Acquire)
    }

    /// Times the evictor found the handler starved.
    pub(crate) fn rescues(&self) -> u64 {
        self.rescues.load(Ordering::Relaxed)
    }

    /// Names the calling thread as the evictor.
    pub(crate) fn evictor_started(&self) {
        // SAFETY: gettid has no arguments.
        self.evictor_tid
            .store(unsafe { libc::gettid() }, Ordering::Release);
    }

    /// The handler begins serving what it read, at `now` (ns on the
    /// region's clock).
    pub(crate) fn busy(&self, now: u64) {
        self.busy_since.store(now + 1, Ordering::Relaxed);
    }

    /// The handler has served what it read.
    pub(crate) fn done(&self) {
        self.busy_since.store(0, Ordering::Relaxed);
    }

    /// Counts one wake-up of the handler.
    pub(crate) fn woke(&self) {
        self.wakes.fetch_add(1, Ordering::Relaxed);
    }

    /// The evictor's check, every [`WATCH_MS`] while the handler is pinned,
    /// at `now` (ns on the region's clock): `pending` says whether the
    /// userfaultfd has an unread fault now. The handler is starved if
    /// [`UNREAD_CHECKS`] checks in a row found a fault pending and it woke
    /// fewer than [`STARVED_WAKES`] times since the first, or if it has
    /// been serving what it read for longer than [`STUCK_NS`] (a
    /// `SCHED_IDLE` thread can be preempted in the middle). Then its policy
    /// goes back to `SCHED_OTHER` (its affinity it restores itself, once it
    /// runs).
    pub(crate) fn watch(&self, pending: bool, now: u64) {
        let wakes = self.wakes.load(Ordering::Relaxed);
        let streak = if pending {
            self.pending_checks.fetch_add(1, Ordering::Relaxed) + 1
        } else {
            self.pending_checks.store(0, Ordering::Relaxed);
            0
        };
        if streak == 1 {
            self.streak_wakes.store(wakes, Ordering::Relaxed);
        }
        let woke = wakes.wrapping_sub(self.streak_wakes.load(Ordering::Relaxed));
        let unread = streak >= UNREAD_CHECKS && woke < STARVED_WAKES;
        if streak >= UNREAD_CHECKS && !unread {
            // A long streak is judged window by window: this check starts
            // the next.
            self.pending_checks.store(1, Ordering::Relaxed);
            self.streak_wakes.store(wakes, Ordering::Relaxed);
        }
        let since = self.busy_since.load(Ordering::Relaxed);
        let stuck = since != 0 && now.saturating_sub(since - 1) > STUCK_NS;
        if !((stuck || unread) && self.pinned()) {
            return;
        }
        let tid = self.tid.load(Ordering::Acquire);
        if tid != 0 && set_policy(tid, false) {
            self.rescued.store(true, Ordering::Release);
            self.rescues.fetch_add(1, Ordering::Relaxed);
            self.pending_checks.store(0, Ordering::Relaxed);
        }
    }
}

/// The handler's placement.
pub(crate) struct Follow {
    enabled: bool,
    /// The CPUs the handler started with, restored when it stops following.
    start_mask: libc::cpu_set_t,
    /// The CPU it is pinned to, if following.
    pinned: Option<usize>,
    period_start: u64,
    /// The last fault, and the end of a backoff.
    last_fault: u64,
    backoff_until: u64,
    /// The period's faults by thread: the first [`TRACKED`] threads seen,
    /// exactly; faults from any other count only in `faults`.
    tids: [(u32, u32); TRACKED],
    faults: u32,
    /// Backoffs in a row, and when the handler last pinned itself.
    troubles: u32,
    pinned_since: u64,
    /// The last period's leader and its times then; the handler's own
    /// times then, and its thread id.
    leader_times: (u32, Times),
    own_times: Times,
    own_tid: u32,
    /// Times the handler left a CPU because other work wanted it.
    contended: u64,
    /// Reads a thread's times ([`sched_times`]; tests give their own).
    times_of: fn(u32) -> Option<Times>,
    /// The machine's busy time and this process's, in clock ticks, at the
    /// last look; periods since; and whether other work kept more than
    /// half a CPU busy then.
    machine: (u64, u64),
    machine_periods: u32,
    machine_busy: bool,
    /// Reads them ([`machine_ticks`]; tests give their own).
    machine_of: fn() -> Option<(u64, u64)>,
    moves: u64,
}

impl Follow {
    /// Placement for the calling thread (the handler); `enabled` false
    /// leaves it wherever the scheduler puts it, and so does a thread
    /// allowed on one CPU only or unable to leave `SCHED_IDLE`.
    pub(crate) fn new(enabled: bool, now: u64, state: &FollowState) -> Follow {
        // SAFETY: gettid has no arguments.
        state
            .tid
            .store(unsafe { libc::gettid() }, Ordering::Release);
        // A forked child's handler starts where its parent's was not.
        state.pinned.store(false, Ordering::Release);
        state.rescued.store(false, Ordering::Release);
        // SAFETY: cpu_set_t is plain bits; all zeros is the empty set.
        let mut start_mask: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        let size = std::mem::size_of::<libc::cpu_set_t>();
        // SAFETY: reads this thread's affinity into a set of `size` bytes.
        let ok = unsafe { libc::sched_getaffinity(0, size, &mut start_mask) } == 0;
        // SAFETY: counts the bits of a valid set.
        let enabled =
            enabled && ok && unsafe { libc::CPU_COUNT(&start_mask) } > 1 && may_leave_idle();
        state.enabled.store(enabled, Ordering::Release);
        Follow {
            enabled,
            start_mask,
            pinned: None,
            period_start: now,
            last_fault: now,
            backoff_until: 0,
            tids: [(0, 0); TRACKED],
            faults: 0,
            troubles: 0,
            pinned_since: 0,
            leader_times: (0, Times::default()),
            own_times: Times::default(),
            // SAFETY: gettid has no arguments.
            own_tid: unsafe { libc::gettid() } as u32,
            contended: 0,
            times_of: sched_times,
            machine: machine_ticks().unwrap_or((0, 0)),
            machine_periods: 0,
            machine_busy: true,
            machine_of: machine_ticks,
            moves: 0,
        }
    }

    /// Whether the handler sits on a followed thread's CPU (and so must
    /// not poll).
    pub(crate) fn pinned(&self) -> bool {
        self.pinned.is_some()
    }

    /// Times the handler left a followed CPU because the thread it followed
    /// waited for that CPU.
    pub(crate) fn contended(&self) -> u64 {
        self.contended
    }

    /// Times the handler moved (to a thread's CPU or back).
    pub(crate) fn moves(&self) -> u64 {
        self.moves
    }

    /// Counts a fault from thread `tid` (0: not known) at `now`.
    pub(crate) fn fault(&mut self, tid: u32, now: u64) {
        if !self.enabled || tid == 0 {
            return;
        }
        self.last_fault = now;
        self.faults = self.faults.saturating_add(1);
        for slot in self.tids.iter_mut() {
            if slot.0 == tid || slot.1 == 0 {
                *slot = (tid, slot.1 + 1);
                return;
            }
        }
    }

    /// After a wake-up at `now`: takes back a rescue, leaves a CPU gone
    /// quiet, and at the end of a period moves the handler if the faults
    /// say so.
    pub(crate) fn tick(&mut self, now: u64, state: &FollowState) {
        if !self.enabled {
            return;
        }
        if state.rescued.swap(false, Ordering::Acquire) {
            self.unpin(state);
            self.back_off(now);
        }
        if self.pinned.is_some() && now.saturating_sub(self.pinned_since) >= SETTLED_NS {
            self.troubles = 0;
        }
        if self.pinned.is_some() && now.saturating_sub(self.last_fault) >= QUIET_NS {
            self.unpin(state);
        }
        if now.saturating_sub(self.period_start) < PERIOD_NS {
            return;
        }
        self.machine_periods += 1;
        if self.machine_periods >= MACHINE_PERIODS {
            self.look_at_machine();
            if self.machine_busy && self.pinned.is_some() {
                self.unpin(state);
                self.contended += 1;
                self.back_off(now);
            }
        }
        let faults = self.faults;
        let (leader, most) = self
            .tids
            .iter()
            .copied()
            .max_by_key(|t| t.1)
            .unwrap_or((0, 0));
        let period = now - self.period_start;
        self.period_start = now;
        self.faults = 0;
        self.tids = [(0, 0); TRACKED];
        if faults < MIN_FAULTS {
            return;
        }
        // Other work wants the CPU (a SCHED_IDLE handler there would
        // starve) if the leader waited for its CPU more than an eighth of
        // the period, or if the handler, pinned, waited more than the
        // leader ran (on a followed CPU the handler waits while the leader
        // runs, and for nothing else) plus an eighth. Unknown (a new
        // leader) counts as contended.
        let (lt, own) = ((self.times_of)(leader), (self.times_of)(self.own_tid));
        let contended = match (self.leader_times, lt, own) {
            ((tid, before), Some(l), Some(o)) if tid == leader => {
                let leader_waited = l.waited.saturating_sub(before.waited);
                let leader_ran = l.ran.saturating_sub(before.ran);
                let own_waited = o.waited.saturating_sub(self.own_times.waited);
                leader_waited * 8 > period
                    || (self.pinned.is_some() && own_waited > leader_ran + period / 8)
            }
            _ => true,
        };
        self.leader_times = (leader, lt.unwrap_or_default());
        self.own_times = own.unwrap_or_default();
        if contended && self.pinned.is_some() {
            self.unpin(state);
            self.contended += 1;
            self.back_off(now);
            return;
        }
        if most * 4 >= faults * 3 && !contended && !self.machine_busy && now >= self.backoff_until {
            if let Some(cpu) = cpu_of(leader) {
                if self.pinned != Some(cpu) && self.may_run_on(cpu) && pin_to(cpu) {
                    if self.pinned.is_none() && !set_policy(0, true) {
                        self.unpin(state);
                        return;
                    }
                    if self.pinned.is_none() {
                        self.pinned_since = now;
                    }
                    self.pinned = Some(cpu);
                    state.pinned.store(true, Ordering::Release);
                    self.keep_evictor_off(cpu, state);
                    self.moves += 1;
                }
            }
        } else if self.pinned.is_some() {
            self.unpin(state);
        }
    }

    /// Whether work other than this process's kept more than half a CPU
    /// busy since the last look (`/proc/stat` less `/proc/self/stat`).
    /// A `SCHED_IDLE` handler would starve beside it.
    fn look_at_machine(&mut self) {
        self.machine_periods = 0;
        let Some((busy, own)) = (self.machine_of)() else {
            self.machine_busy = true;
            return;
        };
        let (busy0, own0) = self.machine;
        self.machine = (busy, own);
        let others = busy
            .saturating_sub(busy0)
            .saturating_sub(own.saturating_sub(own0));
        // SAFETY: sysconf has no side effects.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
        let window_ticks = (PERIOD_NS * MACHINE_PERIODS as u64 * hz).div_ceil(1_000_000_000);
        self.machine_busy = others * 2 > window_ticks;
    }

    /// Stops following for a while: longer each time in a row.
    fn back_off(&mut self, now: u64) {
        self.backoff_until = now + (BACKOFF_NS << self.troubles.min(6));
        self.troubles += 1;
    }

    /// How long the handler may sleep before it should look again: while
    /// pinned, until the CPU would count as quiet; else for good.
    pub(crate) fn sleep_ns(&self, now: u64) -> Option<u64> {
        self.pinned
            .map(|_| (self.last_fault + QUIET_NS).saturating_sub(now).max(1))
    }

    /// The evictor compresses while the followed thread and the handler
    /// take turns on `cpu`: it goes to the other CPUs, if there are any.
    fn keep_evictor_off(&self, cpu: usize, state: &FollowState) {
        let tid = state.evictor_tid.load(Ordering::Acquire);
        let mut others = self.start_mask;
        // SAFETY: clears one bit below CPU_SETSIZE (checked by the caller)
        // of a local copy, counts the rest, and sets a thread of this
        // process to them.
        unsafe {
            libc::CPU_CLR(cpu, &mut others);
            if tid != 0 && libc::CPU_COUNT(&others) > 0 {
                libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &others);
            }
        }
    }

    fn may_run_on(&self, cpu: usize) -> bool {
        cpu < libc::CPU_SETSIZE as usize
            // SAFETY: reads one bit of a valid set, `cpu` below its size.
            && unsafe { libc::CPU_ISSET(cpu, &self.start_mask) }
    }

    /// Back to the policy and the CPUs the handler started with.
    fn unpin(&mut self, state: &FollowState) {
        set_policy(0, false);
        let size = std::mem::size_of::<libc::cpu_set_t>();
        // SAFETY: sets this thread's affinity to the set it started with.
        unsafe { libc::sched_setaffinity(0, size, &self.start_mask) };
        if self.pinned.take().is_some() {
            self.moves += 1;
            let tid = state.evictor_tid.load(Ordering::Acquire);
            if tid != 0 {
                // SAFETY: sets a thread of this process to the set the
                // handler started with (the evictor's too).
                unsafe { libc::sched_setaffinity(tid, size, &self.start_mask) };
            }
        }
        state.pinned.store(false, Ordering::Release);
    }
}

/// Sets thread `tid`'s (0: the caller's) policy to `SCHED_IDLE` or back to
/// `SCHED_OTHER`.
fn set_policy(tid: i32, idle: bool) -> bool {
    let param = libc::sched_param { sched_priority: 0 };
    let policy = if idle {
        libc::SCHED_IDLE
    } else {
        libc::SCHED_OTHER
    };
    // SAFETY: sets the policy of a thread of this process.
    unsafe { libc::sched_setscheduler(tid, policy, &param) == 0 }
}

/// Whether a thread of this process may leave `SCHED_IDLE` once in it:
/// with `CAP_SYS_NICE` (bit 23 of the effective set) or an `RLIMIT_NICE`
/// of at least 20 (the kernel treats `SCHED_IDLE` as nice 20).
fn may_leave_idle() -> bool {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: fills a local rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NICE, &mut lim) } == 0 && lim.rlim_cur >= 20 {
        return true;
    }
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << 23) != 0)
}

/// Moves the calling thread onto `cpu` alone.
fn pin_to(cpu: usize) -> bool {
    // SAFETY: an empty set, then one bit below CPU_SETSIZE (checked by the
    // caller), then this thread's affinity set to it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

/// The CPU thread `tid` of this process last ran on: field 39 of
/// `/proc/self/task/TID/stat`, read into the stack.
pub(crate) fn cpu_of(tid: u32) -> Option<usize> {
    let mut buf = [0u8; 1024];
    stat_cpu(procfs::read(b"self/task/", Some(tid), b"/stat", &mut buf)?)
}

/// The machine's busy time (the first line of `/proc/stat`: every state
/// but idle and iowait) and this process's (`utime + stime` of
/// `/proc/self/stat`), in clock ticks.
pub(crate) fn machine_ticks() -> Option<(u64, u64)> {
    let mut buf = [0u8; 256];
    let line = procfs::read(b"stat", None, b"", &mut buf)?;
    let line = line.split(|&b| b == b'\n').next()?;
    let mut busy = 0;
    // "cpu  user nice system idle iowait irq softirq steal guest guest_nice";
    // guest time is counted in user already.
    for (k, f) in line
        .split(|&b| b == b' ')
        .filter(|f| !f.is_empty())
        .skip(1)
        .take(8)
        .enumerate()
    {
        if k != 3 && k != 4 {
            busy += procfs::number(f)?;
        }
    }
    let mut buf = [0u8; 1024];
    let stat = procfs::read(b"self/stat", None, b"", &mut buf)?;
    let close = stat.iter().rposition(|&b| b == b')')?;
    let mut fields = stat[close + 1..]
        .split(|&b| b == b' ')
        .filter(|f| !f.is_empty());
    // Fields 14 and 15 (utime, stime); field 3 is the first after ')'.
    let utime = procfs::number(fields.nth(14 - 3)?)?;
    let stime = procfs::number(fields.next()?)?;
    Some((busy, utime + stime))
}

/// A thread's times from its `schedstat`, in ns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Times {
    /// On a CPU.
    pub ran: u64,
    /// Runnable, waiting for a CPU.
    pub waited: u64,
}

/// Thread `tid`'s times: the first two fields of
/// `/proc/self/task/TID/schedstat`.
pub(crate) fn sched_times(tid: u32) -> Option<Times> {
    let mut buf = [0u8; 128];
    let line = procfs::read(b"self/task/", Some(tid), b"/schedstat", &mut buf)?;
    // Each field is read up to its first non-digit (the last ends in a
    // newline).
    let mut fields = line.split(|&b| b == b' ').map(|f| {
        let digits = f.iter().take_while(|b| b.is_ascii_digit()).count();
        procfs::number(&f[..digits])
    });
    Some(Times {
        ran: fields.next()??,
        waited: fields.next()??,
    })
}

/// Field 39 (`processor`) of a `/proc/.../stat` line. The command name
/// (field 2) is in parentheses and may hold spaces and parentheses, so
/// fields are counted from the last `)`.
pub(crate) fn stat_cpu(line: &[u8]) -> Option<usize> {
    let close = line.iter().rposition(|&b| b == b')')?;
    // After ") " comes field 3 (state); processor is 36 fields further.
    let field = line[close + 1..]
        .split(|&b| b == b' ')
        .filter(|f| !f.is_empty())
        .nth(39 - 3)?;
    usize::try_from(procfs::number(field)?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::sync::Arc;
    use std::thread::JoinHandle;

    fn policy_of(tid: i32) -> i32 {
        // SAFETY: reads a thread's policy.
        unsafe { libc::sched_getscheduler(tid) }
    }

    fn gettid() -> i32 {
        // SAFETY: no arguments.
        unsafe { libc::gettid() }
    }

    #[test]
    fn reads_the_processor_field_past_a_name_with_spaces_and_parens() {
        let mut line = b"4242 (a (b) c) S".to_vec();
        for k in 4..=38 {
            line.extend_from_slice(format!(" {}", k * 10).as_bytes());
        }
        line.extend_from_slice(b" 7 0 0 0 0 0\n");
        assert_eq!(stat_cpu(&line), Some(7));
        assert_eq!(stat_cpu(b"1 (x) S 1 2 3"), None);
    }

    #[test]
    fn reads_a_threads_times() {
        // Spin until the thread has run 5 ms more (at most 10 s): its
        // time on a CPU grows, its wait never shrinks.
        let t = sched_times(gettid() as u32).expect("schedstat");
        let spin = std::time::Instant::now();
        let mut u = t;
        while u.ran < t.ran + 5_000_000 && spin.elapsed() < std::time::Duration::from_secs(10) {
            std::hint::spin_loop();
            u = sched_times(gettid() as u32).unwrap();
        }
        assert!(u.ran >= t.ran + 5_000_000, "{t:?} {u:?}");
        assert!(u.waited >= t.waited);
    }

    #[test]
    fn finds_the_cpu_a_pinned_thread_runs_on() {
        std::thread::spawn(|| {
            // SAFETY: no arguments.
            let cpu = unsafe { libc::sched_getcpu() } as usize;
            assert!(pin_to(cpu));
            assert_eq!(cpu_of(gettid() as u32), Some(cpu));
        })
        .join()
        .unwrap();
    }

    /// Times that never grow.
    fn never_waits(_: u32) -> Option<Times> {
        Some(Times::default())
    }

    /// A machine with nothing else running.
    fn idle_machine() -> Option<(u64, u64)> {
        Some((0, 0))
    }

    /// A handler for the tests: no thread waits, the machine is idle.
    fn quiet(f: &mut Follow) {
        f.times_of = never_waits;
        f.machine_of = idle_machine;
        f.machine = (0, 0);
        f.machine_busy = false;
    }

    /// Faults from `tid` (and one in `other_every` from thread 1), then a
    /// tick a period later.
    fn period(f: &mut Follow, state: &FollowState, now: &mut u64, tid: u32, other_every: u32) {
        for i in 0..40 {
            let from = if other_every > 0 && i % other_every == 0 {
                1
            } else {
                tid
            };
            f.fault(from, *now);
        }
        *now += PERIOD_NS;
        f.tick(*now, state);
    }

    /// Runs `test` on a thread of its own (following changes the calling
    /// thread's policy) with a quiet handler placement that follows,
    /// `state`, and the thread's id. Returns the thread to join, or `None`
    /// (and says it skipped) where following is not enabled: one CPU, or
    /// `SCHED_IDLE` could not be left.
    fn following<F>(state: Arc<FollowState>, test: F) -> Option<JoinHandle<()>>
    where
        F: FnOnce(&mut Follow, &FollowState, u32) + Send + 'static,
    {
        let (enabled_tx, enabled) = mpsc::channel();
        let t = std::thread::spawn(move || {
            let mut f = Follow::new(true, 0, &state);
            enabled_tx.send(f.enabled).unwrap();
            if f.enabled {
                quiet(&mut f);
                test(&mut f, &state, gettid() as u32);
            }
        });
        if enabled.recv() == Ok(true) {
            return Some(t);
        }
        t.join().unwrap();
        eprintln!("skipped: one CPU, or SCHED_IDLE could not be left");
        None
    }

    /// [`following`] with a state of its own, joined: `test` runs to its
    /// end, or not at all where following is not enabled.
    fn run_following<F>(test: F)
    where
        F: FnOnce(&mut Follow, &FollowState, u32) + Send + 'static,
    {
        if let Some(t) = following(Arc::default(), test) {
            t.join().unwrap();
        }
    }

    #[test]
    fn follows_a_thread_with_three_in_four_faults_and_leaves_a_mixed_load() {
        run_following(|f, state, me| {
            let mut now = 0;
            // The first period names the leader; its wait is not known yet.
            period(f, state, &mut now, me, 5);
            assert!(!f.pinned());
            period(f, state, &mut now, me, 5);
            assert!(
                f.pinned() && state.pinned(),
                "32 of 40 faults from one thread"
            );
            assert_eq!(policy_of(0), libc::SCHED_IDLE);
            assert_eq!(f.moves(), 1);
            assert!(f.sleep_ns(now).is_some());
            period(f, state, &mut now, me, 2);
            assert!(
                !f.pinned() && !state.pinned(),
                "half from each of two threads"
            );
            assert_eq!(policy_of(0), libc::SCHED_OTHER);
            assert_eq!(f.moves(), 2);
            assert_eq!(f.sleep_ns(now), None);
            // Too few faults: no move.
            for _ in 0..(MIN_FAULTS - 1) {
                f.fault(me, now);
            }
            now += PERIOD_NS;
            f.tick(now, state);
            assert!(!f.pinned());
            // Pinned again, then quiet: back.
            period(f, state, &mut now, me, 0);
            period(f, state, &mut now, me, 0);
            assert!(f.pinned());
            now += QUIET_NS;
            f.tick(now, state);
            assert!(!f.pinned() && !state.pinned(), "no fault for {QUIET_NS} ns");
            assert_eq!(policy_of(0), libc::SCHED_OTHER);
            // Switched off: never moves.
            let mut off = Follow::new(false, 0, state);
            quiet(&mut off);
            for _ in 0..3 {
                period(&mut off, state, &mut now, me, 0);
            }
            assert!(!off.pinned());
        });
    }

    #[test]
    fn leaves_a_cpu_the_followed_thread_waits_for() {
        // The followed thread's wait, and the handler's (thread id 1 in
        // this test).
        static WAIT: AtomicU64 = AtomicU64::new(0);
        static OWN_WAIT: AtomicU64 = AtomicU64::new(0);
        fn waits(tid: u32) -> Option<Times> {
            let w = if tid == 1 { &OWN_WAIT } else { &WAIT };
            Some(Times {
                ran: 0,
                waited: w.load(Ordering::Relaxed),
            })
        }
        run_following(|f, state, me| {
            f.times_of = waits;
            f.own_tid = 1;
            let mut now = 0;
            period(f, state, &mut now, me, 0);
            period(f, state, &mut now, me, 0);
            assert!(f.pinned());
            // The thread waited a quarter of the period for its CPU.
            WAIT.fetch_add(PERIOD_NS / 4, Ordering::Relaxed);
            period(f, state, &mut now, me, 0);
            assert!(!f.pinned() && f.contended() == 1);
            assert_eq!(policy_of(0), libc::SCHED_OTHER);
            // Not during the backoff, even with the CPU free again.
            period(f, state, &mut now, me, 0);
            assert!(!f.pinned());
            now += BACKOFF_NS;
            period(f, state, &mut now, me, 0);
            assert!(f.pinned());
            // An eighth or less is not contention.
            WAIT.fetch_add(PERIOD_NS / 8, Ordering::Relaxed);
            period(f, state, &mut now, me, 0);
            assert!(f.pinned());
            // The handler waited a quarter while the thread did not run:
            // something else had the CPU.
            OWN_WAIT.fetch_add(PERIOD_NS / 4, Ordering::Relaxed);
            period(f, state, &mut now, me, 0);
            assert!(!f.pinned() && f.contended() == 2);
        });
    }

    #[test]
    fn leaves_a_cpu_when_other_work_keeps_the_machine_busy() {
        // Busy ticks of the machine (all of it other work) at each look.
        static BUSY: AtomicU64 = AtomicU64::new(0);
        fn machine() -> Option<(u64, u64)> {
            Some((BUSY.load(Ordering::Relaxed), 0))
        }
        run_following(|f, state, me| {
            f.machine_of = machine;
            let mut now = 0;
            period(f, state, &mut now, me, 0);
            period(f, state, &mut now, me, 0);
            assert!(f.pinned());
            // A whole CPU busy with other work over the next look.
            // SAFETY: sysconf has no side effects.
            let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
            BUSY.fetch_add(
                hz * PERIOD_NS * MACHINE_PERIODS as u64 / 1_000_000_000,
                Ordering::Relaxed,
            );
            for _ in 0..MACHINE_PERIODS {
                period(f, state, &mut now, me, 0);
            }
            assert!(!f.pinned() && f.contended() == 1);
            // Idle again: back after the backoff and the next look.
            now += BACKOFF_NS;
            for _ in 0..MACHINE_PERIODS + 1 {
                period(f, state, &mut now, me, 0);
            }
            assert!(f.pinned());
        });
    }

    #[test]
    fn reads_the_machines_ticks() {
        // Spinning, both counts grow (at most 10 s). They are kept apart in
        // the kernel and move at different moments, so over a short window
        // neither bounds the other: no more is compared.
        let (busy, own) = machine_ticks().expect("/proc/stat and /proc/self/stat");
        let spin = std::time::Instant::now();
        let (mut busy2, mut own2) = (busy, own);
        while (own2 == own || busy2 == busy) && spin.elapsed() < std::time::Duration::from_secs(10)
        {
            std::hint::spin_loop();
            (busy2, own2) = machine_ticks().unwrap();
        }
        assert!(own2 > own, "{own} {own2}");
        assert!(busy2 > busy, "{busy} {busy2}");
    }

    #[test]
    fn the_watch_gives_a_starved_handler_its_policy_back_and_stops_following() {
        let state = Arc::new(FollowState::default());
        let (to_test, from_thread) = mpsc::channel();
        let (to_thread, commands) = mpsc::channel::<u64>();
        let Some(t) = following(Arc::clone(&state), move |f, st, me| {
            for t in [0, PERIOD_NS] {
                for _ in 0..MIN_FAULTS {
                    f.fault(me, t);
                }
                f.tick(t + PERIOD_NS, st);
            }
            to_test.send((f.pinned(), gettid())).unwrap();
            // Each command: tick at that time, report whether pinned.
            for now in commands {
                for _ in 0..MIN_FAULTS {
                    f.fault(me, now);
                }
                f.tick(now, st);
                to_test.send((f.pinned(), 0)).unwrap();
            }
        }) else {
            return;
        };
        let (pinned, tid) = from_thread.recv().unwrap();
        assert!(pinned);
        assert_eq!(policy_of(tid), libc::SCHED_IDLE);
        // A handler that woke a few times across the checks is not
        // starved.
        state.watch(true, 0);
        for _ in 0..STARVED_WAKES {
            state.woke();
        }
        for _ in 1..UNREAD_CHECKS {
            state.watch(true, 0);
        }
        assert_eq!(state.rescues(), 0);
        assert_eq!(policy_of(tid), libc::SCHED_IDLE);
        // The next window of the same streak has no wake-ups: rescued
        // (and the policy set back to SCHED_IDLE by hand, to go on).
        for _ in 1..UNREAD_CHECKS {
            state.watch(true, 0);
        }
        assert_eq!(state.rescues(), 1);
        assert_eq!(policy_of(tid), libc::SCHED_OTHER);
        assert!(set_policy(tid, true));
        state.rescued.store(false, Ordering::Relaxed);
        state.rescues.store(0, Ordering::Relaxed);
        // A streak broken by a check with nothing pending starts again.
        state.watch(false, 0);
        for _ in 0..UNREAD_CHECKS - 1 {
            state.watch(true, 0);
        }
        state.watch(false, 0);
        state.watch(true, 0);
        assert_eq!(state.rescues(), 0);
        // Pending at every check of a streak, fewer wake-ups: rescued.
        state.watch(false, 0);
        state.woke();
        for _ in 0..UNREAD_CHECKS {
            state.watch(true, 0);
        }
        assert_eq!(state.rescues(), 1);
        assert_eq!(policy_of(tid), libc::SCHED_OTHER);
        // Busy with one batch past the limit: rescued too (the thread's
        // policy is already back; the count says it was seen).
        state.busy(1_000);
        state.watch(false, 1_000 + STUCK_NS);
        assert_eq!(state.rescues(), 1, "not yet past");
        state.watch(false, 2_000 + STUCK_NS);
        assert_eq!(state.rescues(), 2);
        state.done();
        state.watch(false, 10 * STUCK_NS);
        assert_eq!(state.rescues(), 2);
        // The handler unpins at its next tick and does not follow during
        // the backoff, then does again.
        to_thread.send(3 * PERIOD_NS).unwrap();
        assert!(!from_thread.recv().unwrap().0);
        to_thread.send(4 * PERIOD_NS).unwrap();
        assert!(!from_thread.recv().unwrap().0, "within the backoff");
        to_thread.send(3 * PERIOD_NS + BACKOFF_NS).unwrap();
        assert!(from_thread.recv().unwrap().0, "after the backoff");
        drop(to_thread);
        t.join().unwrap();
    }
}
