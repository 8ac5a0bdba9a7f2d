//! The flags of `zmem serve` and their value parsers.
//!
//! This module owns what the command line (and the configuration file,
//! which sets the same flags) may say: [`ServeArgs`], its help, and the
//! parsers that turn each value into the type the server takes (zram's own
//! for `--recomp-algorithm` and `--auto-writeback`). It starts nothing:
//! the parent module turns the flags into a `serve::ServerConfig`.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;
use log::LevelFilter;
use recipe::StoreArgs;
use zram::{RecompAlgorithm, WritebackMode};

use crate::error::CliError;

/// Arguments of `zmem serve`.
#[derive(Args, Debug)]
#[command(
    args_override_self = true,
    after_long_help = "\
EXPORTS
  The store flags take comma lists and expand to N configurations (as in
  `zmem replay`). Without --export, each configuration is served as its own
  export: zram0, zram1, ... With --export, either one configuration serves
  every export, or N --export flags pair with the N configurations in order.
  NAME:0 starts an export uninitialised (disksize 0, as a hot-added zram
  disk): it is listed but refuses clients until `zmem ctl --export NAME
  disksize SIZE`. `zmem ctl hot_add NAME [SIZE] [ro]` and `hot_remove NAME`
  add and remove exports while serving (new ones use the first configuration
  and the policy flags); `reset` returns an export to uninitialised, and it
  stays read-only if it was.

PAGE SIZES AND UNITS
  --unit 32K compresses 32 KiB blocks (zstd gains most from large blocks)
  into zspages of 4 KiB pages, so the pool stays as dense as at 4 KiB and
  mem_used_total is what is resident. --page-size models a system whose
  pages are larger (16K, 64K); on this machine's 4 KiB pages, --unit is the
  one to use. In `zmem bench serve`, zstd with --unit 32K used 0.99-1.00x
  the resident memory of nbdkit's zstd allocator (BENCHMARKS.md).

EXAMPLES
  zmem serve --size 4G --comp zstd --unit 32K
  qemu-img convert -n -f raw -O raw disk.img \\
      \"nbd+unix:///zram0?socket=$(zmem ctl socket)\"
  zmem ctl mm_stat
  zmem serve --export a:1G --export b:2G --comp lz4,zstd --tcp 127.0.0.1:10809
  zmem serve --export a:1G --export spare:0   # spare starts uninitialised
  zmem ctl hot_add c; zmem ctl --export c comp_algorithm zstd
  zmem ctl --export c disksize 2G; zmem ctl hot_remove c
  zmem serve --ublk --export swap:4G --comp lz4 --mem-limit 2G --swap
  mkswap /dev/ublkb0 && swapon /dev/ublkb0

