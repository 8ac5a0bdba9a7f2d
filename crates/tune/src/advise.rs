//! `zmem advise`: which compressor, level and allocator suit this data, at
//! what speed and for how much memory, measured on this machine.
//!
//! This module owns the measurement and the advice: a seeded sample of the
//! input's pages ([`Sample`]), every candidate compressor run over it on one
//! core each (compress and decompress throughput, the compressed bytes),
//! each candidate's memory in a real store (`mem_used_total` after the
//! sample is written to a default-mode zsmalloc store, and the 4 KiB random
//! read latency there), the allocators compared with the least-memory
//! compressor and the kernel's zram default, what the kernel's zram would
//! use (kernel-compat zsmalloc with the compressor a new device of the
//! kernel takes, [`recipe::kernel`]: the same figure `zmem replay` prints),
//! and primary-plus-recompression pairs for idle pages estimated from the
//! per-page sizes. It reads pages from a [`Corpus`] and never writes
//! anywhere but its own stores.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use hdrhistogram::Histogram;
use serde::Serialize;
use zcomp::{Algorithm, Compressor, Dictionary, Params};
use zsmalloc::Mode;

use crate::corpus::Corpus;
use crate::rng::Rng;
use recipe::spec::StoreSpec;
use recipe::{Error, KernelCompat};

/// Pages a sample takes from one place: runs keep the neighbourhood that
/// real workloads (and compression units, later) see.
pub const RUN_PAGES: u64 = 16;

/// What to measure.
#[derive(Clone, Debug)]
pub struct AdviseOptions {
    /// At most this many pages are measured (a whole number of runs).
    pub sample_pages: u64,
    /// Seed of the sample's choice of runs.
    pub seed: u64,
    /// Worker threads that measure candidates side by side (each candidate
    /// on one of them, so throughput is one core's).
    pub threads: usize,
    /// Random 4 KiB reads timed per candidate.
    pub latency_reads: usize,
    /// The page (and compression unit) size.
    pub page_size: usize,
    /// Draw a progress line on standard error (for a terminal).
    pub progress: bool,
    /// The kernel whose zram "what zram would use" stands for
    /// (`--kernel-comp`, else the running kernel's).
    pub kernel: KernelCompat,
}

impl Default for AdviseOptions {
    fn default() -> Self {
        AdviseOptions {
            sample_pages: 16384,
            seed: 1,
            threads: 2,
            latency_reads: 20_000,
            page_size: 4096,
            progress: false,
            kernel: KernelCompat::running().clone(),
        }
    }
}

/// The pages measured, contiguous.
pub struct Sample {
    /// The pages, `page_size` bytes each.
    pub bytes: Vec<u8>,
    /// Page size.
    pub page_size: usize,
    /// Pages the input has.
    pub input_pages: u64,
    /// How the pages were chosen, in words.
    pub how: String,
    /// Pages for training a zstd dictionary: runs the sample did not take
    /// (about an eighth as many), or, when the sample is the whole input,
    /// every eighth run of it.
    pub training: Vec<u8>,
}

impl Sample {
    /// Pages in the sample.
    pub fn pages(&self) -> usize {
        self.bytes.len() / self.page_size
    }

    fn page(&self, i: usize) -> &[u8] {
        &self.bytes[i * self.page_size..(i + 1) * self.page_size]
    }
}

/// Takes every page of `corpus` if it has at most `opts.sample_pages`, else
/// that many in runs of [`RUN_PAGES`] consecutive pages, the runs chosen
/// uniformly with `opts.seed` in one pass over the input (selection
/// sampling: each run is kept with the probability still needed).
pub fn sample(corpus: &Corpus, opts: &AdviseOptions) -> Result<Sample, Error> {
    let ps = opts.page_size;
    let total = corpus.pages(ps);
    if total == 0 {
        return Err(Error::Failed("the input yields no pages".into()));
    }
    let mut bytes = Vec::new();
    if total <= opts.sample_pages {
        corpus.for_each_page(ps, |_, p| {
            bytes.extend_from_slice(p);
            Ok(())
        })?;
        let run = RUN_PAGES as usize * ps;
        let training = bytes.chunks(run).step_by(8).flatten().copied().collect();
        return Ok(Sample {
            bytes,
            page_size: ps,
            input_pages: total,
            how: format!(
                "all {total} pages of the input (the zstd dictionary is trained on every 8th run \
                 of them, so its figures are optimistic)"
            ),
            training,
        });
    }
    let runs = total.div_ceil(RUN_PAGES);
    let want = (opts.sample_pages / RUN_PAGES).max(1);
    // Training runs come from the runs the sample leaves, an eighth as many
    // (at least four: zstd trains poorly on fewer pages).
    let want_train = (want / 8).max(4).clamp(1, runs - want);
    let mut rng = Rng::new(opts.seed, 0x00ad_f15e);
    let mut training = Vec::new();
    let (mut seen, mut kept, mut seen_left, mut trained) = (0u64, 0u64, 0u64, 0u64);
    let (mut keep_run, mut train_run) = (false, false);
    corpus.for_each_page(ps, |i, p| {
        if i % RUN_PAGES == 0 {
            // Knuth's algorithm S: keep this run with probability
            // (runs still wanted) / (runs not yet seen); a run left out is
            // offered to the training set the same way.
            keep_run = kept < want && rng.unit() * ((runs - seen) as f64) < (want - kept) as f64;
            let left = runs - want;
            train_run = !keep_run
                && trained < want_train
                && rng.unit() * ((left - seen_left) as f64) < (want_train - trained) as f64;
            seen += 1;
            if keep_run {
                kept += 1;
            } else {
                seen_left += 1;
            }
            if train_run {
                trained += 1;
            }
        }
        if keep_run {
            bytes.extend_from_slice(p);
        } else if train_run {
            training.extend_from_slice(p);
        }
        Ok(())
    })?;
    let got = bytes.len() / ps;
    Ok(Sample {
        bytes,
        page_size: ps,
        input_pages: total,
        how: format!(
            "{got} of {total} pages: {kept} runs of {RUN_PAGES} consecutive pages out of {runs}, \
             chosen uniformly with seed {}; the zstd dictionary is trained on {trained} other runs",
            opts.seed
        ),
        training,
    })
}

/// One compressor setting to try.
#[derive(Clone, Debug, Serialize)]
pub struct Candidate {
    /// Algorithm (serialised by the name `--comp` takes).
    #[serde(serialize_with = "recipe::spec::algorithm_name")]
    pub comp: Algorithm,
    /// Level (`level=` of `--comp-params`).
    pub level: i32,
    /// Whether a zstd dictionary trained on the sample is used.
    pub dictionary: bool,
}

impl Candidate {
    pub(crate) fn new(comp: Algorithm, level: i32) -> Candidate {
        Candidate {
            comp,
            level,
            dictionary: false,
        }
    }

    /// `zstd -3`, `lz4hc 9`, `zstd 3 +dict`, `lz4`.
    pub fn label(&self) -> String {
        let algo = self.comp;
        let mut s = algo.name().to_string();
        if algo.level_range().start() != algo.level_range().end() {
            s.push_str(&format!(" {}", self.level));
        }
        if self.dictionary {
            s.push_str(" +dict");
        }
        s
    }

