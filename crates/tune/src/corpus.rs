//! Input data for the store, laid out page by page as a filesystem would
//! place it on a disk, and opened by kind.
//!
//! A [`Corpus`] is a list of [`Item`]s (one per regular file, tar member,
//! core segment, stream or process mapping), each starting on a page
//! boundary, its last page padded with zeros. Each input is opened by what
//! it is:
//! - a regular file is one item; an ELF core file (`ET_CORE`, as `gcore`
//!   writes it) contributes its `PT_LOAD` segments with data, and a `.tar`
//!   archive its regular members in archive order (so `zmem exp merge` can
//!   delete a top-level directory's pages as `rm -rf` on a filesystem
//!   would), unless read raw; a truncated tar is stored as plain bytes;
//! - a directory contributes its regular files in sorted path order
//!   (symbolic links are not followed);
//! - a block device is read to its size;
//! - a pipe, a FIFO or `-` (standard input) is read to its end once, into an
//!   unnamed spool file; a FIFO with no writer yet says so on stderr while
//!   it waits;
//! - a process (`--pid`) contributes its private anonymous memory
//!   (`crate::process_memory`).
//!
//! An input that yields no pages is an error. [`Corpus::read_line`] says
//! what was read, page counts by input; [`Corpus::for_each_page`] streams
//! the pages in disk order, reading each input once.
//!
//! This module only reads inputs; it knows nothing of stores.

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::os::unix::fs::{FileExt, FileTypeExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use recipe::Error;

use crate::{elf_core, process_memory};

/// Where an item's bytes come from.
#[derive(Clone, Debug)]
enum Source {
    /// A whole file.
    File(PathBuf),
    /// `len` bytes at `offset` in a file (a tar member).
    Range { path: PathBuf, offset: u64 },
    /// The first `len` bytes of a buffer.
    Bytes(Arc<[u8]>),
    /// `len` bytes at `offset` in the corpus's spool file (a stream read to
    /// its end, or a process's memory).
    Spooled { file: Arc<File>, offset: u64 },
}

/// Reads a spool file from a position on, with positional reads (so items
/// sharing the file never disturb each other).
struct SpoolReader {
    file: Arc<File>,
    pos: u64,
}

impl Read for SpoolReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.file.read_at(buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

/// One input of a corpus: which items it gave, and how to name it.
#[derive(Clone, Debug)]
struct Part {
    /// The path, `standard input` or `pid N`.
    label: String,
    /// What it was: `file`, `directory, 12 files`, `tar, 3 files`, ...
    kind: String,
    /// Its items: `items[first..first + count]`.
    first: usize,
    count: usize,
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

impl Item {
    /// A reader of the item's bytes from its start (it may give more than
    /// `len` bytes: the caller stops at `len`).
    fn reader(&self) -> Result<Box<dyn Read + '_>, Error> {
        Ok(match &self.source {
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
            Source::Spooled { file, offset } => Box::new(BufReader::with_capacity(
                1 << 20,
                SpoolReader {
                    file: Arc::clone(file),
                    pos: *offset,
                },
            )),
        })
    }
}

/// The bytes of one input read raw, opened by kind as a corpus input is (a
/// file, block device, pipe, FIFO, `-` for standard input; a directory's
/// files one after another): for the commands that take a data set as
/// bytes. An input without data is an error.
pub fn read_input(path: &Path) -> Result<Vec<u8>, Error> {
    let corpus = Corpus::from_paths(&[path.to_path_buf()], true)?;
    let mut out = Vec::with_capacity(usize::try_from(corpus.bytes()).unwrap_or(0));
    for item in &corpus.items {
        let start = out.len();
        item.reader()?
            .take(item.len)
            .read_to_end(&mut out)
            .map_err(|e| Error::Failed(format!("{}: {e}", item.name)))?;
        // A file that shrank since it was listed reads as zeros to its length.
        out.resize(start + item.len as usize, 0);
    }
    Ok(out)
}

/// Whether `path` can be given to a command that reads it more than once
/// (a regular file or a block device, not a stream).
pub fn is_rereadable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() || m.file_type().is_block_device())
}

