//! Algorithm names and what each algorithm accepts.
//!
//! This module owns the list of algorithms, their names as zram's
//! `comp_algorithm` spells them, and each one's capabilities: the range and
//! default of `level`, whether it takes a dictionary and a deflate window.
//! The defaults are zram's (`level` unset): lz4 acceleration 1, lz4hc 9, zstd
//! zstd's default 3, deflate zlib's default 6, deflate window 2^11; lzo and
//! lzo-rle have no level (only 1 is accepted). It does
//! not validate parameter strings (see [`crate::params`]) and holds no backend
//! state (see the private `backend` module). Its one error,
//! [`UnknownAlgorithm`], is its own: the crate's [`crate::Error`] is built
//! on top of this module, never the other way round.

use std::fmt;
use std::ops::RangeInclusive;
use std::str::FromStr;

/// A compression algorithm, named as zram names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// `lzo-rle`: LZO1X-1 with zero runs, zram's default, through the
    /// `zmem-lzo` crate (the kernel's output, byte for byte).
    LzoRle,
    /// `lzo`: plain LZO1X-1 through the `zmem-lzo` crate. Its data and
    /// lzo-rle's are read by either.
    Lzo,
    /// `lz4`: liblz4 1.10 through the `lz4` crate's block API, or (in
    /// kernel-compat mode and with a dictionary) zmem-lz4, the kernel's
    /// lib/lz4 byte for byte; `level` is the acceleration factor, as in zram.
    Lz4,
    /// `lz4hc`: liblz4's high-compression mode, or zmem-lz4's port of the
    /// kernel's; `level` 1..=16 (liblz4 runs levels above 12 as 12).
    Lz4Hc,
    /// `zstd`: libzstd 1.5.7 through the `zstd` crate; `level` may be
    /// negative; an optional dictionary.
    Zstd,
    /// `deflate`: raw deflate (no zlib header) through `flate2` on `zlib-rs`,
    /// or (in kernel-compat mode) the C zlib, whose output is the kernel's;
    /// `level` 0..=9 and a window of 2^9..2^15 bytes.
    Deflate,
    /// `lz4-flex`: the pure-Rust `lz4_flex` block codec. Its output is plain
    /// lz4 block data: [`Algorithm::Lz4`] decompresses it and vice versa.
    Lz4Flex,
}

/// Default deflate window, in bits (zram's `DEFLATE_DEF_WINBITS`).
pub const DEFLATE_DEFAULT_WINBITS: u8 = 11;
/// Smallest deflate window the backend accepts, in bits.
pub const DEFLATE_MIN_WINBITS: u8 = 9;
/// Largest deflate window, in bits.
pub const DEFLATE_MAX_WINBITS: u8 = 15;

impl Algorithm {
    /// Every algorithm, in zram's listing order (lzo-rle, lzo, lz4, lz4hc,
    /// zstd, deflate), then ours.
    pub const ALL: [Algorithm; 7] = [
        Algorithm::LzoRle,
        Algorithm::Lzo,
        Algorithm::Lz4,
        Algorithm::Lz4Hc,
        Algorithm::Zstd,
        Algorithm::Deflate,
        Algorithm::Lz4Flex,
    ];

