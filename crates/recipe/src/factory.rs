//! What a served export is made of before and after `disksize`.
//!
//! This module owns the [`Settings`] an uninitialised export holds (the
//! attributes zram takes only before `disksize`), the [`StoreFactory`]
//! trait the server's registry makes stores with, and its implementation,
//! [`SpecFactory`]: one [`StoreSpec`] with the server's writeback,
//! recompression and policy flags ([`PolicyFlags`]), so that every store it
//! makes (at start, by `hot_add` or after a `reset`) runs the same rules. Its
//! errors are a [`FactoryError`]. It does no I/O besides what a store does
//! when it is made.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use zcomp::Algorithm;
use zram::{
    PolicyConfig, PolicyRunner, RecompAlgorithm, RecompressRequest, Store, StoreError,
    WritebackMode, WritebackRequest,
};

use crate::spec::StoreSpec;

/// What an uninitialised export is set to: the attributes zram takes only
/// before `disksize` (and `mem_limit`, which it takes at any time).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// `comp_algorithm`: the primary compressor.
    pub comp: Algorithm,
    /// `algorithm_params` of the primary compressor (`level=3 dict=FILE`),
    /// as written.
    pub comp_params: String,
    /// `mem_limit` in bytes (0: none).
    pub mem_limit: u64,
    /// `backing_dev`, if set.
    pub backing_dev: Option<PathBuf>,
    /// `writeback_compressed`: write pages back compressed, packed.
    pub writeback_compressed: bool,
    /// `writeback_batch_size`, if written before init (the store's own
    /// default, or the server's flag, otherwise).
    pub writeback_batch_size: Option<u64>,
    /// `recomp_algorithm` values, in the order written; a later one for
    /// the same priority wins, as in the store.
    pub recomp: Vec<RecompAlgorithm>,
    /// `algorithm_params` of the secondary compressors by priority (index
    /// 0 is priority 1): the settings of the last write for that priority,
    /// without `algo=`/`priority=` (empty: the algorithm's defaults). As in
    /// Linux 7.x, a `recomp_algorithm` write for a priority empties its
    /// entry, and the settings are checked against the algorithm when the
    /// store is made (`disksize`).
    pub recomp_params: [String; zram::MAX_SECONDARIES],
}

impl Default for Settings {
    /// A new zram disk's: lzo-rle (the kernel's `CONFIG_ZRAM_DEF_COMP`),
    /// nothing else set.
    fn default() -> Settings {
        Settings {
            comp: Algorithm::LzoRle,
            comp_params: String::new(),
            mem_limit: 0,
            backing_dev: None,
            writeback_compressed: false,
            writeback_batch_size: None,
            recomp: Vec::new(),
            recomp_params: Default::default(),
        }
    }
}

impl Settings {
    /// The primary compressor: `comp_algorithm` with its
    /// `algorithm_params`. As Linux 7.x's `disksize` write, this is where
    /// settings the algorithm does not take are refused (`EINVAL`, named
    /// `algorithm_params`), not the `algorithm_params` write.
    pub fn compressor(&self) -> Result<zcomp::Compressor, FactoryError> {
        zcomp::Compressor::with_params(self.comp, &self.comp_params).map_err(|e| {
            FactoryError::Setting {
                flag: "algorithm_params",
                error: StoreError::Config(format!(
                    "algorithm_params {:?} for {}: {e}",
                    self.comp_params, self.comp
                )),
            }
        })
    }

    /// Applies the settings a store takes after it is made, in the order
    /// a zram disk takes them before `disksize`: `mem_limit`,
    /// `backing_dev`, `writeback_compressed`, `writeback_batch_size`,
    /// `recomp_algorithm`, then the secondaries' `algorithm_params`. The
    /// compressor and its parameters are the store's own (given when it is
    /// made). A refusal names the setting.
    pub fn apply(&self, store: &Store) -> Result<(), FactoryError> {
        let refused = |flag: &'static str| move |error| FactoryError::Setting { flag, error };
        store.set_mem_limit(self.mem_limit);
        if let Some(path) = &self.backing_dev {
            store
                .set_backing_dev(path)
                .map_err(refused("--backing-dev"))?;
        }
        store
            .set_writeback_compressed(self.writeback_compressed)
            .map_err(refused("--writeback-compressed"))?;
        if let Some(pages) = self.writeback_batch_size {
            store
                .set_writeback_batch_size(pages)
                .map_err(refused("--writeback-batch-size"))?;
        }
        for &recomp in &self.recomp {
            store
                .set_recomp(recomp)
                .map_err(refused("--recomp-algorithm"))?;
        }
        for (i, params) in self.recomp_params.iter().enumerate() {
            if !params.is_empty() {
                store
                    .set_algorithm_params(&format!("priority={} {params}", i + 1))
                    .map_err(refused("algorithm_params"))?;
            }
        }
        Ok(())
    }
}

