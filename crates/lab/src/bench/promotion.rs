//! `zmem bench region --promotion-run SECONDS`: the promotion-rate
//! controller against its target over time, on real data, with a phase
//! change in the middle.
//!
//! A region with no resident limit to speak of (its limit is its length,
//! so only age evictions, steered by the controller, compress pages)
//! holds the first data set. The workload reads pages at a steady rate:
//! for the first half of the run a Zipf pattern over one hot set (a share
//! of the pages, from a seeded shuffle), for the second half the same
//! pattern over another, disjoint hot set (the phase change). Every few
//! seconds a sample records the promotions (faults served from the store)
//! of the trailing minute as a share of the working set (resident and
//! probation pages, the controller's own measure), the target, the age
//! threshold, the resident bytes and the store's `mem_used_total`. Each
//! phase (the start included) reports how long the rate took to stay
//! within [target / 2, 2 x target] until the phase ended; a phase where it
//! never did makes the run fail, after the table and the plot.
//!
//! Owns this mode's flags, workload, samples and figure; the region is
//! used through its public API.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Args;
use region::{ControllerConfig, Region, RegionConfig};
use serde::Serialize;
use zcomp::Algorithm;

use crate::Error;
use recipe::output::{write_json, write_stdout, Format};
use tune::rng::Rng;

/// The rate's window: promotions are counted over the trailing minute (or
/// since the start, in the first minute), whatever the controller's period.
const WINDOW: Duration = Duration::from_secs(60);

/// Flags of the promotion-rate mode of `zmem bench region`.
#[derive(Args, Debug)]
pub struct PromotionArgs {
    /// Run the promotion-rate mode for SECONDS (2 to 86400) instead of the
    /// fault and limit measurements: a phase change at half time.
    #[arg(long = "promotion-run", value_name = "SECONDS", value_parser = recipe::flags::whole::<u64>(2, 86_400))]
    pub seconds: Option<u64>,
    /// The controller's period in seconds (0.1 to 3600; the region's default
    /// is 60). The target stays a share of the working set per minute.
    #[arg(long, default_value_t = 60.0, value_parser = recipe::flags::real(0.1, 3600.0, false))]
    pub controller_period: f64,
    /// The target: promotions per minute, in percent of the working set
    /// (above 0, at most 100; Google's far-memory objective is 0.2).
    #[arg(long, default_value_t = 0.2, value_parser = recipe::flags::real(0.0, 100.0, true))]
    pub target_percent: f64,
    /// Page reads per second of the promotion run (1 to 10^7).
    #[arg(long, default_value_t = 8_000, value_parser = recipe::flags::whole_usize(1, 10_000_000))]
    pub read_rate: usize,
    /// Each phase's hot set, in percent of the region's pages (1 to 50).
    #[arg(long, default_value_t = 25.0, value_parser = recipe::flags::real(1.0, 50.0, false))]
    pub hot_percent: f64,
    /// Seconds between samples of the promotion run (0.1 to 600).
    #[arg(long, default_value_t = 5.0, value_parser = recipe::flags::real(0.1, 600.0, false))]
    pub sample_every: f64,
    /// Path stem of the promotion run's plots (`.svg` and `.png` are added;
    /// the threshold's plot gets `-threshold`).
    #[arg(long, default_value = "out/bench-region-promotion")]
    pub plot: PathBuf,
    /// Do not draw the promotion run's plots.
    #[arg(long)]
    pub no_plot: bool,
}

/// One sample.
#[derive(Debug, Serialize)]
struct Sample {
    /// Seconds since the workload started.
    t_s: f64,
    /// "A" or "B".
    phase: &'static str,
    /// Promotions so far.
    promotions: u64,
    /// Promotions per minute over the trailing minute, in percent of the
    /// working set now.
    rate_percent: f64,
    /// The target, in percent of the working set per minute.
    target_percent: f64,
    /// The controller's own measure, over its last period, in percent.
    controller_rate_percent: f64,
    /// The age threshold, in seconds.
    threshold_s: f64,
    /// Resident and probation pages.
    working_set_pages: u64,
    /// Bytes mapped.
    resident_bytes: u64,
    /// Pages in the store.
    stored_pages: u64,
    /// The store's `mem_used_total`.
    mem_used_total: u64,
    /// Faults served from probation copies so far.
    probation_faults: u64,
    /// Age evictions so far.
    evicted_age: u64,
}

