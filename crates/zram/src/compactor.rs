//! The store's background compactor: the store compacts itself.
//!
//! Owns the background compactor's thread, policy and counters; may not touch
//! slots, the core or any module but `stats` (floor 3).
//!
//! A store whose policy is not [`AutoCompactMode::Off`] runs one thread that
//! sleeps until something fragments the allocator's memory (a freed object:
//! an overwrite, a discard, a reset), waits a short settling time so a burst
//! of frees is handled in one go, then decides from measured figures whether
//! compacting is worth it and, if so, compacts one bounded step (one size
//! class) at a time within a CPU budget, and sleeps again.
//!
//! # Why the store owns it, not the pool
//! The store is where the signals are: it sees every free (the pool sees
//! frees too, but in the middle of `zs_free` under class locks), it knows
//! `compr_data_size` (the figure the overhead is measured against) and
//! `mem_limit` (what the kernel-compat "shrinker" trigger watches), and it
//! works for any allocator behind [`ZPool`] that has compaction steps. The
//! pool's own inline policy (`zsmalloc::AutoCompact`) compacts on the free
//! path of the thread that frees; this one never does work there.
//!
//! # The hot path
//! A free does one relaxed load of the `armed` flag. Only the first free
//! after the compactor armed itself swaps the flag and wakes it; later frees
//! see it cleared and do nothing more until the compactor has looked again.
//!
//! # Deciding
//! It looks once the store is quiet (fewer than 16 page writes in a
//! settling time), or `postpone_ms` (2 s by default) after the first free
//! if writes go on: writes refill the holes frees leave, and compacting under them only
//! gives back pages they fault in again. A run happens only if the pages compaction could free now (the sum of
//! the allocator's per-step `zs_can_compact` estimates) reach both
//! `min_gain_pages` and `min_gain_percent` % of `compr_data_size`: between
//! runs the overhead ratio (mem_used over compressed bytes) grows by at most
//! that share over what a full compaction would leave, and a run is never
//! started for a handful of pages. In [`AutoCompactMode::Shrinker`] memory
//! must also be tight: used pages at `limit_percent` % of `mem_limit` or
//! more, a write refused by the limit, or `/proc/pressure/memory`'s
//! `some avg10` at `pressure_avg10` or more (polled each second while there
//! is enough to free), as the kernel compacts zsmalloc only from its shrinker.
//!
//! # Kept pages
//! The pages the allocator keeps resident for reuse go back to the OS by
//! epochs: what no store took for a whole epoch is released when the next
//! one ends. A busy store's epochs end by time, at the first free after the
//! page source's decay interval (1 s); the looks of this thread do not end
//! them, because a churning workload's stores take the kept pages again
//! within tens of milliseconds, and epochs that short gave them back first
//! (measured in BENCHMARKS.md). While the thread sits idle with pages kept,
//! it ends one every second (`IDLE_EPOCH`, `ZPool::decay_retained_pages`),
//! so an idle store gives every kept page back within two seconds, without
//! waiting for a free.
//!
//! # The CPU budget
//! The thread's own CPU time (`CLOCK_THREAD_CPUTIME_ID`), evaluations
//! included, is charged against a bucket that fills at `cpu_percent` % of
//! wall time and holds at most [`BURST`]; a step starts only when the bucket
//! is not negative, so over any stretch the thread uses at most that share
//! of one CPU plus the burst and one step.
//!
//! This module owns the thread, its policy and counters; it reaches memory
//! only through the [`ZPool`] and reads the store's counters. It takes its
//! own small mutex (a leaf: nothing of the store is taken inside it) and
//! calls the allocator with no lock of the store held.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Serialize;
use zpool::ZPool;

use crate::stats::{AutoCompactStats, Counter, Counters};

/// The most CPU time the budget lets the compactor spend at once.
pub const BURST: Duration = Duration::from_millis(2);

/// How long the thread, idle, lets the pages the allocator keeps for reuse
/// sit before it ends their epoch (the page source's own decay time,
/// `pages::DEFAULT_DECAY_MS`): what no store took back goes to the OS, so
/// an idle store gives back every kept page within two of these.
const IDLE_EPOCH: Duration = Duration::from_secs(1);

/// How long the compactor waits after the first free before it looks, so a
/// burst of frees is handled by one evaluation.
pub const SETTLE: Duration = Duration::from_millis(50);

