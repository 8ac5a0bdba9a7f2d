//! Every numeric flag of every subcommand, found by walking `zmem`'s own
//! command tree, refuses bad values while the arguments are parsed: zero,
//! negative, overflowing, non-numeric, empty and out-of-range values exit
//! with status 2 and one line on stderr naming the flag, never a panic.
//!
//! A flag is numeric when its value parser yields a number (or a list of
//! them), or when its value name says it holds a size (`SIZE`, `BYTES`).
//! [`RANGES`] gives each one's out-of-range values and whether 0 is valid
//! (documented in its help); a numeric flag missing from it fails the test,
//! so a new flag cannot go unchecked.

use std::any::TypeId;
use std::process::Command;

/// (subcommand path and flag, 0 is valid, values out of its range).
const RANGES: &[(&str, bool, &[&str])] = &[
    ("replay --pid", false, &["4194305"]),
    ("replay --page-size", false, &["12K", "128K", "4095"]),
    ("replay --unit", false, &["2K", "12K", "128K"]),
    ("replay --chain", false, &["17"]),
    ("replay --delta", false, &["12", "65544"]),
    ("replay --mem-limit", true, &["2T"]),
    ("replay --free-fraction", true, &["1.5", "nan", "inf"]),
    ("replay --seed", true, &[]),
    ("replay --default-size", false, &["4095", "2T"]),
    ("replay --ram", false, &["4095", "2P"]),
    ("replay --max-pool-percent", true, &["101"]),
    ("replay --accept-threshold-percent", true, &["101"]),
    ("advise --pid", false, &["4194305"]),
    ("advise --sample-pages", false, &["15", "4194305"]),
    ("advise --seed", true, &[]),
    ("advise --threads", false, &["65"]),
    ("advise --latency-reads", false, &["99", "10000001"]),
    ("advise --default-size", false, &["4095", "2T"]),
    ("advise --target-share", false, &["101"]),
    ("advise --ram", false, &["4095", "2P"]),
    ("advise --max-pool-percent", true, &["101"]),
    ("advise --accept-threshold-percent", true, &["101"]),
    ("classes --page-size", false, &["12288", "131072"]),
    ("classes --unit", false, &["2K", "12K", "128K"]),
    ("classes --chain", false, &["17"]),
    ("classes --delta", false, &["12", "65544"]),
    ("exp compaction --seed", true, &[]),
    ("exp compaction --zspages", false, &["1", "4097"]),
    ("exp chain --repeat", false, &["100001"]),
    ("exp chain --rounds", false, &["1001"]),
    ("exp chain --max-size", false, &["2G"]),
    ("exp chain --step", false, &["2G"]),
    ("exp chain --chains", false, &["17", "4,17"]),
    ("exp merge --chain", false, &["17"]),
    ("exp merge --dirs", false, &["1001"]),
    ("exp untar --size", false, &["63M", "2T"]),
    ("exp untar --settle-ms", false, &["99", "60001"]),
    ("exp latency --pages", false, &["63", "16777217"]),
    ("exp latency --ops", false, &["999"]),
    ("exp latency --rounds", false, &["101"]),
    ("exp latency --page-size", false, &["12K", "128K"]),
    ("exp latency --compact-ms", true, &["60001"]),
    ("exp latency --compact-every-ops", false, &["99"]),
    ("exp latency --retain-divisor", true, &["1048577"]),
    ("exp latency --seed", true, &[]),
    ("bench alloc --threads", false, &["1025", "1,1025"]),
    ("bench read-latency --seconds", false, &["3601", "nan"]),
    ("bench read-latency --page-cache-kib", true, &["67108865"]),
    ("bench read-latency --page-hold-kib", true, &["67108865"]),
    ("bench store --page-size", false, &["12K", "128K"]),
    ("bench store --unit", false, &["2K", "12K", "128K"]),
    ("bench store --chain", false, &["17"]),
    ("bench store --delta", false, &["12", "65544"]),
    ("bench store --mem-limit", true, &["2T"]),
    ("bench store --size", false, &["4095", "2T"]),
    ("bench store --rounds", false, &["1001"]),
    ("bench region --size", false, &["1023K", "5G"]),
    (
        "bench region --limit-percent",
        false,
        &["0.5", "101", "nan"],
    ),
    ("bench region --accesses", false, &["1000000001"]),
    ("bench region --zipf", false, &["0.05", "3.5", "nan"]),
    ("bench region --promotion-run", false, &["1", "86401"]),
    (
        "bench region --controller-period",
        false,
        &["0.05", "3601", "nan"],
    ),
    (
        "bench region --target-percent",
        false,
        &["101", "nan", "inf"],
    ),
    ("bench region --read-rate", false, &["10000001"]),
    ("bench region --hot-percent", false, &["0.5", "51"]),
    ("bench region --sample-every", false, &["0.05", "601"]),
    ("run --limit", false, &["4095", "2P"]),
    ("run --span", false, &["1023K", "65T"]),
    ("run --min-size", false, &["4095", "2G"]),
    ("run --handler-poll", true, &["10001", "-1"]),
    ("bench compressors --size", false, &["4095", "2T"]),
    ("bench compressors --rounds", false, &["1001"]),
    ("bench serve --runs", false, &["101"]),
    ("bench serve --settle", true, &["61", "nan"]),
    // Rounded up to whole pages first: 1000 is 4K, 1T plus one byte is out.
    ("serve --export", true, &["1099511627777", "2T"]),
    ("serve --size", false, &["1099511627777", "2T"]),
    ("serve --page-size", false, &["12K", "128K"]),
    ("serve --unit", false, &["2K", "12K", "128K"]),
    ("serve --chain", false, &["17"]),
    ("serve --delta", false, &["12", "65544"]),
    ("serve --mem-limit", true, &["2T"]),
    ("serve --writeback-batch-size", false, &["257"]),
    ("serve --swap-reserve", false, &["512K", "2T"]),
    ("serve --swap-oom-after", true, &["3601"]),
    ("serve --ublk-queues", false, &["65"]),
    ("serve --queue-depth", false, &["4097"]),
    ("serve --workers", false, &["65"]),
    ("serve --handshake-limit", false, &["3601"]),
    ("serve --max-connections", false, &["4097"]),
    ("serve --max-handshakes", false, &["4097"]),
    ("serve --inflight-per-conn", false, &["512K", "2G"]),
    ("serve --inflight-total", false, &["1M", "65G"]),
    ("serve --stall-limit", false, &["3601"]),
    ("replay --compact-cpu", false, &["101", "nan", "inf"]),
    ("replay --compact-min-gain", false, &["1073741825"]),
    ("bench store --compact-cpu", false, &["101", "nan", "inf"]),
    ("bench store --compact-min-gain", false, &["1073741825"]),
    ("serve --compact-cpu", false, &["101", "nan", "inf"]),
    ("serve --compact-min-gain", false, &["1073741825"]),
    ("serve --retain-divisor", true, &["1048577"]),
    ("bench store --retain-divisor", true, &["1048577"]),
    ("replay --retain-divisor", true, &["1048577"]),
    ("serve --idle-after", false, &["2592001"]),
    ("serve --policy-interval", false, &["86401"]),
    ("serve --writeback-near-limit", false, &["49", "100"]),
];