UBLK
  --ublk (root, the kernel's ublk_drv: Linux 6.0+, CONFIG_BLK_DEV_UBLK)
  serves each initialised export as a block device, /dev/ublkbN, instead of
  over NBD: 4 KiB logical blocks, discard and write-zeroes free pages as
  zram's do, read-only exports are read-only devices, --ublk-queues queues
  (one thread each) of --queue-depth requests. `zmem ctl exports` names each
  device; `disksize`, `hot_add NAME SIZE` make one, `reset` and
  `hot_remove` remove it (EBUSY while it is mounted or swapped on). SIGTERM
  and SIGINT remove every device. A server killed with SIGKILL leaves
  /dev/ublkcN behind (the kernel removes /dev/ublkbN): the next `zmem serve
  --ublk` deletes every ublk device whose server is gone.

SOCKETS
  NBD: --socket PATH (default $XDG_RUNTIME_DIR/zmem/nbd.sock, or
  /tmp/zmem-UID/nbd.sock where XDG_RUNTIME_DIR is unset; `zmem ctl socket`
  prints it; the directory goes when the server stops, if empty), or --tcp [ADDR] (default 127.0.0.1:10809). A
  non-loopback --tcp address needs --allow-remote, and then --tls require
  (or --insecure for plaintext).
  Control: --ctl-socket PATH (default: the NBD socket's path plus .ctl; with
  --tcp, DIR/tcp-PORT.ctl in the default directory). `zmem ctl` reads and
  writes the zram attributes through it.

TLS
  zmem serve --tls require --tls-certificates /etc/pki/zmem --tcp
  nbdinfo 'nbds://localhost/zram0?tls-certificates=/etc/pki/zmem-client'
  The directory holds server-cert.pem, server-key.pem and, for
  --tls-verify-peer, ca-cert.pem (nbdkit's and qemu-nbd's layout).

The server runs in the foreground and stops cleanly on SIGINT or SIGTERM."
)]
pub struct ServeArgs {
    /// A TOML file of these flags (`comp = "zstd"`, `export = ["a:4G"]`,
    /// `allow-remote = true`); flags given here override it, repeatable
    /// ones add to it.
    #[arg(long, value_name = "FILE")]
    pub(super) config: Option<PathBuf>,
    /// An export NAME, or NAME:SIZE, or NAME:0 for an uninitialised one,
    /// and `:ro` after either for a read-only export (repeatable; default
    /// one per store configuration, zram0, zram1, ...).
    #[arg(long = "export", value_name = "NAME[:SIZE][:ro]", value_parser = check_export)]
    pub(super) exports: Vec<String>,
    /// Serve every export read-only: NBD clients see NBD_FLAG_READ_ONLY
    /// and their writes, trims and zeroes fail with EPERM (`zmem ctl`
    /// still resets and compacts).
    #[arg(long)]
    pub(super) read_only: bool,
    /// Size of each export that does not give its own (K, M, G, T, P, E
    /// suffixes; rounded up to whole 4 KiB pages as zram's disksize is, then
    /// 4K to 1T).
    #[arg(long, value_parser = recipe::flags::disk_size(EXPORT_MIN, EXPORT_MAX), default_value = "1G")]
    pub(super) size: u64,
    #[command(flatten)]
    pub(super) store: StoreArgs,
    /// A file or block device pages are written back to (zram's
    /// `backing_dev`; then `zmem ctl writeback idle`): one per export, in
    /// export order (repeatable).
    #[arg(long = "backing-dev", value_name = "PATH")]
    pub(super) backing_devs: Vec<PathBuf>,
    /// Pages written back with one write call (zram's
    /// `writeback_batch_size`, 1 to 256; 32 by default), for every export.
    #[arg(long, value_name = "PAGES", value_parser = recipe::flags::whole::<u64>(1, 256))]
    pub(super) writeback_batch_size: Option<u64>,
    /// Write pages back compressed, several objects packed into each
    /// block, instead of decompressed (zram's `writeback_compressed`,
    /// Linux 7.0), for every export.
    #[arg(long)]
    pub(super) writeback_compressed: bool,
    /// A secondary compressor for `zmem ctl recompress` (zram's
    /// `recomp_algorithm`), `"algo=NAME priority=N"` with N from 1 to 3, for
    /// every export (repeatable, up to three).
    #[arg(long = "recomp-algorithm", value_name = "\"algo=NAME priority=N\"",
          value_parser = parse_recomp)]
    pub(super) recomp_algorithms: Vec<RecompAlgorithm>,
    /// Every --policy-interval, mark pages idle that were not accessed for
    /// this many seconds (as `zmem ctl idle SECONDS`; 1 to 2592000); then
    /// --auto-recompress and --auto-writeback act on them.
    #[arg(long, value_name = "SECONDS", value_parser = recipe::flags::whole::<u32>(1, 30 * 86400))]
    pub(super) idle_after: Option<u32>,
    /// Seconds between runs of the idle marking, --auto-recompress and
    /// --auto-writeback (default 60, range 1..86400).
    #[arg(long, value_name = "SECONDS", value_parser = recipe::flags::whole::<u32>(1, 86400))]
    pub(super) policy_interval: Option<u32>,
    /// After each marking, recompress idle pages with the secondary
    /// compressors (`recompress type=idle`; needs --recomp-algorithm).
    #[arg(long)]
    pub(super) auto_recompress: bool,
    /// After each marking (and recompression), write pages back (`writeback
    /// TYPE`: idle, huge, huge_idle or incompressible; needs --backing-dev).
    #[arg(long, value_name = "TYPE", value_parser = parse_writeback_type)]
    pub(super) auto_writeback: Option<WritebackMode>,
    /// The memory-aware rule: when mem_used_total passes PERCENT of its
    /// ceiling (50 to 99), write back idle pages, then the least recently
    /// accessed, until it is 10 points lower; a write that would pass the
    /// ceiling does so first instead of failing (needs --backing-dev). The
    /// ceiling is mem_limit minus the store's own metadata (the slot table,
    /// 16 bytes a page of the disk, and the backing file's block bitmap)
    /// and the writeback's buffers (4 x --writeback-batch-size pages),
    /// never below half of mem_limit, so that the store as a whole stays
    /// within mem_limit; a write still fails only past mem_limit itself,
    /// as in the kernel.
    #[arg(long, value_name = "PERCENT", value_parser = recipe::flags::whole::<u32>(50, 99))]
    pub(super) writeback_near_limit: Option<u32>,
    /// Swap mode, for a server its own kernel swaps onto (nbd-client
    /// -swap): the pages the stores hold come from a locked reserve of at
    /// most the exports' mem_limit plus 4 MiB each (so every export needs
    /// --mem-limit), whose resident part (--swap-reserve) is populated and
    /// locked before the server is ready and refilled from free memory
    /// only; the process is locked in memory (mlockall), its I/O threads
    /// are I/O flushers (PR_SET_IO_FLUSHER), oom_score_adj is -1000,
    /// vm.min_free_kbytes is raised to 32768 if lower (put back at exit),
    /// and the in-flight bounds default to 2M per connection and 4M in all,
    /// with a heap grown ahead for them. A write the ready pieces cannot
    /// hold fails at once with ENOSPC, as the kernel's zram fails one past
    /// mem_limit; exports added with hot_add share the reserve. Needs root
    /// (CAP_IPC_LOCK, CAP_SYS_RESOURCE, vm.min_free_kbytes).
    #[arg(long)]
    pub(super) swap: bool,
    /// With --swap: bytes of the reserve kept resident, locked before the
    /// server is ready: what the device absorbs with no fresh memory
    /// (default: the larger of an eighth of the exports' mem_limit and two
    /// front ends' worth of requests in flight, all incompressible, plus 4
    /// MiB per export; at most the reserve, 1M to 1T).
    #[arg(long, value_name = "SIZE", requires = "swap",
          value_parser = recipe::flags::size(1 << 20, 1 << 40))]
    pub(super) swap_reserve: Option<u64>,
    /// With --swap: seconds the reserve may stay used up, swap writes
    /// failing and too little free memory to refill it, before the server
    /// asks the kernel's OOM killer to run (sysrq f; this server is never
    /// its victim): the kernel retries a failed swap write rather than
    /// count the device full, and would otherwise swap in a loop (default
    /// 10; 0: never; up to 3600).
    #[arg(long, value_name = "SECONDS", requires = "swap",
          value_parser = recipe::flags::whole::<u32>(0, 3600))]
    pub(super) swap_oom_after: Option<u32>,
    /// Serve each export as a ublk block device, /dev/ublkbN, instead of
    /// over NBD (root; the kernel's ublk_drv).
    #[arg(long, conflicts_with_all = ["socket", "tcp", "tls_certificates", "allow_remote"])]
    pub(super) ublk: bool,
    /// With --ublk: queues per device, each served by a thread of its own
    /// (default: one per CPU, 1 to 64).
    #[arg(long, value_name = "N", requires = "ublk",
          value_parser = recipe::flags::whole::<u16>(1, 64))]
    pub(super) ublk_queues: Option<u16>,
    /// With --ublk: requests in flight per queue (default 128, or 32 with
    /// --swap; 1 to 4096). Each has a buffer of the largest request: 512K,
    /// or 128K with --swap, where all are locked from the start.
    #[arg(long, value_name = "N", requires = "ublk",
          value_parser = recipe::flags::whole::<u16>(1, 4096))]
    pub(super) queue_depth: Option<u16>,
    /// Unix socket for NBD clients.
    #[arg(long, value_name = "PATH", conflicts_with = "tcp")]
    pub(super) socket: Option<PathBuf>,
    /// Listen on TCP instead of a Unix socket.
    #[arg(long, value_name = "ADDR", num_args = 0..=1,
          default_missing_value = "127.0.0.1:10809")]
    pub(super) tcp: Option<SocketAddr>,
    /// Serve remote clients: allow --tcp and --metrics on non-loopback
    /// addresses. NBD on such an address also needs --tls require (or
    /// --insecure); /metrics has no TLS.
    #[arg(long)]
    pub(super) allow_remote: bool,
    /// With --allow-remote: serve remote NBD clients without requiring TLS
    /// (no encryption, no authentication).
    #[arg(long, requires = "allow_remote")]
    pub(super) insecure: bool,
    /// TLS for NBD clients (NBD_OPT_STARTTLS), as nbdkit's --tls: off; on
    /// (offered, plaintext clients still served); require (a plaintext
    /// client can only start TLS or leave). on and require need
    /// --tls-certificates.
    #[arg(long, value_enum, value_name = "MODE", default_value = "off")]
    pub(super) tls: TlsArg,
    /// Directory holding server-cert.pem and server-key.pem (and
    /// ca-cert.pem for --tls-verify-peer), laid out as nbdkit and qemu-nbd
    /// read it. No TLS-PSK: rustls has no pre-shared keys.
    #[arg(long, value_name = "DIR")]
    pub(super) tls_certificates: Option<PathBuf>,
    /// Require a client certificate signed by the directory's ca-cert.pem.
    #[arg(long)]
    pub(super) tls_verify_peer: bool,
    /// Unix socket for `zmem ctl`.
    #[arg(long, value_name = "PATH")]
    pub(super) ctl_socket: Option<PathBuf>,
    /// Write the server's PID here once it is ready (removed at exit).
    #[arg(long, value_name = "PATH")]
    pub(super) pid_file: Option<PathBuf>,
    /// Serve Prometheus metrics on http://ADDR/metrics (loopback).
    #[arg(long, value_name = "ADDR")]
    pub(super) metrics: Option<SocketAddr>,
    /// Request worker threads per connection (default: one per CPU, at
    /// most 4).
    #[arg(long, value_parser = recipe::flags::whole::<u16>(1, 64))]
    pub(super) workers: Option<u16>,
    /// Seconds a client may take to finish the NBD handshake before it is
    /// closed (as qemu-nbd's --handshake-limit; default 10).
    #[arg(long, value_name = "SECONDS", value_parser = recipe::flags::whole::<u32>(1, 3600))]
    pub(super) handshake_limit: Option<u32>,
    /// Clients past the handshake served at once (default 64); a client
    /// beyond it is closed with a log line saying why.
    #[arg(long, value_name = "N", value_parser = recipe::flags::whole::<u32>(1, 4096))]
    pub(super) max_connections: Option<u32>,
    /// Clients in the handshake at once (default 64), counted apart so that
    /// stalled handshakes never lock out clients that finished theirs; when
    /// full, the client that has negotiated longest is closed.
    #[arg(long, value_name = "N", value_parser = recipe::flags::whole::<u32>(1, 4096))]
    pub(super) max_handshakes: Option<u32>,
    /// Bytes of request and reply data one connection may have in flight
    /// (default 32M, range 1M..1G); a client that does not read its replies
    /// stops being read at this bound. Below 32M it also lowers the largest
    /// request advertised.
    #[arg(long, value_name = "SIZE", value_parser = recipe::flags::size(1 << 20, 1 << 30))]
    pub(super) inflight_per_conn: Option<u64>,
    /// Bytes of request and reply data all connections together may have in
    /// flight (default 256M, range 2M..64G, at least --inflight-per-conn
    /// plus 1M); requests beyond it wait their turn, first come first
    /// served.
    #[arg(long, value_name = "SIZE", value_parser = recipe::flags::size(2 << 20, 64 << 30))]
    pub(super) inflight_total: Option<u64>,
    /// Seconds a client may read none of its replies while other clients
    /// wait for --inflight-total before it is closed (default 10, range
    /// 1..3600).
    #[arg(long, value_name = "SECONDS", value_parser = recipe::flags::whole::<u32>(1, 3600))]
    pub(super) stall_limit: Option<u32>,
    /// Log level: off, error, warn, info, debug, trace (default: $ZMEM_LOG
    /// or info).
    #[arg(long, value_name = "LEVEL", value_parser = parse_level)]
    pub(super) log_level: Option<LevelFilter>,
}

