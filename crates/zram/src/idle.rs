//! Idle marking: which slots count as idle (`echo all > idle`, `echo N >
//! idle`), and the one parser of that syntax ([`IdleCutoff::parse`]).
//!
//! Owns the `idle` attribute's syntax and the marking walk. May not touch
//! writeback, recompression or the policy: they read the `IDLE` flag this
//! sets (and an access clears, in `slot`), nothing more.

use std::time::Duration;

use crate::disk::Disk;
use crate::error::StoreError;
use crate::slot;

/// Which slots `Store::mark_idle` marks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdleCutoff {
    /// Every allocated slot (`echo all > idle`).
    All,
    /// Slots not accessed for at least this long (`echo N > idle`); the
    /// others lose their mark.
    OlderThan(Duration),
}

impl IdleCutoff {
    /// Parses what is written to `idle`, as the kernel's `idle_store`
    /// reads it: `all`, or a whole number of seconds (0 to 2^64 - 1; 0
    /// marks every allocated slot); one trailing newline is allowed, as
    /// sysfs allows it. `EINVAL` for anything else.
    ///
    /// ```
    /// use std::time::Duration;
    /// use zram::IdleCutoff;
    ///
    /// assert_eq!(IdleCutoff::parse("all").unwrap(), IdleCutoff::All);
    /// assert_eq!(
    ///     IdleCutoff::parse("3600\n").unwrap(),
    ///     IdleCutoff::OlderThan(Duration::from_secs(3600))
    /// );
    /// assert_eq!(IdleCutoff::parse("soon").unwrap_err().errno(), libc::EINVAL);
    /// ```
    pub fn parse(text: &str) -> Result<IdleCutoff, StoreError> {
        let word = text.strip_suffix('\n').unwrap_or(text);
        if word == "all" {
            return Ok(IdleCutoff::All);
        }
        match word.parse::<u64>() {
            Ok(secs) if word.bytes().all(|b| b.is_ascii_digit()) => {
                Ok(IdleCutoff::OlderThan(Duration::from_secs(secs)))
            }
            _ => Err(StoreError::os(
                libc::EINVAL,
                format!("idle takes 'all' or seconds, not {word:?}"),
            )),
        }
    }
}

impl std::str::FromStr for IdleCutoff {
    type Err = StoreError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        IdleCutoff::parse(s)
    }
}

/// Marks the slots of `disk` idle as `cutoff` says (`Store::mark_idle`).
/// Same-filled and empty slots are never marked. Returns the slots marked.
pub(crate) fn mark(disk: &Disk, cutoff: IdleCutoff) -> u64 {
    let now = disk.now();
    let mut marked = 0;
    disk.scan(
        0..disk.disk_pages(),
        |_, guard| {
            if !guard.content().holds_memory() {
                return None;
            }
            let idle = match cutoff {
                IdleCutoff::All => true,
                IdleCutoff::OlderThan(age) => {
                    let age = u32::try_from(age.as_secs()).unwrap_or(u32::MAX);
                    now.saturating_sub(guard.ac_time()) >= age
                }
            };
            if idle {
                guard.update_flags(slot::IDLE, 0);
                Some(())
            } else {
                guard.update_flags(0, slot::IDLE);
                None
            }
        },
        |()| marked += 1,
    );
    marked
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_kernels_idle_syntax() {
        let secs = |n| IdleCutoff::OlderThan(Duration::from_secs(n));
        assert_eq!(IdleCutoff::parse("all").unwrap(), IdleCutoff::All);
        assert_eq!(IdleCutoff::parse("all\n").unwrap(), IdleCutoff::All);
        assert_eq!(IdleCutoff::parse("0").unwrap(), secs(0));
        assert_eq!(
            IdleCutoff::parse("18446744073709551615").unwrap(),
            secs(u64::MAX)
        );
        for bad in [
            "",
            "ALL",
            "all all",
            "-1",
            "+5",
            "1.5",
            "18446744073709551616",
            " 5",
        ] {
            let e = IdleCutoff::parse(bad).unwrap_err();
            assert_eq!(e.errno(), libc::EINVAL, "{bad:?}");
            assert!(e.to_string().contains("'all'"), "{e}");
        }
    }
}