/// Page writes per settling time below which the store counts as quiet.
const LULL_WRITES: u64 = 16;

/// How often the shrinker trigger re-reads memory pressure while there is
/// enough to free but memory is not tight.
const PRESSURE_POLL: Duration = Duration::from_secs(1);

/// Whether and when the store compacts itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AutoCompactMode {
    /// Never (compaction only when asked: `compact`).
    Off,
    /// Whenever enough can be freed (default mode's default).
    On,
    /// Only when memory is tight, as the kernel's shrinker compacts.
    Shrinker,
}

impl AutoCompactMode {
    /// The name used on the command line and by `zmem ctl`.
    pub fn name(self) -> &'static str {
        match self {
            AutoCompactMode::Off => "off",
            AutoCompactMode::On => "on",
            AutoCompactMode::Shrinker => "shrinker",
        }
    }
}

impl std::str::FromStr for AutoCompactMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "off" => Ok(AutoCompactMode::Off),
            "on" => Ok(AutoCompactMode::On),
            "shrinker" => Ok(AutoCompactMode::Shrinker),
            other => Err(format!(
                "unknown automatic compaction '{other}': use on, off or shrinker"
            )),
        }
    }
}

/// The background compactor's policy.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct AutoCompactPolicy {
    /// Whether and when it runs.
    pub mode: AutoCompactMode,
    /// Share of one CPU it may use, in percent (more than 0, at most 100).
    pub cpu_percent: f64,
    /// It never runs to free fewer pages than this (at least 1).
    pub min_gain_pages: u64,
    /// Nor to free less than this share of `compr_data_size`, in percent.
    pub min_gain_percent: f64,
    /// Shrinker: memory is tight at this share of `mem_limit`, in percent.
    pub limit_percent: f64,
    /// Shrinker: memory is tight when `/proc/pressure/memory`'s
    /// `some avg10` reaches this (percent of time stalled).
    pub pressure_avg10: f64,
    /// While the store is being written (16 page writes or more per
    /// settling time), wait for a lull, up to this many milliseconds after
    /// the first free: writes refill the holes frees leave, and compacting
    /// under them gives back pages the writes fault in again at once.
    pub postpone_ms: u64,
}

impl AutoCompactPolicy {
    /// The policy with `mode` and the default figures: 5% of one CPU, at
    /// least 32 pages and 0.5% of the compressed bytes per run; shrinker
    /// tight at 90% of `mem_limit` or `some avg10` of 10.
    pub fn new(mode: AutoCompactMode) -> AutoCompactPolicy {
        AutoCompactPolicy {
            mode,
            cpu_percent: 5.0,
            min_gain_pages: 32,
            min_gain_percent: 0.5,
            limit_percent: 90.0,
            pressure_avg10: 10.0,
            postpone_ms: 2000,
        }
    }

    /// Checks the figures; the message names the bad one.
    pub fn validate(&self) -> Result<(), String> {
        let pct = |name: &str, v: f64, zero_ok: bool| -> Result<(), String> {
            if v.is_finite() && v <= 100.0 && (v > 0.0 || (zero_ok && v == 0.0)) {
                Ok(())
            } else {
                Err(format!(
                    "{name} {v} is not a percentage ({} to 100)",
                    if zero_ok { "0" } else { "more than 0" }
                ))
            }
        };
        pct("cpu", self.cpu_percent, false)?;
        pct("min_gain_percent", self.min_gain_percent, true)?;
        pct("limit", self.limit_percent, false)?;
        pct("pressure", self.pressure_avg10, false)?;
        if self.min_gain_pages == 0 {
            return Err("min_gain 0: a run must free at least 1 page".to_string());
        }
        Ok(())
    }

