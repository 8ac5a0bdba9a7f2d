//! Size-class geometry: which slot size, zspage length and object count serve a
//! request, for every configuration the kernel patches zmem grew from
//! discuss.
//!
//! This module is pure arithmetic. It owns the rules that turn a
//! [`GeometryConfig`] (page size, chain size, class delta, chain rule, merging)
//! into a [`Geometry`]: the *logical* classes (one per delta step, as the
//! kernel's `size_class[]` indices), the *physical* classes they alias after
//! merging (classes of equal pages and objects per zspage share one, as the
//! kernel's class merging does), pages and objects per zspage, the
//! huge classes and `huge_class_size`, and the waste figures the simulator prints (tail waste,
//! merge waste, span). It allocates no pages and knows nothing of handles,
//! headers or locks; the pool adds the 8-byte header before it asks for a class.
//!
//! Vocabulary:
//! - *logical class* `i`: size `min(32 + i * delta, UNIT)`; a stored object
//!   of `len` bytes uses logical class `ceil((len - 32) / delta)` (0 below 32).
//!   `UNIT` is the largest object: the page size in the kernel's geometry, or
//!   a larger compression unit, whose classes above a page are
//!   *multi-page*: their objects span pages of one zspage.
//! - *physical class*: the class that owns zspages. With merging, a run of
//!   adjacent logical classes with the same (pages per zspage, objects per
//!   zspage) share the physical class of the largest size in the run.
//! - *chain rule*: how many pages (1..=chain) a zspage of a class gets.
//! - *huge class*: a physical class with one object per zspage, as many pages
//!   long as the unit (one page in the kernel's geometry): it saves nothing
//!   over storing the unit raw.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

/// Every class size is a multiple of this (the kernel's `ZS_ALIGN`).
pub const ZS_ALIGN: u32 = 8;
/// Smallest class size on 64-bit (the kernel's `ZS_MIN_ALLOC_SIZE`).
pub const ZS_MIN_ALLOC_SIZE: u32 = 32;
/// Size of the in-object handle header of kernel-compat mode (`ZS_HANDLE_SIZE`).
pub const ZS_HANDLE_SIZE: u32 = 8;
/// Largest chain size accepted (the kernel's Kconfig range ends at 16).
pub const MAX_CHAIN: u32 = 16;
/// Most pages one zspage of a multi-page class may have (a class larger
/// than a page, with a compression unit above the page size): 64 pages hold
/// four objects of a 64 KiB unit on 4 KiB pages. A class of at most a page
/// keeps the chain's bound, [`MAX_CHAIN`].
pub const MAX_ZSPAGE_PAGES: u32 = 64;
/// Page sizes the geometry accepts.
pub const PAGE_SIZES: [u32; 5] = [4096, 8192, 16384, 32768, 65536];

/// Distance between two adjacent logical class sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClassDelta {
    /// The kernel's `max(PAGE_SIZE >> 8, 16)` (its `ZS_SIZE_CLASS_DELTA`,
    /// which keeps the number of classes at most 256): 16 bytes on 4 KiB
    /// pages, 64 on 16 KiB. Named `kernel` on the command line (`legacy` is
    /// accepted too, its former name).
    Kernel,
    /// A fixed step in bytes, a positive multiple of [`ZS_ALIGN`] (the patch
    /// that drops the limit of 256 classes proposes 16 on every page size).
    Fixed(u32),
}

impl ClassDelta {
    /// The step in bytes on pages of `page_size` bytes.
    pub fn bytes(self, page_size: u32) -> u32 {
        match self {
            ClassDelta::Kernel => (page_size >> 8).max(16),
            ClassDelta::Fixed(d) => d,
        }
    }
}

impl fmt::Display for ClassDelta {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClassDelta::Kernel => f.write_str("kernel"),
            ClassDelta::Fixed(d) => write!(f, "{d}"),
        }
    }
}