/// Bad for every numeric flag (0 only where 0 is not valid).
const BAD: &[&str] = &["0", "-1", "18446744073709551616", "abc", ""];

/// A numeric flag: its subcommand path, long name, value prefix (`a:` for
/// `NAME[:SIZE]`) and help.
struct Flag {
    path: Vec<String>,
    long: String,
    prefix: &'static str,
    help: String,
}

fn numeric(arg: &clap::Arg) -> bool {
    let id = arg.get_value_parser().type_id();
    let numbers = [
        TypeId::of::<u8>(),
        TypeId::of::<u16>(),
        TypeId::of::<u32>(),
        TypeId::of::<u64>(),
        TypeId::of::<usize>(),
        TypeId::of::<i32>(),
        TypeId::of::<i64>(),
        TypeId::of::<f32>(),
        TypeId::of::<f64>(),
    ];
    let sized = arg
        .get_value_names()
        .unwrap_or_default()
        .iter()
        .any(|n| n.contains("SIZE") || n.contains("BYTES"));
    numbers.iter().any(|t| id == *t) || sized
}

fn walk(cmd: &clap::Command, path: &mut Vec<String>, out: &mut Vec<Flag>) {
    for arg in cmd.get_arguments() {
        let Some(long) = arg.get_long() else { continue };
        let takes_value = arg.get_num_args().is_some_and(|n| n.takes_values());
        if !takes_value || !numeric(arg) {
            continue;
        }
        let named_size = arg
            .get_value_names()
            .unwrap_or_default()
            .iter()
            .any(|n| n.contains(":SIZE"));
        out.push(Flag {
            path: path.clone(),
            long: format!("--{long}"),
            prefix: if named_size { "a:" } else { "" },
            help: [arg.get_help(), arg.get_long_help()]
                .into_iter()
                .flatten()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(" "),
        });
    }
    for sub in cmd.get_subcommands() {
        path.push(sub.get_name().to_string());
        walk(sub, path, out);
        path.pop();
    }
}