/// How one phase went.
#[derive(Debug, Serialize)]
struct Phase {
    name: &'static str,
    start_s: f64,
    end_s: f64,
    /// Seconds from the phase's start until the rate stayed in the band to
    /// the phase's end; `None`: it never did.
    settled_after_s: Option<f64>,
    /// The most promotions per minute of the phase, in percent.
    peak_rate_percent: f64,
    /// The rate at the phase's last sample, in percent.
    last_rate_percent: f64,
}

/// The promotion run's report.
#[derive(Debug, Serialize)]
struct Report {
    corpus: String,
    compressor: String,
    data_bytes: u64,
    hot_pages: usize,
    read_rate: usize,
    zipf: f64,
    controller: ControllerConfig,
    window_s: f64,
    reads: u64,
    samples: Vec<Sample>,
    phases: Vec<Phase>,
    plot: Option<[PathBuf; 4]>,
}

/// The run's shape, checked before the region is made.
fn check(args: &PromotionArgs, seconds: u64) -> Result<(), Error> {
    let half = seconds as f64 / 2.0;
    if args.sample_every * 2.0 > half {
        return Err(Error::Failed(format!(
            "--sample-every {} leaves fewer than two samples in each phase of --promotion-run {seconds}",
            args.sample_every
        )));
    }
    Ok(())
}

/// The cumulative Zipf weights of ranks 1..=n.
fn zipf_cum(n: usize, s: f64) -> Vec<f64> {
    let mut t = 0.0;
    (1..=n)
        .map(|r| {
            t += 1.0 / (r as f64).powf(s);
            t
        })
        .collect()
}

