//! The store options shared by `zmem replay` and `zmem serve`.
//!
//! [`StoreArgs`] are the flags (`--alloc`, `--comp`, `--comp-params`,
//! `--page-size`, `--unit`, `--mode`, `--chain`, `--delta`, `--mem-limit`,
//! and the background compactor's `--auto-compact`, `--compact-cpu`,
//! `--compact-min-gain`); each of the first eight takes a
//! comma-separated list, and [`StoreArgs::specs`] expands them into every
//! combination, so one `zmem replay` can compare configurations side by side.
//! A [`StoreSpec`] is one configuration; [`StoreSpec::open`] makes its store.
//! Sizes are read by [`crate::size::parse`] (the kernel's `memparse`).
//! `--comp` is parsed here, once, into a [`zcomp::Algorithm`] (zcomp owns
//! the names); nothing above this module handles a compressor's name.

use std::sync::Arc;

use clap::Args;
use serde::Serialize;
use zalloc::AllocOptions;
use zram::{AutoCompactMode, AutoCompactPolicy, Store};
use zsmalloc::Mode;

use zcomp::Algorithm;

use crate::kernel::KernelCompat;
use crate::Error;

/// Store flags.
#[derive(Args, Debug, Clone)]
pub struct StoreArgs {
    /// Allocator(s): zsmalloc, zbud, z3fold, zblock.
    #[arg(long, value_delimiter = ',', default_values_t = [String::from("zsmalloc")])]
    pub alloc: Vec<String>,
    /// Compressor(s), by zram's names: lzo-rle, lzo, lz4, lz4hc, zstd, deflate, lz4-flex
    /// [default: the mode's: in kernel-compat the kernel's zram default (--kernel-comp); lz4
    /// in default mode, faster to read for little more memory ("zmem bench store" in
    /// BENCHMARKS.md)]
    #[arg(long, value_delimiter = ',', value_parser = parse_comp)]
    pub comp: Vec<Algorithm>,
    /// The kernel kernel-compat mode stands for, by its zram's default compressor (to
    /// answer for another machine) [default: the running kernel's CONFIG_ZRAM_DEF_COMP, or a
    /// hot-added zram device's; else upstream's lzo-rle]
    #[arg(long, value_name = "NAME", value_parser = parse_comp)]
    pub kernel_comp: Option<Algorithm>,
    /// Compressor settings in zram's algorithm_params syntax ("level=3 dict=FILE").
    #[arg(long, default_value = "")]
    pub comp_params: String,
    /// Page size(s): 4K, 16K, 64K.
    #[arg(long, value_delimiter = ',', value_parser = parse_page_size, default_values_t = [4096u64])]
    pub page_size: Vec<u64>,
    /// Compression unit(s): the block each store compresses whole, 4K to 64K,
    /// a power of two, at least the page size; objects up to the unit span
    /// pages of one zspage [default: the page size]
    #[arg(long, value_delimiter = ',', value_name = "SIZE", value_parser = parse_unit)]
    pub unit: Vec<u64>,
    /// zsmalloc mode(s): default or kernel-compat [default: default; `zmem
    /// replay` puts kernel-compat beside it]
    #[arg(long, value_delimiter = ',')]
    pub mode: Vec<Mode>,
    /// zsmalloc pages per zspage (1 to 16); default: the mode's.
    #[arg(long, value_delimiter = ',', value_parser = crate::flags::whole::<u32>(1, MAX_CHAIN))]
    pub chain: Vec<u32>,
    /// zsmalloc class step in bytes (a multiple of 8 from 8 to the page
    /// size); default: the mode's.
    #[arg(long, value_delimiter = ',', value_parser = parse_delta)]
    pub delta: Vec<u32>,
    /// zsmalloc: do not merge size classes (the class-merging experiment
    /// compares both).
    #[arg(long)]
    pub no_merge: bool,
    /// Memory limit (mem_limit) per store, e.g. 64M; 0 for none (the only
    /// flag here where 0 is valid), at most 1T.
    #[arg(long, value_parser = crate::flags::size(0, 1 << 40), default_value = "0")]
    pub mem_limit: u64,
    /// Background compaction: on, off or shrinker (only when memory is
    /// tight: near --mem-limit, or under /proc/pressure/memory pressure),
    /// comma-separated for one configuration each [default: on in default
    /// mode, off in kernel-compat, as the kernel compacts only when asked or
    /// from its shrinker]
    #[arg(long, value_delimiter = ',', value_parser = parse_auto_compact)]
    pub auto_compact: Vec<AutoCompactMode>,
    /// Background compaction's CPU budget: percent of one CPU (0 < PCT <= 100).
    #[arg(long, value_name = "PCT", default_value_t = 5.0, value_parser = parse_cpu_percent)]
    pub compact_cpu: f64,
    /// Background compaction never runs to free fewer pages than this (1 to
    /// 2^30), nor less than 0.5% of compr_data_size.
    #[arg(long, value_name = "PAGES", default_value_t = 32, value_parser = crate::flags::whole::<u64>(1, 1 << 30))]
    pub compact_min_gain: u64,
    /// zsmalloc's retained share of freed pages: up to one page in N of
    /// those the pool holds stays resident for reuse after compaction or a
    /// free gives it back, so a churning store faults fewer pages in; the
    /// resident set may exceed mem_used_total by that share plus 1 MiB.
    /// 0 turns it off [default: the mode's: 8 in default mode, 0 in
    /// kernel-compat]
    #[arg(long, value_name = "N", value_parser = crate::flags::whole_usize(0, 1 << 20))]
    pub retain_divisor: Option<usize>,
}

