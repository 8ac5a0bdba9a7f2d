//! `zmem advise --system` (or `--cgroup`, or `--pid` alone): advice for a
//! whole machine's zram, measured on the memory it would receive.
//!
//! The steps: scan and sample the anonymous memory ([`system_memory`]);
//! measure every candidate on the sample ([`advise`]); read what this
//! kernel's zram offers; choose the configuration for the goal among the
//! compressors the kernel has, and predict its `mem_used_total` in
//! kernel-compat mode (the kernel's own geometry) for all the memory; size
//! the device for a share of RAM (`sizing`); measure the swap costs the
//! sysctls follow from (`swap_costs`); optionally watch the memory go
//! idle ([`idle_watch`]) and write an idle writeback and recompression
//! policy from it. [`verify`] then checks the prediction by writing every
//! scanned page into a hot-added kernel zram device ([`kernel_zram`]).
//!
//! This module owns the choice, the policy and the kernel check, and the
//! report. The report gives one answer: the configuration for this kernel
//! first, as the sysfs and zram-generator lines it accepts, with its sizes
//! and sysctls; then, marked as not for this kernel, what a kernel whose
//! zram offers more compressors would gain; then the measurements. The
//! files to install from it are [`crate::emit`]'s. It never touches an
//! existing zram device but to read its attributes.
//!
//! [`system_memory`]: crate::system_memory
//! [`advise`]: crate::advise
//! [`idle_watch`]: crate::idle_watch
//! [`kernel_zram`]: crate::kernel_zram

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use recipe::Error;
use serde::Serialize;
use zsmalloc::Mode;

use crate::advise::{self, Advice, AdviseOptions, Candidate, CandidateResult};
use crate::front;
use crate::idle_watch::{self, IdleReport};
use crate::kernel_zram::{self, KernelZram, PageBuffer};
use crate::sizing::{self, Sizing};
use crate::swap_costs::{self, SwapCosts};
use crate::system_memory::{self, Scan, Scope};

/// What to measure and advise.
#[derive(Clone, Debug)]
pub struct MachineOptions {
    /// Whose memory.
    pub scope: Scope,
    /// The sample and the measurement.
    pub advise: AdviseOptions,
    /// The candidates (the default set when empty).
    pub candidates: Vec<Candidate>,
    /// `memory`, `balanced` or `latency`.
    pub goal: String,
    /// The share of RAM compressed pages may hold (0 to 1).
    pub target_share: f64,
    /// Watch the memory go idle for this long.
    pub watch: Option<Duration>,
    /// The device idle pages would be written back to.
    pub backing_dev: Option<PathBuf>,
    /// zswap's settings, to compare zram with zswap on the sample (none:
    /// no comparison).
    pub zswap: Option<crate::front::ZswapSettings>,
}

/// What this machine's kernel zram offers.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct KernelInfo {
    /// Where it was read (`/sys/block/zram0`, a device hot-added and
    /// removed, or nowhere).
    pub source: String,
    /// Its compressors (`comp_algorithm`); empty when unknown.
    pub algorithms: Vec<String>,
    /// Its sysfs attributes; empty when unknown.
    pub attributes: Vec<String>,
    /// zswap's `enabled`, where the kernel has zswap.
    pub zswap_enabled: Option<bool>,
}

impl KernelInfo {
    /// Whether the kernel's zram offers `name` (true when unknown).
    pub(crate) fn has_algorithm(&self, name: &str) -> bool {
        self.algorithms.is_empty() || self.algorithms.iter().any(|a| a == name)
    }

    /// Whether the kernel's zram has the attribute (true when unknown).
    pub(crate) fn has_attribute(&self, name: &str) -> bool {
        self.attributes.is_empty() || self.attributes.iter().any(|a| a == name)
    }

    /// Reads an existing device's attributes (read only), or hot-adds a
    /// device for a moment where there is none.
    pub(crate) fn read() -> KernelInfo {
        let zswap_enabled = std::fs::read_to_string("/sys/module/zswap/parameters/enabled")
            .ok()
            .map(|s| s.trim() == "Y");
        let existing = std::fs::read_dir("/sys/block").ok().and_then(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("zram"))
                })
                .find(|p| p.join("comp_algorithm").exists())
        });
        if let Some(dir) = existing {
            return KernelInfo {
                source: dir.display().to_string(),
                algorithms: std::fs::read_to_string(dir.join("comp_algorithm"))
                    .map(|v| kernel_zram::algorithm_names(&v))
                    .unwrap_or_default(),
                attributes: kernel_zram::attribute_names(&dir),
                zswap_enabled,
            };
        }
        match KernelZram::create_unsized() {
            Ok(dev) => KernelInfo {
                source: format!("zram{}, hot-added to read it and removed", dev.id()),
                algorithms: dev
                    .read("comp_algorithm")
                    .map(|v| kernel_zram::algorithm_names(&v))
                    .unwrap_or_default(),
                attributes: dev.attributes(),
                zswap_enabled,
            },
            Err(why) => KernelInfo {
                source: format!("unknown: {why}"),
                algorithms: Vec::new(),
                attributes: Vec::new(),
                zswap_enabled,
            },
        }
    }
}

