//! Compressor parameters and zram's `algorithm_params` syntax.
//!
//! This module owns [`Params`] (`level`, a dictionary, the deflate window),
//! [`Dictionary`] (shared bytes loaded once) and the parser of zram's
//! `algorithm_params` strings such as `"algo=zstd level=3 dict=/etc/zram.dict"`
//! into [`AlgorithmParams`]. Parsing checks syntax and value types, reads the
//! dictionary file (zram reads it when the attribute is written), and rejects
//! what zram would silently ignore (unknown keys) or take the last of
//! (repeated keys). Whether a value suits an algorithm (level ranges, a
//! dictionary for deflate) is checked when a [`crate::Compressor`] is built,
//! because `algorithm_params` may name no algorithm.
//!
//! Tokens are separated by whitespace; double quotes group a value with
//! spaces (`dict="/my dicts/a"`), as the kernel's `next_arg` allows.

use std::fmt;
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;

use crate::algorithm::{Algorithm, DEFLATE_MAX_WINBITS, DEFLATE_MIN_WINBITS};
use crate::error::{Error, Result};

/// A compression dictionary: immutable bytes shared by every context.
#[derive(Clone, PartialEq, Eq)]
pub struct Dictionary {
    bytes: Arc<[u8]>,
    source: String,
}

impl Dictionary {
    /// A dictionary from bytes in memory (for example from
    /// `zstd::dict::from_samples`). Empty dictionaries are refused.
    pub fn from_bytes(bytes: impl Into<Arc<[u8]>>) -> Result<Dictionary> {
        Dictionary::new(bytes.into(), "<memory>".to_string())
    }

    /// Reads a dictionary file, as zram's `dict=<path>`.
    pub fn load(path: impl AsRef<Path>) -> Result<Dictionary> {
        let path = path.as_ref();
        let source = path.display().to_string();
        match std::fs::read(path) {
            Ok(bytes) => Dictionary::new(bytes.into(), source),
            Err(e) => Err(Error::Dictionary {
                path: source,
                reason: e.to_string(),
            }),
        }
    }

    fn new(bytes: Arc<[u8]>, source: String) -> Result<Dictionary> {
        if bytes.is_empty() {
            return Err(Error::Dictionary {
                path: source,
                reason: "is empty".to_string(),
            });
        }
        Ok(Dictionary { bytes, source })
    }

    /// The dictionary's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Where it came from: the file path, or `<memory>`.
    pub fn source(&self) -> &str {
        &self.source
    }
}

impl fmt::Debug for Dictionary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dictionary")
            .field("source", &self.source)
            .field("len", &self.bytes.len())
            .finish()
    }
}

/// The settings of one compressor; `None` means zram's default.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Params {
    /// `level=`: the compression level (lz4: acceleration factor).
    pub level: Option<i32>,
    /// `dict=`: a dictionary (zstd and lz4-flex).
    pub dict: Option<Dictionary>,
    /// `deflate.winbits=`: log2 of the deflate window, 9..=15.
    pub window_bits: Option<u8>,
}

impl Params {
    /// Whether every setting is left at its default.
    pub fn is_default(&self) -> bool {
        *self == Params::default()
    }
}

/// One parsed `algorithm_params` string: the compressor it addresses (by
/// `algo=` or `priority=`, which the zram store resolves) and its settings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AlgorithmParams {
    /// `algo=`: the algorithm the settings are for.
    pub algo: Option<Algorithm>,
    /// `priority=`: the compressor slot (0 primary, 1..=3 recompression).
    pub priority: Option<u32>,
    /// The settings.
    pub params: Params,
}