/// `--tls`: whether TLS is offered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum TlsArg {
    /// No TLS.
    Off,
    /// TLS offered; plaintext clients are served too.
    On,
    /// TLS required before any export is served.
    Require,
}

/// A log level by name.
pub(super) fn parse_level(s: &str) -> Result<LevelFilter, String> {
    s.parse()
        .map_err(|_| format!("'{s}' is not a log level (off, error, warn, info, debug, trace)"))
}

/// The smallest export: one page of the smallest page size.
pub(super) const EXPORT_MIN: u64 = 4096;
/// The largest export (its slot table alone takes 4 GiB at 4 KiB pages).
pub(super) const EXPORT_MAX: u64 = 1 << 40;

/// One `--export`: name, size (0: uninitialised), read-only.
pub(super) type ExportSpec = (String, u64, bool);

/// Splits `NAME[:SIZE][:ro]`: a colon starts the size or `ro`, so a name
/// has none, and a size must be from 4K to 1T, or 0 for an uninitialised
/// export.
pub(super) fn parse_export(s: &str, default_size: u64) -> Result<ExportSpec, CliError> {
    let (rest, read_only) = match s.strip_suffix(":ro") {
        Some(rest) => (rest, true),
        None => (s, false),
    };
    let Some((name, size)) = rest.split_once(':') else {
        return Ok((rest.to_string(), default_size, read_only));
    };
    if size == "0" {
        return Ok((name.to_string(), 0, read_only));
    }
    match recipe::flags::disk_size(EXPORT_MIN, EXPORT_MAX)(size) {
        Ok(bytes) => Ok((name.to_string(), bytes, read_only)),
        Err(e) => Err(CliError::Usage(format!(
            "--export {s}: {e} (NAME[:SIZE][:ro], SIZE 0 for uninitialised; a name has no colon)"
        ))),
    }
}