/// Items in disk order, and what they came from.
#[derive(Clone, Debug, Default)]
pub struct Corpus {
    /// The items.
    pub items: Vec<Item>,
    /// A one-line account of the inputs, for reports.
    pub description: String,
    /// The inputs, in order, for [`Corpus::read_line`].
    parts: Vec<Part>,
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

/// The regular members of a tar archive: (name, offset of data, length).
/// Handles ustar prefixes, GNU long names and pax `path` records.
fn tar_members(path: &Path) -> Result<Vec<(String, u64, u64)>, Error> {
    let bad = |what: &str| Error::Failed(format!("{}: not a valid tar: {what}", path.display()));
    let mut file = File::open(path).map_err(|e| io_err(path, e))?;
    let total = file.seek(SeekFrom::End(0)).map_err(|e| io_err(path, e))?;
    file.rewind().map_err(|e| io_err(path, e))?;
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
pub(crate) const LINUX_TAR_XZ: &str = "/usr/src/linux-source-6.1.tar.xz";

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
    if !Path::new(LINUX_TAR_XZ).exists() {
        return Err(Error::Failed(how));
    }
    eprintln!(
        "decompressing {LINUX_TAR_XZ} to {} (once)...",
        path.display()
    );
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

/// What zmem can read, for the error on anything else.
const READABLE: &str = "files, directories, tar archives, ELF core files, block devices, pipes, \
                        FIFOs and - (standard input)";

/// The first bytes of the file at `path` (fewer if it is shorter).
fn head(path: &Path) -> Result<Vec<u8>, Error> {
    let mut head = Vec::with_capacity(512);
    File::open(path)
        .and_then(|f| f.take(512).read_to_end(&mut head))
        .map_err(|e| io_err(path, e))?;
    Ok(head)
}

/// Opens a FIFO for reading; if no writer has opened it within a moment,
/// says on stderr that it waits for one (the open blocks until then).
fn open_fifo(path: &Path) -> Result<File, Error> {
    let (tx, rx) = std::sync::mpsc::channel();
    let owned = path.to_path_buf();
    let opener = std::thread::spawn(move || {
        let file = File::open(&owned);
        let _ = tx.send(());
        file
    });
    if rx.recv_timeout(Duration::from_millis(300)).is_err() {
        eprintln!(
            "zmem: waiting for a writer on the FIFO {} (nothing has opened it for writing yet)",
            path.display()
        );
    }
    opener
        .join()
        .map_err(|_| Error::Failed(format!("{}: opening the FIFO failed", path.display())))?
        .map_err(|e| io_err(path, e))
}

/// Builds a corpus input by input.
struct Builder {
    items: Vec<Item>,
    parts: Vec<Part>,
    /// The description's pieces, one per input.
    described: Vec<String>,
    /// The spool file of streams and process memory, made on first use.
    spool: Option<Arc<File>>,
}

impl Builder {
    fn spool(&mut self) -> Result<Arc<File>, Error> {
        if self.spool.is_none() {
            let file = tempfile::tempfile().map_err(|e| {
                Error::Failed(format!(
                    "making a spool file in the temporary directory: {e}"
                ))
            })?;
            self.spool = Some(Arc::new(file));
        }
        Ok(Arc::clone(self.spool.as_ref().expect("made above")))
    }

    /// Adds one input's items; an input without data is an error.
    fn part(
        &mut self,
        label: String,
        kind: String,
        described: String,
        items: Vec<Item>,
    ) -> Result<(), Error> {
        if items.iter().all(|i| i.len == 0) {
            return Err(Error::Failed(format!(
                "{label} ({kind}): it yields no pages (empty), nothing to store"
            )));
        }
        self.parts.push(Part {
            label,
            kind,
            first: self.items.len(),
            count: items.len(),
        });
        self.items.extend(items);
        self.described.push(described);
        Ok(())
    }

    /// Reads a stream to its end into the spool file: one item.
    fn stream(&mut self, mut reader: impl Read, label: String, kind: &str) -> Result<(), Error> {
        let spool = self.spool()?;
        let mut end = (&*spool)
            .seek(SeekFrom::End(0))
            .map_err(|e| Error::Failed(format!("spool file: {e}")))?;
        let offset = end;
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Error::Failed(format!("{label}: {e}"))),
            };
            spool
                .write_all_at(&buf[..n], end)
                .map_err(|e| Error::Failed(format!("spool file: {e}")))?;
            end += n as u64;
        }
        let item = Item {
            name: label.clone(),
            len: end - offset,
            source: Source::Spooled {
                file: spool,
                offset,
            },
        };
        let described = format!("{label} ({kind})");
        self.part(label, kind.to_string(), described, vec![item])
    }

    fn path(&mut self, path: &Path, raw: bool) -> Result<(), Error> {
        let label = path.display().to_string();
        if path == Path::new("-") {
            return self.stream(std::io::stdin().lock(), "-".into(), "standard input");
        }
        let meta = std::fs::metadata(path).map_err(|e| io_err(path, e))?;
        let ft = meta.file_type();
        if meta.is_dir() {
            let mut files = Vec::new();
            walk(path, &mut files)?;
            let n = files.len();
            let items = files
                .into_iter()
                .map(|(file, len)| Item {
                    name: file
                        .strip_prefix(path)
                        .unwrap_or(&file)
                        .to_string_lossy()
                        .into_owned(),
                    len,
                    source: Source::File(file),
                })
                .collect();
            return self.part(
                label.clone(),
                format!("directory, {n} files"),
                format!("{label} ({n} files)"),
                items,
            );
        }
        if ft.is_fifo() {
            // A pipe given as /dev/fd/N (`<(cmd)`) or a named FIFO.
            // A named FIFO is one in the filesystem; a pipe is reached through
            // a link such as /dev/fd/63 or /dev/stdin.
            let named = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_fifo());
            let kind = if named { "FIFO" } else { "pipe" };
            let file = open_fifo(path)?;
            return self.stream(file, label, kind);
        }
        if ft.is_char_device() || ft.is_socket() {
            let what = if ft.is_socket() {
                "a socket"
            } else {
                "a character device"
            };
            return Err(Error::Failed(format!(
                "{label}: {what}; zmem reads {READABLE}"
            )));
        }
        let block = ft.is_block_device();
        let head = head(path)?;
        if !raw && head.len() >= 262 && &head[257..262] == b"ustar" {
            if let Ok(members) = tar_members(path) {
                let n = members.len();
                let items = members
                    .into_iter()
                    .map(|(name, offset, len)| Item {
                        name,
                        len,
                        source: Source::Range {
                            path: path.to_path_buf(),
                            offset,
                        },
                    })
                    .collect();
                return self.part(
                    label.clone(),
                    format!("tar, {n} files"),
                    format!("{label} (tar, {n} files)"),
                    items,
                );
            }
        }
        if !raw && !block && elf_core::is_core(&head) {
            let (segments, missing) = elf_core::segments(path)?;
            if missing > 0 {
                return Err(Error::Failed(format!(
                    "{}: a truncated ELF core file ({missing} bytes of its segments missing); \
                     --raw stores the file as plain bytes",
                    path.display()
                )));
            }
            let n = segments.len();
            let kind = format!("ELF core, {n} segments");
            let items = segments
                .into_iter()
                .map(|s| Item {
                    name: format!("{label}@{:#x}", s.vaddr),
                    len: s.len,
                    source: Source::Range {
                        path: path.to_path_buf(),
                        offset: s.offset,
                    },
                })
                .collect();
            return self.part(
                label.clone(),
                kind.clone(),
                format!("{label} ({kind})"),
                items,
            );
        }
        let len = if block {
            let mut f = File::open(path).map_err(|e| io_err(path, e))?;
            f.seek(SeekFrom::End(0)).map_err(|e| io_err(path, e))?
        } else {
            meta.len()
        };
        let item = Item {
            name: label.clone(),
            len,
            source: Source::File(path.to_path_buf()),
        };
        let incomplete_tar = !raw && head.len() >= 262 && &head[257..262] == b"ustar";
        let (kind, described) = if block {
            ("block device", format!("{label} (block device)"))
        } else if incomplete_tar {
            // A truncated or damaged tar is stored as plain bytes.
            (
                "an incomplete tar, stored raw",
                format!("{label} (an incomplete tar, stored raw)"),
            )
        } else {
            ("file", label.clone())
        };
        self.part(label, kind.to_string(), described, vec![item])
    }

    fn pid(&mut self, pid: u32) -> Result<(), Error> {
        let spool = self.spool()?;
        let mut handle = spool
            .try_clone()
            .map_err(|e| Error::Failed(format!("spool file: {e}")))?;
        handle
            .seek(SeekFrom::End(0))
            .map_err(|e| Error::Failed(format!("spool file: {e}")))?;
        let got = process_memory::read(pid, &mut handle)?;
        let items = got
            .regions
            .iter()
            .map(|r| Item {
                name: format!("pid {pid} {}", r.name),
                len: r.len,
                source: Source::Spooled {
                    file: Arc::clone(&spool),
                    offset: r.offset,
                },
            })
            .collect();
        let mut kind = format!(
            "process memory: {} present, {} untouched skipped, {} swapped out and read back in",
            got.present, got.untouched, got.swapped
        );
        if got.unreadable > 0 {
            kind.push_str(&format!(", {} unreadable skipped", got.unreadable));
        }
        let label = format!("pid {pid}");
        let described = format!("{label} ({} anonymous mappings)", got.regions.len());
        self.part(label, kind, described, items)
    }
}