/// Runs the promotion mode over `data` (named `corpus`) with compressor
/// `comp` and the Zipf exponent `zipf`; writes the report in `format`.
pub fn run(
    args: &PromotionArgs,
    seconds: u64,
    corpus: &str,
    data: &[u8],
    comp: Algorithm,
    zipf: f64,
    format: Format,
) -> Result<(), Error> {
    check(args, seconds)?;
    let ps = region::page_size();
    let len = data.len() / ps * ps;
    let n = len / ps;
    let hot = ((n as f64 * args.hot_percent / 100.0) as usize).max(1);
    let controller = ControllerConfig {
        target: args.target_percent / 100.0,
        period: Duration::from_secs_f64(args.controller_period),
        ..ControllerConfig::default()
    };
    let mut cfg = RegionConfig::new(len);
    cfg.store.comp = comp;
    cfg.controller = controller;
    let r = Region::new(len, cfg).map_err(|e| Error::Failed(format!("region: {e}")))?;
    let base = r.as_ptr();
    // SAFETY: the region holds `len` bytes; the data as many.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), base, len) };

    let order = super::data::shuffled(n, 17);
    let sets = [&order[..hot], &order[hot..2 * hot]];
    let cum = zipf_cum(hot, zipf);
    let total = *cum.last().unwrap_or(&1.0);
    let mut rng = Rng::new(19, 3);
    let words = ps / 8;

    let run_for = Duration::from_secs(seconds);
    let change = run_for / 2;
    let every = Duration::from_secs_f64(args.sample_every);
    let target = args.target_percent;
    let mut samples: Vec<Sample> = Vec::new();
    let mut history: Vec<(Duration, u64)> = vec![(Duration::ZERO, 0)];
    let start = Instant::now();
    let mut next_sample = every;
    let mut reads: u64 = 0;
    loop {
        let now = start.elapsed();
        if now >= next_sample {
            let s = r.stats();
            let p = s.faults.missing_store;
            let (t0, p0) = *history
                .iter()
                .find(|(t, _)| *t + WINDOW >= now)
                .unwrap_or(&(Duration::ZERO, 0));
            history.push((now, p));
            let wss = s.resident_pages + s.probation_pages;
            let minutes = (now - t0).as_secs_f64().max(1e-3) / 60.0;
            let rate = (p - p0) as f64 / minutes / wss.max(1) as f64 * 100.0;
            samples.push(Sample {
                t_s: now.as_secs_f64(),
                phase: if now < change { "A" } else { "B" },
                promotions: p,
                rate_percent: rate,
                target_percent: target,
                controller_rate_percent: s.promotion_rate * 100.0,
                threshold_s: s.age_threshold_ms as f64 / 1000.0,
                working_set_pages: wss,
                resident_bytes: s.resident_pages * ps as u64,
                stored_pages: s.stored_pages,
                mem_used_total: s.mm_stat.mem_used_total,
                probation_faults: s.faults.missing_probation,
                evicted_age: s.evictions.age,
            });
            next_sample += every;
            if now >= run_for {
                break;
            }
            continue;
        }
        // Catch up with the steady rate, then sleep a millisecond.
        let due = (now.as_secs_f64() * args.read_rate as f64) as u64;
        let set = sets[usize::from(now >= change)];
        while reads < due {
            let x = rng.unit() * total;
            let page = set[cum.partition_point(|&c| c < x).min(hot - 1)];
            let off = page * ps + (reads as usize % words) * 8;
            // SAFETY: a word inside page `page` of the region.
            let got = unsafe { std::ptr::read_volatile(base.add(off).cast::<u64>()) };
            let want = u64::from_ne_bytes(data[off..off + 8].try_into().unwrap_or_default());
            if got != want {
                return Err(Error::Failed(format!(
                    "{corpus}: page {page} of the region reads back different from the data"
                )));
            }
            reads += 1;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(r);

    let change_s = change.as_secs_f64();
    let end_s = samples.last().map_or(0.0, |s| s.t_s);
    let phases = vec![
        phase("A", 0.0, change_s, &samples, target),
        phase("B", change_s, end_s, &samples, target),
    ];
    let plot = if args.no_plot {
        None
    } else {
        draw(&args.plot, &samples, change_s, args.controller_period)?
    };
    let report = Report {
        corpus: corpus.into(),
        compressor: comp.name().into(),
        data_bytes: len as u64,
        hot_pages: hot,
        read_rate: args.read_rate,
        zipf,
        controller,
        window_s: WINDOW.as_secs_f64(),
        reads,
        samples,
        phases,
        plot,
    };
    match format {
        Format::Json => write_json(&report)?,
        Format::Table => write_stdout(&table(&report))?,
    }
    let unsettled: Vec<String> = report
        .phases
        .iter()
        .filter(|p| p.settled_after_s.is_none())
        .map(|p| {
            format!(
                "phase {} (from {:.0} s): last {:.3}%/min",
                p.name, p.start_s, p.last_rate_percent
            )
        })
        .collect();
    if !unsettled.is_empty() {
        return Err(Error::Failed(format!(
            "the promotion rate never settled within [{}, {}]%/min of the working set: {}",
            target / 2.0,
            target * 2.0,
            unsettled.join("; ")
        )));
    }
    Ok(())
}

/// Whether `rate` is within [target / 2, 2 x target].
fn in_band(rate: f64, target: f64) -> bool {
    rate >= target / 2.0 && rate <= target * 2.0
}

/// Phase `name` over the samples taken in `(start_s, end_s]`: when the rate
/// came into the band for good.
fn phase(name: &'static str, start_s: f64, end_s: f64, samples: &[Sample], target: f64) -> Phase {
    let own: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.t_s > start_s && s.t_s <= end_s + 1e-9)
        .collect();
    // The first sample from which every later one of the phase is in band.
    let mut settled = None;
    for s in own.iter().rev() {
        if in_band(s.rate_percent, target) {
            settled = Some(s.t_s - start_s);
        } else {
            break;
        }
    }
    Phase {
        name,
        start_s,
        end_s,
        settled_after_s: settled,
        peak_rate_percent: own.iter().map(|s| s.rate_percent).fold(0.0, f64::max),
        last_rate_percent: own.last().map_or(0.0, |s| s.rate_percent),
    }
}

#[cfg(feature = "plot")]
fn draw(
    stem: &Path,
    samples: &[Sample],
    change_s: f64,
    period: f64,
) -> Result<Option<[PathBuf; 4]>, Error> {
    use crate::plot::{line_chart, line_chart_log_y, Chart, Series};
    let line = |name: &str, f: &dyn Fn(&Sample) -> f64| Series {
        name: name.into(),
        points: samples.iter().map(|s| (s.t_s, f(s))).collect(),
    };
    let rates: Vec<f64> = samples
        .iter()
        .flat_map(|s| {
            [
                s.rate_percent,
                s.target_percent / 2.0,
                s.target_percent * 2.0,
            ]
        })
        .filter(|&y| y > 0.0)
        .collect();
    let lo = rates.iter().copied().fold(f64::MAX, f64::min);
    let hi = rates.iter().copied().fold(0.0, f64::max);
    let marker = |lo: f64, hi: f64| Series {
        name: "phase change".into(),
        points: vec![(change_s, lo), (change_s, hi)],
    };
    let title = format!("Promotions per minute against the target (controller period {period} s)");
    let (svg, png) = line_chart_log_y(
        stem,
        &Chart {
            title: &title,
            x_label: "seconds",
            y_label: "% of the working set per minute (log scale)",
            series: &[
                line("promotions, trailing minute", &|s| s.rate_percent),
                line("target", &|s| s.target_percent),
                line("2 x target", &|s| s.target_percent * 2.0),
                line("target / 2", &|s| s.target_percent / 2.0),
                marker(lo, hi),
            ],
        },
    )?;
    let top = samples.iter().map(|s| s.threshold_s).fold(0.0, f64::max);
    let mut tstem = stem.as_os_str().to_owned();
    tstem.push("-threshold");
    let (tsvg, tpng) = line_chart(
        Path::new(&tstem),
        &Chart {
            title: &format!("The age threshold (controller period {period} s)"),
            x_label: "seconds",
            y_label: "age threshold (s)",
            series: &[line("age threshold", &|s| s.threshold_s), marker(0.0, top)],
        },
    )?;
    Ok(Some([svg, png, tsvg, tpng]))
}

#[cfg(not(feature = "plot"))]
fn draw(_: &Path, _: &[Sample], _: f64, _: f64) -> Result<Option<[PathBuf; 4]>, Error> {
    Ok(None)
}

fn table(r: &Report) -> String {
    use std::fmt::Write as _;
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    let mut o = String::new();
    let c = &r.controller;
    let _ = writeln!(
        o,
        "promotion rate, {} ({:.0} MiB, {}): {} hot pages a phase, {} Zipf {} page reads a second",
        r.corpus,
        mib(r.data_bytes),
        r.compressor,
        r.hot_pages,
        r.read_rate,
        r.zipf
    );
    let _ = writeln!(
        o,
        "controller: target {}%/min of the working set, period {} s, threshold from {} s (min {} s); rate over the trailing {} s",
        c.target * 100.0,
        c.period.as_secs_f64(),
        c.initial.as_secs_f64(),
        c.min.as_secs_f64(),
        r.window_s
    );
    let _ = writeln!(
        o,
        "{:>7} {:>2} {:>8} {:>9} {:>9} {:>9} {:>8} {:>8} {:>9} {:>9} {:>8}",
        "t s",
        "ph",
        "promos",
        "rate %",
        "ctl %",
        "thresh s",
        "wss pg",
        "stored",
        "resid MiB",
        "used MiB",
        "in band"
    );
    for s in &r.samples {
        let _ = writeln!(
            o,
            "{:>7.1} {:>2} {:>8} {:>9.4} {:>9.4} {:>9.1} {:>8} {:>8} {:>9.1} {:>9.1} {:>8}",
            s.t_s,
            s.phase,
            s.promotions,
            s.rate_percent,
            s.controller_rate_percent,
            s.threshold_s,
            s.working_set_pages,
            s.stored_pages,
            mib(s.resident_bytes),
            mib(s.mem_used_total),
            if in_band(s.rate_percent, s.target_percent) {
                "yes"
            } else {
                "no"
            }
        );
    }
    let _ = writeln!(o, "{} page reads, every one equal to the data", r.reads);
    for p in &r.phases {
        let how = match p.settled_after_s {
            Some(t) => format!("settled {t:.0} s after its start"),
            None => "NEVER SETTLED".into(),
        };
        let _ = writeln!(
            o,
            "phase {} ({:.0}-{:.0} s): {how}; peak {:.3}%/min, last {:.4}%/min",
            p.name, p.start_s, p.end_s, p.peak_rate_percent, p.last_rate_percent
        );
    }
    if let Some(p) = &r.plot {
        let _ = writeln!(
            o,
            "plot: {} {} {} {}",
            p[0].display(),
            p[1].display(),
            p[2].display(),
            p[3].display()
        );
    }
    o
}