    /// The name zram's `comp_algorithm` uses.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Lz4 => "lz4",
            Algorithm::Lz4Hc => "lz4hc",
            Algorithm::Zstd => "zstd",
            Algorithm::Deflate => "deflate",
            Algorithm::Lz4Flex => "lz4-flex",
            Algorithm::LzoRle => "lzo-rle",
            Algorithm::Lzo => "lzo",
        }
    }

    /// Looks an algorithm up by name (exact, as zram's `sysfs_streq`,
    /// ignoring one trailing newline as sysfs writes have).
    pub fn from_name(name: &str) -> Result<Algorithm, UnknownAlgorithm> {
        let trimmed = name.strip_suffix('\n').unwrap_or(name);
        Algorithm::ALL
            .into_iter()
            .find(|a| a.name() == trimmed)
            .ok_or_else(|| UnknownAlgorithm(trimmed.to_string()))
    }

    /// The `level` values accepted.
    pub fn level_range(self) -> RangeInclusive<i32> {
        match self {
            // LZ4_ACCELERATION_MAX: liblz4 clamps anything above.
            Algorithm::Lz4 => 1..=65537,
            // lz4_flex has no acceleration setting, LZO1X-1 no level.
            Algorithm::Lz4Flex | Algorithm::LzoRle | Algorithm::Lzo => 1..=1,
            // LZ4HC_MAX_CLEVEL of the kernel (liblz4's is 12).
            Algorithm::Lz4Hc => 1..=16,
            // ZSTD_minCLevel()..=ZSTD_maxCLevel(); 0 means zstd's default.
            Algorithm::Zstd => -(1 << 17)..=22,
            // -1 is zlib's Z_DEFAULT_COMPRESSION (6); 0 stores.
            Algorithm::Deflate => -1..=9,
        }
    }

    /// The `level` used when none is given (zram's defaults).
    pub fn default_level(self) -> i32 {
        match self {
            Algorithm::Lz4 | Algorithm::Lz4Flex | Algorithm::LzoRle | Algorithm::Lzo => 1,
            Algorithm::Lz4Hc => 9,
            Algorithm::Zstd => 3,
            Algorithm::Deflate => 6,
        }
    }

    /// Whether `dict=` is accepted: zstd, lz4 and lz4hc (as in the kernel,
    /// lz4 and lz4hc through zmem-lz4: liblz4's dictionary calls are not in
    /// the `lz4` crate's block API), and lz4-flex.
    pub fn supports_dictionary(self) -> bool {
        matches!(
            self,
            Algorithm::Zstd | Algorithm::Lz4 | Algorithm::Lz4Hc | Algorithm::Lz4Flex
        )
    }

    /// Whether `deflate.winbits=` is accepted (deflate only).
    pub fn supports_window_bits(self) -> bool {
        self == Algorithm::Deflate
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is no algorithm of this crate (the name as given, without a
/// trailing newline). Its message lists every known name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownAlgorithm(pub String);

impl fmt::Display for UnknownAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown compression algorithm '{}': use one of ", self.0)?;
        for (i, a) in Algorithm::ALL.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(a.name())?;
        }
        Ok(())
    }
}

impl std::error::Error for UnknownAlgorithm {}

impl FromStr for Algorithm {
    type Err = UnknownAlgorithm;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Algorithm::from_name(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for a in Algorithm::ALL {
            assert_eq!(Algorithm::from_name(a.name()), Ok(a));
            assert_eq!(a.to_string().parse::<Algorithm>(), Ok(a));
        }
        assert_eq!(Algorithm::from_name("zstd\n"), Ok(Algorithm::Zstd));
    }

    #[test]
    fn unknown_names_are_errors() {
        for name in ["", "LZ4", "lzo_rle", "lz4 ", "zstd\n\n", "842"] {
            let err = Algorithm::from_name(name).unwrap_err();
            assert_eq!(err.0, name.strip_suffix('\n').unwrap_or(name), "{name:?}");
            assert!(err
                .to_string()
                .contains("lzo-rle, lzo, lz4, lz4hc, zstd, deflate, lz4-flex"));
        }
    }

    #[test]
    fn defaults_are_in_range() {
        for a in Algorithm::ALL {
            assert!(a.level_range().contains(&a.default_level()), "{a}");
        }
    }

    #[test]
    fn zstd_range_matches_the_library() {
        let range = Algorithm::Zstd.level_range();
        assert_eq!(*range.start(), zstd::zstd_safe::min_c_level());
        assert_eq!(*range.end(), zstd::zstd_safe::max_c_level());
        assert_eq!(
            Algorithm::Zstd.default_level(),
            zstd::DEFAULT_COMPRESSION_LEVEL
        );
    }
}