    /// Applies `zmem ctl auto_compact` words: a mode (`on`, `off`,
    /// `shrinker`) and/or `cpu=PCT`, `min_gain=PAGES`,
    /// `min_gain_percent=PCT`, `limit=PCT`, `pressure=AVG10`. Returns the
    /// new policy, checked; `self` is unchanged on error.
    pub fn with_words(&self, words: &str) -> Result<AutoCompactPolicy, String> {
        let mut p = *self;
        let mut any = false;
        for w in words.split_whitespace() {
            any = true;
            let Some((key, value)) = w.split_once('=') else {
                p.mode = w.parse()?;
                continue;
            };
            let num = || -> Result<f64, String> {
                value
                    .parse::<f64>()
                    .map_err(|_| format!("{key}={value}: not a number"))
            };
            match key {
                "cpu" => p.cpu_percent = num()?,
                "min_gain" => {
                    p.min_gain_pages = value
                        .parse()
                        .map_err(|_| format!("min_gain={value}: not a number of pages"))?
                }
                "min_gain_percent" => p.min_gain_percent = num()?,
                "limit" => p.limit_percent = num()?,
                "pressure" => p.pressure_avg10 = num()?,
                "postpone_ms" => {
                    p.postpone_ms = value
                        .parse()
                        .map_err(|_| format!("postpone_ms={value}: not a number of milliseconds"))?
                }
                other => {
                    return Err(format!(
                    "unknown setting {other:?}: use cpu=, min_gain=, min_gain_percent=, limit=, pressure=, postpone_ms="
                ))
                }
            }
        }
        if !any {
            return Err("expected on, off, shrinker and/or KEY=VALUE settings".to_string());
        }
        p.validate()?;
        Ok(p)
    }
}

impl fmt::Display for AutoCompactPolicy {
    /// `on cpu=5 min_gain=32 min_gain_percent=0.5 limit=90 pressure=10
    /// postpone_ms=2000`: what `zmem ctl auto_compact` reads and accepts
    /// back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} cpu={} min_gain={} min_gain_percent={} limit={} pressure={} postpone_ms={}",
            self.mode.name(),
            self.cpu_percent,
            self.min_gain_pages,
            self.min_gain_percent,
            self.limit_percent,
            self.pressure_avg10,
            self.postpone_ms
        )
    }
}

/// Counters the thread updates and readers sum.
#[derive(Default)]
struct Tally {
    wakeups: AtomicU64,
    skipped: AtomicU64,
    postponed: AtomicU64,
    runs: AtomicU64,
    steps: AtomicU64,
    pages_freed: AtomicU64,
    objs_moved: AtomicU64,
    objs_lower_bound: AtomicU64,
    objs_moved_trim: AtomicU64,
    cpu_ns: AtomicU64,
    budget_wait_ns: AtomicU64,
    longest_step_ns: AtomicU64,
    idle_decays: AtomicU64,
}

/// What the thread needs to see of the store.
pub(crate) struct Watched {
    pub(crate) pool: Arc<dyn ZPool>,
    pub(crate) counters: Arc<Counters>,
    pub(crate) limit_pages: Arc<AtomicU64>,
}

struct Control {
    policy: AutoCompactPolicy,
    stop: bool,
    /// A write was refused by `mem_limit` since the last look.
    limit_hit: bool,
    /// The thread is waiting for a free, with nothing left to do.
    idle: bool,
}

struct Shared {
    /// Set by the thread when it wants to hear of the next free.
    armed: AtomicBool,
    control: Mutex<Control>,
    wake: Condvar,
    /// Signalled when the thread becomes idle.
    went_idle: Condvar,
    tally: Tally,
}

impl Shared {
    fn control(&self) -> MutexGuard<'_, Control> {
        self.control.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn poke(&self) {
        self.armed.store(false, Ordering::Release);
        drop(self.control());
        self.wake.notify_all();
    }
}

/// The store's background compactor: its policy, counters and thread.
pub(crate) struct Compactor {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Compactor {
    /// A compactor that is off.
    pub(crate) fn new() -> Compactor {
        Compactor {
            shared: Arc::new(Shared {
                armed: AtomicBool::new(false),
                control: Mutex::new(Control {
                    policy: AutoCompactPolicy::new(AutoCompactMode::Off),
                    stop: false,
                    limit_hit: false,
                    idle: false,
                }),
                wake: Condvar::new(),
                went_idle: Condvar::new(),
                tally: Tally::default(),
            }),
            thread: Mutex::new(None),
        }
    }

    /// The hot path's signal: an object was freed. One relaxed load unless
    /// the compactor is waiting for exactly this.
    #[inline]
    pub(crate) fn note_free(&self) {
        if self.shared.armed.load(Ordering::Relaxed)
            && self.shared.armed.swap(false, Ordering::AcqRel)
        {
            drop(self.shared.control());
            self.shared.wake.notify_all();
        }
    }