/// Parses `--comp`: a compressor by zram's name (zcomp judges the name).
pub fn parse_comp(s: &str) -> Result<Algorithm, String> {
    Algorithm::from_name(s).map_err(|e| e.to_string())
}

/// Parses `--auto-compact`.
pub fn parse_auto_compact(s: &str) -> Result<AutoCompactMode, String> {
    s.parse()
}

/// Parses `--compact-cpu`: a percentage of one CPU, more than 0, at most 100.
pub fn parse_cpu_percent(s: &str) -> Result<f64, String> {
    match s.trim().trim_end_matches('%').parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 100.0 => Ok(v),
        _ => Err(format!(
            "'{s}' is not a CPU share (a percentage above 0, at most 100)"
        )),
    }
}

/// One store configuration.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StoreSpec {
    /// Allocator name.
    pub alloc: String,
    /// Compressor (serialised by its zram name).
    #[serde(serialize_with = "algorithm_name")]
    pub comp: Algorithm,
    /// Compressor settings.
    pub comp_params: String,
    /// Bytes per page (the allocator's page, the unit memory is counted in).
    pub page_size: usize,
    /// Bytes compressed whole (the store's block), if larger than the page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unit: Option<usize>,
    /// zsmalloc mode.
    pub mode: Mode,
    /// zsmalloc chain, if set.
    pub chain: Option<u32>,
    /// zsmalloc delta, if set.
    pub delta: Option<u32>,
    /// zsmalloc class merging.
    pub merge: bool,
    /// Memory limit in bytes (0: none).
    pub mem_limit: u64,
    /// The background compactor's policy.
    pub auto_compact: AutoCompactPolicy,
    /// zsmalloc's retained share of freed pages, as a divisor, if set (see
    /// `zalloc::AllocOptions::retain_divisor`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retain_divisor: Option<usize>,
}

/// Serialises an algorithm as its zram name (`"lz4"`), for
/// `#[serde(serialize_with = "recipe::spec::algorithm_name")]`.
pub fn algorithm_name<S: serde::Serializer>(a: &Algorithm, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(a.name())
}

/// The background compaction a mode gets when `--auto-compact` is not
/// given: on in default mode, off in kernel-compat.
pub fn default_auto_compact(mode: Mode) -> AutoCompactMode {
    match mode {
        Mode::KernelCompat => AutoCompactMode::Off,
        Mode::Default => AutoCompactMode::On,
    }
}

