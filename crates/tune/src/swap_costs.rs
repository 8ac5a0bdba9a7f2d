//! What a swap-in from zram costs against a read from the disk, measured,
//! and the two sysctls that follow from it: `vm.swappiness` and
//! `vm.page-cluster`.
//!
//! - `vm.swappiness` (0 to 200) is, in the kernel's words
//!   (Documentation/admin-guide/sysctl/vm.rst), the relative I/O cost of
//!   swapping against the filesystem: if a random read from swap is on
//!   average 2x faster than one from the filesystem, `swappiness` should be
//!   133 (x + 2x = 200). So `swappiness = 200 * file / (file + swap)`, from
//!   the median random 4 KiB read of the block device under `/` (direct
//!   I/O, past the page cache) and of the store holding the sample.
//!   Swappiness is rounded to a step of `SWAPPINESS_STEP`, the precision
//!   a disk's read cost supports from one run to the next.
//! - `vm.page-cluster` reads 2^N pages on each swap-in. A disk reads eight
//!   neighbours for little more than one; zram decompresses each, so eight
//!   cost about eight times one and readahead only spends CPU on pages that
//!   may not be wanted. Measured on both: the time of eight consecutive
//!   pages over one.
//!
//! Both costs are measured in rounds until two consecutive rounds' medians
//! agree within `TOLERANCE` (at least `MIN_ROUNDS`, at most
//! `MAX_ROUNDS` or `MAX_SECONDS`); the cost is the median of all the
//! reads, and the spread of the rounds' medians is kept. The disk's offsets are new on
//! each run: a disk, or the host under a virtual one, keeps what was read,
//! and the same offsets read again on the next run cost less.
//!
//! This module reads the block device under `/` (or the system files on
//! it) and the store it is given; it writes nothing.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::time::Instant;

use serde::Serialize;

use crate::kernel_zram::PageBuffer;
use crate::rng::Rng;

/// `vm.swappiness` is rounded to a multiple of this.
pub(crate) const SWAPPINESS_STEP: u32 = 20;

/// A measurement stops once two consecutive rounds' medians differ by
/// less than this share.
pub(crate) const TOLERANCE: f64 = 0.10;

/// Rounds measured at least.
pub(crate) const MIN_ROUNDS: usize = 3;

/// Rounds measured at most.
pub(crate) const MAX_ROUNDS: usize = 20;

/// Seconds one measurement may take at most (it stops after the round
/// that passes them).
pub(crate) const MAX_SECONDS: f64 = 3.0;

/// One target's read costs, measured until stable.
#[derive(Clone, Copy, Debug, Serialize)]
pub(crate) struct ReadCost {
    /// The median random read of one page over every round, microseconds.
    pub one_us: f64,
    /// The median random read of eight consecutive pages, microseconds.
    pub eight_us: f64,
    /// The lowest and the highest of the rounds' one-page medians.
    pub one_round_range_us: (f64, f64),
    /// Rounds measured.
    pub rounds: usize,
    /// Reads of each kind, all rounds together.
    pub reads: usize,
    /// Whether the last two rounds' medians agreed within [`TOLERANCE`]
    /// (else the rounds or the time ran out).
    pub settled: bool,
}

/// The measurements and the sysctls.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct SwapCosts {
    /// The block device under `/`, or where it cannot be opened the
    /// largest files of the system's directories, read with direct I/O.
    pub device: Option<String>,
    /// Its median random 4 KiB read, microseconds.
    pub device_read_us: Option<f64>,
    /// Its median random read of eight consecutive pages, microseconds.
    pub device_read8_us: Option<f64>,
    /// The device's measurement in full.
    pub device_cost: Option<ReadCost>,
    /// The store's median random 4 KiB read, microseconds.
    pub store_read_us: f64,
    /// The store's median random read of eight consecutive pages.
    pub store_read8_us: f64,
    /// The store's measurement in full.
    pub store_cost: Option<ReadCost>,
    /// The kernel's rule's answer before rounding, where the device could
    /// be measured.
    pub swappiness_exact: Option<f64>,
    /// The lowest and highest answers the rounds' medians give.
    pub swappiness_range: Option<(f64, f64)>,
    /// `vm.swappiness`, where the device could be measured: the rule's
    /// answer rounded to [`SWAPPINESS_STEP`].
    pub swappiness: Option<u32>,
    /// Why, in one line.
    pub swappiness_reason: String,
    /// `vm.page-cluster`.
    pub page_cluster: u32,
    /// Why, in one line.
    pub page_cluster_reason: String,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// The block device mounted at `/`, from `/proc/self/mountinfo`.