/// Makes the stores of a server's exports: those given at start, and those
/// initialised while it runs (`disksize`, `hot_add NAME SIZE`, after a
/// `reset`).
pub trait StoreFactory: Send + Sync {
    /// The settings a hot-added export starts with and a reset one returns
    /// to (the server's own store flags, as a new zram disk starts with the
    /// module's defaults).
    fn defaults(&self) -> Settings;

    /// A store of `disksize` bytes (rounded up to whole pages) made with
    /// `settings` (its compressor, then [`Settings::apply`]), and the label
    /// naming its configuration; `Err` says why not.
    fn make(&self, settings: &Settings, disksize: u64) -> Result<(Store, String), FactoryError>;

    /// Starts what runs beside a store the registry just made for the
    /// export `name` (the server's timed policy and memory-aware rule), so a
    /// hot-added or re-initialised export runs as the ones given at start
    /// do. The runner stops when the store is reset or removed. Default:
    /// nothing.
    fn start_policy(
        &self,
        name: &str,
        store: &Arc<Store>,
    ) -> Result<Option<PolicyRunner>, FactoryError> {
        let _ = (name, store);
        Ok(None)
    }
}

/// Why a factory made no store, or could not start its policy.
#[derive(Debug)]
pub enum FactoryError {
    /// The disk asked for is larger than the factory makes.
    TooLarge {
        /// The size asked for, in bytes.
        bytes: u64,
        /// The largest the factory makes.
        max: u64,
    },
    /// The configuration makes no store (an allocator, page size or
    /// compressor setting refused).
    Spec(crate::Error),
    /// The store refused one of the factory's settings, named by its flag.
    Setting {
        /// The flag (`--writeback-batch-size`, `--auto-writeback`, ...).
        flag: &'static str,
        /// What the store said.
        error: StoreError,
    },
    /// `--auto-recompress` without a `--recomp-algorithm`.
    NeedsRecompAlgorithm,
    /// `--auto-writeback` or `--writeback-near-limit` without a
    /// `--backing-dev`.
    NeedsBackingDev,
    /// The policy thread could not be started.
    Thread(std::io::Error),
}

impl FactoryError {
    /// Whether the flags are at fault (a usage error), rather than the
    /// system (a failed run).
    pub fn is_usage(&self) -> bool {
        !matches!(
            self,
            FactoryError::Thread(_) | FactoryError::Spec(crate::Error::Failed(_))
        )
    }
}

impl fmt::Display for FactoryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FactoryError::TooLarge { bytes, max } => {
                write!(f, "{bytes} bytes is more than {}", crate::size::words(*max))
            }
            FactoryError::Spec(e) => write!(f, "{e}"),
            FactoryError::Setting { flag, error } => write!(f, "{flag}: {error}"),
            FactoryError::NeedsRecompAlgorithm => {
                f.write_str("--auto-recompress needs a --recomp-algorithm")
            }
            FactoryError::NeedsBackingDev => {
                f.write_str("--auto-writeback and --writeback-near-limit need a --backing-dev")
            }
            FactoryError::Thread(e) => write!(f, "cannot start a thread: {e}"),
        }
    }
}

impl std::error::Error for FactoryError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            FactoryError::Spec(e) => Some(e),
            FactoryError::Setting { error, .. } => Some(error),
            FactoryError::Thread(e) => Some(e),
            _ => None,
        }
    }
}

impl From<FactoryError> for crate::Error {
    fn from(e: FactoryError) -> crate::Error {
        match e {
            FactoryError::Spec(e) => e,
            e if e.is_usage() => crate::Error::Usage(e.to_string()),
            e => crate::Error::Failed(e.to_string()),
        }
    }
}

