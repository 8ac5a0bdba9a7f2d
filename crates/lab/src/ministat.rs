//! Two-sample comparison in the layout of FreeBSD's ministat, as the
//! fine-grained fullness series prints it: a summary row per
//! sample and the difference of the means at 95% confidence by Student's t
//! with a pooled standard deviation.
//!
//! Owns the arithmetic and its text; knows nothing about what is measured.

use std::fmt::Write as _;

use serde::Serialize;

/// Summary of one sample.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Summary {
    /// Number of values.
    pub n: usize,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
    /// Median (mean of the middle two for an even count).
    pub median: f64,
    /// Arithmetic mean.
    pub avg: f64,
    /// Sample standard deviation (n - 1).
    pub stddev: f64,
}

impl Summary {
    /// Summarises `values` (at least two).
    pub fn of(values: &[f64]) -> Summary {
        let n = values.len();
        assert!(n >= 2, "a sample needs two values");
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let avg = v.iter().sum::<f64>() / n as f64;
        let var = v.iter().map(|x| (x - avg) * (x - avg)).sum::<f64>() / (n - 1) as f64;
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Summary {
            n,
            min: v[0],
            max: v[n - 1],
            median,
            avg,
            stddev: var.sqrt(),
        }
    }
}

/// The difference of two means at 95% confidence.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Difference {
    /// `avg(y) - avg(x)`.
    pub diff: f64,
    /// Half-width of the 95% confidence interval of `diff`.
    pub plus_minus: f64,
    /// `diff` as a percentage of `avg(x)`.
    pub percent: f64,
    /// `plus_minus` as a percentage of `avg(x)`.
    pub percent_plus_minus: f64,
    /// Pooled standard deviation.
    pub pooled_s: f64,
    /// Whether the interval excludes zero.
    pub significant: bool,
}

/// ln Γ(x) for x > 0 (Lanczos, g = 7, 9 terms).
fn ln_gamma(x: f64) -> f64 {
    const C: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    let x = x - 1.0;
    let t = x + 7.5;
    let series = C[1..]
        .iter()
        .enumerate()
        .fold(C[0], |acc, (i, c)| acc + c / (x + i as f64 + 1.0));
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + series.ln()
}

/// The regularised incomplete beta function I_x(a, b) (continued fraction,
/// modified Lentz).
fn incomplete_beta(x: f64, a: f64, b: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    if x > (a + 1.0) / (a + b + 2.0) {
        return 1.0 - incomplete_beta(1.0 - x, b, a);
    }
    let front =
        (ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b) + a * x.ln() + b * (1.0 - x).ln()).exp() / a;
    let tiny = 1e-300;
    let (mut c, mut d) = (1.0, 1.0 - (a + b) * x / (a + 1.0));
    d = if d.abs() < tiny { 1.0 / tiny } else { 1.0 / d };
    let mut f = d;
    for m in 1..300 {
        let m = f64::from(m);
        for step in 0..2 {
            let num = if step == 0 {
                m * (b - m) * x / ((a + 2.0 * m - 1.0) * (a + 2.0 * m))
            } else {
                -(a + m) * (a + b + m) * x / ((a + 2.0 * m) * (a + 2.0 * m + 1.0))
            };
            d = 1.0 + num * d;
            d = if d.abs() < tiny { 1.0 / tiny } else { 1.0 / d };
            c = 1.0 + num / c;
            if c.abs() < tiny {
                c = tiny;
            }
            f *= c * d;
        }
        if (c * d - 1.0).abs() < 1e-15 {
            break;
        }
    }
    front * f
}

/// P(T <= t) for Student's t with `df` degrees of freedom, t >= 0.
fn t_cdf(t: f64, df: f64) -> f64 {
    1.0 - 0.5 * incomplete_beta(df / (df + t * t), df / 2.0, 0.5)
}

