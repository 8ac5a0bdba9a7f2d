//! zsmalloc in user space.
//!
//! zsmalloc stores many variable-size objects (compressed pages, mostly)
//! densely: objects of similar size share a *size class*, and each class packs
//! its objects back to back into *zspages*, chains of 1..=16 pages, so an
//! object may straddle two pages. Callers hold *handles*, not addresses, so
//! that compaction can move objects to free whole zspages.
//!
//! The crate is built bottom-up, one concept per module:
//! - [`geometry`]: the size-class table of a configuration (pure arithmetic).

#![warn(missing_docs)]

pub mod geometry;

pub use geometry::{
    ChainRule, ClassDelta, Geometry, GeometryConfig, GeometryError, LogicalClass, RequestRow,
    RequestSummary, SizeClass,
};
