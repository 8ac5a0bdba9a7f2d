//! ELF core files (as `gcore` or the kernel write them): which bytes of the
//! file are the dumped process's memory.
//!
//! A core file is an ELF file of type `ET_CORE`; each `PT_LOAD` program
//! header names one mapping of the process, and those with file data
//! (`p_filesz > 0`) hold its contents at `p_offset`. This module reads the
//! ELF header and the program headers (32- and 64-bit, either byte order,
//! with the `PN_XNUM` extension for more than 65534 headers) and nothing
//! else; it knows nothing of pages or stores.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use recipe::Error;

/// `e_type` of a core file.
const ET_CORE: u16 = 4;
/// `p_type` of a loadable segment.
const PT_LOAD: u32 = 1;
/// `e_phnum` when the real count is in section header 0's `sh_info`.
const PN_XNUM: u16 = 0xffff;

/// One `PT_LOAD` segment with data in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Segment {
    /// The address the segment was mapped at in the dumped process.
    pub vaddr: u64,
    /// Where its data starts in the core file.
    pub offset: u64,
    /// Bytes of data in the file (`p_filesz`).
    pub len: u64,
}

/// Whether the first bytes of a file (at least 18) are an ELF header of
/// type `ET_CORE`.
pub(crate) fn is_core(head: &[u8]) -> bool {
    head.len() >= 18
        && head[..4] == *b"\x7fELF"
        && matches!(head[4], 1 | 2)
        && matches!(head[5], 1 | 2)
        && Fields { big: head[5] == 2 }.u16(head, 16) == ET_CORE
}

/// Reads fixed-width fields in the file's byte order.
#[derive(Clone, Copy)]
struct Fields {
    big: bool,
}

impl Fields {
    /// The `N` bytes at `at`, least significant first.
    fn le_bytes<const N: usize>(self, b: &[u8], at: usize) -> [u8; N] {
        let mut v: [u8; N] = b[at..at + N].try_into().expect("N bytes");
        if self.big {
            v.reverse();
        }
        v
    }

    fn u16(self, b: &[u8], at: usize) -> u16 {
        u16::from_le_bytes(self.le_bytes(b, at))
    }

    fn u32(self, b: &[u8], at: usize) -> u32 {
        u32::from_le_bytes(self.le_bytes(b, at))
    }

    fn u64(self, b: &[u8], at: usize) -> u64 {
        u64::from_le_bytes(self.le_bytes(b, at))
    }

    /// A word of the ELF class: 8 bytes in ELF64, 4 in ELF32.
    fn word(self, wide: bool, b: &[u8], at: usize) -> u64 {
        if wide {
            self.u64(b, at)
        } else {
            u64::from(self.u32(b, at))
        }
    }
}

/// The `PT_LOAD` segments with file data of the core file at `path`, in
/// program-header order, and the bytes of them the file lacks. A truncated
/// core (a dump cut short, or its first part copied) gives what it holds:
/// a segment that runs past the end is cut there, one that starts past it
/// is left out, and the missing bytes are counted (the corpus refuses a core
/// with any missing). A malformed header is an error naming the file.
pub(crate) fn segments(path: &Path) -> Result<(Vec<Segment>, u64), Error> {
    let bad = |what: String| {
        Error::Failed(format!(
            "{}: not a usable ELF core file: {what}",
            path.display()
        ))
    };
    let io = |e: std::io::Error| Error::Failed(format!("{}: {e}", path.display()));
    let mut file = File::open(path).map_err(io)?;
    let total = file.seek(SeekFrom::End(0)).map_err(io)?;
    let mut read_at = |offset: u64, len: usize| -> Result<Vec<u8>, Error> {
        if offset.checked_add(len as u64).is_none_or(|end| end > total) {
            return Err(bad(format!(
                "{len} bytes at offset {offset} are past its end ({total} bytes; truncated?)"
            )));
        }
        let mut buf = vec![0u8; len];
        file.seek(SeekFrom::Start(offset)).map_err(io)?;
        file.read_exact(&mut buf).map_err(io)?;
        Ok(buf)
    };
    let head = read_at(0, 64.min(total as usize))?;
    if !is_core(&head) {
        return Err(bad("no ELF header of type ET_CORE".into()));
    }
    let wide = head[4] == 2;
    let f = Fields { big: head[5] == 2 };
    if head.len() < if wide { 64 } else { 52 } {
        return Err(bad("its ELF header is cut short".into()));
    }
    let (phoff, phentsize, mut phnum, shoff) = if wide {
        (
            f.u64(&head, 32),
            f.u16(&head, 54),
            f.u16(&head, 56) as u64,
            f.u64(&head, 40),
        )
    } else {
        (
            u64::from(f.u32(&head, 28)),
            f.u16(&head, 42),
            f.u16(&head, 44) as u64,
            u64::from(f.u32(&head, 32)),
        )
    };
    if phnum == u64::from(PN_XNUM) {
        // The real count is section header 0's sh_info.
        let sh = read_at(shoff, if wide { 64 } else { 40 })?;
        phnum = u64::from(f.u32(&sh, if wide { 44 } else { 28 }));
    }
    let min_entry = if wide { 56 } else { 32 };
    if usize::from(phentsize) < min_entry {
        return Err(bad(format!("program header entries of {phentsize} bytes")));
    }
    let table_len = phnum
        .checked_mul(u64::from(phentsize))
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| bad("program header table too large".into()))?;
    let table = read_at(phoff, table_len)?;
    let mut out = Vec::new();
    let mut missing = 0u64;
    for entry in table.chunks_exact(usize::from(phentsize)) {
        if f.u32(entry, 0) != PT_LOAD {
            continue;
        }
        let (offset, vaddr, filesz) = if wide {
            (f.u64(entry, 8), f.u64(entry, 16), f.u64(entry, 32))
        } else {
            (
                f.word(false, entry, 4),
                f.word(false, entry, 8),
                f.word(false, entry, 16),
            )
        };
        if filesz == 0 {
            continue;
        }
        let present = total.saturating_sub(offset).min(filesz);
        missing += filesz - present;
        if present == 0 {
            continue;
        }
        out.push(Segment {
            vaddr,
            offset,
            len: present,
        });
    }
    Ok((out, missing))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_segments_with_data_are_found_and_truncation_refused() {
        let a = vec![7u8; 8192];
        let bytes = testkit::elf_core(&[(0x1000, &a), (0x9000, &[]), (0x20000, &a[..4096])]);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("core");
        std::fs::write(&path, &bytes).unwrap();
        assert!(is_core(&bytes));
        let (segs, missing) = segments(&path).unwrap();
        assert_eq!(missing, 0);
        let base = 64 + 56 * 4;
        assert_eq!(
            segs,
            [
                Segment {
                    vaddr: 0x1000,
                    offset: base,
                    len: 8192
                },
                Segment {
                    vaddr: 0x20000,
                    offset: base + 8192,
                    len: 4096
                },
            ]
        );
        // Cut short: the last segment is cut, a byte is missing.
        std::fs::write(&path, &bytes[..bytes.len() - 1]).unwrap();
        let (cut, missing) = segments(&path).unwrap();
        assert_eq!(missing, 1);
        assert_eq!(cut[1].len, 4095);
        // Cut before the second segment: it is left out.
        std::fs::write(&path, &bytes[..(base + 8192) as usize]).unwrap();
        let (cut, missing) = segments(&path).unwrap();
        assert_eq!((cut.len(), missing), (1, 4096));
        let mut exec = bytes.clone();
        exec[16] = 2;
        assert!(!is_core(&exec));
    }
}
