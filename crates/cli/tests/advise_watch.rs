//! `zmem advise --watch 10m` on a process whose access pattern the test
//! controls: 512 MiB written once, then its first half read and written
//! every second and its second half never. The untouched share reported at
//! each age must be within 5 points of the truth: half the buffer over the
//! process's resident anonymous memory (its interpreter's few MiB, touched
//! or not, are within that margin).
//!
//! Ten minutes of mostly sleeping: `scripts/test-all` runs it beside the
//! Miri and fuzz steps (hence `#[ignore]`: a plain `cargo test` leaves it
//! out); `cargo test --release -p zmem-cli --test advise_watch -- --ignored`
//! runs it alone. Not beside the other Rust tests: `advise --system
//! --verify` reads every process's pages, which marks them accessed, and
//! so would the reads of a debugger or of anything else that reads a
//! watched process's memory.

mod common;

use std::process::Command;
use std::time::Duration;

use common::holder::Holder;
use common::json;

#[test]
#[ignore = "ten minutes long: scripts/test-all runs it beside Miri and fuzz"]
fn a_ten_minute_watch_finds_the_untouched_half() {
    let buffer_mib = 512u64;
    let h = Holder::start("touch", buffer_mib, Duration::from_secs(120));
    let pid = h.pid().to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_zmem"))
        .args([
            "advise",
            "--pid",
            &pid,
            "--watch",
            "10m",
            "--comp",
            "lz4,zstd:3",
            "--latency-reads",
            "500",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    let m = json(&out);
    let points = m["idle"]["points"].as_array().unwrap();
    let ages: Vec<u64> = points
        .iter()
        .map(|p| p["age_s"].as_u64().unwrap())
        .collect();
    assert_eq!(ages, [60, 600], "{points:?}");
    for p in points {
        let resident = p["resident"].as_u64().unwrap();
        let truth = (buffer_mib << 19) as f64 / resident as f64;
        let got = p["idle_share"].as_f64().unwrap();
        eprintln!(
            "after {} s: {:.1}% untouched, truth {:.1}%",
            p["age_s"],
            got * 100.0,
            truth * 100.0
        );
        assert!(
            (got - truth).abs() < 0.05,
            "after {} s: {got:.3} untouched, truth {truth:.3}",
            p["age_s"]
        );
    }
    // Where the kernel keeps soft-dirty bits, the sampled pages of the
    // touched half were written and the others not: about half of the
    // sample. Without them, no count is claimed.
    let sampled = m["idle"]["sampled_pages"].as_f64().unwrap();
    assert!(sampled > 0.0);
    if m["idle"]["per_page_writes"] == true {
        let written = m["idle"]["sampled_written"].as_f64().unwrap();
        assert!(
            (written / sampled - 0.5).abs() < 0.05,
            "{written} of {sampled}"
        );
    } else {
        assert!(m["idle"]["sampled_written"].is_null());
    }
    // The policy waits the longest age watched.
    assert_eq!(m["policy"]["idle_age_s"], 600);
}