/// The longest zspage chain zsmalloc takes (pages per zspage).
pub const MAX_CHAIN: u32 = 16;

/// The largest page size, and so the largest class step.
const MAX_PAGE_SIZE: u32 = 65536;

/// Parses a class step: a multiple of 8 bytes from 8 to 65536 (at most the
/// page size, which the store checks with the page size it is paired with).
pub fn parse_delta(s: &str) -> Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(d) if d > 0 && d % 8 == 0 && d <= MAX_PAGE_SIZE && !s.trim().starts_with('+') => Ok(d),
        _ => Err(format!(
            "'{s}' is not a class step: a multiple of 8 from 8 to {MAX_PAGE_SIZE} bytes"
        )),
    }
}

/// The compressor a mode uses when `--comp` is not given: kernel-compat
/// takes the running kernel's zram default ([`crate::kernel`]); default
/// mode takes lz4, faster to read than lzo-rle for little more memory
/// (BENCHMARKS.md, "zmem bench store").
pub fn default_comp(mode: Mode) -> Algorithm {
    match mode {
        Mode::KernelCompat => KernelCompat::running().comp,
        Mode::Default => Algorithm::Lz4,
    }
}

impl StoreArgs {
    /// The kernel kernel-compat mode stands for: `--kernel-comp`'s, else
    /// the running kernel's.
    pub fn kernel(&self) -> KernelCompat {
        match self.kernel_comp {
            Some(c) => KernelCompat::given(c),
            None => KernelCompat::running().clone(),
        }
    }
}

/// Parses a compression unit: a power of two from 4K to 64K (at least the
/// page size, which [`StoreArgs::specs`] checks with the page size it is
/// paired with).
pub fn parse_unit(s: &str) -> Result<u64, String> {
    match crate::size::parse(s) {
        Ok(n) if n.is_power_of_two() && (4096..=65536).contains(&n) => Ok(n),
        _ => Err(format!(
            "'{s}' is not a compression unit (4K, 8K, 16K, 32K or 64K)"
        )),
    }
}

/// Parses a page size: one of the sizes zsmalloc's geometry accepts (4K, 8K,
/// 16K, 32K, 64K).
pub fn parse_page_size(s: &str) -> Result<u64, String> {
    let n = crate::size::parse(s).map_err(|e| e.to_string())?;
    if zsmalloc::geometry::PAGE_SIZES.contains(&u32::try_from(n).unwrap_or(0)) {
        Ok(n)
    } else {
        Err(format!(
            "'{s}' is not a page size (4K, 8K, 16K, 32K or 64K)"
        ))
    }
}

impl StoreArgs {
    /// Every combination of the listed values, in flag order (default mode
    /// when no `--mode` is given).
    pub fn specs(&self) -> Result<Vec<StoreSpec>, Error> {
        self.specs_with_modes(&[Mode::Default])
    }