impl AlgorithmParams {
    /// Parses `key=value` pairs: `algo`, `priority`, `level`, `dict` (a file,
    /// read now) and `deflate.winbits`. An empty string gives the defaults.
    pub fn parse(s: &str) -> Result<AlgorithmParams> {
        let mut out = AlgorithmParams::default();
        let mut seen: Vec<String> = Vec::new();
        for token in tokens(s)? {
            let Some((key, value)) = token.split_once('=') else {
                return Err(Error::ParamSyntax(token));
            };
            if key.is_empty() {
                return Err(Error::ParamSyntax(token));
            }
            if seen.iter().any(|k| k == key) {
                return Err(Error::DuplicateParam(key.to_string()));
            }
            seen.push(key.to_string());
            match key {
                "algo" => out.algo = Some(Algorithm::from_name(value)?),
                "priority" => {
                    out.priority = Some(
                        value
                            .parse()
                            .map_err(|_| bad(key, value, "an integer 0 or more"))?,
                    )
                }
                "level" => {
                    out.params.level =
                        Some(value.parse().map_err(|_| bad(key, value, "an integer"))?)
                }
                "dict" => {
                    if value.is_empty() {
                        return Err(bad(key, value, "the path of a dictionary file"));
                    }
                    out.params.dict = Some(Dictionary::load(value)?);
                }
                "deflate.winbits" => out.params.window_bits = Some(parse_window_bits(value)?),
                _ => return Err(Error::UnknownParam(key.to_string())),
            }
        }
        Ok(out)
    }

    /// The settings part of an `algorithm_params` text (its `level`, `dict`
    /// and `deflate.winbits` words, as written), without the `algo=` and
    /// `priority=` that choose the compressor: what a zram disk keeps for
    /// the priority once the write has chosen it. Words with spaces are
    /// quoted again, so the result parses to the same settings.
    pub fn settings_text(s: &str) -> Result<String> {
        let kept: Vec<String> = tokens(s)?
            .into_iter()
            .filter(|t| !matches!(t.split_once('='), Some(("algo" | "priority", _))))
            .map(|t| {
                if t.chars().any(|c| c.is_ascii_whitespace()) {
                    format!("\"{t}\"")
                } else {
                    t
                }
            })
            .collect();
        Ok(kept.join(" "))
    }
}

impl FromStr for AlgorithmParams {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        AlgorithmParams::parse(s)
    }
}

fn bad(key: &str, value: &str, expected: &str) -> Error {
    Error::BadValue {
        key: key.to_string(),
        value: value.to_string(),
        expected: expected.to_string(),
    }
}

/// The deflate window: 9..=15, or -15..=-9 as older kernels wrote raw
/// deflate windows (zram always stores raw deflate, so the sign is dropped).
fn parse_window_bits(value: &str) -> Result<u8> {
    let expected = "9 to 15 (or -15 to -9): log2 of the raw deflate window";
    let bits: i32 = value
        .parse()
        .map_err(|_| bad("deflate.winbits", value, expected))?;
    let range = i32::from(DEFLATE_MIN_WINBITS)..=i32::from(DEFLATE_MAX_WINBITS);
    if !range.contains(&bits.saturating_abs()) {
        return Err(bad("deflate.winbits", value, expected));
    }
    // In range 9..=15, so the cast cannot truncate.
    Ok(bits.unsigned_abs() as u8)
}

