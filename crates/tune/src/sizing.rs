//! How big a zram device should be on this machine: `disksize` and
//! `mem_limit` for a stated share of RAM, from the ratio measured on the
//! machine's own memory, beside what the distributions' defaults would give.
//!
//! The rule: at most `target_share` of `MemTotal` holds compressed pages
//! (`mem_limit`), and the device is as large as the data that fits there at
//! the measured ratio (uncompressed bytes over `mem_used_total`, same-filled
//! pages included, as zram stores them for nothing). zram-generator's
//! `zram-size` takes an expression in MiB of `ram`; the defaults below are
//! written in that syntax and evaluated here.
//!
//! The factor of RAM is rounded down to a tenth (`FACTOR_STEP`; a
//! hundredth below 0.2): the ratio moves with the memory in use from one
//! run to the next by more than its sampling error, and a size that changes
//! in the second decimal with each run is not one to trust.
//!
//! The device is never sized past twice the RAM (`MAX_RAM_FACTOR`): the
//! kernel's zram documentation says there is little point in a larger one,
//! and a sample of mostly same-filled pages (which zram stores for
//! nothing) measures ratios of ten and more that the memory of a working
//! machine does not keep.
//!
//! This module only computes; it reads `/proc/meminfo` and nothing else.

use serde::Serialize;

use recipe::Error;

const MIB: f64 = (1u64 << 20) as f64;

/// The largest `disksize`, in multiples of RAM (Documentation/admin-guide/
/// blockdev/zram.rst: "there is little point creating a zram of greater
/// than twice the size of memory").
pub(crate) const MAX_RAM_FACTOR: f64 = 2.0;

/// The step `zram-size`'s factor of RAM is rounded down to (factors below
/// [`FINE_BELOW`] take a hundredth: a tenth of them would be most of them).
pub(crate) const FACTOR_STEP: f64 = 0.1;

/// Factors below this are rounded down to a hundredth.
pub(crate) const FINE_BELOW: f64 = 0.2;

/// The share of same-filled pages in the sample over which the report
/// says the ratio rests on them.
pub(crate) const SAME_FILLED_NOTE_SHARE: f64 = 0.5;

/// What a distribution's default size would do on this machine.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct DefaultSize {
    /// Whose default.
    pub name: String,
    /// Its `zram-size` expression (MiB of `ram`).
    pub zram_size: String,
    /// `disksize` it gives here.
    pub disksize: u64,
    /// Memory the device holds when full at the measured ratio.
    pub mem_when_full: u64,
    /// That memory as a share of RAM.
    pub share_of_ram: f64,
}

/// The recommended sizes.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Sizing {
    /// `MemTotal`, bytes.
    pub mem_total: u64,
    /// The share of RAM compressed pages may hold.
    pub target_share: f64,
    /// Uncompressed bytes over `mem_used_total`, measured.
    pub ratio: f64,
    /// `mem_limit`: the target share of RAM, whole MiB.
    pub mem_limit: u64,
    /// `disksize`: what fits in `mem_limit` at the ratio, whole MiB.
    pub disksize: u64,
    /// The same as zram-generator's `zram-size` expression.
    pub zram_size: String,
    /// The factor of RAM the measured ratio asks for, to the hundredth
    /// below (so that what is printed with two decimals is never above
    /// what was asked: 0.695 is 0.69, and rounds down to 0.6).
    pub asked_factor: f64,
    /// The step the factor was rounded down to.
    pub factor_step: f64,
    /// The share of the sample's pages that are same-filled.
    pub same_filled_share: f64,
    /// Where same-filled pages are over [`SAME_FILLED_NOTE_SHARE`] of the
    /// sample: what that means for the ratio and the size, in one line.
    pub same_filled_note: Option<String>,
    /// The factor of RAM the measured ratio asked for, when it was over
    /// [`MAX_RAM_FACTOR`] and the size was capped there.
    pub capped_from: Option<f64>,
    /// The common defaults on this machine.
    pub defaults: Vec<DefaultSize>,
}

/// `MemTotal` from `/proc/meminfo`, bytes.
pub(crate) fn mem_total() -> Result<u64, Error> {
    let text = std::fs::read_to_string("/proc/meminfo")
        .map_err(|e| Error::Failed(format!("reading /proc/meminfo: {e}")))?;
    meminfo_field(&text, "MemTotal")
        .ok_or_else(|| Error::Failed("/proc/meminfo has no MemTotal".into()))
}

/// A `/proc/meminfo` field in bytes (the file gives kB).
pub(crate) fn meminfo_field(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let rest = l.strip_prefix(name)?.strip_prefix(':')?;
        let kb: u64 = rest.split_whitespace().next()?.parse().ok()?;
        Some(kb * 1024)
    })
}

