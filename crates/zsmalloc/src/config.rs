//! What a pool is made from: its mode, compaction algorithm, automatic
//! compaction policy and the whole [`PoolConfig`].
//!
//! This module owns the configuration types and their names on the command
//! line. It holds no pool state and calls nothing in the pool: `pool.rs`
//! and `compact.rs` both read these types, so they live here, below both.

use std::fmt;

use serde::Serialize;

use crate::fullness::FullnessScheme;
use crate::geometry::{ChainRule, ClassDelta, GeometryConfig};

/// Which of the two behaviours a pool has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Exactly the kernel's layout and policy.
    KernelCompat,
    /// zmem's denser layout.
    Default,
}

impl Mode {
    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Mode::KernelCompat => "kernel-compat",
            Mode::Default => "default",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Mode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "kernel-compat" => Ok(Mode::KernelCompat),
            "default" => Ok(Mode::Default),
            other => Err(format!(
                "unknown mode '{other}': use kernel-compat or default"
            )),
        }
    }
}

/// Default mode's retained share of freed pages: up to one page in this
/// many of the pages out stays resident in the page source, on top of its
/// fixed 1 MiB cache, after compaction, the trim or a free gives it back, so
/// that the next zspage or store takes it without a page fault (the user
/// space analogue of the kernel's free page lists; `Pool::set_page_retain_divisor`).
/// Not counted in `mem_used_total`. kernel-compat keeps none. With kept
/// pages released by time (not by every background compaction), 1/8 is the
/// share at which `zmem exp latency`'s stores fault rarely enough to meet
/// its tail-latency goal against zbud, with the resident set still under
/// zbud's (smaller shares miss it: BENCHMARKS.md, `zmem exp latency`). An
/// idle store gives them back within seconds.
pub const DEFAULT_RETAIN_DIVISOR: usize = 8;

/// Everything a pool is created from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct PoolConfig {
    /// The size-class geometry.
    pub geometry: GeometryConfig,
    /// Kernel-compatible or zmem's default behaviour.
    pub mode: Mode,
    /// How zspages are grouped by fullness.
    pub fullness: FullnessScheme,
    /// Most pages the pool may hold at once (`None`: as many as the OS gives).
    pub page_limit: Option<usize>,
    /// The compaction algorithm.
    pub compaction: CompactionAlgo,
    /// Compact a class automatically when enough of it is freeable.
    pub auto_compact: Option<AutoCompact>,
}

impl PoolConfig {
    /// The kernel's pool: 4 KiB pages, chain 8, 16-byte classes, min-waste,
    /// merged, in-use-ratio groups, kernel-compat mode.
    pub fn kernel_compat() -> PoolConfig {
        PoolConfig {
            geometry: GeometryConfig::default(),
            mode: Mode::KernelCompat,
            fullness: FullnessScheme::InuseRatio,
            page_limit: None,
            compaction: CompactionAlgo::KeepDestination,
            auto_compact: None,
        }
    }

    /// The pool of `mode` on 4 KiB pages: [`Self::kernel_compat`] or
    /// [`Self::default_mode`].
    pub fn of_mode(mode: Mode) -> PoolConfig {
        match mode {
            Mode::KernelCompat => Self::kernel_compat(),
            Mode::Default => Self::default_mode(4096),
        }
    }

    /// zmem's default pool on pages of `page_size` bytes: chain 16, classes
    /// 16 bytes apart on 4 KiB pages and `page_size / 512` apart on larger
    /// ones (32 bytes on 16 KiB, 128 on 64 KiB), min-waste, merged.
    ///
    /// On pages above 4 KiB the pool is framed: its zspages are 4 KiB frames
    /// of shared system pages, laid out as a unit of `page_size` on 4 KiB
    /// pages, so its class step is that unit's
    /// ([`PoolConfig::default_mode_for_unit`]); that step wastes less than
    /// `page_size / 128` (BENCHMARKS.md, "Page sizes and compression
    /// units").
    pub fn default_mode(page_size: u32) -> PoolConfig {
        PoolConfig {
            geometry: GeometryConfig {
                page_size,
                chain: 16,
                delta: ClassDelta::Fixed(default_delta(page_size)),
                chain_rule: ChainRule::MinWaste,
                merge: true,
                unit: 0,
            },
            mode: Mode::Default,
            fullness: FullnessScheme::InuseRatio,
            page_limit: None,
            compaction: CompactionAlgo::Optimal,
            auto_compact: None,
        }
    }