    fn compressor(&self, dict: Option<&Dictionary>) -> Result<Compressor, Error> {
        let algo = self.comp;
        let dict = match dict.filter(|_| self.dictionary) {
            Some(d) if matches!(algo, Algorithm::Lz4 | Algorithm::Lz4Hc) => {
                Some(lz4_dictionary(d)?)
            }
            d => d.cloned(),
        };
        let params = Params {
            level: Some(self.level),
            dict,
            window_bits: None,
        };
        Compressor::new(algo, &params).map_err(|e| Error::Usage(format!("{}: {e}", self.label())))
    }

    /// `--comp-params` for a store with this setting (the dictionary is
    /// not expressible there; the store gets it directly).
    fn store_params(&self) -> String {
        format!("level={}", self.level)
    }
}

/// The candidates `zmem advise` tries by default: zram's algorithms at the
/// levels people use, negative zstd levels, and zstd with a dictionary.
pub fn default_candidates() -> Vec<Candidate> {
    let mut v = vec![
        Candidate::new(Algorithm::LzoRle, 1),
        Candidate::new(Algorithm::Lzo, 1),
        Candidate::new(Algorithm::Lz4, 1),
        Candidate::new(Algorithm::Lz4Hc, 3),
        Candidate::new(Algorithm::Lz4Hc, 9),
        Candidate::new(Algorithm::Zstd, -5),
        Candidate::new(Algorithm::Zstd, -1),
        Candidate::new(Algorithm::Zstd, 1),
        Candidate::new(Algorithm::Zstd, 3),
        Candidate::new(Algorithm::Zstd, 7),
        Candidate::new(Algorithm::Deflate, 1),
        Candidate::new(Algorithm::Deflate, 6),
    ];
    for level in [1, 3] {
        v.push(Candidate {
            dictionary: true,
            ..Candidate::new(Algorithm::Zstd, level)
        });
    }
    v
}

/// What one candidate did on the sample.
#[derive(Clone, Debug, Serialize)]
pub struct CandidateResult {
    /// The setting.
    pub candidate: Candidate,
    /// Its label.
    pub label: String,
    /// Sample bytes over compressed bytes (pages stored raw count whole;
    /// same-filled pages are left out, as zram stores none of their bytes).
    pub ratio: f64,
    /// Compression on one core, MB/s of pages in.
    pub compress_mbps: f64,
    /// Decompression on one core, MB/s of pages out.
    pub decompress_mbps: f64,
    /// `mem_used_total` after the sample is written to a default-mode
    /// zsmalloc store.
    pub mem_used_total: u64,
    /// `compr_data_size` there.
    pub compr_data_size: u64,
    /// The whole input's `mem_used_total` predicted from the sample's:
    /// compressed bytes scaled to the input, plus the overhead fitted as a
    /// fixed part and a part per page (see `fill_and_predict`).
    pub predicted_mem_used_total: u64,
    /// The 95% half-width of the sampling error of the whole-input
    /// compressed bytes, percent: from the spread of the sample's runs
    /// (each run of 16 pages one draw), with the finite-population
    /// correction; 0 when the sample is the whole input.
    pub sampling_error_pct: f64,
    /// Median of random 4 KiB reads from that store, microseconds.
    pub read_p50_us: f64,
    /// 99th percentile of those reads, microseconds.
    pub read_p99_us: f64,
    /// Compressed length of each page (0 for same-filled pages, the page
    /// size for pages the store keeps raw).
    #[serde(skip)]
    pub sizes: Vec<u32>,
}

/// One allocator's memory for one compressor.
#[derive(Clone, Debug, Serialize)]
pub struct AllocatorResult {
    /// The store configuration (`zsmalloc/default/lz4/4K`).
    pub store: String,
    /// The compressor's label.
    pub compressor: String,
    /// `mem_used_total` after the sample is written.
    pub mem_used_total: u64,
    /// `compr_data_size` there.
    pub compr_data_size: u64,
    /// The whole input's `mem_used_total` predicted from the sample's.
    pub predicted_mem_used_total: u64,
}

/// One compression unit (the block compressed whole) for one compressor.
#[derive(Clone, Debug, Serialize)]
pub struct UnitResult {
    /// The unit, bytes.
    pub unit: usize,
    /// The compressor's label.
    pub compressor: String,
    /// `mem_used_total` after the sample is written.
    pub mem_used_total: u64,
    /// The whole input's `mem_used_total` predicted from the sample's.
    pub predicted_mem_used_total: u64,
    /// Median of random 4 KiB reads, microseconds (each decompresses its
    /// whole unit).
    pub read_p50_us: f64,
    /// 99th percentile of those reads, microseconds.
    pub read_p99_us: f64,
}

/// A primary compressor with a stronger one for idle pages.
#[derive(Clone, Debug, Serialize)]
pub struct RecompressionPair {
    /// The primary's label.
    pub primary: String,
    /// The secondary's label.
    pub secondary: String,
    /// Compressed bytes with the primary alone.
    pub primary_bytes: u64,
    /// Compressed bytes once every page is recompressed where the
    /// secondary makes it smaller (every sampled page taken as idle).
    pub recompressed_bytes: u64,
    /// Pages the secondary made smaller.
    pub pages_recompressed: u64,
    /// The secondary's decompression speed, MB/s (what reads of those
    /// pages then cost).
    pub secondary_decompress_mbps: f64,
}

/// What the kernel's zram would use for the input: kernel-compat zsmalloc
/// (the kernel's geometry) with the compressor a new device of that kernel
/// takes, at its default level.
#[derive(Clone, Debug, Serialize)]
pub struct ZramDefault {
    /// Which kernel, in a few words (`this machine's Linux 6.18.4`).
    pub kernel: String,
    /// The line saying which kernel and how that was read.
    pub kernel_line: String,
    /// Its zram's default compressor.
    #[serde(serialize_with = "recipe::spec::algorithm_name")]
    pub comp: Algorithm,
    /// The store configuration (`zsmalloc/kernel-compat/lzo-rle/4K`).
    pub store: String,
    /// `mem_used_total` after the sample is written.
    pub mem_used_total: u64,
    /// `compr_data_size` there.
    pub compr_data_size: u64,
    /// The whole input's `mem_used_total` predicted from the sample's (the
    /// sample's own when the sample is the whole input).
    pub predicted_mem_used_total: u64,
}

/// What to set for one goal, as commands.
#[derive(Clone, Debug, Serialize)]
pub struct Recommendation {
    /// `memory`, `balanced` or `latency`.
    pub goal: String,
    /// The candidate's label.
    pub label: String,
    /// Its predicted `mem_used_total` for the whole input.
    pub predicted_mem_used_total: u64,
    /// Its random 4 KiB read median, microseconds.
    pub read_p50_us: f64,
    /// The kernel's zram, where the kernel has the algorithm (N is the
    /// device's number).
    pub kernel: Vec<String>,
    /// `zmem serve`.
    pub zmem: String,
}

/// The goals `zmem advise --goal` takes.
pub const GOALS: [&str; 3] = ["memory", "balanced", "latency"];