fn flags() -> Vec<Flag> {
    let mut cmd = zmem_cli::command();
    cmd.build();
    let mut out = Vec::new();
    walk(&cmd, &mut Vec::new(), &mut out);
    out
}

impl Flag {
    fn key(&self) -> String {
        format!("{} {}", self.path.join(" "), self.long)
    }
}

#[test]
fn every_numeric_flag_has_its_range_here() {
    let found: Vec<String> = flags().iter().map(Flag::key).collect();
    assert!(found.len() >= 40, "too few numeric flags found: {found:?}");
    let missing: Vec<&String> = found
        .iter()
        .filter(|k| !RANGES.iter().any(|(r, _, _)| r == k))
        .collect();
    assert!(
        missing.is_empty(),
        "numeric flags without an entry in RANGES (add their out-of-range values): {missing:?}"
    );
    let stale: Vec<&str> = RANGES
        .iter()
        .map(|(r, _, _)| *r)
        .filter(|r| !found.iter().any(|k| k == r))
        .collect();
    assert!(
        stale.is_empty(),
        "RANGES names flags zmem has not: {stale:?}"
    );
    // Where 0 is valid, the help says what it means.
    for flag in flags() {
        let zero_ok = RANGES.iter().any(|(r, z, _)| *r == flag.key() && *z);
        if zero_ok {
            assert!(
                flag.help.contains('0'),
                "{}: 0 is valid but its help does not say so: {}",
                flag.key(),
                flag.help
            );
        }
    }
}

#[test]
fn bad_values_are_one_line_usage_errors() {
    let mut failures = Vec::new();
    let mut runs = 0;
    for flag in flags() {
        let Some((_, zero_ok, out_of_range)) = RANGES.iter().find(|(r, _, _)| *r == flag.key())
        else {
            continue; // every_numeric_flag_has_its_range_here reports it
        };
        let values = BAD
            .iter()
            .filter(|v| !(*zero_ok && **v == "0"))
            .chain(out_of_range.iter());
        for value in values {
            let value = format!("{}{value}", flag.prefix);
            let out = Command::new(env!("CARGO_BIN_EXE_zmem"))
                .args(&flag.path)
                .args([flag.long.as_str(), value.as_str()])
                .output()
                .unwrap();
            runs += 1;
            let err = String::from_utf8_lossy(&out.stderr);
            let ok = out.status.code() == Some(2)
                && err.trim_end().lines().count() == 1
                && err.starts_with("error: ")
                && err.contains(&flag.long)
                && !err.contains("panicked")
                && out.stdout.is_empty();
            if !ok {
                failures.push(format!(
                    "zmem {} {} '{value}': status {:?}, stderr: {err}",
                    flag.path.join(" "),
                    flag.long,
                    out.status.code()
                ));
            }
        }
    }
    assert!(runs > 200, "only {runs} runs");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A usage error keeps what clap says before its usage lines, on one line:
/// the missing argument's name, the "did you mean" tip, the valid values.
#[test]
fn usage_errors_keep_their_useful_half_on_one_line() {
    let cases: &[(&[&str], &[&str])] = &[
        (&["run"], &["not provided", "<CMD>"]),
        (&["ctl"], &["not provided", "<COMMAND"]),
        (
            &["serve", "--szie", "1"],
            &["'--szie'", "similar argument", "'--size'"],
        ),
        (&["serve", "--exprt", "x"], &["'--exprt'", "'--export'"]),
        (
            &["completions", "nosuch"],
            &["'nosuch'", "possible values", "bash", "zsh"],
        ),
    ];
    for (args, wanted) in cases {
        let out = Command::new(env!("CARGO_BIN_EXE_zmem"))
            .args(*args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "zmem {args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "zmem {args:?}: {err}");
        assert!(err.starts_with("error: "), "zmem {args:?}: {err}");
        for w in *wanted {
            assert!(err.contains(w), "zmem {args:?}: no {w:?} in {err}");
        }
    }
}
