//! `zmem serve` and `zmem ctl` end to end: the real binary, driven by the
//! Debian NBD clients (qemu-img, qemu-io, nbdcopy, nbdinfo from qemu-utils
//! and libnbd-bin). A test whose client is missing prints SKIP and passes.

mod serve_common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use serve_common::{read_export, serve_usage_error, Zmem, MIB};
use testkit::clients::{
    assert_write_past_end_refused, nbdinfo_export_names, odd_offsets_model, qemu_io, run_ok,
    run_tool, ODD_OFFSETS,
};
use testkit::{real_data, require_tools};

fn write_file(z: &Zmem, name: &str, data: &[u8]) -> String {
    let p = z.file(name);
    std::fs::write(&p, data).unwrap();
    p.to_string_lossy().into_owned()
}

/// A raw connection to the NBD socket, once the server has greeted it. The
/// server counts a connection from its accept, before it sends the
/// greeting, so a client that has read the greeting is counted: no sleep
/// and hope.
fn greeted_client(sock: &Path) -> UnixStream {
    let mut c = UnixStream::connect(sock).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut magic = [0u8; 8];
    c.read_exact(&mut magic).expect("the server's greeting");
    assert_eq!(&magic, b"NBDMAGIC");
    c
}

/// Makes every page of `data` (4 KiB pages) differ from a same-filled one,
/// so page counts in mm_stat are exact.
fn no_same_pages(mut data: Vec<u8>) -> Vec<u8> {
    for (i, page) in data.chunks_exact_mut(4096).enumerate() {
        page[..8].copy_from_slice(&(i as u64 + 1).to_le_bytes());
        page[4088..].copy_from_slice(&(!(i as u64)).to_le_bytes());
    }
    data
}

/// Copies 4 MiB of real data, no page of it same-filled, onto `export` with
/// nbdcopy: the data, and the export's mm_stat after.
fn fill_4_mib(z: &Zmem, export: &str) -> (Vec<u8>, Vec<u64>) {
    let data = no_same_pages(real_data(4 * MIB));
    let src = write_file(z, "src.raw", &data);
    run_ok("nbdcopy", &[&src, &z.uri(export)]);
    (data, z.mm_stat(export))
}

#[test]
fn qemu_img_convert_in_nbdcopy_out_identical() {
    require_tools!("qemu-img", "nbdcopy");
    let data = real_data(6 * MIB + 12345);
    for (comp, page) in [("lz4", "4K"), ("zstd", "32K")] {
        let z = Zmem::start(&["--export", "d:8M", "--comp", comp, "--page-size", page]);
        let src = write_file(&z, "src.raw", &data);
        let uri = z.uri("d");
        run_ok(
            "qemu-img",
            &["convert", "-n", "-f", "raw", "-O", "raw", &src, &uri],
        );
        let back = read_export(&z, &uri);
        assert_eq!(back.len(), 8 * MIB, "{comp}");
        assert!(back[..data.len()] == data[..], "{comp}: data differs");
        assert!(back[data.len()..].iter().all(|&b| b == 0), "{comp}: tail");
        let o = run_ok(
            "qemu-img",
            &["compare", "-f", "raw", "-F", "raw", &src, &uri],
        );
        assert!(o.contains("identical"), "{o}");
        let mm = z.mm_stat("d");
        assert!(mm[1] < mm[0], "{comp} compresses: {mm:?}");
    }
}

#[test]
fn qemu_io_at_odd_offsets_and_lengths() {
    require_tools!("qemu-io", "nbdcopy");
    for page in ["4K", "32K"] {
        let z = Zmem::start(&["--size", "4M", "--page-size", page, "--comp", "zstd"]);
        let uri = z.uri("zram0");
        // ODD_OFFSETS on a 4 MiB export, and across a 32 KiB page boundary.
        let more = ["write -P 0x11 32767 2", "read -P 0x11 32767 2", "flush"];
        qemu_io(&uri, &[&ODD_OFFSETS[..], &more].concat());
        let mut model = odd_offsets_model();
        model[32767..32769].fill(0x11);
        let back = read_export(&z, &uri);
        assert!(back == model, "{page}: contents differ from the model");
        // Past the end: refused, nothing changes, the server stays up.
        assert_write_past_end_refused(&uri);
        assert!(
            read_export(&z, &uri) == model,
            "{page}: changed by a refused write"
        );
    }
}

