//! lz4 and lz4hc as kernel-compat mode runs them (zmem-lz4, the kernel's
//! lib/lz4 byte for byte) beside default mode's liblz4: the same pages give
//! zmem-lz4's own bytes, each implementation reads the other's data, and
//! dictionaries (which only zmem-lz4 takes) round trip, shrink the pages
//! they hold and are refused at the sizes zram refuses.

mod common;

use common::{real_pages, PAGE};
use zcomp::{Algorithm, Compressor, Dictionary, Encoder, Error, Params};

fn with_dict(algorithm: Algorithm, level: Option<i32>, dict: &[u8]) -> zcomp::Result<Compressor> {
    let params = Params {
        level,
        dict: Some(Dictionary::from_bytes(dict.to_vec())?),
        window_bits: None,
    };
    Compressor::new(algorithm, &params)
}

#[test]
fn kernel_compat_is_zmem_lz4_and_reads_liblz4() {
    let pages = real_pages(128);
    let mut fast = lz4k::Compressor::new();
    let mut hc = lz4k::HcCompressor::new();
    for (name, params, level) in [
        ("lz4", "", 1),
        ("lz4", "level=3", 3),
        ("lz4hc", "", 9),
        ("lz4hc", "level=16", 16),
    ] {
        let lib = Compressor::parse(name, params).unwrap();
        assert_eq!(lib.encoder(), Encoder::Fastest);
        assert_eq!(lib.implementation(), "liblz4 1.10");
        let kernel = lib.kernel_compat();
        assert_eq!(kernel.encoder(), Encoder::Kernel);
        assert_eq!(kernel.implementation(), "zmem-lz4");
        assert_eq!(kernel.level(), level);
        let (mut lc, mut kc) = (lib.context().unwrap(), kernel.context().unwrap());
        let mut direct = vec![0u8; lz4k::compress_bound(PAGE)];
        let mut back = vec![0u8; PAGE];
        for p in &pages {
            let k = kc.compress_buffered(p).unwrap().to_vec();
            let n = if name == "lz4" {
                fast.compress_fast(p, &mut direct, level).unwrap()
            } else {
                hc.compress(p, &mut direct, level).unwrap()
            };
            assert_eq!(k, direct[..n], "{name} {params}");
            let l = lc.compress_buffered(p).unwrap().to_vec();
            assert_eq!(lc.decompress(&k, &mut back).unwrap(), PAGE);
            assert!(back == *p);
            assert_eq!(kc.decompress(&l, &mut back).unwrap(), PAGE);
            assert!(back == *p);
        }
    }
    // The other algorithms have one implementation.
    let zstd = Compressor::parse("zstd", "").unwrap();
    assert_eq!(zstd.kernel_compat().implementation(), "libzstd 1.5.7");
}

#[test]
fn lz4_dictionaries_round_trip_and_help() {
    let pages = real_pages(64);
    let dict = testkit::every_other_page(&pages, 64 * 1024);
    let (fd, hd) = (lz4k::Dict::new(&dict), lz4k::HcDict::new(&dict));
    let mut fast = lz4k::Compressor::new();
    let mut hc = lz4k::HcCompressor::new();
    for algorithm in [Algorithm::Lz4, Algorithm::Lz4Hc] {
        let plain = Compressor::new(algorithm, &Params::default())
            .unwrap()
            .kernel_compat();
        let with = with_dict(algorithm, None, &dict).unwrap();
        // A dictionary always runs zmem-lz4, in either mode.
        assert_eq!(with.encoder(), Encoder::Kernel);
        assert_eq!(
            with.with_encoder(Encoder::Fastest).encoder(),
            Encoder::Kernel
        );
        let (mut pc, mut wc) = (plain.context().unwrap(), with.context().unwrap());
        let (mut a, mut b, mut need_dict) = (0, 0, 0);
        let mut back = vec![0u8; PAGE];
        for p in &pages {
            a += pc.compress_buffered(p).unwrap().len();
            let z = wc.compress_buffered(p).unwrap().to_vec();
            b += z.len();
            // zmem-lz4's bytes: zram's dictionary path of the kernel.
            let mut direct = vec![0u8; lz4k::compress_bound(PAGE)];
            let n = if algorithm == Algorithm::Lz4 {
                fast.compress_fast_dict(&fd, p, &mut direct, 1).unwrap()
            } else {
                hc.compress_dict(&hd, p, &mut direct, 9).unwrap()
            };
            assert_eq!(z, direct[..n], "{algorithm}");
            assert_eq!(wc.decompress(&z, &mut back).unwrap(), PAGE);
            assert!(back == *p);
            assert_eq!(
                with.decompress_stateless(&z, &mut back).unwrap().unwrap(),
                PAGE
            );
            // Without the dictionary, pages that use it do not read back.
            if pc.decompress(&z, &mut back).is_err() || back != *p {
                need_dict += 1;
            }
        }
        assert!(
            need_dict > pages.len() / 8,
            "{algorithm}: {need_dict} pages use the dictionary"
        );
        // A quarter of the pages are in the dictionary.
        assert!(
            b < a * 9 / 10,
            "{algorithm}: {b} with the dictionary, {a} without"
        );
    }
}

#[test]
fn lz4_dictionary_sizes_zram_refuses() {
    let big = vec![7u8; 70_000];
    for (algorithm, len, ok) in [
        (Algorithm::Lz4, 7, false),
        (Algorithm::Lz4, 8, true),
        (Algorithm::Lz4, 65_536, true),
        (Algorithm::Lz4, 65_537, false),
        (Algorithm::Lz4Hc, 1, true),
        (Algorithm::Lz4Hc, 65_536, true),
        (Algorithm::Lz4Hc, 65_537, false),
    ] {
        let got = with_dict(algorithm, None, &big[..len]);
        match (got, ok) {
            (Ok(_), true) => {}
            (Err(Error::Dictionary { reason, .. }), false) => {
                assert!(reason.contains("64 KiB"), "{reason}");
            }
            (got, _) => panic!("{algorithm} with {len} bytes: {got:?}"),
        }
    }
}
