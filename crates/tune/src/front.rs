//! zram or zswap: the same pages through the kernel's other front end of
//! zsmalloc, the zswap model ([`zswap::Zswap`], Linux 7.3), beside zram.
//!
//! For `zmem replay --front zswap`: [`ZswapReplay`] stores every page of
//! the corpus at its index as a swap offset, invalidates the discarded
//! ones, compacts, loads every page back and checks it, with zswap's own
//! counters after each stage ([`zswap_table`]). For `zmem advise`:
//! [`compare`] stores a sample in the kernel's zram (kernel-compat, its
//! default compressor) and in zswap (its compressor, and zram's too, to
//! tell the compressor's share of the difference from the front ends'),
//! and says where the difference comes from and which to use.
//!
//! Owns the zswap settings a run resolves (flags, else the running
//! kernel's parameters, else 7.3's defaults), the zswap side of a replay,
//! the comparison and its words; the model is `zswap`'s, the zram store
//! `zram`'s, the command lines the `zmem` binary's.

use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use zcomp::{Algorithm, Compressor};
use zswap::params::{self, KernelZswap};
use zswap::slab::SlabCache;
use zswap::{Loaded, Zswap, ZswapConfig, ZswapStats};

use crate::corpus::Corpus;
use crate::replay::page_hash;
use recipe::Error;

/// The page size zswap stores.
pub const PAGE: usize = 4096;

/// What a zswap model is made of, and where each value came from.
#[derive(Clone, Debug, Serialize)]
pub struct ZswapSettings {
    /// The compressor (the crypto API's name).
    #[serde(serialize_with = "recipe::spec::algorithm_name")]
    pub(crate) compressor: Algorithm,
    /// Where it came from.
    pub(crate) compressor_source: String,
    /// `totalram_pages()`.
    pub(crate) totalram_pages: u64,
    /// Where the RAM size came from.
    pub(crate) ram_source: String,
    /// `max_pool_percent`.
    pub(crate) max_pool_percent: u32,
    /// `accept_threshold_percent`.
    pub(crate) accept_threshold_percent: u32,
    /// The present CPUs (SLUB's slab orders).
    pub nr_cpus: u32,
    /// The running kernel's zswap parameters, as read.
    pub(crate) kernel: KernelZswap,
}

impl ZswapSettings {
    /// Settings from the flags (`--zswap-comp`, `--ram` in bytes,
    /// `--max-pool-percent`, `--accept-threshold-percent`), else the
    /// running kernel's parameters (`/sys/module/zswap/parameters`,
    /// `MemTotal`), else Linux 7.3's defaults.
    pub fn resolve(
        comp: Option<&str>,
        ram: Option<u64>,
        max_pool_percent: Option<u32>,
        accept_threshold_percent: Option<u32>,
    ) -> Result<ZswapSettings, Error> {
        let kernel = KernelZswap::running();
        let (name, compressor_source) = match (comp, &kernel.compressor) {
            (Some(c), _) => (c.to_string(), "--zswap-comp".to_string()),
            (None, Some(c)) => (c.clone(), format!("{}/compressor", params::PARAMETERS)),
            (None, None) => (
                params::DEFAULT_COMPRESSOR.to_string(),
                "Linux 7.3's CONFIG_ZSWAP_COMPRESSOR_DEFAULT".to_string(),
            ),
        };
        let compressor = params::compressor(&name).map_err(Error::Usage)?;
        let (totalram_pages, ram_source) = match ram {
            Some(bytes) => (bytes / PAGE as u64, "--ram".to_string()),
            None => match params::totalram_pages() {
                Some(p) => (p, "this machine's MemTotal".to_string()),
                None => {
                    return Err(Error::Failed(
                        "no --ram given and /proc/meminfo has no MemTotal".into(),
                    ))
                }
            },
        };
        if totalram_pages == 0 {
            return Err(Error::Usage("--ram: less than a page".into()));
        }
        let percent = |given: Option<u32>, read: Option<u32>, default: u32, name: &str| {
            let v = given.or(read).unwrap_or(default);
            if v > 100 {
                Err(Error::Usage(format!("--{name} {v}: at most 100")))
            } else {
                Ok(v)
            }
        };
        Ok(ZswapSettings {
            compressor,
            compressor_source,
            totalram_pages,
            ram_source,
            max_pool_percent: percent(
                max_pool_percent,
                kernel.max_pool_percent,
                params::DEFAULT_MAX_POOL_PERCENT,
                "max-pool-percent",
            )?,
            accept_threshold_percent: percent(
                accept_threshold_percent,
                kernel.accept_threshold_percent,
                params::DEFAULT_ACCEPT_THRESHOLD_PERCENT,
                "accept-threshold-percent",
            )?,
            nr_cpus: params::present_cpus(),
            kernel,
        })
    }

