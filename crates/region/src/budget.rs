//! What the resident limit covers: the region's own pages, or the whole
//! process's memory except the compressed pool.
//!
//! With [`LimitCovers::Region`] the limit is the region's resident pages
//! and nothing else. With [`LimitCovers::Process`] it is what a memory
//! cgroup's `memory.max` caps when the kernel's zram holds the rest: the
//! process's anonymous and shared memory and its page tables, everything
//! but the compressed pool (the kernel does not charge zram's pool to the
//! cgroup either). The region's pages get what the rest leaves: the
//! evictor measures the rest (`/proc/self/status`: `RssAnon`, `RssShmem`,
//! `VmPTE`, less the region's resident pages and the pool's
//! `mem_used_total`; plus another process's, if the configuration names
//! one) at most every [`EVERY_MS`] and sets the region's
//! share to the limit less the rest, never below a quarter of the limit
//! (below that the region would only thrash).
//!
//! Owns the measurement and the share's rule; the share itself lives in
//! `Shared` and is read by the handler and the evictor.

use crate::procfs;

/// What a region's resident limit covers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LimitCovers {
    /// The region's resident pages.
    #[default]
    Region,
    /// The process's memory except the compressed pool, as a memory
    /// cgroup's `memory.max` with the kernel's zram as swap.
    Process,
}

impl LimitCovers {
    /// The name (`region` or `process`).
    pub fn name(self) -> &'static str {
        match self {
            LimitCovers::Region => "region",
            LimitCovers::Process => "process",
        }
    }
}

/// How often the evictor measures the process, in milliseconds.
pub(crate) const EVERY_MS: u64 = 10;

/// The region's share in pages: the limit less what lies outside, at
/// least a quarter of the limit (and one page).
pub(crate) fn share(limit_pages: u64, outside_pages: u64) -> u64 {
    limit_pages
        .saturating_sub(outside_pages)
        .max(limit_pages / 4)
        .max(1)
}

/// The memory a memory cgroup would charge for process `pid` (`None`:
/// this one), in bytes: `RssAnon + RssShmem + VmPTE` from its
/// `/proc/PID/status`, read into the stack (the evictor's path allocates
/// nothing for it). `None` if the process is gone.
pub(crate) fn process_bytes(pid: Option<u32>) -> Option<u64> {
    let mut buf = [0u8; 4096];
    let status = match pid {
        None => procfs::read(b"self/status", None, b"", &mut buf)?,
        Some(pid) => procfs::read(b"", Some(pid), b"/status", &mut buf)?,
    };
    charged_bytes(status)
}

/// `RssAnon + RssShmem + VmPTE` of a `/proc/PID/status` text, in bytes;
/// `None` if `RssAnon` is missing.
pub(crate) fn charged_bytes(status: &[u8]) -> Option<u64> {
    let mut anon = None;
    let mut rest = 0;
    for line in status.split(|&b| b == b'\n') {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let (key, value) = (&line[..colon], &line[colon + 1..]);
        if key != b"RssAnon" && key != b"RssShmem" && key != b"VmPTE" {
            continue;
        }
        // The first run of digits ("\t    1200 kB"); none counts as 0.
        let start = value
            .iter()
            .position(u8::is_ascii_digit)
            .unwrap_or(value.len());
        let digits = value[start..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count();
        let kb = procfs::number(&value[start..start + digits]).unwrap_or(0);
        if key == b"RssAnon" {
            anon = Some(kb * 1024);
        } else {
            rest += kb * 1024;
        }
    }
    anon.map(|a| a + rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_what_a_memory_cgroup_charges() {
        let status = b"Name:\tx\nVmRSS:\t  9000 kB\nRssAnon:\t    1200 kB\nRssFile:\t 7000 kB\n\
RssShmem:\t      16 kB\nVmPTE:\t      88 kB\nThreads:\t3\n";
        assert_eq!(charged_bytes(status), Some((1200 + 16 + 88) * 1024));
        assert_eq!(charged_bytes(b"Name:\tx\nVmPTE:\t 8 kB\n"), None);
    }

    #[test]
    fn the_share_is_the_rest_of_the_limit_and_at_least_a_quarter() {
        assert_eq!(share(4096, 1000), 3096);
        assert_eq!(share(4096, 0), 4096);
        assert_eq!(share(4096, 4000), 1024);
        assert_eq!(share(2, 5), 1);
    }

    #[test]
    fn measures_this_process_and_sees_it_grow() {
        let before = process_bytes(None).expect("/proc/self/status");
        let mut v = vec![1u8; 256 << 20];
        std::hint::black_box(&mut v);
        let after = process_bytes(None).unwrap();
        // SAFETY: no arguments.
        let me = unsafe { libc::getpid() } as u32;
        let by_pid = process_bytes(Some(me)).unwrap();
        assert!(by_pid.abs_diff(after) < 64 << 20, "{after} {by_pid}");
        assert_eq!(process_bytes(Some(u32::MAX)), None);
        // Other tests run in threads of this process and may free memory
        // meanwhile: allow them 64 MiB.
        assert!(after >= before + (192 << 20), "{before} -> {after}");
    }
}
