//! Which kernel kernel-compat mode stands for: the compressor a new zram
//! device of that kernel takes by default, and the compressors its zram
//! offers. "What the kernel's zram would use for this data" is only true
//! of one kernel: Debian has built zram without the lzo backends since
//! 6.12 (lz4 is its default there), upstream's default is lzo-rle.
//!
//! Read, in this order, from:
//! 1. `--kernel-comp NAME`: a user answering for another machine;
//! 2. the running kernel's build configuration (`/boot/config-RELEASE`,
//!    else `/proc/config.gz`): `CONFIG_ZRAM_DEF_COMP` and the
//!    `CONFIG_ZRAM_BACKEND_*` it was built with (6.12 and later);
//! 3. a zram device hot-added for the purpose (`/sys/class/zram-control`,
//!    root only): its `comp_algorithm`, whose bracketed name is the
//!    default; the device is removed at once. zram0, and any device this
//!    process did not add, is never touched;
//! 4. else upstream's Kconfig default, lzo-rle.
//!
//! Owns that reading and the line that says which kernel a report stands
//! for; never writes anything but its own hot-added device.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use zcomp::Algorithm;

/// Upstream's `CONFIG_ZRAM_DEF_COMP` default.
pub const UPSTREAM_DEFAULT: Algorithm = Algorithm::LzoRle;

/// Where kernel-compat's compressor came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// Given by the user (`--kernel-comp`).
    Given,
    /// The running kernel's build configuration, read from this file.
    Config(PathBuf),
    /// A zram device hot-added and removed again.
    Device,
    /// Nothing could be read: upstream's default.
    Upstream,
}

/// The kernel kernel-compat mode stands for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelCompat {
    /// The compressor of a new zram device.
    pub comp: Algorithm,
    /// Where it came from.
    pub source: Source,
    /// The running kernel's release (`uname -r`), when the answer is the
    /// running kernel's.
    pub release: Option<String>,
    /// The compressors the kernel's zram offers, by zram's names, when
    /// known.
    pub offered: Option<Vec<String>>,
}

impl KernelCompat {
    /// For the kernel given by its default compressor (`--kernel-comp`).
    pub fn given(comp: Algorithm) -> KernelCompat {
        KernelCompat {
            comp,
            source: Source::Given,
            release: None,
            offered: None,
        }
    }

    /// The running kernel's, read once per process.
    pub fn running() -> &'static KernelCompat {
        static RUNNING: OnceLock<KernelCompat> = OnceLock::new();
        RUNNING.get_or_init(detect)
    }

    /// Whether the kernel's zram offers `comp` (`None`: not known).
    pub fn offers(&self, comp: Algorithm) -> Option<bool> {
        self.offered
            .as_ref()
            .map(|o| o.iter().any(|n| n == comp.name()))
    }

    /// The kernel in a few words, for a sentence: `this machine's Linux
    /// 6.18.4`, `upstream Linux`, `a kernel whose zram defaults to lz4`.
    pub fn name(&self) -> String {
        match &self.source {
            Source::Given => format!(
                "a kernel whose zram defaults to {} (--kernel-comp)",
                self.comp.name()
            ),
            Source::Config(_) | Source::Device => format!(
                "this machine's Linux {}",
                self.release.as_deref().unwrap_or("?")
            ),
            Source::Upstream => "upstream Linux".into(),
        }
    }

    /// The line that opens a report: which kernel kernel-compat stands for.
    pub fn line(&self) -> String {
        let comp = self.comp.name();
        let offered = match &self.offered {
            Some(o) => format!("; its zram offers {}", o.join(", ")),
            None => String::new(),
        };
        match &self.source {
            Source::Given => {
                format!("kernel-compat: a kernel whose zram defaults to {comp} (--kernel-comp)")
            }
            Source::Config(path) => format!(
                "kernel-compat: this machine's Linux {}, whose zram defaults to {comp} \
                 (CONFIG_ZRAM_DEF_COMP in {}){offered}",
                self.release.as_deref().unwrap_or("?"),
                path.display()
            ),
            Source::Device => format!(
                "kernel-compat: this machine's Linux {}, whose zram defaults to {comp} \
                 (a hot-added device's comp_algorithm){offered}",
                self.release.as_deref().unwrap_or("?")
            ),
            Source::Upstream => format!(
                "kernel-compat: upstream Linux, whose zram defaults to {comp} (this machine's \
                 kernel configuration could not be read; --kernel-comp NAME answers for another)"
            ),
        }
    }

    /// A warning for a compressor this kernel's zram lacks, if it does.
    pub fn warning_for(&self, comp: Algorithm) -> Option<String> {
        (self.offers(comp) == Some(false)).then(|| {
            format!(
                "warning: this kernel's zram lacks {} (it offers {}): kernel-compat with {} \
                 answers for another kernel",
                comp.name(),
                self.offered.as_deref().unwrap_or_default().join(", "),
                comp.name()
            )
        })
    }
}

