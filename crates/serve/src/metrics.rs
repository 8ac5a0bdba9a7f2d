//! A Prometheus `/metrics` endpoint: every export's mm_stat and io_stat,
//! its background compactor's counters (`zmem_auto_compact_*`) and its
//! policies' (`zmem_policy_*`), bd_stat and the writeback settings
//! (`zmem_writeback_*`: limit, batch size, compressed).
//!
//! This module owns the text exposition ([`render`]) and a deliberately
//! tiny HTTP/1.0 server ([`MetricsServer`]) on one thread: it reads one
//! request (headers only, at most 8 KiB, 5 s timeout), answers `GET
//! /metrics` with the text format and anything else with 404 or 405, and
//! closes the connection. It listens on loopback only unless asked, as the
//! NBD server does. Each metric carries an `export` label; counters end in
//! `_total`, byte gauges in `_bytes`.

use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use log::{debug, info, warn};

use crate::registry::Registry;

/// Longest request head read.
const MAX_REQUEST: usize = 8192;

/// Escapes a label value (backslash, quote, newline).
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The metrics of every initialised export in Prometheus' text format (version 0.0.4).
pub fn render(reg: &Registry) -> String {
    type Get = fn(&Sample) -> u64;
    struct Sample {
        mm: zram::MmStat,
        io: zram::IoStat,
        reads: u64,
        writes: u64,
        disksize: u64,
        auto: zram::AutoCompactStats,
        auto_on: u64,
        bd: zram::BdStat,
        wb_limit: zram::WritebackLimit,
        wb_batch: u64,
        wb_compressed: u64,
        wb_ceiling: u64,
        policy: zram::PolicyStats,
        retained: (u64, u64),
    }
    let samples: Vec<(String, Sample)> = reg
        .served()
        .iter()
        .map(|s| {
            let (reads, writes) = s.store.io_counts();
            (
                label(&s.name),
                Sample {
                    mm: s.store.mm_stat(),
                    io: s.store.io_stat(),
                    reads,
                    writes,
                    disksize: s.store.disk_size(),
                    auto: s.store.auto_compact_stats(),
                    auto_on: u64::from(s.store.auto_compact_running()),
                    bd: s.store.bd_stat(),
                    wb_limit: s.store.writeback_limit(),
                    wb_batch: s.store.writeback_batch_size() as u64,
                    wb_compressed: u64::from(s.store.writeback_compressed()),
                    wb_ceiling: if s.store.writeback_near_limit() == 0 {
                        0
                    } else {
                        s.store.writeback_ceiling()
                    },
                    policy: s.store.policy_stats(),
                    retained: s.store.retained_bytes(),
                },
            )
        })
        .collect();
    let metrics: [(&str, &str, &str, Get); 42] = [
        ("zmem_disksize_bytes", "gauge", "Size of the export.", |s| {
            s.disksize
        }),
        (
            "zmem_orig_data_size_bytes",
            "gauge",
            "mm_stat orig_data_size: bytes of pages stored.",
            |s| s.mm.orig_data_size,
        ),
        (
            "zmem_compr_data_size_bytes",
            "gauge",
            "mm_stat compr_data_size: bytes of compressed data.",
            |s| s.mm.compr_data_size,
        ),
        (
            "zmem_mem_used_total_bytes",
            "gauge",
            "mm_stat mem_used_total: allocator memory.",
            |s| s.mm.mem_used_total,
        ),
        (
            "zmem_mem_limit_bytes",
            "gauge",
            "mm_stat mem_limit (0: none).",
            |s| s.mm.mem_limit,
        ),
        (
            "zmem_mem_used_max_bytes",
            "gauge",
            "mm_stat mem_used_max.",
            |s| s.mm.mem_used_max,
        ),
        (
            "zmem_retained_bytes",
            "gauge",
            "Freed allocator pages kept resident for reuse, not in mem_used_total.",
            |s| s.retained.0,
        ),
        (
            "zmem_retained_bound_bytes",
            "gauge",
            "The most freed pages kept resident for reuse now: the resident set may exceed mem_used_total by this.",
            |s| s.retained.1,
        ),
        (
            "zmem_same_pages",
            "gauge",
            "mm_stat same_pages: same-filled pages.",
            |s| s.mm.same_pages,
        ),
        (
            "zmem_pages_compacted_total",
            "counter",
            "mm_stat pages_compacted.",
            |s| s.mm.pages_compacted,
        ),
        (
            "zmem_huge_pages",
            "gauge",
            "mm_stat huge_pages: pages stored uncompressed.",
            |s| s.mm.huge_pages,
        ),
        (
            "zmem_huge_pages_since_total",
            "counter",
            "mm_stat huge_pages_since.",
            |s| s.mm.huge_pages_since,
        ),
        (
            "zmem_objs_moved_total",
            "counter",
            "Objects moved by compaction.",
            |s| s.mm.objs_moved,
        ),
        (
            "zmem_failed_reads_total",
            "counter",
            "io_stat failed_reads.",
            |s| s.io.failed_reads,
        ),
        (
            "zmem_failed_writes_total",
            "counter",
            "io_stat failed_writes.",
            |s| s.io.failed_writes,
        ),
        (
            "zmem_notify_free_total",
            "counter",
            "io_stat notify_free: pages freed by trim and zero.",
            |s| s.io.notify_free,
        ),
        (
            "zmem_page_reads_total",
            "counter",
            "Page reads served.",
            |s| s.reads,
        ),
        (
            "zmem_page_writes_total",
            "counter",
            "Page writes served.",
            |s| s.writes,
        ),
        (
            "zmem_auto_compact_enabled",
            "gauge",
            "1 while the background compactor runs (auto_compact on or shrinker).",
            |s| s.auto_on,
        ),
        (
            "zmem_auto_compact_runs_total",
            "counter",
            "Background compaction runs.",
            |s| s.auto.runs,
        ),
        (
            "zmem_auto_compact_skipped_total",
            "counter",
            "Background compactor looks that found less than the minimum gain.",
            |s| s.auto.skipped,
        ),
        (
            "zmem_auto_compact_pages_freed_total",
            "counter",
            "Pages freed by background compaction.",
            |s| s.auto.pages_freed,
        ),
        (
            "zmem_auto_compact_objs_moved_total",
            "counter",
            "Objects moved by background compaction.",
            |s| s.auto.objs_moved,
        ),
        (
            "zmem_auto_compact_objs_lower_bound_total",
            "counter",
            "The fewest objects background compaction's steps had to move to free what they could.",
            |s| s.auto.objs_lower_bound,
        ),
        (
            "zmem_auto_compact_objs_moved_trim_total",
            "counter",
            "Objects background compaction moved to give back pages of zspages that stay (default mode's trim).",
            |s| s.auto.objs_moved_trim,
        ),
        (
            "zmem_auto_compact_cpu_nanoseconds_total",
            "counter",
            "CPU time of the background compactor's thread.",
            |s| s.auto.cpu_ns,
        ),
        (
            "zmem_auto_compact_idle_decays_total",
            "counter",
            "Epochs of the pages kept for reuse that the background compactor ended while idle.",
            |s| s.auto.idle_decays,
        ),
        (
            "zmem_auto_compact_longest_step_nanoseconds",
            "gauge",
            "Longest single background compaction step (one size class), wall time.",
            |s| s.auto.longest_step_ns,
        ),
        (
            "zmem_bd_count",
            "gauge",
            "bd_stat bd_count: 4 KiB units of the backing store holding pages.",
            |s| s.bd.bd_count,
        ),
        (
            "zmem_bd_reads_total",
            "counter",
            "bd_stat bd_reads: 4 KiB units read from the backing store.",
            |s| s.bd.bd_reads,
        ),
        (
            "zmem_bd_writes_total",
            "counter",
            "bd_stat bd_writes: 4 KiB units written to the backing store.",
            |s| s.bd.bd_writes,
        ),
        (
            "zmem_failed_writebacks_total",
            "counter",
            "Pages whose writeback the backing store failed (each kept in memory).",
            |s| s.bd.failed_writebacks,
        ),
        (
            "zmem_writeback_limit_enabled",
            "gauge",
            "writeback_limit_enable: 1 while writeback_limit caps writeback.",
            |s| u64::from(s.wb_limit.enabled),
        ),
        (
            "zmem_writeback_limit",
            "gauge",
            "writeback_limit: 4 KiB units writeback may still write (with writeback_limit_enable).",
            |s| s.wb_limit.limit,
        ),
        (
            "zmem_writeback_batch_size_pages",
            "gauge",
            "writeback_batch_size: pages (blocks) writeback writes with one call.",
            |s| s.wb_batch,
        ),
        (
            "zmem_writeback_compressed",
            "gauge",
            "writeback_compressed: 1 if pages are written back as their compressed objects, packed into blocks.",
            |s| s.wb_compressed,
        ),
        (
            "zmem_policy_ticks_total",
            "counter",
            "Runs of the timed policy (mark idle, recompress, write back).",
            |s| s.policy.ticks,
        ),
        (
            "zmem_policy_recompressed_pages_total",
            "counter",
            "Pages the timed policy recompressed.",
            |s| s.policy.recompressed,
        ),
        (
            "zmem_policy_written_back_pages_total",
            "counter",
            "Pages the timed policy wrote back.",
            |s| s.policy.written_back,
        ),
        (
            "zmem_policy_reclaimed_pages_total",
            "counter",
            "Pages the memory-aware rule wrote back as mem_used neared mem_limit.",
            |s| s.policy.reclaimed_pages,
        ),
        (
            "zmem_policy_limit_failures_total",
            "counter",
            "Writes that failed mem_limit although the memory-aware rule was on.",
            |s| s.policy.limit_failures,
        ),
        (
            "zmem_policy_ceiling_bytes",
            "gauge",
            "What the memory-aware rule keeps mem_used_total within: mem_limit minus the store's own metadata (0: rule off or no limit).",
            |s| s.wb_ceiling,
        ),
    ];
    let mut out = String::new();
    for (name, kind, help, get) in metrics {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for (export, s) in &samples {
            let _ = writeln!(out, "{name}{{export=\"{export}\"}} {}", get(s));
        }
    }
    let _ = writeln!(out, "# HELP zmem_nbd_connections NBD connections open.");
    let _ = writeln!(out, "# TYPE zmem_nbd_connections gauge");
    let _ = writeln!(out, "zmem_nbd_connections {}", reg.connections());
    if let Some(t) = reg.nbd_sessions() {
        let name = "zmem_nbd_sessions_total";
        let _ = writeln!(
            out,
            "# HELP {name} NBD sessions that reached transmission, by the reply headers \
             they negotiated (simple, structured or extended)."
        );
        let _ = writeln!(out, "# TYPE {name} counter");
        let rows = [
            ("simple", t.started - t.structured),
            ("structured", t.structured - t.extended),
            ("extended", t.extended),
        ];
        for (headers, n) in rows {
            let _ = writeln!(out, "{name}{{headers=\"{headers}\"}} {n}");
        }
    }
    if let Some(b) = reg.nbd_budget() {
        let rows: [(&str, &str, &str, u64); 6] = [
            (
                "zmem_nbd_inflight_limit_bytes",
                "gauge",
                "Bytes of request and reply data all connections may hold (--inflight-total).",
                b.limit,
            ),
            (
                "zmem_nbd_inflight_bytes",
                "gauge",
                "Bytes of request and reply buffers held now, over all connections.",
                b.in_use,
            ),
            (
                "zmem_nbd_inflight_peak_bytes",
                "gauge",
                "The most zmem_nbd_inflight_bytes has been.",
                b.peak,
            ),
            (
                "zmem_nbd_inflight_server_waits_total",
                "counter",
                "Times a request waited for the server-wide budget.",
                b.server_waits,
            ),
            (
                "zmem_nbd_inflight_connection_waits_total",
                "counter",
                "Times a connection stopped reading requests at its own bound (--inflight-per-conn).",
                b.connection_waits,
            ),
            (
                "zmem_nbd_stalled_closed_total",
                "counter",
                "Connections closed for reading no reply while others waited for memory.",
                b.stalled_closed,
            ),
        ];
        for (name, kind, help, v) in rows {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
            let _ = writeln!(out, "{name} {v}");
        }
    }
    out
}

