//! Input data for the store: files, directory trees and tar archives laid out
//! page by page, as a filesystem would place them on a disk.
//!
//! A [`Corpus`] is a list of [`Item`]s (one per regular file or tar member),
//! each starting on a page boundary, its last page padded with zeros. A plain
//! file is one item; a directory contributes its regular files in sorted
//! path order (symbolic links are not followed); a `.tar` archive contributes
//! its regular members in archive order (so `zmem exp merge` can delete a
//! top-level directory's pages as `rm -rf` on a filesystem would), unless
//! it is read raw or is not a complete archive (a truncated tar is stored as
//! plain bytes). [`Corpus::for_each_page`] streams the pages in disk order,
//! reading each input once.
//!
//! This module only reads files; it knows nothing of stores.

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::Error;

/// Where an item's bytes come from.
#[derive(Clone, Debug)]
enum Source {
    /// A whole file.
    File(PathBuf),
    /// `len` bytes at `offset` in a file (a tar member).
    Range { path: PathBuf, offset: u64 },
    /// The first `len` bytes of a buffer.
    Bytes(Arc<[u8]>),
}

/// One file's data on the disk.
#[derive(Clone, Debug)]
pub struct Item {
    /// Its path (within its archive or tree).
    pub name: String,
    /// Its length in bytes.
    pub len: u64,
    source: Source,
}

/// Items in disk order, and what they came from.
#[derive(Clone, Debug, Default)]
pub struct Corpus {
    /// The items.
    pub items: Vec<Item>,
    /// A one-line account of the inputs, for reports.
    pub description: String,
}

fn io_err(path: &Path, e: std::io::Error) -> Error {
    Error::Failed(format!("{}: {e}", path.display()))
}

/// Regular files under `dir`, sorted by path, not following links.
fn walk(dir: &Path, out: &mut Vec<(PathBuf, u64)>) -> Result<(), Error> {
    walk_while(dir, &mut |path, len| {
        out.push((path, len));
        true
    })
    .map(|_| ())
}

/// Calls `f(path, len)` for the regular files under `dir` in sorted path
/// order until it returns false; returns whether the walk went to the end.
fn walk_while(dir: &Path, f: &mut dyn FnMut(PathBuf, u64) -> bool) -> Result<bool, Error> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| io_err(dir, e))?
        .filter_map(Result::ok)
        .collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let Ok(ft) = e.file_type() else { continue };
        let path = e.path();
        if ft.is_dir() {
            // Unreadable subdirectories are skipped, as `cp -r` would warn.
            if !walk_while(&path, f).unwrap_or(true) {
                return Ok(false);
            }
        } else if ft.is_file() {
            if let Ok(meta) = e.metadata() {
                if !f(path, meta.len()) {
                    return Ok(false);
                }
            }
        }
    }
    Ok(true)
}

fn octal(field: &[u8]) -> Option<u64> {
    // GNU base-256 for large sizes: high bit of the first byte set.
    if field.first().is_some_and(|b| b & 0x80 != 0) {
        let mut v: u64 = u64::from(field[0] & 0x7f);
        for &b in &field[1..] {
            v = v.checked_mul(256)?.checked_add(u64::from(b))?;
        }
        return Some(v);
    }
    let s = std::str::from_utf8(field).ok()?;
    let s = s.trim_matches(|c: char| c == '\0' || c == ' ');
    if s.is_empty() {
        return Some(0);
    }
    u64::from_str_radix(s, 8).ok()
}

fn cstr(field: &[u8]) -> String {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    String::from_utf8_lossy(&field[..end]).into_owned()
}

/// Whether `path` looks like a tar archive (the ustar magic at 257).
pub fn is_tar(path: &Path) -> bool {
    let mut head = [0u8; 512];
    File::open(path)
        .and_then(|mut f| f.read_exact(&mut head))
        .is_ok()
        && &head[257..262] == b"ustar"
}

