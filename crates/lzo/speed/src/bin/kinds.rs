//! Counts the instructions of zmem-lzo's lzo-rle streams by kind, with the
//! bytes each kind writes: the first MIB (default 64) MiB of FILE, page by
//! page (4 KiB), as the speed tool compresses them. It says which
//! instructions the decoder's fast loop takes on its table path (a literal
//! run of 4 to 18 bytes, an M2 match, an M3 match of 3 to 33 bytes, from 8
//! or more back) and which it leaves to its branches, and so where a
//! corpus's decoding time can go. Run:
//!
//! ```sh
//! cargo run --release --manifest-path crates/lzo/speed/Cargo.toml --bin kinds -- 64 FILE
//! ```
//!
//! This program owns only the counting; it is not part of zmem. It walks
//! streams it has just made (and checks that each decodes to its page), so
//! it trusts their framing and does no error handling of its own.

use std::collections::BTreeMap;

const PAGE: usize = 4096;

/// Instructions and output bytes of one kind.
#[derive(Default)]
struct Tally {
    count: u64,
    bytes: u64,
}

/// A length's bucket, for the kinds whose length varies widely.
fn bucket(n: usize) -> &'static str {
    match n {
        0..=32 => "<= 32",
        33..=64 => "33-64",
        65..=128 => "65-128",
        _ => "> 128",
    }
}

/// A long length from `ip`: zero bytes each adding 255, then a nonzero byte,
/// all added to `base`; the length and the position after it.
fn long_length(s: &[u8], mut ip: usize, base: usize) -> (usize, usize) {
    let mut n = base;
    while s[ip] == 0 {
        n += 255;
        ip += 1;
    }
    (n + usize::from(s[ip]), ip + 1)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (mib, path) = match (args.next(), args.next()) {
        (Some(m), Some(p)) => (m.parse::<usize>().expect("MIB is a number"), p),
        (Some(p), None) => (64, p),
        _ => {
            eprintln!("usage: kinds [MIB] FILE");
            std::process::exit(2);
        }
    };
    let data = std::fs::read(&path).expect("read FILE");
    let data = &data[..data.len().min(mib << 20) / PAGE * PAGE];
    let mut compressor = lzo::Compressor::new();
    let mut buf = vec![0u8; lzo::compress_bound(PAGE)];
    let mut back = vec![0u8; PAGE];
    let mut kinds: BTreeMap<String, Tally> = BTreeMap::new();
    let mut add = |kind: String, bytes: usize| {
        let t = kinds.entry(kind).or_default();
        t.count += 1;
        t.bytes += bytes as u64;
    };
    let (mut total, mut table_path, mut table_bytes) = (0u64, 0u64, 0u64);
    for page in data.chunks_exact(PAGE) {
        let n = compressor
            .compress(lzo::Variant::LzoRle, page, &mut buf)
            .expect("room");
        let s = &buf[..n];
        assert_eq!(lzo::decompress(s, &mut back), Ok(PAGE));
        assert_eq!(&back[..], page);
        let (mut ip, mut op) = (0, 0);
        if n >= 5 && s[0] == 0x11 {
            ip = 2;
        }
        let mut state;
        if s[ip] > 17 {
            let l = usize::from(s[ip] - 17);
            add("first literal run".into(), l);
            ip += 1 + l;
            op += l;
            state = l.min(4);
        } else {
            state = 0;
        }
        loop {
            let t = usize::from(s[ip]);
            let next;
            // (kind, bytes, on the table path)
            let (kind, len, fast) = if t >= 64 {
                let dist = 1 + ((t >> 2) & 7) + (usize::from(s[ip + 1]) << 3);
                let len = (t >> 5) + 1;
                next = t & 3;
                ip += 2;
                if dist >= 8 {
                    ("M2 match, from 8+ back".to_string(), len, true)
                } else {
                    ("M2 match, from 1-7 back".to_string(), len, false)
                }
            } else if t >= 32 {
                let (len, at) = if t & 31 == 0 {
                    long_length(s, ip + 1, 33)
                } else {
                    ((t & 31) + 2, ip + 1)
                };
                let dd = usize::from(s[at]) | usize::from(s[at + 1]) << 8;
                ip = at + 2;
                next = dd & 3;
                let near = if 1 + (dd >> 2) < 8 { "1-7" } else { "8+" };
                if t & 31 == 0 {
                    (
                        format!("M3 match > 33, {}, from {near} back", bucket(len)),
                        len,
                        false,
                    )
                } else {
                    (
                        format!("M3 match 3-33, from {near} back"),
                        len,
                        near == "8+",
                    )
                }
            } else if t >= 16 {
                let dd = usize::from(s[ip + 1]) | usize::from(s[ip + 2]) << 8;
                if t & 0xf8 == 0x18 && dd & 0xfffc == 0xfffc {
                    let len = ((t & 7) | usize::from(s[ip + 3]) << 3) + 4;
                    ip += 4;
                    next = dd & 3;
                    (format!("zero run, {}", bucket(len)), len, false)
                } else {
                    let (len, at) = if t & 7 == 0 {
                        long_length(s, ip + 1, 9)
                    } else {
                        ((t & 7) + 2, ip + 1)
                    };
                    let dd = usize::from(s[at]) | usize::from(s[at + 1]) << 8;
                    ip = at + 2;
                    if ((t & 8) << 11) + (dd >> 2) == 0 {
                        break;
                    }
                    next = dd & 3;
                    ("M4 match".to_string(), len, false)
                }
            } else if state == 0 {
                let (len, at) = if t == 0 {
                    long_length(s, ip + 1, 18)
                } else {
                    (t + 3, ip + 1)
                };
                let kind = if t == 0 {
                    format!("literal run > 18, {}", bucket(len))
                } else {
                    "literal run 4-18".to_string()
                };
                total += 1;
                if t != 0 {
                    table_path += 1;
                    table_bytes += len as u64;
                }
                add(kind, len);
                ip = at + len;
                op += len;
                state = 4;
                continue;
            } else {
                next = t & 3;
                ip += 2;
                let len = if state == 4 { 3 } else { 2 };
                ("M1 match".to_string(), len, false)
            };
            total += 1;
            if fast {
                table_path += 1;
                table_bytes += len as u64;
            }
            add(kind, len);
            op += len;
            if next > 0 {
                add("(state literals after a match)".into(), next);
            }
            ip += next;
            op += next;
            state = next;
        }
        assert_eq!((ip, op), (n, PAGE));
    }
    let all = data.len() as f64;
    println!(
        "{path}: {} pages, {total} instructions, {:.1} bytes each",
        data.len() / PAGE,
        all / total as f64
    );
    println!(
        "{:44} {:>9} {:>7} {:>11} {:>7} {:>7}",
        "kind", "count", "% instr", "bytes", "% bytes", "average"
    );
    for (kind, t) in &kinds {
        println!(
            "{kind:44} {:9} {:6.2}% {:11} {:6.2}% {:7.1}",
            t.count,
            t.count as f64 * 100.0 / total as f64,
            t.bytes,
            t.bytes as f64 * 100.0 / all,
            t.bytes as f64 / t.count as f64
        );
    }
    println!(
        "{:44} {table_path:9} {:6.2}% {table_bytes:11} {:6.2}%",
        "on the fast loop's table path",
        table_path as f64 * 100.0 / total as f64,
        table_bytes as f64 * 100.0 / all
    );
}
