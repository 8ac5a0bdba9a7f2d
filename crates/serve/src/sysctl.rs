//! The kernel settings swap mode makes for itself: `vm.min_free_kbytes`
//! raised to what a device its own kernel swaps onto needs not to stall
//! (`swap::ADVISED_MIN_FREE_KBYTES`), and put back as it was when the
//! server stops (its shutdown, SIGTERM and SIGINT included, or a start
//! that fails after it was raised).
//!
//! This module owns writing files under `/proc/sys/vm` and the old values
//! kept to write back; it reads and writes no other file, and it never
//! lowers a setting.

use std::io;
use std::path::PathBuf;

use log::{info, warn};

/// A `vm` setting raised, put back when this is dropped.
#[derive(Debug)]
pub(crate) struct Raised {
    /// Its sysctl name (`vm.min_free_kbytes`).
    name: &'static str,
    path: PathBuf,
    /// The value before, written back on drop.
    old: u64,
    /// The value written.
    new: u64,
}

/// The settings raised, each put back when this is dropped.
#[derive(Debug, Default)]
pub(crate) struct Raises {
    raised: Vec<Raised>,
}

/// Why a setting could not be raised: its sysctl name, the value wanted
/// and the kernel's error.
#[derive(Debug)]
pub struct SysctlError {
    /// The sysctl name.
    pub name: &'static str,
    /// The value it needs.
    pub wanted: u64,
    /// The error reading or writing it.
    pub error: io::Error,
}

impl std::fmt::Display for SysctlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "cannot set {} to {}: {} (swap mode needs it; run as root, or set it first: \
             sysctl {}={})",
            self.name, self.wanted, self.error, self.name, self.wanted
        )
    }
}

impl std::error::Error for SysctlError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

/// The file of a `vm.NAME` sysctl.
fn path_of(name: &str) -> PathBuf {
    PathBuf::from("/proc/sys").join(name.replace('.', "/"))
}

/// Reads a sysctl holding one number.
fn read(path: &PathBuf) -> io::Result<u64> {
    std::fs::read_to_string(path)?
        .trim()
        .parse()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{e}")))
}

impl Raises {
    /// Raises sysctl `name` to at least `wanted`, saying so in one log
    /// line; a setting already there is left alone. An error where it
    /// cannot be read or written.
    pub(crate) fn raise(&mut self, name: &'static str, wanted: u64) -> Result<u64, SysctlError> {
        let path = path_of(name);
        let err = |error| SysctlError {
            name,
            wanted,
            error,
        };
        let old = read(&path).map_err(err)?;
        if old >= wanted {
            return Ok(old);
        }
        std::fs::write(&path, format!("{wanted}\n")).map_err(err)?;
        info!("swap mode: {name} {old} -> {wanted} (put back at exit)");
        self.raised.push(Raised {
            name,
            path,
            old,
            new: wanted,
        });
        Ok(old)
    }
}

impl Drop for Raises {
    fn drop(&mut self) {
        for r in self.raised.drain(..).rev() {
            // Someone else changed it meanwhile: theirs stays.
            match read(&r.path) {
                Ok(now) if now != r.new => {
                    warn!(
                        "swap mode: {} is {now}, not the {} set: left as it is",
                        r.name, r.new
                    );
                    continue;
                }
                Err(e) => {
                    warn!("swap mode: cannot read {}: {e}", r.name);
                    continue;
                }
                Ok(_) => {}
            }
            match std::fs::write(&r.path, format!("{}\n", r.old)) {
                Ok(()) => info!("swap mode: {} {} -> {} (put back)", r.name, r.new, r.old),
                Err(e) => warn!("swap mode: cannot put {} back to {}: {e}", r.name, r.old),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_to_their_files_and_a_setting_already_high_is_left_alone() {
        assert_eq!(
            path_of("vm.min_free_kbytes"),
            PathBuf::from("/proc/sys/vm/min_free_kbytes")
        );
        let Ok(now) = read(&path_of("vm.min_free_kbytes")) else {
            eprintln!("skipped: no /proc/sys/vm/min_free_kbytes here");
            return;
        };
        // At or below what the system has: nothing is written, nothing
        // is put back.
        let mut r = Raises::default();
        assert_eq!(r.raise("vm.min_free_kbytes", now).unwrap(), now);
        assert!(r.raised.is_empty());
        let e = r.raise("vm.no_such_setting", 1).unwrap_err();
        assert_eq!(e.error.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().contains("vm.no_such_setting"), "{e}");
    }
}
