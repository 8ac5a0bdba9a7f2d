//! The C structs that cross the boundary by value: `struct zs_pool_config`
//! (translated to and from [`zs::PoolConfig`]) and `struct zs_pool_stats`.
//!
//! This module owns the numeric codes of the C enums and the field layout
//! (which `include/zsmalloc.h` repeats field for field). It does not create
//! pools or touch pointers.

use std::ffi::c_ulong;

use zs::{
    AutoCompact, ChainRule, ClassDelta, CompactionAlgo, FullnessScheme, GeometryConfig, Mode,
    PoolConfig, PoolStats,
};

/// `ZS_MODE_KERNEL_COMPAT`: the kernel's layout and policy.
pub const ZS_MODE_KERNEL_COMPAT: u32 = 0;
/// `ZS_MODE_DEFAULT`: zmem's denser layout.
pub const ZS_MODE_DEFAULT: u32 = 1;
/// `ZS_CHAIN_MIN_WASTE`: the kernel's chain rule since 6.3.
pub const ZS_CHAIN_MIN_WASTE: u32 = 0;
/// `ZS_CHAIN_USED_PERCENT`: the kernel's chain rule before 6.3.
pub const ZS_CHAIN_USED_PERCENT: u32 = 1;
/// `ZS_CHAIN_BALANCED`: the rule proposed with the patch that drops the
/// limit of 256 classes.
pub const ZS_CHAIN_BALANCED: u32 = 2;
/// `ZS_FULLNESS_INUSE_RATIO`: 12 in-use-ratio groups (kernel 6.4+).
pub const ZS_FULLNESS_INUSE_RATIO: u32 = 0;
/// `ZS_FULLNESS_THREE_QUARTERS`: the 4 groups of kernels before 6.4, split
/// at 3/4 of the objects in use (`ZS_FULLNESS_LEGACY` in the header is a
/// deprecated alias).
pub const ZS_FULLNESS_THREE_QUARTERS: u32 = 1;
/// `ZS_COMPACT_DRAIN_SOURCE`: the kernel's compaction before 6.4, each
/// source drained into one destination after another (`ZS_COMPACT_LEGACY`
/// in the header is a deprecated alias).
pub const ZS_COMPACT_DRAIN_SOURCE: u32 = 0;
/// `ZS_COMPACT_KEEP_DESTINATION`: the kernel's compaction since 6.4, one
/// destination kept across sources (the header keeps a deprecated alias
/// under its former, history-numbered name).
pub const ZS_COMPACT_KEEP_DESTINATION: u32 = 1;
/// `ZS_COMPACT_OPTIMAL`: zmem's fewest-moves compaction.
pub const ZS_COMPACT_OPTIMAL: u32 = 2;

/// `struct zs_pool_config`: everything `zs_create_pool_ex` builds a pool from.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ZsPoolConfig {
    /// Bytes per page: 4096, 8192, 16384, 32768 or 65536.
    pub page_size: u32,
    /// Most pages per zspage, 1..=16 (the kernel's default is 8).
    pub chain: u32,
    /// Step between class sizes in bytes, a multiple of 8; 0 for the kernel's
    /// `max(page_size >> 8, 16)`.
    pub delta: u32,
    /// One of the `ZS_CHAIN_*` codes.
    pub chain_rule: u32,
    /// Non-zero to merge adjacent classes with equal geometry (the kernel does).
    pub merge: u32,
    /// One of the `ZS_MODE_*` codes.
    pub mode: u32,
    /// One of the `ZS_FULLNESS_*` codes.
    pub fullness: u32,
    /// One of the `ZS_COMPACT_*` codes.
    pub compaction: u32,
    /// Most pages the pool may hold at once; 0 for no limit.
    pub page_limit: u64,
    /// Compact a class automatically once it has this many freeable pages; 0
    /// for never.
    pub auto_compact_pages: u64,
}

impl ZsPoolConfig {
    /// The C form of a pool configuration.
    pub fn from_pool_config(c: &PoolConfig) -> ZsPoolConfig {
        ZsPoolConfig {
            page_size: c.geometry.page_size,
            chain: c.geometry.chain,
            delta: match c.geometry.delta {
                ClassDelta::Kernel => 0,
                ClassDelta::Fixed(d) => d,
            },
            chain_rule: match c.geometry.chain_rule {
                ChainRule::MinWaste => ZS_CHAIN_MIN_WASTE,
                ChainRule::UsedPercent => ZS_CHAIN_USED_PERCENT,
                ChainRule::Balanced => ZS_CHAIN_BALANCED,
            },
            merge: u32::from(c.geometry.merge),
            mode: match c.mode {
                Mode::KernelCompat => ZS_MODE_KERNEL_COMPAT,
                Mode::Default => ZS_MODE_DEFAULT,
            },
            fullness: match c.fullness {
                FullnessScheme::InuseRatio => ZS_FULLNESS_INUSE_RATIO,
                FullnessScheme::ThreeQuarters => ZS_FULLNESS_THREE_QUARTERS,
            },
            compaction: match c.compaction {
                CompactionAlgo::DrainSource => ZS_COMPACT_DRAIN_SOURCE,
                CompactionAlgo::KeepDestination => ZS_COMPACT_KEEP_DESTINATION,
                CompactionAlgo::Optimal => ZS_COMPACT_OPTIMAL,
            },
            page_limit: c.page_limit.map_or(0, |l| l as u64),
            auto_compact_pages: c.auto_compact.map_or(0, |a| a.threshold_pages),
        }
    }