/// The configuration chosen for the goal.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Chosen {
    /// The goal.
    pub goal: String,
    /// The candidate's label.
    pub label: String,
    /// Its compressor, by the kernel's name.
    pub comp: String,
    /// Its level.
    pub level: i32,
    /// Whether the level is not the compressor's default (so
    /// `algorithm_params` must say it).
    pub level_set: bool,
    /// `mem_used_total` predicted for all the scanned memory in
    /// kernel-compat mode (the kernel's zsmalloc).
    pub predicted_mem_used_total: u64,
    /// The same in zmem's default mode.
    pub predicted_default_mode: u64,
    /// The prediction's 95% sampling error, percent.
    pub sampling_error_pct: f64,
    /// Pages the prediction was made from (single pages at even steps,
    /// more than the candidates' sample).
    pub prediction_pages: u64,
    /// Pages chosen for it: those of processes that exited or unmapped them
    /// since the scan could not be read.
    pub prediction_pages_asked: u64,
    /// Where fewer than a quarter of those could be read, what that means,
    /// in one line.
    pub prediction_note: Option<String>,
    /// The scanned bytes over the prediction.
    pub ratio: f64,
    /// Its random 4 KiB read median on the sample, microseconds.
    pub read_p50_us: f64,
    /// What the goal would choose on a kernel whose zram offered every
    /// compressor measured, where that is one this kernel's zram lacks.
    pub elsewhere: Option<Elsewhere>,
}

/// The configuration a kernel with more compressors would take for the
/// goal: not one this kernel accepts.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Elsewhere {
    /// The candidate's label.
    pub label: String,
    /// Its compressor, by the kernel's name.
    pub comp: String,
    /// The kernel option that builds that compressor into zram (6.12 on).
    pub kernel_option: String,
    /// Its `mem_used_total` predicted for all the memory in zmem's default
    /// mode (as [`Chosen::predicted_default_mode`], to compare).
    pub predicted_default_mode: u64,
    /// Its random 4 KiB read median on the sample, microseconds.
    pub read_p50_us: f64,
}

/// The kernel option that builds `comp` into zram (Linux 6.12 and later).
pub(crate) fn backend_option(comp: &str) -> String {
    let name = match comp {
        "lzo" | "lzo-rle" => "LZO",
        other => return format!("CONFIG_ZRAM_BACKEND_{}", other.to_uppercase()),
    };
    format!("CONFIG_ZRAM_BACKEND_{name}")
}

/// An idle writeback and recompression policy.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Policy {
    /// Pages untouched this long are idle.
    pub idle_age_s: u64,
    /// Bytes written back per round at most.
    pub batch_bytes: u64,
    /// Bytes written back per day at most.
    pub daily_budget_bytes: u64,
    /// The secondary compressor for idle pages, by the kernel's name with
    /// its level, where one saves at least 5% of their bytes.
    pub recompress: Option<(String, i32)>,
    /// Why, in words.
    pub reasons: Vec<String>,
}

/// The kernel's `mm_stat` beside the prediction.
#[derive(Clone, Debug, Serialize)]
pub struct Verify {
    /// The device used (hot-added, removed afterwards).
    pub(crate) device: String,
    /// Its compressor.
    pub(crate) comp: String,
    /// Pages written.
    pub(crate) pages_written: u64,
    /// Scanned pages that could no longer be read.
    pub(crate) pages_missed: u64,
    /// The kernel's `mm_stat` columns.
    pub(crate) mm_stat: Vec<u64>,
    /// The predicted `mem_used_total`, for the pages written.
    pub(crate) predicted_mem_used_total: u64,
    /// (kernel - predicted) / kernel, percent.
    pub(crate) error_pct: f64,
    /// Seconds writing took.
    pub(crate) seconds: f64,
}

/// Everything `zmem advise --system` found and advises.
#[derive(Clone, Debug, Serialize)]
pub struct MachineAdvice {
    /// The scan.
    pub(crate) scan: Scan,
    /// Every candidate measured on the sample.
    pub(crate) advice: Advice,
    /// This kernel's zram.
    pub(crate) kernel: KernelInfo,
    /// The configuration chosen.
    pub(crate) chosen: Chosen,
    /// Its sizes.
    pub(crate) sizing: Sizing,
    /// Swap-in costs and the sysctls.
    pub(crate) swap_costs: SwapCosts,
    /// The watch, with `--watch`.
    pub(crate) idle: Option<IdleReport>,
    /// The idle policy, with `--watch`.
    pub(crate) policy: Option<Policy>,
    /// The kernel check, with `--verify` ([`verify`]).
    pub verify: Option<Verify>,
    /// The device idle pages go to, where given.
    pub(crate) backing_dev: Option<String>,
    /// Warnings, one line each.
    pub(crate) warnings: Vec<String>,
    /// Seconds the whole run took.
    pub(crate) seconds: f64,
}

/// Chooses among `measured` for `goal` (as `zmem advise` does,
/// [`advise::for_goal`]) those the kernel has and a command line can name.
fn choose<'a>(
    measured: &'a [CandidateResult],
    kernel: &KernelInfo,
    goal: &str,
) -> Option<&'a CandidateResult> {
    let usable: Vec<&CandidateResult> = measured
        .iter()
        .filter(|r| !r.candidate.dictionary && kernel.has_algorithm(r.candidate.comp.name()))
        .collect();
    advise::for_goal(&usable, goal)
}

/// Leaves out of the input's recommendations the sysfs lines this kernel
/// would refuse: they name the lines for any kernel, and here the kernel is
/// known.
fn keep_accepted(advice: &mut Advice, kernel: &KernelInfo) {
    for r in &mut advice.recommendations {
        let comp = r.label.split(' ').next().unwrap_or_default();
        if !kernel.has_algorithm(comp) {
            r.kernel.clear();
        }
    }
}