fn root_device() -> Option<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let line = info.lines().find(|l| l.split(' ').nth(4) == Some("/"))?;
    let majmin = line.split(' ').nth(2)?;
    if majmin.starts_with("0:") {
        return None;
    }
    let link = std::fs::read_link(format!("/sys/dev/block/{majmin}")).ok()?;
    let name = link.file_name()?.to_str()?.to_string();
    Some(format!("/dev/{name}"))
}

/// Files read when the block device cannot be opened: at most this many.
const SYSTEM_FILES: usize = 16;

/// The largest files (at least 1 MiB, [`SYSTEM_FILES`] at most) in
/// `/usr/bin` and `/usr/lib/x86_64-linux-gnu` (or `/usr/lib`), for when the
/// block device cannot be opened (a container): direct reads of files
/// reach the same device, and spread over several the reads of one run
/// leave little of them cached for the next.
fn largest_system_files() -> Vec<String> {
    let mut files: Vec<(u64, String)> = ["/usr/bin", "/usr/lib/x86_64-linux-gnu", "/usr/lib"]
        .iter()
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flat_map(|d| d.flatten())
        .filter_map(|e| {
            let m = e.metadata().ok()?;
            (m.is_file() && m.len() >= 1 << 20).then(|| (m.len(), e.path().display().to_string()))
        })
        .collect();
    files.sort_unstable_by(|a, b| b.cmp(a));
    files.dedup_by(|a, b| a.1 == b.1);
    files
        .into_iter()
        .take(SYSTEM_FILES)
        .map(|(_, p)| p)
        .collect()
}

/// Times of random reads of one page and of eight consecutive pages from
/// `read(buf, page_index)`, over `pages` pages, `reads` of each.
fn time_reads(
    pages: u64,
    reads: usize,
    rng: &mut Rng,
    read: &mut impl FnMut(&mut [u8], u64) -> bool,
) -> Option<(Vec<f64>, Vec<f64>)> {
    let mut buf = PageBuffer::zeroed(8 * 4096);
    let (mut one, mut eight) = (Vec::new(), Vec::new());
    for _ in 0..reads {
        for (n, out) in [(1usize, &mut one), (8, &mut eight)] {
            let at = rng.next_u64() % pages.saturating_sub(8).max(1);
            let t = Instant::now();
            if !read(&mut buf[..n * 4096], at) {
                return None;
            }
            out.push(t.elapsed().as_nanos() as f64 / 1000.0);
        }
    }
    Some((one, eight))
}

/// Whether two medians agree within [`TOLERANCE`].
fn settled(previous: f64, now: f64) -> bool {
    previous > 0.0 && ((now - previous) / previous).abs() < TOLERANCE
}

/// Measures rounds of `round_reads` reads of each kind until two
/// consecutive rounds' medians of both kinds agree (see the module's
/// rule); `None` when a read fails.
fn measure_until_settled(
    pages: u64,
    round_reads: usize,
    rng: &mut Rng,
    mut read: impl FnMut(&mut [u8], u64) -> bool,
) -> Option<ReadCost> {
    let start = Instant::now();
    let (mut one, mut eight) = (Vec::new(), Vec::new());
    let mut round_medians = Vec::new();
    let mut previous = (0.0, 0.0);
    let mut is_settled = false;
    while round_medians.len() < MAX_ROUNDS {
        let (o, e) = time_reads(pages, round_reads, rng, &mut read)?;
        let now = (median(o.clone()), median(e.clone()));
        round_medians.push(now.0);
        one.extend(o);
        eight.extend(e);
        is_settled = round_medians.len() >= MIN_ROUNDS
            && settled(previous.0, now.0)
            && settled(previous.1, now.1);
        previous = now;
        if is_settled || start.elapsed().as_secs_f64() > MAX_SECONDS {
            break;
        }
    }
    let lo = round_medians.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = round_medians.iter().copied().fold(0.0, f64::max);
    Some(ReadCost {
        one_us: median(one.clone()),
        eight_us: median(eight),
        one_round_range_us: (lo, hi),
        rounds: round_medians.len(),
        reads: one.len(),
        settled: is_settled,
    })
}