/// Everything `zmem advise` measured, and its advice.
#[derive(Clone, Debug, Serialize)]
pub struct Advice {
    /// What was read.
    pub input: String,
    /// How the sample was taken.
    pub sample: String,
    /// Pages measured.
    pub sample_pages: usize,
    /// Same-filled pages in the sample (stored without memory by zram).
    pub same_filled_pages: usize,
    /// Every candidate, least memory first.
    pub candidates: Vec<CandidateResult>,
    /// Allocators with the leading compressors.
    pub allocators: Vec<AllocatorResult>,
    /// Compression units of 4, 16 and 64 KiB with the leading compressors
    /// (default-mode zsmalloc).
    pub units: Vec<UnitResult>,
    /// Recompression pairs for idle pages.
    pub recompression: Vec<RecompressionPair>,
    /// What the kernel's zram would use.
    pub zram_default: ZramDefault,
    /// The advice, one sentence each.
    pub advice: Vec<String>,
    /// Candidates no other beats on both memory and compression speed
    /// (least memory first).
    pub pareto_memory_write: Vec<String>,
    /// Candidates no other beats on both memory and read latency.
    pub pareto_memory_read: Vec<String>,
    /// The configuration for each goal, as commands (candidates a store can
    /// be told about without a dictionary file).
    pub recommendations: Vec<Recommendation>,
    /// Seconds the measurement took.
    pub seconds: f64,
    /// Candidates measured at once.
    pub threads: usize,
    /// zram against zswap for the sampled pages, with the kernel's
    /// compressors ([`crate::front::compare`]), where the caller asked.
    pub zram_or_zswap: Option<crate::front::FrontComparison>,
}

/// Measures every candidate on `sample` and writes the advice.
pub fn advise(
    input: String,
    sample: &Sample,
    candidates: &[Candidate],
    opts: &AdviseOptions,
) -> Result<Advice, Error> {
    let start = Instant::now();
    if sample.pages() == 0 {
        return Err(Error::Failed("the sample holds no pages".into()));
    }
    let same_filled_pages = (0..sample.pages())
        .filter(|&i| zram::same_filled(sample.page(i)).is_some())
        .count();
    // A sample whose training runs are gone (their processes exited) or
    // same-filled trains no dictionary: the +dict candidates are left out,
    // and said so, unless they are all that was asked.
    let mut left_out = None;
    let mut kept: Vec<Candidate> = candidates.to_vec();
    let dict = if candidates.iter().any(|c| c.dictionary) {
        match train_dictionary(sample) {
            Ok(d) => Some(d),
            Err(e) if candidates.iter().any(|c| !c.dictionary) => {
                kept.retain(|c| !c.dictionary);
                left_out = Some(format!("the +dict candidates are left out: {e}"));
                None
            }
            Err(e) => return Err(e),
        }
    } else {
        None
    };
    let candidates = &kept[..];
    // Candidates run side by side, one per worker at a time.
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<CandidateResult, Error>>>> =
        Mutex::new((0..candidates.len()).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..opts.threads.max(1) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(c) = candidates.get(i) else { break };
                let r = measure(c, dict.as_ref(), sample, opts);
                results.lock().expect("results")[i] = Some(r);
                let n = done.fetch_add(1, Ordering::Relaxed) + 1;
                if opts.progress {
                    eprint!(
                        "\rzmem advise: {n}/{} candidates measured, then allocators and units",
                        candidates.len()
                    );
                }
            });
        }
    });
    let mut measured: Vec<CandidateResult> = results
        .into_inner()
        .expect("results")
        .into_iter()
        .map(|r| r.expect("every candidate measured"))
        .collect::<Result<_, _>>()?;
    if opts.progress {
        eprintln!();
    }
    measured.sort_by_key(|r| r.mem_used_total);

    // Allocators: with the least-memory candidate and with the kernel's
    // zram default (at its default level, as a new device takes it), which
    // is measured there even when it is not among the candidates.
    let kernel_comp = opts.kernel.comp;
    let kernel_lead = Candidate::new(kernel_comp, kernel_comp.default_level());
    let mut leaders: Vec<(Candidate, String)> =
        vec![(measured[0].candidate.clone(), measured[0].label.clone())];
    if leaders[0].1 != kernel_lead.label() {
        leaders.push((kernel_lead.clone(), kernel_lead.label()));
    }
    let mut allocators = Vec::new();
    let mut zram_default = None;
    for (candidate, label) in &leaders {
        for (alloc, mode) in [
            ("zsmalloc", Mode::Default),
            ("zsmalloc", Mode::KernelCompat),
            ("zblock", Mode::Default),
            ("z3fold", Mode::Default),
            ("zbud", Mode::Default),
        ] {
            let is_kernel = *label == kernel_lead.label();
            let mut spec = spec_for(candidate, alloc, mode, opts.page_size);
            if is_kernel {
                // No algorithm_params: the kernel's default, as `zmem
                // replay`'s kernel-compat store has it.
                spec.comp_params = String::new();
            }
            let store = open_store(&spec, candidate, dict.as_ref(), sample)?;
            let (mm, predicted) = fill_and_predict(&store, sample)?;
            if is_kernel && alloc == "zsmalloc" && mode == Mode::KernelCompat {
                zram_default = Some(ZramDefault {
                    kernel: opts.kernel.name(),
                    kernel_line: opts.kernel.line(),
                    comp: kernel_comp,
                    store: spec.label(),
                    mem_used_total: mm.mem_used_total,
                    compr_data_size: mm.compr_data_size,
                    predicted_mem_used_total: predicted,
                });
            }
            allocators.push(AllocatorResult {
                store: spec.label(),
                compressor: label.clone(),
                mem_used_total: mm.mem_used_total,
                compr_data_size: mm.compr_data_size,
                predicted_mem_used_total: predicted,
            });
        }
    }
    let zram_default = zram_default.expect("the kernel's compressor is a leader");

    // Compression units: the same leaders, the sample written in 16 and 64
    // KiB blocks (its runs are 64 KiB, so no unit crosses a run).
    let mut units = Vec::new();
    let mut unit_leads: Vec<&CandidateResult> = Vec::new();
    if let Some(best) = measured.iter().find(|r| !r.candidate.dictionary) {
        unit_leads.push(best);
    }
    if let Some(def) = measured
        .iter()
        .find(|r| !r.candidate.dictionary && r.label == kernel_lead.label())
    {
        if unit_leads.iter().all(|l| l.label != def.label) {
            unit_leads.push(def);
        }
    }
    for lead in &unit_leads {
        for unit in [opts.page_size, 16384, 65536] {
            if unit < opts.page_size || sample.bytes.len() < unit {
                continue;
            }
            let mut spec = spec_for(&lead.candidate, "zsmalloc", Mode::Default, opts.page_size);
            if unit > opts.page_size {
                spec.unit = Some(unit);
            }
            let store = spec.open(sample.bytes.len() as u64)?;
            let (mm, predicted) = fill_and_predict(&store, sample)?;
            let (p50, p99) = read_latency(&store, opts, unit)?;
            units.push(UnitResult {
                unit,
                compressor: lead.label.clone(),
                mem_used_total: mm.mem_used_total,
                predicted_mem_used_total: predicted,
                read_p50_us: p50,
                read_p99_us: p99,
            });
        }
    }

    // Recompression of idle pages: fast primaries, strong secondaries.
    let mut recompression = Vec::new();
    for primary in measured
        .iter()
        .filter(|r| [Algorithm::LzoRle, Algorithm::Lz4].contains(&r.candidate.comp))
    {
        for secondary in measured.iter().filter(|r| {
            (r.candidate.comp == Algorithm::Zstd
                && r.candidate.level >= 3
                && !r.candidate.dictionary)
                || (r.candidate.comp == Algorithm::Deflate && r.candidate.level == 6)
                || (r.candidate.comp == Algorithm::Lz4Hc && r.candidate.level == 9)
        }) {
            let (mut recompressed, mut moved) = (0u64, 0u64);
            for (&p, &s) in primary.sizes.iter().zip(&secondary.sizes) {
                if s < p {
                    recompressed += u64::from(s);
                    moved += 1;
                } else {
                    recompressed += u64::from(p);
                }
            }
            recompression.push(RecompressionPair {
                primary: primary.label.clone(),
                secondary: secondary.label.clone(),
                primary_bytes: primary.sizes.iter().map(|&v| u64::from(v)).sum(),
                recompressed_bytes: recompressed,
                pages_recompressed: moved,
                secondary_decompress_mbps: secondary.decompress_mbps,
            });
        }
    }
    recompression.sort_by_key(|p| p.recompressed_bytes);

    let mut advice = write_advice(&measured, &allocators, &zram_default, &recompression);
    advice.extend(left_out);
    if let (Some(small), Some(big)) = (
        units.iter().find(|u| u.unit == opts.page_size),
        units
            .iter()
            .find(|u| u.unit == 65536 && u.compressor == units[0].compressor),
    ) {
        advice.push(format!(
            "64 KiB compression units with {}: {:.1} MiB, {:+.1}% against 4 KiB units, but each 4 KiB \
             read decompresses 64 KiB (p50 {:.1} us against {:.1} us)",
            big.compressor,
            mib(big.predicted_mem_used_total),
            (big.predicted_mem_used_total as f64 / small.predicted_mem_used_total.max(1) as f64
                - 1.0)
                * 100.0,
            big.read_p50_us,
            small.read_p50_us
        ));
    }
    let pareto_memory_write = pareto(&measured, |r| r.compress_mbps);
    let pareto_memory_read = pareto(&measured, |r| -r.read_p50_us);
    let recommendations = recommend(&measured, sample);
    Ok(Advice {
        input,
        sample: sample.how.clone(),
        sample_pages: sample.pages(),
        same_filled_pages,
        candidates: measured,
        allocators,
        units,
        recompression,
        zram_default,
        pareto_memory_write,
        pareto_memory_read,
        recommendations,
        advice,
        seconds: start.elapsed().as_secs_f64(),
        threads: opts.threads.max(1),
        zram_or_zswap: None,
    })
}