    /// The model's configuration.
    pub(crate) fn config(&self) -> ZswapConfig {
        ZswapConfig {
            max_pool_percent: self.max_pool_percent,
            accept_threshold_percent: self.accept_threshold_percent,
            ..ZswapConfig::new(self.compressor, self.totalram_pages, self.nr_cpus)
        }
    }

    /// The line a report starts its zswap part with.
    pub(crate) fn line(&self) -> String {
        format!(
            "zswap (Linux 7.3's mm/zswap.c, modelled): compressor {} ({}), max_pool_percent {} \
             and accept_threshold_percent {} of {:.1} GiB RAM ({}): the pool may take {:.1} MiB, \
             and takes pages again at {:.1} MiB",
            self.compressor.name(),
            self.compressor_source,
            self.max_pool_percent,
            self.accept_threshold_percent,
            self.totalram_pages as f64 * PAGE as f64 / (1u64 << 30) as f64,
            self.ram_source,
            self.config().max_pages() as f64 * PAGE as f64 / 1048576.0,
            self.config().accept_thr_pages() as f64 * PAGE as f64 / 1048576.0,
        )
    }
}

/// zswap's figures after one stage.
#[derive(Clone, Debug, Serialize)]
pub struct ZswapStage {
    /// `fill`, `discard`, `compact`.
    pub name: String,
    /// Every figure.
    pub(crate) stats: ZswapStats,
    /// Bytes of the pages given to the swap path and still in a swap slot.
    pub(crate) orig_data_size: u64,
    /// Seconds the stage took in the model.
    pub(crate) seconds: f64,
}

/// What a load of every page found.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct ZswapVerify {
    /// Pages decompressed from zswap, each checked.
    pub zswap: u64,
    /// Pages from the zero map, each checked.
    pub zero_filled: u64,
    /// Pages on the swap device (refused or written back): not in memory.
    pub swap_device: u64,
    /// Discarded pages: nothing stored.
    pub nothing: u64,
}

/// The zswap side of `zmem replay --front zswap`.
pub struct ZswapReplay {
    model: Zswap,
    hashes: Vec<Option<u64>>,
    seconds: f64,
}

impl ZswapReplay {
    /// An empty model.
    pub fn new(settings: &ZswapSettings) -> Result<ZswapReplay, Error> {
        let model = Zswap::new(settings.config()).map_err(|e| Error::Failed(e.to_string()))?;
        Ok(ZswapReplay {
            model,
            hashes: Vec::new(),
            seconds: 0.0,
        })
    }

    /// Stores every page of `corpus` (4 KiB pages), page `i` at swap
    /// offset `i`.
    pub fn fill(&mut self, corpus: &Corpus) -> Result<(), Error> {
        let model = &mut self.model;
        let hashes = &mut self.hashes;
        let mut seconds = 0.0;
        corpus.for_each_page(PAGE, |i, page| {
            if hashes.len() <= i as usize {
                hashes.resize(i as usize + 1, None);
            }
            hashes[i as usize] = Some(page_hash(page));
            let t = Instant::now();
            model
                .store(i, page)
                .map_err(|e| Error::Failed(format!("zswap: store of page {i}: {e}")))?;
            seconds += t.elapsed().as_secs_f64();
            Ok(())
        })?;
        self.seconds += seconds;
        Ok(())
    }