/// The server's timed policy and memory-aware rule, as its flags give
/// them, for every store a factory makes.
#[derive(Clone, Debug, Default)]
pub struct PolicyFlags {
    /// `--idle-after`: seconds without access before a page is marked idle.
    pub idle_after: Option<u32>,
    /// `--policy-interval`: seconds between runs (default 60).
    pub interval: Option<u32>,
    /// `--auto-recompress`: recompress idle pages after each marking.
    pub auto_recompress: bool,
    /// `--auto-writeback`: the writeback type after each marking.
    pub auto_writeback: Option<WritebackMode>,
    /// `--writeback-near-limit`: the memory-aware rule's percent.
    pub writeback_near_limit: Option<u32>,
}

impl PolicyFlags {
    /// Checks the flags against each other and against the server's:
    /// whether it has secondary compressors (`has_recomp`) and backing
    /// devices (`has_backing_dev`).
    pub fn check(&self, has_recomp: bool, has_backing_dev: bool) -> Result<(), FactoryError> {
        if self.auto_recompress && !has_recomp {
            return Err(FactoryError::NeedsRecompAlgorithm);
        }
        if (self.auto_writeback.is_some() || self.writeback_near_limit.is_some())
            && !has_backing_dev
        {
            return Err(FactoryError::NeedsBackingDev);
        }
        self.config().map(|_| ())
    }

    /// The timed rule for a store (`None`: no thread needed).
    pub fn config(&self) -> Result<Option<PolicyConfig>, FactoryError> {
        let recompress = self
            .auto_recompress
            .then(|| RecompressRequest::parse("type=idle"))
            .transpose()
            .map_err(|error| FactoryError::Setting {
                flag: "--auto-recompress",
                error,
            })?;
        // Every page of the disk: no ranges.
        let writeback = self.auto_writeback.map(|mode| WritebackRequest {
            mode,
            ranges: Vec::new(),
        });
        let config = PolicyConfig {
            interval: Duration::from_secs(u64::from(self.interval.unwrap_or(60))),
            idle_after: self.idle_after.map(|s| Duration::from_secs(u64::from(s))),
            recompress,
            writeback,
        };
        Ok((config.timed() || self.writeback_near_limit.is_some()).then_some(config))
    }

    /// Starts the rules on `store` of the export `name`: the memory-aware
    /// rule's mark and the policy thread, if the flags ask for either.
    pub fn start(
        &self,
        name: &str,
        store: &Arc<Store>,
    ) -> Result<Option<PolicyRunner>, FactoryError> {
        let Some(config) = self.config()? else {
            return Ok(None);
        };
        if store.backing_dev() == "none" {
            if self.auto_writeback.is_some() || self.writeback_near_limit.is_some() {
                log::warn!("export {name:?} has no backing_dev: it writes nothing back");
            }
        } else if let Some(pct) = self.writeback_near_limit {
            store
                .set_writeback_near_limit(pct)
                .map_err(|error| FactoryError::Setting {
                    flag: "--writeback-near-limit",
                    error,
                })?;
        }
        log::info!("export {name:?}: policy {config:?}");
        PolicyRunner::start(store, config)
            .map(Some)
            .map_err(FactoryError::Thread)
    }
}

/// A store configuration as the factory of an export's stores.
#[derive(Clone, Debug)]
pub struct SpecFactory {
    /// The configuration.
    pub spec: StoreSpec,
    /// The largest disk it makes, in bytes.
    pub max_disksize: u64,
    /// `--recomp-algorithm` values, for every export.
    pub recomp: Vec<RecompAlgorithm>,
    /// The timed policy and memory-aware rule, for every store.
    pub policy: PolicyFlags,
    /// `--writeback-batch-size`, for every export.
    pub writeback_batch: Option<u64>,
    /// `--writeback-compressed`, for every export.
    pub writeback_compressed: bool,
}

impl StoreFactory for SpecFactory {
    fn defaults(&self) -> Settings {
        Settings {
            comp: self.spec.comp,
            comp_params: self.spec.comp_params.clone(),
            mem_limit: self.spec.mem_limit,
            backing_dev: None,
            writeback_compressed: self.writeback_compressed,
            writeback_batch_size: self.writeback_batch,
            recomp: self.recomp.clone(),
            recomp_params: Default::default(),
        }
    }

    fn make(&self, settings: &Settings, disksize: u64) -> Result<(Store, String), FactoryError> {
        if disksize > self.max_disksize {
            return Err(FactoryError::TooLarge {
                bytes: disksize,
                max: self.max_disksize,
            });
        }
        settings.compressor()?;
        let spec = StoreSpec {
            comp: settings.comp,
            comp_params: settings.comp_params.clone(),
            mem_limit: settings.mem_limit,
            ..self.spec.clone()
        };
        let store = spec.open(disksize).map_err(FactoryError::Spec)?;
        settings.apply(&store)?;
        Ok((store, spec.label()))
    }

