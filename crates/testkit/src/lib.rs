//! Test support shared by the tests of several zmem crates; no crate depends
//! on it except as a dev-dependency, and it depends on no zmem crate.
//!
//! It owns what more than one crate's tests need and no crate's own test
//! module should keep a copy of: running the Debian NBD clients with a
//! timeout and the qemu-io scenario both NBD servers are put through
//! ([`clients`]), whether a server closed a raw connection
//! ([`peer_closed`]), real data ([`real_data`]), incompressible bytes
//! ([`noise`]), seeded generators and object contents ([`Rng`],
//! [`SplitMix64`] and the compressor test inputs it makes, [`pattern`]), a
//! dictionary made of pages ([`every_other_page`]), ELF core files to read
//! back ([`elf_core`]), an anonymous mapping of the test's own, outside any
//! allocator ([`AnonMap`]), reading the process's resident set ([`rss`]), TLS certificates made with `openssl`
//! ([`certs`]), commands run in a qemu guest with a kernel of its own
//! ([`vm`]), the kernel's own C code built as a test oracle
//! ([`kernel_oracle`]), the workspace as cargo and the file tree describe
//! it ([`workspace`]), and the harness both C libraries' tests build, run
//! and install their library with ([`clib`]). What is about one crate (a
//! test server, the `zmem` binary) stays in that crate's tests.

pub mod certs;
pub mod clib;
pub mod clients;
pub mod kernel_oracle;
pub mod rss;
pub mod vm;
pub mod workspace;

use std::io::Read;
use std::path::PathBuf;

/// `len` bytes of real data: system libraries and programs, concatenated in
/// a fixed order (padded with a pattern on a very small system).
pub fn real_data(len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    for dir in ["/usr/lib/x86_64-linux-gnu", "/usr/lib", "/usr/bin"] {
        let Ok(rd) = std::fs::read_dir(dir) else {
            continue;
        };
        let mut files: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
        files.sort();
        for f in files {
            if out.len() >= len {
                break;
            }
            if !f.is_file() {
                continue;
            }
            if let Ok(file) = std::fs::File::open(&f) {
                let want = (len - out.len()).min(2 << 20) as u64;
                let _ = file.take(want).read_to_end(&mut out);
            }
        }
    }
    let pad = len.saturating_sub(out.len());
    out.extend(noise(pad, 0x9e37_79b9));
    out.truncate(len);
    out
}

/// `len` incompressible bytes, the same for the same `seed` (not 0): the low
/// byte of each step of xorshift32 from `seed`.
pub fn noise(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

/// Whether this process may open /dev/userfaultfd: a userfaultfd that
/// serves the kernel's own faults too (what `zmem run` and a full-mode
/// region need; tests skip without it).
pub fn userfaultfd_serves_kernel() -> bool {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/userfaultfd")
        .is_ok()
}

/// Whether the peer has closed the connection `s`: a read sees EOF or a
/// reset. A read that times out (the stream's read timeout) found the
/// connection still open, and so did one that got a byte.
pub fn peer_closed(s: &mut impl Read) -> bool {
    let mut b = [0u8; 1];
    match s.read(&mut b) {
        Ok(n) => n == 0,
        Err(e) => !matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
    }
}

/// xorshift64, the generator tests draw sizes, positions and choices from;
/// the seed must not be zero.
#[derive(Clone, Debug)]
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number in `lo..=hi`.
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next_u64() % (hi - lo + 1) as u64) as usize
    }
}