/// The kernel's rule: swappiness as the relative cost of file and swap
/// I/O, `200 * file / (file + swap)`.
pub(crate) fn swappiness_rule(file_us: f64, swap_us: f64) -> f64 {
    (200.0 * file_us / (file_us + swap_us)).min(200.0)
}

/// `exact` rounded to the nearest multiple of [`SWAPPINESS_STEP`].
pub(crate) fn round_swappiness(exact: f64) -> u32 {
    let step = f64::from(SWAPPINESS_STEP);
    ((exact / step).round() * step).clamp(0.0, 200.0) as u32
}

/// The files or device to read, each with its pages, and how to name them.
struct Disk {
    files: Vec<(File, u64)>,
    name: String,
}

impl Disk {
    fn open() -> Option<Disk> {
        let direct = |p: &str| -> Option<(File, u64)> {
            let f = OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_DIRECT)
                .open(p)
                .ok()?;
            let len = std::fs::metadata(p)
                .ok()
                .filter(|m| m.len() > 0)
                .map(|m| m.len())
                .or_else(|| {
                    use std::io::Seek;
                    (&f).seek(std::io::SeekFrom::End(0)).ok()
                })?;
            (len / 4096 > 8).then_some((f, len / 4096))
        };
        if let Some(dev) = root_device() {
            if let Some(f) = direct(&dev) {
                return Some(Disk {
                    files: vec![f],
                    name: dev,
                });
            }
        }
        let paths = largest_system_files();
        let files: Vec<(File, u64)> = paths.iter().filter_map(|p| direct(p)).collect();
        let total: u64 = files.iter().map(|f| f.1).sum();
        let name = match (files.len(), paths.first()) {
            (0, _) | (_, None) => return None,
            (1, Some(p)) => p.clone(),
            (n, Some(p)) => format!(
                "{n} system files on the disk under / ({} MiB; the largest {p})",
                (total * 4096) >> 20
            ),
        };
        Some(Disk { files, name })
    }

    fn pages(&self) -> u64 {
        self.files.iter().map(|f| f.1).sum()
    }

    /// Reads `buf` at page `at` of all the files end to end (a read that
    /// would cross a file's end is moved back into it).
    fn read(&self, buf: &mut [u8], mut at: u64) -> bool {
        let n = (buf.len() / 4096) as u64;
        for (f, pages) in &self.files {
            if at < *pages {
                let at = at.min(pages.saturating_sub(n));
                return f.read_exact_at(buf, at * 4096).is_ok();
            }
            at -= pages;
        }
        false
    }
}

/// A seed no earlier run used: the disk's offsets are new each time.
fn fresh_seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    t ^ u64::from(std::process::id()).rotate_left(32)
}

/// Reads of each kind per round of the disk's measurement.
const DEVICE_ROUND_READS: usize = 100;

/// Reads of each kind per round of the store's measurement.
const STORE_ROUND_READS: usize = 2000;

