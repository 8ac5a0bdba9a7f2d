//! A region's settings: its resident limit, the store recipe, how to open
//! the userfaultfd, which thread serves a fault, the scan and probation of cold detection, and the
//! promotion-rate controller's settings.
//!
//! Owns the settings and their defaults; builds nothing.

use std::time::Duration;

use serde::Serialize;

use recipe::StoreSpec;
use zsmalloc::Mode;

use crate::budget::LimitCovers;
use crate::controller::ControllerConfig;
use crate::uffd::UffdOpen;

/// The fault handler's default poll after a message, in wake-ups of a
/// sleeping thread (`wake_cost`): a fault that finds the handler polling
/// saves one wake-up; a poll that ends with no fault costs its length in
/// CPU on the handler's core, not on the program's.
pub(crate) const POLL_PER_WAKE: u32 = 2;

/// The shortest default poll: what this project's machine was measured
/// best with, and a floor under a measurement that came out low (a
/// wake-up the scheduler made local).
pub(crate) const POLL_MIN: Duration = Duration::from_micros(30);

/// The longest default poll.
pub(crate) const POLL_MAX: Duration = Duration::from_millis(1);

/// A region's settings.
#[derive(Clone, Debug)]
pub struct RegionConfig {
    /// Bytes the region may keep mapped (above 0, at most its length);
    /// pages beyond are compressed into the store.
    pub resident_limit: usize,
    /// The store (allocator, compressor, mode). Its page size must be the
    /// system's. The background compactor is always off in a region's store:
    /// a forked child would inherit a store whose thread it does not have.
    pub store: StoreSpec,
    /// How to open the userfaultfd.
    pub uffd: UffdOpen,
    /// The promotion-rate controller.
    pub controller: ControllerConfig,
    /// How often the evictor looks at page ages and probation.
    pub scan_interval: Duration,
    /// Probation slots (uncompressed copies of probed pages); `None`: a
    /// sixteenth of the limit, from 16 to 4096; 0 turns probing off.
    pub probation_pages: Option<usize>,
    /// Whether pages untouched past the age threshold are evicted below the
    /// limit too (probed, then compressed).
    pub age_eviction: bool,
    /// How long the fault handler keeps polling its descriptor after its
    /// last message before it sleeps: a fault arriving meanwhile is served
    /// without a wake-up of the handler's CPU. The cost is up to this much
    /// CPU after each burst of faults; zero sleeps at once. `None` (the
    /// default): twice what waking a sleeping thread costs on this
    /// machine, measured once per process (`wake_cost`),
    /// from 30 µs to 1 ms.
    pub handler_poll: Option<Duration>,
    /// Whether the fault handler moves onto the CPU of the thread that
    /// sends it three in four of its faults (and then does not poll), so
    /// both wake-ups of a fault become local switches. Off by default: it
    /// made a TCG guest's runs faster, but native store faults slower in
    /// most runs on this project's machine (BENCHMARKS.md).
    pub handler_follows: bool,
    /// What `resident_limit` covers: the region's pages, or the process's
    /// memory except the compressed pool.
    pub limit_covers: LimitCovers,
    /// Which thread serves a fault: the region's handler thread (the
    /// default), or the faulting thread itself, in a `SIGBUS` handler.
    pub fault_service: FaultService,
    /// Whether the clock sees writes as well as faults, through the
    /// kernel's soft-dirty bits (`/proc/self/clear_refs` and
    /// `/proc/self/pagemap`), where the kernel has them and no other region
    /// of the process uses them. Clearing the bits makes every page the
    /// process writes after it take one fault in the kernel.
    pub soft_dirty: bool,
    /// Another process whose memory a limit that covers the process
    /// covers too, while it is this process's parent (`zmem run` names
    /// itself, so that one limit holds the program and the command that
    /// runs it; a forked child, whose parent it is not, counts itself
    /// alone).
    pub limit_also_covers: Option<u32>,
    /// How long a fault the handler thread holds may wait before the
    /// watchdog reports it (once): its page, the page's state, and the
    /// evictor's and the limit's state (`watchdog`).
    pub stuck_after: Duration,
    /// The file the region appends its one-line reports to (made when the
    /// first report comes): a fault held past `stuck_after`, a page the
    /// store could not read, the handler thread stopping (`report_log`).
    /// `None`: counted only (`FaultStats::stuck`, `FaultStats::refused`). A
    /// path longer than 255 bytes is not written.
    pub report_log: Option<std::path::PathBuf>,
}