/// The `--export` value parser: checks `NAME[:SIZE]` when the arguments
/// are parsed, keeping the text for [`parse_export`].
pub(super) fn check_export(s: &str) -> Result<String, String> {
    match parse_export(s, EXPORT_MIN) {
        Ok(_) => Ok(s.to_string()),
        Err(CliError::Usage(e) | CliError::Failed(e)) => Err(e
            .strip_prefix(&format!("--export {s}: "))
            .unwrap_or(&e)
            .to_string()),
    }
}

/// The `--recomp-algorithm` value parser: zram's own.
pub(super) fn parse_recomp(s: &str) -> Result<RecompAlgorithm, String> {
    RecompAlgorithm::parse(s).map_err(|e| e.to_string())
}

/// The `--auto-writeback` value parser: zram's own (a type `writeback`
/// takes).
pub(super) fn parse_writeback_type(s: &str) -> Result<WritebackMode, String> {
    WritebackMode::parse(s).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn export_flags() {
        assert_eq!(parse_export("a", 7).unwrap(), ("a".into(), 7, false));
        assert_eq!(
            parse_export("a:1M", 7).unwrap(),
            ("a".into(), 1 << 20, false)
        );
        assert_eq!(parse_export("a:ro", 7).unwrap(), ("a".into(), 7, true));
        assert_eq!(
            parse_export("a:1M:ro", 7).unwrap(),
            ("a".into(), 1 << 20, true)
        );
        assert!(parse_export("a:ro:1M", 7).is_err());
        assert!(parse_export("a:b", 7).is_err());
        assert!(parse_export("a:xx", 7).is_err());
        assert!(parse_export("a:1:2", 7).is_err());
        assert_eq!(parse_export(":4K", 7).unwrap(), ("".into(), 4096, false));
        assert_eq!(parse_export("a:0", 7).unwrap(), ("a".into(), 0, false));
        assert_eq!(parse_export("a:0:ro", 7).unwrap(), ("a".into(), 0, true));
        // Rounded up to a page, as zram's disksize.
        assert_eq!(
            parse_export("a:1000", 7).unwrap(),
            ("a".into(), 4096, false)
        );
    }
}