/// The regular members of a tar archive: (name, offset of data, length).
/// Handles ustar prefixes, GNU long names and pax `path` records.
fn tar_members(path: &Path) -> Result<Vec<(String, u64, u64)>, Error> {
    let bad = |what: &str| Error::Failed(format!("{}: not a valid tar: {what}", path.display()));
    let file = File::open(path).map_err(|e| io_err(path, e))?;
    let total = file.metadata().map_err(|e| io_err(path, e))?.len();
    let mut r = BufReader::new(file);
    let mut pos = 0u64;
    let mut members = Vec::new();
    let mut long_name: Option<String> = None;
    let mut header = [0u8; 512];
    while pos + 512 <= total {
        r.read_exact(&mut header).map_err(|e| io_err(path, e))?;
        pos += 512;
        if header.iter().all(|&b| b == 0) {
            break;
        }
        let size = octal(&header[124..136]).ok_or_else(|| bad("bad size field"))?;
        let padded = size.div_ceil(512) * 512;
        if pos + size > total {
            return Err(bad("member runs past the end"));
        }
        let kind = header[156];
        let mut name = cstr(&header[0..100]);
        if &header[257..262] == b"ustar" {
            let prefix = cstr(&header[345..500]);
            if !prefix.is_empty() {
                name = format!("{prefix}/{name}");
            }
        }
        match kind {
            b'L' | b'x' => {
                let mut data = vec![0u8; usize::try_from(size).map_err(|_| bad("huge header"))?];
                r.read_exact(&mut data).map_err(|e| io_err(path, e))?;
                r.seek_relative((padded - size) as i64)
                    .map_err(|e| io_err(path, e))?;
                pos += padded;
                if kind == b'L' {
                    long_name = Some(cstr(&data));
                } else {
                    // pax records: "LEN key=value\n"
                    for rec in String::from_utf8_lossy(&data).lines() {
                        if let Some((_, kv)) = rec.split_once(' ') {
                            if let Some(p) = kv.strip_prefix("path=") {
                                long_name = Some(p.to_string());
                            }
                        }
                    }
                }
                continue;
            }
            b'0' | 0 | b'7' => {
                let name = long_name.take().unwrap_or(name);
                members.push((name, pos, size));
            }
            _ => {
                long_name = None;
            }
        }
        r.seek_relative(padded as i64)
            .map_err(|e| io_err(path, e))?;
        pos += padded;
    }
    Ok(members)
}

/// The bytes of the first regular member of a tar archive whose name ends
/// with `suffix`.
pub fn tar_member(path: &Path, suffix: &str) -> Result<Option<Vec<u8>>, Error> {
    let Some((_, offset, len)) = tar_members(path)?
        .into_iter()
        .find(|(name, _, _)| name.ends_with(suffix))
    else {
        return Ok(None);
    };
    let mut file = File::open(path).map_err(|e| io_err(path, e))?;
    file.seek(SeekFrom::Start(offset))
        .map_err(|e| io_err(path, e))?;
    let mut data = vec![0u8; len as usize];
    file.read_exact(&mut data).map_err(|e| io_err(path, e))?;
    Ok(Some(data))
}

/// Where `zmem exp merge` and `zmem exp chain` look for the Linux source tar.
pub const LINUX_TAR: &str = "/var/tmp/zmem-data/linux-source-6.1.tar";
/// Debian's linux-source-6.1 package installs this.
pub const LINUX_TAR_XZ: &str = "/usr/src/linux-source-6.1.tar.xz";