    /// Invalidates `pages` (the swap slots freed), in order.
    pub fn discard(&mut self, pages: &[u64]) -> Result<(), Error> {
        let t = Instant::now();
        for &p in pages {
            self.model
                .invalidate(p)
                .map_err(|e| Error::Failed(format!("zswap: invalidate of page {p}: {e}")))?;
            if let Some(h) = self.hashes.get_mut(p as usize) {
                *h = None;
            }
        }
        self.seconds += t.elapsed().as_secs_f64();
        Ok(())
    }

    /// Compacts the pool.
    pub fn compact(&mut self) {
        let t = Instant::now();
        self.model.compact();
        self.seconds += t.elapsed().as_secs_f64();
    }

    /// The figures now, under `name`.
    pub fn snapshot(&mut self, name: &str) -> ZswapStage {
        let held = self.hashes.iter().filter(|h| h.is_some()).count() as u64;
        let stage = ZswapStage {
            name: name.to_string(),
            stats: self.model.stats(),
            orig_data_size: held * PAGE as u64,
            seconds: self.seconds,
        };
        self.seconds = 0.0;
        stage
    }

    /// Loads every page (zswap's loads free the entries) and checks those
    /// held in memory against the pages stored.
    pub fn verify(&mut self) -> Result<ZswapVerify, Error> {
        let mut out = ZswapVerify::default();
        let mut buf = vec![0u8; PAGE];
        let mut bad = Vec::new();
        for (i, want) in self.hashes.iter().enumerate() {
            let from = self
                .model
                .load(i as u64, &mut buf)
                .map_err(|e| Error::Failed(format!("zswap: load of page {i}: {e}")))?;
            match from {
                Loaded::Zswap => out.zswap += 1,
                Loaded::ZeroFilled => out.zero_filled += 1,
                Loaded::SwapDevice => out.swap_device += 1,
                Loaded::Nothing => out.nothing += 1,
            }
            let checked = matches!(from, Loaded::Zswap | Loaded::ZeroFilled);
            let wrong = match want {
                Some(h) => checked && page_hash(&buf) != *h,
                None => from != Loaded::Nothing,
            };
            if wrong {
                bad.push(i);
            }
        }
        if bad.is_empty() {
            Ok(out)
        } else {
            Err(Error::Failed(format!(
                "zswap: {} pages read back wrong (first: {:?})",
                bad.len(),
                &bad[..bad.len().min(5)]
            )))
        }
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / 1048576.0
}

/// What the rows of [`zswap_table`] mean.
pub const ZSWAP_ROW_DEFINITIONS: &str = "\
ROWS OF THE ZSWAP TABLE (--front zswap)
  pool_limit_hit .. stored_incompressible_pages: the files of /sys/kernel/debug/zswap
  swpout_zero, zswpout, zswpwb, pswpout: /proc/vmstat's events (zero-filled pages go to
  the swap table's zero map and never reach zswap; pswpout: pages to the swap device)
  compressed bytes: the stored objects' lengths (memory.stat's zswap)
  zswap_entry, zs_handle, radix_tree_node: the metadata's slabs, packed full, apart
  from pool_total_size (the kernel counts them in Slab)
  memory: pool_total_size + the metadata
  ratio: the bytes of the pages held in memory (not on the swap device) per byte of memory";

