//! The figures of `zmem advise --plot`: the two Pareto fronts of an
//! [`Advice`] (measured by `tune::advise`) drawn as line charts. It owns
//! only the drawing.

use tune::advise::{Advice, CandidateResult};

use crate::Error;

/// Draws the two Pareto fronts as line charts: `STEM-write.{svg,png}`
/// (memory against compression speed) and `STEM-read.{svg,png}` (memory
/// against read latency), each front's candidates joined in order of
/// memory. Returns the files written.
pub fn plot_fronts(a: &Advice, stem: &std::path::Path) -> Result<Vec<std::path::PathBuf>, Error> {
    use crate::plot::{line_chart, Chart, Series};
    let mib = |b: u64| b as f64 / 1048576.0;
    let front = |labels: &[String], y: fn(&CandidateResult) -> f64| -> Vec<(f64, f64)> {
        let mut pts: Vec<(f64, f64)> = a
            .candidates
            .iter()
            .filter(|r| labels.contains(&r.label))
            .map(|r| (mib(r.predicted_mem_used_total), y(r)))
            .collect();
        pts.sort_by(|p, q| p.0.total_cmp(&q.0));
        pts
    };
    let name = |suffix: &str| {
        let mut s = stem.as_os_str().to_owned();
        s.push(suffix);
        std::path::PathBuf::from(s)
    };
    let mut files = Vec::new();
    for (suffix, title, y_label, labels, y) in [
        (
            "-write",
            "zmem advise: memory against compression speed (Pareto front)",
            "compression, one core (MB/s)",
            &a.pareto_memory_write,
            (|r| r.compress_mbps) as fn(&CandidateResult) -> f64,
        ),
        (
            "-read",
            "zmem advise: memory against 4 KiB read latency (Pareto front)",
            "random 4 KiB read, median (us)",
            &a.pareto_memory_read,
            |r| r.read_p50_us,
        ),
    ] {
        let series = [Series {
            name: format!("front: {}", labels.join(", ")),
            points: front(labels, y),
        }];
        let (svg, png) = line_chart(
            &name(suffix),
            &Chart {
                title,
                x_label: "mem_used_total for the whole input (MiB)",
                y_label,
                series: &series,
            },
        )?;
        files.extend([svg, png]);
    }
    Ok(files)
}