/// The Linux source tar at `path`, made from Debian's `.tar.xz` (with `xz
/// -dc`) when it is missing and the package is installed. The error says how
/// to get it.
pub fn linux_tar(path: &Path) -> Result<PathBuf, Error> {
    if path.exists() {
        return Ok(path.to_path_buf());
    }
    let how = format!(
        "{} is missing: install Debian's linux-source-6.1 (apt-get install linux-source-6.1) and \
         run `xz -dc {LINUX_TAR_XZ} > {LINUX_TAR}`, or pass another tar",
        path.display()
    );
    if path != Path::new(LINUX_TAR) || !Path::new(LINUX_TAR_XZ).exists() {
        return Err(Error::Failed(how));
    }
    eprintln!("decompressing {LINUX_TAR_XZ} to {LINUX_TAR} (once)...");
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| io_err(dir, e))?;
    }
    let tmp = path.with_extension("tar.part");
    let out = File::create(&tmp).map_err(|e| io_err(&tmp, e))?;
    let status = std::process::Command::new("xz")
        .args(["-dc", LINUX_TAR_XZ])
        .stdout(out)
        .status()
        .map_err(|e| Error::Failed(format!("running xz: {e}; {how}")))?;
    if !status.success() {
        let _ = std::fs::remove_file(&tmp);
        return Err(Error::Failed(format!("xz failed ({status}); {how}")));
    }
    std::fs::rename(&tmp, path).map_err(|e| io_err(path, e))?;
    Ok(path.to_path_buf())
}

fn human(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
}

impl Corpus {
    /// The inputs at `paths`: files, directories, and (unless `raw`) tar
    /// archives expanded into their members.
    pub fn from_paths(paths: &[PathBuf], raw: bool) -> Result<Corpus, Error> {
        let mut items = Vec::new();
        let mut parts = Vec::new();
        for path in paths {
            let meta = std::fs::metadata(path).map_err(|e| io_err(path, e))?;
            if meta.is_dir() {
                let mut files = Vec::new();
                walk(path, &mut files)?;
                let n = files.len();
                for (file, len) in files {
                    let name = file
                        .strip_prefix(path)
                        .unwrap_or(&file)
                        .to_string_lossy()
                        .into_owned();
                    items.push(Item {
                        name,
                        len,
                        source: Source::File(file),
                    });
                }
                parts.push(format!("{} ({n} files)", path.display()));
            } else if let Some(members) = (!raw && is_tar(path))
                .then(|| tar_members(path).ok())
                .flatten()
            {
                let n = members.len();
                for (name, offset, len) in members {
                    items.push(Item {
                        name,
                        len,
                        source: Source::Range {
                            path: path.clone(),
                            offset,
                        },
                    });
                }
                parts.push(format!("{} (tar, {n} files)", path.display()));
            } else {
                let name = path.to_string_lossy().into_owned();
                items.push(Item {
                    name,
                    len: meta.len(),
                    source: Source::File(path.clone()),
                });
                // A truncated or damaged tar is stored as plain bytes.
                parts.push(if !raw && is_tar(path) {
                    format!("{} (an incomplete tar, stored raw)", path.display())
                } else {
                    path.display().to_string()
                });
            }
        }
        let mut c = Corpus {
            items,
            description: String::new(),
        };
        c.description = format!("{}: {}", human(c.bytes()), parts.join(", "));
        Ok(c)
    }

    /// The built-in default: about `limit` bytes of regular files, a third
    /// each from /usr/bin, /usr/lib and /usr/share (sorted, whole files, a
    /// root's unused share passed on to the next): real binaries, libraries
    /// and text present on any Linux machine.
    pub fn default_corpus(limit: u64) -> Result<Corpus, Error> {
        const ROOTS: [&str; 3] = ["/usr/bin", "/usr/lib", "/usr/share"];
        let mut items = Vec::new();
        let mut total = 0u64;
        let mut used = Vec::new();
        for (k, root) in ROOTS.iter().enumerate() {
            let budget = (limit - total) / (ROOTS.len() - k) as u64;
            let root = Path::new(root);
            let (mut n, mut taken) = (0, 0u64);
            let walked = walk_while(root, &mut |file, len| {
                if len == 0 || len > budget / 4 || File::open(&file).is_err() {
                    return true;
                }
                if taken + len > budget {
                    return false;
                }
                taken += len;
                n += 1;
                items.push(Item {
                    name: file.to_string_lossy().into_owned(),
                    len,
                    source: Source::File(file),
                });
                true
            });
            if walked.is_err() {
                continue;
            }
            total += taken;
            if n > 0 {
                used.push(format!("{} ({n} files)", root.display()));
            }
        }
        if items.is_empty() {
            return Err(Error::Failed(
                "no readable files under /usr/bin, /usr/lib or /usr/share for the default corpus; give PATHs"
                    .into(),
            ));
        }
        Ok(Corpus {
            items,
            description: format!(
                "built-in default corpus, {} of real files in sorted order from {}",
                human(total),
                used.join(", ")
            ),
        })
    }