/// Which thread brings a page back when the program touches it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultService {
    /// The region's fault handler thread reads the fault from the
    /// userfaultfd and wakes the faulting thread when the page is mapped:
    /// two thread switches per fault, and every access is served, the
    /// kernel's own (a `read(2)` into the region) included.
    #[default]
    HandlerThread,
    /// The userfaultfd is opened with `UFFD_FEATURE_SIGBUS`: the faulting
    /// thread gets `SIGBUS` and the region's signal handler brings the
    /// page back in that thread (no thread switch). The kernel's own
    /// accesses are not served: a system call on a page not mapped fails
    /// with `EFAULT` (fault the buffer in first with `Region::touch`).
    /// The program must not block `SIGBUS` in threads that touch the
    /// region, and the region must not hold the memory of the allocator
    /// the signal handler's store reads use (it is not `zmem run`'s
    /// mode).
    FaultingThread,
}

impl FaultService {
    /// The name in statistics and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            FaultService::HandlerThread => "handler-thread",
            FaultService::FaultingThread => "faulting-thread",
        }
    }
}

/// The store a region gets by default: zsmalloc in default mode with lz4
/// (recipe's default compressor for that mode), 4 KiB pages, no memory
/// limit, no background compactor, and no retained share of freed pages
/// beyond the page source's fixed cache: the pool is the program's own
/// memory, counted against it (a memory cgroup's peak), and the share
/// (up to an eighth of the pool in default mode) showed as up to 46 MiB
/// more peak in the word index's runs of `zmem run` (BENCHMARKS.md).
pub fn default_store() -> StoreSpec {
    StoreSpec {
        retain_divisor: Some(0),
        ..StoreSpec::new(
            "zsmalloc",
            recipe::default_comp(Mode::Default),
            Mode::Default,
        )
    }
}

impl RegionConfig {
    /// Defaults with a resident limit of `resident_limit` bytes.
    pub fn new(resident_limit: usize) -> RegionConfig {
        RegionConfig {
            resident_limit,
            store: default_store(),
            uffd: UffdOpen::Auto,
            controller: ControllerConfig::default(),
            scan_interval: Duration::from_secs(1),
            probation_pages: None,
            age_eviction: true,
            handler_poll: None,
            handler_follows: false,
            limit_covers: LimitCovers::Region,
            limit_also_covers: None,
            soft_dirty: true,
            fault_service: FaultService::HandlerThread,
            stuck_after: Duration::from_secs(10),
            report_log: None,
        }
    }

    /// How long the fault handler polls after a message: `handler_poll`,
    /// or, by default, `POLL_PER_WAKE` times `wake` (what a wake-up of a
    /// sleeping thread costs here, `wake_cost`), from `POLL_MIN` to
    /// `POLL_MAX` (`POLL_MIN` if it could not be measured).
    pub(crate) fn poll_window(&self, wake: Option<Duration>) -> Duration {
        self.handler_poll.unwrap_or_else(|| {
            wake.map_or(POLL_MIN, |w| (w * POLL_PER_WAKE).clamp(POLL_MIN, POLL_MAX))
        })
    }

    /// Probation slots for a limit of `limit_pages` pages.
    pub fn probation_slots(&self, limit_pages: usize) -> usize {
        self.probation_pages
            .unwrap_or_else(|| (limit_pages / 16).clamp(16, 4096))
    }
}