/// A row of [`zswap_table`]: its name and its value at a stage.
type Row = (&'static str, fn(&ZswapStage) -> String);

/// zswap's table: one column per stage.
pub fn zswap_table(settings: &ZswapSettings, stages: &[ZswapStage]) -> String {
    let rows: Vec<Row> = vec![
        (
            "pool_limit_hit",
            (|s| s.stats.debugfs.pool_limit_hit.to_string()),
        ),
        (
            "reject_reclaim_fail",
            (|s| s.stats.debugfs.reject_reclaim_fail.to_string()),
        ),
        (
            "reject_alloc_fail",
            (|s| s.stats.debugfs.reject_alloc_fail.to_string()),
        ),
        (
            "reject_kmemcache_fail",
            (|s| s.stats.debugfs.reject_kmemcache_fail.to_string()),
        ),
        (
            "reject_compress_fail",
            (|s| s.stats.debugfs.reject_compress_fail.to_string()),
        ),
        (
            "reject_compress_poor",
            (|s| s.stats.debugfs.reject_compress_poor.to_string()),
        ),
        (
            "decompress_fail",
            (|s| s.stats.debugfs.decompress_fail.to_string()),
        ),
        (
            "written_back_pages",
            (|s| s.stats.debugfs.written_back_pages.to_string()),
        ),
        (
            "pool_total_size",
            (|s| s.stats.debugfs.pool_total_size.to_string()),
        ),
        (
            "stored_pages",
            (|s| s.stats.debugfs.stored_pages.to_string()),
        ),
        (
            "stored_incompressible_pages",
            (|s| s.stats.debugfs.stored_incompressible_pages.to_string()),
        ),
        ("swpout_zero", (|s| s.stats.vmstat.swpout_zero.to_string())),
        ("zswpout", (|s| s.stats.vmstat.zswpout.to_string())),
        ("zswpwb", (|s| s.stats.vmstat.zswpwb.to_string())),
        ("pswpout", (|s| s.stats.vmstat.pswpout.to_string())),
        (
            "compressed bytes",
            (|s| s.stats.compressed_bytes.to_string()),
        ),
        (
            "zswap_entry",
            (|s| s.stats.metadata.zswap_entry_bytes.to_string()),
        ),
        (
            "zs_handle",
            (|s| s.stats.metadata.zs_handle_bytes.to_string()),
        ),
        (
            "radix_tree_node",
            (|s| s.stats.metadata.xa_node_bytes.to_string()),
        ),
        ("memory", (|s| s.stats.memory_bytes().to_string())),
        (
            "ratio",
            (|s| {
                let held = s
                    .orig_data_size
                    .saturating_sub(s.stats.swap_device_pages * PAGE as u64);
                match s.stats.memory_bytes() {
                    0 => "-".to_string(),
                    m => format!("{:.2}", held as f64 / m as f64),
                }
            }),
        ),
        ("store time", (|s| format!("{:.2}s", s.seconds))),
    ];
    let width = 12;
    let mut out = format!(
        "{}\n== zswap/{} ==\n{:28}",
        settings.line(),
        settings.compressor.name(),
        ""
    );
    for s in stages {
        out.push_str(&format!(" {:>width$}", s.name));
    }
    out.push('\n');
    for (name, f) in &rows {
        out.push_str(&format!("{name:28}"));
        for s in stages {
            out.push_str(&format!(" {:>width$}", f(s)));
        }
        out.push('\n');
    }
    out
}

/// The memory of zram's metadata outside `mem_used_total`: the slot table
/// (16 bytes a slot, `vzalloc`'d for the disk's pages, whole pages) and a
/// `zs_handle` for every object (every page stored but the same-filled).
pub(crate) fn zram_metadata_bytes(disk_pages: u64, objects: u64, nr_cpus: u32) -> u64 {
    (disk_pages * 16).next_multiple_of(PAGE as u64)
        + SlabCache::zs_handle(nr_cpus).bytes_for(objects)
}

/// One line for a stage: zswap's memory beside the kernel's zram's
/// (`mem_used_total` of its kernel-compat store, and its metadata) for the
/// same pages.
pub fn beside_line(
    stage: &ZswapStage,
    zram_label: &str,
    zram: &zram::MmStat,
    disk_pages: u64,
    nr_cpus: u32,
) -> String {
    let zs = &stage.stats;
    let objects = (zram.orig_data_size / PAGE as u64).saturating_sub(zram.same_pages);
    let zram_meta = zram_metadata_bytes(disk_pages, objects, nr_cpus);
    let zram_total = zram.mem_used_total + zram_meta;
    let how = if zram_total == 0 {
        "nothing held by either".to_string()
    } else {
        let pct = (zs.memory_bytes() as f64 / zram_total as f64 - 1.0) * 100.0;
        if pct >= 0.0 {
            format!("{pct:.1}% more than")
        } else {
            format!("{:.1}% less than", -pct)
        }
    };
    let device = if zs.swap_device_pages > 0 {
        format!(
            ", {} pages on the swap device ({} written back, {} refused)",
            zs.swap_device_pages,
            zs.debugfs.written_back_pages,
            zs.vmstat.pswpout - zs.debugfs.written_back_pages
        )
    } else {
        String::new()
    };
    format!(
        "zswap after {}: {:.1} MiB (pool_total_size {:.1} + metadata {:.1}){device}, {how} zram \
         {zram_label}'s {:.1} MiB (mem_used_total {:.1} + slot table and handles {:.1})\n",
        stage.name,
        mib(zs.memory_bytes()),
        mib(zs.debugfs.pool_total_size),
        mib(zs.metadata.total_bytes),
        mib(zram_total),
        mib(zram.mem_used_total),
        mib(zram_meta),
    )
}

/// One front end's memory for the compared pages.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct FrontMemory {
    /// `zram` or `zswap`.
    pub front: String,
    /// The compressor.
    #[serde(serialize_with = "recipe::spec::algorithm_name")]
    pub comp: Algorithm,
    /// The allocator's pages: `mem_used_total`, `pool_total_size`.
    pub pool_bytes: u64,
    /// The compressed bytes.
    pub compressed_bytes: u64,
    /// The metadata outside the pool.
    pub metadata_bytes: u64,
    /// The two together.
    pub total_bytes: u64,
    /// The same for the whole input (scaled per page from the sample).
    pub predicted_total_bytes: u64,
}

