//! Compression ratio and single-thread speed of every backend on files,
//! cut into 4 KiB pages as zram sees them, each page round-tripped.
//!
//! Usage: cargo run --release -p zmem-zcomp --example ratios -- FILE... \
//!        [--algo "zstd level=1"]...
//! Without --algo it runs lz4, lz4-flex, lz4hc, zstd at -1/1/3 and deflate.
//! All settings run in one process on the same pages, so their numbers
//! compare; absolute MB/s depend on the machine.

use std::time::Instant;

use zcomp::Compressor;

const PAGE: usize = 4096;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut files = Vec::new();
    let mut specs = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--algo" {
            specs.push(args.next().ok_or("--algo needs a value")?);
        } else {
            files.push(arg);
        }
    }
    if files.is_empty() {
        return Err("usage: ratios FILE... [--algo \"NAME key=value...\"]...".into());
    }
    if specs.is_empty() {
        specs = [
            "lz4",
            "lz4-flex",
            "lz4hc",
            "zstd level=-1",
            "zstd level=1",
            "zstd",
            "deflate",
        ]
        .map(String::from)
        .to_vec();
    }
    println!(
        "{:<10} {:<24} {:>8} {:>11} {:>11} {:>9}",
        "file", "algorithm", "ratio", "comp MB/s", "decomp MB/s", "huge"
    );
    for file in &files {
        let data = std::fs::read(file)?;
        let pages: Vec<&[u8]> = data.chunks_exact(PAGE).collect();
        let name = std::path::Path::new(file)
            .file_name()
            .map_or(file.clone(), |n| n.to_string_lossy().into_owned());
        for spec in &specs {
            let (algo, params) = spec.split_once(' ').unwrap_or((spec, ""));
            let c = Compressor::parse(algo, params)?;
            let mut ctx = c.context()?;
            let mut compressed: Vec<Vec<u8>> = Vec::with_capacity(pages.len());
            let t = Instant::now();
            for page in &pages {
                compressed.push(ctx.compress_buffered(page)?.to_vec());
            }
            let comp = t.elapsed().as_secs_f64();
            let mut back = vec![0u8; PAGE];
            let t = Instant::now();
            for (page, z) in pages.iter().zip(&compressed) {
                ctx.decompress(z, &mut back)?;
                if back != *page {
                    return Err(format!("{spec}: round trip changed a page").into());
                }
            }
            let decomp = t.elapsed().as_secs_f64();
            let total: usize = compressed.iter().map(Vec::len).sum();
            // zram stores pages of 3/4 of a page or more uncompressed.
            let huge = compressed
                .iter()
                .filter(|z| z.len() >= PAGE * 3 / 4)
                .count();
            let mb = (pages.len() * PAGE) as f64 / 1e6;
            println!(
                "{:<10} {:<24} {:>8.3} {:>11.0} {:>11.0} {:>9}",
                name,
                spec,
                (pages.len() * PAGE) as f64 / total as f64,
                mb / comp,
                mb / decomp,
                huge
            );
        }
    }
    Ok(())
}
