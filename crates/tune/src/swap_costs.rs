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
//! - `vm.page-cluster` reads 2^N pages on each swap-in. A disk reads eight
//!   neighbours for little more than one; zram decompresses each, so eight
//!   cost about eight times one and readahead only spends CPU on pages that
//!   may not be wanted. Measured on both: the time of eight consecutive
//!   pages over one.
//!
//! This module reads the block device under `/` and the store it is given;
//! it writes nothing.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::time::Instant;

use serde::Serialize;

use crate::kernel_zram::PageBuffer;
use crate::rng::Rng;

/// The measurements and the sysctls.
#[derive(Clone, Debug, Serialize)]
pub struct SwapCosts {
    /// The block device under `/`, or where it cannot be opened the
    /// largest file of the system's directories, read with direct I/O.
    pub device: Option<String>,
    /// Its median random 4 KiB read, microseconds.
    pub device_read_us: Option<f64>,
    /// Its median random read of eight consecutive pages, microseconds.
    pub device_read8_us: Option<f64>,
    /// The store's median random 4 KiB read, microseconds.
    pub store_read_us: f64,
    /// The store's median random read of eight consecutive pages.
    pub store_read8_us: f64,
    /// `vm.swappiness`, where the device could be measured.
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

/// The largest file in `/usr/bin` and `/usr/lib/x86_64-linux-gnu` (or
/// `/usr/lib`), for when the block device cannot be opened (a container):
/// direct reads of a file reach the same device.
fn largest_system_file() -> Option<String> {
    ["/usr/bin", "/usr/lib/x86_64-linux-gnu", "/usr/lib"]
        .iter()
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flat_map(|d| d.flatten())
        .filter_map(|e| {
            let m = e.metadata().ok()?;
            m.is_file().then(|| (m.len(), e.path()))
        })
        .max()
        .filter(|(len, _)| *len >= 1 << 20)
        .map(|(_, p)| p.display().to_string())
}

/// Median times of random reads of one page and of eight consecutive
/// pages from `read(buf, page_index)`, over `pages` pages.
fn time_reads(
    pages: u64,
    reads: usize,
    seed: u64,
    mut read: impl FnMut(&mut [u8], u64) -> bool,
) -> Option<(f64, f64)> {
    let mut rng = Rng::new(seed, 0x5a9c);
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
    Some((median(one), median(eight)))
}

/// Measures the device under `/` (`device_reads` reads of each kind) and
/// `store` (`store_reads`), and derives the sysctls.
pub fn measure(
    store: &zram::Store,
    device_reads: usize,
    store_reads: usize,
    seed: u64,
) -> SwapCosts {
    let pages = store.disk_pages().max(1);
    let (store_read_us, store_read8_us) = time_reads(pages, store_reads, seed, |buf, at| {
        buf.chunks_mut(4096)
            .enumerate()
            .all(|(k, p)| store.read_page(at + k as u64, p).is_ok())
    })
    .unwrap_or((0.0, 0.0));
    // The device itself where it may be opened, else the largest file of
    // a few system directories on it, read the same way.
    let device = root_device()
        .filter(|d| std::fs::File::open(d).is_ok())
        .or_else(largest_system_file);
    let dev_times = device.as_ref().and_then(|d| {
        let f: File = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(d)
            .ok()?;
        let len = std::fs::metadata(d)
            .ok()
            .filter(|m| m.len() > 0)
            .map(|m| m.len())
            .or_else(|| {
                use std::io::Seek;
                (&f).seek(std::io::SeekFrom::End(0)).ok()
            })?;
        time_reads(len / 4096, device_reads, seed, |buf, at| {
            f.read_exact_at(buf, at * 4096).is_ok()
        })
    });
    let (swappiness, swappiness_reason) = match dev_times {
        Some((file, _)) if file > 0.0 && store_read_us > 0.0 => {
            let s = (200.0 * file / (file + store_read_us)).round().min(200.0) as u32;
            (
                Some(s),
                format!(
                    "a random 4 KiB read costs {store_read_us:.1} us from zram against \
                     {file:.1} us from {} (direct I/O): 200 * {file:.1} / ({file:.1} + \
                     {store_read_us:.1}) = {s}, the kernel's rule for swappiness as the relative \
                     cost of swap and file I/O (it counts only the I/O: a page fault adds a few \
                     microseconds to each side)",
                    device.as_deref().unwrap_or("the disk")
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
                dev_times.map_or(String::new(), |(a, b)| format!(
                    "; from the disk they cost {:.1}x",
                    b / a.max(1e-9)
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
        device_read_us: dev_times.map(|t| t.0),
        device_read8_us: dev_times.map(|t| t.1),
        store_read_us,
        store_read8_us,
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

    #[test]
    fn a_store_of_compressible_pages_gets_page_cluster_zero_and_a_reason() {
        let spec = crate::advise::spec_for(
            &crate::advise::Candidate::new(zcomp::Algorithm::Lz4, 1),
            "zsmalloc",
            zsmalloc::Mode::Default,
            4096,
        );
        let store = spec.open(64 * 4096).unwrap();
        let mut page = vec![0u8; 4096];
        for i in 0..64u64 {
            for (k, b) in page.iter_mut().enumerate() {
                *b = ((k as u64 * 7 + i) % 251) as u8 ^ (k / 64) as u8;
            }
            store.write_page(i, &page).unwrap();
        }
        let c = measure(&store, 20, 2000, 1);
        assert!(c.store_read_us > 0.0 && c.store_read8_us > c.store_read_us);
        assert!(c.page_cluster_reason.contains("zram"));
        if let Some(s) = c.swappiness {
            assert!(s <= 200);
            assert!(c.swappiness_reason.contains(&s.to_string()));
        }
    }
}