    /// Every combination of the listed values, in flag order, with
    /// `modes` when no `--mode` is given.
    pub fn specs_with_modes(&self, modes: &[Mode]) -> Result<Vec<StoreSpec>, Error> {
        let modes = if self.mode.is_empty() {
            modes
        } else {
            &self.mode
        };
        let opt = |v: &[u32]| -> Vec<Option<u32>> {
            if v.is_empty() {
                vec![None]
            } else {
                v.iter().copied().map(Some).collect()
            }
        };
        // No --comp: one pass with each mode's own compressor.
        let comps: Vec<Option<Algorithm>> = if self.comp.is_empty() {
            vec![None]
        } else {
            self.comp.iter().copied().map(Some).collect()
        };
        let autos: Vec<Option<AutoCompactMode>> = if self.auto_compact.is_empty() {
            vec![None]
        } else {
            self.auto_compact.iter().copied().map(Some).collect()
        };
        let units: Vec<Option<u64>> = if self.unit.is_empty() {
            vec![None]
        } else {
            self.unit.iter().copied().map(Some).collect()
        };
        let mut specs = Vec::new();
        for alloc in &self.alloc {
            for comp in &comps {
                for (&page_size, &unit) in self
                    .page_size
                    .iter()
                    .flat_map(|p| units.iter().map(move |u| (p, u)))
                {
                    if unit.is_some_and(|u| u < page_size) {
                        return Err(Error::Usage(format!(
                            "--unit {} is smaller than --page-size {}: the unit is at least a page",
                            unit.unwrap_or(0),
                            page_size
                        )));
                    }
                    // A unit of one page is the page itself.
                    let unit = unit.filter(|&u| u > page_size).map(|u| u as usize);
                    for &mode in modes {
                        for chain in opt(&self.chain) {
                            for (delta, auto) in opt(&self.delta)
                                .into_iter()
                                .flat_map(|d| autos.iter().map(move |&a| (d, a)))
                            {
                                let page_size = usize::try_from(page_size).map_err(|_| {
                                    Error::Usage(format!("page size {page_size} is too large"))
                                })?;
                                let mut auto_compact = AutoCompactPolicy::new(
                                    auto.unwrap_or(default_auto_compact(mode)),
                                );
                                auto_compact.cpu_percent = self.compact_cpu;
                                auto_compact.min_gain_pages = self.compact_min_gain;
                                auto_compact.validate().map_err(Error::Usage)?;
                                specs.push(StoreSpec {
                                    alloc: alloc.clone(),
                                    comp: comp.unwrap_or(match (mode, self.kernel_comp) {
                                        (Mode::KernelCompat, Some(k)) => k,
                                        _ => default_comp(mode),
                                    }),
                                    comp_params: self.comp_params.clone(),
                                    page_size,
                                    unit,
                                    mode,
                                    chain,
                                    delta,
                                    merge: !self.no_merge,
                                    mem_limit: self.mem_limit,
                                    auto_compact,
                                    retain_divisor: self.retain_divisor,
                                });
                            }
                        }
                    }
                }
            }
        }
        // zsmalloc's settings mean nothing to the others: one column each.
        specs.dedup_by(|b, a| {
            a.alloc != "zsmalloc"
                && a.alloc == b.alloc
                && a.auto_compact == b.auto_compact
                && a.comp == b.comp
                && a.page_size == b.page_size
                && a.unit == b.unit
        });
        Ok(specs)
    }
}

impl StoreSpec {
    /// `alloc` with `comp` (no compressor settings) in `mode`, on 4 KiB
    /// pages compressed one by one, with the allocator's own chain, delta
    /// and class merging, no memory limit, no background compactor and the
    /// mode's retained share: what a caller changes, it sets after.
    pub fn new(alloc: &str, comp: Algorithm, mode: Mode) -> StoreSpec {
        StoreSpec {
            alloc: alloc.into(),
            comp,
            comp_params: String::new(),
            page_size: 4096,
            unit: None,
            mode,
            chain: None,
            delta: None,
            merge: true,
            mem_limit: 0,
            auto_compact: AutoCompactPolicy::new(AutoCompactMode::Off),
            retain_divisor: None,
        }
    }

    /// A short name: `zsmalloc/default/lz4/4K`, plus chain and delta when set.
    pub fn label(&self) -> String {
        let mut s = self.alloc.clone();
        if self.alloc == "zsmalloc" {
            s.push('/');
            s.push_str(self.mode.name());
            if let Some(c) = self.chain {
                s.push_str(&format!("/chain{c}"));
            }
            if let Some(d) = self.delta {
                s.push_str(&format!("/delta{d}"));
            }
            if !self.merge {
                s.push_str("/nomerge");
            }
            // The mode's own background compaction goes unnamed.
            if self.auto_compact.mode != default_auto_compact(self.mode) {
                s.push_str(&format!("/auto-{}", self.auto_compact.mode.name()));
            }
        }
        s.push_str(&format!("/{}/{}K", self.comp, self.page_size / 1024));
        if let Some(unit) = self.unit {
            s.push_str(&format!("/unit{}K", unit / 1024));
        }
        s
    }

    /// Bytes per disk page: what is compressed whole (the unit, else the
    /// page size).
    pub fn block_size(&self) -> usize {
        self.unit.unwrap_or(self.page_size)
    }

