//! Fuzzes the LZO crate: every input is compressed in both variants and
//! must decode to itself, and is decoded as a stream (into an output of a
//! size taken from its first two bytes), which may fail but never panic,
//! never claim more output than the buffer holds, and must give what the
//! checked decoder alone (no fast loop) gives: the same result and bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lzo::{compress_bound, decompress, decompress_checked, Compressor, Variant};

fuzz_target!(|data: &[u8]| {
    let mut c = Compressor::new();
    let mut z = vec![0u8; compress_bound(data.len())];
    let mut back = vec![0u8; data.len()];
    for variant in [Variant::Lzo, Variant::LzoRle] {
        let n = c
            .compress(variant, data, &mut z)
            .expect("bound-sized output");
        assert_eq!(decompress(&z[..n], &mut back), Ok(data.len()));
        assert!(back == data);
    }

    if data.len() >= 2 {
        let cap = usize::from(u16::from_le_bytes([data[0], data[1]])) % (64 * 1024 + 1);
        let mut out = vec![0u8; cap];
        let mut checked = vec![0u8; cap];
        let got = decompress(&data[2..], &mut out);
        assert_eq!(got, decompress_checked(&data[2..], &mut checked));
        if let Ok(n) = got {
            assert!(n <= cap);
            assert!(out[..n] == checked[..n]);
        }
    }
});