/// What `goal` would choose among every measured candidate a command line
/// can name, where this kernel's zram lacks its compressor.
fn choose_elsewhere<'a>(
    measured: &'a [CandidateResult],
    kernel: &KernelInfo,
    goal: &str,
) -> Option<&'a CandidateResult> {
    let plain: Vec<&CandidateResult> = measured
        .iter()
        .filter(|r| !r.candidate.dictionary)
        .collect();
    advise::for_goal(&plain, goal).filter(|r| !kernel.has_algorithm(r.candidate.comp.name()))
}

/// Runs the whole advice.
pub fn run(opts: &MachineOptions) -> Result<MachineAdvice, Error> {
    let start = Instant::now();
    let mut scan = system_memory::scan(&opts.scope)?;
    let (sample, origin) =
        system_memory::sample(&mut scan, opts.advise.sample_pages, opts.advise.seed)?;
    let candidates = if opts.candidates.is_empty() {
        advise::default_candidates()
    } else {
        opts.candidates.clone()
    };
    let mut advice = advise::advise(scan.summary(), &sample, &candidates, &opts.advise)?;
    if let Some(settings) = &opts.zswap {
        advice.zram_or_zswap = Some(front::compare(
            &sample.bytes,
            scan.pages,
            opts.advise.kernel.comp,
            settings,
            Some(has_disk_swap()),
        )?);
    }
    let kernel = KernelInfo::read();
    keep_accepted(&mut advice, &kernel);
    let best = choose(&advice.candidates, &kernel, &opts.goal).ok_or_else(|| {
        Error::Failed(format!(
            "no candidate measured is one this kernel's zram offers ({})",
            kernel.algorithms.join(" ")
        ))
    })?;
    let c = &best.candidate;
    let ps = opts.advise.page_size;
    let kc_spec = advise::spec_for(c, "zsmalloc", Mode::KernelCompat, ps);
    let (kc_store, predicted, sampling_error_pct, prediction_pages) =
        predict_chosen(&scan, &kc_spec, opts.advise.seed)?;
    let scanned_bytes = scan.pages * scan.page_size;
    let prediction_pages_asked = PREDICTION_PAGES.min(scan.pages).max(1);
    let elsewhere = choose_elsewhere(&advice.candidates, &kernel, &opts.goal).map(|r| Elsewhere {
        label: r.label.clone(),
        comp: r.candidate.comp.name().to_string(),
        kernel_option: backend_option(r.candidate.comp.name()),
        predicted_default_mode: r.predicted_mem_used_total,
        read_p50_us: r.read_p50_us,
    });
    let chosen = Chosen {
        goal: opts.goal.clone(),
        label: best.label.clone(),
        comp: c.comp.name().to_string(),
        level: c.level,
        level_set: c.level != c.comp.default_level()
            && c.comp.level_range().start() != c.comp.level_range().end(),
        predicted_mem_used_total: predicted,
        predicted_default_mode: best.predicted_mem_used_total,
        sampling_error_pct,
        prediction_pages,
        prediction_pages_asked,
        prediction_note: few_pages_note(prediction_pages, prediction_pages_asked),
        ratio: scanned_bytes as f64 / predicted.max(1) as f64,
        read_p50_us: best.read_p50_us,
        elsewhere,
    };
    let mem_total = sizing::mem_total()?;
    let same_filled_share = advice.same_filled_pages as f64 / advice.sample_pages.max(1) as f64;
    let sizing = sizing::size(
        mem_total,
        chosen.ratio,
        opts.target_share,
        same_filled_share,
    );
    let swap_costs = swap_costs::measure(&kc_store, prediction_pages, opts.advise.seed);
    drop(kc_store);

    let mut warnings = Vec::new();
    if kernel.zswap_enabled == Some(true) {
        warnings.push(
            "zswap is enabled beside zram: pages are compressed twice (by zswap, then by zram \
             when zswap writes back); disable it (echo N > /sys/module/zswap/parameters/enabled, \
             or zswap.enabled=0 on the kernel command line) when zram is the swap device"
                .into(),
        );
    }
    if let Some(w) = scan.skipped.first() {
        warnings.push(format!(
            "{} processes could not be read (the first, {} {}: {})",
            scan.skipped.len(),
            w.pid,
            w.comm,
            w.reason
        ));
    }

    let (idle, policy) = match opts.watch {
        Some(d) => {
            let data = idle_watch::watch(
                &scan.pids(),
                &origin.pages,
                scan.page_size,
                d,
                opts.advise.progress,
            )?;
            let primary = best;
            let pairs: Vec<(&CandidateResult, &CandidateResult)> = advice
                .candidates
                .iter()
                .filter(|s| {
                    !s.candidate.dictionary
                        && s.label != primary.label
                        && s.predicted_mem_used_total < primary.predicted_mem_used_total
                })
                .map(|s| (primary, s))
                .collect();
            let scale = scan.pages as f64 / sample.pages().max(1) as f64;
            let report = idle_watch::report(data, scan.page_size, scale, &pairs);
            let policy = write_policy(&report, &advice, &kernel);
            (Some(report), Some(policy))
        }
        None => (None, None),
    };

    Ok(MachineAdvice {
        scan,
        advice,
        kernel,
        chosen,
        sizing,
        swap_costs,
        idle,
        policy,
        verify: None,
        backing_dev: opts.backing_dev.as_ref().map(|p| p.display().to_string()),
        warnings,
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// Whether `/proc/swaps` lists a swap area that is not a zram device: a
/// disk zswap can sit in front of.
pub(crate) fn has_disk_swap() -> bool {
    std::fs::read_to_string("/proc/swaps").is_ok_and(|t| {
        t.lines()
            .skip(1)
            .filter_map(|l| l.split_whitespace().next())
            .any(|dev| !dev.starts_with("/dev/zram"))
    })
}

/// A line for a prediction made from fewer than a quarter of the pages
/// chosen for it (`None` otherwise): the memory changed under the
/// measurement.
fn few_pages_note(read: u64, asked: u64) -> Option<String> {
    (read * 4 < asked).then(|| {
        format!(
            "only {read} of the {asked} pages chosen for the prediction could still be read \
             (their processes exited or unmapped them since the scan): the memory changed under \
             the measurement, and the prediction and the sizes stand on few pages; run again \
             when the machine is steadier"
        )
    })
}

/// Pages the chosen configuration's prediction is made from: four times
/// the candidates' default sample, single pages rather than runs; one
/// compressor over 256 MiB takes about a second.
const PREDICTION_PAGES: u64 = 65536;

/// Fills a store of `spec` with [`PREDICTION_PAGES`] pages at even steps
/// over the scan and predicts all the scanned memory's `mem_used_total`,
/// with its 95% sampling error in percent (from the spread of the pages'
/// compressed sizes, as for a simple random sample: even steps do at
/// least as well). Returns the store too, filled.
fn predict_chosen(
    scan: &Scan,
    spec: &recipe::spec::StoreSpec,
    seed: u64,
) -> Result<(zram::Store, u64, f64, u64), Error> {
    let mut refs = system_memory::even_pages(scan, PREDICTION_PAGES, seed);
    // Written in a random order, so that the half the overhead is fitted
    // from is a random half and not the first processes' pages.
    let mut rng = crate::rng::Rng::new(seed, 0x000b_de12);
    for i in (1..refs.len()).rev() {
        refs.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
    }
    let ps = scan.page_size as usize;
    let store = spec.open(refs.len() as u64 * scan.page_size)?;
    let half = refs.len() / 2;
    let (mut at_half, mut n) = (None, 0usize);
    let mut sizes: Vec<f64> = Vec::with_capacity(refs.len());
    // Each page's compressed size is what it adds to compr_data_size.
    let mut compressed = 0u64;
    let mut buf = Vec::new();
    for batch in refs.chunks(4096) {
        buf.clear();
        system_memory::read_into(batch, ps, &mut buf);
        for page in buf.chunks_exact(ps) {
            if n == half {
                at_half = Some((store.mm_stat(), n));
            }
            store
                .write_page(n as u64, page)
                .map_err(|e| Error::Failed(format!("write block {n}: {e}")))?;
            let now = store.mm_stat().compr_data_size;
            sizes.push((now - compressed) as f64);
            compressed = now;
            n += 1;
        }
    }
    if n == 0 {
        return Err(Error::Failed(
            "every process exited before its pages could be read".into(),
        ));
    }
    let full = store.mm_stat();
    let predicted = advise::predict(
        &full,
        at_half.as_ref().map(|(m, h)| (m, *h)),
        n,
        scan.pages as f64,
    );
    let mean = sizes.iter().sum::<f64>() / n as f64;
    let var = sizes.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n.max(2) - 1) as f64;
    let fpc = 1.0 - n as f64 / scan.pages as f64;
    let err = if mean > 0.0 {
        1.96 * (var / n as f64 * fpc.max(0.0)).sqrt() / mean * 100.0
    } else {
        0.0
    };
    Ok((store, predicted, err, n as u64))
}

/// An idle policy from the watch: the longest age watched, a day's budget
/// from what the watch saw written (at most Android's 1 GiB a day), rounds
/// of 5 to 300 MiB, and the secondary compressor that saves most on the
/// idle pages, where it saves at least 5% of them.
fn write_policy(report: &IdleReport, advice: &Advice, kernel: &KernelInfo) -> Policy {
    const MIB: u64 = 1 << 20;
    let age = report.points.last().map_or(report.seconds, |p| p.age_s);
    let idle_share = report.points.last().map_or(0.0, |p| p.idle_share);
    let daily = report
        .writeback_per_day_max
        .max(report.writeback_first_round)
        .min(1 << 30)
        .div_ceil(MIB)
        * MIB;
    let batch = (report.writeback_first_round / 8).clamp(5 * MIB, 300 * MIB) / MIB * MIB;
    let mut reasons = vec![format!(
        "{:.0}% of the memory was untouched after {age} s (the longest age watched; Android's \
         policy waits 20 to 25 h: watch longer for a longer age)",
        idle_share * 100.0
    )];
    reasons.push(format!(
        "the first round writes {:.1} MiB ({:.1} MiB with compressed_writeback); pages written \
         during the watch come to at most {:.1} MiB a day: budget {} MiB a day, {} MiB a round",
        report.writeback_first_round as f64 / MIB as f64,
        report.writeback_first_round_compressed as f64 / MIB as f64,
        report.writeback_per_day_max as f64 / MIB as f64,
        daily / MIB,
        batch / MIB
    ));
    // The secondary the kernel offers that saves most (all of them are
    // in the report, those it lacks too).
    let secondary = |label: &str| advice.candidates.iter().find(|c| c.label == label);
    let best = report
        .recompression
        .iter()
        .filter(|r| r.saved_share >= 0.05)
        .filter(|r| {
            secondary(&r.secondary).is_some_and(|c| kernel.has_algorithm(c.candidate.comp.name()))
        })
        .max_by_key(|r| r.saved_bytes);
    let recompress = best.and_then(|r| {
        let c = secondary(&r.secondary)?;
        Some((c.candidate.comp.name().to_string(), c.candidate.level))
    });
    match best {
        Some(r) => reasons.push(format!(
            "recompressing the idle pages with {} saves {:.1} MiB ({:.0}% of their {} bytes)",
            r.secondary,
            r.saved_bytes as f64 / MIB as f64,
            r.saved_share * 100.0,
            r.primary
        )),
        None => reasons.push(
            "no secondary compressor this kernel offers saves 5% on the idle pages: no \
             recompression"
                .into(),
        ),
    }
    if recompress.is_some() && !kernel.has_attribute("recomp_algorithm") {
        reasons.push(
            "this kernel's zram has no recomp_algorithm (CONFIG_ZRAM_MULTI_COMP): recompression \
             needs a kernel built with it"
                .into(),
        );
    }
    Policy {
        idle_age_s: age,
        batch_bytes: batch,
        daily_budget_bytes: daily,
        recompress,
        reasons,
    }
}

/// Writes every scanned page into a hot-added kernel zram device with the
/// chosen configuration and reads its `mm_stat` (`--verify`). The device is
/// removed afterwards, also when this fails or `stop` is set meanwhile (the
/// caller sets it on SIGINT or SIGTERM), which ends the writing with an
/// error.
pub fn verify(m: &MachineAdvice, stop: &AtomicBool) -> Result<Verify, Error> {
    let (scan, chosen) = (&m.scan, &m.chosen);
    let start = Instant::now();
    let params = chosen.level_set.then(|| format!("level={}", chosen.level));
    let bytes = scan.pages * scan.page_size;
    let dev = KernelZram::create_with(&chosen.comp, params.as_deref(), bytes)
        .map_err(|e| Error::Failed(format!("--verify: {e}")))?;
    let out = dev
        .writer()
        .map_err(|e| Error::Failed(format!("--verify: opening /dev/zram{}: {e}", dev.id())))?;
    const CHUNK: usize = 256;
    let mut buf = PageBuffer::zeroed(CHUNK * scan.page_size as usize);
    let mut at = 0u64;
    let missed = system_memory::for_each_chunk(scan, CHUNK, |chunk| {
        if stop.load(Ordering::Relaxed) {
            return Err(Error::Failed(format!(
                "--verify: interrupted after {} pages; zram{} removed",
                at / scan.page_size,
                dev.id()
            )));
        }
        buf[..chunk.len()].copy_from_slice(chunk);
        std::os::unix::fs::FileExt::write_all_at(&out, &buf[..chunk.len()], at)
            .map_err(|e| Error::Failed(format!("--verify: writing /dev/zram{}: {e}", dev.id())))?;
        at += chunk.len() as u64;
        Ok(())
    })?;
    out.sync_all()
        .map_err(|e| Error::Failed(format!("--verify: {e}")))?;
    let mm_stat = dev
        .mm_stat()
        .map_err(|e| Error::Failed(format!("--verify: {e}")))?;
    let written = scan.pages - missed;
    let predicted =
        (chosen.predicted_mem_used_total as f64 * written as f64 / scan.pages as f64) as u64;
    let kernel = mm_stat.get(2).copied().unwrap_or(0);
    Ok(Verify {
        device: format!("zram{}", dev.id()),
        comp: chosen.comp.clone(),
        pages_written: written,
        pages_missed: missed,
        error_pct: (kernel as f64 - predicted as f64) / kernel.max(1) as f64 * 100.0,
        mm_stat,
        predicted_mem_used_total: predicted,
        seconds: start.elapsed().as_secs_f64(),
    })
}

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / 1048576.0)
}

