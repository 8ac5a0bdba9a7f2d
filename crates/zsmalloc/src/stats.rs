//! Pool and per-class statistics, and the kernel's debugfs `classes` table.
//!
//! Reads counters under each class lock in turn; changes nothing.
//!
//! # Consistency
//!
//! Each class's row is read whole under that class's lock, so it is a
//! snapshot of the class at one instant, also while compaction runs (a
//! zspage compaction has isolated is counted in `zspages` though it is on
//! no fullness list). Objects never move between classes, so the pool's
//! totals, summed from those rows, keep every per-class invariant
//! (`objs_used <= objs_allocated`; in kernel-compat mode
//! `total_pages == zspages * pages_per_zspage` summed). That is why
//! [`PoolStats::total_pages`] is the sum of the rows and not the pool's
//! running page counter, which is updated after the class lock is dropped.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;

use serde::Serialize;

use crate::fullness::NR_GROUPS;
use crate::pool::Pool;

/// Pool-wide counters (the kernel's `zs_pool_stats` plus totals).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PoolStats {
    /// Pages the pool holds (in a framed pool, the system pages holding a
    /// frame, read after the rows; not their sum, which counts frames).
    pub total_pages: u64,
    /// Live objects.
    pub objs_used: u64,
    /// Object slots in live zspages.
    pub objs_allocated: u64,
    /// Live zspages.
    pub zspages: u64,
    /// Pages freed by compaction since the pool was made (in a framed pool
    /// also the system pages emptied, which belong to no class's row).
    pub pages_compacted: u64,
    /// Objects moved by compaction since the pool was made (a counter
    /// the fine-grained fullness series added).
    pub objs_moved: u64,
}

/// One row of the per-class table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ClassStats {
    /// The class's (largest) logical index.
    pub index: u32,
    /// Slot size.
    pub size: u32,
    /// Zspages per fullness group (index 0 is the empty group). Zspages
    /// compaction has taken off the lists are in no group.
    pub groups: [u64; NR_GROUPS],
    /// Live zspages, listed or isolated by compaction.
    pub zspages: u64,
    /// Object slots in live zspages.
    pub obj_allocated: u64,
    /// Live objects.
    pub obj_used: u64,
    /// Pages counted for the class (4 KiB frames in a framed pool: default
    /// mode on system pages above 4 KiB).
    pub pages_used: u64,
    /// Pages per zspage.
    pub pages_per_zspage: u32,
    /// Pages compaction could free now (`zs_can_compact`).
    pub freeable: u64,
    /// Pages freed by compaction.
    pub pages_compacted: u64,
    /// Objects moved by compaction.
    pub objs_moved: u64,
}

impl Pool {
    /// One row per physical class, smallest first.
    pub fn class_stats(&self) -> Vec<ClassStats> {
        self.classes
            .iter()
            .map(|class| {
                let inner = class.lock();
                let objs = u64::from(class.objs());
                let allocated = u64::from(inner.zspages) * objs;
                let mut groups = [0u64; NR_GROUPS];
                for (g, count) in groups.iter_mut().zip(inner.counts.iter()) {
                    *g = u64::from(*count);
                }
                ClassStats {
                    index: class.info.index,
                    size: class.info.size,
                    groups,
                    zspages: u64::from(inner.zspages),
                    obj_allocated: allocated,
                    obj_used: inner.objs_used,
                    pages_used: inner.pages,
                    pages_per_zspage: class.info.pages_per_zspage,
                    freeable: (allocated - inner.objs_used) / objs
                        * u64::from(class.info.pages_per_zspage),
                    pages_compacted: inner.pages_compacted,
                    objs_moved: inner.objs_moved,
                }
            })
            .collect()
    }

    /// Pool-wide counters, summed from [`Self::class_stats`]: consistent
    /// with themselves under concurrent writes, frees and compaction (see
    /// the module's comment).
    pub fn stats(&self) -> PoolStats {
        let mut s = PoolStats::default();
        for row in self.class_stats() {
            s.total_pages += row.pages_used;
            s.objs_used += row.obj_used;
            s.objs_allocated += row.obj_allocated;
            s.zspages += row.zspages;
            s.pages_compacted += row.pages_compacted;
            s.objs_moved += row.objs_moved;
        }
        if let Some(arena) = &self.frames {
            s.total_pages = arena.used_pages();
            // Emptying sparse system pages belongs to no class.
            s.pages_compacted += arena.pages_compacted.load(Ordering::Relaxed);
            s.objs_moved += arena.objs_moved.load(Ordering::Relaxed);
        }
        s
    }

    /// The per-class table in the layout of the kernel's debugfs
    /// `/sys/kernel/debug/zsmalloc/<pool>/classes`, plus a total line.
    pub fn format_classes(&self) -> String {
        let scheme = self.config().fullness;
        let labels = scheme.labels();
        let mut out = String::new();
        let _ = write!(out, " class  size ");
        for l in labels {
            let _ = write!(out, "{l:>10} ");
        }
        let _ = writeln!(
            out,
            "obj_allocated   obj_used pages_used pages_per_zspage freeable"
        );
        let mut total = (0u64, 0u64, 0u64, 0u64);
        let mut group_totals = vec![0u64; labels.len()];
        for row in self.class_stats() {
            let _ = write!(out, "{:>6} {:>5} ", row.index, row.size);
            for (g, t) in row.groups[1..=labels.len()]
                .iter()
                .zip(group_totals.iter_mut())
            {
                let _ = write!(out, "{g:>10} ");
                *t += g;
            }
            let _ = writeln!(
                out,
                "{:>13} {:>10} {:>10} {:>16} {:>8}",
                row.obj_allocated, row.obj_used, row.pages_used, row.pages_per_zspage, row.freeable
            );
            total.0 += row.obj_allocated;
            total.1 += row.obj_used;
            total.2 += row.pages_used;
            total.3 += row.freeable;
        }
        let _ = write!(out, "{:>6} {:>5} ", "Total", "");
        for t in group_totals {
            let _ = write!(out, "{t:>10} ");
        }
        let _ = writeln!(
            out,
            "{:>13} {:>10} {:>10} {:>16} {:>8}",
            total.0, total.1, total.2, "", total.3
        );
        out
    }
}
