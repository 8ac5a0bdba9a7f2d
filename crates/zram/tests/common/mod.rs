//! Helpers the writeback and policy tests share: a kernel-compat lz4
//! store and a sparse backing file of a given size. They touch nothing
//! but the temporary directory.

use std::path::PathBuf;
use std::sync::Arc;

use zram::Store;
use zsmalloc::{Pool, PoolConfig};

/// The size of a page and of a backing block.
pub const PAGE: usize = 4096;

/// A store of `pages` pages on a kernel-compat pool, compressing with lz4.
pub fn store(pages: u64) -> Store {
    let pool = Arc::new(Pool::new(PoolConfig::kernel_compat()).expect("pool"));
    Store::new(
        pool,
        zcomp::Compressor::parse("lz4", "").expect("lz4"),
        pages,
    )
    .expect("store")
}

/// A backing file of `blocks` pages, `name` in this test binary's own
/// directory (`suite` and the process id name it).
pub fn backing_file(suite: &str, name: &str, blocks: u64) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("zram-{suite}-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(name);
    let f = std::fs::File::create(&path).expect("backing file");
    f.set_len(blocks * PAGE as u64).expect("size");
    path
}