/// The sysfs lines for the chosen configuration, in the order the kernel
/// takes them (the compressor and its level before `disksize`, `mem_limit`
/// after), for a device `zramN`.
pub(crate) fn sysfs_lines(m: &MachineAdvice) -> Vec<String> {
    let c = &m.chosen;
    let mut v = vec![format!("echo {} > /sys/block/zramN/comp_algorithm", c.comp)];
    if c.level_set {
        v.push(format!(
            "echo \"algo={} level={}\" > /sys/block/zramN/algorithm_params",
            c.comp, c.level
        ));
    }
    v.push(format!(
        "echo {}M > /sys/block/zramN/disksize",
        m.sizing.disksize >> 20
    ));
    v.push(format!(
        "echo {}M > /sys/block/zramN/mem_limit",
        m.sizing.mem_limit >> 20
    ));
    v
}

/// The report as text: the configuration for this kernel first (its
/// commands, sizes and sysctls), then what a kernel with more compressors
/// would gain, marked as such, then the measurements.
pub fn format(m: &MachineAdvice) -> String {
    let mut s = String::new();
    let line = |s: &mut String, t: String| {
        s.push_str(&t);
        s.push('\n');
    };
    line(&mut s, format!("read: {}", m.scan.summary()));
    let top: Vec<String> = m
        .scan
        .processes
        .iter()
        .take(5)
        .map(|p| format!("{} {} ({})", p.pid, p.comm, mib(p.pages * m.scan.page_size)))
        .collect();
    line(&mut s, format!("largest: {}", top.join(", ")));
    line(&mut s, format!("sample: {}", m.advice.sample));
    line(
        &mut s,
        format!(
            "kernel zram: {} (read from {})",
            if m.kernel.algorithms.is_empty() {
                "compressors unknown".to_string()
            } else {
                m.kernel.algorithms.join(" ")
            },
            m.kernel.source
        ),
    );
    let c = &m.chosen;
    line(&mut s, String::new());
    line(
        &mut s,
        format!(
            "for this kernel (--goal {}): {} in kernel-compat mode: {} of memory for {} of \
             pages, ratio {:.2} (+/-{:.1}% sampling error, 95%, from {} pages); zmem's default \
             mode: {}",
            c.goal,
            c.label,
            mib(c.predicted_mem_used_total),
            mib(m.scan.pages * m.scan.page_size),
            c.ratio,
            c.sampling_error_pct,
            c.prediction_pages,
            mib(c.predicted_default_mode)
        ),
    );
    if let Some(note) = &c.prediction_note {
        line(&mut s, format!("  warning: {note}"));
    }
    let z = &m.sizing;
    let rounding = if z.capped_from.is_some() {
        String::new()
    } else {
        format!(
            "; the ratio asks for ram * {:.2}, rounded down to a step of {}, as the ratio moves \
             with the memory in use from run to run more than its sampling error",
            z.asked_factor, z.factor_step
        )
    };
    line(
        &mut s,
        format!(
            "sizes for at most {:.0}% of {} RAM compressed: mem_limit {}, disksize {} \
             (zram-generator: zram-size = {}{rounding})",
            z.target_share * 100.0,
            mib(z.mem_total),
            mib(z.mem_limit),
            mib(z.disksize),
            z.zram_size,
        ),
    );
    if let Some(note) = &z.same_filled_note {
        line(&mut s, format!("  {note}"));
    }
    if let Some(asked) = z.capped_from {
        line(
            &mut s,
            format!(
                "  capped at {} x RAM: the measured ratio asked for ram * {asked}, and the \
                 kernel's zram documentation sees little point in a device over twice the \
                 memory (a sample of mostly same-filled pages measures ratios the working \
                 memory does not keep)",
                sizing::MAX_RAM_FACTOR
            ),
        );
    }
    line(
        &mut s,
        "  sysfs, in this order (--emit sysfs writes them as a script):".into(),
    );
    for l in sysfs_lines(m) {
        line(&mut s, format!("    {l}"));
    }
    line(
        &mut s,
        "  zram-generator.conf (--emit zram-generator):".into(),
    );
    line(&mut s, "    [zram0]".into());
    line(&mut s, format!("    zram-size = {}", z.zram_size));
    line(&mut s, format!("    compression-algorithm = {}", c.comp));
    let k = &m.swap_costs;
    line(
        &mut s,
        format!(
            "vm.swappiness = {}: {}",
            k.swappiness
                .map_or("(unchanged)".to_string(), |v| v.to_string()),
            k.swappiness_reason
        ),
    );
    line(
        &mut s,
        format!(
            "vm.page-cluster = {}: {}",
            k.page_cluster, k.page_cluster_reason
        ),
    );
    line(
        &mut s,
        "the defaults on this machine (when full, at the measured ratio):".into(),
    );
    for d in &z.defaults {
        line(
            &mut s,
            format!(
                "  {:<24} {:<22} disksize {:>12}, holds {:>12} = {:>5.1}% of RAM",
                d.name,
                d.zram_size,
                mib(d.disksize),
                mib(d.mem_when_full),
                d.share_of_ram * 100.0
            ),
        );
    }
    if let Some(e) = &c.elsewhere {
        line(&mut s, String::new());
        line(
            &mut s,
            format!(
                "with a kernel whose zram also offers {} (this one's does not: {}; not for this \
                 machine):",
                e.comp, e.kernel_option
            ),
        );
        line(
            &mut s,
            format!(
                "  --goal {} would take {}: {} against {}'s {} ({:+.1}%), reads p50 {:.1} us \
                 against {:.1} us (both in zmem's default mode, for all the memory)",
                c.goal,
                e.label,
                mib(e.predicted_default_mode),
                c.label,
                mib(c.predicted_default_mode),
                (e.predicted_default_mode as f64 / c.predicted_default_mode.max(1) as f64 - 1.0)
                    * 100.0,
                e.read_p50_us,
                c.read_p50_us
            ),
        );
    }
    if let Some(i) = &m.idle {
        line(&mut s, String::new());
        line(&mut s, format!("idle over {} s ({}):", i.seconds, i.method));
        if !i.exited.is_empty() {
            let pids: Vec<String> = i.exited.iter().take(8).map(u32::to_string).collect();
            line(
                &mut s,
                format!(
                    "  {} watched process(es) exited during the watch ({}{}): counted in the points \
                     taken before each exit, left out of those after",
                    i.exited.len(),
                    pids.join(" "),
                    if i.exited.len() > 8 { " ..." } else { "" }
                ),
            );
        }
        for p in &i.points {
            line(
                &mut s,
                format!(
                    "  after {:>6} s: {:5.1}% untouched ({} of {} resident)",
                    p.age_s,
                    p.idle_share * 100.0,
                    mib(p.resident - p.referenced),
                    mib(p.resident)
                ),
            );
        }
        line(
            &mut s,
            match i.sampled_written {
                Some(w) => format!(
                    "  sampled pages written during the watch: {w} of {}",
                    i.sampled_pages
                ),
                None => format!(
                    "  this kernel keeps no soft-dirty bits: the {} sampled pages weigh by \
                     their mapping's untouched share",
                    i.sampled_pages
                ),
            },
        );
        for r in &i.recompression {
            line(
                &mut s,
                format!(
                    "  idle pages {} -> {}: saves {} ({:.0}%)",
                    r.primary,
                    r.secondary,
                    mib(r.saved_bytes),
                    r.saved_share * 100.0
                ),
            );
        }
    }
    if let Some(p) = &m.policy {
        line(
            &mut s,
            format!(
                "policy: idle after {} s, write back at most {} a round and {} a day{}",
                p.idle_age_s,
                mib(p.batch_bytes),
                mib(p.daily_budget_bytes),
                p.recompress
                    .as_ref()
                    .map_or(String::new(), |(a, l)| format!(
                        ", recompress idle pages with {a} (level {l})"
                    ))
            ),
        );
        for r in &p.reasons {
            line(&mut s, format!("  {r}"));
        }
    }
    if let Some(v) = &m.verify {
        line(&mut s, String::new());
        line(
            &mut s,
            format!(
                "kernel check: {} pages written to {} ({}) in {:.1} s{}",
                v.pages_written,
                v.device,
                v.comp,
                v.seconds,
                if v.pages_missed > 0 {
                    format!(", {} could no longer be read", v.pages_missed)
                } else {
                    String::new()
                }
            ),
        );
        line(
            &mut s,
            format!(
                "  kernel mm_stat: {}",
                v.mm_stat
                    .iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
        );
        line(
            &mut s,
            format!(
                "  mem_used_total: kernel {} predicted {} ({:+.2}% off)",
                v.mm_stat.get(2).copied().unwrap_or(0),
                v.predicted_mem_used_total,
                -v.error_pct
            ),
        );
    }
    for w in &m.warnings {
        line(&mut s, format!("warning: {w}"));
    }
    line(&mut s, String::new());
    line(
        &mut s,
        "measured on the sample (every candidate, whatever this kernel offers):".into(),
    );
    s.push_str(&advise::format_measurements(&m.advice));
    line(
        &mut s,
        format!(
            "\nthe files to install: zmem advise ... --emit zram-generator|sysfs|sysctl|zmem \
             ({:.1} s)",
            m.seconds
        ),
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use zcomp::Algorithm;

    fn result(comp: Algorithm, level: i32, mem: u64, read: f64) -> CandidateResult {
        let label = format!("{} {level}", comp.name());
        crate::advise::tests::measured(Candidate::new(comp, level), &label, mem, read)
    }

    #[test]
    fn the_choice_keeps_to_what_the_kernel_offers() {
        let measured = vec![
            result(Algorithm::Zstd, 3, 100, 5.0),
            result(Algorithm::LzoRle, 1, 130, 2.0),
            result(Algorithm::Lz4, 1, 134, 1.0),
        ];
        let kernel = KernelInfo {
            source: "test".into(),
            algorithms: vec!["lzo-rle".into(), "lzo".into(), "lz4".into()],
            attributes: Vec::new(),
            zswap_enabled: None,
        };
        assert_eq!(
            choose(&measured, &kernel, "memory").unwrap().label,
            "lzo-rle 1"
        );
        // Within 5% of the least memory, the fastest reads.
        assert_eq!(
            choose(&measured, &kernel, "balanced").unwrap().label,
            "lz4 1"
        );
        let unknown = KernelInfo {
            algorithms: Vec::new(),
            ..kernel.clone()
        };
        assert_eq!(
            choose(&measured, &unknown, "memory").unwrap().label,
            "zstd 3"
        );
        let none = KernelInfo {
            algorithms: vec!["842".into()],
            ..kernel
        };
        assert!(choose(&measured, &none, "memory").is_none());
    }

    /// A machine's report on a kernel whose zram offers lzo-rle, lzo and
    /// lz4, measured on a sample of mostly zero pages where zstd 7 needs
    /// the least memory.
    fn report() -> (MachineAdvice, String) {
        let mut bytes = vec![0u8; 48 * 4096];
        for i in 0..16usize {
            bytes.extend(
                (0..4096).map(|j| b"zram page text and some more "[(i * 7 + j / 3 + j % 5) % 29]),
            );
        }
        let sample = advise::Sample {
            input_pages: 64,
            page_size: 4096,
            how: "all 64 pages".into(),
            training: Vec::new(),
            bytes,
        };
        let opts = AdviseOptions {
            latency_reads: 200,
            kernel: recipe::KernelCompat::given(Algorithm::LzoRle),
            ..AdviseOptions::default()
        };
        let candidates = [
            Candidate::new(Algorithm::Zstd, 7),
            Candidate::new(Algorithm::Lzo, 1),
        ];
        let mut advice = advise::advise("test".into(), &sample, &candidates, &opts).unwrap();
        let kernel = KernelInfo {
            source: "test".into(),
            algorithms: vec!["lzo-rle".into(), "lzo".into(), "lz4".into()],
            attributes: Vec::new(),
            zswap_enabled: None,
        };
        keep_accepted(&mut advice, &kernel);
        let best = choose(&advice.candidates, &kernel, "memory")
            .unwrap()
            .clone();
        let elsewhere =
            choose_elsewhere(&advice.candidates, &kernel, "memory").map(|r| Elsewhere {
                label: r.label.clone(),
                comp: r.candidate.comp.name().to_string(),
                kernel_option: backend_option(r.candidate.comp.name()),
                predicted_default_mode: r.predicted_mem_used_total,
                read_p50_us: r.read_p50_us,
            });
        let chosen = Chosen {
            goal: "memory".into(),
            label: best.label.clone(),
            comp: best.candidate.comp.name().into(),
            level: best.candidate.level,
            level_set: false,
            predicted_mem_used_total: best.predicted_mem_used_total,
            predicted_default_mode: best.predicted_mem_used_total,
            sampling_error_pct: 0.0,
            prediction_pages: 64,
            prediction_pages_asked: 64,
            prediction_note: None,
            ratio: 64.0 * 4096.0 / best.predicted_mem_used_total as f64,
            read_p50_us: best.read_p50_us,
            elsewhere,
        };
        let same = advice.same_filled_pages as f64 / advice.sample_pages as f64;
        let m = MachineAdvice {
            scan: Scan {
                scope: "test".into(),
                page_size: 4096,
                processes: Vec::new(),
                skipped: Vec::new(),
                kernel_threads: 0,
                pages: 64,
                shared_pages: 0,
                seconds: 0.0,
            },
            sizing: sizing::size(8 << 30, chosen.ratio, 0.25, same),
            advice,
            kernel,
            chosen,
            swap_costs: SwapCosts {
                device: Some("/dev/test".into()),
                device_read_us: Some(50.0),
                device_read8_us: Some(80.0),
                device_cost: None,
                store_read_us: 3.0,
                store_read8_us: 24.0,
                store_cost: None,
                swappiness_exact: Some(188.7),
                swappiness_range: Some((186.0, 190.0)),
                swappiness: Some(180),
                swappiness_reason: "measured".into(),
                page_cluster: 0,
                page_cluster_reason: "measured".into(),
            },
            idle: None,
            policy: None,
            verify: None,
            backing_dev: None,
            warnings: Vec::new(),
            seconds: 1.0,
        };
        let text = format(&m);
        (m, text)
    }

    /// The report gives this kernel's configuration first, as lines it
    /// accepts; what zstd would gain comes after, marked as for another
    /// kernel, and no line anywhere is a command this kernel refuses.
    #[test]
    fn the_report_gives_this_kernels_commands_first_and_no_others() {
        let (m, text) = report();
        assert_eq!(m.chosen.label, "lzo");
        let e = m.chosen.elsewhere.as_ref().unwrap();
        assert_eq!(e.label, "zstd 7");
        assert_eq!(e.kernel_option, "CONFIG_ZRAM_BACKEND_ZSTD");
        let at = |needle: &str| {
            text.find(needle)
                .unwrap_or_else(|| panic!("no {needle:?} in\n{text}"))
        };
        let ours = at("    echo lzo > /sys/block/zramN/comp_algorithm");
        let theirs = at("with a kernel whose zram also offers zstd (this one's does not");
        assert!(ours < theirs, "{text}");
        assert!(at("vm.swappiness = 180") < theirs, "{text}");
        assert!(at("    compression-algorithm = lzo\n") < theirs, "{text}");
        assert!(theirs < at("measured on the sample"), "{text}");
        assert!(at("not for this machine") > theirs);
        // Every command names a compressor this kernel offers.
        for line in text.lines().filter(|l| l.contains("echo ")) {
            assert!(!line.contains("zstd"), "{line}\n{text}");
        }
        assert!(!text.contains("for --goal"), "{text}");
        assert!(m
            .advice
            .recommendations
            .iter()
            .all(|r| !r.label.starts_with("zstd") || r.kernel.is_empty()));
        // The sysfs lines are the sizes'.
        assert!(text.contains(&format!(
            "    echo {}M > /sys/block/zramN/disksize\n",
            m.sizing.disksize >> 20
        )));
        assert!(text.contains(&format!("zram-size = {}", m.sizing.zram_size)));
    }

    /// A prediction from fewer than a quarter of its pages says so under
    /// the choice.
    #[test]
    fn a_prediction_from_few_pages_says_so() {
        assert!(few_pages_note(25452, 65536).is_none());
        let note = few_pages_note(534, 65536).unwrap();
        assert!(note.starts_with("only 534 of the 65536 pages"), "{note}");
        let (mut m, _) = report();
        m.chosen.prediction_note = Some(note.clone());
        let text = format(&m);
        let lines: Vec<&str> = text.lines().collect();
        let at = lines
            .iter()
            .position(|l| l.starts_with("for this kernel"))
            .unwrap();
        assert_eq!(lines[at + 1], format!("  warning: {note}"));
    }

    /// Three quarters of the sample are zero pages: the line after the
    /// sizes says so.
    #[test]
    fn mostly_same_filled_pages_are_noted_beside_the_sizes() {
        let (m, text) = report();
        assert_eq!(m.advice.same_filled_pages, 48);
        let lines: Vec<&str> = text.lines().collect();
        let sizes = lines
            .iter()
            .position(|l| l.starts_with("sizes for at most 25%"))
            .unwrap();
        assert!(
            lines[sizes + 1].starts_with("  75% of the sampled pages are same-filled"),
            "{text}"
        );
        // Capped: the cap's line says what the ratio asked for.
        assert!(m.sizing.capped_from.is_some());
        assert!(
            lines[sizes + 2].starts_with("  capped at 2 x RAM"),
            "{text}"
        );
    }
}
