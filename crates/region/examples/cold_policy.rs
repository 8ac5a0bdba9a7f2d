//! How well the region keeps the right pages resident without seeing
//! accesses: a zipfian trace (exponent 0.99, YCSB's) over a 64 MiB region
//! with 16 MiB of memory, replayed on real regions, against the same trace
//! simulated with the policies that need what a user-space region cannot
//! have (exact LRU; a clock over the hardware's accessed bits).
//!
//! Real runs:
//! - *faults only*: the clock at the limit, with a page's referenced flag
//!   set only when it faults in (no probing);
//! - *probing*: the same, plus probes: each page untouched for half the age
//!   threshold since its last known reference has its mapping dropped and
//!   its raw copy kept (512 slots, taken from the same memory: the limit is
//!   16 MiB less 512 pages), so a touch costs a cheap fault and marks it
//!   referenced; untouched for the other half, it is compressed.
//!
//! Prints, for the second half of the trace (the first warms up): hits
//! (accesses served from memory, including probation copies), promotions
//! (faults that decompressed), probation faults, and the time per access.
//!
//! `cargo run --release -p zmem-region --example cold_policy [ACCESSES]`

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use region::{Region, RegionConfig};

const PAGES: usize = 16384;
const LIMIT: usize = 4096;
const SLOTS: usize = 512;

/// A zipfian trace over `PAGES` pages, ranks shuffled onto pages.
fn trace(len: usize) -> Vec<u32> {
    let s = 0.99f64;
    let mut cdf = Vec::with_capacity(PAGES);
    let mut sum = 0.0;
    for r in 1..=PAGES {
        sum += 1.0 / (r as f64).powf(s);
        cdf.push(sum);
    }
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut perm: Vec<u32> = (0..PAGES as u32).collect();
    for i in (1..PAGES).rev() {
        perm.swap(i, (next() % (i as u64 + 1)) as usize);
    }
    (0..len)
        .map(|_| {
            let u = (next() >> 11) as f64 / (1u64 << 53) as f64 * sum;
            let r = cdf.partition_point(|&c| c < u).min(PAGES - 1);
            perm[r]
        })
        .collect()
}

/// Misses of exact LRU over the second half.
fn lru(t: &[u32], cap: usize) -> usize {
    let mut stamp = vec![0usize; PAGES];
    let mut resident = vec![false; PAGES];
    let mut heap: std::collections::BTreeSet<(usize, u32)> = Default::default();
    let mut misses = 0;
    for (i, &p) in t.iter().enumerate() {
        let p_ = p as usize;
        if resident[p_] {
            heap.remove(&(stamp[p_], p));
        } else {
            if i >= t.len() / 2 {
                misses += 1;
            }
            if heap.len() == cap {
                let (_, v) = heap.pop_first().unwrap();
                resident[v as usize] = false;
            }
            resident[p_] = true;
        }
        stamp[p_] = i;
        heap.insert((i, p));
    }
    misses
}

/// Misses of a clock over `cap` frames, second half. `accessed_bits`: the
/// referenced flag is set on every access (the hardware's accessed bit);
/// otherwise only on a miss (what faults alone show).
fn clock(t: &[u32], cap: usize, accessed_bits: bool) -> usize {
    let mut frames: Vec<u32> = Vec::with_capacity(cap);
    let mut slot = vec![usize::MAX; PAGES];
    let mut refd = vec![false; PAGES];
    let mut hand = 0;
    let mut misses = 0;
    for (i, &p) in t.iter().enumerate() {
        let p_ = p as usize;
        if slot[p_] != usize::MAX {
            if accessed_bits {
                refd[p_] = true;
            }
            continue;
        }
        if i >= t.len() / 2 {
            misses += 1;
        }
        refd[p_] = true;
        if frames.len() < cap {
            slot[p_] = frames.len();
            frames.push(p);
            continue;
        }
        loop {
            let v = frames[hand] as usize;
            if refd[v] {
                refd[v] = false;
                hand = (hand + 1) % cap;
                continue;
            }
            slot[v] = usize::MAX;
            frames[hand] = p;
            slot[p_] = hand;
            hand = (hand + 1) % cap;
            break;
        }
    }
    misses
}