    /// A write was refused by `mem_limit` (the shrinker's cue).
    pub(crate) fn note_limit_hit(&self) {
        let mut c = self.shared.control();
        if c.policy.mode == AutoCompactMode::Off || c.limit_hit {
            return;
        }
        c.limit_hit = true;
        drop(c);
        self.shared.poke();
    }

    pub(crate) fn policy(&self) -> AutoCompactPolicy {
        self.shared.control().policy
    }

    pub(crate) fn stats(&self) -> AutoCompactStats {
        let t = &self.shared.tally;
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        AutoCompactStats {
            wakeups: g(&t.wakeups),
            skipped: g(&t.skipped),
            postponed: g(&t.postponed),
            runs: g(&t.runs),
            steps: g(&t.steps),
            pages_freed: g(&t.pages_freed),
            objs_moved: g(&t.objs_moved),
            objs_lower_bound: g(&t.objs_lower_bound),
            objs_moved_trim: g(&t.objs_moved_trim),
            cpu_ns: g(&t.cpu_ns),
            budget_wait_ns: g(&t.budget_wait_ns),
            longest_step_ns: g(&t.longest_step_ns),
            idle_decays: g(&t.idle_decays),
        }
    }

    /// Sets the policy: starts the thread, changes what it does, or stops it
    /// (and waits for it) for [`AutoCompactMode::Off`].
    pub(crate) fn set_policy(
        &self,
        policy: AutoCompactPolicy,
        watched: impl FnOnce() -> Watched,
    ) -> Result<(), String> {
        policy.validate()?;
        let mut thread = self.thread.lock().unwrap_or_else(|e| e.into_inner());
        self.shared.control().policy = policy;
        if policy.mode == AutoCompactMode::Off {
            if let Some(t) = thread.take() {
                self.shared.control().stop = true;
                self.shared.poke();
                let _ = t.join();
                self.shared.control().stop = false;
            }
            return Ok(());
        }
        if thread.is_none() {
            let shared = Arc::clone(&self.shared);
            let w = watched();
            let t = std::thread::Builder::new()
                .name("zram-compact".to_string())
                .spawn(move || run(&shared, &w))
                .map_err(|e| format!("cannot start the compaction thread: {e}"))?;
            *thread = Some(t);
        } else {
            self.shared.poke();
        }
        Ok(())
    }

    /// Waits until the thread has looked at everything freed so far and
    /// done what its policy asks (true), or `timeout` passed (false). True at
    /// once when no thread runs.
    pub(crate) fn wait_idle(&self, timeout: Duration) -> bool {
        if !self.running() {
            return true;
        }
        let done = |c: &Control| c.stop || (c.idle && self.shared.armed.load(Ordering::Acquire));
        let (c, _) = self
            .shared
            .went_idle
            .wait_timeout_while(self.shared.control(), timeout, |c| !done(c))
            .unwrap_or_else(|e| e.into_inner());
        done(&c)
    }

    /// Whether a thread is running.
    pub(crate) fn running(&self) -> bool {
        self.thread
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }
}

impl Drop for Compactor {
    fn drop(&mut self) {
        // Stop and join: no thread outlives its store.
        let t = self
            .thread
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(t) = t {
            self.shared.control().stop = true;
            self.shared.poke();
            let _ = t.join();
        }
    }
}

/// This thread's CPU time.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_THREAD_CPUTIME_ID is
    // supported on every Linux the store runs on, and on failure `ts` stays 0.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(
        ts.tv_sec.max(0) as u64,
        ts.tv_nsec.clamp(0, 999_999_999) as u32,
    )
}

/// `some avg10` of `/proc/pressure/memory`, if the kernel has PSI.
pub fn memory_pressure_avg10() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/pressure/memory").ok()?;
    let line = text.lines().find(|l| l.starts_with("some "))?;
    line.split_whitespace()
        .find_map(|f| f.strip_prefix("avg10="))?
        .parse()
        .ok()
}

/// The CPU budget: a bucket of CPU nanoseconds that fills at the policy's
/// share of wall time.
struct Budget {
    level_ns: f64,
    refilled: Instant,
    charged_cpu: Duration,
}

impl Budget {
    fn new() -> Budget {
        Budget {
            level_ns: BURST.as_nanos() as f64,
            refilled: Instant::now(),
            charged_cpu: thread_cpu(),
        }
    }