/// The 97.5% quantile of Student's t with `df` degrees of freedom, as
/// ministat uses it: exact up to 100 degrees of freedom, and the normal
/// limit 1.960 above (ministat's table ends there, and the fine-grained
/// fullness series' figures were made with it).
pub fn t_975(df: f64) -> f64 {
    if df > 100.0 {
        return 1.960;
    }
    let (mut lo, mut hi) = (0.0f64, 20.0f64);
    for _ in 0..200 {
        let mid = (lo + hi) / 2.0;
        if t_cdf(mid, df) < 0.975 {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    (lo + hi) / 2.0
}

/// Compares sample `y` against sample `x`.
pub fn difference(x: &Summary, y: &Summary) -> Difference {
    let (nx, ny) = (x.n as f64, y.n as f64);
    let df = nx + ny - 2.0;
    let pooled_s = (((nx - 1.0) * x.stddev.powi(2) + (ny - 1.0) * y.stddev.powi(2)) / df).sqrt();
    let plus_minus = t_975(df) * pooled_s * (1.0 / nx + 1.0 / ny).sqrt();
    let diff = y.avg - x.avg;
    Difference {
        diff,
        plus_minus,
        percent: diff / x.avg * 100.0,
        percent_plus_minus: plus_minus / x.avg * 100.0,
        pooled_s,
        significant: diff.abs() > plus_minus,
    }
}

/// The ministat block: legend, summary rows and the difference.
pub fn block(x_name: &str, x: &[f64], y_name: &str, y: &[f64]) -> String {
    let (sx, sy) = (Summary::of(x), Summary::of(y));
    let d = difference(&sx, &sy);
    let mut out = String::new();
    let _ = writeln!(out, "x {x_name}");
    let _ = writeln!(out, "+ {y_name}");
    let _ = writeln!(
        out,
        "    N           Min           Max        Median           Avg        Stddev"
    );
    for (mark, s) in [("x", sx), ("+", sy)] {
        let _ = writeln!(
            out,
            "{mark} {:>3} {:>13} {:>13} {:>13} {:>13.4} {:>13.4}",
            s.n, s.min, s.max, s.median, s.avg, s.stddev
        );
    }
    if d.significant {
        let _ = writeln!(out, "Difference at 95.0% confidence");
        let _ = writeln!(out, "        {:.6} +/- {:.6}", d.diff, d.plus_minus);
        let _ = writeln!(
            out,
            "        {:.4}% +/- {:.4}%",
            d.percent, d.percent_plus_minus
        );
        let _ = writeln!(out, "        (Student's t, pooled s = {:.6})", d.pooled_s);
    } else {
        let _ = writeln!(out, "No difference proven at 95.0% confidence");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn t_quantiles_match_the_table() {
        for (df, t) in [
            (1.0, 12.706_205),
            (5.0, 2.570_582),
            (10.0, 2.228_139),
            (30.0, 2.042_272),
            (100.0, 1.983_972),
        ] {
            assert!(
                (t_975(df) - t).abs() < 1e-5,
                "df {df}: {} vs {t}",
                t_975(df)
            );
        }
        // Above 100 degrees of freedom ministat uses the normal limit.
        assert_eq!(t_975(278.0), 1.960);
    }

    #[test]
    fn reproduces_the_fullness_series_difference_from_its_summaries() {
        // The fine-grained fullness series' first block: x avg
        // 2314.1214 sd 806.03271, + avg 1878.1714 sd 641.02073, N = 140 each:
        // -435.95 +/- 170.595, -18.8387% +/- 7.37193%, pooled s = 728.216.
        let x = Summary {
            n: 140,
            min: 349.0,
            max: 3513.0,
            median: 2461.0,
            avg: 2314.1214,
            stddev: 806.03271,
        };
        let y = Summary {
            n: 140,
            min: 289.0,
            max: 2778.0,
            median: 2006.0,
            avg: 1878.1714,
            stddev: 641.02073,
        };
        let d = difference(&x, &y);
        assert!((d.diff + 435.95).abs() < 0.01);
        assert!((d.plus_minus - 170.595).abs() < 0.001, "{}", d.plus_minus);
        assert!((d.percent + 18.8387).abs() < 0.001);
        assert!((d.percent_plus_minus - 7.37193).abs() < 0.01);
        assert!((d.pooled_s - 728.216).abs() < 0.01);
        assert!(d.significant);
    }

    #[test]
    fn summary_of_a_small_sample() {
        let s = Summary::of(&[4.0, 1.0, 3.0, 2.0]);
        assert_eq!(
            (s.n, s.min, s.max, s.median, s.avg),
            (4, 1.0, 4.0, 2.5, 2.5)
        );
        assert!((s.stddev - 1.290_994).abs() < 1e-6);
    }
}