impl FromStr for ClassDelta {
    type Err = GeometryError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "kernel" || s == "legacy" {
            return Ok(ClassDelta::Kernel);
        }
        let d: u32 = s
            .parse()
            .map_err(|_| GeometryError::DeltaSyntax(s.to_string()))?;
        if d == 0 || d % ZS_ALIGN != 0 {
            return Err(GeometryError::Delta(d));
        }
        Ok(ClassDelta::Fixed(d))
    }
}

/// How many pages (1..=chain) a zspage of a given class size gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ChainRule {
    /// The kernel since 6.3: a power-of-two size gets one page; otherwise the
    /// length with the smallest tail waste, the shorter one on a tie.
    MinWaste,
    /// The kernel before 6.3: the length with the highest integer percentage
    /// of used bytes, the shorter one on a tie.
    UsedPercent,
    /// The rule proposed with the patch that drops the limit of 256
    /// classes: stop early once the tail is small and
    /// only lengthen the chain for a large cut in waste.
    Balanced,
}

impl ChainRule {
    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            ChainRule::MinWaste => "min-waste",
            ChainRule::UsedPercent => "used-percent",
            ChainRule::Balanced => "balanced",
        }
    }

    /// Pages per zspage for class `size` on `page_size` pages with at most
    /// `chain` pages. A class larger than a page (a multi-page class, with a
    /// compression unit above the page size) needs `ceil(size / page_size)`
    /// pages for one object; it may take up to `chain` times that (at most
    /// [`MAX_ZSPAGE_PAGES`]), so that several objects share the tail. For a
    /// class of at most a page this is exactly the kernel's range, 1..=chain.
    pub fn pages_per_zspage(self, size: u32, page_size: u32, chain: u32) -> u32 {
        debug_assert!(size > 0 && chain > 0);
        let lo = size.div_ceil(page_size);
        let hi = if lo == 1 {
            chain
        } else {
            (lo * chain).min(MAX_ZSPAGE_PAGES).max(lo)
        };
        let tail = |k: u32| (k * page_size) % size;
        match self {
            ChainRule::MinWaste => {
                if size.is_power_of_two() {
                    return lo;
                }
                let mut best = lo;
                for k in lo + 1..=hi {
                    if tail(k) < tail(best) {
                        best = k;
                    }
                }
                best
            }
            ChainRule::UsedPercent => {
                let used_percent = |k: u32| {
                    let bytes = u64::from(k) * u64::from(page_size);
                    (bytes / u64::from(size)) * u64::from(size) * 100 / bytes
                };
                let mut best = lo;
                for k in lo + 1..=hi {
                    if used_percent(k) > used_percent(best) {
                        best = k;
                    }
                }
                best
            }
            ChainRule::Balanced => {
                if size.is_power_of_two() {
                    return lo;
                }
                let mut best = lo;
                let mut best_tail = tail(lo);
                for k in lo..=hi {
                    let t = tail(k);
                    if t == 0 {
                        return k;
                    }
                    if k > lo {
                        // While the tail is over 10% of the zspage any improvement
                        // counts; below that a longer chain must cut it by > 25%.
                        let better = if best_tail * 10 > best * page_size {
                            t < best_tail
                        } else {
                            4 * t < 3 * best_tail
                        };
                        if better {
                            best = k;
                            best_tail = t;
                        }
                    }
                    if best_tail <= best * page_size / 64 {
                        break;
                    }
                }
                best
            }
        }
    }
}

impl fmt::Display for ChainRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ChainRule {
    type Err = GeometryError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "min-waste" => Ok(ChainRule::MinWaste),
            "used-percent" => Ok(ChainRule::UsedPercent),
            "balanced" => Ok(ChainRule::Balanced),
            other => Err(GeometryError::ChainRule(other.to_string())),
        }
    }
}