    /// zmem's default pool for compression units of `unit` bytes on pages
    /// of `page_size` bytes (`unit` 0 or at most a page: exactly
    /// [`Self::default_mode`]). The class step is [`default_unit_delta`]:
    /// with units above the page, objects are mostly larger than a page,
    /// and after freeing half and compacting each occupied class keeps one
    /// partly filled zspage (up to a page unused), so fewer, wider classes
    /// waste less (BENCHMARKS.md, "Page sizes and compression units", three
    /// corpora, lz4 and zstd).
    pub fn default_mode_for_unit(page_size: u32, unit: u32) -> PoolConfig {
        let mut config = Self::default_mode(page_size);
        config.geometry.unit = unit;
        config.geometry.delta = ClassDelta::Fixed(default_unit_delta(page_size, unit));
        config
    }
}

/// Default mode's class step on pages of `page_size` bytes: 16 bytes up to
/// 8 KiB pages, `page_size / 512` above (see [`PoolConfig::default_mode`]).
pub fn default_delta(page_size: u32) -> u32 {
    (page_size / UNIT_DELTA_DIVISOR).max(16)
}

/// Default mode's class step for compression units of `unit` bytes on pages
/// of `page_size` bytes: default mode's step for the page (16 bytes up to
/// 8 KiB pages, `page_size / 512` above), or `unit / 512` if that is wider
/// (32 bytes for 16 KiB units, 128 for 64 KiB; unchanged for units up to
/// 8 KiB). See [`PoolConfig::default_mode_for_unit`].
pub fn default_unit_delta(page_size: u32, unit: u32) -> u32 {
    default_delta(page_size).max(unit / UNIT_DELTA_DIVISOR)
}

/// Classes per unit-sized range in default mode with a unit above 8 KiB.
const UNIT_DELTA_DIVISOR: u32 = 512;

/// Which compaction algorithm a pool runs (see `compact.rs` for each one's
/// steps). `DrainSource` also brings the list insertion of its kernels (a zspage
/// with fewer objects in use than a list's head goes second), which the
/// kernel dropped in 6.4 together with the algorithm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CompactionAlgo {
    /// The kernel's before 6.4: each source zspage is drained into one
    /// destination after another, each destination going back to the lists
    /// after the source; stops when no destination is left.
    DrainSource,
    /// The kernel's since 6.4 (from the fine-grained fullness series): one
    /// destination zspage is kept across sources until it is full;
    /// stops as soon as no zspage can be freed.
    KeepDestination,
    /// zmem's: the fewest moves that free every freeable zspage.
    Optimal,
}

impl CompactionAlgo {
    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            CompactionAlgo::DrainSource => "drain-source",
            CompactionAlgo::KeepDestination => "keep-destination",
            CompactionAlgo::Optimal => "optimal",
        }
    }
}

/// Automatic compaction: after a free, compact the class once its freeable
/// pages reach `threshold_pages`. Compaction brings the class back to 0
/// freeable pages, so another run needs `threshold_pages` more to be freed
/// first: each run frees at least that much, and the policy cannot thrash.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct AutoCompact {
    /// Freeable pages in one class that trigger its compaction (at least 1).
    pub threshold_pages: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::Geometry;

    #[test]
    fn unit_deltas_widen_only_above_8k_units() {
        for (page, unit, delta) in [
            (4096, 0, 16),
            (4096, 4096, 16),
            (4096, 8192, 16),
            (4096, 16384, 32),
            (4096, 32768, 64),
            (4096, 65536, 128),
            (8192, 8192, 16),
            (16384, 16384, 32),
            (16384, 65536, 128),
            (65536, 65536, 128),
        ] {
            let config = PoolConfig::default_mode_for_unit(page, unit);
            assert_eq!(
                config.geometry.delta,
                ClassDelta::Fixed(delta),
                "{page} {unit}"
            );
            assert_eq!(config.geometry.unit, unit);
            assert!(config.geometry.validate().is_ok());
        }
    }

    #[test]
    fn a_unit_of_one_page_is_the_page_default() {
        for page in [4096, 8192, 16384, 32768, 65536] {
            let plain = Geometry::new(PoolConfig::default_mode(page).geometry).unwrap();
            let unit =
                Geometry::new(PoolConfig::default_mode_for_unit(page, page).geometry).unwrap();
            assert_eq!(plain.classes(), unit.classes(), "{page}");
        }
    }
}
