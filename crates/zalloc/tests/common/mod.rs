//! The allocators under test and the helpers the suite shares (a module of
//! the integration tests, not a test binary of its own).
//!
//! The suite itself is `suite.rs` (model-based property test, round trips at
//! every size, threads, bad input, density) and `rss.rs` (the resident set
//! follows the pool; its own binary so nothing else allocates while it
//! measures). Every test runs against every [`SUBJECTS`] entry through
//! [`zpool::ZPool`] only. This module may not reach into any allocator:
//! it opens them with [`zalloc::open`] and nothing else.

// Each test binary uses a different part of this module.
#![allow(dead_code)]

use std::sync::Arc;

use zalloc::AllocOptions;
use zpool::{ZHandle, ZPool, ZPoolError};
use zsmalloc::Mode;

/// One allocator configuration the suite runs against.
#[derive(Clone, Copy, Debug)]
pub struct Subject {
    /// Label in failure messages.
    pub label: &'static str,
    /// Name for [`zalloc::open`].
    pub name: &'static str,
    /// zsmalloc's mode (ignored by the others).
    pub mode: Mode,
    /// Most objects one page can hold (`None`: no such bound).
    pub max_per_page: Option<u64>,
}

/// Every allocator, zsmalloc in both modes.
pub const SUBJECTS: [Subject; 5] = [
    Subject {
        label: "zsmalloc-default",
        name: "zsmalloc",
        mode: Mode::Default,
        max_per_page: None,
    },
    Subject {
        label: "zsmalloc-kernel-compat",
        name: "zsmalloc",
        mode: Mode::KernelCompat,
        max_per_page: None,
    },
    Subject {
        label: "zbud",
        name: "zbud",
        mode: Mode::Default,
        max_per_page: Some(2),
    },
    Subject {
        label: "z3fold",
        name: "z3fold",
        mode: Mode::Default,
        max_per_page: Some(3),
    },
    Subject {
        label: "zblock",
        name: "zblock",
        mode: Mode::Default,
        max_per_page: None,
    },
];

impl Subject {
    /// A fresh allocator on pages of `page_size` bytes.
    pub fn open(&self, page_size: usize) -> Arc<dyn ZPool> {
        let opts = AllocOptions {
            page_size,
            mode: self.mode,
            ..AllocOptions::default()
        };
        zalloc::open(self.name, &opts)
            .unwrap_or_else(|e| panic!("{}: cannot open: {e}", self.label))
    }

    /// Checks the allocator's bookkeeping and its density bound.
    pub fn check(&self, pool: &dyn ZPool) -> Result<(), String> {
        pool.check_invariants()
            .map_err(|e| format!("{}: {e}", self.label))?;
        let s = pool.stats();
        if s.total_pages != pool.total_pages() as u64 {
            return Err(format!("{}: stats and total_pages disagree", self.label));
        }
        if let Some(max) = self.max_per_page {
            if s.objects > max * s.total_pages {
                return Err(format!(
                    "{}: {} objects in {} pages, above {max} a page",
                    self.label, s.objects, s.total_pages
                ));
            }
        }
        Ok(())
    }
}

/// Reads an object's first `len` bytes into a vector.
pub fn read_vec(pool: &dyn ZPool, h: zpool::ZHandle, len: usize) -> Vec<u8> {
    let mut buf = vec![0; len];
    zpool::read_into(pool, h, &mut buf).expect("read of a live object");
    buf
}

/// Checks that `pool`'s largest object is `max` bytes and that one byte
/// more is refused as too large.
pub fn assert_too_large(pool: &dyn ZPool, max: usize) {
    assert_eq!(pool.max_object_size(), max);
    assert_eq!(
        pool.malloc(max + 1),
        Err(ZPoolError::TooLarge { len: max + 1, max })
    );
}

/// The refusals of a handle, as every allocator here words them.
pub const FOREIGN: ZPoolError = ZPoolError::InvalidHandle("not a handle of this pool");
/// A handle whose object was freed.
pub const FREED: ZPoolError = ZPoolError::InvalidHandle("the object was freed");
/// A handle whose slot holds another object now.
pub const STALE: ZPoolError = ZPoolError::InvalidHandle("stale: its slot holds another object");

/// Checks how `pool` refuses its handle `h` (live, 100 bytes or more):
/// `other`, another pool, refuses it as foreign; freed, it is refused as
/// freed; once a new object may have its slot, writing through it is
/// refused as stale. Returns that new object's handle, still live.
pub fn assert_handle_refusals(pool: &dyn ZPool, other: &dyn ZPool, h: ZHandle) -> ZHandle {
    assert_eq!(other.free(h).unwrap_err(), FOREIGN);
    pool.free(h).unwrap();
    assert_eq!(pool.free(h).unwrap_err(), FREED);
    let h2 = pool.malloc(100).unwrap();
    assert_ne!(h, h2, "the generation changed");
    assert_eq!(pool.write(h, b"x").unwrap_err(), STALE);
    h2
}
