//! zswap's module parameters, as a model is configured with them: the
//! compressor (`CONFIG_ZSWAP_COMPRESSOR_DEFAULT`, or
//! `/sys/module/zswap/parameters/compressor`), `max_pool_percent`,
//! `accept_threshold_percent`, and the machine facts the kernel's limits
//! and slab orders depend on (`totalram_pages`, the present CPUs).
//!
//! Owns the defaults of Linux 7.3 and the reading of a running kernel's
//! values (`/sys/module/zswap/parameters/*`, `/proc/meminfo`,
//! `/sys/devices/system/cpu/present`, the kernel's `.config`); it reads
//! files only, never writes one, and knows nothing of the pool.

use std::path::Path;

use serde::Serialize;
use zcomp::Algorithm;

/// `CONFIG_ZSWAP_COMPRESSOR_DEFAULT` of upstream's Kconfig (its choice
/// defaults to `ZSWAP_COMPRESSOR_DEFAULT_LZO`) and of Debian's 7.3 kernels.
pub const DEFAULT_COMPRESSOR: &str = "lzo";

/// `zswap_max_pool_percent`'s default.
pub const DEFAULT_MAX_POOL_PERCENT: u32 = 20;

/// `zswap_accept_thr_percent`'s default.
pub const DEFAULT_ACCEPT_THRESHOLD_PERCENT: u32 = 90;

/// Where the module's parameters are.
pub const PARAMETERS: &str = "/sys/module/zswap/parameters";

/// A compressor zswap can be given: a crypto API name zcomp has
/// (`lzo`, `lzo-rle`, `lz4`, `lz4hc`, `zstd`, `deflate`; not `842`).
pub fn compressor(name: &str) -> Result<Algorithm, String> {
    match Algorithm::from_name(name) {
        Ok(Algorithm::Lz4Flex) | Err(_) => Err(format!(
            "zswap compressor {name:?}: not one zmem models (lzo, lzo-rle, lz4, lz4hc, zstd, \
             deflate)"
        )),
        Ok(a) => Ok(a),
    }
}

/// What a running kernel's zswap is set to, as far as it can be read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct KernelZswap {
    /// `enabled` (`None`: no zswap, or not readable).
    pub enabled: Option<bool>,
    /// `compressor`, else the kernel configuration's default.
    pub compressor: Option<String>,
    /// `max_pool_percent`.
    pub max_pool_percent: Option<u32>,
    /// `accept_threshold_percent`.
    pub accept_threshold_percent: Option<u32>,
    /// `shrinker_enabled`.
    pub shrinker_enabled: Option<bool>,
}

fn read_param(dir: &Path, name: &str) -> Option<String> {
    std::fs::read_to_string(dir.join(name))
        .ok()
        .map(|s| s.trim().to_string())
}

fn parse_bool(s: &str) -> Option<bool> {
    match s {
        "Y" | "y" | "1" => Some(true),
        "N" | "n" | "0" => Some(false),
        _ => None,
    }
}

/// `CONFIG_ZSWAP_COMPRESSOR_DEFAULT` from a kernel's `.config` text.
pub fn default_from_config(text: &str) -> Option<String> {
    text.lines().find_map(|l| {
        l.strip_prefix("CONFIG_ZSWAP_COMPRESSOR_DEFAULT=")
            .map(|v| v.trim().trim_matches('"').to_string())
            .filter(|v| !v.is_empty())
    })
}

impl KernelZswap {
    /// Reads the parameters in `dir` (normally [`PARAMETERS`]); the
    /// compressor falls back to `/boot/config-RELEASE`'s default when
    /// the directory has none.
    pub fn read(dir: &Path) -> KernelZswap {
        let compressor = read_param(dir, "compressor").or_else(|| {
            let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
            let text = std::fs::read_to_string(format!("/boot/config-{}", release.trim())).ok()?;
            default_from_config(&text)
        });
        KernelZswap {
            enabled: read_param(dir, "enabled").and_then(|s| parse_bool(&s)),
            compressor,
            max_pool_percent: read_param(dir, "max_pool_percent").and_then(|s| s.parse().ok()),
            accept_threshold_percent: read_param(dir, "accept_threshold_percent")
                .and_then(|s| s.parse().ok()),
            shrinker_enabled: read_param(dir, "shrinker_enabled").and_then(|s| parse_bool(&s)),
        }
    }

    /// The running kernel's.
    pub fn running() -> KernelZswap {
        KernelZswap::read(Path::new(PARAMETERS))
    }
}

/// `totalram_pages()` of this machine: `MemTotal` of `/proc/meminfo` in
/// 4 KiB pages (`None` if it cannot be read).
pub fn totalram_pages() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()?;
    Some(kib / 4)
}

/// `num_present_cpus()`: the CPUs in `/sys/devices/system/cpu/present`
/// (a list such as `0-3,6`), else the threads this process may use.
pub fn present_cpus() -> u32 {
    let listed = std::fs::read_to_string("/sys/devices/system/cpu/present")
        .ok()
        .and_then(|s| count_cpu_list(s.trim()));
    listed.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get() as u32)
            .unwrap_or(1)
    })
}

/// The CPUs a kernel CPU list (`0-3,6`) names.
pub fn count_cpu_list(list: &str) -> Option<u32> {
    let mut n = 0u32;
    for part in list.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (a.parse().ok()?, b.parse().ok()?);
                n += b.checked_sub(a)? + 1;
            }
            None => {
                part.parse::<u32>().ok()?;
                n += 1;
            }
        }
    }
    (n > 0).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_default_and_cpu_lists() {
        let cfg = "CONFIG_ZSWAP=y\n# CONFIG_ZSWAP_DEFAULT_ON is not set\n\
                   CONFIG_ZSWAP_COMPRESSOR_DEFAULT=\"lzo\"\n";
        assert_eq!(default_from_config(cfg).as_deref(), Some("lzo"));
        assert_eq!(
            default_from_config("CONFIG_ZSWAP_COMPRESSOR_DEFAULT=\"\"\n"),
            None
        );
        assert_eq!(count_cpu_list("0-3,6"), Some(5));
        assert_eq!(count_cpu_list("0"), Some(1));
        assert_eq!(count_cpu_list("3-1"), None);
        assert_eq!(count_cpu_list(""), None);
    }

    #[test]
    fn compressors_are_the_crypto_names() {
        assert_eq!(compressor("lzo"), Ok(Algorithm::Lzo));
        assert_eq!(compressor("lz4"), Ok(Algorithm::Lz4));
        assert!(compressor("842").is_err());
        assert!(compressor("lz4-flex").is_err());
    }

    #[test]
    fn parameters_read_from_a_directory() {
        let dir = std::env::temp_dir().join(format!("zmem-zswap-params-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (name, value) in [
            ("enabled", "Y\n"),
            ("compressor", "zstd\n"),
            ("max_pool_percent", "35\n"),
            ("accept_threshold_percent", "80\n"),
            ("shrinker_enabled", "N\n"),
        ] {
            std::fs::write(dir.join(name), value).unwrap();
        }
        let k = KernelZswap::read(&dir);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(k.enabled, Some(true));
        assert_eq!(k.compressor.as_deref(), Some("zstd"));
        assert_eq!(k.max_pool_percent, Some(35));
        assert_eq!(k.accept_threshold_percent, Some(80));
        assert_eq!(k.shrinker_enabled, Some(false));
    }
}
