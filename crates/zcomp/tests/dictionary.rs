//! Dictionaries: a zstd dictionary trained on real pages round trips at
//! several levels, shrinks the pages it was trained for, and is required to
//! read them back (an error, not a panic, without it or with another one).
//! lz4-flex takes a raw-content dictionary the same way.

mod common;

use common::{real_pages, PAGE};
use zcomp::{Algorithm, Compressor, Dictionary, Error, Params};

fn text_pages() -> Vec<Vec<u8>> {
    // /usr/share comes second in real_pages: text, docs, data files.
    let pages = real_pages(256);
    let half = pages.len() / 2;
    pages[half..].to_vec()
}

fn trained(pages: &[Vec<u8>], size: usize) -> Dictionary {
    let bytes = zstd::dict::from_samples(pages, size).expect("training the dictionary");
    Dictionary::from_bytes(bytes).unwrap()
}

fn with_dict(algorithm: Algorithm, level: Option<i32>, dict: &Dictionary) -> Compressor {
    let params = Params {
        level,
        dict: Some(dict.clone()),
        window_bits: None,
    };
    Compressor::new(algorithm, &params).unwrap()
}

fn total(c: &Compressor, pages: &[Vec<u8>]) -> usize {
    let mut ctx = c.context().unwrap();
    let mut back = vec![0u8; PAGE];
    pages
        .iter()
        .map(|p| {
            let z = ctx.compress_buffered(p).unwrap().to_vec();
            ctx.decompress(&z, &mut back).unwrap();
            assert!(back == *p, "{c:?}");
            z.len()
        })
        .sum()
}

#[test]
fn zstd_dictionary_round_trips_and_helps() {
    let pages = text_pages();
    let dict = trained(&pages, 16 * 1024);
    for level in [-5, -1, 1, 3, 9, 19] {
        let plain = Compressor::new(
            Algorithm::Zstd,
            &Params {
                level: Some(level),
                ..Params::default()
            },
        )
        .unwrap();
        let with = with_dict(Algorithm::Zstd, Some(level), &dict);
        assert_eq!(with.dictionary(), Some(&dict));
        let (a, b) = (total(&plain, &pages), total(&with, &pages));
        assert!(
            b < a,
            "level {level}: {b} bytes with the dictionary, {a} without"
        );
    }
}

#[test]
fn zstd_data_needs_its_dictionary() {
    let pages = text_pages();
    let (first, second) = pages.split_at(pages.len() / 2);
    let dict = trained(first, 8 * 1024);
    let other = trained(second, 8 * 1024);
    let mut with = with_dict(Algorithm::Zstd, None, &dict).context().unwrap();
    let mut without = Compressor::with_defaults(Algorithm::Zstd)
        .context()
        .unwrap();
    let mut wrong = with_dict(Algorithm::Zstd, None, &other).context().unwrap();
    let mut out = vec![0u8; PAGE];
    for page in &pages {
        let z = with.compress_buffered(page).unwrap().to_vec();
        for ctx in [&mut without, &mut wrong] {
            let err = ctx.decompress(&z, &mut out).unwrap_err();
            assert!(
                matches!(&err, Error::Corrupt { detail, .. } if detail.contains("Dictionary mismatch")),
                "{err}"
            );
        }
        with.decompress(&z, &mut out).unwrap();
        assert!(out == *page);
    }
}

#[test]
fn dictionary_files_load_through_algorithm_params() {
    let pages = text_pages();
    let bytes = zstd::dict::from_samples(&pages, 4096).unwrap();
    let path = std::env::temp_dir().join(format!("zcomp-dict-{}.bin", std::process::id()));
    std::fs::write(&path, &bytes).unwrap();
    let c = Compressor::parse("zstd", &format!("level=2 dict={}", path.display())).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(c.dictionary().unwrap().bytes(), &bytes[..]);
    assert_eq!(c.level(), 2);
    total(&c, &pages);
}

#[test]
fn lz4_flex_dictionary_round_trips() {
    let pages = text_pages();
    // Raw content: the tail of a few pages (lz4 reads at most 64 KiB back).
    let raw: Vec<u8> = pages
        .iter()
        .step_by(7)
        .take(24)
        .flatten()
        .copied()
        .collect();
    assert!(raw.len() > 64 * 1024);
    let dict = Dictionary::from_bytes(raw).unwrap();
    let with = with_dict(Algorithm::Lz4Flex, None, &dict);
    let plain = Compressor::with_defaults(Algorithm::Lz4Flex);
    let (a, b) = (total(&plain, &pages), total(&with, &pages));
    assert!(b < a, "{b} bytes with the dictionary, {a} without");

    // Without the dictionary: an error, or the same page if it used none.
    let mut with = with.context().unwrap();
    let mut lz4 = Compressor::with_defaults(Algorithm::Lz4).context().unwrap();
    let mut out = vec![0u8; PAGE];
    let mut refused = 0;
    for page in &pages {
        let z = with.compress_buffered(page).unwrap().to_vec();
        match lz4.decompress(&z, &mut out) {
            Err(_) => refused += 1,
            Ok(_) => assert!(out == *page),
        }
    }
    assert!(refused > 0);
}
