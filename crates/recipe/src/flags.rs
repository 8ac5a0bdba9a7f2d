//! Value parsers for numeric flags: whole numbers, sizes and real numbers,
//! each within a range, whose error names the range.
//!
//! Every numeric flag of every subcommand takes one of these (or
//! [`crate::spec::parse_page_size`]), so zero, negative, overflowing,
//! non-numeric and out-of-range values are refused while the arguments are
//! parsed, with one line that clap prefixes with the flag's name, e.g.
//! `error: invalid value '17' for '--chain <CHAIN>': 17 is not a whole
//! number from 1 to 16`. This module only parses text; it knows nothing of
//! what the numbers mean.

use std::fmt::Display;

use crate::size;

/// The accepted range of a whole number, in words.
fn range_words(lo: u64, hi: u64) -> String {
    if hi == u64::MAX {
        format!("a whole number of at least {lo}")
    } else {
        format!("a whole number from {lo} to {hi}")
    }
}

/// A parser of whole numbers in `lo..=hi` (decimal digits only: no sign,
/// no suffix), of any unsigned type `lo` and `hi` convert from.
pub fn whole<T>(lo: T, hi: T) -> impl Fn(&str) -> Result<T, String> + Clone + Send + Sync + 'static
where
    T: Into<u64> + TryFrom<u64> + Copy + Send + Sync + 'static,
{
    let (lo64, hi64) = (lo.into(), hi.into());
    move |s: &str| {
        let t = s.trim();
        let n = if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
            t.parse::<u64>().ok()
        } else {
            None
        };
        match n {
            Some(n) if (lo64..=hi64).contains(&n) => {
                T::try_from(n).map_err(|_| format!("'{s}' is not {}", range_words(lo64, hi64)))
            }
            _ => Err(format!("'{s}' is not {}", range_words(lo64, hi64))),
        }
    }
}

/// A parser of whole `usize` numbers in `lo..=hi`.
pub fn whole_usize(
    lo: usize,
    hi: usize,
) -> impl Fn(&str) -> Result<usize, String> + Clone + Send + Sync + 'static {
    let inner = whole::<u64>(lo as u64, hi as u64);
    move |s: &str| inner(s).map(|n| n as usize)
}

/// A parser of sizes in bytes ([`crate::size::parse`]: digits with an
/// optional K, M, G, T, P or E suffix, powers of 1024) in `lo..=hi`.
pub fn size(
    lo: u64,
    hi: u64,
) -> impl Fn(&str) -> Result<u64, String> + Clone + Send + Sync + 'static {
    move |s: &str| in_range(s, size::parse(s), lo, hi)
}

/// `parsed`, the size `s` gave, if in `lo..=hi`; else its refusal: the
/// size parser's own words for no size, as every other size is refused
/// with, and one wording for a size out of range.
fn in_range(
    s: &str,
    parsed: Result<u64, size::SizeError>,
    lo: u64,
    hi: u64,
) -> Result<u64, String> {
    match parsed {
        Ok(n) if (lo..=hi).contains(&n) => Ok(n),
        Ok(_) => Err(out_of_range(s, lo, hi)),
        Err(e) if e.too_large => Err(out_of_range(s, lo, hi)),
        Err(e) => Err(e.to_string()),
    }
}

/// The refusal of a size that parses but is not in `lo..=hi`.
fn out_of_range(s: &str, lo: u64, hi: u64) -> String {
    format!(
        "'{}' is out of range (a size from {} to {})",
        s.trim(),
        size::words(lo),
        size::words(hi)
    )
}

/// A parser of disk sizes: a size as [`size()`] reads it, rounded up to
/// whole 4 KiB pages first ([`crate::size::round_up_to_page`]), as zram
/// rounds what is written to `disksize` (`1000` gives 4096), then kept to
/// `lo..=hi`.
pub fn disk_size(
    lo: u64,
    hi: u64,
) -> impl Fn(&str) -> Result<u64, String> + Clone + Send + Sync + 'static {
    move |s: &str| {
        let rounded = size::parse(s).and_then(|n| {
            size::round_up_to_page(n, size::PAGE_SIZE).ok_or(size::SizeError {
                text: s.trim().to_string(),
                too_large: true,
            })
        });
        in_range(s, rounded, lo, hi)
    }
}

