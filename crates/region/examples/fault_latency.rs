//! Fault service time of a region, measured on the faulting thread: each
//! access to a page kept in the store (lz4, 4 KiB pages of real data:
//! system libraries and programs) is timed around one load, in random
//! order. Prints p50, p99, p99.9 and max for missing-from-store faults,
//! missing faults on never-written pages, and, for reference, a plain
//! kernel fault on fresh anonymous memory and the store's decompression
//! alone; then where a store fault's time goes on the handler thread.
//!
//! With `spin`, one idle-priority (`SCHED_IDLE`) thread per CPU spins
//! throughout, so no CPU sleeps: on a virtual machine, waking a thread on a
//! halted virtual CPU costs an exit; on a busy machine it does not.
//!
//! With `follow`, the fault handler follows the faulting thread's CPU;
//! `poll=US` sets how long it polls after a fault when it does not; with
//! `in-thread`, each fault is served in the faulting thread (`SIGBUS`).
//!
//! `cargo run --release -p zmem-region --example fault_latency [MIB] [ROUNDS] [spin] [follow] [poll=US] [in-thread]`

use std::time::Instant;

use region::{Region, RegionConfig};

fn percentiles(name: &str, mut ns: Vec<u64>) {
    ns.sort_unstable();
    let at = |q: f64| ns[((ns.len() as f64 * q) as usize).min(ns.len() - 1)];
    println!(
        "{name:<34} {:>8} {:>8.2} {:>8.2} {:>8.2} {:>9.1}",
        ns.len(),
        at(0.5) as f64 / 1000.0,
        at(0.99) as f64 / 1000.0,
        at(0.999) as f64 / 1000.0,
        *ns.last().unwrap() as f64 / 1000.0
    );
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mib: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(64);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(3);
    let flags: Vec<String> = args.collect();
    let spin = flags.iter().any(|f| f == "spin");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let spinners: Vec<_> = (0..if spin {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    } else {
        0
    })
        .map(|_| {
            let stop = std::sync::Arc::clone(&stop);
            std::thread::spawn(move || {
                let param = libc::sched_param { sched_priority: 0 };
                // SAFETY: sets this thread's own policy to SCHED_IDLE.
                unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        })
        .collect();
    let ps = region::page_size();
    let len = mib << 20;
    let n = len / ps;
    let mut cfg = RegionConfig::new(len);
    cfg.probation_pages = Some(0);
    cfg.age_eviction = false;
    cfg.handler_follows = flags.iter().any(|f| f == "follow");
    if flags.iter().any(|f| f == "in-thread") {
        cfg.fault_service = region::FaultService::FaultingThread;
    }
    if let Some(us) = flags.iter().find_map(|f| f.strip_prefix("poll=")) {
        match us.parse() {
            Ok(us) => cfg.handler_poll = Some(std::time::Duration::from_micros(us)),
            Err(_) => {
                eprintln!("fault_latency: poll={us} is not a number of microseconds");
                std::process::exit(2);
            }
        }
    }
    let service = cfg.fault_service;
    let r = match Region::new(len, cfg) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("skipped: {e}");
            return;
        }
    };
    let base = r.as_ptr();
    let data = testkit::real_data(len);
    let st = r.stats();
    println!(
        "region {mib} MiB, {n} pages of {ps} bytes, {} compressor, userfaultfd {:?}, \
         handler poll {:.1} us (a wake-up measured at {:.1} us){}",
        r.store().compressor().algorithm().name(),
        r.uffd_mode(),
        st.handler_poll_ns as f64 / 1000.0,
        st.wake_cost_ns as f64 / 1000.0,
        if spin {
            ", idle-priority spinners on every CPU"
        } else {
            ""
        }
    );
    println!(
        "{:<34} {:>8} {:>8} {:>8} {:>8} {:>9}",
        "fault (us, on the faulting thread)", "count", "p50", "p99", "p99.9", "max"
    );

    // Never-written pages: UFFDIO_ZEROPAGE.
    let mut order: Vec<usize> = (0..n).collect();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for i in (1..n).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        order.swap(i, (x % (i as u64 + 1)) as usize);
    }
    let mut zero = Vec::with_capacity(n);
    for &i in &order {
        let t = Instant::now();
        // SAFETY: page i of the region.
        unsafe { std::ptr::read_volatile(base.add(i * ps)) };
        zero.push(t.elapsed().as_nanos() as u64);
    }
    percentiles("missing, never written (zero page)", zero);

    // SAFETY: the whole region, written with the real data.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), base, len) };
    let mut store = Vec::with_capacity(n * rounds);
    let mut decompress = Vec::with_capacity(n);
    let mut page = vec![0u8; ps];
    for round in 0..rounds {
        let t = Instant::now();
        let evicted = r.cold(0..len).unwrap();
        assert_eq!(evicted, n, "round {round}");
        println!(
            "  round {round}: cold() evicted {n} pages in runs, {:.2} us a page",
            t.elapsed().as_nanos() as f64 / n as f64 / 1000.0
        );
        if round == 0 {
            let mm = r.stats().mm_stat;
            println!(
                "  stored: {} pages, compressed to {:.1}% ({} same-filled, {} huge)",
                n,
                100.0 * mm.compr_data_size as f64 / mm.orig_data_size.max(1) as f64,
                mm.same_pages,
                mm.huge_pages
            );
            for &i in order.iter().take(n.min(8192)) {
                let t = Instant::now();
                r.store().read_page(i as u64, &mut page).unwrap();
                decompress.push(t.elapsed().as_nanos() as u64);
            }
        }
        for &i in &order {
            let t = Instant::now();
            // SAFETY: page i of the region.
            let b = unsafe { std::ptr::read_volatile(base.add(i * ps)) };
            store.push(t.elapsed().as_nanos() as u64);
            assert_eq!(b, data[i * ps], "page {i}");
        }
    }
    percentiles("missing, from the store (lz4)", store);
    // Every page's contents, once.
    // SAFETY: the region's bytes, all mapped now.
    let back = unsafe { std::slice::from_raw_parts(base, len) };
    assert!(back == &data[..], "contents differ");

    // Reference: a fresh anonymous page faulted by the kernel alone.
    let plain = testkit::AnonMap::new(len);
    let mut kernel = Vec::with_capacity(n);
    for &i in &order {
        let t = Instant::now();
        // SAFETY: page i of our mapping.
        unsafe { std::ptr::write_volatile(plain.as_ptr().add(i * ps), 1) };
        kernel.push(t.elapsed().as_nanos() as u64);
    }
    percentiles("reference: kernel anonymous fault", kernel);
    percentiles("reference: store read_page alone", decompress);
    drop(plain);

    // Probed pages: the mapping dropped, the raw copy kept; a touch copies
    // it back without decompressing.
    let mut pcfg = RegionConfig::new(len);
    pcfg.probation_pages = Some(n);
    pcfg.fault_service = service;
    pcfg.scan_interval = std::time::Duration::from_millis(10);
    pcfg.controller = region::ControllerConfig::fixed(std::time::Duration::from_secs(4));
    let pr = Region::new(len, pcfg).unwrap();
    let pbase = pr.as_ptr();
    // SAFETY: the whole second region, written with the real data.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), pbase, len) };
    let waited = Instant::now();
    while pr.stats().probation_pages < n as u64 && waited.elapsed().as_secs() < 5 {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let mut probation = Vec::with_capacity(n);
    for &i in &order {
        let t = Instant::now();
        // SAFETY: page i of the second region.
        let b = unsafe { std::ptr::read_volatile(pbase.add(i * ps)) };
        probation.push(t.elapsed().as_nanos() as u64);
        assert_eq!(b, data[i * ps]);
    }
    let ps_ = pr.stats();
    assert!(ps_.faults.missing_probation as usize >= n / 2, "{ps_:?}");
    percentiles("missing, probation copy (no lz4)", probation);
    drop(pr);

    let s = r.stats();
    let t = &s.store_fault_time;
    println!(
        "handler, per store fault (mean ns): decompress {}, UFFDIO_COPY with its wake-up {}, \
         bookkeeping {}; handler-side p50 {} p99 {} (log2 bucket bounds)",
        t.decompress_ns,
        t.copy_ns,
        t.bookkeeping_ns,
        s.fault_latency.p50_ns,
        s.fault_latency.p99_ns
    );
    println!("{}", r.stats_json());
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for t in spinners {
        let _ = t.join();
    }
}
