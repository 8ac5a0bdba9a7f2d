//! Fresh anonymous memory: a private mapping none of whose pages has been
//! touched, so the first write to each faults it in and the kernel zeroes
//! it, as it does for a user-space store's new pool pages. `zmem bench
//! store` copies compressed pages into it to measure the write ceiling of
//! any store that keeps its objects in memory it asked the kernel for.
//!
//! Owns the mapping (unmapped on drop); knows nothing of stores.

use std::ptr::NonNull;

/// How the kernel backs a [`FreshMemory`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backing {
    /// 4 KiB pages, one fault each (`MADV_NOHUGEPAGE`).
    SmallPages,
    /// Transparent huge pages where the kernel gives them (`MADV_HUGEPAGE`
    /// on a 2 MiB-aligned range): one fault per 2 MiB.
    HugePages,
}

/// Whether the system offers transparent huge pages to a range that asks
/// for them (`enabled` is `always` or `madvise`). Where it does not,
/// [`Backing::HugePages`] gets 4 KiB pages.
pub fn huge_pages_offered() -> bool {
    std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
        .is_ok_and(|s| s.contains("[always]") || s.contains("[madvise]"))
}

/// Size and alignment of a transparent huge page on x86-64 and arm64
/// (4 KiB base pages).
const HUGE: usize = 2 << 20;

/// An untouched anonymous mapping of at least the length asked for.
pub struct FreshMemory {
    /// The whole mapping (what `munmap` is given).
    map: NonNull<u8>,
    map_len: usize,
    /// The usable part: `len` bytes from `start`, 2 MiB-aligned.
    start: usize,
    len: usize,
}

impl FreshMemory {
    /// Maps `len` bytes (more than 0) of fresh memory backed as `backing`
    /// asks; no page is touched.
    pub fn map(len: usize, backing: Backing) -> std::io::Result<FreshMemory> {
        let map_len = len.max(1).div_ceil(HUGE) * HUGE + HUGE;
        // SAFETY: an anonymous private mapping at an address the kernel
        // chooses; no existing memory is affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let map = NonNull::new(p.cast::<u8>()).expect("mmap returns a non-null address");
        let fresh = FreshMemory {
            map,
            map_len,
            start: (p as usize).next_multiple_of(HUGE) - p as usize,
            len,
        };
        let advice = match backing {
            Backing::SmallPages => libc::MADV_NOHUGEPAGE,
            Backing::HugePages => libc::MADV_HUGEPAGE,
        };
        // SAFETY: the range is inside the mapping made above.
        let rc = unsafe { libc::madvise(p, map_len, advice) };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(fresh)
    }

    /// The usable bytes (zero until written; each page is faulted in by
    /// its first access).
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: `start + len <= map_len` (the mapping has a spare 2 MiB
        // for the alignment), the mapping lives as long as `self`, its
        // anonymous pages read as zero before they are written, and
        // `&mut self` makes this the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.map.as_ptr().add(self.start), self.len) }
    }
}

impl Drop for FreshMemory {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once; no slice of it
        // outlives `self`.
        unsafe { libc::munmap(self.map.as_ptr().cast(), self.map_len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pages of `s` resident in this process (`mincore`): the mapping's
    /// own, whatever other threads of the test binary allocate meanwhile.
    fn resident_pages(s: &[u8]) -> usize {
        let pages = s.len().div_ceil(4096);
        let mut vec = vec![0u8; pages];
        // SAFETY: `s` is a page-aligned range of one live mapping, and
        // `vec` has a byte for each of its pages.
        let rc =
            unsafe { libc::mincore(s.as_ptr() as *mut libc::c_void, s.len(), vec.as_mut_ptr()) };
        assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
        vec.iter().filter(|&&b| b & 1 == 1).count()
    }

    #[test]
    fn untouched_until_written_then_resident() {
        for backing in [Backing::SmallPages, Backing::HugePages] {
            let len = 8 << 20;
            let mut m = FreshMemory::map(len, backing).unwrap();
            let s = m.as_mut_slice();
            assert_eq!(s.len(), len);
            assert_eq!(s.as_ptr() as usize % HUGE, 0);
            // Mapping touches nothing.
            assert_eq!(resident_pages(s), 0, "{backing:?}");
            assert!(s.iter().step_by(4096).all(|&b| b == 0));
            s.iter_mut().step_by(4096).for_each(|b| *b = 1);
            // One write per page makes every page resident.
            assert_eq!(resident_pages(s), len / 4096, "{backing:?}");
        }
    }
}