    /// Adds the wall time since the last refill at `share`, takes the CPU
    /// used since the last charge; returns the CPU just charged.
    fn settle(&mut self, share: f64) -> Duration {
        let now = Instant::now();
        self.level_ns += now.duration_since(self.refilled).as_nanos() as f64 * share;
        self.level_ns = self.level_ns.min(BURST.as_nanos() as f64);
        self.refilled = now;
        let cpu = thread_cpu();
        let used = cpu.saturating_sub(self.charged_cpu);
        self.charged_cpu = cpu;
        self.level_ns -= used.as_nanos() as f64;
        used
    }

    /// How long to wait before the bucket is back to 0.
    fn deficit(&self, share: f64) -> Duration {
        if self.level_ns >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_nanos((-self.level_ns / share) as u64 + 1)
        }
    }
}

/// Waits on the condition variable until `until` or a stop. Returns false
/// if the compactor is stopping.
fn sleep(shared: &Shared, d: Duration) -> bool {
    let (c, _) = shared
        .wake
        .wait_timeout_while(shared.control(), d, |c| !c.stop)
        .unwrap_or_else(|e| e.into_inner());
    !c.stop
}

fn tight(policy: &AutoCompactPolicy, w: &Watched, limit_hit: bool) -> bool {
    let limit = w.limit_pages.load(Ordering::Relaxed);
    let used = w.pool.total_pages() as f64;
    if limit_hit || (limit != 0 && used >= limit as f64 * policy.limit_percent / 100.0) {
        return true;
    }
    memory_pressure_avg10().is_some_and(|p| p >= policy.pressure_avg10)
}

