//! The one size parser: the kernel's `memparse`.
//!
//! Every size zmem reads (a flag such as `--size` or `--mem-limit`, an
//! `--export NAME:SIZE`, a control command such as `disksize` or
//! `mem_limit`) is parsed by [`parse`]: decimal digits and an optional K, M,
//! G, T, P or E suffix in either case (powers of 1024), as the kernel's
//! `memparse` reads what is written to zram's `disksize` and `mem_limit`.
//! Its refusal is one [`SizeError`], worded the same wherever it is shown.
//! [`round_up_to_page`] rounds a size up to whole pages, as zram's
//! `disksize_store` does (`echo 1000 > disksize` gives 4096).

use std::fmt;

/// The suffixes [`parse`] takes, in words (for messages).
pub const SUFFIXES: &str = "K, M, G, T, P or E";

/// The page zram rounds `disksize` to (the kernel's `PAGE_SIZE` on the
/// machines zmem models first).
pub const PAGE_SIZE: u64 = 4096;

/// A text that is no size, or a size that does not fit in 64 bits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SizeError {
    /// The text as given (trimmed).
    pub text: String,
    /// Whether it was a size, but larger than 2^64 - 1 bytes.
    pub too_large: bool,
}

impl fmt::Display for SizeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.too_large {
            write!(
                f,
                "'{}' is too large a size (at most 2^64 - 1 bytes)",
                self.text
            )
        } else {
            write!(
                f,
                "'{}' is not a size (a number of bytes with an optional {SUFFIXES} suffix)",
                self.text
            )
        }
    }
}

impl std::error::Error for SizeError {}

/// Parses a size as the kernel's `memparse` does: decimal digits and an
/// optional K, M, G, T, P or E suffix (powers of 1024, either case);
/// surrounding whitespace (a sysfs write's newline) is ignored.
pub fn parse(s: &str) -> Result<u64, SizeError> {
    let t = s.trim();
    let err = |too_large| SizeError {
        text: t.to_string(),
        too_large,
    };
    let (digits, shift) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let shift = match c.to_ascii_uppercase() {
                'K' => 10,
                'M' => 20,
                'G' => 30,
                'T' => 40,
                'P' => 50,
                'E' => 60,
                _ => return Err(err(false)),
            };
            (&t[..i], shift)
        }
        _ => (t, 0),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(err(false));
    }
    let n: u64 = digits.parse().map_err(|_| err(true))?;
    n.checked_mul(1u64 << shift).ok_or_else(|| err(true))
}

/// `bytes` rounded up to a whole number of `page`-byte pages (`page` a
/// power of two), as zram rounds `disksize` (`PAGE_ALIGN`); `None` if that
/// does not fit in 64 bits.
pub fn round_up_to_page(bytes: u64, page: u64) -> Option<u64> {
    debug_assert!(page.is_power_of_two());
    bytes.checked_next_multiple_of(page)
}

/// Bytes in words with the largest suffix that divides them: `4096` is
/// `4K`, `1 << 40` is `1T`; others are plain digits.
pub fn words(n: u64) -> String {
    for (shift, suffix) in [
        (60, "E"),
        (50, "P"),
        (40, "T"),
        (30, "G"),
        (20, "M"),
        (10, "K"),
    ] {
        if n >= 1 << shift && n % (1 << shift) == 0 {
            return format!("{}{suffix}", n >> shift);
        }
    }
    n.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_the_kernels_suffixes_in_either_case() {
        assert_eq!(parse("0"), Ok(0));
        assert_eq!(parse("4096"), Ok(4096));
        assert_eq!(parse("16K"), Ok(16384));
        assert_eq!(parse("4k"), Ok(4096));
        assert_eq!(parse("1m"), Ok(1 << 20));
        assert_eq!(parse("2G"), Ok(2 << 30));
        assert_eq!(parse("1t"), Ok(1 << 40));
        assert_eq!(parse("1P"), Ok(1 << 50));
        assert_eq!(parse("15e"), Ok(15 << 60));
        assert_eq!(parse(" 8M\n"), Ok(8 << 20));
    }

    #[test]
    fn refuses_the_rest_with_one_wording() {
        for bad in ["", "x", "12Q", "-4K", "+4K", "4 K", "1.5G", "K", "0x10"] {
            let e = parse(bad).unwrap_err();
            assert!(!e.too_large, "{bad}");
            assert!(
                e.to_string().ends_with(
                    "is not a size (a number of bytes with an optional K, M, G, T, P or E suffix)"
                ),
                "{bad}: {e}"
            );
        }
        for big in ["16E", "99999999999T", "18446744073709551616"] {
            let e = parse(big).unwrap_err();
            assert!(e.too_large, "{big}");
            assert!(e.to_string().contains("too large"), "{big}: {e}");
        }
        assert_eq!(parse("18446744073709551615"), Ok(u64::MAX));
    }

    #[test]
    fn rounds_up_to_whole_pages_as_disksize_does() {
        assert_eq!(round_up_to_page(1000, 4096), Some(4096));
        assert_eq!(round_up_to_page(4096, 4096), Some(4096));
        assert_eq!(round_up_to_page(4097, 4096), Some(8192));
        assert_eq!(round_up_to_page(0, 4096), Some(0));
        assert_eq!(round_up_to_page(u64::MAX, 4096), None);
    }

    #[test]
    fn words_name_sizes_by_their_largest_suffix() {
        assert_eq!(words(4096), "4K");
        assert_eq!(words(1 << 40), "1T");
        assert_eq!(words(3 << 50), "3P");
        assert_eq!(words(1000), "1000");
    }
}