/// Evaluates the `zram-size` expressions this module writes: `ram`, a
/// number, `*`, `/`, `min(a, b)`; MiB in, MiB out.
fn eval(expr: &str, ram_mib: f64) -> f64 {
    let e = expr.trim();
    if let Some(inner) = e.strip_prefix("min(").and_then(|s| s.strip_suffix(')')) {
        let (a, b) = inner.split_once(',').expect("min of two");
        return eval(a, ram_mib).min(eval(b, ram_mib));
    }
    if let Some((a, b)) = e.split_once('*') {
        return eval(a, ram_mib) * eval(b, ram_mib);
    }
    if let Some((a, b)) = e.split_once('/') {
        return eval(a, ram_mib) / eval(b, ram_mib);
    }
    if e == "ram" {
        return ram_mib;
    }
    e.parse().expect("a number")
}

/// The defaults users meet: zram-generator's own, Fedora's since 34,
/// CachyOS', ChromeOS'.
const DEFAULTS: [(&str, &str); 4] = [
    ("zram-generator default", "min(ram / 2, 4096)"),
    ("Fedora", "min(ram, 8192)"),
    ("CachyOS", "ram"),
    ("ChromeOS", "ram * 1.5"),
];

/// Rounds `factor` down to [`FACTOR_STEP`] (a hundredth below
/// [`FINE_BELOW`], and never below one); returns it with the step.
pub(crate) fn round_factor(factor: f64) -> (f64, f64) {
    let step = if factor < FINE_BELOW {
        0.01
    } else {
        FACTOR_STEP
    };
    // In whole steps, with a little slack for 0.3 / 0.1 = 2.9999...
    let steps = (factor / step + 1e-9).floor().max(1.0);
    let per_unit = (1.0 / step).round();
    (steps / per_unit, step)
}