    fn start_policy(
        &self,
        name: &str,
        store: &Arc<Store>,
    ) -> Result<Option<PolicyRunner>, FactoryError> {
        self.policy.start(name, store)
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::spec::StoreArgs;

    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        store: StoreArgs,
    }

    fn factory(args: &[&str]) -> SpecFactory {
        let flags = Flags::try_parse_from([&["zmem"], args].concat()).unwrap();
        SpecFactory {
            spec: flags.store.specs().unwrap().remove(0),
            max_disksize: 1 << 30,
            recomp: Vec::new(),
            policy: PolicyFlags::default(),
            writeback_batch: Some(8),
            writeback_compressed: false,
        }
    }

    #[test]
    fn makes_the_spec_with_the_settings_compressor() {
        let f = factory(&["--mode", "kernel-compat"]);
        let defaults = f.defaults();
        assert_eq!(defaults.comp, Algorithm::LzoRle);
        assert_eq!(defaults.writeback_batch_size, Some(8));
        let settings = Settings {
            comp: Algorithm::Zstd,
            comp_params: "level=1".into(),
            mem_limit: 1 << 20,
            writeback_batch_size: Some(16),
            recomp: vec![RecompAlgorithm::parse("algo=lz4 priority=2").unwrap()],
            ..defaults
        };
        let (store, label) = f.make(&settings, 1 << 20).unwrap();
        assert_eq!(label, "zsmalloc/kernel-compat/zstd/4K");
        assert_eq!(store.disk_size(), 1 << 20);
        assert_eq!(store.compressor().level(), 1);
        assert_eq!(store.mem_limit(), 1 << 20);
        assert_eq!(store.writeback_batch_size(), 16);
        assert_eq!(store.recomp_algorithms(), vec![(2, "lz4")]);
    }

    #[test]
    fn says_why_it_makes_no_store() {
        let f = factory(&[]);
        let lz4 = |params: &str| Settings {
            comp: Algorithm::Lz4,
            comp_params: params.into(),
            ..f.defaults()
        };
        let e = f.make(&lz4(""), 2 << 30).unwrap_err();
        assert!(matches!(e, FactoryError::TooLarge { .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            format!("{} bytes is more than 1G", 2u64 << 30)
        );
        let e = f.make(&lz4("level=0"), 1 << 20).unwrap_err();
        assert!(
            matches!(
                e,
                FactoryError::Setting {
                    flag: "algorithm_params",
                    ..
                }
            ) && e.is_usage(),
            "{e:?}"
        );
        assert!(e.to_string().contains("level"), "{e}");
        let settings = Settings {
            recomp: vec![RecompAlgorithm::parse("algo=lz4 priority=1").unwrap()],
            // Checked when the store is made, as the kernel's disksize does.
            recomp_params: ["level=0".into(), String::new(), String::new()],
            ..lz4("")
        };
        let e = f.make(&settings, 1 << 20).unwrap_err();
        assert!(e.to_string().starts_with("algorithm_params: "), "{e}");
    }

    #[test]
    fn policy_flags_need_what_they_act_on() {
        let recompress = PolicyFlags {
            auto_recompress: true,
            ..PolicyFlags::default()
        };
        assert!(matches!(
            recompress.check(false, false),
            Err(FactoryError::NeedsRecompAlgorithm)
        ));
        assert!(recompress.check(true, false).is_ok());
        let near = PolicyFlags {
            writeback_near_limit: Some(80),
            ..PolicyFlags::default()
        };
        assert!(matches!(
            near.check(false, false),
            Err(FactoryError::NeedsBackingDev)
        ));
        let idle: WritebackMode = "idle".parse().unwrap();
        let writeback = PolicyFlags {
            idle_after: Some(60),
            auto_writeback: Some(idle),
            ..PolicyFlags::default()
        };
        assert!(writeback.check(false, true).is_ok());
        let config = writeback.config().unwrap().unwrap();
        assert_eq!(
            config.writeback,
            Some(WritebackRequest {
                mode: idle,
                ranges: Vec::new()
            })
        );
        assert!(PolicyFlags::default().config().unwrap().is_none());
    }
}
