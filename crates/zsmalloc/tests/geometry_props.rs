//! Property tests of the size-class geometry over random configurations.

mod common;

use proptest::prelude::*;
use zsmalloc::geometry::{MAX_ZSPAGE_PAGES, ZS_ALIGN, ZS_MIN_ALLOC_SIZE};
use zsmalloc::{Geometry, GeometryConfig};

fn any_config() -> impl Strategy<Value = GeometryConfig> {
    common::any_geometry(32)
}

/// A configuration with a compression unit from the page size to 64 KiB:
/// classes above a page are multi-page.
fn any_unit_config() -> impl Strategy<Value = GeometryConfig> {
    (any_config(), 0u32..=4).prop_map(|(mut c, shift)| {
        c.unit = (c.page_size << shift).min(65536);
        c
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(if cfg!(miri) { 2 } else { 200 }))]

    #[test]
    fn multi_page_classes_hold_their_objects(config in any_unit_config(), probes in prop::collection::vec(1u32..=65536, 64)) {
        let g = Geometry::new(config).unwrap();
        let (ps, unit) = (config.page_size, config.unit);
        prop_assert_eq!(g.unit(), unit);
        for c in g.classes() {
            let least = c.size.div_ceil(ps);
            // One object fits; a single-page class keeps the kernel's chain
            // bound, a multi-page one the zspage bound.
            prop_assert!(c.pages_per_zspage >= least);
            if least == 1 {
                prop_assert!(c.pages_per_zspage <= config.chain);
            } else {
                prop_assert!(c.pages_per_zspage <= (least * config.chain).clamp(least, MAX_ZSPAGE_PAGES));
            }
            prop_assert!(c.objs_per_zspage >= 1);
            prop_assert!(c.objs_per_zspage * c.size <= c.pages_per_zspage * ps);
            prop_assert!((c.objs_per_zspage + 1) * c.size > c.pages_per_zspage * ps);
            prop_assert_eq!(c.tail_waste, c.pages_per_zspage * ps - c.objs_per_zspage * c.size);
            // Huge: one object in a zspage as long as the unit, nothing saved.
            prop_assert_eq!(c.huge, c.objs_per_zspage == 1 && c.pages_per_zspage == unit / ps);
            prop_assert!(c.size <= unit);
        }
        prop_assert_eq!(g.classes().last().unwrap().size, unit);
        for size in probes.into_iter().map(|s| (s - 1) % unit + 1).chain([1, ps, ps + 1, unit - 1, unit]).filter(|&s| s <= unit) {
            let class = g.class_for(size).unwrap();
            prop_assert!(class.size >= size);
            if class.id > 0 {
                prop_assert!(g.classes()[class.id as usize - 1].size < size || size <= ZS_MIN_ALLOC_SIZE);
            }
        }
        prop_assert!(g.class_for(unit + 1).is_none());
        let hcs = g.huge_class_size();
        if hcs > 0 {
            for size in (hcs + 8..=unit).step_by(61) {
                prop_assert!(g.class_for(size).unwrap().huge, "size {} not huge", size);
            }
        }
    }

    #[test]
    fn a_unit_of_one_page_is_the_kernels_geometry(config in any_config()) {
        let plain = Geometry::new(config).unwrap();
        let unit = Geometry::new(GeometryConfig { unit: config.page_size, ..config }).unwrap();
        prop_assert_eq!(plain.classes(), unit.classes());
        prop_assert_eq!(plain.logical(), unit.logical());
        prop_assert_eq!(plain.huge_class_size(), unit.huge_class_size());
    }

    #[test]
    fn every_size_fits_its_class(config in any_config(), probes in prop::collection::vec(1u32..=65536, 64)) {
        let g = Geometry::new(config).unwrap();
        let ps = config.page_size;
        for size in probes.into_iter().map(|s| (s - 1) % ps + 1).chain([1, 31, 32, 33, ps - 1, ps]) {
            let class = g.class_for(size).unwrap();
            prop_assert!(class.size >= size, "size {} in class {}", size, class.size);
            prop_assert!(class.size % ZS_ALIGN == 0);
            // The class just below (if any) would not fit: no class is skipped.
            if class.id > 0 {
                let below = &g.classes()[class.id as usize - 1];
                prop_assert!(below.size < size || size <= ZS_MIN_ALLOC_SIZE);
            }
        }
        prop_assert!(g.class_for(0).is_none());
        prop_assert!(g.class_for(ps + 1).is_none());
    }

    #[test]
    fn zspages_hold_their_objects(config in any_config()) {
        let g = Geometry::new(config).unwrap();
        let ps = config.page_size;
        for c in g.classes() {
            prop_assert!(c.pages_per_zspage >= 1 && c.pages_per_zspage <= config.chain);
            prop_assert!(c.objs_per_zspage >= 1);
            prop_assert!(c.objs_per_zspage * c.size <= c.pages_per_zspage * ps);
            prop_assert!((c.objs_per_zspage + 1) * c.size > c.pages_per_zspage * ps);
            prop_assert_eq!(c.tail_waste, c.pages_per_zspage * ps - c.objs_per_zspage * c.size);
            prop_assert!(c.span < c.pages_per_zspage || c.pages_per_zspage == 1 && c.span == 0);
        }
    }

    #[test]
    fn merged_runs_are_contiguous(config in any_config()) {
        let g = Geometry::new(config).unwrap();
        let logical = g.logical();
        // Physical ids never decrease along the ladder and never skip.
        for w in logical.windows(2) {
            prop_assert!(w[1].class == w[0].class || w[1].class == w[0].class + 1);
        }
        prop_assert_eq!(logical[0].class, 0);
        prop_assert_eq!(logical.last().unwrap().class as usize, g.classes().len() - 1);
        for c in g.classes() {
            for i in c.first_index..=c.index {
                prop_assert_eq!(logical[i as usize].class, c.id);
            }
            // The class takes the size of its largest member.
            prop_assert_eq!(logical[c.index as usize].size, c.size);
            if !config.merge {
                prop_assert_eq!(c.first_index, c.index);
            }
        }
        // Neighbouring physical classes never share (pages, objs) when merging is on.
        if config.merge {
            for w in g.classes().windows(2) {
                prop_assert!((w[0].pages_per_zspage, w[0].objs_per_zspage) != (w[1].pages_per_zspage, w[1].objs_per_zspage));
            }
        }
    }

    #[test]
    fn huge_classes_are_one_page_one_object(config in any_config()) {
        let g = Geometry::new(config).unwrap();
        for c in g.classes() {
            prop_assert_eq!(c.huge, c.pages_per_zspage == 1 && c.objs_per_zspage == 1);
        }
        // Every stored size above huge_class_size + 7 is huge; the largest non-huge is not.
        let hcs = g.huge_class_size();
        prop_assert!(hcs > 0);
        let largest_non_huge = hcs + 7;
        prop_assert!(!g.class_for(largest_non_huge).unwrap().huge);
        for size in (largest_non_huge + 1)..=config.page_size {
            prop_assert!(g.class_for(size).unwrap().huge, "size {} not huge", size);
        }
    }
}