/// A configuration the geometry is computed from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct GeometryConfig {
    /// Bytes per page: one of [`PAGE_SIZES`].
    pub page_size: u32,
    /// Most pages one zspage may have (`CONFIG_ZSMALLOC_CHAIN_SIZE`), 1..=16.
    pub chain: u32,
    /// Step between logical class sizes.
    pub delta: ClassDelta,
    /// Rule choosing the pages per zspage of each class.
    pub chain_rule: ChainRule,
    /// Whether adjacent classes with equal (pages, objects) share one physical class.
    pub merge: bool,
    /// The largest object, in bytes: the compression unit of a store whose
    /// blocks are larger than a page. 0 means the page size, the
    /// kernel's geometry; otherwise a power of two from the page size to
    /// [`MAX_UNIT`].
    #[serde(skip_serializing_if = "is_zero")]
    pub unit: u32,
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

/// The largest compression unit (and so the largest object) a geometry takes.
pub const MAX_UNIT: u32 = 65536;

impl Default for GeometryConfig {
    /// The kernel's defaults: 4 KiB pages, chain 8, the kernel's delta (16 bytes),
    /// min-waste, merging on.
    fn default() -> Self {
        GeometryConfig {
            page_size: 4096,
            chain: 8,
            delta: ClassDelta::Kernel,
            chain_rule: ChainRule::MinWaste,
            merge: true,
            unit: 0,
        }
    }
}

impl GeometryConfig {
    /// The largest object in bytes: [`GeometryConfig::unit`], or the page size
    /// when it is 0.
    pub fn unit_bytes(&self) -> u32 {
        if self.unit == 0 {
            self.page_size
        } else {
            self.unit
        }
    }

    /// Checks every field, returning the first one out of range.
    pub fn validate(&self) -> Result<(), GeometryError> {
        if !PAGE_SIZES.contains(&self.page_size) {
            return Err(GeometryError::PageSize(self.page_size));
        }
        if self.chain == 0 || self.chain > MAX_CHAIN {
            return Err(GeometryError::Chain(self.chain));
        }
        let d = self.delta.bytes(self.page_size);
        if d == 0 || d % ZS_ALIGN != 0 || d > self.page_size {
            return Err(GeometryError::Delta(d));
        }
        let unit = self.unit_bytes();
        if !unit.is_power_of_two() || unit < self.page_size || unit > MAX_UNIT {
            return Err(GeometryError::Unit {
                unit,
                page_size: self.page_size,
            });
        }
        Ok(())
    }
}

/// A configuration value out of range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GeometryError {
    /// The page size is not a power of two from 4096 to 65536.
    PageSize(u32),
    /// The chain size is not in 1..=16.
    Chain(u32),
    /// The delta is zero, not a multiple of 8, or larger than a page.
    Delta(u32),
    /// The delta is neither `kernel` nor a number.
    DeltaSyntax(String),
    /// The chain rule has no such name.
    ChainRule(String),
    /// The unit is not a power of two from the page size to [`MAX_UNIT`].
    Unit {
        /// The unit asked for.
        unit: u32,
        /// The page size it was paired with.
        page_size: u32,
    },
}

impl fmt::Display for GeometryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GeometryError::PageSize(p) => write!(
                f,
                "page size {p} is not supported: use a power of two from 4096 to 65536"
            ),
            GeometryError::Chain(c) => {
                write!(f, "chain size {c} is out of range: use 1 to {MAX_CHAIN}")
            }
            GeometryError::Delta(d) => write!(
                f,
                "class delta {d} is not a positive multiple of {ZS_ALIGN} no larger than the page size"
            ),
            GeometryError::DeltaSyntax(s) => write!(
                f,
                "class delta '{s}' is neither 'kernel' nor a number of bytes"
            ),
            GeometryError::ChainRule(s) => write!(
                f,
                "unknown chain rule '{s}': use min-waste, used-percent or balanced"
            ),
            GeometryError::Unit { unit, page_size } => write!(
                f,
                "unit {unit} is not a power of two from the page size ({page_size}) to {MAX_UNIT}"
            ),
        }
    }
}

impl std::error::Error for GeometryError {}