/// One part of the difference between zswap's memory and zram's.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct DifferencePart {
    /// What it comes from.
    pub what: String,
    /// zswap's bytes minus zram's, for the sample (negative: zswap uses
    /// less).
    pub bytes: i64,
}

/// zram against zswap for one set of pages, and which to use.
#[derive(Clone, Debug, Serialize)]
pub struct FrontComparison {
    /// The zswap settings.
    pub(crate) zswap_settings: ZswapSettings,
    /// Pages compared.
    pub(crate) pages: u64,
    /// Pages the whole input has.
    pub(crate) input_pages: u64,
    /// Zero-filled pages (neither front end stores them).
    pub(crate) zero_pages: u64,
    /// Pages of one repeated non-zero word: zram keeps them without
    /// memory, zswap compresses them.
    pub(crate) same_filled_nonzero_pages: u64,
    /// Pages zswap keeps as-is (a page that does not compress below a
    /// page).
    pub(crate) zswap_incompressible_pages: u64,
    /// The kernel's zram (kernel-compat, its default compressor, a disk
    /// the size of the pages).
    pub(crate) zram: FrontMemory,
    /// zswap with its compressor.
    pub(crate) zswap: FrontMemory,
    /// zswap with zram's compressor (how much of the difference is the
    /// compressor's).
    pub(crate) zswap_with_zram_comp: FrontMemory,
    /// Where zswap's total differs from zram's.
    pub(crate) difference: Vec<DifferencePart>,
    /// The input's pages beyond `max_pool_percent` at zswap's measured
    /// memory per page: they would go to the swap device.
    pub(crate) pages_beyond_pool_limit: u64,
    /// The recommendation: `zram` or `zswap`.
    pub(crate) recommend: String,
    /// Its reason.
    pub(crate) reason: String,
}