/// Measures the device under `/` and `store`'s first `written` pages (the
/// ones that hold data: an empty slot reads for almost nothing) until
/// stable (see the module's rule), and derives the sysctls. The store's
/// offsets follow `seed`; the disk's are new on each call.
pub(crate) fn measure(store: &zram::Store, written: u64, seed: u64) -> SwapCosts {
    let pages = written.min(store.disk_pages()).max(1);
    let store_cost = measure_until_settled(
        pages,
        STORE_ROUND_READS,
        &mut Rng::new(seed, 0x5a9c),
        |buf, at| {
            buf.chunks_mut(4096)
                .enumerate()
                .all(|(k, p)| store.read_page(at + k as u64, p).is_ok())
        },
    );
    let (store_read_us, store_read8_us) = store_cost.map_or((0.0, 0.0), |c| (c.one_us, c.eight_us));
    let disk = Disk::open();
    let device = disk.as_ref().map(|d| d.name.clone());
    let device_cost = disk.as_ref().and_then(|d| {
        measure_until_settled(
            d.pages(),
            DEVICE_ROUND_READS,
            &mut Rng::new(fresh_seed(), 0x5a9d),
            |buf, at| d.read(buf, at),
        )
    });
    let mut swappiness_exact = None;
    let mut swappiness_range = None;
    let (swappiness, swappiness_reason) = match (device_cost, store_cost) {
        (Some(dc), Some(sc)) if dc.one_us > 0.0 && sc.one_us > 0.0 => {
            let (file, swap) = (dc.one_us, sc.one_us);
            let exact = swappiness_rule(file, swap);
            let lo = swappiness_rule(dc.one_round_range_us.0, sc.one_round_range_us.1);
            let hi = swappiness_rule(dc.one_round_range_us.1, sc.one_round_range_us.0);
            swappiness_exact = Some(exact);
            swappiness_range = Some((lo, hi));
            let s = round_swappiness(exact);
            (
                Some(s),
                format!(
                    "a random 4 KiB read costs {swap:.1} us from zram against {file:.1} us from \
                     {} (direct I/O; medians of {} reads in {} rounds{}): 200 * {file:.1} / \
                     ({file:.1} + {swap:.1}) = {exact:.0}, the kernel's rule for swappiness as \
                     the relative cost of swap and file I/O (it counts only the I/O: a page \
                     fault adds a few microseconds to each side); rounded to a step of \
                     {SWAPPINESS_STEP}, as the rounds' medians (the disk's from {:.1} to {:.1} \
                     us) give {lo:.0} to {hi:.0}",
                    device.as_deref().unwrap_or("the disk"),
                    dc.reads,
                    dc.rounds,
                    if dc.settled {
                        ""
                    } else {
                        ", still moving when the time ran out"
                    },
                    dc.one_round_range_us.0,
                    dc.one_round_range_us.1,
                ),
            )
        }
        _ => (
            None,
            "the block device under / could not be read (none found, or no direct I/O): \
             swappiness is left at the system's value"
                .to_string(),
        ),
    };
    let store_ratio = store_read8_us / store_read_us.max(1e-9);
    let (page_cluster, page_cluster_reason) = if store_ratio >= 4.0 {
        (
            0,
            format!(
                "eight consecutive pages cost {store_ratio:.1}x one from zram (each page is \
                 decompressed on its own{}), so readahead saves nothing and spends CPU on pages \
                 that may not be wanted: read one page per swap-in",
                device_cost.map_or(String::new(), |c| format!(
                    "; from the disk they cost {:.1}x",
                    c.eight_us / c.one_us.max(1e-9)
                ))
            ),
        )
    } else {
        (
            3,
            format!(
                "eight consecutive pages cost {store_ratio:.1}x one from zram: readahead of 8 \
                 pages (the kernel's default, 3) pays for itself"
            ),
        )
    };
    SwapCosts {
        device,
        device_read_us: device_cost.map(|c| c.one_us),
        device_read8_us: device_cost.map(|c| c.eight_us),
        device_cost,
        store_read_us,
        store_read8_us,
        store_cost,
        swappiness_exact,
        swappiness_range,
        swappiness,
        swappiness_reason,
        page_cluster,
        page_cluster_reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_is_the_middle() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(Vec::new()), 0.0);
    }

    /// Disk reads of 39 to 53 us against 3 us from zram (the rule gives
    /// 186 to 189) are one answer rounded; and the rule's ends stay in
    /// range.
    #[test]
    fn swappiness_rounds_to_its_step() {
        let runs: Vec<u32> = [53.0, 39.0, 45.0]
            .iter()
            .map(|&f| round_swappiness(swappiness_rule(f, 3.0)))
            .collect();
        assert_eq!(runs, [180, 180, 180]);
        assert_eq!(round_swappiness(swappiness_rule(270.0, 3.0)), 200);
        assert_eq!(round_swappiness(swappiness_rule(2.0, 2.0)), 100);
        assert_eq!(round_swappiness(0.0), 0);
        assert_eq!(round_swappiness(200.0), 200);
        assert!(runs.iter().all(|s| s % SWAPPINESS_STEP == 0));
    }

    /// Waits `us` microseconds on the clock the reads are timed with.
    fn spin(us: f64) {
        let t = Instant::now();
        while t.elapsed().as_secs_f64() * 1e6 < us {
            std::hint::spin_loop();
        }
    }

    /// A target whose reads cost the same settles after the least rounds;
    /// one whose cost keeps rising runs until the rounds or the time run
    /// out, and says so.
    #[test]
    fn a_measurement_runs_until_its_median_settles() {
        let steady = measure_until_settled(1000, 50, &mut Rng::new(1, 2), |_, _| {
            spin(50.0);
            true
        })
        .unwrap();
        assert!(steady.settled, "{steady:?}");
        assert!(
            steady.rounds >= MIN_ROUNDS && steady.rounds < MAX_ROUNDS,
            "{steady:?}"
        );
        assert_eq!(steady.reads, steady.rounds * 50);
        assert!(steady.one_round_range_us.0 <= steady.one_us);
        assert!(steady.one_us <= steady.one_round_range_us.1);
        // Each round's reads a third slower than the last's: never settles.
        let mut delay = 10.0f64;
        let mut n = 0;
        let drifting = measure_until_settled(1000, 5, &mut Rng::new(1, 2), |_, _| {
            n += 1;
            if n % 10 == 0 {
                delay *= 1.35;
            }
            spin(delay);
            true
        })
        .unwrap();
        assert!(!drifting.settled, "{drifting:?}");
        assert!(drifting.one_round_range_us.0 < drifting.one_round_range_us.1);
        // A failing read is no measurement.
        assert!(measure_until_settled(1000, 5, &mut Rng::new(1, 2), |_, _| false).is_none());
    }

    /// A default-mode zsmalloc store of `comp` at `level` with `slots` 4 KiB
    /// pages, its first 64 written: byte `k` of page `i` is `byte(i, k)`.
    fn store_of_64_pages(
        comp: zcomp::Algorithm,
        level: i32,
        slots: u64,
        byte: impl Fn(u64, usize) -> u8,
    ) -> zram::Store {
        let spec = crate::advise::spec_for(
            &crate::advise::Candidate::new(comp, level),
            "zsmalloc",
            zsmalloc::Mode::Default,
            4096,
        );
        let store = spec.open(slots * 4096).unwrap();
        let mut page = vec![0u8; 4096];
        for i in 0..64u64 {
            for (k, b) in page.iter_mut().enumerate() {
                *b = byte(i, k);
            }
            store.write_page(i, &page).unwrap();
        }
        store
    }

    /// A store with a few pages written in many slots: the reads time the
    /// written pages, not the empty slots around them.
    #[test]
    fn only_the_written_pages_are_timed() {
        let store = store_of_64_pages(zcomp::Algorithm::Deflate, 6, 65536, |i, k| {
            b"some text to decompress, "[(k * 7 + i as usize + k / 97) % 25]
        });
        let written = measure(&store, 64, 1).store_read_us;
        let everywhere = measure(&store, store.disk_pages(), 1).store_read_us;
        assert!(
            written > 2.0 * everywhere,
            "{written} us against {everywhere} us"
        );
    }

    #[test]
    fn a_store_of_compressible_pages_gets_page_cluster_zero_and_a_reason() {
        let store = store_of_64_pages(zcomp::Algorithm::Lz4, 1, 64, |i, k| {
            ((k as u64 * 7 + i) % 251) as u8 ^ (k / 64) as u8
        });
        let c = measure(&store, 64, 1);
        assert!(c.store_read_us > 0.0 && c.store_read8_us > c.store_read_us);
        assert!(c.store_cost.unwrap().rounds >= MIN_ROUNDS);
        assert!(c.page_cluster_reason.contains("zram"));
        if let Some(s) = c.swappiness {
            assert!(s <= 200 && s % SWAPPINESS_STEP == 0);
            assert!(c
                .swappiness_reason
                .contains(&format!("rounded to a step of {SWAPPINESS_STEP}")));
            let (lo, hi) = c.swappiness_range.unwrap();
            assert!(lo <= c.swappiness_exact.unwrap() + 1e-9, "{c:?}");
            assert!(c.swappiness_exact.unwrap() <= hi + 1e-9, "{c:?}");
        }
    }
}