    /// The allocator options.
    pub fn alloc_options(&self) -> AllocOptions {
        AllocOptions {
            page_size: self.page_size,
            unit: self.unit,
            mode: self.mode,
            chain: self.chain,
            delta: self.delta,
            merge: self.merge,
            retain_divisor: self.retain_divisor,
        }
    }

    /// A store of `disk_bytes` (rounded up to whole blocks, see
    /// [`StoreSpec::block_size`]) with this configuration. Bad settings are
    /// usage errors.
    pub fn open(&self, disk_bytes: u64) -> Result<Store, Error> {
        let pool = zalloc::open(&self.alloc, &self.alloc_options())
            .map_err(|e| Error::Usage(format!("{}: {e}", self.label())))?;
        let comp = zcomp::Compressor::with_params(self.comp, &self.comp_params)
            .map_err(|e| Error::Usage(format!("--comp {}: {e}", self.comp)))?;
        // kernel-compat compresses lz4, lz4hc and deflate as the kernel
        // does (zmem-lz4, the C zlib); default mode keeps the faster liblz4
        // and zlib-rs.
        let comp = if self.mode == Mode::KernelCompat {
            comp.kernel_compat()
        } else {
            comp
        };
        let block = self.block_size();
        let pages = disk_bytes.div_ceil(block as u64);
        let store = Store::with_block_size(Arc::clone(&pool), comp, pages, block)
            .map_err(|e| Error::Usage(format!("{}: {e}", self.label())))?;
        if self.mode == Mode::KernelCompat {
            store.set_recomp_encoder(zcomp::Encoder::Kernel);
            store.set_writeback_one_object_per_block(true);
        }
        store.set_mem_limit(self.mem_limit);
        store
            .set_auto_compact(self.auto_compact)
            .map_err(|e| Error::Usage(format!("{}: {e}", self.label())))?;
        Ok(store)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_compat_compresses_lz4_as_the_kernel() {
        for (mode, comp, implementation) in [
            (Mode::KernelCompat, Algorithm::Lz4, "zmem-lz4"),
            (Mode::KernelCompat, Algorithm::Lz4Hc, "zmem-lz4"),
            (Mode::Default, Algorithm::Lz4, "liblz4 1.10"),
            (Mode::KernelCompat, Algorithm::LzoRle, "zmem-lzo"),
        ] {
            let spec = StoreSpec {
                auto_compact: AutoCompactPolicy::new(default_auto_compact(mode)),
                ..StoreSpec::new("zsmalloc", comp, mode)
            };
            let store = spec.open(1 << 20).unwrap();
            assert_eq!(
                store.compressor().implementation(),
                implementation,
                "{mode:?} {comp}"
            );
            // Its lz4 secondaries are compressed by the same code as an lz4
            // primary would be.
            for secondary in ["lz4", "lz4hc"] {
                store
                    .set_recomp_algorithm(&format!("algo={secondary} priority=1"))
                    .unwrap();
                let want = if mode == Mode::KernelCompat {
                    "zmem-lz4"
                } else {
                    "liblz4 1.10"
                };
                let got = store.secondary_compressor(1).unwrap();
                assert_eq!(got.implementation(), want, "{mode:?} {secondary}");
            }
        }
    }

    #[test]
    fn page_sizes_are_the_geometrys() {
        assert_eq!(parse_page_size("16K"), Ok(16384));
        for bad in ["0", "1", "4095", "12K", "128K", "-4K", "x", "99999999999T"] {
            assert!(parse_page_size(bad).is_err(), "{bad}");
        }
    }

    #[derive(clap::Parser)]
    struct Flags {
        #[command(flatten)]
        store: StoreArgs,
    }

    /// The configurations `zmem ARGS` expands to.
    fn specs(args: &[&str]) -> Vec<StoreSpec> {
        use clap::Parser;
        let flags = Flags::try_parse_from([&["zmem"], args].concat()).unwrap();
        flags.store.specs().unwrap()
    }

    fn comps(args: &[&str]) -> Vec<(Mode, Algorithm)> {
        specs(args).into_iter().map(|s| (s.mode, s.comp)).collect()
    }

    fn autos(args: &[&str]) -> Vec<(Mode, AutoCompactMode, String)> {
        specs(args)
            .into_iter()
            .map(|s| (s.mode, s.auto_compact.mode, s.label()))
            .collect()
    }

    #[test]
    fn background_compaction_is_on_in_default_mode_and_off_in_kernel_compat() {
        assert_eq!(
            autos(&["--mode", "default,kernel-compat"]),
            [
                (
                    Mode::Default,
                    AutoCompactMode::On,
                    "zsmalloc/default/lz4/4K".to_string()
                ),
                (
                    Mode::KernelCompat,
                    AutoCompactMode::Off,
                    format!(
                        "zsmalloc/kernel-compat/{}/4K",
                        KernelCompat::running().comp.name()
                    )
                )
            ]
        );
        assert_eq!(
            autos(&["--auto-compact", "off,on"]),
            [
                (
                    Mode::Default,
                    AutoCompactMode::Off,
                    "zsmalloc/default/auto-off/lz4/4K".to_string()
                ),
                (
                    Mode::Default,
                    AutoCompactMode::On,
                    "zsmalloc/default/lz4/4K".to_string()
                )
            ]
        );
        use clap::Parser;
        for bad in [
            &["--auto-compact", "sometimes"][..],
            &["--compact-cpu", "0"],
            &["--compact-cpu", "101"],
            &["--compact-cpu", "x"],
            &["--compact-min-gain", "0"],
        ] {
            assert!(
                Flags::try_parse_from([&["zmem"], bad].concat()).is_err(),
                "{bad:?}"
            );
        }
        let flags = Flags::try_parse_from([
            "zmem",
            "--auto-compact",
            "shrinker",
            "--compact-cpu",
            "2.5%",
            "--compact-min-gain",
            "8",
        ])
        .unwrap();
        let spec = &flags.store.specs().unwrap()[0];
        assert_eq!(spec.auto_compact.mode, AutoCompactMode::Shrinker);
        assert_eq!(spec.auto_compact.cpu_percent, 2.5);
        assert_eq!(spec.auto_compact.min_gain_pages, 8);
    }

    #[test]
    fn each_mode_has_its_own_compressor_unless_one_is_named() {
        assert_eq!(
            comps(&["--mode", "default,kernel-compat"]),
            [
                (Mode::Default, Algorithm::Lz4),
                (Mode::KernelCompat, KernelCompat::running().comp)
            ]
        );
        assert_eq!(
            comps(&["--mode", "kernel-compat", "--kernel-comp", "lz4"]),
            [(Mode::KernelCompat, Algorithm::Lz4)]
        );
        assert_eq!(
            comps(&[
                "--mode",
                "kernel-compat",
                "--kernel-comp",
                "lz4",
                "--comp",
                "zstd"
            ]),
            [(Mode::KernelCompat, Algorithm::Zstd)]
        );
        assert_eq!(
            comps(&["--mode", "kernel-compat", "--comp", "lz4,zstd"]),
            [
                (Mode::KernelCompat, Algorithm::Lz4),
                (Mode::KernelCompat, Algorithm::Zstd)
            ]
        );
        use clap::Parser;
        let e = Flags::try_parse_from(["zmem", "--comp", "lz5"])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("unknown compression algorithm 'lz5'"), "{e}");
    }

    #[test]
    fn a_spec_serialises_its_compressor_by_name() {
        let spec = &comps_specs(&["--comp", "zstd"])[0];
        let json = serde_json::to_value(spec).unwrap();
        assert_eq!(json["comp"], "zstd");
        assert_eq!(spec.label(), "zsmalloc/default/zstd/4K");
    }

    fn comps_specs(args: &[&str]) -> Vec<StoreSpec> {
        use clap::Parser;
        Flags::try_parse_from([&["zmem"], args].concat())
            .unwrap()
            .store
            .specs()
            .unwrap()
    }
}