/// zram's and zswap's memory for `pages` (4 KiB each) of an input of
/// `input_pages`. The zswap model runs without a pool limit (100% of a RAM
/// as large as the pages), so the memory per page is measured whole; the
/// limit is applied to the whole input's prediction after.
/// `swap_device`: whether the machine has a disk swap device zswap can sit
/// in front of (`None`: not known, for files).
pub fn compare(
    pages: &[u8],
    input_pages: u64,
    zram_comp: Algorithm,
    settings: &ZswapSettings,
    swap_device: Option<bool>,
) -> Result<FrontComparison, Error> {
    let n = (pages.len() / PAGE) as u64;
    if n == 0 {
        return Err(Error::Failed(
            "no pages to compare zram and zswap on".into(),
        ));
    }
    let scale = input_pages.max(n) as f64 / n as f64;
    let failed = |e: &dyn std::fmt::Display| Error::Failed(format!("zram or zswap: {e}"));
    // zram: kernel-compat, its default compressor.
    let pool =
        zsmalloc::Pool::new(zsmalloc::PoolConfig::kernel_compat()).map_err(|e| failed(&e))?;
    let store = zram::Store::new(
        Arc::new(pool),
        Compressor::with_defaults(zram_comp).kernel_compat(),
        n,
    )
    .map_err(|e| failed(&e))?;
    let (mut zero_pages, mut same_nonzero) = (0, 0);
    for (i, page) in pages.chunks(PAGE).enumerate() {
        store.write_page(i as u64, page).map_err(|e| failed(&e))?;
        match zram::same_filled(page) {
            Some(0) => zero_pages += 1,
            Some(_) => same_nonzero += 1,
            None => {}
        }
    }
    let mm = store.mm_stat();
    drop(store);
    let objects = n - mm.same_pages;
    let zram_meta = zram_metadata_bytes(n, objects, settings.nr_cpus);
    let zram = FrontMemory {
        front: "zram".into(),
        comp: zram_comp,
        pool_bytes: mm.mem_used_total,
        compressed_bytes: mm.compr_data_size,
        metadata_bytes: zram_meta,
        total_bytes: mm.mem_used_total + zram_meta,
        predicted_total_bytes: ((mm.mem_used_total + zram_meta) as f64 * scale).round() as u64,
    };
    // zswap, unlimited, with its compressor and with zram's.
    let run = |comp: Algorithm| -> Result<(FrontMemory, ZswapStats), Error> {
        let config = ZswapConfig {
            max_pool_percent: 100,
            ..ZswapConfig::new(comp, n.max(1) * 64, settings.nr_cpus)
        };
        let mut model = Zswap::new(config).map_err(|e| failed(&e))?;
        for (i, page) in pages.chunks(PAGE).enumerate() {
            model.store(i as u64, page).map_err(|e| failed(&e))?;
        }
        let s = model.stats();
        Ok((
            FrontMemory {
                front: "zswap".into(),
                comp,
                pool_bytes: s.debugfs.pool_total_size,
                compressed_bytes: s.compressed_bytes,
                metadata_bytes: s.metadata.total_bytes,
                total_bytes: s.memory_bytes(),
                predicted_total_bytes: (s.memory_bytes() as f64 * scale).round() as u64,
            },
            s,
        ))
    };
    let (zswap, stats) = run(settings.compressor)?;
    let (same_comp, _) = if settings.compressor == zram_comp {
        (zswap.clone(), stats)
    } else {
        run(zram_comp)?
    };
    let d = |a: u64, b: u64| a as i64 - b as i64;
    let mut difference = Vec::new();
    if settings.compressor != zram_comp {
        difference.push(DifferencePart {
            what: format!(
                "the compressor: zswap's {} against zram's {}",
                settings.compressor.name(),
                zram_comp.name()
            ),
            bytes: d(zswap.total_bytes, same_comp.total_bytes),
        });
    }
    difference.push(DifferencePart {
        what: format!(
            "the pool with the same compressor: zswap compresses the {same_nonzero} pages of one \
             repeated non-zero word that zram keeps without memory"
        ),
        bytes: d(same_comp.pool_bytes, zram.pool_bytes),
    });
    difference.push(DifferencePart {
        what: "the metadata: zswap's zswap_entry (56 bytes), handle and xarray nodes per page \
               against zram's 16-byte slot and handle"
            .into(),
        bytes: d(same_comp.metadata_bytes, zram.metadata_bytes),
    });
    // The input at zswap's memory per page against the pool limit.
    let per_page = zswap.total_bytes as f64 / n as f64;
    let limit_bytes = settings.config().max_pages() as f64 * PAGE as f64;
    let input = input_pages.max(n);
    let held = if per_page > 0.0 {
        ((limit_bytes / per_page).floor() as u64).min(input)
    } else {
        input
    };
    let pages_beyond_pool_limit = input - held;
    let pct = (zswap.total_bytes as f64 / zram.total_bytes.max(1) as f64 - 1.0) * 100.0;
    let largest = difference
        .iter()
        .max_by_key(|p| p.bytes.unsigned_abs())
        .map(|p| p.what.clone())
        .unwrap_or_default();
    let (recommend, reason) = if swap_device == Some(false) {
        (
            "zram",
            format!(
                "zswap needs a swap device on disk to sit in front of, and this machine has none; \
                 zram is one in RAM (zswap would use {pct:+.1}% against zram for these pages)"
            ),
        )
    } else if pct > 2.0 {
        (
            "zram",
            format!("zram uses {pct:.1}% less memory for these pages; most of it: {largest}"),
        )
    } else if pct < -2.0 {
        (
            "zswap",
            format!(
                "zswap uses {:.1}% less memory for these pages; most of it: {largest}; it needs a \
                 swap device, and writes its oldest pages back there at max_pool_percent",
                -pct
            ),
        )
    } else if swap_device == Some(true) {
        (
            "zswap",
            format!(
                "the two are within {:.1}% for these pages, and with this machine's swap device \
                 zswap writes its oldest pages back at max_pool_percent instead of holding them",
                pct.abs()
            ),
        )
    } else {
        (
            "zram",
            format!(
                "the two are within {:.1}% for these pages, and zram needs no swap device",
                pct.abs()
            ),
        )
    };
    Ok(FrontComparison {
        zswap_settings: settings.clone(),
        pages: n,
        input_pages: input,
        zero_pages,
        same_filled_nonzero_pages: same_nonzero,
        zswap_incompressible_pages: stats.debugfs.stored_incompressible_pages,
        zram,
        zswap,
        zswap_with_zram_comp: same_comp,
        difference,
        pages_beyond_pool_limit,
        recommend: recommend.into(),
        reason,
    })
}