/// A parser of real numbers in `lo..=hi` (finite; `lo` itself excluded
/// when `open_low`).
pub fn real(
    lo: f64,
    hi: f64,
    open_low: bool,
) -> impl Fn(&str) -> Result<f64, String> + Clone + Send + Sync + 'static {
    move |s: &str| {
        let accepted = if open_low {
            format!("a number above {} and at most {}", Num(lo), Num(hi))
        } else {
            format!("a number from {} to {}", Num(lo), Num(hi))
        };
        match s.trim().parse::<f64>() {
            Ok(x) if x.is_finite() && x <= hi && (x > lo || (!open_low && x == lo)) => Ok(x),
            _ => Err(format!("'{s}' is not {accepted}")),
        }
    }
}

/// A number printed without a trailing `.0`.
struct Num(f64);

impl Display for Num {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0.fract() == 0.0 && self.0.abs() < 1e15 {
            write!(f, "{}", self.0 as i64)
        } else {
            write!(f, "{}", self.0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_numbers_keep_to_their_range() {
        let chain = whole::<u32>(1, 16);
        assert_eq!(chain("16"), Ok(16));
        for bad in [
            "0",
            "17",
            "-1",
            "+3",
            "",
            "abc",
            "18446744073709551616",
            "1.5",
            "4K",
        ] {
            let e = chain(bad).unwrap_err();
            assert!(e.contains("from 1 to 16"), "{bad}: {e}");
        }
        let seed = whole::<u64>(0, u64::MAX);
        assert_eq!(seed("0"), Ok(0));
        assert!(seed("18446744073709551616")
            .unwrap_err()
            .contains("at least 0"));
        assert_eq!(whole_usize(1, 8)("8"), Ok(8));
    }

    #[test]
    fn disk_sizes_round_up_to_whole_pages_as_disksize_does() {
        let d = disk_size(4096, 1 << 40);
        assert_eq!(d("1000"), Ok(4096));
        assert_eq!(d("4097"), Ok(8192));
        assert_eq!(d("1G"), Ok(1 << 30));
        for bad in ["0", "1099511627777", "2T", "99999999999T"] {
            let e = d(bad).unwrap_err();
            assert_eq!(
                e,
                format!("'{bad}' is out of range (a size from 4K to 1T)"),
                "{bad}"
            );
        }
        for bad in ["-1", "", "x", "1Q"] {
            // The one size parser's refusal, word for word.
            assert_eq!(
                d(bad).unwrap_err(),
                crate::size::parse(bad).unwrap_err().to_string()
            );
        }
    }

    #[test]
    fn sizes_and_reals_keep_to_their_range() {
        let s = size(4096, 1 << 40);
        assert_eq!(s("4K"), Ok(4096));
        assert_eq!(s("1T"), Ok(1 << 40));
        for bad in ["0", "4095", "2T", "99999999999T"] {
            let e = s(bad).unwrap_err();
            assert!(
                e.contains("out of range (a size from 4K to 1T)"),
                "{bad}: {e}"
            );
        }
        for bad in ["-1", "", "x", "4Q"] {
            let e = s(bad).unwrap_err();
            assert!(e.contains("is not a size"), "{bad}: {e}");
        }
        let fraction = real(0.0, 1.0, false);
        assert_eq!(fraction("0"), Ok(0.0));
        for bad in ["-0.1", "1.5", "nan", "inf", "", "x"] {
            assert!(fraction(bad).unwrap_err().contains("from 0 to 1"), "{bad}");
        }
        let seconds = real(0.0, 3600.0, true);
        assert!(seconds("0").is_err());
        assert_eq!(seconds("0.5"), Ok(0.5));
    }
}