/// One logical class: a step of the delta ladder.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct LogicalClass {
    /// Index in the ladder (the kernel's `size_class[]` index).
    pub index: u32,
    /// Its own size, `min(32 + index * delta, unit)`.
    pub size: u32,
    /// Position in [`Geometry::classes`] of the physical class serving it.
    pub class: u32,
}

/// One physical class: the owner of zspages of one slot size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct SizeClass {
    /// Position in [`Geometry::classes`] (ascending size).
    pub id: u32,
    /// Logical index of its largest size (the kernel's `class->index`).
    pub index: u32,
    /// Smallest logical index that aliases it.
    pub first_index: u32,
    /// Slot size in bytes.
    pub size: u32,
    /// Pages per zspage.
    pub pages_per_zspage: u32,
    /// Objects per zspage.
    pub objs_per_zspage: u32,
    /// Bytes left at the end of a zspage: `pages * PAGE_SIZE - objs * size`.
    pub tail_waste: u32,
    /// Objects of one zspage that cross a page boundary.
    pub span: u32,
    /// One object per zspage, as many pages as the unit (one page and one
    /// object in the kernel's geometry).
    pub huge: bool,
}

impl SizeClass {
    /// Bytes of one zspage of this class.
    pub fn zspage_bytes(&self, page_size: u32) -> u32 {
        self.pages_per_zspage * page_size
    }

    /// Number of logical classes served by this physical class.
    pub fn merged(&self) -> u32 {
        self.index - self.first_index + 1
    }
}

/// One row of the simulator's request view: a request of `req` bytes (no
/// header added) and the physical class that serves it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct RequestRow {
    /// Requested bytes.
    pub req: u32,
    /// Slot size of the physical class.
    pub phys: u32,
    /// Pages per zspage of that class.
    pub chain: u32,
    /// Objects per zspage of that class.
    pub objs: u32,
    /// Tail waste of that class.
    pub tail_waste: u32,
    /// `(phys - req) * objs`: padding per zspage when every slot holds `req` bytes.
    pub merge_waste: u32,
    /// Span of that class.
    pub span: u32,
}

impl RequestRow {
    /// `(merge_waste + tail_waste) / zspage bytes` in percent, computed as the
    /// simulator does (per object, in floating point).
    pub fn effective_waste_percent(&self, page_size: u32) -> f64 {
        let objs = f64::from(self.objs);
        let per_obj_waste = f64::from(self.phys - self.req) + f64::from(self.tail_waste) / objs;
        let per_obj_mem = f64::from(self.chain * page_size) / objs;
        per_obj_waste / per_obj_mem * 100.0
    }
}

/// Totals of the request view (the simulator's four summary lines).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct RequestSummary {
    /// Unweighted mean of the effective waste over the request rows, in percent.
    pub avg_effective_waste_percent: f64,
    /// Number of logical classes.
    pub logical_classes: u32,
    /// Number of physical classes.
    pub physical_classes: u32,
    /// Span of each logical class's physical class, summed over logical classes.
    pub total_span: u64,
}

/// The size-class table of one configuration.
#[derive(Clone, Debug, Serialize)]
pub struct Geometry {
    config: GeometryConfig,
    delta: u32,
    logical: Vec<LogicalClass>,
    classes: Vec<SizeClass>,
    huge_class_size: u32,
}

/// Objects of `size` bytes laid back to back from offset 0 over `pages` pages
/// that cross a page boundary.
pub fn span(size: u32, pages: u32, page_size: u32) -> u32 {
    let objs = pages * page_size / size;
    (0..objs)
        .filter(|&i| {
            let start = i * size;
            start / page_size != (start + size - 1) / page_size
        })
        .count() as u32
}