/// The comparison in words: the memory of each, where the difference comes
/// from, the limit and the recommendation.
pub(crate) fn format_comparison(c: &FrontComparison) -> String {
    let mut out =
        String::from("zram or zswap, for the sampled pages (the kernel's compressors):\n");
    let one = |m: &FrontMemory, what: &str| {
        format!(
            "  {:5} {:8} {:8.1} MiB ({what} {:.1} + metadata {:.1}; compressed {:.1}); the \
             input: {:.1} MiB\n",
            m.front,
            m.comp.name(),
            mib(m.total_bytes),
            mib(m.pool_bytes),
            mib(m.metadata_bytes),
            mib(m.compressed_bytes),
            mib(m.predicted_total_bytes)
        )
    };
    out.push_str(&one(&c.zram, "mem_used_total"));
    out.push_str(&one(&c.zswap, "pool_total_size"));
    if c.zswap.comp != c.zram.comp {
        out.push_str(&one(&c.zswap_with_zram_comp, "pool_total_size"));
    }
    out.push_str(&format!(
        "  pages: {} ({} zero-filled: stored by neither; {} same-filled non-zero; {} kept as-is \
         by zswap)\n",
        c.pages, c.zero_pages, c.same_filled_nonzero_pages, c.zswap_incompressible_pages
    ));
    out.push_str("  zswap minus zram, by cause:\n");
    for p in &c.difference {
        out.push_str(&format!(
            "    {:+8.1} MiB  {}\n",
            p.bytes as f64 / 1048576.0,
            p.what
        ));
    }
    let s = &c.zswap_settings;
    if c.pages_beyond_pool_limit > 0 {
        out.push_str(&format!(
            "  max_pool_percent {} of {:.1} GiB: zswap would hold {} of the input's {} pages, the \
             other {} on the swap device\n",
            s.max_pool_percent,
            s.totalram_pages as f64 * PAGE as f64 / (1u64 << 30) as f64,
            c.input_pages - c.pages_beyond_pool_limit,
            c.input_pages,
            c.pages_beyond_pool_limit
        ));
    }
    out.push_str(&format!("  use {}: {}\n", c.recommend, c.reason));
    out
}

