//! Fuzzes the LZ4 crate: every input is compressed by the fast compressor
//! (at an acceleration from its first byte), by LZ4HC (at a level from its
//! second) and by both after a dictionary cut from the input's front, and
//! must decode to itself; and it is decoded as a block (into an output of
//! a size taken from its first two bytes, with and without a dictionary),
//! which may fail but never panic nor claim more output than the buffer
//! holds. The kernel test (crates/lz4/tests/kernel.rs) holds the same
//! kind of inputs against the kernel's own output.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lz4k::{
    compress_bound, decompress, decompress_with_dict, Compressor, Dict, HcCompressor, HcDict,
};

fuzz_target!(|data: &[u8]| {
    let (acc, level) = match data {
        [a, l, ..] => (1 + i32::from(*a % 16), 1 + i32::from(*l % 16)),
        _ => (1, 9),
    };
    let mut z = vec![0u8; compress_bound(data.len())];
    let mut back = vec![0u8; data.len()];
    let n = Compressor::new().compress_fast(data, &mut z, acc).expect("bound-sized output");
    assert_eq!(decompress(&z[..n], &mut back), Ok(data.len()));
    assert!(back == data);
    let n = HcCompressor::new().compress(data, &mut z, level).expect("bound-sized output");
    assert_eq!(decompress(&z[..n], &mut back), Ok(data.len()));
    assert!(back == data);

    let (dict, rest) = data.split_at(data.len() / 3);
    let mut back = vec![0u8; rest.len()];
    let fd = Dict::new(dict);
    let n = Compressor::new().compress_fast_dict(&fd, rest, &mut z, acc).expect("bound-sized output");
    assert_eq!(decompress_with_dict(&z[..n], &mut back, fd.bytes()), Ok(rest.len()));
    assert!(back == rest);
    let hd = HcDict::new(dict);
    let n = HcCompressor::new().compress_dict(&hd, rest, &mut z, level).expect("bound-sized output");
    assert_eq!(decompress_with_dict(&z[..n], &mut back, hd.bytes()), Ok(rest.len()));
    assert!(back == rest);

    if data.len() >= 2 {
        let cap = usize::from(u16::from_le_bytes([data[0], data[1]])) % (64 * 1024 + 1);
        let mut out = vec![0u8; cap];
        if let Ok(n) = decompress(&data[2..], &mut out) {
            assert!(n <= cap);
        }
        if let Ok(n) = decompress_with_dict(&data[2..], &mut out, dict) {
            assert!(n <= cap);
        }
    }
});
