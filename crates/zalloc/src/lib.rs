//! zmem's page-packing allocators, and the one place that opens any
//! allocator by name.
//!
//! Three allocators live here, one module each: [`zbud`] (at most two
//! objects a page), [`z3fold`] (at most three, in-page compaction) and
//! [`zblock`] (fixed-size slots in multi-page blocks). Their shared
//! bookkeeping is private to this crate: read holds (`holds`), the
//! unbuddied lists of zbud and z3fold (`lists`), the handle tag and the
//! totals check (`bookkeeping`). zsmalloc is its own crate; this one only
//! opens it.
//!
//! Everything that lets a user choose an allocator (`--alloc
//! zsmalloc|zbud|z3fold|zblock` in the store, `zmem replay`, `zmem serve`,
//! `zmem exp latency`) goes through [`open`], so the names, the options they
//! take and the errors for bad ones are the same everywhere.
//!
//! This crate owns the three allocators and the name table. It may not map
//! memory itself (every page comes from a `pages::PageSource`) and does not
//! reach into zsmalloc beyond its public configuration.
//!
//! ```
//! use zalloc::{open, AllocOptions};
//!
//! let pool = open("zsmalloc", &AllocOptions::default()).unwrap();
//! let h = pool.malloc(100).unwrap();
//! pool.write(h, b"hello").unwrap();
//! let mut buf = [0u8; 5];
//! zpool::read_into(&*pool, h, &mut buf).unwrap();
//! assert_eq!(&buf, b"hello");
//! pool.free(h).unwrap();
//! ```

#![warn(missing_docs)]

mod bookkeeping;
mod holds;
mod lists;
pub mod z3fold;
pub mod zblock;
pub mod zbud;

use std::sync::Arc;

use zpool::{ZPool, ZPoolError};
use zsmalloc::{ClassDelta, Mode, Pool, PoolConfig};

/// Every allocator name [`open`] knows, zsmalloc first.
pub const NAMES: [&str; 4] = ["zsmalloc", "zbud", "z3fold", "zblock"];

/// How to make an allocator.
///
/// `page_size` applies to every allocator. `mode`, `chain` and `delta` are
/// zsmalloc's and are ignored by the others (they have no size classes to
/// configure), so one set of options can open every allocator side by side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllocOptions {
    /// Bytes per page (4096 up to 65536, a power of two).
    pub page_size: usize,
    /// zsmalloc: the largest object, a compression unit larger than the page
    /// (a power of two up to 65536) whose objects span pages of one zspage;
    /// `None` for objects up to a page. The other allocators keep objects of
    /// at most a page and ignore it (a store keeps larger blocks beside them).
    pub unit: Option<usize>,
    /// zsmalloc: kernel-compatible layout or zmem's default.
    pub mode: Mode,
    /// zsmalloc: most pages per zspage (1..=16); `None` keeps the mode's
    /// value (kernel-compat 8, default 16).
    pub chain: Option<u32>,
    /// zsmalloc: fixed step in bytes between size classes (a multiple of
    /// 8); `None` keeps the mode's (kernel-compat `max(PAGE_SIZE >> 8, 16)`,
    /// default 16 up to 8 KiB pages, `page_size / 512` on larger ones).
    pub delta: Option<u32>,
    /// zsmalloc: merge classes with the same pages and objects per zspage
    /// (the kernel's class merging); both modes merge by default.
    pub merge: bool,
    /// zsmalloc: the retained share of freed pages, as a divisor: up to one
    /// page in N of those the pool holds (plus the page source's fixed
    /// 1 MiB) stays resident for reuse, not counted in the pool's pages;
    /// `Some(0)` turns it off, so the resident set follows the pool as
    /// closely as the fixed cache allows; `None` keeps the mode's (default
    /// mode [`zsmalloc::DEFAULT_RETAIN_DIVISOR`], 8; kernel-compat 0).
    pub retain_divisor: Option<usize>,
}

impl Default for AllocOptions {
    /// zmem's default mode on 4 KiB pages.
    fn default() -> Self {
        AllocOptions {
            page_size: 4096,
            unit: None,
            mode: Mode::Default,
            chain: None,
            delta: None,
            merge: true,
            retain_divisor: None,
        }
    }
}

impl AllocOptions {
    /// The zsmalloc pool configuration these options describe.
    pub fn zsmalloc_config(&self) -> Result<PoolConfig, ZPoolError> {
        let page_size = u32::try_from(self.page_size).map_err(|_| {
            ZPoolError::Config(format!("page size {} is too large", self.page_size))
        })?;
        let mut config = match self.mode {
            Mode::Default => match self.unit {
                Some(unit) => PoolConfig::default_mode_for_unit(
                    page_size,
                    u32::try_from(unit)
                        .map_err(|_| ZPoolError::Config(format!("unit {unit} is too large")))?,
                ),
                None => PoolConfig::default_mode(page_size),
            },
            Mode::KernelCompat => {
                let mut c = PoolConfig::kernel_compat();
                c.geometry.page_size = page_size;
                c
            }
        };
        if let Some(chain) = self.chain {
            config.geometry.chain = chain;
        }
        if let Some(delta) = self.delta {
            config.geometry.delta = ClassDelta::Fixed(delta);
        }
        config.geometry.merge &= self.merge;
        if let Some(unit) = self.unit {
            config.geometry.unit = u32::try_from(unit)
                .map_err(|_| ZPoolError::Config(format!("unit {unit} is too large")))?;
        }
        config
            .geometry
            .validate()
            .map_err(|e| ZPoolError::Config(e.to_string()))?;
        Ok(config)
    }
}

