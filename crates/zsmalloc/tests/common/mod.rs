//! What the zsmalloc integration tests share (a module of theirs, not a
//! test binary of its own): the random geometries their property tests
//! run on.

use proptest::prelude::*;
use zsmalloc::{ChainRule, ClassDelta, GeometryConfig};

/// Any geometry without a compression unit: pages of 4 to 64 KiB, zspages
/// of 1 to 16 pages, the kernel's class step or a fixed one of 8 to
/// `8 * max_steps` bytes, any chain rule, classes merged or not.
pub fn any_geometry(max_steps: u32) -> impl Strategy<Value = GeometryConfig> {
    (
        prop::sample::select(vec![4096u32, 8192, 16384, 32768, 65536]),
        1u32..=16,
        prop_oneof![
            Just(ClassDelta::Kernel),
            (1u32..=max_steps).prop_map(|k| ClassDelta::Fixed(k * 8))
        ],
        prop::sample::select(vec![
            ChainRule::MinWaste,
            ChainRule::UsedPercent,
            ChainRule::Balanced,
        ]),
        any::<bool>(),
    )
        .prop_map(
            |(page_size, chain, delta, chain_rule, merge)| GeometryConfig {
                page_size,
                chain,
                delta,
                chain_rule,
                merge,
                unit: 0,
            },
        )
}