    /// A corpus of in-memory items (`(name, buffer, len)`: the first `len`
    /// bytes of the buffer), for experiments.
    pub fn from_buffers(items: Vec<(String, Arc<[u8]>, u64)>, description: String) -> Corpus {
        Corpus {
            items: items
                .into_iter()
                .map(|(name, bytes, len)| Item {
                    name,
                    len: len.min(bytes.len() as u64),
                    source: Source::Bytes(bytes),
                })
                .collect(),
            description,
        }
    }

    /// Bytes of data.
    pub fn bytes(&self) -> u64 {
        self.items.iter().map(|i| i.len).sum()
    }

    /// Pages the items take on a disk of `page_size` pages.
    pub fn pages(&self, page_size: usize) -> u64 {
        self.items
            .iter()
            .map(|i| i.len.div_ceil(page_size as u64))
            .sum()
    }

    /// The first page and page count of each item on such a disk.
    pub fn extents(&self, page_size: usize) -> Vec<(u64, u64)> {
        let mut next = 0;
        self.items
            .iter()
            .map(|i| {
                let n = i.len.div_ceil(page_size as u64);
                let e = (next, n);
                next += n;
                e
            })
            .collect()
    }

    /// Calls `f(page_index, page)` for every page in disk order. A file that
    /// shrank since it was listed is padded with zeros; one that grew is cut.
    pub fn for_each_page(
        &self,
        page_size: usize,
        mut f: impl FnMut(u64, &[u8]) -> Result<(), Error>,
    ) -> Result<(), Error> {
        let mut page = vec![0u8; page_size];
        let mut index = 0u64;
        for item in &self.items {
            let mut reader: Box<dyn Read> = match &item.source {
                Source::File(p) => Box::new(BufReader::with_capacity(
                    1 << 20,
                    File::open(p).map_err(|e| io_err(p, e))?,
                )),
                Source::Range { path, offset } => {
                    let mut file = File::open(path).map_err(|e| io_err(path, e))?;
                    file.seek(SeekFrom::Start(*offset))
                        .map_err(|e| io_err(path, e))?;
                    Box::new(BufReader::with_capacity(1 << 20, file))
                }
                Source::Bytes(b) => Box::new(&b[..]),
            };
            let mut left = item.len;
            while left > 0 {
                let want = left.min(page_size as u64) as usize;
                let mut got = 0;
                while got < want {
                    match reader.read(&mut page[got..want]) {
                        Ok(0) => break,
                        Ok(n) => got += n,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(Error::Failed(format!("{}: {e}", item.name))),
                    }
                }
                page[got..].fill(0);
                f(index, &page)?;
                index += 1;
                left -= want as u64;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn octal_fields_parse_both_encodings() {
        assert_eq!(octal(b"00000001750\0"), Some(1000));
        assert_eq!(octal(b"        \0   "), Some(0));
        let mut b256 = [0u8; 12];
        b256[0] = 0x80;
        b256[11] = 5;
        assert_eq!(octal(&b256), Some(5));
        assert_eq!(octal(b"zz"), None);
    }

    #[test]
    fn buffers_are_laid_out_page_aligned() {
        let a: Arc<[u8]> = vec![1u8; 5000].into();
        let b: Arc<[u8]> = vec![2u8; 4096].into();
        let c = Corpus::from_buffers(
            vec![("x/a".into(), a, 5000), ("y/b".into(), b, 4096)],
            "t".into(),
        );
        assert_eq!(c.pages(4096), 3);
        assert_eq!(c.extents(4096), vec![(0, 2), (2, 1)]);
        let mut seen = Vec::new();
        c.for_each_page(4096, |i, p| {
            seen.push((i, p[0], p[4095]));
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, vec![(0, 1, 1), (1, 1, 0), (2, 2, 2)]);
    }
}