/// Deterministic bytes for object `id` of `len` bytes.
pub fn pattern(id: u64, len: usize) -> Vec<u8> {
    let mut rng = Rng(id.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    (0..len).map(|_| rng.next_u64() as u8).collect()
}

/// A dictionary for compressor tests: every other page of `pages` (the
/// first, the third, ...), concatenated and cut to `max` bytes.
pub fn every_other_page(pages: &[Vec<u8>], max: usize) -> Vec<u8> {
    pages
        .iter()
        .step_by(2)
        .flatten()
        .copied()
        .take(max)
        .collect()
}

/// splitmix64, a seeded source of bytes and positions for tests whose data
/// must not depend on the seed's bit pattern (any seed, 0 included).
#[derive(Clone, Debug)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number below `n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// Fills `buf`, one draw a byte (its low byte).
    pub fn fill(&mut self, buf: &mut [u8]) {
        for b in buf {
            *b = self.next_u64() as u8;
        }
    }

    /// `n` bytes, one draw a byte (its low byte).
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }

    /// Compressor test inputs: for each length below `n`, that many random
    /// bytes and as many zeros.
    pub fn short_inputs(&mut self, n: usize) -> Vec<Vec<u8>> {
        let mut v = Vec::new();
        for len in 0..n {
            v.push(self.bytes(len));
            v.push(vec![0u8; len]);
        }
        v
    }

    /// A compressor test input: `dist.max(len) + 8` random bytes, a copy of
    /// the `len` bytes from `dist` back (repeating itself where `len >
    /// dist`), then `tail` random bytes.
    pub fn with_copy(&mut self, dist: usize, len: usize, tail: usize) -> Vec<u8> {
        let mut p = self.bytes(dist.max(len) + 8);
        let start = p.len() - dist;
        let copy: Vec<u8> = (0..len).map(|i| p[start + i % dist]).collect();
        p.extend(copy);
        p.extend(self.bytes(tail));
        p
    }
}

/// A little-endian x86-64 ELF64 core file: the ELF header, a PT_NOTE
/// without data, then one PT_LOAD per (address, data) segment, the
/// segments' data after the program headers in the same order.
pub fn elf_core(segs: &[(u64, &[u8])]) -> Vec<u8> {
    let phnum = segs.len() + 1;
    let mut at = 64 + 56 * phnum as u64;
    let mut out = vec![0u8; 64];
    out[..4].copy_from_slice(b"\x7fELF");
    out[4] = 2; // ELFCLASS64
    out[5] = 1; // little-endian
    out[6] = 1; // EV_CURRENT
    out[16..18].copy_from_slice(&4u16.to_le_bytes()); // ET_CORE
    out[18..20].copy_from_slice(&62u16.to_le_bytes()); // x86-64
    out[32..40].copy_from_slice(&64u64.to_le_bytes()); // e_phoff
    out[52..54].copy_from_slice(&64u16.to_le_bytes()); // e_ehsize
    out[54..56].copy_from_slice(&56u16.to_le_bytes()); // e_phentsize
    out[56..58].copy_from_slice(&(phnum as u16).to_le_bytes());
    let mut note = vec![0u8; 56];
    note[..4].copy_from_slice(&4u32.to_le_bytes()); // PT_NOTE, no data
    out.extend(note);
    for (vaddr, data) in segs {
        let mut ph = vec![0u8; 56];
        ph[..4].copy_from_slice(&1u32.to_le_bytes()); // PT_LOAD
        ph[8..16].copy_from_slice(&at.to_le_bytes());
        ph[16..24].copy_from_slice(&vaddr.to_le_bytes());
        ph[32..40].copy_from_slice(&(data.len() as u64).to_le_bytes());
        ph[40..48].copy_from_slice(&(data.len() as u64).to_le_bytes());
        out.extend(ph);
        at += data.len() as u64;
    }
    for (_, data) in segs {
        out.extend_from_slice(data);
    }
    out
}

/// A private anonymous mapping, readable and writable, at an address the
/// kernel chooses, unmapped on drop: memory of a test's own that no
/// allocator (nor any region or store) serves, its pages faulted by the
/// kernel alone.
#[derive(Debug)]
pub struct AnonMap {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
}

impl AnonMap {
    /// Maps `len` bytes (more than 0); no page is touched. Panics if the
    /// kernel refuses.
    pub fn new(len: usize) -> AnonMap {
        // SAFETY: a fresh private anonymous mapping; no memory of this
        // program is named by the call.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(
            p,
            libc::MAP_FAILED,
            "mmap of {len} bytes: {}",
            std::io::Error::last_os_error()
        );
        let ptr = std::ptr::NonNull::new(p.cast::<u8>()).expect("mmap returns a non-null address");
        AnonMap { ptr, len }
    }

    /// The mapping's first byte.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The mapping's bytes.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: `len` bytes mapped readable and writable until drop,
        // borrowed mutably with this value.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AnonMap {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, with its length; no borrow of
        // it outlives this value.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}