/// A zstd dictionary trained on the sample's training pages (about 110
/// KiB, zstd's usual size; capped at a tenth of the sample). lz4 and
/// lz4hc candidates take its last 64 KiB ([`lz4_dictionary`]).
fn train_dictionary(sample: &Sample) -> Result<Dictionary, Error> {
    let pages: Vec<&[u8]> = sample
        .training
        .chunks_exact(sample.page_size)
        .filter(|p| zram::same_filled(p).is_none())
        .collect();
    if pages.len() < 8 {
        return Err(Error::Failed(format!(
            "{} distinct pages of the sample's training runs could be read, too few to train a \
             zstd dictionary on (8 needed)",
            pages.len()
        )));
    }
    let size = (112 * 1024).min(sample.bytes.len() / 10).max(1024);
    let bytes = zstd::dict::from_samples(&pages, size)
        .map_err(|e| Error::Failed(format!("training a zstd dictionary: {e}")))?;
    Dictionary::from_bytes(bytes).map_err(|e| Error::Failed(format!("zstd dictionary: {e}")))
}

/// The most zram's lz4 and lz4hc take as a dictionary.
const LZ4_DICT_MAX: usize = 64 * 1024;

/// The trained dictionary as lz4 and lz4hc take it: its last
/// [`LZ4_DICT_MAX`] bytes, the end of its content, which zstd's trainer
/// fills with what the sample repeats most (the entropy tables at its
/// start are of no use to lz4).
fn lz4_dictionary(d: &Dictionary) -> Result<Dictionary, Error> {
    let bytes = d.bytes();
    let tail = &bytes[bytes.len().saturating_sub(LZ4_DICT_MAX)..];
    Dictionary::from_bytes(tail.to_vec()).map_err(|e| Error::Failed(format!("lz4 dictionary: {e}")))
}

pub(crate) fn spec_for(c: &Candidate, alloc: &str, mode: Mode, page_size: usize) -> StoreSpec {
    // No background compactor: only a fill is measured, nothing for a
    // compactor to do.
    StoreSpec {
        comp_params: c.store_params(),
        page_size,
        ..StoreSpec::new(alloc, c.comp, mode)
    }
}

fn open_store(
    spec: &StoreSpec,
    c: &Candidate,
    dict: Option<&Dictionary>,
    sample: &Sample,
) -> Result<zram::Store, Error> {
    let disk = sample.bytes.len() as u64;
    if !c.dictionary {
        return spec.open(disk);
    }
    // A dictionary cannot be named in --comp-params without a file, so the
    // store gets the compressor directly.
    let pool = zalloc::open(&spec.alloc, &spec.alloc_options())
        .map_err(|e| Error::Usage(format!("{}: {e}", spec.label())))?;
    zram::Store::new(pool, c.compressor(dict)?, sample.pages() as u64)
        .map_err(|e| Error::Usage(format!("{}: {e}", spec.label())))
}

/// Fills `store` with the sample and predicts the whole input's
/// `mem_used_total`. Compressed bytes scale with the pages; the memory
/// above them does not all scale (each class's last, partly filled zspage
/// is there once, however much is stored), so the overhead is measured
/// after half the sample and after all of it, fitted as `a + b * pages`,
/// and taken at the input's pages.
pub(crate) fn fill_and_predict(
    store: &zram::Store,
    sample: &Sample,
) -> Result<(zram::MmStat, u64), Error> {
    let block = store.page_size();
    let n = sample.bytes.len() / block;
    let half = n / 2;
    let mut at_half = None;
    for i in 0..n {
        if i == half {
            at_half = Some(store.mm_stat());
        }
        store
            .write_page(i as u64, &sample.bytes[i * block..(i + 1) * block])
            .map_err(|e| Error::Failed(format!("write block {i}: {e}")))?;
    }
    let full = store.mm_stat();
    // The input in this store's blocks.
    let input_blocks = sample.input_pages as f64 * sample.page_size as f64 / block as f64;
    let predicted = predict(&full, at_half.as_ref().map(|h| (h, half)), n, input_blocks);
    Ok((full, predicted))
}

/// The whole input's `mem_used_total` from a store holding `n` of its
/// `input_blocks` blocks (`full`), and the same store's `mm_stat` when it
/// held the first `half` (`at_half`). Compressed bytes scale with the
/// blocks; the memory above them is fitted as a fixed part and a part per
/// block from the two points (without the half point, it scales whole).
/// A store holding every block is its own answer.
pub(crate) fn predict(
    full: &zram::MmStat,
    at_half: Option<(&zram::MmStat, usize)>,
    n: usize,
    input_blocks: f64,
) -> u64 {
    if input_blocks == n as f64 {
        return full.mem_used_total;
    }
    let scale = input_blocks / n.max(1) as f64;
    let over = |m: &zram::MmStat| m.mem_used_total as f64 - m.compr_data_size as f64;
    let overhead = match at_half {
        Some((h, half)) if half > 0 && n > half => {
            let per_block = (over(full) - over(h)) / (n - half) as f64;
            let fixed = over(full) - per_block * n as f64;
            (fixed + per_block * input_blocks).max(0.0)
        }
        _ => over(full) * scale,
    };
    (full.compr_data_size as f64 * scale + overhead).round() as u64
}

fn mbps(bytes: usize, seconds: f64) -> f64 {
    bytes as f64 / 1e6 / seconds.max(1e-9)
}