/// Splits on ASCII whitespace outside double quotes and removes the quotes.
fn tokens(s: &str) -> Result<Vec<String>> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut in_token = false;
    let mut quoted = false;
    for c in s.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                in_token = true;
            }
            c if c.is_ascii_whitespace() && !quoted => {
                if in_token {
                    out.push(std::mem::take(&mut current));
                    in_token = false;
                }
            }
            c => {
                current.push(c);
                in_token = true;
            }
        }
    }
    if quoted {
        return Err(Error::ParamSyntax(format!("{current} (unbalanced quote)")));
    }
    if in_token {
        out.push(current);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_text_drops_the_selector_and_keeps_the_settings() {
        let t = AlgorithmParams::settings_text("algo=zstd  level=8 priority=1 deflate.winbits=-12");
        assert_eq!(t.unwrap(), "level=8 deflate.winbits=-12");
        assert_eq!(AlgorithmParams::settings_text("priority=2").unwrap(), "");
        let dir = std::env::temp_dir().join(format!("zcomp-settings-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a dict");
        std::fs::write(&path, b"dictionary words").unwrap();
        let written = format!("algo=lz4 \"dict={}\" level=2", path.display());
        let kept = AlgorithmParams::settings_text(&written).unwrap();
        assert_eq!(kept, format!("\"dict={}\" level=2", path.display()));
        assert_eq!(
            AlgorithmParams::parse(&kept).unwrap().params,
            AlgorithmParams::parse(&written).unwrap().params
        );
        assert!(AlgorithmParams::settings_text("level=\"1").is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn parse(s: &str) -> Result<AlgorithmParams> {
        AlgorithmParams::parse(s)
    }

    #[test]
    fn empty_strings_give_defaults() {
        for s in ["", "  ", "\n"] {
            let p = parse(s).unwrap();
            assert_eq!(p, AlgorithmParams::default());
            assert!(p.params.is_default());
        }
    }

    #[test]
    fn every_key_parses() {
        let p = parse("algo=zstd priority=1 level=-5 deflate.winbits=12\n").unwrap();
        assert_eq!(p.algo, Some(Algorithm::Zstd));
        assert_eq!(p.priority, Some(1));
        assert_eq!(p.params.level, Some(-5));
        assert_eq!(p.params.window_bits, Some(12));
        assert!(p.params.dict.is_none());
        assert_eq!(
            parse("deflate.winbits=-11").unwrap().params.window_bits,
            Some(11)
        );
        assert_eq!(parse("level=+3").unwrap().params.level, Some(3));
    }

    #[test]
    fn dictionaries_are_read_at_parse_time() {
        let dir = std::env::temp_dir().join(format!("zcomp-params-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("with space")).unwrap();
        let file = dir.join("with space").join("d.bin");
        std::fs::write(&file, b"dictionary bytes").unwrap();
        let p = parse(&format!("level=1 dict=\"{}\"", file.display())).unwrap();
        let dict = p.params.dict.unwrap();
        assert_eq!(dict.bytes(), b"dictionary bytes");
        assert_eq!(dict.source(), file.display().to_string());

        let empty = dir.join("empty");
        std::fs::write(&empty, b"").unwrap();
        let err = parse(&format!("dict={}", empty.display())).unwrap_err();
        assert!(matches!(err, Error::Dictionary { .. }), "{err}");
        assert!(err.to_string().ends_with("is empty"));

        let missing = dir.join("missing");
        let err = parse(&format!("dict={}", missing.display())).unwrap_err();
        assert!(matches!(err, Error::Dictionary { .. }), "{err}");
        assert!(err.to_string().contains("missing"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bad_strings_are_clear_errors() {
        let cases: [(&str, &str); 12] = [
            ("level", "parameter 'level' is not of the form key=value"),
            ("=3", "parameter '=3' is not of the form key=value"),
            ("level=fast", "bad value 'fast' for level: expected an integer"),
            ("level=", "bad value '' for level: expected an integer"),
            ("level=99999999999", "bad value '99999999999' for level: expected an integer"),
            ("priority=-1", "bad value '-1' for priority: expected an integer 0 or more"),
            ("speed=3", "unknown parameter 'speed': use algo, priority, level, dict or deflate.winbits"),
            ("level=1 level=2", "parameter 'level' is given twice"),
            ("algo=842", "unknown compression algorithm '842': use one of lzo-rle, lzo, lz4, lz4hc, zstd, deflate, lz4-flex"),
            ("dict=", "bad value '' for dict: expected the path of a dictionary file"),
            ("deflate.winbits=8", "bad value '8' for deflate.winbits: expected 9 to 15 (or -15 to -9): log2 of the raw deflate window"),
            ("dict=\"/tmp/x", "parameter 'dict=/tmp/x (unbalanced quote)' is not of the form key=value"),
        ];
        for (input, message) in cases {
            assert_eq!(parse(input).unwrap_err().to_string(), message, "{input:?}");
        }
        for w in ["16", "-16", "0", "-8", "x", "-2147483648"] {
            assert!(parse(&format!("deflate.winbits={w}")).is_err(), "{w}");
        }
    }
}