impl Geometry {
    /// Computes the table for `config`.
    pub fn new(config: GeometryConfig) -> Result<Self, GeometryError> {
        config.validate()?;
        let ps = config.page_size;
        let unit = config.unit_bytes();
        let unit_pages = unit.div_ceil(ps);
        let delta = config.delta.bytes(ps);
        let n = (unit - ZS_MIN_ALLOC_SIZE).div_ceil(delta) + 1;

        // Walk from the largest index down, as zs_create_pool does, so that a
        // merged run adopts the size of its largest member.
        let mut logical_to_phys_rev = vec![0u32; n as usize];
        let mut built: Vec<SizeClass> = Vec::new();
        let mut huge_class_size = 0;
        for i in (0..n).rev() {
            let size = (ZS_MIN_ALLOC_SIZE + i * delta).min(unit);
            let pages = config.chain_rule.pages_per_zspage(size, ps, config.chain);
            let objs = pages * ps / size;
            let huge = pages == unit_pages && objs == 1;
            if !huge && huge_class_size == 0 {
                huge_class_size = size - (ZS_HANDLE_SIZE - 1);
            }
            if let Some(prev) = built.last_mut() {
                if config.merge && prev.pages_per_zspage == pages && prev.objs_per_zspage == objs {
                    prev.first_index = i;
                    logical_to_phys_rev[i as usize] = built.len() as u32 - 1;
                    continue;
                }
            }
            logical_to_phys_rev[i as usize] = built.len() as u32;
            built.push(SizeClass {
                id: 0,
                index: i,
                first_index: i,
                size,
                pages_per_zspage: pages,
                objs_per_zspage: objs,
                tail_waste: pages * ps - objs * size,
                span: span(size, pages, ps),
                huge,
            });
        }
        // `built` is in descending size; number the classes in ascending order.
        let count = built.len() as u32;
        built.reverse();
        for (id, class) in built.iter_mut().enumerate() {
            class.id = id as u32;
        }
        let logical = (0..n)
            .map(|i| LogicalClass {
                index: i,
                size: (ZS_MIN_ALLOC_SIZE + i * delta).min(unit),
                class: count - 1 - logical_to_phys_rev[i as usize],
            })
            .collect();
        Ok(Geometry {
            config,
            delta,
            logical,
            classes: built,
            huge_class_size,
        })
    }

    /// The configuration this table was computed from.
    pub fn config(&self) -> &GeometryConfig {
        &self.config
    }

    /// Bytes per page.
    pub fn page_size(&self) -> u32 {
        self.config.page_size
    }

    /// The largest object in bytes (the compression unit; the page size in
    /// the kernel's geometry).
    pub fn unit(&self) -> u32 {
        self.config.unit_bytes()
    }

    /// The class delta in bytes.
    pub fn delta(&self) -> u32 {
        self.delta
    }

    /// Logical classes in ascending index order.
    pub fn logical(&self) -> &[LogicalClass] {
        &self.logical
    }

    /// Physical classes in ascending size order.
    pub fn classes(&self) -> &[SizeClass] {
        &self.classes
    }

    /// Objects whose stored size (request plus any header) exceeds
    /// `huge_class_size + 7` land in a huge class; zram stores a page raw when
    /// its compressed length is at least this. It is the size of the largest
    /// non-huge class minus `ZS_HANDLE_SIZE - 1`, as the kernel computes it.
    /// With chain 1 every class above half a page is huge, so the largest
    /// non-huge class is the one of half a page. Zero if no class is non-huge.
    pub fn huge_class_size(&self) -> u32 {
        self.huge_class_size
    }

    /// Number of huge physical classes.
    pub fn huge_classes(&self) -> usize {
        self.classes.iter().filter(|c| c.huge).count()
    }

    /// Logical index serving a stored object of `size` bytes, or `None` if
    /// `size` is 0 or above the unit (the page size in the kernel's geometry).
    pub fn logical_index(&self, size: u32) -> Option<u32> {
        if size == 0 || size > self.unit() {
            return None;
        }
        let idx = size.saturating_sub(ZS_MIN_ALLOC_SIZE).div_ceil(self.delta);
        Some(idx.min(self.logical.len() as u32 - 1))
    }

    /// Physical class serving a stored object of `size` bytes.
    pub fn class_for(&self, size: u32) -> Option<&SizeClass> {
        let idx = self.logical_index(size)?;
        Some(&self.classes[self.logical[idx as usize].class as usize])
    }