    /// The pool configuration this describes, or `None` if an enum code is
    /// unknown. Geometry ranges (page size, chain, delta) are checked when
    /// the pool is made.
    pub fn to_pool_config(&self) -> Option<PoolConfig> {
        let chain_rule = match self.chain_rule {
            ZS_CHAIN_MIN_WASTE => ChainRule::MinWaste,
            ZS_CHAIN_USED_PERCENT => ChainRule::UsedPercent,
            ZS_CHAIN_BALANCED => ChainRule::Balanced,
            _ => return None,
        };
        let mode = match self.mode {
            ZS_MODE_KERNEL_COMPAT => Mode::KernelCompat,
            ZS_MODE_DEFAULT => Mode::Default,
            _ => return None,
        };
        let fullness = match self.fullness {
            ZS_FULLNESS_INUSE_RATIO => FullnessScheme::InuseRatio,
            ZS_FULLNESS_THREE_QUARTERS => FullnessScheme::ThreeQuarters,
            _ => return None,
        };
        let compaction = match self.compaction {
            ZS_COMPACT_DRAIN_SOURCE => CompactionAlgo::DrainSource,
            ZS_COMPACT_KEEP_DESTINATION => CompactionAlgo::KeepDestination,
            ZS_COMPACT_OPTIMAL => CompactionAlgo::Optimal,
            _ => return None,
        };
        let page_limit = match self.page_limit {
            0 => None,
            n => Some(usize::try_from(n).ok()?),
        };
        Some(PoolConfig {
            geometry: GeometryConfig {
                page_size: self.page_size,
                chain: self.chain,
                delta: match self.delta {
                    0 => ClassDelta::Kernel,
                    d => ClassDelta::Fixed(d),
                },
                chain_rule,
                merge: self.merge != 0,
                unit: 0,
            },
            mode,
            fullness,
            page_limit,
            compaction,
            auto_compact: match self.auto_compact_pages {
                0 => None,
                n => Some(AutoCompact { threshold_pages: n }),
            },
        })
    }
}

/// `struct zs_pool_stats`: the kernel's `pages_compacted` first, then zmem's
/// additions.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ZsPoolStats {
    /// Pages freed by compaction since the pool was made.
    pub pages_compacted: c_ulong,
    /// Objects moved by compaction since the pool was made.
    pub objs_moved: c_ulong,
    /// Pages the pool holds now (`zs_get_total_pages`).
    pub total_pages: c_ulong,
    /// Live objects.
    pub objs_used: c_ulong,
    /// Object slots in live zspages.
    pub objs_allocated: c_ulong,
    /// Live zspages.
    pub zspages: c_ulong,
}

impl From<PoolStats> for ZsPoolStats {
    fn from(s: PoolStats) -> Self {
        ZsPoolStats {
            pages_compacted: s.pages_compacted,
            objs_moved: s.objs_moved,
            total_pages: s.total_pages,
            objs_used: s.objs_used,
            objs_allocated: s.objs_allocated,
            zspages: s.zspages,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_matches_the_header() {
        assert_eq!(std::mem::size_of::<ZsPoolConfig>(), 48);
        assert_eq!(std::mem::align_of::<ZsPoolConfig>(), 8);
        assert_eq!(std::mem::size_of::<ZsPoolStats>(), 48);
    }

    #[test]
    fn configs_round_trip() {
        let mut limited = PoolConfig::default_mode(16384);
        limited.page_limit = Some(1000);
        limited.auto_compact = Some(AutoCompact { threshold_pages: 8 });
        limited.geometry.chain_rule = ChainRule::Balanced;
        for c in [
            PoolConfig::kernel_compat(),
            PoolConfig::default_mode(4096),
            limited,
        ] {
            assert_eq!(ZsPoolConfig::from_pool_config(&c).to_pool_config(), Some(c));
        }
    }

    #[test]
    fn unknown_codes_are_refused() {
        let good = ZsPoolConfig::from_pool_config(&PoolConfig::kernel_compat());
        for bad in [
            ZsPoolConfig { mode: 2, ..good },
            ZsPoolConfig {
                chain_rule: 3,
                ..good
            },
            ZsPoolConfig {
                fullness: 7,
                ..good
            },
            ZsPoolConfig {
                compaction: u32::MAX,
                ..good
            },
        ] {
            assert_eq!(bad.to_pool_config(), None);
        }
    }
}
