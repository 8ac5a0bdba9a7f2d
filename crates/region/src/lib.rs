//! Compressed memory for one process: a [`Region`] is an anonymous mapping
//! the program uses as ordinary memory; pages beyond its resident limit
//! are compressed into a zram [`Store`](zram::Store) (one disk page per
//! region page, so same-filled pages, huge pages and `mm_stat` are the
//! store's) and their mapping dropped; a userfaultfd fault brings a page
//! back.
//!
//! The crate is a tower (docs/design.md, "region, floor by floor"):
//! - [`mod@error`], `uffd`, [`stats`], [`controller`], `table`,
//!   `mapping`, `buf`, `gate`, `discards`, `procfs`: the error; the raw
//!   userfaultfd calls; the counters and their JSON; the promotion-rate
//!   controller (pure); the page states; page addresses; locked worker
//!   memory; the fork gate; the ring of store slots to free off the fault
//!   path; `/proc` files read without allocating;
//! - `config`, `budget`, `probation`, `soft_dirty`: the settings; what the
//!   limit covers; the probation slab; the process's soft-dirty bits (the
//!   clock's write references);
//! - `shared`: what the threads share;
//! - `evict`, `window`: the race-free eviction and bring-back sequences;
//!   eviction under the limit by windows (one zap for scattered victims);
//! - `follow`: which CPU the fault thread runs on;
//! - `fault`: the one rule for serving a fault, whichever thread serves it;
//! - `handler`, `evictor`, `signal`: the fault thread; the eviction thread
//!   and the hints; faults served in the faulting thread (`SIGBUS`);
//! - `os_thread`: threads made without std's start (which may wait for
//!   the dynamic loader's lock);
//! - `workers`, `fork`, `wake_cost`: starting and stopping the threads;
//!   rebuilding in a forked child ([`fork`]'s public calls serve a process
//!   copy glibc's `fork()` handlers do not see); what waking a sleeping thread costs here
//!   (the handler's default poll, measured as a region is made);
//! - `region`: the public [`Region`];
//! - `own`: which code on a thread is the region's ([`in_own_code`]), for
//!   a library that interposes `mmap` and `malloc`.
//!
//! The preload library of `zmem run` makes one large region and hands out
//! pieces of it for the program's large anonymous mappings and
//! allocations; it asks [`in_own_code`] so the region's own requests never
//! land in a region.

#![warn(unreachable_pub)]

mod budget;
mod buf;
mod config;
pub mod controller;
mod copies;
mod descriptors;
mod discards;
pub mod error;
mod evict;
mod evictor;
mod fault;
mod follow;
pub mod fork;
mod gate;
mod handler;
mod mapping;
mod os_thread;
mod own;
mod probation;
mod procfs;
mod region;
mod report_log;
mod shared;
mod signal;
mod soft_dirty;
pub mod stats;
mod table;
#[cfg(test)]
mod test_region;
mod uffd;
mod wake_cost;
mod watchdog;
mod window;
mod workers;
mod zaps;

pub use budget::LimitCovers;
pub use buf::mlock_refused;
pub use config::{default_store, FaultService, RegionConfig};
pub use controller::{ControllerConfig, PromotionController};
pub use descriptors::out_of_the_way;
pub use error::RegionError;
pub use own::{in_own_code, OwnCode};
pub use region::{page_size, Region};
pub use stats::RegionStats;
pub use uffd::{probe as probe_userfaultfd, UffdMode, UffdOpen};