/// A running metrics endpoint. Dropping it shuts it down.
pub struct MetricsServer {
    addr: SocketAddr,
    stopping: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Listens on `addr` (loopback only unless `allow_remote`; port 0 picks
    /// one) and serves `registry`'s metrics.
    pub fn bind(
        addr: SocketAddr,
        allow_remote: bool,
        registry: Arc<Registry>,
    ) -> io::Result<MetricsServer> {
        if !allow_remote && !addr.ip().is_loopback() {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("refusing to serve metrics on {addr}: not a loopback address (use --allow-remote)"),
            ));
        }
        let listener = TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        let stopping = Arc::new(AtomicBool::new(false));
        let stop = stopping.clone();
        let thread = thread::Builder::new()
            .name("metrics".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    match conn {
                        Ok(s) => {
                            if let Err(e) = answer(s, &registry) {
                                debug!("metrics: {e}");
                            }
                        }
                        Err(e) => {
                            warn!("metrics: accept failed: {e}");
                            thread::sleep(Duration::from_millis(50));
                        }
                    }
                }
            })?;
        info!("metrics: http://{addr}/metrics");
        Ok(MetricsServer {
            addr,
            stopping,
            thread: Some(thread),
        })
    }

    /// The address bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops the server and joins its thread.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if let Some(t) = self.thread.take() {
            self.stopping.store(true, Ordering::SeqCst);
            let mut wake = self.addr;
            if wake.ip().is_unspecified() {
                wake.set_ip(if wake.is_ipv4() {
                    std::net::Ipv4Addr::LOCALHOST.into()
                } else {
                    std::net::Ipv6Addr::LOCALHOST.into()
                });
            }
            let _ = TcpStream::connect_timeout(&wake, Duration::from_secs(1));
            let _ = t.join();
        }
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn answer(mut s: TcpStream, reg: &Registry) -> io::Result<()> {
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.set_write_timeout(Some(Duration::from_secs(5)))?;
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && !head.windows(2).any(|w| w == b"\n\n") {
        let n = s.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
        if head.len() > MAX_REQUEST {
            return respond(
                &mut s,
                "431 Request Header Fields Too Large",
                "text/plain",
                "too large\n",
            );
        }
    }
    let text = String::from_utf8_lossy(&head);
    let mut parts = text.lines().next().unwrap_or("").split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    match (method, path) {
        ("GET", "/metrics") => respond(
            &mut s,
            "200 OK",
            "text/plain; version=0.0.4; charset=utf-8",
            &render(reg),
        ),
        ("GET", _) => respond(&mut s, "404 Not Found", "text/plain", "try /metrics\n"),
        _ => respond(&mut s, "405 Method Not Allowed", "text/plain", "GET only\n"),
    }
}