/// Opens the allocator called `name` (one of [`NAMES`]) with `opts`.
///
/// Unknown names and settings an allocator cannot use (a page size it does
/// not support, an invalid chain or delta) give [`ZPoolError::Config`].
///
/// What each one is (see its module, or crate `zsmalloc`):
/// - `zsmalloc`: size classes packed into zspages, compaction; objects up
///   to a page.
/// - `zbud`: at most two objects a page; objects up to `page_size - 2 *
///   page_size / 64` (3968 bytes on 4 KiB pages).
/// - `z3fold`: at most three objects a page, headless pages for big
///   objects, in-page compaction on [`ZPool::compact`]; objects up to a page.
/// - `zblock`: fixed-size slots in 1..=8-page blocks; objects up to the
///   largest slot (4080 bytes on 4 KiB pages).
///
/// [`ZPool::max_object_size`] can thus be below the page size: a store that
/// keeps incompressible pages whole must check it and keep such pages
/// elsewhere (or refuse them) for zbud and zblock.
pub fn open(name: &str, opts: &AllocOptions) -> Result<Arc<dyn ZPool>, ZPoolError> {
    match name {
        "zsmalloc" => {
            let pool = Pool::new(opts.zsmalloc_config()?).map_err(ZPoolError::from)?;
            if let Some(divisor) = opts.retain_divisor {
                pool.set_page_retain_divisor(divisor);
            }
            Ok(Arc::new(pool))
        }
        "zbud" => Ok(Arc::new(zbud::ZBud::new(opts.page_size, None)?)),
        "z3fold" => Ok(Arc::new(z3fold::Z3Fold::new(opts.page_size, None)?)),
        "zblock" => Ok(Arc::new(zblock::ZBlock::new(opts.page_size, None)?)),
        other => Err(ZPoolError::Config(format!(
            "unknown allocator '{other}': use one of {}",
            NAMES.join(", ")
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zsmalloc_opens_in_both_modes() {
        for mode in [Mode::Default, Mode::KernelCompat] {
            for page_size in [4096, 16384, 65536] {
                let opts = AllocOptions {
                    page_size,
                    mode,
                    ..AllocOptions::default()
                };
                let pool = open("zsmalloc", &opts).unwrap();
                assert_eq!(pool.name(), "zsmalloc");
                assert_eq!(pool.page_size(), page_size);
            }
        }
    }

    #[test]
    fn the_retained_share_is_the_modes_unless_set() {
        for (mode, set, want) in [
            (Mode::Default, None, zsmalloc::DEFAULT_RETAIN_DIVISOR),
            (Mode::KernelCompat, None, 0),
            (Mode::Default, Some(0), 0),
            (Mode::KernelCompat, Some(16), 16),
        ] {
            let opts = AllocOptions {
                mode,
                retain_divisor: set,
                ..AllocOptions::default()
            };
            let pool = open("zsmalloc", &opts).unwrap();
            assert_eq!(pool.retained_pages().divisor, want, "{mode:?} {set:?}");
        }
    }

    #[test]
    fn every_name_opens_on_every_page_size() {
        for name in NAMES {
            for page_size in [4096, 16384, 65536] {
                let opts = AllocOptions {
                    page_size,
                    ..AllocOptions::default()
                };
                let pool = open(name, &opts).unwrap();
                assert_eq!((pool.name(), pool.page_size()), (name, page_size));
                let h = pool.malloc(pool.max_object_size()).unwrap();
                pool.write(h, b"x").unwrap();
                pool.free(h).unwrap();
                assert_eq!(pool.total_pages(), 0);
            }
        }
    }

    #[test]
    fn chain_and_delta_reach_the_geometry() {
        let opts = AllocOptions {
            mode: Mode::KernelCompat,
            chain: Some(4),
            delta: Some(32),
            ..AllocOptions::default()
        };
        let c = opts.zsmalloc_config().unwrap();
        assert_eq!(c.geometry.chain, 4);
        assert_eq!(c.geometry.delta, ClassDelta::Fixed(32));
        assert_eq!(c.mode, Mode::KernelCompat);
    }

    #[test]
    fn bad_names_and_settings_are_config_errors() {
        let d = AllocOptions::default();
        assert!(matches!(open("slab", &d), Err(ZPoolError::Config(_))));
        let spoilers: [fn(&mut AllocOptions); 3] = [
            |o| o.chain = Some(0),
            |o| o.delta = Some(12),
            |o| o.page_size = 1000,
        ];
        for spoil in spoilers {
            let mut bad = d;
            spoil(&mut bad);
            assert!(
                matches!(open("zsmalloc", &bad), Err(ZPoolError::Config(_))),
                "{bad:?}"
            );
        }
    }
}