    /// The simulator's request view: one row per request size from 32 to the
    /// unit (the page size in the kernel's geometry) in steps of 16 bytes (no
    /// header added).
    pub fn request_rows(&self) -> Vec<RequestRow> {
        (ZS_MIN_ALLOC_SIZE..=self.unit())
            .step_by(16)
            .map(|req| {
                let class = self
                    .class_for(req)
                    .expect("request sizes 32..=unit always have a class");
                RequestRow {
                    req,
                    phys: class.size,
                    chain: class.pages_per_zspage,
                    objs: class.objs_per_zspage,
                    tail_waste: class.tail_waste,
                    merge_waste: (class.size - req) * class.objs_per_zspage,
                    span: class.span,
                }
            })
            .collect()
    }

    /// The simulator's summary of [`Geometry::request_rows`].
    pub fn request_summary(&self) -> RequestSummary {
        let rows = self.request_rows();
        let ps = self.config.page_size;
        let total: f64 = rows.iter().map(|r| r.effective_waste_percent(ps)).sum();
        RequestSummary {
            avg_effective_waste_percent: total / rows.len() as f64,
            logical_classes: self.logical.len() as u32,
            physical_classes: self.classes.len() as u32,
            total_span: self
                .logical
                .iter()
                .map(|l| u64::from(self.classes[l.class as usize].span))
                .sum(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geometry(page_size: u32, chain: u32, delta: ClassDelta, rule: ChainRule) -> Geometry {
        Geometry::new(GeometryConfig {
            page_size,
            chain,
            delta,
            chain_rule: rule,
            merge: true,
            unit: 0,
        })
        .unwrap()
    }

    #[test]
    fn kernel_defaults_match_the_brief() {
        for (chain, classes, huge) in [(4, 69, 3257), (8, 119, 3625), (16, 192, 3833)] {
            let g = geometry(4096, chain, ClassDelta::Fixed(16), ChainRule::MinWaste);
            assert_eq!(g.classes().len(), classes, "chain {chain}");
            assert_eq!(g.huge_class_size(), huge, "chain {chain}");
            assert_eq!(g.logical().len(), 255);
        }
        let g = geometry(16384, 8, ClassDelta::Kernel, ChainRule::MinWaste);
        assert_eq!(g.logical().len(), 257);
        assert_eq!(g.classes().len(), 121);
        let largest_non_huge = g.classes().iter().rev().find(|c| !c.huge).unwrap();
        assert_eq!(largest_non_huge.size, 14560);
    }

    #[test]
    fn kernel_chain8_table_matches_the_brief() {
        // index:size/pages/objs of every real class, from the brief's section 1.5.
        let expected = "0:32/1/128 1:48/3/256 2:64/1/64 3:80/5/256 4:96/3/128 5:112/7/256 \
            6:128/1/32 7:144/7/199 8:160/5/128 9:176/4/93 10:192/3/64 11:208/3/59 12:224/7/128 \
            13:240/1/17 14:256/1/16 15:272/1/15 16:288/5/71 17:304/7/94 18:320/5/64 19:336/6/73 \
            20:352/8/93 21:368/8/89 22:384/3/32 23:400/5/51 24:416/6/59 25:432/7/66 26:448/7/64 \
            27:464/5/44 28:480/2/17 29:496/4/33 30:512/1/8 31:528/4/31 32:544/2/15 33:560/7/51 \
            34:576/1/7 35:592/8/55 36:608/7/47 37:624/2/13 38:640/5/32 39:656/5/31 40:672/1/6 \
            41:688/8/47 42:704/5/29 43:720/3/17 44:736/2/11 45:752/7/38 46:768/3/16 47:784/5/26 \
            49:816/1/5 50:832/8/39 51:848/5/24 52:864/7/33 53:880/8/37 54:896/7/32 55:912/7/31 \
            56:928/5/22 57:944/3/13 58:960/4/17 59:976/6/25 60:992/8/33 62:1024/1/4 64:1056/8/31 \
            65:1072/5/19 66:1088/4/15 67:1104/3/11 68:1120/8/29 69:1136/5/18 71:1168/2/7 \
            72:1184/7/24 73:1200/5/17 74:1216/3/10 75:1232/7/23 76:1248/4/13 78:1280/5/16 \
            79:1296/7/22 83:1360/1/3 87:1424/8/23 88:1440/6/17 89:1456/5/14 91:1488/4/11 \
            92:1504/7/19 94:1536/3/8 95:1552/8/21 96:1568/5/13 97:1584/7/18 100:1632/2/5 \
            103:1680/7/17 104:1696/5/12 105:1712/8/19 107:1744/3/7 110:1792/7/16 111:1808/4/9 \
            114:1856/5/11 116:1888/6/13 117:1904/7/15 118:1920/8/17 126:2048/1/2 134:2176/8/15 \
            135:2192/7/13 137:2224/6/11 140:2272/5/9 144:2336/4/7 147:2384/7/12 151:2448/3/5 \
            155:2512/8/13 158:2560/5/8 160:2592/7/11 168:2720/2/3 177:2864/7/10 180:2912/5/7 \
            184:2976/8/11 190:3072/3/4 197:3184/7/9 202:3264/4/5 211:3408/5/6 217:3504/6/7 \
            222:3584/7/8 225:3632/8/9 254:4096/1/1";
        let g = geometry(4096, 8, ClassDelta::Kernel, ChainRule::MinWaste);
        let got: Vec<String> = g
            .classes()
            .iter()
            .map(|c| {
                format!(
                    "{}:{}/{}/{}",
                    c.index, c.size, c.pages_per_zspage, c.objs_per_zspage
                )
            })
            .collect();
        let want: Vec<&str> = expected.split_whitespace().collect();
        assert_eq!(got, want);
        // Indices 226..=254 all map to the huge class 254.
        for i in 226..=254 {
            let c = &g.classes()[g.logical()[i].class as usize];
            assert_eq!((c.index, c.huge), (254, true));
        }
    }

    #[test]
    fn merging_example_with_used_percent_rule() {
        let g = geometry(4096, 4, ClassDelta::Fixed(16), ChainRule::UsedPercent);
        let ids: Vec<u32> = (1376..=1488)
            .step_by(16)
            .map(|s| g.class_for(s).unwrap().id)
            .collect();
        assert!(ids.iter().all(|&id| id == ids[0]));
        let c = g.class_for(1376).unwrap();
        assert_eq!(
            (c.size, c.pages_per_zspage, c.objs_per_zspage),
            (1488, 4, 11)
        );
        // The run is exactly those sizes: 1360 and 1504 are served elsewhere.
        assert_ne!(g.class_for(1360).unwrap().id, c.id);
        assert_ne!(g.class_for(1504).unwrap().id, c.id);
    }

    #[test]
    fn fixed_16_byte_delta_example() {
        let rows = |delta| {
            geometry(16384, 8, delta, ChainRule::MinWaste)
                .request_rows()
                .into_iter()
                .filter(|r| (1072..=1120).contains(&r.req))
                .map(|r| (r.req, r.phys, r.chain, r.objs, r.tail_waste, r.merge_waste))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            rows(ClassDelta::Kernel),
            vec![
                (1072, 1120, 8, 117, 32, 5616),
                (1088, 1120, 8, 117, 32, 3744),
                (1104, 1120, 8, 117, 32, 1872),
                (1120, 1120, 8, 117, 32, 0),
            ]
        );
        assert_eq!(
            rows(ClassDelta::Fixed(16)),
            vec![
                (1072, 1072, 4, 61, 144, 0),
                (1088, 1088, 1, 15, 64, 0),
                (1104, 1104, 6, 89, 48, 0),
                (1120, 1120, 8, 117, 32, 0),
            ]
        );
    }

    #[test]
    fn chain_rules_on_hand_computed_sizes() {
        // 1072 on 16 KiB pages: tails 304, 608, 912, 144, ... (k = 1..4).
        assert_eq!(ChainRule::MinWaste.pages_per_zspage(1072, 16384, 8), 4);
        assert_eq!(ChainRule::Balanced.pages_per_zspage(1072, 16384, 8), 4);
        // Powers of two always take one page.
        for rule in [
            ChainRule::MinWaste,
            ChainRule::Balanced,
            ChainRule::UsedPercent,
        ] {
            assert_eq!(rule.pages_per_zspage(2048, 4096, 16), 1);
        }
        // 3328 with chain 5 (the patch that lengthens the chain): 5 pages, 6
        // objects; with chain 1: 1 page.
        assert_eq!(ChainRule::MinWaste.pages_per_zspage(3328, 4096, 5), 5);
        assert_eq!(ChainRule::MinWaste.pages_per_zspage(3328, 4096, 1), 1);
    }

    #[test]
    fn huge_ranges_for_short_chains() {
        // The chain-lengthening patch's table of huge class ranges on
        // 4 KiB pages (used-percent era):
        // chain 4 -> 3280..4096, 5 -> 3424..4096, 6 -> 3520..4096.
        for (chain, first_huge) in [(4, 3280), (5, 3424), (6, 3520)] {
            let g = geometry(4096, chain, ClassDelta::Fixed(16), ChainRule::UsedPercent);
            let lowest_huge = g.classes().iter().find(|c| c.huge).unwrap();
            let first_logical = g.logical()[lowest_huge.first_index as usize].size;
            assert_eq!(first_logical, first_huge, "chain {chain}");
        }
    }

    #[test]
    fn parse_and_validate() {
        assert_eq!("kernel".parse::<ClassDelta>(), Ok(ClassDelta::Kernel));
        assert_eq!("legacy".parse::<ClassDelta>(), Ok(ClassDelta::Kernel));
        assert_eq!(ClassDelta::Kernel.to_string(), "kernel");
        assert_eq!("16".parse::<ClassDelta>(), Ok(ClassDelta::Fixed(16)));
        assert_eq!("12".parse::<ClassDelta>(), Err(GeometryError::Delta(12)));
        assert_eq!("0".parse::<ClassDelta>(), Err(GeometryError::Delta(0)));
        assert!("x".parse::<ClassDelta>().is_err());
        assert!("fast".parse::<ChainRule>().is_err());
        let bad = |f: fn(&mut GeometryConfig)| {
            let mut c = GeometryConfig::default();
            f(&mut c);
            Geometry::new(c).unwrap_err()
        };
        assert_eq!(bad(|c| c.page_size = 4095), GeometryError::PageSize(4095));
        assert_eq!(
            bad(|c| c.page_size = 131072),
            GeometryError::PageSize(131072)
        );
        assert_eq!(bad(|c| c.chain = 0), GeometryError::Chain(0));
        assert_eq!(bad(|c| c.chain = 17), GeometryError::Chain(17));
        assert_eq!(
            bad(|c| c.delta = ClassDelta::Fixed(8192)),
            GeometryError::Delta(8192)
        );
    }

    #[test]
    fn logical_index_bounds() {
        let g = Geometry::new(GeometryConfig::default()).unwrap();
        assert_eq!(g.logical_index(0), None);
        assert_eq!(g.logical_index(4097), None);
        assert_eq!(g.logical_index(1), Some(0));
        assert_eq!(g.logical_index(32), Some(0));
        assert_eq!(g.logical_index(33), Some(1));
        assert_eq!(g.logical_index(4096), Some(254));
    }

    #[test]
    fn chain_one_makes_everything_above_half_a_page_huge() {
        let g = geometry(4096, 1, ClassDelta::Kernel, ChainRule::MinWaste);
        assert_eq!(g.huge_class_size(), 2048 - 7);
        assert!(g.classes().iter().all(|c| c.pages_per_zspage == 1));
        assert!(g.classes().iter().all(|c| c.huge == (c.size > 2048)));
    }
}