impl Corpus {
    /// The inputs at `paths`: files, directories, block devices, pipes,
    /// FIFOs, `-` (standard input), and (unless `raw`) tar archives and ELF
    /// core files expanded into their members and segments.
    pub fn from_paths(paths: &[PathBuf], raw: bool) -> Result<Corpus, Error> {
        Corpus::from_inputs(paths, &[], raw)
    }

    /// The inputs at `paths` (as [`Corpus::from_paths`]), then the private
    /// anonymous memory of each process in `pids`.
    pub fn from_inputs(paths: &[PathBuf], pids: &[u32], raw: bool) -> Result<Corpus, Error> {
        let mut b = Builder {
            items: Vec::new(),
            parts: Vec::new(),
            described: Vec::new(),
            spool: None,
        };
        for path in paths {
            b.path(path, raw)?;
        }
        for &pid in pids {
            b.pid(pid)?;
        }
        let mut c = Corpus {
            items: b.items,
            description: String::new(),
            parts: b.parts,
        };
        c.description = format!("{}: {}", human(c.bytes()), b.described.join(", "));
        Ok(c)
    }

    /// One line saying what was read, in pages of `page_size` bytes, by
    /// input: `read 65536 pages of 4 KiB: 65536 from linux.bin (file)`.
    pub fn read_line(&self, page_size: usize) -> String {
        let ps = page_size as u64;
        let parts: Vec<String> = self
            .parts
            .iter()
            .map(|p| {
                let pages: u64 = self.items[p.first..p.first + p.count]
                    .iter()
                    .map(|i| i.len.div_ceil(ps))
                    .sum();
                format!("{pages} from {} ({})", p.label, p.kind)
            })
            .collect();
        format!(
            "read {} pages of {} KiB: {}",
            self.pages(page_size),
            page_size / 1024,
            parts.join(", ")
        )
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
        let mut parts = Vec::new();
        for (k, root) in ROOTS.iter().enumerate() {
            let first = items.len();
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
                parts.push(Part {
                    label: root.display().to_string(),
                    kind: format!("built-in default corpus, {n} files"),
                    first,
                    count: n,
                });
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
            parts,
        })
    }

    /// A corpus of in-memory items (`(name, buffer, len)`: the first `len`
    /// bytes of the buffer), for experiments.
    pub fn from_buffers(items: Vec<(String, Arc<[u8]>, u64)>, description: String) -> Corpus {
        let parts = vec![Part {
            label: description.clone(),
            kind: format!("in memory, {} items", items.len()),
            first: 0,
            count: items.len(),
        }];
        Corpus {
            parts,
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
            let mut reader = item.reader()?;
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
    fn inputs_read_raw_are_their_exact_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        let bytes: Vec<u8> = (0..5000u32).map(|i| (i * 7) as u8).collect();
        std::fs::write(&a, &bytes).unwrap();
        std::fs::write(&b, b"").unwrap();
        assert_eq!(read_input(&a).unwrap(), bytes);
        assert!(read_input(&b)
            .unwrap_err()
            .to_string()
            .contains("yields no pages"));
        assert!(is_rereadable(&a) && !is_rereadable(dir.path()));
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