/// The thread.
fn run(shared: &Shared, w: &Watched) {
    let t = &shared.tally;
    let mut budget = Budget::new();
    let page = w.pool.page_size() as f64;
    // Look once at start: the store may already be fragmented.
    let mut poll: Option<Duration> = None;
    loop {
        {
            // Wait for a free, a policy change or a stop; the shrinker also
            // polls pressure while there is something to free.
            let mut c = shared.control();
            loop {
                if c.stop {
                    c.idle = false;
                    shared.went_idle.notify_all();
                    return;
                }
                if !shared.armed.load(Ordering::Acquire) {
                    c.idle = false;
                    break;
                }
                c.idle = true;
                shared.went_idle.notify_all();
                // Pages the allocator keeps for reuse go back after two idle
                // epochs: an idle store keeps nothing it does not count. The
                // allocator is asked with the mutex let go (it is a leaf), so
                // a free or a stop meanwhile is looked at again first.
                drop(c);
                let kept = w.pool.retained_pages();
                c = shared.control();
                if c.stop || !shared.armed.load(Ordering::Acquire) {
                    continue;
                }
                let decay = (kept.divisor != 0 && kept.pages > 0).then_some(IDLE_EPOCH);
                let timeout = match (poll, decay) {
                    (Some(p), Some(d)) => Some(p.min(d)),
                    (p, d) => p.or(d),
                };
                c = match timeout {
                    Some(d) => {
                        let (c, r) = shared
                            .wake
                            .wait_timeout(c, d)
                            .unwrap_or_else(|e| e.into_inner());
                        if !r.timed_out() {
                            c
                        } else if poll == Some(d) {
                            shared.armed.store(false, Ordering::Release);
                            c
                        } else {
                            drop(c);
                            // Counted before the pages go back, so whoever
                            // sees the pages gone also sees the epoch.
                            t.idle_decays.fetch_add(1, Ordering::Relaxed);
                            w.pool.decay_retained_pages();
                            shared.control()
                        }
                    }
                    None => shared.wake.wait(c).unwrap_or_else(|e| e.into_inner()),
                };
            }
        }
        let woke = Instant::now();
        let mut writes = w.counters.get(Counter::NumWrites);
        if !sleep(shared, SETTLE) {
            return;
        }
        loop {
            let now = w.counters.get(Counter::NumWrites);
            let busy = now.wrapping_sub(writes) >= LULL_WRITES && now > writes;
            let postpone = Duration::from_millis(shared.control().policy.postpone_ms);
            if !busy || woke.elapsed() >= postpone {
                break;
            }
            writes = now;
            t.postponed.fetch_add(1, Ordering::Relaxed);
            if !sleep(shared, SETTLE) {
                return;
            }
        }
        // From here on, a free means "look again after this".
        shared.armed.store(true, Ordering::Release);
        t.wakeups.fetch_add(1, Ordering::Relaxed);
        let (policy, limit_hit) = {
            let mut c = shared.control();
            (c.policy, std::mem::take(&mut c.limit_hit))
        };
        poll = None;
        let share = policy.cpu_percent / 100.0;
        let steps: Vec<(usize, u64)> = (0..w.pool.compaction_steps())
            .rev()
            .map(|s| (s, w.pool.step_can_compact(s)))
            .filter(|&(_, n)| n > 0)
            .collect();
        let freeable: u64 = steps.iter().map(|&(_, n)| n).sum();
        let compr = w.counters.get(Counter::ComprDataSize) as f64;
        let floor = (compr * policy.min_gain_percent / 100.0 / page).ceil() as u64;
        let enough = freeable >= policy.min_gain_pages.max(floor);
        let go = match policy.mode {
            AutoCompactMode::Off => false,
            AutoCompactMode::On => enough,
            AutoCompactMode::Shrinker => {
                let tight = enough && tight(&policy, w, limit_hit);
                if enough && !tight {
                    poll = Some(PRESSURE_POLL);
                }
                tight
            }
        };
        if !go {
            t.skipped.fetch_add(1, Ordering::Relaxed);
            let used = budget.settle(share);
            t.cpu_ns
                .fetch_add(used.as_nanos() as u64, Ordering::Relaxed);
            continue;
        }
        t.runs.fetch_add(1, Ordering::Relaxed);
        for (step, _) in steps {
            let used = budget.settle(share);
            t.cpu_ns
                .fetch_add(used.as_nanos() as u64, Ordering::Relaxed);
            let wait = budget.deficit(share);
            if !wait.is_zero() {
                t.budget_wait_ns
                    .fetch_add(wait.as_nanos() as u64, Ordering::Relaxed);
                if !sleep(shared, wait) {
                    return;
                }
                let used = budget.settle(share);
                t.cpu_ns
                    .fetch_add(used.as_nanos() as u64, Ordering::Relaxed);
            }
            if shared.control().stop {
                return;
            }
            if w.pool.step_can_compact(step) == 0 {
                continue; // freed meanwhile by writes, or by a manual compact
            }
            if let Some(bound) = w.pool.step_lower_bound(step) {
                t.objs_lower_bound.fetch_add(bound, Ordering::Relaxed);
            }
            let start = Instant::now();
            let r = w.pool.compact_step(step);
            let took = start.elapsed().as_nanos() as u64;
            t.longest_step_ns.fetch_max(took, Ordering::Relaxed);
            t.steps.fetch_add(1, Ordering::Relaxed);
            t.pages_freed.fetch_add(r.pages_freed, Ordering::Relaxed);
            t.objs_moved.fetch_add(r.objs_moved, Ordering::Relaxed);
            t.objs_moved_trim
                .fetch_add(r.objs_moved_trim, Ordering::Relaxed);
        }
        let used = budget.settle(share);
        t.cpu_ns
            .fetch_add(used.as_nanos() as u64, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_words_are_checked_and_round_trip() {
        let p = AutoCompactPolicy::new(AutoCompactMode::On);
        assert_eq!(
            p.to_string(),
            "on cpu=5 min_gain=32 min_gain_percent=0.5 limit=90 pressure=10 postpone_ms=2000"
        );
        assert_eq!(p.with_words(&p.to_string()).unwrap(), p);
        let q = p.with_words("shrinker cpu=2.5 min_gain=8").unwrap();
        assert_eq!(q.mode, AutoCompactMode::Shrinker);
        assert_eq!(q.cpu_percent, 2.5);
        assert_eq!(q.min_gain_pages, 8);
        for bad in [
            "",
            "sometimes",
            "cpu=0",
            "cpu=101",
            "cpu=x",
            "min_gain=0",
            "min_gain=-1",
            "postpone_ms=-5",
            "min_gain_percent=-1",
            "pressure=NaN",
            "speed=3",
        ] {
            assert!(p.with_words(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_budget_refills_at_its_share_and_holds_one_burst() {
        let mut b = Budget::new();
        b.level_ns = -1_000_000.0; // 1 ms of CPU over budget
        assert_eq!(b.deficit(0.05), Duration::from_nanos(20_000_001));
        b.refilled -= Duration::from_secs(10);
        b.settle(0.05);
        assert!(b.level_ns <= BURST.as_nanos() as f64);
        assert_eq!(b.deficit(0.05), Duration::ZERO);
    }
}