/// One candidate: raw compression and decompression of every page, then a
/// default-mode store's memory and random-read latency.
fn measure(
    c: &Candidate,
    dict: Option<&Dictionary>,
    sample: &Sample,
    opts: &AdviseOptions,
) -> Result<CandidateResult, Error> {
    let comp = c.compressor(dict)?;
    let mut ctx = comp
        .context()
        .map_err(|e| Error::Failed(format!("{}: {e}", c.label())))?;
    let ps = sample.page_size;
    let n = sample.pages();
    let mut out = vec![0u8; comp.compress_bound(ps)];
    let mut compressed: Vec<Vec<u8>> = Vec::with_capacity(n);
    let mut sizes = Vec::with_capacity(n);
    let mut bytes_in = 0usize;
    let t = Instant::now();
    for i in 0..n {
        let page = sample.page(i);
        if zram::same_filled(page).is_some() {
            compressed.push(Vec::new());
            continue;
        }
        let len = ctx
            .compress(page, &mut out)
            .map_err(|e| Error::Failed(format!("{}: page {i}: {e}", c.label())))?;
        bytes_in += ps;
        compressed.push(out[..len].to_vec());
    }
    let compress_s = t.elapsed().as_secs_f64();
    let mut back = vec![0u8; ps];
    let t = Instant::now();
    for (i, z) in compressed.iter().enumerate() {
        if z.is_empty() {
            continue;
        }
        ctx.decompress(z, &mut back)
            .map_err(|e| Error::Failed(format!("{}: page {i}: {e}", c.label())))?;
    }
    let decompress_s = t.elapsed().as_secs_f64();
    let spec = spec_for(c, "zsmalloc", Mode::Default, ps);
    let store = open_store(&spec, c, dict, sample)?;
    let huge = store.huge_class_size();
    for z in &compressed {
        sizes.push(match z.len() {
            0 => 0,
            l if l >= huge => ps as u32,
            l => l as u32,
        });
    }
    let stored: u64 = sizes.iter().map(|&v| u64::from(v)).sum();
    let (mm, predicted) = fill_and_predict(&store, sample)?;
    let (read_p50_us, read_p99_us) = read_latency(&store, opts, ps)?;
    Ok(CandidateResult {
        label: c.label(),
        candidate: c.clone(),
        ratio: bytes_in as f64 / stored.max(1) as f64,
        compress_mbps: mbps(bytes_in, compress_s),
        decompress_mbps: mbps(bytes_in, decompress_s),
        mem_used_total: mm.mem_used_total,
        compr_data_size: mm.compr_data_size,
        predicted_mem_used_total: predicted,
        sampling_error_pct: sampling_error(&sizes, sample),
        read_p50_us,
        read_p99_us,
        sizes,
    })
}

/// Random reads of one block each from a filled store, timed; the median
/// and 99th percentile in microseconds.
fn read_latency(
    store: &zram::Store,
    opts: &AdviseOptions,
    block: usize,
) -> Result<(f64, f64), Error> {
    let blocks = store.disk_pages().max(1);
    let mut buf = vec![0u8; block];
    let mut hist = Histogram::<u64>::new(3).expect("histogram");
    let mut rng = Rng::new(opts.seed, 0x0e4d);
    for _ in 0..opts.latency_reads {
        let i = rng.next_u64() % blocks;
        let t = Instant::now();
        store
            .read_page(i, &mut buf)
            .map_err(|e| Error::Failed(format!("read block {i}: {e}")))?;
        hist.record(t.elapsed().as_nanos() as u64)
            .expect("in range");
    }
    Ok((
        hist.value_at_quantile(0.5) as f64 / 1000.0,
        hist.value_at_quantile(0.99) as f64 / 1000.0,
    ))
}

/// Labels of the candidates that no other has both less memory and more of
/// `better` (least memory first).
fn pareto(measured: &[CandidateResult], better: fn(&CandidateResult) -> f64) -> Vec<String> {
    measured
        .iter()
        .filter(|r| {
            !measured.iter().any(|o| {
                o.predicted_mem_used_total <= r.predicted_mem_used_total
                    && better(o) >= better(r)
                    && (o.predicted_mem_used_total < r.predicted_mem_used_total
                        || better(o) > better(r))
            })
        })
        .map(|r| r.label.clone())
        .collect()
}

/// The candidate of `pool` for `goal`: the least memory (`memory`); the
/// fastest reads within 5% of that memory (`balanced`, and any other
/// word); the fastest reads (`latency`). Reads within [`READ_TIE`] of the
/// fastest count as as fast (the least memory of them is taken): medians
/// that close change places from one run to the next. `None` for an empty
/// pool.
pub(crate) fn for_goal<'a>(
    pool: &[&'a CandidateResult],
    goal: &str,
) -> Option<&'a CandidateResult> {
    let least = pool
        .iter()
        .copied()
        .min_by_key(|r| r.predicted_mem_used_total)?;
    let limit = least.predicted_mem_used_total as f64 * 1.05;
    Some(match goal {
        "memory" => least,
        "latency" => fastest(pool.iter().copied()).unwrap_or(least),
        _ => fastest(
            pool.iter()
                .copied()
                .filter(|r| r.predicted_mem_used_total as f64 <= limit),
        )
        .unwrap_or(least),
    })
}

/// The configuration for each of [`GOALS`] ([`for_goal`]), among the
/// candidates without a dictionary: those are the ones a command line can
/// name.
fn recommend(measured: &[CandidateResult], sample: &Sample) -> Vec<Recommendation> {
    let plain: Vec<&CandidateResult> = measured
        .iter()
        .filter(|r| !r.candidate.dictionary)
        .collect();
    // A disk the size of the input, in MiB.
    let disk_mib = (sample.input_pages * sample.page_size as u64)
        .div_ceil(1 << 20)
        .max(1);
    GOALS
        .iter()
        .filter_map(|&goal| Some((goal, for_goal(&plain, goal)?)))
        .map(|(goal, r)| {
            let c = &r.candidate;
            Recommendation {
                goal: goal.into(),
                label: r.label.clone(),
                predicted_mem_used_total: r.predicted_mem_used_total,
                read_p50_us: r.read_p50_us,
                kernel: vec![
                    format!("echo {} > /sys/block/zramN/comp_algorithm", c.comp),
                    format!(
                        "echo \"algo={} level={}\" > /sys/block/zramN/algorithm_params",
                        c.comp, c.level
                    ),
                    format!("echo {disk_mib}M > /sys/block/zramN/disksize"),
                ],
                zmem: format!(
                    "zmem serve --mode default --comp {} --comp-params level={} --size {disk_mib}M",
                    c.comp, c.level
                ),
            }
        })
        .collect()
}

/// Read medians within this share of the fastest one are taken as equally
/// fast: two runs on the same memory differ by about that much.
pub const READ_TIE: f64 = 0.10;

/// The candidate with the least memory among those whose reads are within
/// [`READ_TIE`] of the fastest.
fn fastest<'a>(pool: impl Iterator<Item = &'a CandidateResult>) -> Option<&'a CandidateResult> {
    let pool: Vec<&CandidateResult> = pool.collect();
    let quickest = pool.iter().map(|r| r.read_p50_us).min_by(f64::total_cmp)?;
    pool.into_iter()
        .filter(|r| r.read_p50_us <= quickest * (1.0 + READ_TIE))
        .min_by(|a, b| {
            a.predicted_mem_used_total
                .cmp(&b.predicted_mem_used_total)
                .then(a.read_p50_us.total_cmp(&b.read_p50_us))
        })
}

