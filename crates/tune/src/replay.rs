//! The replay engine: real data through one or more stores, stage by
//! stage, with the kernel's statistics after each.
//!
//! Stages: **fill** (every page of the corpus written in disk order), then
//! optionally **discard** (pages picked with a seeded generator, or listed),
//! then optionally **compact**, then the work zram does after a page is
//! stored, each optional: **mark-idle** (`idle all` or `idle SECONDS`),
//! **recompress** (with the secondary compressors set before the fill) and
//! **writeback** (to a backing file per store, set before the fill), then a
//! **verify** pass that reads every page back, from memory or from the
//! backing file, and checks it against the hash taken when it was written
//! (discarded pages must read as zeros). Each configuration gets its own store;
//! configurations that share a page size are fed from one read of the
//! corpus, each on its own thread. [`Replay`] is the engine `zmem replay`,
//! `zmem exp chain` and `zmem exp merge` run; [`stage_table`] prints a stage.
//! A store's background compactor (on by default in default mode) is held
//! while a stage runs and works between stages: each snapshot waits until it
//! is idle, so a stage's figures include what it freed on its own.
//!
//! Owns the stage sequence and its figures; the store is `zram`'s, the
//! command line is the `zmem` binary's.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;
use zram::{
    AutoCompactStats, BdStat, IdleCutoff, IoStat, MmStat, RecompressRequest, Store, StoreError,
    WritebackRequest,
};

use crate::corpus::Corpus;
use crate::rng::Rng;
use recipe::spec::StoreSpec;
use recipe::Error;

/// One configuration's figures after one stage.
#[derive(Clone, Debug, Serialize)]
pub struct StageResult {
    /// The configuration's label.
    pub config: String,
    /// `mm_stat`.
    pub mm_stat: MmStat,
    /// `io_stat`.
    pub io_stat: IoStat,
    /// The class-merging patch's overhead ratio,
    /// (mem_used_total - compr) / compr.
    pub(crate) overhead_ratio: f64,
    /// Live allocator objects per allocator page.
    pub(crate) objs_per_page: f64,
    /// Seconds the stage's store calls took on this configuration's thread.
    pub(crate) seconds: f64,
    /// The background compactor's counters so far, when it is on (the
    /// figures are taken once it has dealt with the stage's frees).
    pub auto_compact: Option<AutoCompactStats>,
    /// `bd_stat`, when the store has a backing file.
    pub bd_stat: Option<BdStat>,
    /// What the stage's own action counted, by name (mark-idle: `marked`;
    /// recompress: `chosen`, `recompressed`, `incompressible`; writeback:
    /// `chosen`, `written`, `failed`); empty for the other stages.
    pub(crate) pages: BTreeMap<&'static str, u64>,
    /// The error the stage's action ended with on this store (writeback
    /// stops at a full backing file, say), if any: the pages it dealt with
    /// before stay dealt with.
    pub error: Option<String>,
}

/// One store's writeback settings, as its sysfs-named attributes show them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct WritebackSettings {
    /// `writeback_compressed`: pages go to the backing store as their
    /// compressed objects, packed into blocks.
    pub(crate) writeback_compressed: bool,
    /// `writeback_batch_size`: pages (blocks) written with one call.
    pub(crate) writeback_batch_size: usize,
}

/// All configurations after one stage.
#[derive(Clone, Debug, Serialize)]
pub struct Stage {
    /// `fill`, `discard`, `compact`, ...
    pub name: String,
    /// One per configuration, in order.
    pub results: Vec<StageResult>,
}