#[test]
fn nbdinfo_shows_size_flags_and_exports() {
    require_tools!("nbdinfo");
    let z = Zmem::start(&[
        "--export",
        "a:3M",
        "--export",
        "b:64M",
        "--page-size",
        "16K",
    ]);
    let out = run_ok("nbdinfo", &["--json", &z.uri("a")]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let e = &v["exports"][0];
    assert_eq!(e["export-name"], "a");
    assert_eq!(e["export-size"], 3 * MIB as u64);
    for flag in [
        "can_trim",
        "can_zero",
        "can_fast_zero",
        "can_flush",
        "can_fua",
        "can_multi_conn",
        "can_cache",
    ] {
        assert_eq!(e[flag], true, "{flag}: {out}");
    }
    assert_eq!(e["is_read_only"], false);
    // A block above 4 KiB is preferred, with the sector as the minimum
    // (smaller requests are still served, by read-modify-write).
    assert_eq!(e["block_size_minimum"], 512);
    assert_eq!(e["block_size_preferred"], 16384);
    assert!(e["description"]
        .as_str()
        .unwrap_or("")
        .contains("zsmalloc/default/lz4/16K"));
    assert_eq!(nbdinfo_export_names(&z.uri("")), ["a", "b"]);
    // A 64 KiB compression unit on 4 KiB pages: the unit is the block.
    let u = Zmem::start(&["--export", "u:4M", "--unit", "64K"]);
    let out = run_ok("nbdinfo", &["--json", &u.uri("u")]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let e = &v["exports"][0];
    assert_eq!(e["block_size_minimum"], 512, "{out}");
    assert_eq!(e["block_size_preferred"], 65536, "{out}");
    assert!(
        e["description"]
            .as_str()
            .unwrap_or("")
            .contains("zsmalloc/default/lz4/4K/unit64K"),
        "{out}"
    );
    drop(u);
    // An unknown export is refused; the server goes on.
    let o = run_tool("nbdinfo", &[&z.uri("nope")]);
    assert!(!o.status.success());
    run_ok("nbdinfo", &["--size", &z.uri("b")]);
}

#[test]
fn sizes_round_up_to_whole_pages_as_zram_disksize() {
    // `echo 1000 > disksize` gives 4096: so do --size and NAME:SIZE.
    let z = Zmem::start(&["--size", "1000", "--export", "a", "--export", "b:5000"]);
    assert_eq!(z.ctl_ok(&["--export", "a", "disksize"]), "4096\n");
    assert_eq!(z.ctl_ok(&["--export", "b", "disksize"]), "8192\n");
}

#[test]
fn trim_and_zero_free_pages() {
    require_tools!("qemu-io", "nbdinfo", "nbdcopy");
    let z = Zmem::start(&["--size", "8M"]);
    let uri = z.uri("zram0");
    let data = no_same_pages(real_data(8 * MIB));
    let src = write_file(&z, "src.raw", &data);
    run_ok("nbdcopy", &[&src, &uri]);
    let full = z.mm_stat("zram0");
    assert_eq!(full[5], 0, "no same-filled pages: {full:?}");
    assert_eq!(full[0], 8 * MIB as u64, "{full:?}");
    // Trim 1 MiB (plus ragged edges, which keep their data), zero 1 MiB
    // with a hole and 1 MiB without one.
    qemu_io(
        &uri,
        &[
            "discard 1048000 1049600",
            "write -z 3145728 1048576",
            "write -z -u -n 5242880 1048576",
            "read -P 0 5242880 1048576",
            "read -P 0 3145728 1048576",
        ],
    );
    let after = z.mm_stat("zram0");
    // 256 whole pages trimmed, 256 zeroed with holes; the NO_HOLE zeroes
    // stay as same-filled pages.
    assert_eq!(after[0], full[0] - 512 * 4096, "{after:?}");
    assert_eq!(after[5], 256, "same_pages: {after:?}");
    assert!(after[2] < full[2], "memory freed: {full:?} -> {after:?}");
    let io = z.io_stat("zram0");
    assert_eq!(io[3], 512, "notify_free: {io:?}");
    let map = run_ok("nbdinfo", &["--map", &uri]);
    assert!(map.contains("hole,zero"), "{map}");
    let back = read_export(&z, &uri);
    let mut model = data.clone();
    model[1048576..2097152].fill(0);
    model[3145728..4194304].fill(0);
    model[5242880..6291456].fill(0);
    assert!(back[..1048000] == model[..1048000]);
    // The trimmed whole pages read as zeros; the ragged edges kept data.
    assert!(back[1048576..2097152].iter().all(|&b| b == 0));
    assert!(back[2097152..] == model[2097152..]);
}

#[test]
fn two_clients_at_once() {
    require_tools!("nbdcopy", "qemu-io");
    let z = Zmem::start(&["--export", "a:16M", "--export", "b:16M"]);
    let d1 = real_data(12 * MIB);
    let d2: Vec<u8> = d1.iter().rev().copied().collect();
    let s1 = write_file(&z, "one.raw", &d1);
    let s2 = write_file(&z, "two.raw", &d2);
    let (ua, ub) = (z.uri("a"), z.uri("b"));
    std::thread::scope(|s| {
        let h1 = s.spawn(|| run_ok("nbdcopy", &[&s1, &ua]));
        let h2 = s.spawn(|| run_ok("nbdcopy", &[&s2, &ub]));
        // A third client writes past the first one's data meanwhile.
        let h3 = s.spawn(|| {
            qemu_io(
                &ua,
                &[
                    "write -P 0x42 13000000 1000000",
                    "read -P 0x42 13000000 1000000",
                ],
            )
        });
        h1.join().unwrap();
        h2.join().unwrap();
        h3.join().unwrap();
    });
    let a = read_export(&z, &ua);
    let b = read_export(&z, &ub);
    assert!(a[..d1.len()] == d1[..]);
    assert!(a[13000000..14000000].iter().all(|&x| x == 0x42));
    assert!(b[..d2.len()] == d2[..]);
    assert!(z.log().contains("conn 3"), "three connections: {}", z.log());
}

#[test]
fn ctl_reads_and_writes_the_attributes() {
    require_tools!("qemu-io", "nbdcopy");
    // Background compaction off, so the manual compact below has work.
    let z = Zmem::start(&[
        "--size",
        "16M",
        "--export",
        "x",
        "--export",
        "y",
        "--auto-compact",
        "off",
    ]);
    let empty = z.ctl_ok(&["mm_stat"]);
    assert_eq!(empty.split_whitespace().count(), 9);
    assert!(empty.ends_with('\n'));
    assert_eq!(
        z.ctl_ok(&["debug_stat"]),
        "version: 1\n0        0\n",
        "debug_stat"
    );
    assert_eq!(z.ctl_ok(&["io_stat"]), "       0        0 0        0\n");
    assert_eq!(z.ctl_ok(&["--export", "y", "disksize"]), "16777216\n");
    assert_eq!(z.ctl_ok(&["comp_algorithm"]), "[lz4]\n");
    let exports = z.ctl_ok(&["exports"]);
    assert_eq!(exports.lines().count(), 2, "{exports}");

    let (data, mm) = fill_4_mib(&z, "x");
    assert_eq!(mm[0], 4 * MIB as u64);
    assert!(mm[1] > 0 && mm[2] >= mm[1] && mm[4] >= mm[2], "{mm:?}");
    assert_eq!(z.mm_stat("y")[0], 0, "the other export is untouched");
    let classes = z.ctl_ok(&["--export", "x", "classes"]);
    assert!(classes.starts_with(" class  size"), "{classes}");

    // Free every other 4 KiB page, then compact: the pool shrinks.
    let cmds: Vec<String> = (0..512)
        .map(|i| format!("discard {} 4096", i * 8192))
        .collect();
    let cmds: Vec<&str> = cmds.iter().map(String::as_str).collect();
    qemu_io(&z.uri("x"), &cmds);
    let before = z.mm_stat("x");
    assert_eq!(z.ctl_ok(&["--export", "x", "compact"]), "");
    let after = z.mm_stat("x");
    assert!(after[2] < before[2], "compact: {before:?} -> {after:?}");
    assert!(after[6] > 0, "pages_compacted: {after:?}");
    assert_eq!(after[0], before[0]);
    // mem_used_max 0 brings the maximum down to the current use.
    assert_eq!(z.ctl_ok(&["--export", "x", "mem_used_max", "0"]), "");
    assert_eq!(z.mm_stat("x")[4], after[2]);
    assert_eq!(z.ctl_ok(&["--export", "x", "idle", "all"]), "");
    assert_eq!(z.ctl_ok(&["--export", "x", "idle", "60"]), "");
    // The background compactor, switched on and off while serving.
    assert!(z
        .ctl_ok(&["--export", "x", "auto_compact"])
        .starts_with("off cpu=5 min_gain=32 "));
    assert_eq!(
        z.ctl_ok(&["--export", "x", "auto_compact", "on cpu=10"]),
        ""
    );
    assert!(z
        .ctl_ok(&["--export", "x", "auto_compact"])
        .starts_with("on cpu=10 "));
    let debug = z.ctl_ok(&["--export", "x", "debug_stat"]);
    assert!(debug.contains("\nauto_compact: wakeups "), "{debug}");
    assert_eq!(z.ctl_ok(&["--export", "x", "auto_compact", "off"]), "");
    // Data survived all of it.
    let back = read_export(&z, &z.uri("x"));
    for i in 0..1024usize {
        let page = &back[i * 4096..(i + 1) * 4096];
        if i % 2 == 0 {
            assert!(page.iter().all(|&b| b == 0), "page {i}");
        } else {
            assert!(page == &data[i * 4096..(i + 1) * 4096], "page {i}");
        }
    }

    // reset is refused while a client is connected to the export, as zram's
    // is while the disk is open.
    let client = testkit::clients::raw_go(&z.sock, "x").expect("GO x");
    let o = z.ctl(&["--export", "x", "reset"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("EBUSY"));
    drop(client);
    // The server notices the client left in its own time: poll, with a
    // deadline no loaded machine comes near.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let o = z.ctl(&["--export", "x", "reset"]);
        if o.status.success() {
            break;
        }
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("EBUSY"), "reset failed otherwise: {err}");
        assert!(
            Instant::now() < deadline,
            "reset still refused 60 s after the client left: {err}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // reset returns it to uninitialised, as zram's; disksize brings it back
    // empty.
    assert_eq!(z.mm_stat("x"), vec![0; 9]);
    assert_eq!(z.ctl_ok(&["--export", "x", "initstate"]), "0\n");
    z.ctl_ok(&["--export", "x", "disksize", "16M"]);
    assert!(read_export(&z, &z.uri("x")).iter().all(|&b| b == 0));

    // Bad values: EINVAL, exit status 1, nothing changes.
    for bad in [
        vec!["mem_used_max", "5"],
        vec!["mem_limit", "lots"],
        vec!["idle", "never"],
        vec!["frobnicate"],
        vec!["--export", "nope", "mm_stat"],
    ] {
        let o = z.ctl(&bad);
        assert_eq!(o.status.code(), Some(1), "{bad:?}");
        assert!(!String::from_utf8_lossy(&o.stderr).is_empty());
    }
}

#[test]
fn mem_limit_fails_writes_and_keeps_other_data() {
    require_tools!("qemu-io", "nbdcopy");
    let z = Zmem::start(&["--size", "32M"]);
    let uri = z.uri("zram0");
    let data = real_data(2 * MIB);
    let src = write_file(&z, "src.raw", &data);
    run_ok("nbdcopy", &[&src, &uri]);
    let used = z.mm_stat("zram0")[2];
    z.ctl_ok(&["mem_limit", &(used + 256 * 1024).to_string()]);
    assert_eq!(z.mm_stat("zram0")[3], used + 256 * 1024);
    // Incompressible data past the first 2 MiB soon passes the limit.
    let noise = testkit::noise(8 * MIB, 12345);
    let mut padded = data.clone();
    padded.extend_from_slice(&noise);
    let big = write_file(&z, "big.raw", &padded);
    let o = run_tool(
        "qemu-img",
        &["convert", "-n", "-f", "raw", "-O", "raw", &big, &uri],
    );
    let text = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(!o.status.success(), "the write must fail");
    assert!(
        text.contains("No space left on device"),
        "ENOSPC expected: {text}"
    );
    assert!(z.io_stat("zram0")[1] > 0, "failed_writes counted");
    let mm = z.mm_stat("zram0");
    assert!(mm[2] <= used + 256 * 1024 + 65536, "limit held: {mm:?}");
    // The first 2 MiB (written again with the same bytes) are intact.
    let back = read_export(&z, &uri);
    assert!(back[..data.len()] == data[..]);
    // Lifting the limit lets the write through.
    z.ctl_ok(&["mem_limit", "0"]);
    run_ok(
        "qemu-img",
        &["convert", "-n", "-f", "raw", "-O", "raw", &big, &uri],
    );
    assert!(read_export(&z, &uri)[..padded.len()] == padded[..]);
}

#[test]
fn sigterm_and_sigint_shut_down_cleanly() {
    for sig in [libc::SIGTERM, libc::SIGINT] {
        let mut z = Zmem::start(&["--size", "1M", "--metrics", "127.0.0.1:0"]);
        assert!(z.sock.exists() && z.ctl.exists() && z.pid_file.exists());
        let pid: u32 = std::fs::read_to_string(&z.pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert_eq!(pid, z.pid());
        // A connected client does not hold the shutdown up.
        let _client = greeted_client(&z.sock);
        z.signal(sig);
        let st = z.wait_exit(Duration::from_secs(60));
        assert!(st.success(), "exit status {st}: {}", z.log());
        assert!(!z.sock.exists(), "NBD socket left behind");
        assert!(!z.ctl.exists(), "control socket left behind");
        assert!(!z.pid_file.exists(), "PID file left behind");
        let log = z.log();
        assert!(
            log.contains("shutting down") && log.contains("stopped"),
            "{log}"
        );
    }
}

/// The address a `--tcp` or `--metrics` server logged for itself.
fn logged_addr(log: &str, prefix: &str) -> String {
    log.lines()
        .find_map(|l| {
            let i = l.find(prefix)?;
            let rest = &l[i + prefix.len()..];
            Some(
                rest.split(|c: char| c == ',' || c == '/' || c.is_whitespace())
                    .next()?
                    .to_string(),
            )
        })
        .unwrap_or_else(|| panic!("no {prefix:?} in the log:\n{log}"))
}

#[test]
fn tcp_metrics_and_refusals() {
    require_tools!("nbdinfo", "qemu-io");
    let dir = tempfile::tempdir().unwrap();
    let ctl = dir.path().join("c.ctl");
    let z = Zmem::start(&[
        "--tcp",
        "127.0.0.1:0",
        "--ctl-socket",
        &ctl.to_string_lossy(),
        "--metrics",
        "127.0.0.1:0",
        "--size",
        "2M",
    ]);
    let log = z.log();
    let nbd = logged_addr(&log, "NBD on tcp:");
    let metrics = logged_addr(&log, "metrics: http://");
    let uri = format!("nbd://{nbd}/zram0");
    qemu_io(&uri, &["write -P 0x61 0 65536", "read -P 0x61 0 65536"]);
    let size = run_ok("nbdinfo", &["--size", &uri]);
    assert_eq!(size.trim(), "2097152");
    let mut c = TcpStream::connect(&metrics).unwrap();
    c.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut text = String::new();
    c.read_to_string(&mut text).unwrap();
    assert!(text.starts_with("HTTP/1.0 200"), "{text}");
    assert!(
        text.contains("zmem_orig_data_size_bytes{export=\"zram0\"} 65536\n"),
        "{text}"
    );
    assert!(text.contains("zmem_page_writes_total{export=\"zram0\"} 16\n"));
    // qemu-io and nbdinfo each had one session, neither with simple
    // replies (qemu 8.2 and later negotiate extended headers).
    let sessions = |headers: &str| -> u64 {
        let key = format!("zmem_nbd_sessions_total{{headers=\"{headers}\"}} ");
        let line = text.lines().find(|l| l.starts_with(&key));
        line.and_then(|l| l[key.len()..].parse().ok())
            .unwrap_or_else(|| panic!("no {key} in {text}"))
    };
    assert_eq!(sessions("simple"), 0, "{text}");
    assert_eq!(sessions("structured") + sessions("extended"), 2, "{text}");
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_zmem"))
        .args(["ctl", "--socket", &ctl.to_string_lossy(), "mm_stat"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("   65536 "));

    // Refusals: usage errors exit 2, failures 1, and nothing is left behind.
    let zmem = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_zmem"))
            .args(args)
            .env("XDG_RUNTIME_DIR", dir.path())
            .output()
            .unwrap()
    };
    let o = zmem(&["serve", "--tcp", "0.0.0.0:0"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("loopback"));
    let o = zmem(&[
        "serve",
        "--export",
        "a",
        "--export",
        "b",
        "--comp",
        "lz4,zstd,deflate",
    ]);
    assert_eq!(o.status.code(), Some(2));
    let o = zmem(&["serve", "--size", "1M", "--alloc", "slab"]);
    assert_eq!(o.status.code(), Some(2));
    let o = zmem(&["ctl", "--socket", "/nonexistent/ctl", "mm_stat"]);
    assert_eq!(o.status.code(), Some(1));
}

#[test]
fn a_second_server_on_a_live_socket_is_refused_and_a_stale_one_replaced() {
    let mut z = Zmem::start(&["--size", "1M"]);
    let sock = z.sock.to_string_lossy().into_owned();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_zmem"))
        .args(["serve", "--size", "1M", "--socket", &sock])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("already listening"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(z.alive());
    // Kill it hard: its sockets stay behind, and the next server replaces
    // them.
    z.signal(libc::SIGKILL);
    let _ = z.wait_exit(Duration::from_secs(60));
    assert!(z.sock.exists());
    let dir = z.dir.path().to_path_buf();
    let pid_file = dir.join("again.pid");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_zmem"))
        .args(["serve", "--size", "1M", "--socket", &sock, "--pid-file"])
        .arg(&pid_file)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !pid_file.exists() {
        assert!(start.elapsed() < Duration::from_secs(60), "not ready");
        assert!(child.try_wait().unwrap().is_none(), "exited");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(UnixStream::connect(&sock).is_ok());
    // SAFETY: kill has no memory-safety preconditions; our own child.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    assert!(child.wait().unwrap().success());
}

#[test]
fn sigterm_shuts_down_after_the_socket_files_were_removed() {
    // Something (a tmp cleaner, a script) removed both socket files: the
    // server cannot be woken by connecting to them any more, and must still
    // stop on a signal.
    let mut z = Zmem::start(&["--size", "1M"]);
    std::fs::remove_file(&z.sock).unwrap();
    std::fs::remove_file(&z.ctl).unwrap();
    z.signal(libc::SIGTERM);
    let st = z.wait_exit(Duration::from_secs(60));
    assert!(st.success(), "exit status {st}: {}", z.log());
    let log = z.log();
    assert!(log.contains("stopped"), "{log}");
    assert!(!z.pid_file.exists(), "PID file left behind");
}

/// `zmem_retained_bound_bytes` of export zram0 from a server's /metrics.
fn retained_bound(metrics: &str) -> u64 {
    let mut c = TcpStream::connect(metrics).unwrap();
    c.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut text = String::new();
    c.read_to_string(&mut text).unwrap();
    let key = "zmem_retained_bound_bytes{export=\"zram0\"} ";
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in {text}"))
}

#[test]
fn retain_divisor_sets_the_share_of_freed_pages_kept() {
    require_tools!("nbdcopy");
    // 4 MiB of real files: a pool of some hundreds of pages.
    let data = real_data(4 * MIB);
    let mut bounds = Vec::new();
    for flags in [&[][..], &["--retain-divisor", "0"][..]] {
        let mut args = vec!["--size", "8M", "--metrics", "127.0.0.1:0"];
        args.extend_from_slice(flags);
        let z = Zmem::start(&args);
        let src = z.file("data.bin");
        std::fs::write(&src, &data).unwrap();
        run_ok("nbdcopy", &[&src.to_string_lossy(), &z.uri("zram0")]);
        let used = z.mm_stat("zram0")[2];
        assert!(used > 64 * 4096, "mem_used_total {used}");
        let metrics = logged_addr(&z.log(), "metrics: http://");
        bounds.push(retained_bound(&metrics));
        if flags.is_empty() {
            // Changed on the running export, and read back.
            assert_eq!(z.ctl_ok(&["retain_divisor"]), "8\n");
            z.ctl_ok(&["retain_divisor", "0"]);
            assert_eq!(z.ctl_ok(&["retain_divisor"]), "0\n");
            assert_eq!(retained_bound(&metrics), MIB as u64);
        }
    }
    // Default mode keeps 1 MiB plus a share of the pool; 0 keeps the fixed
    // 1 MiB cache alone.
    assert!(bounds[0] > MIB as u64, "{bounds:?}");
    assert_eq!(bounds[1], MIB as u64, "{bounds:?}");
}

#[test]
fn bench_serve_runs_on_a_small_file() {
    require_tools!("nbdkit", "nbdcopy");
    let v = bench_serve_json(4 * MIB, &[]);
    let samples = v["samples"].as_array().unwrap();
    assert_eq!(samples.len(), 4, "two configurations, two servers");
    for s in samples {
        assert!(s["write_mb_s"].as_f64().unwrap() > 0.0, "{s}");
        assert!(s["read_mb_s"].as_f64().unwrap() > 0.0, "{s}");
        assert!(s["client_write_cpu_s"].as_f64().unwrap() >= 0.0, "{s}");
        assert!(s["client_read_cpu_s"].as_f64().unwrap() >= 0.0, "{s}");
        assert!(s["rss_growth_kib"].as_u64().is_some(), "{s}");
        assert!(s["anon_growth_kib"].as_u64().is_some(), "{s}");
    }
    // Each configuration's ceiling: the bare compression and decompression
    // of the file with its compressor.
    let ceilings = v["ceilings"].as_array().unwrap();
    assert_eq!(ceilings.len(), 2, "{ceilings:?}");
    assert_eq!(ceilings[0]["setup"], "zstd32k");
    assert_eq!(ceilings[1]["setup"], "lz4-4k");
    for c in ceilings {
        assert!(c["compress_cpu_s"].as_f64().unwrap() > 0.0, "{c}");
        assert!(c["decompress_cpu_s"].as_f64().unwrap() > 0.0, "{c}");
    }
    // The four throughput targets, each with its ceiling: lz4
    // writes against the ceiling, the others against nbdkit.
    let targets = v["targets"].as_array().unwrap();
    let names: Vec<(String, String, String)> = targets
        .iter()
        .map(|t| {
            let f = |k: &str| t[k].as_str().unwrap().to_string();
            (f("setup"), f("phase"), f("basis"))
        })
        .collect();
    let want = [
        ("zstd32k", "write", "nbdkit"),
        ("zstd32k", "read", "nbdkit"),
        ("lz4-4k", "write", "ceiling"),
        ("lz4-4k", "read", "nbdkit"),
    ];
    let want: Vec<(String, String, String)> = want
        .iter()
        .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
        .collect();
    assert_eq!(names, want);
    for t in targets {
        let g = |k: &str| t[k].as_f64().unwrap();
        assert!(
            g("ceiling_mb_s") > 0.0 && g("zmem_cpu_s_per_gib") >= 0.0,
            "{t}"
        );
        let base = if t["basis"] == "ceiling" {
            g("ceiling_mb_s")
        } else {
            g("nbdkit_mb_s")
        };
        assert!((g("ratio") - g("zmem_mb_s") / base).abs() < 1e-9, "{t}");
        assert_eq!(
            t["met"].as_bool().unwrap(),
            g("ratio") >= g("target"),
            "{t}"
        );
        assert_eq!(
            t["within_ceiling"].as_bool().unwrap(),
            g("needed_mb_s") <= g("ceiling_mb_s"),
            "{t}"
        );
    }
    // lz4 writes (against sparse) also get the ceiling with sparse's own
    // write CPU added to the server's; the others have none.
    let t = &targets[2];
    let g = |k: &str| t[k].as_f64().unwrap();
    let (server, kit, client) = (
        g("ceiling_server_cpu_s"),
        g("receiving_nbdkit_cpu_s"),
        g("client_cpu_s"),
    );
    assert!(kit >= 0.0, "{t}");
    let expect = g("ceiling_mb_s") * (server + client) / (server + kit + client);
    assert!(
        (g("receiving_ceiling_mb_s") - expect).abs() <= 1e-9 * expect,
        "{t}"
    );
    for i in [0, 1, 3] {
        assert!(
            targets[i]["receiving_ceiling_mb_s"].is_null(),
            "{}",
            targets[i]
        );
    }
    // Reads against sparse count sparse's own CPU in the ceiling.
    assert_eq!(targets[3]["ceiling_counts_nbdkit"], true);
    assert_eq!(targets[1]["ceiling_counts_nbdkit"], false);
    // Writes, and reads against a compressing nbdkit, also get the ceiling
    // with the socket's copy: the same CPUs, the socket's CPU added. (Reads
    // against sparse get it too, from the decompression alone: below.)
    for i in [0, 1, 2] {
        assert!(targets[i]["codec_ceiling_mb_s"].is_null(), "{}", targets[i]);
        let t = &targets[i];
        let g = |k: &str| t[k].as_f64().unwrap();
        let (server, socket, client) = (
            g("ceiling_server_cpu_s"),
            g("socket_cpu_s"),
            g("client_cpu_s"),
        );
        assert!(socket > 0.0, "{t}");
        let expect = g("ceiling_mb_s") * (server + client) / (server + socket + client);
        assert!(
            (g("socket_ceiling_mb_s") - expect).abs() <= 1e-9 * expect,
            "{t}"
        );
    }
    // Reads against sparse get the decompression alone with the client's
    // CPU (no nbdkit read CPU), a ceiling above the one that counts it, and
    // that with the socket's sending added.
    let t = &targets[3];
    let g = |k: &str| t[k].as_f64().unwrap();
    let decompress = v["ceilings"][1]["decompress_cpu_s"].as_f64().unwrap();
    assert_eq!(g("codec_cpu_s"), decompress, "{t}");
    // The ceiling that counts sparse's read CPU counts exactly that on top
    // of the decompression (one run each, so the median is the sample).
    let kit_read = samples
        .iter()
        .find(|s| s["setup"] == "lz4-4k" && s["server"] == "nbdkit")
        .unwrap()["read_cpu_s"]
        .as_f64()
        .unwrap();
    assert!(
        (g("ceiling_server_cpu_s") - decompress - kit_read).abs() <= 1e-9,
        "{t}"
    );
    let per_cpu_s = g("ceiling_mb_s") * (g("ceiling_server_cpu_s") + g("client_cpu_s"));
    let expect = per_cpu_s / (decompress + g("client_cpu_s"));
    assert!(
        (g("codec_ceiling_mb_s") - expect).abs() <= 1e-9 * expect,
        "{t}"
    );
    assert!(g("codec_ceiling_mb_s") >= g("ceiling_mb_s"), "{t}");
    let expect = per_cpu_s / (decompress + g("socket_cpu_s") + g("client_cpu_s"));
    assert!(
        (g("socket_ceiling_mb_s") - expect).abs() <= 1e-9 * expect,
        "{t}"
    );
    // The socket's CPU is the ceilings' entry's: receiving for writes,
    // sending for reads.
    let c = &v["ceilings"][0];
    assert_eq!(targets[0]["socket_cpu_s"], c["socket_recv_cpu_s"], "{c}");
    assert_eq!(targets[1]["socket_cpu_s"], c["socket_send_cpu_s"], "{c}");
    assert_eq!(
        targets[3]["socket_cpu_s"],
        v["ceilings"][1]["socket_send_cpu_s"]
    );
    assert_eq!(
        targets[2]["socket_cpu_s"],
        v["ceilings"][1]["socket_recv_cpu_s"]
    );
    // Writes also get the ceilings with receiving and faulting in fresh
    // memory for the compressed bytes, with each page size: the faults are
    // the ceilings' entry's, timed (faulting pages in costs CPU), and add
    // to the receiving ceiling's CPU; reads have none.
    let huge = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
        .is_ok_and(|s| s.contains("[always]") || s.contains("[madvise]"));
    for (i, c) in [(0, &v["ceilings"][0]), (2, &v["ceilings"][1])] {
        let t = &targets[i];
        let g = |k: &str| t[k].as_f64().unwrap();
        for (ceiling, copy, field) in [
            (
                "kept_ceiling_small_mb_s",
                "kept_cpu_small_s",
                "fresh_fault_small_cpu_s",
            ),
            (
                "kept_ceiling_huge_mb_s",
                "kept_cpu_huge_s",
                "fresh_fault_huge_cpu_s",
            ),
        ] {
            assert_eq!(t[copy], c[field], "{t} {c}");
            if copy == "kept_cpu_huge_s" && !huge {
                // No huge pages offered: no huge-page ceiling.
                assert!(t[ceiling].is_null() && c[field].is_null(), "{t} {c}");
                continue;
            }
            assert!(g(copy) > 0.0, "{t}");
            let before = g("ceiling_server_cpu_s") + g("socket_cpu_s") + g("client_cpu_s");
            let expect = g("socket_ceiling_mb_s") * before / (before + g(copy));
            assert!((g(ceiling) - expect).abs() <= 1e-9 * expect, "{t}");
            assert!(g(ceiling) < g("socket_ceiling_mb_s"), "{t}");
        }
    }
    for i in [1, 3] {
        for k in ["kept_ceiling_small_mb_s", "kept_ceiling_huge_mb_s"] {
            assert!(targets[i][k].is_null(), "{}", targets[i]);
        }
    }
}

/// `zmem bench serve` once on `bytes` of real data with `flags`: its JSON.
fn bench_serve_json(bytes: usize, flags: &[&str]) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("small.bin");
    std::fs::write(&data, real_data(bytes)).unwrap();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_zmem"))
        .args([
            "bench", "serve", "--runs", "1", "--settle", "0", "--format", "json",
        ])
        .args(flags)
        .arg("--data")
        .arg(&data)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn ctl_status_prints_zramctls_table_and_json() {
    require_tools!("nbdcopy");
    let z = Zmem::start(&["--size", "16M", "--export", "x", "--export", "y:1G"]);
    let (_, mm) = fill_4_mib(&z, "x");

    // The default columns, zramctl's order and alignment.
    let table = z.ctl_ok(&["status"]);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        [
            "NAME",
            "ALGORITHM",
            "DISKSIZE",
            "DATA",
            "COMPR",
            "TOTAL",
            "STREAMS",
            "MOUNTPOINT"
        ],
        "{table}"
    );
    assert_eq!(lines.len(), 3, "{table}");
    let x: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(&x[..4], ["x", "lz4", "16M", "4M"], "{table}");
    let y: Vec<&str> = lines[2].split_whitespace().collect();
    assert_eq!(&y[..5], ["y", "lz4", "1G", "0B", "0B"], "{table}");
    // Right-aligned numbers end where their heading ends.
    let end = lines[0].find("DISKSIZE").unwrap() + "DISKSIZE".len();
    assert_eq!(&lines[1][end - 3..end], "16M", "{table}");

    // Bytes, raw, no headings, chosen columns: the figures of mm_stat.
    let raw = z.ctl_ok(&[
        "status",
        "--bytes",
        "--raw",
        "-n",
        "-o",
        "name,data,compr,total,mem-used,zero-pages",
    ]);
    let first: Vec<&str> = raw.lines().next().unwrap().split(' ').collect();
    assert_eq!(
        first,
        [
            "x".to_string(),
            mm[0].to_string(),
            mm[1].to_string(),
            mm[2].to_string(),
            mm[4].to_string(),
            mm[5].to_string()
        ],
        "{raw}"
    );

    // JSON: every column, in bytes, for every export.
    let json: serde_json::Value =
        serde_json::from_str(&z.ctl_ok(&["status", "--format", "json"])).unwrap();
    let rows = json.as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["name"], "x");
    assert_eq!(rows[0]["data"], mm[0]);
    assert_eq!(rows[0]["compr"], mm[1]);
    assert_eq!(rows[1]["disksize"], 1u64 << 30);
    assert!(rows[1]["comp_ratio"].is_null());
    let ratio = rows[0]["comp_ratio"].as_f64().unwrap();
    assert!((ratio - mm[0] as f64 / mm[1] as f64).abs() < 1e-9);

    // Every read in JSON too.
    let mm_json: serde_json::Value =
        serde_json::from_str(&z.ctl_ok(&["--export", "x", "--format", "json", "mm_stat"])).unwrap();
    assert_eq!(mm_json["orig_data_size"], mm[0]);
    assert_eq!(mm_json["huge_pages_since"], mm[8]);

    // Bad column lists and status flags on other commands: usage errors.
    for bad in [
        vec!["status", "-o", "NAME,BOGUS"],
        vec!["mm_stat", "--bytes"],
        vec!["status", "--output-all", "-o", "NAME"],
    ] {
        let o = z.ctl(&bad);
        assert_eq!(o.status.code(), Some(2), "{bad:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!err.contains("panicked"), "{bad:?}: {err}");
    }
}

#[test]
fn a_config_file_sets_the_flags_and_the_command_line_overrides_it() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("zmem.toml");
    std::fs::write(
        &cfg,
        "# every key is a `zmem serve` flag\n\
         comp = \"zstd\"\nsize = \"64M\"\nexport = [\"a:32M\", \"b\"]\nmax_connections = 8\n",
    )
    .unwrap();
    let z = Zmem::start(&["--config", cfg.to_str().unwrap(), "--size", "128M"]);
    let rows: serde_json::Value =
        serde_json::from_str(&z.ctl_ok(&["status", "--format", "json"])).unwrap();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["name"], "a");
    assert_eq!(rows[0]["disksize"], 32u64 << 20);
    assert_eq!(rows[1]["disksize"], 128u64 << 20, "the command line wins");
    assert!(rows.iter().all(|r| r["algorithm"] == "zstd"));

    // A bad key or value is a one-line usage error naming it.
    std::fs::write(&cfg, "max_connections = 0\n").unwrap();
    let err = serve_usage_error(&["--config", cfg.to_str().unwrap()]);
    assert!(err.contains("--max-connections"), "{err}");
}

/// A sparse 16 MiB backing file in a temporary directory (removed with the
/// guard, also when a test fails), and its path as text for the flags.
fn backing_file() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("backing.img");
    std::fs::File::create(&path)
        .unwrap()
        .set_len(16 * MIB as u64)
        .unwrap();
    (dir, path.to_string_lossy().into_owned())
}

/// A server with one 8 MiB export `w` backed by a fresh [`backing_file`],
/// started with `extra` flags; the guard, the file's path and the server.
fn with_backing(extra: &[&str]) -> (tempfile::TempDir, String, Zmem) {
    let (dir, backing) = backing_file();
    let mut args = vec!["--export", "w:8M", "--backing-dev", backing.as_str()];
    args.extend(extra);
    let z = Zmem::start(&args);
    (dir, backing, z)
}

#[test]
fn serve_writeback_compressed_packs_pages_and_reads_them_back() {
    require_tools!("nbdcopy");
    let (_dir, _backing, z) = with_backing(&["--writeback-compressed"]);
    // The name Linux 7.0 released, and the old one as its alias.
    assert_eq!(z.ctl_ok(&["compressed_writeback"]), "1\n");
    assert_eq!(z.ctl_ok(&["writeback_compressed"]), "1\n");
    let (data, stored) = fill_4_mib(&z, "w");
    z.ctl_ok(&["idle", "all"]);
    z.ctl_ok(&["writeback", "idle"]);
    assert_eq!(z.mm_stat("w")[1], 0, "every page was idle");
    let bd = |z: &Zmem| -> Vec<u64> {
        z.ctl_ok(&["bd_stat"])
            .split_whitespace()
            .map(|v| v.parse().unwrap())
            .collect()
    };
    let pages = (4 * MIB / 4096) as u64;
    let written = bd(&z);
    // The compressed objects back to back (huge pages a block each): about
    // compr_data_size in blocks, not a block per page.
    assert!(
        written[0] <= stored[1].div_ceil(4096) + pages / 32 + 1 && written[0] < pages,
        "{written:?} for {stored:?}"
    );
    assert_eq!(written[2], written[0]);
    let back = read_export(&z, &z.uri("w"));
    assert!(
        back[..data.len()] == data[..],
        "data differs after writeback"
    );
    assert!(bd(&z)[1] >= pages, "every page read from the backing file");
    for name in ["compressed_writeback", "writeback_compressed"] {
        let o = z.ctl(&[name, "0"]);
        assert_eq!(o.status.code(), Some(1), "{name}");
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("EBUSY"),
            "{name}"
        );
    }
    drop(z);
}

#[test]
fn writeback_and_recompression_through_ctl_read_back_identical() {
    require_tools!("nbdcopy");
    let (_dir, backing, z) = with_backing(&["--recomp-algorithm", "algo=zstd priority=1"]);
    assert_eq!(z.ctl_ok(&["backing_dev"]), format!("{backing}\n"));
    assert_eq!(z.ctl_ok(&["recomp_algorithm"]), "#1: [zstd]\n");
    assert_eq!(z.ctl_ok(&["bd_stat"]), "       0        0        0\n");
    let (data, stored) = fill_4_mib(&z, "w");

    // Recompress idle pages with zstd: smaller, nothing else moves.
    z.ctl_ok(&["idle", "all"]);
    z.ctl_ok(&["recompress", "type=idle"]);
    let recompressed = z.mm_stat("w");
    assert!(
        recompressed[1] < stored[1],
        "{stored:?} -> {recompressed:?}"
    );
    assert_eq!(recompressed[0], stored[0]);

    // Write every idle page back: compressed data leaves memory, the pages
    // stay stored, and bd_stat counts each 4 KiB block.
    z.ctl_ok(&["idle", "all"]);
    z.ctl_ok(&["writeback", "idle"]);
    let written = z.mm_stat("w");
    assert_eq!(written[0], stored[0], "orig_data_size stays");
    assert_eq!(written[1], 0, "every page was idle: {written:?}");
    let pages = (4 * MIB / 4096) as u64;
    let bd: Vec<u64> = z
        .ctl_ok(&["bd_stat"])
        .split_whitespace()
        .map(|v| v.parse().unwrap())
        .collect();
    assert_eq!(bd, vec![pages, 0, pages]);
    let block_state = z.ctl_ok(&["block_state"]);
    assert_eq!(
        block_state.lines().filter(|l| l.contains(".w")).count(),
        pages as usize
    );

    // Every page reads back identical, from the backing file.
    let back = read_export(&z, &z.uri("w"));
    assert!(
        back[..data.len()] == data[..],
        "data differs after writeback"
    );
    let bd_reads: u64 = z
        .ctl_ok(&["bd_stat"])
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(bd_reads, pages);

    // The kernel's errnos for what it refuses.
    for (bad, errno) in [
        (vec!["backing_dev", backing.as_str()], "EBUSY"),
        (vec!["recomp_algorithm", "algo=deflate priority=2"], "EBUSY"),
        (vec!["recompress", "priority=7"], "EINVAL"),
        (vec!["writeback", "page_index=99999"], "ERANGE"),
    ] {
        let o = z.ctl(&bad);
        assert_eq!(o.status.code(), Some(1), "{bad:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(errno), "{bad:?}: {err}");
    }
    drop(z);
}

#[test]
fn tls_require_serves_nbdcopy_and_the_flags_refuse_what_they_must() {
    require_tools!("openssl", "nbdcopy", "nbdinfo");
    let work = tempfile::tempdir().unwrap();
    let certs = testkit::certs::make_certs(work.path());
    let server_dir = certs.server.to_string_lossy().into_owned();
    let z = Zmem::start(&[
        "--export",
        "d:4M",
        "--tls",
        "require",
        "--tls-certificates",
        &server_dir,
        "--tls-verify-peer",
    ]);
    let data = real_data(3 * MIB + 777);
    let src = write_file(&z, "src.raw", &data);
    let uri = format!(
        "nbds+unix:///d?socket={}&tls-certificates={}",
        z.sock.display(),
        certs.client.display()
    );
    run_ok("nbdcopy", &[&src, &uri]);
    let out = z.file("out.raw");
    run_ok("nbdcopy", &[&uri, &out.to_string_lossy()]);
    let back = std::fs::read(&out).unwrap();
    assert!(
        back[..data.len()] == data[..],
        "data differs after a TLS round trip"
    );
    // Plaintext is refused, and so is a client the CA did not sign.
    assert!(!run_tool("nbdinfo", &["--size", &z.uri("d")])
        .status
        .success());
    let stranger = format!(
        "nbds+unix:///d?socket={}&tls-certificates={}",
        z.sock.display(),
        certs.stranger.display()
    );
    assert!(!run_tool("nbdinfo", &["--size", &stranger]).status.success());
    assert!(z.log().contains("TLS established"), "{}", z.log());

    // Flags: each refusal is one line, before anything is served.
    let zmem = |args: &[&str]| {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_zmem"))
            .arg("serve")
            .args(args)
            .env("XDG_RUNTIME_DIR", work.path())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        (o.status.code(), err)
    };
    let missing = work.path().join("missing").to_string_lossy().into_owned();
    let (code, err) = zmem(&["--tls", "on", "--tls-certificates", &missing]);
    assert_eq!(code, Some(1));
    assert!(err.contains("server-cert.pem"), "{err}");
    let (code, err) = zmem(&["--tls", "require"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("--tls-certificates"), "{err}");
    let (code, _) = zmem(&["--tls-certificates", &server_dir]);
    assert_eq!(code, Some(2));
    // Remote clients: --allow-remote, then TLS required or --insecure.
    let (code, err) = zmem(&["--tcp", "0.0.0.0:0"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("--allow-remote"), "{err}");
    let (code, err) = zmem(&["--tcp", "0.0.0.0:0", "--allow-remote"]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("--tls require") && err.contains("--insecure"),
        "{err}"
    );
    let (code, _) = zmem(&["--tcp", "0.0.0.0:0", "--insecure"]);
    assert_eq!(code, Some(2));
}

#[test]
fn read_only_exports_refuse_writes_with_eperm() {
    require_tools!("qemu-io", "nbdsh");
    let z = Zmem::start(&["--export", "rw:1M", "--export", "frozen:1M:ro"]);
    let rw = z.uri("rw");
    let frozen = z.uri("frozen");
    qemu_io(&rw, &["write -P 0x5a 0 4096"]);
    // qemu sees NBD_FLAG_READ_ONLY: it will not open the export for
    // writing, and reads it with -r.
    let o = run_tool(
        "qemu-io",
        &["-f", "raw", "-c", "write -P 1 0 4096", &frozen],
    );
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("Permission denied"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = run_ok(
        "qemu-io",
        &["-r", "-f", "raw", "-c", "read -P 0 0 4096", &frozen],
    );
    assert!(o.contains("read 4096/4096") && !o.contains("fail"), "{o}");
    // A client that sends writes anyway (libnbd without its own checks)
    // gets EPERM for each kind.
    let script = "h.set_strict_mode(0)\n\
        assert h.is_read_only()\n\
        for f in (lambda: h.pwrite(b'x' * 512, 0), lambda: h.trim(4096, 0), \
                  lambda: h.zero(4096, 0)):\n\
        \x20   try:\n\
        \x20       f()\n\
        \x20       print('accepted')\n\
        \x20   except nbd.Error as e:\n\
        \x20       print(e.errno)\n";
    let out = run_ok("nbdsh", &["-u", &frozen, "-c", script]);
    assert_eq!(out, "EPERM\nEPERM\nEPERM\n");
    // The writable export kept its data; --read-only makes every export so.
    qemu_io(&rw, &["read -P 0x5a 0 4096"]);
    drop(z);
    let z = Zmem::start(&["--export", "a:1M", "--read-only"]);
    let o = run_tool(
        "qemu-io",
        &["-f", "raw", "-c", "write -P 1 0 4096", &z.uri("a")],
    );
    assert!(!o.status.success());
}

#[test]
fn bench_serve_runs_both_servers_over_tls() {
    require_tools!("nbdkit", "nbdcopy", "openssl");
    let v = bench_serve_json(2 * MIB, &["--tls", "--config", "zstd32k"]);
    let samples = v["samples"].as_array().unwrap();
    assert_eq!(samples.len(), 2, "zmem and nbdkit");
    for s in samples {
        assert_eq!(s["tls"], true, "{s}");
        assert!(s["write_mb_s"].as_f64().unwrap() > 0.0, "{s}");
        assert!(s["read_mb_s"].as_f64().unwrap() > 0.0, "{s}");
    }
}