fn respond(s: &mut TcpStream, status: &str, ctype: &str, body: &str) -> io::Result<()> {
    let head = format!(
        "HTTP/1.0 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes())?;
    s.write_all(body.as_bytes())?;
    s.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Served;

    #[test]
    fn metrics_over_http() {
        let pool = zalloc::open("zsmalloc", &zalloc::AllocOptions::default()).unwrap();
        let comp = zcomp::Compressor::parse("lz4", "").unwrap();
        let store = Arc::new(zram::Store::new(pool, comp, 16).unwrap());
        let page: Vec<u8> = (0..4096).map(|i| (i % 7) as u8).collect();
        store.write_page(1, &page).unwrap();
        let reg = Arc::new(Registry::new(vec![Served {
            name: "d\"q".into(),
            label: "t".into(),
            store,
            policy: None,
        }]));
        let m =
            MetricsServer::bind("127.0.0.1:0".parse().unwrap(), false, Arc::clone(&reg)).unwrap();
        let get = |req: &str| {
            let mut c = TcpStream::connect(m.local_addr()).unwrap();
            c.write_all(req.as_bytes()).unwrap();
            let mut out = String::new();
            c.read_to_string(&mut out).unwrap();
            out
        };
        // Each line of the exposition, as written, is in `out`.
        let has_lines = |out: &str, lines: &[&str]| {
            for line in lines {
                assert!(out.contains(line), "no {line:?} in:\n{out}");
            }
        };
        let out = get("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(out.starts_with("HTTP/1.0 200 OK\r\n"), "{out}");
        has_lines(
            &out,
            &[
                "zmem_orig_data_size_bytes{export=\"d\\\"q\"} 4096\n",
                "# TYPE zmem_failed_writes_total counter\n",
                "zmem_page_writes_total{export=\"d\\\"q\"} 1\n",
                "zmem_auto_compact_enabled{export=\"d\\\"q\"} 0\n",
                "# TYPE zmem_bd_writes_total counter\n",
                "zmem_bd_count{export=\"d\\\"q\"} 0\n",
                // The writeback settings, beside bd_stat: the defaults,
                // then the values a control command set.
                "# TYPE zmem_writeback_compressed gauge\n",
                "zmem_writeback_compressed{export=\"d\\\"q\"} 0\n",
                "zmem_writeback_batch_size_pages{export=\"d\\\"q\"} 32\n",
                "zmem_writeback_limit_enabled{export=\"d\\\"q\"} 0\n",
            ],
        );
        reg.served()[0].store.set_writeback_batch_size(8).unwrap();
        reg.served()[0].store.set_writeback_limit_enable(true);
        reg.served()[0].store.set_writeback_limit(12);
        let out = get("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        has_lines(
            &out,
            &[
                "zmem_writeback_batch_size_pages{export=\"d\\\"q\"} 8\n",
                "zmem_writeback_limit_enabled{export=\"d\\\"q\"} 1\n",
                "zmem_writeback_limit{export=\"d\\\"q\"} 12\n",
                "# TYPE zmem_auto_compact_runs_total counter\n",
            ],
        );
        assert!(get("GET / HTTP/1.0\r\n\r\n").starts_with("HTTP/1.0 404"));
        assert!(get("POST /metrics HTTP/1.0\r\n\r\n").starts_with("HTTP/1.0 405"));
        assert!(MetricsServer::bind(
            "0.0.0.0:0".parse().unwrap(),
            false,
            Arc::new(Registry::default())
        )
        .is_err());
        m.shutdown();
    }
}