/// A 64-bit page fingerprint for verification (not cryptographic; it only
/// has to catch a wrong or corrupted page).
pub(crate) fn page_hash(page: &[u8]) -> u64 {
    let mut h = 0x243f_6a88_85a3_08d3u64 ^ page.len() as u64;
    for w in page.chunks(8) {
        let mut b = [0u8; 8];
        b[..w.len()].copy_from_slice(w);
        h = (h ^ u64::from_le_bytes(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        h ^= h >> 29;
    }
    h
}

/// Stores of one page size, fed from one read of the corpus.
struct Group {
    page_size: usize,
    /// Indexes into `Replay::specs`.
    members: Vec<usize>,
    /// Expected hash of every page (None: discarded).
    hashes: Vec<Option<u64>>,
}

/// The engine: stores for a list of configurations over one corpus.
pub struct Replay {
    specs: Vec<StoreSpec>,
    stores: Vec<Store>,
    groups: Vec<Group>,
    corpus: Corpus,
    progress: bool,
    /// Store time of the current stage, per configuration.
    seconds: Vec<f64>,
    /// Page counts of the current stage's action, per configuration.
    pages: Vec<BTreeMap<&'static str, u64>>,
    /// The current stage's error, per configuration.
    errors: Vec<Option<String>>,
}

impl Replay {
    /// Stores for `specs`, each sized for `corpus`.
    pub fn new(specs: Vec<StoreSpec>, corpus: Corpus, progress: bool) -> Result<Replay, Error> {
        let mut groups: Vec<Group> = Vec::new();
        let mut stores = Vec::new();
        for (i, spec) in specs.iter().enumerate() {
            // A store's pages are its blocks: the compression unit.
            let block = spec.block_size();
            let pages = corpus.pages(block);
            stores.push(spec.open(pages.max(1) * block as u64)?);
            match groups.iter_mut().find(|g| g.page_size == block) {
                Some(g) => g.members.push(i),
                None => groups.push(Group {
                    page_size: block,
                    members: vec![i],
                    hashes: vec![None; pages as usize],
                }),
            }
        }
        let seconds = vec![0.0; specs.len()];
        let pages = vec![BTreeMap::new(); specs.len()];
        let errors = vec![None; specs.len()];
        Ok(Replay {
            specs,
            stores,
            groups,
            corpus,
            progress,
            seconds,
            pages,
            errors,
        })
    }

    /// Sets the secondary compressors of every store (`recomp_algorithm`,
    /// `"algo=NAME priority=N"` each); before the fill, as the kernel
    /// allows only before the disk holds data.
    pub fn set_recomp_algorithms(&mut self, algorithms: &[String]) -> Result<(), Error> {
        for (spec, store) in self.specs.iter().zip(&self.stores) {
            for a in algorithms {
                store.set_recomp_algorithm(a).map_err(|e| {
                    Error::Usage(format!("--recomp-algorithm {a:?}: {}: {e}", spec.label()))
                })?;
            }
        }
        Ok(())
    }

    /// Sets `writeback_compressed` of each store, one value per
    /// configuration in order (before the fill, as the kernel allows it
    /// only before the disk holds data). A store with it on is labelled
    /// with `/wb-compressed` after its configuration.
    pub fn set_writeback_compressed(&mut self, on: &[bool]) -> Result<(), Error> {
        for ((spec, store), &on) in self.specs.iter().zip(&self.stores).zip(on) {
            store.set_writeback_compressed(on).map_err(|e| {
                Error::Usage(format!("--writeback-compressed: {}: {e}", spec.label()))
            })?;
        }
        Ok(())
    }

    /// Each store's writeback settings, in configuration order.
    pub fn writeback_settings(&self) -> Vec<WritebackSettings> {
        self.stores
            .iter()
            .map(|store| WritebackSettings {
                writeback_compressed: store.writeback_compressed(),
                writeback_batch_size: store.writeback_batch_size(),
            })
            .collect()
    }

    /// Sets each store's backing file (`backing_dev`), one path per
    /// configuration in order; before the fill.
    pub fn set_backing_devs(&mut self, paths: &[PathBuf]) -> Result<(), Error> {
        if paths.len() != self.stores.len() {
            return Err(Error::Usage(format!(
                "{} --backing-dev paths for {} configurations (one per configuration, in order)",
                paths.len(),
                self.stores.len()
            )));
        }
        for ((spec, store), path) in self.specs.iter().zip(&self.stores).zip(paths) {
            store.set_backing_dev(path).map_err(|e| {
                Error::Usage(format!(
                    "--backing-dev {}: {}: {e}",
                    path.display(),
                    spec.label()
                ))
            })?;
        }
        Ok(())
    }

    /// Gives every store a backing file of its own disk's size: a sparse
    /// file in `dir`, unlinked as soon as the store has opened it (it lives
    /// as long as the store and leaves nothing behind). Returns the paths
    /// the files had.
    pub fn set_temporary_backing_devs(&mut self, dir: &Path) -> Result<Vec<PathBuf>, Error> {
        let mut paths = Vec::new();
        for (i, (spec, store)) in self.specs.iter().zip(&self.stores).enumerate() {
            let path = dir.join(format!(
                "zmem-replay-backing-{}-{i}.img",
                std::process::id()
            ));
            let made = std::fs::File::create(&path)
                .and_then(|f| f.set_len(store.disk_size()))
                .map_err(|e| Error::Failed(format!("backing file {}: {e}", path.display())));
            let opened = made.and_then(|()| {
                store.set_backing_dev(&path).map_err(|e| {
                    Error::Failed(format!(
                        "backing file {}: {}: {e}",
                        path.display(),
                        spec.label()
                    ))
                })
            });
            // Opened (or failed): the name is no longer needed either way.
            let _ = std::fs::remove_file(&path);
            opened?;
            paths.push(path);
        }
        Ok(paths)
    }

    /// Marks pages idle in every store (`echo all > idle`, `echo N >
    /// idle`).
    pub fn mark_idle(&mut self, cutoff: IdleCutoff) {
        self.hold_compactors();
        for (i, s) in self.stores.iter().enumerate() {
            let t = Instant::now();
            let marked = s.mark_idle(cutoff);
            self.seconds[i] += t.elapsed().as_secs_f64();
            self.pages[i].insert("marked", marked);
        }
    }

    /// Recompresses the pages `request` chooses in every store (`echo
    /// REQUEST > recompress`). Its errors are the request's (no such
    /// priority or algorithm, a threshold too large): usage errors.
    pub fn recompress(&mut self, request: &RecompressRequest) -> Result<(), Error> {
        self.hold_compactors();
        for (i, s) in self.stores.iter().enumerate() {
            let t = Instant::now();
            let r = s.recompress(request).map_err(|e| {
                Error::Usage(format!("--recompress: {}: {e}", self.specs[i].label()))
            })?;
            self.seconds[i] += t.elapsed().as_secs_f64();
            self.pages[i].insert("chosen", r.chosen);
            self.pages[i].insert("recompressed", r.recompressed);
            self.pages[i].insert("incompressible", r.incompressible);
        }
        Ok(())
    }

    /// Writes the pages `request` chooses to every store's backing file
    /// (`echo REQUEST > writeback`); `request` is parsed for each store's
    /// disk. A store's error (a full backing file, say) is kept for its
    /// stage row; the pages written before it stay written.
    pub fn writeback(&mut self, request: &str) -> Result<(), Error> {
        self.hold_compactors();
        for (i, s) in self.stores.iter().enumerate() {
            let req = WritebackRequest::parse(request, s.disk_pages())
                .map_err(|e| Error::Usage(format!("--writeback {request:?}: {e}")))?;
            let t = Instant::now();
            let r = s.writeback(&req);
            self.seconds[i] += t.elapsed().as_secs_f64();
            match r {
                Ok(r) => {
                    self.pages[i].insert("chosen", r.chosen);
                    self.pages[i].insert("written", r.written);
                    self.pages[i].insert("failed", r.failed);
                }
                Err(e @ StoreError::Os { .. }) => self.errors[i] = Some(e.to_string()),
                Err(e) => return Err(Error::Failed(format!("{}: {e}", self.specs[i].label()))),
            }
        }
        Ok(())
    }

    /// The corpus.
    pub fn corpus(&self) -> &Corpus {
        &self.corpus
    }

    /// Writes every page of the corpus into every store.
    pub fn fill(&mut self) -> Result<(), Error> {
        const BATCH: usize = 256;
        self.hold_compactors();
        let total = self.corpus.bytes();
        let mut done_bytes = 0u64;
        let mut last_draw = Instant::now();
        for g in 0..self.groups.len() {
            let ps = self.groups[g].page_size;
            let members = self.groups[g].members.clone();
            let mut batch: Vec<u8> = Vec::with_capacity(BATCH * ps);
            let mut first = 0u64;
            let stores = &self.stores;
            let seconds = &mut self.seconds;
            let hashes = &mut self.groups[g].hashes;
            let mut flush = |batch: &mut Vec<u8>, first: u64| -> Result<(), Error> {
                let times = write_batch(stores, &members, batch, first, ps)?;
                for (m, t) in members.iter().zip(times) {
                    seconds[*m] += t.as_secs_f64();
                }
                batch.clear();
                Ok(())
            };
            self.corpus.for_each_page(ps, |index, page| {
                if batch.is_empty() {
                    first = index;
                }
                hashes[index as usize] = Some(page_hash(page));
                batch.extend_from_slice(page);
                if batch.len() == BATCH * ps {
                    flush(&mut batch, first)?;
                    done_bytes += (BATCH * ps) as u64;
                    if self.progress && last_draw.elapsed() > Duration::from_millis(200) {
                        last_draw = Instant::now();
                        eprint!(
                            "\rfill {ps}-byte pages: {:.1}/{:.1} MiB ",
                            done_bytes.min(total) as f64 / 1048576.0,
                            total as f64 / 1048576.0
                        );
                    }
                }
                Ok(())
            })?;
            if !batch.is_empty() {
                flush(&mut batch, first)?;
            }
            done_bytes = 0;
        }
        if self.progress {
            eprint!("\r{:60}\r", "");
        }
        Ok(())
    }

    /// Pages chosen with probability `fraction` by a generator seeded with
    /// `seed`, for a disk of `page_size` pages, in ascending order.
    pub fn pick(&self, page_size: usize, fraction: f64, seed: u64) -> Vec<u64> {
        let mut rng = Rng::new(seed, page_size as u64);
        (0..self.corpus.pages(page_size))
            .filter(|_| rng.unit() < fraction)
            .collect()
    }

    /// Discards `pages` (indexes for `page_size` stores) in every store of
    /// that page size, in the order given.
    pub fn discard(&mut self, page_size: usize, pages: &[u64]) -> Result<(), Error> {
        let Some(g) = self.groups.iter_mut().find(|g| g.page_size == page_size) else {
            return Ok(());
        };
        for &p in pages {
            if p >= g.hashes.len() as u64 {
                return Err(Error::Usage(format!(
                    "discard of page {p}: the corpus has {} pages of {page_size} bytes",
                    g.hashes.len()
                )));
            }
        }
        let off = zram::AutoCompactPolicy::new(zram::AutoCompactMode::Off);
        for &m in &g.members {
            // Held until the snapshot (see `hold_compactors`).
            let _ = self.stores[m].set_auto_compact(off);
            let t = Instant::now();
            for &p in pages {
                self.stores[m]
                    .discard(p, 1)
                    .map_err(|e| Error::Failed(format!("{}: {e}", self.specs[m].label())))?;
            }
            self.seconds[m] += t.elapsed().as_secs_f64();
        }
        for &p in pages {
            g.hashes[p as usize] = None;
        }
        Ok(())
    }

    /// Holds every store's background compactor until the next
    /// [`Replay::snapshot`], so that it does not run part-way through a
    /// stage at a moment that depends on the machine's speed.
    pub(crate) fn hold_compactors(&self) {
        let off = zram::AutoCompactPolicy::new(zram::AutoCompactMode::Off);
        for s in &self.stores {
            // Turning it off cannot fail.
            let _ = s.set_auto_compact(off);
        }
    }

    /// Page sizes in use.
    pub fn page_sizes(&self) -> Vec<usize> {
        self.groups.iter().map(|g| g.page_size).collect()
    }

    /// Compacts every store.
    pub fn compact(&mut self) {
        self.hold_compactors();
        for (i, s) in self.stores.iter().enumerate() {
            let t = Instant::now();
            s.compact();
            self.seconds[i] += t.elapsed().as_secs_f64();
        }
    }

    /// Figures of every configuration now, under `name`; starts the next
    /// stage's timers.
    ///
    /// A store whose background compactor is on is held during each
    /// stage's store calls (`Replay::hold_compactors`) and let go here,
    /// then given the time to deal with the stage's frees (within its CPU
    /// budget), so the figures are what the store settles at after the
    /// stage, the same every run.
    pub fn snapshot(&mut self, name: &str) -> Stage {
        for (spec, s) in self.specs.iter().zip(&self.stores) {
            if s.auto_compact() != spec.auto_compact {
                // Only turning it back on, which was done once already.
                let _ = s.set_auto_compact(spec.auto_compact);
            }
            // Ten minutes is far more than any corpus needs at 5% of a CPU.
            if !s.wait_auto_compact_idle(Duration::from_secs(600)) {
                eprintln!("warning: background compaction still busy after 10 minutes");
            }
        }
        let results = self
            .specs
            .iter()
            .zip(&self.stores)
            .zip(&mut self.seconds)
            .zip(self.pages.iter_mut().zip(&mut self.errors))
            .map(|(((spec, store), secs), (pages, error))| {
                let mm = store.mm_stat();
                let pool = store.allocator().stats();
                let mut config = spec.label();
                if store.writeback_compressed() {
                    config.push_str("/wb-compressed");
                }
                let r = StageResult {
                    config,
                    mm_stat: mm,
                    io_stat: store.io_stat(),
                    overhead_ratio: mm.overhead_ratio(),
                    objs_per_page: if pool.total_pages == 0 {
                        0.0
                    } else {
                        pool.objects as f64 / pool.total_pages as f64
                    },
                    seconds: *secs,
                    auto_compact: store.debug_stat().auto_compact,
                    bd_stat: (store.backing_dev() != "none").then(|| store.bd_stat()),
                    pages: std::mem::take(pages),
                    error: error.take(),
                };
                *secs = 0.0;
                r
            })
            .collect();
        Stage {
            name: name.to_string(),
            results,
        }
    }

    /// Reads every page of every store back and checks it. Returns the pages
    /// checked per store.
    pub fn verify(&self) -> Result<u64, Error> {
        let mut checked = 0;
        for g in &self.groups {
            let zero = page_hash(&vec![0u8; g.page_size]);
            std::thread::scope(|s| {
                let handles: Vec<_> = g
                    .members
                    .iter()
                    .map(|&m| {
                        let store = &self.stores[m];
                        let label = self.specs[m].label();
                        let hashes = &g.hashes;
                        s.spawn(move || -> Result<(), Error> {
                            let mut buf = vec![0u8; g.page_size];
                            let mut bad = Vec::new();
                            for (i, want) in hashes.iter().enumerate() {
                                store.read_page(i as u64, &mut buf).map_err(|e| {
                                    Error::Failed(format!("{label}: read of page {i}: {e}"))
                                })?;
                                if page_hash(&buf) != want.unwrap_or(zero) {
                                    bad.push(i);
                                }
                            }
                            if bad.is_empty() {
                                Ok(())
                            } else {
                                Err(Error::Failed(format!(
                                    "{label}: {} pages read back wrong (first: {:?})",
                                    bad.len(),
                                    &bad[..bad.len().min(5)]
                                )))
                            }
                        })
                    })
                    .collect();
                handles.into_iter().try_for_each(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(Error::Failed("verify thread panicked".into())))
                })
            })?;
            checked += g.hashes.len() as u64;
        }
        Ok(checked)
    }
}

