//! The one error type of the crate.
//!
//! This module owns [`Error`]: what can go wrong when choosing an algorithm,
//! parsing or applying parameters, compressing and decompressing, with
//! messages a zram user can act on (they name the algorithm, the key, the
//! accepted values). It knows nothing of the backends beyond their names;
//! backend modules turn their library's failures into these variants.

use std::fmt;

use crate::algorithm::{Algorithm, UnknownAlgorithm};

/// A result with the crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can fail in this crate. No operation panics instead.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The algorithm name is not one this crate knows.
    UnknownAlgorithm(String),
    /// A parameter token is not of the form `key=value`.
    ParamSyntax(String),
    /// A parameter key is not one zram knows.
    UnknownParam(String),
    /// A parameter key was given twice in one string.
    DuplicateParam(String),
    /// A parameter value does not parse or is out of range.
    BadValue {
        /// The parameter key.
        key: String,
        /// The value as given.
        value: String,
        /// What would have been accepted.
        expected: String,
    },
    /// The algorithm has no such setting (zram answers `-EINVAL`).
    Unsupported {
        /// The algorithm the parameters were applied to.
        algorithm: Algorithm,
        /// The setting it lacks.
        key: &'static str,
    },
    /// The dictionary file could not be read, or the backend refused it.
    Dictionary {
        /// The file, or `<memory>` for a dictionary given as bytes.
        path: String,
        /// Why.
        reason: String,
    },
    /// The input is too large for the algorithm (liblz4 stops below 2 GiB).
    InputTooLarge {
        /// The algorithm.
        algorithm: Algorithm,
        /// The input length.
        len: usize,
    },
    /// The compressed data does not fit in the output buffer.
    OutputTooSmall {
        /// The algorithm.
        algorithm: Algorithm,
        /// The capacity that was offered.
        capacity: usize,
    },
    /// The compressed data is malformed, truncated, made with another
    /// dictionary, or decompresses to more bytes than the output holds.
    Corrupt {
        /// The algorithm.
        algorithm: Algorithm,
        /// The backend's own description.
        detail: String,
    },
    /// The data decompressed cleanly but to a different length than the
    /// output buffer's, which must be exactly the original length.
    WrongSize {
        /// The algorithm.
        algorithm: Algorithm,
        /// The output buffer's length.
        expected: usize,
        /// The length the data decompressed to.
        actual: usize,
    },
    /// The backend failed for a reason it did not explain (out of memory).
    Backend {
        /// The algorithm.
        algorithm: Algorithm,
        /// The backend's message.
        detail: String,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::UnknownAlgorithm(name) => UnknownAlgorithm(name.clone()).fmt(f),
            Error::ParamSyntax(token) => {
                write!(f, "parameter '{token}' is not of the form key=value")
            }
            Error::UnknownParam(key) => write!(
                f,
                "unknown parameter '{key}': use algo, priority, level, dict or deflate.winbits"
            ),
            Error::DuplicateParam(key) => write!(f, "parameter '{key}' is given twice"),
            Error::BadValue {
                key,
                value,
                expected,
            } => write!(f, "bad value '{value}' for {key}: expected {expected}"),
            Error::Unsupported { algorithm, key } => {
                write!(f, "{algorithm} does not take the parameter {key}")
            }
            Error::Dictionary { path, reason } => write!(f, "dictionary {path}: {reason}"),
            Error::InputTooLarge { algorithm, len } => {
                write!(f, "{algorithm}: input of {len} bytes is too large")
            }
            Error::OutputTooSmall {
                algorithm,
                capacity,
            } => write!(
                f,
                "{algorithm}: compressed data does not fit in {capacity} bytes"
            ),
            Error::Corrupt { algorithm, detail } => {
                write!(f, "{algorithm}: corrupt compressed data: {detail}")
            }
            Error::WrongSize {
                algorithm,
                expected,
                actual,
            } => write!(
                f,
                "{algorithm}: data decompressed to {actual} bytes, expected {expected}"
            ),
            Error::Backend { algorithm, detail } => write!(f, "{algorithm}: {detail}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<UnknownAlgorithm> for Error {
    fn from(e: UnknownAlgorithm) -> Self {
        Error::UnknownAlgorithm(e.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_algorithm_lists_every_known_name() {
        let msg = Error::UnknownAlgorithm("842".into()).to_string();
        assert_eq!(
            msg,
            "unknown compression algorithm '842': use one of lzo-rle, lzo, lz4, lz4hc, zstd, deflate, lz4-flex"
        );
    }

    #[test]
    fn messages_name_the_algorithm_and_the_sizes() {
        let e = Error::WrongSize {
            algorithm: Algorithm::Zstd,
            expected: 4096,
            actual: 100,
        };
        assert_eq!(
            e.to_string(),
            "zstd: data decompressed to 100 bytes, expected 4096"
        );
        let e = Error::Unsupported {
            algorithm: Algorithm::Lz4,
            key: "dict",
        };
        assert_eq!(e.to_string(), "lz4 does not take the parameter dict");
    }
}