/// Misses of FIFO, second half.
fn fifo(t: &[u32], cap: usize) -> usize {
    let mut q = VecDeque::with_capacity(cap);
    let mut resident = vec![false; PAGES];
    let mut misses = 0;
    for (i, &p) in t.iter().enumerate() {
        if resident[p as usize] {
            continue;
        }
        if i >= t.len() / 2 {
            misses += 1;
        }
        if q.len() == cap {
            let v: u32 = q.pop_front().unwrap();
            resident[v as usize] = false;
        }
        q.push_back(p);
        resident[p as usize] = true;
    }
    misses
}

struct Real {
    promotions: u64,
    probation: u64,
    per_access: Duration,
    hits: u64,
}

fn real(t: &[u32], cfg: RegionConfig) -> Option<Real> {
    let ps = region::page_size();
    let r = match Region::new(PAGES * ps, cfg) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("skipped: {e}");
            return None;
        }
    };
    let base = r.as_ptr();
    let data = testkit::real_data(PAGES * ps);
    // SAFETY: the whole region, written with the data (all pages touched).
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), base, PAGES * ps) };
    let half = t.len() / 2;
    let mut before = r.stats();
    let mut start = Instant::now();
    for (i, &p) in t.iter().enumerate() {
        if i == half {
            before = r.stats();
            start = Instant::now();
        }
        // SAFETY: page p of the region.
        let b = unsafe { std::ptr::read_volatile(base.add(p as usize * ps + 64)) };
        assert_eq!(b, data[p as usize * ps + 64]);
    }
    let elapsed = start.elapsed();
    let after = r.stats();
    let promotions = after.faults.missing_store - before.faults.missing_store;
    let probation = after.faults.missing_probation - before.faults.missing_probation;
    let n = (t.len() - half) as u64;
    Some(Real {
        promotions,
        probation,
        per_access: elapsed / n as u32,
        hits: n - promotions,
    })
}

fn main() {
    let accesses: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(400_000);
    let ps = region::page_size();
    let t = trace(accesses);
    let measured = (t.len() - t.len() / 2) as f64;
    println!(
        "zipf 0.99 over {PAGES} pages ({} MiB), {LIMIT} pages of memory ({} MiB), {accesses} accesses, second half measured",
        (PAGES * ps) >> 20,
        (LIMIT * ps) >> 20
    );
    println!(
        "{:<44} {:>9} {:>11} {:>10} {:>10}",
        "policy", "hit %", "promotions", "probation", "ns/access"
    );
    let row = |name: &str, misses: usize| {
        println!(
            "{name:<44} {:>9.2} {:>11} {:>10} {:>10}",
            100.0 * (1.0 - misses as f64 / measured),
            misses,
            "-",
            "-"
        );
    };
    row("simulated: exact LRU", lru(&t, LIMIT));
    row(
        "simulated: clock over accessed bits",
        clock(&t, LIMIT, true),
    );
    row("simulated: clock over faults only", clock(&t, LIMIT, false));
    row("simulated: FIFO", fifo(&t, LIMIT));

    let mut faults_only = RegionConfig::new(LIMIT * ps);
    faults_only.probation_pages = Some(0);
    faults_only.age_eviction = false;
    let mut probing = RegionConfig::new((LIMIT - SLOTS) * ps);
    probing.probation_pages = Some(SLOTS);
    probing.scan_interval = Duration::from_millis(10);
    let probing_at = |threshold_ms| {
        let mut c = probing.clone();
        c.controller = region::ControllerConfig::fixed(Duration::from_millis(threshold_ms));
        c
    };
    for (name, cfg) in [
        ("region: clock over faults only", faults_only),
        ("region: probing, threshold 40 ms", probing_at(40)),
        ("region: probing, threshold 200 ms", probing_at(200)),
    ] {
        if let Some(x) = real(&t, cfg) {
            println!(
                "{name:<44} {:>9.2} {:>11} {:>10} {:>10}",
                100.0 * x.hits as f64 / measured,
                x.promotions,
                x.probation,
                x.per_access.as_nanos()
            );
        }
    }
}