/// Writes a batch of consecutive pages into each member store, one thread per
/// store when there are several; returns each store's time.
fn write_batch(
    stores: &[Store],
    members: &[usize],
    batch: &[u8],
    first: u64,
    ps: usize,
) -> Result<Vec<Duration>, Error> {
    let one = |m: usize| -> Result<Duration, Error> {
        let t = Instant::now();
        for (k, page) in batch.chunks_exact(ps).enumerate() {
            stores[m]
                .write_page(first + k as u64, page)
                .map_err(|e| Error::Failed(format!("write of page {}: {e}", first + k as u64)))?;
        }
        Ok(t.elapsed())
    };
    if members.len() == 1 {
        return Ok(vec![one(members[0])?]);
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = members.iter().map(|&m| s.spawn(move || one(m))).collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(Error::Failed("writer thread panicked".into())))
            })
            .collect()
    })
}

fn pct(x: f64) -> String {
    format!("{:.2}%", x * 100.0)
}

/// What the rows of [`stage_table`] that are not `mm_stat`'s own columns
/// mean, for the report's help and docs/tune.md.
pub const ROW_DEFINITIONS: &str = "\
ROWS OF EACH STAGE'S TABLE
  orig_data_size .. objs_moved: mm_stat's columns, as zram's sysfs file has them
  ratio: orig_data_size / mem_used_total (the pages' bytes per byte of memory used)
  overhead: mem_used_total / compr_data_size - 1 (what the allocator adds to the
  compressed bytes: class rounding, partly used pages, metadata)
  objs/page: stored objects per page of memory the allocator holds
  store time: seconds the stage took in that store
  auto ...: the background compactor's runs, pages freed, objects moved, CPU and
  longest step (rows shown when it ran; the JSON report has them always)";

/// The table of one stage: one column per configuration.
pub fn stage_table(stage: &Stage) -> String {
    let mut rows: Vec<(&str, Vec<String>)> = vec![
        ("orig_data_size", vec![]),
        ("compr_data_size", vec![]),
        ("mem_used_total", vec![]),
        ("mem_limit", vec![]),
        ("mem_used_max", vec![]),
        ("same_pages", vec![]),
        ("pages_compacted", vec![]),
        ("huge_pages", vec![]),
        ("huge_pages_since", vec![]),
        ("objs_moved", vec![]),
        ("ratio", vec![]),
        ("overhead", vec![]),
        ("objs/page", vec![]),
        ("store time", vec![]),
    ];
    for r in &stage.results {
        let m = r.mm_stat;
        let vals = [
            m.orig_data_size.to_string(),
            m.compr_data_size.to_string(),
            m.mem_used_total.to_string(),
            m.mem_limit.to_string(),
            m.mem_used_max.to_string(),
            m.same_pages.to_string(),
            m.pages_compacted.to_string(),
            m.huge_pages.to_string(),
            m.huge_pages_since.to_string(),
            m.objs_moved.to_string(),
            if m.mem_used_total == 0 {
                "-".to_string()
            } else {
                format!("{:.2}", m.orig_data_size as f64 / m.mem_used_total as f64)
            },
            pct(r.overhead_ratio),
            format!("{:.2}", r.objs_per_page),
            format!("{:.2}s", r.seconds),
        ];
        for (row, v) in rows.iter_mut().zip(vals) {
            row.1.push(v);
        }
    }
    // The background compactor's rows, when it ran in any configuration
    // (the JSON report has them always).
    if stage
        .results
        .iter()
        .any(|r| r.auto_compact.as_ref().is_some_and(|a| a.runs > 0))
    {
        let auto = |f: fn(&AutoCompactStats) -> String| -> Vec<String> {
            stage
                .results
                .iter()
                .map(|r| r.auto_compact.as_ref().map_or("-".to_string(), f))
                .collect()
        };
        rows.push(("auto runs", auto(|a| a.runs.to_string())));
        rows.push(("auto pages freed", auto(|a| a.pages_freed.to_string())));
        rows.push(("auto objs moved", auto(|a| a.objs_moved.to_string())));
        rows.push((
            "auto cpu",
            auto(|a| format!("{:.3}s", a.cpu_ns as f64 / 1e9)),
        ));
        rows.push((
            "auto longest step",
            auto(|a| format!("{}us", a.longest_step_ns / 1000)),
        ));
    }
    let width = stage
        .results
        .iter()
        .map(|r| r.config.len())
        .max()
        .unwrap_or(0)
        .max(12);
    let mut out = format!("== {} ==\n{:18}", stage.name, "");
    for r in &stage.results {
        out.push_str(&format!(" {:>width$}", r.config));
    }
    out.push('\n');
    for (name, vals) in rows {
        out.push_str(&format!("{name:18}"));
        for v in vals {
            out.push_str(&format!(" {v:>width$}"));
        }
        out.push('\n');
    }
    for r in &stage.results {
        out.push_str(&format!("mm_stat {}: {}\n", r.config, r.mm_stat));
        if let Some(bd) = &r.bd_stat {
            out.push_str(&format!("bd_stat {}: {bd}\n", r.config));
        }
        if !r.pages.is_empty() {
            let counts: Vec<String> = r.pages.iter().map(|(k, v)| format!("{k} {v}")).collect();
            out.push_str(&format!(
                "{} {}: pages {}\n",
                stage.name,
                r.config,
                counts.join(", ")
            ));
        }
        if let Some(e) = &r.error {
            out.push_str(&format!("{} {}: error: {e}\n", stage.name, r.config));
        }
    }
    out
}