/// Sizes for `mem_total` bytes of RAM, a measured `ratio` and a
/// `target_share` of RAM (0 to 1) for compressed pages, from a sample of
/// which `same_filled_share` (0 to 1) was same-filled pages.
pub(crate) fn size(
    mem_total: u64,
    ratio: f64,
    target_share: f64,
    same_filled_share: f64,
) -> Sizing {
    let ram_mib = (mem_total as f64 / MIB).floor();
    let ratio = ratio.max(1.0);
    let mem_limit_mib = (ram_mib * target_share).floor();
    // zram-size's factor, rounded down so that the device never holds more
    // than the target at the measured ratio.
    let asked_factor = target_share * ratio;
    let (rounded, factor_step) = round_factor(asked_factor);
    let asked = (asked_factor * 100.0).floor() / 100.0;
    let factor = rounded.min(MAX_RAM_FACTOR);
    let capped_from = (asked > MAX_RAM_FACTOR).then_some(asked);
    let zram_size = format!("ram * {factor}");
    let same_filled_note = (same_filled_share > SAME_FILLED_NOTE_SHARE).then(|| {
        let cap = if capped_from.is_some() {
            String::new()
        } else {
            format!("; the size is capped at {MAX_RAM_FACTOR} x RAM however high the ratio")
        };
        format!(
            "{:.0}% of the sampled pages are same-filled (zram stores them for nothing): the \
             ratio {ratio:.2} counts them and holds only while that memory stays same-filled; \
             pages written with data fill mem_limit sooner{cap}",
            same_filled_share * 100.0
        )
    });
    let disksize_mib = eval(&zram_size, ram_mib).floor();
    let defaults = DEFAULTS
        .iter()
        .map(|&(name, expr)| {
            let disk = eval(expr, ram_mib).floor() * MIB;
            let full = disk / ratio;
            DefaultSize {
                name: name.into(),
                zram_size: expr.into(),
                disksize: disk as u64,
                mem_when_full: full as u64,
                share_of_ram: full / mem_total.max(1) as f64,
            }
        })
        .collect();
    Sizing {
        mem_total,
        target_share,
        ratio,
        mem_limit: (mem_limit_mib * MIB) as u64,
        disksize: (disksize_mib * MIB) as u64,
        zram_size,
        asked_factor: asked,
        factor_step,
        same_filled_share,
        same_filled_note,
        capped_from,
        defaults,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_expressions_evaluate_as_zram_generator_would() {
        assert_eq!(eval("min(ram / 2, 4096)", 2048.0), 1024.0);
        assert_eq!(eval("min(ram / 2, 4096)", 32768.0), 4096.0);
        assert_eq!(eval("min(ram, 8192)", 4096.0), 4096.0);
        assert_eq!(eval("ram * 1.5", 1000.0), 1500.0);
        assert_eq!(eval("ram", 77.0), 77.0);
    }

    #[test]
    fn a_quarter_of_ram_at_three_to_one_asks_three_quarters_and_gets_a_tenth_less() {
        let gib = 1u64 << 30;
        let s = size(16 * gib, 3.0, 0.25, 0.0);
        assert_eq!(s.mem_limit, 4 * gib);
        assert_eq!(s.asked_factor, 0.75);
        assert_eq!(s.zram_size, "ram * 0.7");
        assert_eq!(s.factor_step, 0.1);
        assert_eq!(s.disksize, (16384.0f64 * 0.7).floor() as u64 * (1 << 20));
        // Full, the device holds its disksize over the ratio: within the
        // target.
        assert!(s.disksize as f64 / s.ratio <= s.mem_limit as f64);
        // 0.25 x 2.78 = 0.695: printed as asked, 0.69, below the 0.7 step.
        let under = size(16 * gib, 2.78, 0.25, 0.0);
        assert_eq!(
            (under.asked_factor, under.zram_size.as_str()),
            (0.69, "ram * 0.6")
        );
        let zg = &s.defaults[0];
        assert_eq!(zg.disksize, 4 * gib);
        assert!((zg.share_of_ram - 4.0 / 3.0 / 16.0).abs() < 1e-9);
        let chromeos = &s.defaults[3];
        assert_eq!(chromeos.disksize, 24 * gib);
        assert!((chromeos.share_of_ram - 0.5).abs() < 1e-9);
    }

    #[test]
    fn the_factor_rounds_down_to_a_tenth() {
        let s = size(8 << 30, 2.789, 0.25, 0.0);
        assert_eq!(s.zram_size, "ram * 0.6");
        assert!(s.disksize as f64 / s.ratio <= s.mem_limit as f64);
        assert_eq!(s.capped_from, None);
        // A ratio below 1 (nothing compresses) sizes as 1.
        assert_eq!(size(8 << 30, 0.9, 0.25, 0.0).ratio, 1.0);
        // The ratios three runs on one machine measured give one size.
        let sizes: Vec<String> = [2.92, 2.96, 3.0 - 1e-6]
            .iter()
            .map(|&r| size(8 << 30, r, 0.25, 0.0).zram_size)
            .collect();
        assert_eq!(sizes, ["ram * 0.7"; 3]);
        assert_eq!(round_factor(0.3), (0.3, 0.1));
        assert_eq!(round_factor(1.0), (1.0, 0.1));
        assert_eq!(round_factor(1.29), (1.2, 0.1));
        // Below 0.2 a hundredth, and never nothing.
        assert_eq!(round_factor(0.157), (0.15, 0.01));
        assert_eq!(round_factor(0.004), (0.01, 0.01));
    }

    #[test]
    fn mostly_same_filled_pages_get_a_note_and_others_none() {
        let s = size(8 << 30, 12.0, 0.25, 0.8);
        let note = s.same_filled_note.unwrap();
        assert!(
            note.starts_with("80% of the sampled pages are same-filled"),
            "{note}"
        );
        // Capped here: the cap's own line says so, the note does not again.
        assert!(s.capped_from.is_some());
        assert!(!note.contains("capped"), "{note}");
        let s = size(8 << 30, 4.0, 0.25, 0.6);
        assert!(s.same_filled_note.unwrap().contains("capped at 2 x RAM"));
        assert!(size(8 << 30, 4.0, 0.25, 0.5).same_filled_note.is_none());
    }

    #[test]
    fn meminfo_is_read_in_bytes() {
        let text = "MemTotal:       24576000 kB\nMemFree:  100 kB\n";
        assert_eq!(meminfo_field(text, "MemTotal"), Some(24576000 * 1024));
        assert_eq!(meminfo_field(text, "MemFree"), Some(102400));
        assert_eq!(meminfo_field(text, "Mem"), None);
        assert!(mem_total().unwrap() > 0);
    }

    /// A sample of mostly zero pages measures a ratio of 40: the device is
    /// capped at twice the RAM, and says what the ratio asked for.
    #[test]
    fn the_device_is_never_more_than_twice_the_ram() {
        let s = size(8 << 30, 40.0, 0.3, 0.0);
        assert_eq!(s.zram_size, "ram * 2");
        assert_eq!(s.disksize, 16 << 30);
        assert_eq!(s.capped_from, Some(12.0));
        assert_eq!(s.mem_limit, (8192.0f64 * 0.3).floor() as u64 * (1 << 20));
        let s = size(8 << 30, 6.0, 0.25, 0.0);
        assert_eq!(s.zram_size, "ram * 1.5");
        assert_eq!(s.capped_from, None);
    }
}