/// `max_pool_percent` for a pool that holds `needed_bytes` (the pages'
/// zswap memory), at most `target_share` of `ram_bytes`, in whole percent
/// (at least 1).
pub(crate) fn max_pool_percent_for(needed_bytes: u64, ram_bytes: u64, target_share: f64) -> u32 {
    let share = (needed_bytes as f64 / ram_bytes.max(1) as f64).min(target_share);
    ((share * 100.0).ceil() as u32).clamp(1, 100)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zram_metadata_counts_the_table_and_handles() {
        // 1000 slots: 16000 bytes, four pages; 900 objects: two handle
        // pages (512 a page).
        assert_eq!(zram_metadata_bytes(1000, 900, 2), 4 * 4096 + 2 * 4096);
    }

    fn settings() -> ZswapSettings {
        ZswapSettings {
            compressor: Algorithm::Lzo,
            compressor_source: "test".into(),
            totalram_pages: 1 << 18,
            ram_source: "test".into(),
            max_pool_percent: 20,
            accept_threshold_percent: 90,
            nr_cpus: 2,
            kernel: KernelZswap::read(std::path::Path::new("/nonexistent")),
        }
    }

    /// 10 zero pages, 5 of one non-zero byte, 20 of text.
    fn pages() -> Vec<u8> {
        let mut v = vec![0u8; 10 * PAGE];
        v.extend(std::iter::repeat_n(0xa5u8, 5 * PAGE));
        for i in 0..20 * PAGE {
            // 29 bytes a period: no page is one repeated word.
            v.push(b"zram or zswap, page by page. "[(i * 3 + i / PAGE) % 29]);
        }
        v
    }

    #[test]
    fn the_comparison_counts_the_pages_and_its_parts_add_up() {
        let c = compare(&pages(), 35, Algorithm::Lz4, &settings(), None).unwrap();
        assert_eq!(
            (c.pages, c.zero_pages, c.same_filled_nonzero_pages),
            (35, 10, 5)
        );
        assert_eq!(c.zswap.comp, Algorithm::Lzo);
        assert_eq!(c.zswap_with_zram_comp.comp, Algorithm::Lz4);
        let parts: i64 = c.difference.iter().map(|p| p.bytes).sum();
        assert_eq!(
            parts,
            c.zswap.total_bytes as i64 - c.zram.total_bytes as i64
        );
        // zswap stores the five same-filled pages; zram keeps none of them.
        assert!(c.zswap_with_zram_comp.compressed_bytes > c.zram.compressed_bytes);
        // The whole input is the sample: nothing scaled.
        assert_eq!(c.zram.predicted_total_bytes, c.zram.total_bytes);
        assert!(["zram", "zswap"].contains(&c.recommend.as_str()));
        // No swap device: zram, whatever the memory.
        let c = compare(&pages(), 35, Algorithm::Lz4, &settings(), Some(false)).unwrap();
        assert_eq!(c.recommend, "zram");
        assert!(c.reason.contains("swap device"), "{}", c.reason);
        // An input 100 times the sample, and a pool limit it passes.
        let mut small = settings();
        small.totalram_pages = 100;
        let c = compare(&pages(), 3500, Algorithm::Lz4, &small, None).unwrap();
        assert!(c.pages_beyond_pool_limit > 0 && c.pages_beyond_pool_limit < 3500);
        assert!(format_comparison(&c).contains("on the swap device"));
    }

    #[test]
    fn pool_percent_follows_the_need_and_the_cap() {
        let gib = 1u64 << 30;
        assert_eq!(max_pool_percent_for(gib / 10, gib, 0.25), 10);
        assert_eq!(max_pool_percent_for(gib, gib, 0.25), 25);
        assert_eq!(max_pool_percent_for(0, gib, 0.25), 1);
    }
}