/// The 95% half-width, in percent, of the error of the whole input's
/// compressed bytes estimated from `sizes` (one per sampled page): runs of
/// [`RUN_PAGES`] are the draws, so the standard error is the spread of the
/// runs' bytes over the square root of their number, corrected for a
/// sample that is a large part of the input.
pub(crate) fn sampling_error(sizes: &[u32], sample: &Sample) -> f64 {
    let runs: Vec<f64> = sizes
        .chunks(RUN_PAGES as usize)
        .map(|r| r.iter().map(|&v| f64::from(v)).sum())
        .collect();
    let k = runs.len() as f64;
    let total_runs = (sample.input_pages as f64 / RUN_PAGES as f64).max(k);
    if k < 2.0 || k >= total_runs {
        return 0.0;
    }
    let mean = runs.iter().sum::<f64>() / k;
    if mean <= 0.0 {
        return 0.0;
    }
    let var = runs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (k - 1.0);
    let se = (var / k * (1.0 - k / total_runs)).sqrt();
    1.96 * se / mean * 100.0
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// The advice: least memory; the fastest reads within 5% of it; what the
/// kernel's zram would use, beside the least-memory compressor in the same
/// kernel-compat zsmalloc; the best allocator; the best idle pair.
fn write_advice(
    measured: &[CandidateResult],
    allocators: &[AllocatorResult],
    zram: &ZramDefault,
    pairs: &[RecompressionPair],
) -> Vec<String> {
    let mut advice = Vec::new();
    let best = &measured[0];
    advice.push(format!(
        "least memory: {} ({:.1} MiB for the whole input, ratio {:.2}, reads p50 {:.1} us)",
        best.label,
        mib(best.predicted_mem_used_total),
        best.ratio,
        best.read_p50_us
    ));
    let close = measured
        .iter()
        .filter(|r| r.mem_used_total as f64 <= best.mem_used_total as f64 * 1.05)
        .min_by(|a, b| a.read_p50_us.total_cmp(&b.read_p50_us));
    if let Some(fast) = close {
        if fast.label != best.label {
            advice.push(format!(
                "fastest reads within 5% of that memory: {} ({:.1} MiB, reads p50 {:.1} us, \
                 compresses at {:.0} MB/s)",
                fast.label,
                mib(fast.predicted_mem_used_total),
                fast.read_p50_us,
                fast.compress_mbps
            ));
        }
    }
    // The least-memory compressor in the same kernel-compat zsmalloc.
    let least_compat = allocators
        .iter()
        .find(|a| a.compressor == best.label && a.store.starts_with("zsmalloc/kernel-compat/"));
    let against = match least_compat {
        Some(l) if l.store != zram.store => format!(
            ", {:+.1}% against {}'s {:.1} MiB there",
            (zram.mem_used_total as f64 / l.mem_used_total.max(1) as f64 - 1.0) * 100.0,
            best.label,
            mib(l.predicted_mem_used_total)
        ),
        _ => String::new(),
    };
    advice.push(format!(
        "what zram would use, on {}: its default {} in the kernel's zsmalloc ({}) would \
         use {:.1} MiB for the whole input{against}",
        zram.kernel,
        zram.comp.name(),
        zram.store,
        mib(zram.predicted_mem_used_total)
    ));
    if let Some(a) = allocators.iter().min_by_key(|a| a.mem_used_total) {
        advice.push(format!(
            "least memory among allocators: {} ({:.1} MiB)",
            a.store,
            mib(a.predicted_mem_used_total)
        ));
    }
    if let Some(p) = pairs.first() {
        advice.push(format!(
            "for idle pages: {} recompressed with {} stores {:.1}% fewer compressed bytes than {} \
             alone ({} pages recompressed)",
            p.primary,
            p.secondary,
            (1.0 - p.recompressed_bytes as f64 / p.primary_bytes.max(1) as f64) * 100.0,
            p.primary,
            p.pages_recompressed
        ));
    }
    advice
}

/// The report as tables, with the configuration for `goal` as commands
/// (for an input: which kernel will take them is not known here, so they
/// say they need one that offers the compressor).
pub fn format_advice(a: &Advice, goal: &str) -> String {
    let mut s = tables(a);
    if let Some(r) = a.recommendations.iter().find(|r| r.goal == goal) {
        s.push_str(&format!(
            "\nfor --goal {goal}: {} ({:.1} MiB for the whole input, reads p50 {:.1} us)\n",
            r.label,
            mib(r.predicted_mem_used_total),
            r.read_p50_us,
        ));
        if !r.kernel.is_empty() {
            s.push_str(&format!(
                "  kernel zram (where it offers {}):\n",
                r.label.split(' ').next().unwrap_or_default()
            ));
        }
        for line in &r.kernel {
            s.push_str(&format!("    {line}\n"));
        }
        s.push_str(&format!("  zmem:\n    {}\n", r.zmem));
    }
    s.push_str(&footer(a));
    s.push_str(&zram_or_zswap(a));
    s
}

/// The comparison of zram and zswap, after a blank line, where it ran.
fn zram_or_zswap(a: &Advice) -> String {
    match &a.zram_or_zswap {
        Some(c) => format!("\n{}", crate::front::format_comparison(c)),
        None => String::new(),
    }
}

/// The measurements alone: the tables and the advice, without commands
/// (a machine's report prints its own, for its kernel).
pub fn format_measurements(a: &Advice) -> String {
    let mut s = tables(a);
    s.push_str(&footer(a));
    s.push_str(&zram_or_zswap(a));
    s
}

fn footer(a: &Advice) -> String {
    format!(
        "(measured in {:.1} s on this machine; throughput is one core's, with {} candidates at a time)\n",
        a.seconds, a.threads
    )
}

/// The kernel line, the input and the sample, the tables and the advice.
fn tables(a: &Advice) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        "{}\ninput: {}\nsample: {} ({} same-filled)\n\n",
        a.zram_default.kernel_line, a.input, a.sample, a.same_filled_pages
    ));
    s.push_str(&format!(
        "{:<14} {:>6} {:>10} {:>11} {:>7} {:>9} {:>10} {:>10} {:>9} {:>9} {:>6}\n",
        "compressor",
        "ratio",
        "mem MiB",
        "whole MiB",
        "+-err",
        "vs best",
        "comp MB/s",
        "dec MB/s",
        "read p50",
        "read p99",
        "front"
    ));
    let best = a.candidates[0].mem_used_total as f64;
    for r in &a.candidates {
        // Pareto fronts: w = memory against compression speed, r = memory
        // against read latency.
        let front = format!(
            "{}{}",
            if a.pareto_memory_write.contains(&r.label) {
                "w"
            } else {
                ""
            },
            if a.pareto_memory_read.contains(&r.label) {
                "r"
            } else {
                ""
            }
        );
        s.push_str(&format!(
            "{:<14} {:>6.2} {:>10.2} {:>11.2} {:>6.1}% {:>8.1}% {:>10.0} {:>10.0} {:>7.1}us {:>7.1}us {:>6}\n",
            r.label,
            r.ratio,
            mib(r.mem_used_total),
            mib(r.predicted_mem_used_total),
            r.sampling_error_pct,
            (r.mem_used_total as f64 / best - 1.0) * 100.0,
            r.compress_mbps,
            r.decompress_mbps,
            r.read_p50_us,
            r.read_p99_us,
            front
        ));
    }
    s.push_str(
        "(mem: the sample's mem_used_total; whole: predicted for the whole input, +-err its 95% \
         sampling error; front: w on the memory/compression-speed Pareto front, r on the \
         memory/read-latency one)\n",
    );
    s.push_str(&format!(
        "\n{:<36} {:>10} {:>10}\n",
        "allocator", "mem MiB", "compr MiB"
    ));
    for r in &a.allocators {
        s.push_str(&format!(
            "{:<36} {:>10.2} {:>10.2}\n",
            r.store,
            mib(r.mem_used_total),
            mib(r.compr_data_size)
        ));
    }
    s.push_str(&format!(
        "\n{:<20} {:>6} {:>10} {:>11} {:>9} {:>9}\n",
        "unit", "KiB", "mem MiB", "whole MiB", "read p50", "read p99"
    ));
    for u in &a.units {
        s.push_str(&format!(
            "{:<20} {:>6} {:>10.2} {:>11.2} {:>7.1}us {:>7.1}us\n",
            u.compressor,
            u.unit / 1024,
            mib(u.mem_used_total),
            mib(u.predicted_mem_used_total),
            u.read_p50_us,
            u.read_p99_us
        ));
    }
    s.push_str(&format!(
        "\n{:<24} {:>12} {:>12} {:>8} {:>10}\n",
        "idle pages: primary+secondary", "bytes MiB", "after MiB", "saved", "dec MB/s"
    ));
    for p in &a.recompression {
        s.push_str(&format!(
            "{:<24} {:>12.2} {:>12.2} {:>7.1}% {:>10.0}\n",
            format!("{} + {}", p.primary, p.secondary),
            mib(p.primary_bytes),
            mib(p.recompressed_bytes),
            (1.0 - p.recompressed_bytes as f64 / p.primary_bytes.max(1) as f64) * 100.0,
            p.secondary_decompress_mbps
        ));
    }
    s.push_str("\nadvice:\n");
    for line in &a.advice {
        s.push_str(&format!("  {line}\n"));
    }
    s
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::Arc;

    use super::*;

    fn corpus(pages: usize) -> Corpus {
        let mut bytes = Vec::with_capacity(pages * 4096);
        let mut x = 7u64;
        for i in 0..pages {
            for j in 0..4096 {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                // Text-like: few distinct bytes, some structure per page.
                bytes.push(b"zram page text "[((x >> 60) as usize + i + j / 64) % 15]);
            }
        }
        let len = bytes.len() as u64;
        let bytes: Arc<[u8]> = bytes.into();
        Corpus::from_buffers(vec![("t".into(), bytes, len)], "test".into())
    }

    #[test]
    fn the_sample_takes_whole_runs_and_as_many_as_asked() {
        let c = corpus(1000);
        let opts = AdviseOptions {
            sample_pages: 160,
            ..AdviseOptions::default()
        };
        let s = sample(&c, &opts).unwrap();
        assert_eq!(s.pages(), 160);
        assert!(s.how.contains("10 runs of 16"), "{}", s.how);
        // The dictionary's training runs are other runs than the measured.
        let run = 16 * 4096;
        assert_eq!(s.training.len(), 4 * run, "at least four training runs");
        for t in s.training.chunks(run) {
            assert!(s.bytes.chunks(run).all(|r| r != t));
        }
        // Another seed picks other runs; the same seed the same ones.
        let again = sample(&c, &opts).unwrap();
        assert_eq!(again.bytes, s.bytes);
        let other = sample(
            &c,
            &AdviseOptions {
                seed: 2,
                ..opts.clone()
            },
        )
        .unwrap();
        assert_ne!(other.bytes, s.bytes);
        // A small input is taken whole.
        let all = sample(&corpus(20), &opts).unwrap();
        assert_eq!(all.pages(), 20);
    }

    #[test]
    fn advice_ranks_by_memory_and_every_figure_is_measured() {
        let (opts, s) = sampled_on(256, Algorithm::LzoRle);
        let cands = vec![
            Candidate::new(Algorithm::Lz4, 1),
            Candidate::new(Algorithm::LzoRle, 1),
            Candidate::new(Algorithm::Zstd, 3),
        ];
        let a = advise("test".into(), &s, &cands, &opts).unwrap();
        assert_eq!(a.candidates.len(), 3);
        for w in a.candidates.windows(2) {
            assert!(w[0].mem_used_total <= w[1].mem_used_total);
        }
        for r in &a.candidates {
            assert!(
                r.ratio > 1.0 && r.compress_mbps > 0.0 && r.decompress_mbps > 0.0,
                "{r:?}"
            );
            assert!(
                r.read_p50_us > 0.0 && r.read_p99_us >= r.read_p50_us,
                "{r:?}"
            );
            // The store's compressed bytes are the per-page sizes' sum.
            let sum: u64 = r.sizes.iter().map(|&v| u64::from(v)).sum();
            assert_eq!(r.compr_data_size, sum, "{}", r.label);
            // The sample is the whole input here: the prediction is the
            // measurement (the fitted overhead taken where it was measured).
            let (p, m) = (r.predicted_mem_used_total as i64, r.mem_used_total as i64);
            assert!((p - m).abs() <= 1, "{}: {p} vs {m}", r.label);
        }
        // zstd compresses this text best.
        assert_eq!(a.candidates[0].candidate.comp, Algorithm::Zstd);
        // Five allocators for the leader and five for lzo-rle.
        assert_eq!(a.allocators.len(), 10);
        // 4, 16 and 64 KiB units for zstd 3 and lzo-rle (the sample of 256
        // pages holds 16 units of 64 KiB); larger units store fewer bytes
        // of this text and read more per 4 KiB.
        assert_eq!(a.units.len(), 6);
        let zstd: Vec<&UnitResult> = a
            .units
            .iter()
            .filter(|u| u.compressor == "zstd 3")
            .collect();
        assert_eq!(
            zstd.iter().map(|u| u.unit).collect::<Vec<_>>(),
            [4096, 16384, 65536]
        );
        assert!(zstd[2].mem_used_total < zstd[0].mem_used_total, "{zstd:?}");
        // lz4 and lzo-rle, each paired with zstd 3.
        assert_eq!(a.recompression.len(), 2);
        assert!(
            a.advice[0].starts_with("least memory: zstd 3"),
            "{:?}",
            a.advice
        );
        // One recommendation per goal, each with commands; the least-memory
        // candidate is on both Pareto fronts.
        let goals: Vec<&str> = a.recommendations.iter().map(|r| r.goal.as_str()).collect();
        assert_eq!(goals, GOALS);
        assert_eq!(a.recommendations[0].label, a.candidates[0].label);
        assert!(a.recommendations[0]
            .zmem
            .contains("--comp zstd --comp-params level=3"));
        assert!(a.pareto_memory_write.contains(&a.candidates[0].label));
        assert!(a.pareto_memory_read.contains(&a.candidates[0].label));
        // The sample is the whole input: no sampling error.
        assert!(a.candidates.iter().all(|r| r.sampling_error_pct == 0.0));
        let text = format_advice(&a, "balanced");
        assert!(text.contains("for --goal balanced"), "{text}");
        assert!(text.contains("advice:"), "{text}");
        // The measurements alone hold no commands.
        let alone = format_measurements(&a);
        assert!(alone.contains("advice:"), "{alone}");
        assert!(!alone.contains("echo "), "{alone}");
        assert!(!alone.contains("for --goal"), "{alone}");
    }

    /// "What zram would use" is the kernel's compressor in kernel-compat
    /// zsmalloc, measured even when it is not a candidate, and the sentence
    /// names the kernel.
    #[test]
    fn what_zram_would_use_is_kernel_compat_with_the_kernels_compressor() {
        let (opts, s) = sampled_on(128, Algorithm::Lz4);
        let a = advise("t".into(), &s, &[Candidate::new(Algorithm::Zstd, 3)], &opts).unwrap();
        let z = &a.zram_default;
        assert_eq!(z.comp, Algorithm::Lz4);
        assert_eq!(z.store, "zsmalloc/kernel-compat/lz4/4K");
        // The same pages in a kernel-compat store of the kernel's default
        // compressor, written here.
        let mut spec = spec_for(
            &Candidate::new(Algorithm::Lz4, 1),
            "zsmalloc",
            Mode::KernelCompat,
            4096,
        );
        spec.comp_params = String::new();
        let store = spec.open(s.bytes.len() as u64).unwrap();
        for (i, page) in s.bytes.chunks(4096).enumerate() {
            store.write_page(i as u64, page).unwrap();
        }
        assert_eq!(z.mem_used_total, store.mm_stat().mem_used_total);
        // The whole input is the sample: the prediction is the measurement.
        assert_eq!(z.predicted_mem_used_total, z.mem_used_total);
        // And it is not the default mode's figure for lz4.
        let default_mode = a
            .allocators
            .iter()
            .find(|r| r.store.starts_with("zsmalloc/default/") && r.compressor == "lz4 1")
            .unwrap();
        assert_ne!(default_mode.mem_used_total, z.mem_used_total);
        let line = a
            .advice
            .iter()
            .find(|l| l.starts_with("what zram would use"))
            .unwrap();
        assert!(
            line.contains("on a kernel whose zram defaults to lz4 (--kernel-comp)"),
            "{line}"
        );
        assert!(line.contains("zsmalloc/kernel-compat/lz4/4K"), "{line}");
        assert!(line.contains("against zstd 3's"), "{line}");
        let text = format_advice(&a, "memory");
        assert!(
            text.starts_with("kernel-compat: a kernel whose zram defaults to lz4"),
            "{text}"
        );
    }

    /// The sample of `pages` synthetic pages, and the options it was taken
    /// with: 200 reads each, on a kernel whose zram defaults to `kernel`.
    fn sampled_on(pages: usize, kernel: Algorithm) -> (AdviseOptions, Sample) {
        let opts = AdviseOptions {
            latency_reads: 200,
            kernel: KernelCompat::given(kernel),
            ..AdviseOptions::default()
        };
        let s = sample(&corpus(pages), &opts).unwrap();
        (opts, s)
    }

    fn result(label: &str, mem: u64, read: f64) -> CandidateResult {
        measured(Candidate::new(Algorithm::Lz4, 1), label, mem, read)
    }

    /// `candidate`'s result as `label` with `mem` bytes of memory and
    /// `read` microseconds per read; every other figure the same for all.
    pub(crate) fn measured(
        candidate: Candidate,
        label: &str,
        mem: u64,
        read: f64,
    ) -> CandidateResult {
        CandidateResult {
            candidate,
            label: label.into(),
            ratio: 2.0,
            compress_mbps: 100.0,
            decompress_mbps: 100.0,
            mem_used_total: mem,
            compr_data_size: mem,
            predicted_mem_used_total: mem,
            sampling_error_pct: 1.0,
            read_p50_us: read,
            read_p99_us: read,
            sizes: Vec::new(),
        }
    }

    /// Reads within a tenth of the fastest are as fast: the least memory of
    /// them is taken, so two runs whose medians swap places agree.
    #[test]
    fn reads_within_a_tenth_of_the_fastest_count_as_as_fast() {
        let runs = [(4.2, 4.4), (4.4, 4.2)];
        for (lzo, lzo_rle) in runs {
            let a = result("lzo", 1244, lzo);
            let b = result("lzo-rle", 1278, lzo_rle);
            let c = result("lz4 1", 1365, 3.1);
            let pool = [&a, &b, &c];
            assert_eq!(for_goal(&pool, "balanced").unwrap().label, "lzo");
            assert_eq!(for_goal(&pool, "latency").unwrap().label, "lz4 1");
        }
        // Reads more than a tenth faster win within 5% of the memory.
        let a = result("lzo", 1244, 4.2);
        let b = result("lz4 1", 1290, 3.1);
        assert_eq!(for_goal(&[&a, &b], "balanced").unwrap().label, "lz4 1");
        assert_eq!(for_goal(&[&a, &b], "memory").unwrap().label, "lzo");
    }

    #[test]
    fn a_sample_that_trains_no_dictionary_leaves_out_the_dict_candidates() {
        let c = corpus(256);
        let opts = AdviseOptions {
            latency_reads: 50,
            ..AdviseOptions::default()
        };
        let mut s = sample(&c, &opts).unwrap();
        // As when the training runs' processes exited before they were read.
        s.training.clear();
        let dict = Candidate {
            dictionary: true,
            ..Candidate::new(Algorithm::Zstd, 3)
        };
        let cands = [Candidate::new(Algorithm::Lz4, 1), dict.clone()];
        let a = advise("t".into(), &s, &cands, &opts).unwrap();
        assert_eq!(a.candidates.len(), 1);
        assert_eq!(a.candidates[0].label, "lz4 1");
        assert!(
            a.advice
                .iter()
                .any(|n| n.starts_with("the +dict candidates are left out: 0 distinct pages")),
            "{:?}",
            a.advice
        );
        // Only +dict candidates: nothing to measure, an error.
        let e = advise("t".into(), &s, &[dict], &opts).unwrap_err();
        assert!(e.to_string().contains("too few to train"), "{e}");
    }

    #[test]
    fn lz4_candidates_take_the_dictionarys_last_64_kib() {
        let c = corpus(2048);
        let opts = AdviseOptions {
            sample_pages: 512,
            latency_reads: 50,
            ..AdviseOptions::default()
        };
        let s = sample(&c, &opts).unwrap();
        let trained = train_dictionary(&s).unwrap();
        assert!(
            trained.bytes().len() > LZ4_DICT_MAX,
            "{}",
            trained.bytes().len()
        );
        let tail = lz4_dictionary(&trained).unwrap();
        assert_eq!(tail.bytes().len(), LZ4_DICT_MAX);
        assert!(trained.bytes().ends_with(tail.bytes()));
        let with_dict = |comp, level| Candidate {
            dictionary: true,
            ..Candidate::new(comp, level)
        };
        let cands = [with_dict(Algorithm::Lz4, 1), with_dict(Algorithm::Lz4Hc, 9)];
        let a = advise("t".into(), &s, &cands, &opts).unwrap();
        assert_eq!(a.candidates.len(), 2);
        assert!(a.candidates.iter().all(|r| r.label.ends_with("+dict")));
    }

    #[test]
    fn a_level_the_compressor_lacks_is_a_usage_error() {
        let c = corpus(32);
        let opts = AdviseOptions::default();
        let s = sample(&c, &opts).unwrap();
        let e = advise(
            "t".into(),
            &s,
            &[Candidate::new(Algorithm::Lz4Hc, 99)],
            &opts,
        )
        .unwrap_err();
        assert!(matches!(e, Error::Usage(_)), "{e:?}");
        assert!(e.to_string().contains("lz4hc 99"), "{e}");
    }
}
