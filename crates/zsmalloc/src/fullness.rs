//! Fullness groups: how zspages of a class are bucketed by how full they are.
//!
//! Allocation takes the first zspage of the fullest non-full group, and
//! compaction (later) moves objects from the emptiest groups into the fullest.
//! Two schemes are kept so the comparison that brought the kernel's 6.4
//! grouping (the fine-grained fullness series) can be re-run:
//! - [`FullnessScheme::InuseRatio`] (kernel 6.4 and later): 12 groups. Group 0
//!   is empty, 11 is full, and group `k` in 1..=10 holds zspages whose
//!   rounded-down use is `10(k-1)%..10k-1%` (exactly 10% is group 2).
//! - [`FullnessScheme::ThreeQuarters`] (before 6.4): empty, almost empty
//!   (use up to 3/4 of the objects), almost full, full.
//!
//! This module owns the group arithmetic and the allocation order only.

use serde::Serialize;

/// Most groups any scheme has; per-class arrays are this long.
pub const NR_GROUPS: usize = 12;

/// How zspages are grouped by fullness.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FullnessScheme {
    /// 12 in-use-ratio groups (kernel 6.4 and later).
    #[default]
    InuseRatio,
    /// 4 groups split at 3/4 of the objects in use (kernel before 6.4):
    /// empty, almost empty, almost full, full.
    ThreeQuarters,
}

const INUSE_RATIO_ALLOC_ORDER: [u8; 11] = [10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0];
// The old enum was EMPTY, ALMOST_EMPTY, ALMOST_FULL, FULL; allocation tried
// ALMOST_FULL, then ALMOST_EMPTY, then EMPTY.
const THREE_QUARTERS_ALLOC_ORDER: [u8; 3] = [2, 1, 0];

impl FullnessScheme {
    /// Number of groups of this scheme.
    pub fn groups(self) -> usize {
        match self {
            FullnessScheme::InuseRatio => 12,
            FullnessScheme::ThreeQuarters => 4,
        }
    }

    /// The group of a zspage with `inuse` of `objs` objects live.
    pub fn group(self, inuse: u32, objs: u32) -> u8 {
        debug_assert!(inuse <= objs && objs > 0);
        match self {
            FullnessScheme::InuseRatio => {
                if inuse == 0 {
                    0
                } else if inuse == objs {
                    11
                } else {
                    let ratio = 100 * u64::from(inuse) / u64::from(objs);
                    (ratio / 10 + 1) as u8
                }
            }
            FullnessScheme::ThreeQuarters => {
                if inuse == 0 {
                    0
                } else if inuse == objs {
                    3
                } else if inuse <= 3 * objs / 4 {
                    1
                } else {
                    2
                }
            }
        }
    }

    /// The group of full zspages.
    pub fn full_group(self) -> u8 {
        self.groups() as u8 - 1
    }

    /// Groups allocation looks in, fullest non-full first.
    pub fn alloc_order(self) -> &'static [u8] {
        match self {
            FullnessScheme::InuseRatio => &INUSE_RATIO_ALLOC_ORDER,
            FullnessScheme::ThreeQuarters => &THREE_QUARTERS_ALLOC_ORDER,
        }
    }

    /// Column labels of groups 1..groups (the kernel's debugfs `classes` file
    /// prints no column for the empty group).
    pub fn labels(self) -> &'static [&'static str] {
        match self {
            FullnessScheme::InuseRatio => &[
                "10%", "20%", "30%", "40%", "50%", "60%", "70%", "80%", "90%", "99%", "100%",
            ],
            FullnessScheme::ThreeQuarters => &["almost_empty", "almost_full", "full"],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inuse_ratio_groups_as_the_kernel() {
        let s = FullnessScheme::InuseRatio;
        assert_eq!(s.group(0, 127), 0);
        assert_eq!(s.group(1, 127), 1);
        assert_eq!(s.group(127, 127), 11);
        assert_eq!(s.group(126, 127), 10); // 99%
        assert_eq!(s.group(1, 10), 2); // exactly 10%
        assert_eq!(s.group(9, 10), 10); // 90%
        assert_eq!(s.group(5, 11), 5); // 45%
    }

    #[test]
    fn three_quarters_groups_split_at_three_quarters() {
        let s = FullnessScheme::ThreeQuarters;
        assert_eq!(s.group(0, 8), 0);
        assert_eq!(s.group(6, 8), 1);
        assert_eq!(s.group(7, 8), 2);
        assert_eq!(s.group(8, 8), 3);
        assert_eq!(s.group(3, 5), 1); // 3 <= 15/4 = 3
        assert_eq!(s.group(4, 5), 2);
    }
}
