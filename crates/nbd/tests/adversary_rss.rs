//! The worst case, alone in its binary so that the process's
//! resident set is the server's (and one well-behaved client's): 64 clients
//! stalled in the handshake and 16 that send READs and never read a reply
//! are open at once; a correct client still connects and copies 256 MiB in
//! and out byte for byte, the server's RSS grows by less than its
//! configured payload budget, and the stalled handshakes are closed once
//! their deadline passes. Test-sized limits keep it to a few seconds.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::adversary::{
    self, copy_in_and_out, memory_dir, non_reader, stalled, FileDevice, Stall,
};
use common::{closed_within, wait_for, TestServer};
use nbd::Config;

const MIB: u64 = 1 << 20;

#[test]
fn stalled_and_non_reading_clients_cost_no_more_than_the_budget() {
    const SIZE: u64 = 256 * MIB;
    const TOTAL: u64 = 64 * MIB;
    let deadline = Duration::from_secs(2);
    let config = Config {
        max_request: MIB as u32,
        inflight_bytes: 2 * MIB,
        inflight_total: TOTAL,
        handshake_timeout: deadline,
        // Long enough that nobody is closed for stalled replies here.
        stall_timeout: Duration::from_secs(600),
        ..Config::default()
    };
    let dir = memory_dir();
    let dev = Arc::new(FileDevice::new(dir.path(), SIZE));
    let before = testkit::rss::rss_kib();
    let ts = TestServer::start(vec![("", dev)], config);

    // Each asks for 64 MiB it will never read: 1 GiB in all.
    let mut readers: Vec<_> = (0..16)
        .map(|_| non_reader(&ts.path, 64, MIB as u32, SIZE))
        .collect();
    wait_for("every non-reading client to hit its bound", || {
        ts.server().budget_stats().connection_waits >= 16
    });
    let opened = Instant::now();
    let mut stalls: Vec<_> = (0..64)
        .map(|i| stalled(&ts.path, Stall::ALL[i % Stall::ALL.len()]))
        .collect();
    let held = ts.server().budget_stats().in_use;
    assert_eq!(ts.server().negotiating(), 64);

    let ((), peak) = adversary::peak_rss_during(|| copy_in_and_out(&ts.path, SIZE, MIB as u32));
    let stats = ts.server().budget_stats();
    let growth = peak.saturating_sub(before) * 1024;
    eprintln!(
        "payload held by the non-readers {} MiB; budget peak {} MiB of {} MiB; \
         RSS growth at peak {:.1} MiB (baseline {} MiB); {} connection waits, \
         {} server waits",
        held / MIB,
        stats.peak / MIB,
        TOTAL / MIB,
        growth as f64 / MIB as f64,
        before / 1024,
        stats.connection_waits,
        stats.server_waits
    );
    assert!(stats.peak <= TOTAL);
    assert!(
        growth < TOTAL,
        "RSS grew by {growth} bytes, over the {TOTAL}-byte budget"
    );
    // The non-readers are still open and still held to their bound.
    assert_eq!(stats.stalled_closed, 0);
    for r in &mut readers {
        r.set_read_timeout(Some(Duration::from_millis(1))).unwrap();
        assert!(!testkit::peer_closed(r), "a non-reading client was closed");
    }
    // Every stalled handshake is closed, none long before its deadline
    // (one was shed to admit the correct client).
    for (i, s) in stalls.iter_mut().enumerate() {
        assert!(
            closed_within(s, Duration::from_secs(20)),
            "stalled client {i} still open"
        );
    }
    assert!(opened.elapsed() >= deadline);
    assert_eq!(ts.server().negotiating(), 0);
    drop(readers);
    wait_for("the non-readers' memory to come back", || {
        ts.server().budget_stats().in_use == 0
    });
}
