//! `serve::Server` started and stopped in-process: the exports it makes,
//! its control socket and PID file, and the configurations it refuses
//! before anything starts.

use std::path::Path;

use clap::Parser;
use recipe::{PolicyFlags, StoreArgs, StoreSpec};
use serve::{
    ExportConfig, Front, Listen, NbdFront, ServeError, Server, ServerConfig, StoreSettings,
};

#[derive(Parser)]
struct Flags {
    #[command(flatten)]
    store: StoreArgs,
}

fn spec(args: &[&str]) -> StoreSpec {
    let flags = Flags::try_parse_from([&["zmem"], args].concat()).unwrap();
    flags.store.specs().unwrap().remove(0)
}

fn export(name: &str, size: u64, spec: &StoreSpec) -> ExportConfig {
    ExportConfig {
        name: name.into(),
        size,
        read_only: false,
        spec: spec.clone(),
        backing_dev: None,
    }
}

fn config(dir: &Path, exports: Vec<ExportConfig>) -> ServerConfig {
    ServerConfig {
        exports,
        store: StoreSettings {
            max_disksize: 1 << 30,
            recomp: vec![zram::RecompAlgorithm::parse("algo=zstd priority=1").unwrap()],
            ..StoreSettings::default()
        },
        swap: false,
        swap_reserve: None,
        swap_oom_after: None,
        front: Front::Nbd(NbdFront {
            listen: Listen::Unix(Some(dir.join("nbd.sock"))),
            config: nbd::Config::default(),
            inflight_per_conn: None,
            inflight_total: None,
        }),
        ctl_socket: None,
        metrics: None,
        allow_remote: false,
        pid_file: Some(dir.join("pid")),
    }
}

fn ctl(dir: &Path, export: Option<&str>, line: &str) -> String {
    serve::request(&dir.join("nbd.sock.ctl"), export, line)
        .unwrap()
        .unwrap()
}

#[test]
fn starts_every_export_with_one_factory_and_stops_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let lz4 = spec(&["--comp", "lz4"]);
    let server = Server::start(config(
        dir.path(),
        vec![export("a", 8 << 20, &lz4), export("spare", 0, &lz4)],
    ))
    .unwrap();
    let pid = std::fs::read_to_string(dir.path().join("pid")).unwrap();
    assert_eq!(pid.trim(), std::process::id().to_string());
    assert_eq!(server.registry().names(), ["a", "spare"]);

    // Given at start, after disksize, by hot_add and after a reset: the
    // same factory, the same secondary compressor.
    assert_eq!(ctl(dir.path(), Some("a"), "disksize"), "8388608\n");
    assert_eq!(
        ctl(dir.path(), Some("a"), "recomp_algorithm"),
        "#1: [zstd]\n"
    );
    assert_eq!(ctl(dir.path(), Some("spare"), "initstate"), "0\n");
    ctl(dir.path(), Some("spare"), "disksize 4M");
    assert_eq!(
        ctl(dir.path(), Some("spare"), "recomp_algorithm"),
        "#1: [zstd]\n"
    );
    ctl(dir.path(), None, "hot_add c 4M");
    assert_eq!(
        ctl(dir.path(), Some("c"), "recomp_algorithm"),
        "#1: [zstd]\n"
    );
    ctl(dir.path(), Some("c"), "reset");
    ctl(dir.path(), Some("c"), "disksize 1M");
    let comp = ctl(dir.path(), Some("c"), "comp_algorithm");
    assert!(comp.contains("[lz4]"), "{comp}");
    assert_eq!(
        ctl(dir.path(), Some("c"), "recomp_algorithm"),
        "#1: [zstd]\n"
    );

    server.shutdown().unwrap();
    assert!(!dir.path().join("pid").exists(), "the PID file is removed");
    assert!(serve::request(&dir.path().join("nbd.sock.ctl"), None, "exports").is_err());
}

#[test]
fn refuses_what_cannot_start_before_anything_starts() {
    let dir = tempfile::tempdir().unwrap();
    let lz4 = spec(&["--comp", "lz4"]);
    let refused = |c: ServerConfig| Server::start(c).unwrap_err();

    let mut swap = config(dir.path(), vec![export("a", 1 << 20, &lz4)]);
    swap.swap = true;
    let e = refused(swap);
    assert!(
        matches!(&e, ServeError::SwapNeedsMemLimit(n) if n == "a"),
        "{e:?}"
    );
    assert!(e.is_usage());

    let mut tight = config(dir.path(), vec![export("a", 1 << 20, &lz4)]);
    if let Front::Nbd(n) = &mut tight.front {
        n.inflight_per_conn = Some(2 << 20);
        n.inflight_total = Some(2 << 20);
    }
    let e = refused(tight);
    assert!(
        matches!(e, ServeError::InflightTotal { .. }) && e.is_usage(),
        "{e:?}"
    );

    let mut remote = config(dir.path(), vec![export("a", 1 << 20, &lz4)]);
    if let Front::Nbd(n) = &mut remote.front {
        n.listen = Listen::Tcp("192.0.2.1:10809".parse().unwrap());
    }
    let e = refused(remote);
    assert!(
        matches!(e, ServeError::NotLoopback(_)) && !e.is_usage(),
        "{e:?}"
    );

    let mut policy = config(dir.path(), vec![export("a", 1 << 20, &lz4)]);
    policy.store.policy = PolicyFlags {
        writeback_near_limit: Some(80),
        ..PolicyFlags::default()
    };
    let e = refused(policy);
    assert_eq!(
        e.to_string(),
        "--auto-writeback and --writeback-near-limit need a --backing-dev"
    );
    assert!(e.is_usage());
    assert!(!dir.path().join("pid").exists(), "nothing was announced");
}