/// Reads the running kernel (see the module's order).
fn detect() -> KernelCompat {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .ok()
        .map(|s| s.trim().to_string());
    if let Some(rel) = &release {
        let boot = PathBuf::from(format!("/boot/config-{rel}"));
        let text = std::fs::read_to_string(&boot).ok().map(|t| (t, boot));
        let text = text.or_else(|| {
            let path = PathBuf::from("/proc/config.gz");
            read_gz(&path).map(|t| (t, path))
        });
        if let Some((text, path)) = text {
            if let Some((comp, offered)) = from_config(&text) {
                return KernelCompat {
                    comp,
                    source: Source::Config(path),
                    release,
                    offered,
                };
            }
        }
    }
    if let Some((comp, offered)) = from_hot_added_device() {
        return KernelCompat {
            comp,
            source: Source::Device,
            release,
            offered: Some(offered),
        };
    }
    KernelCompat {
        comp: UPSTREAM_DEFAULT,
        source: Source::Upstream,
        release: None,
        offered: None,
    }
}

fn read_gz(path: &Path) -> Option<String> {
    let f = std::fs::File::open(path).ok()?;
    let mut text = String::new();
    flate2::read::GzDecoder::new(f)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

/// The default compressor and the offered ones from a kernel's `.config`
/// (`None` when it has no zram, or names a default zmem does not know). The
/// backends are listed from 6.12 on; before, zram took any compressor of
/// the crypto API, and the offered list is not known from the file.
pub fn from_config(text: &str) -> Option<(Algorithm, Option<Vec<String>>)> {
    let value = |key: &str| {
        text.lines().find_map(|l| {
            l.strip_prefix(key)
                .and_then(|r| r.strip_prefix('='))
                .map(|v| v.trim().trim_matches('"').to_string())
        })
    };
    let zram = value("CONFIG_ZRAM")?;
    if zram != "y" && zram != "m" {
        return None;
    }
    let comp = Algorithm::from_name(&value("CONFIG_ZRAM_DEF_COMP")?).ok()?;
    let backends = [
        ("CONFIG_ZRAM_BACKEND_LZO", &["lzo-rle", "lzo"][..]),
        ("CONFIG_ZRAM_BACKEND_LZ4", &["lz4"]),
        ("CONFIG_ZRAM_BACKEND_LZ4HC", &["lz4hc"]),
        ("CONFIG_ZRAM_BACKEND_ZSTD", &["zstd"]),
        ("CONFIG_ZRAM_BACKEND_DEFLATE", &["deflate"]),
        ("CONFIG_ZRAM_BACKEND_842", &["842"]),
    ];
    let listed = text.contains("CONFIG_ZRAM_BACKEND_");
    let offered = listed.then(|| {
        backends
            .iter()
            .filter(|(k, _)| value(k).as_deref() == Some("y"))
            .flat_map(|(_, names)| names.iter().map(|n| n.to_string()))
            .collect()
    });
    Some((comp, offered))
}

/// The names of a `comp_algorithm` value and the bracketed one:
/// `"lzo-rle [lz4] zstd"`.
pub fn from_comp_algorithm(value: &str) -> Option<(String, Vec<String>)> {
    let mut default = None;
    let mut names = Vec::new();
    for w in value.split_whitespace() {
        let name = w.trim_start_matches('[').trim_end_matches(']');
        if w.starts_with('[') {
            default = Some(name.to_string());
        }
        names.push(name.to_string());
    }
    default.map(|d| (d, names))
}

/// A new zram device's `comp_algorithm`, the device added and removed by
/// this call (root only; `None` when zram-control is not there or not
/// writable).
fn from_hot_added_device() -> Option<(Algorithm, Vec<String>)> {
    let control = Path::new("/sys/class/zram-control");
    let id: u32 = std::fs::read_to_string(control.join("hot_add"))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let value = std::fs::read_to_string(format!("/sys/block/zram{id}/comp_algorithm"));
    // Removed whatever the read gave (it was never zram0: that one is made
    // by the module, not by hot_add).
    let _ = std::fs::write(control.join("hot_remove"), id.to_string());
    let (default, names) = from_comp_algorithm(&value.ok()?)?;
    Some((Algorithm::from_name(&default).ok()?, names))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_debian_7_3_config_defaults_to_lz4_without_lzo() {
        let text = "CONFIG_ZRAM=m\nCONFIG_ZRAM_BACKEND_LZ4=y\nCONFIG_ZRAM_BACKEND_LZ4HC=y\n\
                    CONFIG_ZRAM_BACKEND_ZSTD=y\nCONFIG_ZRAM_BACKEND_DEFLATE=y\n\
                    # CONFIG_ZRAM_BACKEND_842 is not set\n\
                    # CONFIG_ZRAM_BACKEND_LZO is not set\n\
                    CONFIG_ZRAM_DEF_COMP_LZ4=y\nCONFIG_ZRAM_DEF_COMP=\"lz4\"\n";
        let (comp, offered) = from_config(text).unwrap();
        assert_eq!(comp, Algorithm::Lz4);
        assert_eq!(
            offered.unwrap(),
            ["lz4", "lz4hc", "zstd", "deflate"].map(String::from)
        );
        let k = KernelCompat {
            comp,
            source: Source::Config("/boot/config-7.3.4+deb13-amd64".into()),
            release: Some("7.3.4+deb13-amd64".into()),
            offered: from_config(text).unwrap().1,
        };
        assert_eq!(k.offers(Algorithm::LzoRle), Some(false));
        let w = k.warning_for(Algorithm::LzoRle).unwrap();
        assert!(w.contains("lacks lzo-rle"), "{w}");
        assert!(k.warning_for(Algorithm::Zstd).is_none());
        assert!(k.line().contains("Linux 7.3.4+deb13-amd64"), "{}", k.line());
        assert!(k.line().contains("defaults to lz4"), "{}", k.line());
        assert_eq!(k.name(), "this machine's Linux 7.3.4+deb13-amd64");
        assert_eq!(
            KernelCompat::given(Algorithm::Zstd).name(),
            "a kernel whose zram defaults to zstd (--kernel-comp)"
        );
    }

    #[test]
    fn an_older_config_names_no_backends() {
        let text =
            "CONFIG_ZRAM=y\nCONFIG_ZRAM_DEF_COMP_LZORLE=y\nCONFIG_ZRAM_DEF_COMP=\"lzo-rle\"\n";
        assert_eq!(from_config(text), Some((Algorithm::LzoRle, None)));
        assert_eq!(from_config("# CONFIG_ZRAM is not set\n"), None);
        assert_eq!(
            from_config("CONFIG_ZRAM=y\nCONFIG_ZRAM_DEF_COMP=\"nosuch\"\n"),
            None
        );
    }

    #[test]
    fn the_bracketed_name_is_the_default() {
        assert_eq!(
            from_comp_algorithm("lzo-rle lzo [lz4] zstd"),
            Some((
                "lz4".into(),
                vec!["lzo-rle".into(), "lzo".into(), "lz4".into(), "zstd".into()]
            ))
        );
        assert_eq!(from_comp_algorithm("lzo lz4"), None);
    }

    /// On this machine the answer is the running kernel's wherever its
    /// configuration or zram-control can be read, and agrees with both.
    #[test]
    fn the_running_kernel_is_read_where_it_can_be() {
        let k = KernelCompat::running();
        if let Source::Config(path) = &k.source {
            let text = std::fs::read_to_string(path)
                .ok()
                .or_else(|| read_gz(path))
                .unwrap();
            assert_eq!(from_config(&text).unwrap().0, k.comp);
        }
        assert!(k.line().starts_with("kernel-compat: "));
    }
}
