//! TLS (NBD_OPT_STARTTLS) with the real clients: certificates made by
//! `openssl` in the test (qemu wants keyEncipherment in the key usage), qemu-img with a `tls-creds-x509` object and
//! nbdcopy/nbdinfo with `nbds+unix://` and `tls-certificates` copy data in
//! and out byte for byte; a plaintext client under `require` gets
//! `NBD_REP_ERR_TLS_REQD`; `--tls-verify-peer` refuses a client whose
//! certificate another authority signed, or that has none. A test whose
//! program is missing prints SKIP and passes.

mod common;

use std::path::Path;
use std::sync::Arc;

use common::{read_all, RawClient, TestServer};
use nbd::wire::{hs, opt, rep, InfoRequest};
use nbd::{BlockDevice, Config, MemDevice, Tls, TlsMode};
use testkit::certs::{make_certs, Certs};
use testkit::clients::{run_ok, run_tool};
use testkit::{real_data, require_tools};

const MIB: usize = 1 << 20;

/// Certificates made by `openssl` in a directory of their own, which
/// lives as long as the returned `TempDir`.
fn certs() -> (tempfile::TempDir, Certs) {
    let work = tempfile::tempdir().unwrap();
    let certs = make_certs(work.path());
    (work, certs)
}

/// A server of one 8 MiB RAM disk named "disk" with TLS in `mode`.
fn tls_server(certs: &Path, mode: TlsMode, verify_peer: bool) -> (TestServer, Arc<MemDevice>) {
    let tls = Tls::from_dir(certs, mode, verify_peer).expect("certificates");
    let dev = Arc::new(MemDevice::new(8 * MIB as u64));
    let config = Config {
        tls: Some(Arc::new(tls)),
        ..Config::default()
    };
    let ts = TestServer::start(vec![("disk", dev.clone())], config);
    (ts, dev)
}

/// libnbd's URI of the server's "disk" over TLS with the client
/// certificates in `dir`.
fn nbds_uri(ts: &TestServer, dir: &Path) -> String {
    format!(
        "nbds+unix:///disk?socket={}&tls-certificates={}",
        ts.path.display(),
        dir.display()
    )
}

#[test]
fn qemu_img_in_nbdcopy_out_over_tls_identical() {
    require_tools!("openssl", "qemu-img", "nbdcopy");
    let (_work, certs) = certs();
    let (ts, dev) = tls_server(&certs.server, TlsMode::Require, false);
    let data = real_data(6 * MIB + 4321);
    let src = ts.file("src.raw");
    std::fs::write(&src, &data).unwrap();

    // qemu: the client side of a tls-creds-x509 object reads ca-cert.pem
    // from the same directory layout.
    let object = format!(
        "tls-creds-x509,id=tls0,endpoint=client,dir={}",
        certs.client.display()
    );
    let target = format!(
        "driver=nbd,server.type=unix,server.path={},export=disk,tls-creds=tls0,\
         tls-hostname=localhost",
        ts.path.display()
    );
    run_ok(
        "qemu-img",
        &[
            "convert",
            "-n",
            "--object",
            &object,
            "-f",
            "raw",
            "--target-image-opts",
            &src.to_string_lossy(),
            &target,
        ],
    );
    let on_dev = read_all(dev.as_ref());
    assert!(
        on_dev[..data.len()] == data[..],
        "the device differs from the source"
    );

    let out = ts.file("out.raw");
    run_ok(
        "nbdcopy",
        &[&nbds_uri(&ts, &certs.client), &out.to_string_lossy()],
    );
    common::assert_read_back(&out, &data, 8 * MIB);
}

#[test]
fn plaintext_client_refused_under_require_and_served_under_on() {
    require_tools!("openssl", "nbdinfo");
    let (_work, certs) = certs();
    let (ts, dev) = tls_server(&certs.server, TlsMode::Require, false);

    // A raw client: every option but STARTTLS and ABORT is refused with
    // NBD_REP_ERR_TLS_REQD, and the connection stays up.
    let mut c = RawClient::connect(&ts.path, hs::C_FIXED_NEWSTYLE | hs::C_NO_ZEROES);
    let go = InfoRequest {
        name: "disk".into(),
        requests: vec![],
    }
    .encode();
    for (option, data) in [
        (opt::GO, &go[..]),
        (opt::INFO, &go[..]),
        (opt::LIST, &[][..]),
        (opt::STRUCTURED_REPLY, &[][..]),
    ] {
        c.send_option(option, data);
        let (h, msg) = c.option_reply();
        assert_eq!(h.option, option);
        assert_eq!(
            h.reply,
            rep::ERR_TLS_REQD,
            "{}",
            String::from_utf8_lossy(&msg)
        );
    }
    // STARTTLS with data is invalid; ABORT is still answered.
    c.send_option(opt::STARTTLS, b"x");
    assert_eq!(c.option_reply().0.reply, rep::ERR_INVALID);
    c.send_option(opt::ABORT, &[]);
    assert_eq!(c.option_reply().0.reply, rep::ACK);
    // EXPORT_NAME has no error reply: the server closes.
    let mut c = RawClient::connect(&ts.path, hs::C_FIXED_NEWSTYLE | hs::C_NO_ZEROES);
    c.send_option(opt::EXPORT_NAME, b"disk");
    assert!(c.is_closed());

    // A real client without TLS is refused; with TLS it is served.
    let plain = format!("nbd+unix:///disk?socket={}", ts.path.display());
    let o = run_tool("nbdinfo", &["--size", &plain]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("TLS"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let size = run_ok("nbdinfo", &["--size", &nbds_uri(&ts, &certs.client)]);
    assert_eq!(size.trim(), (8 * MIB).to_string());
    drop(ts);

    // Under `on` both kinds of client are served, and see the same data.
    let (ts, dev_on) = tls_server(&certs.server, TlsMode::On, false);
    dev_on.write_at(0, b"both ways", false).unwrap();
    assert_eq!(dev.size(), dev_on.size());
    let plain = format!("nbd+unix:///disk?socket={}", ts.path.display());
    for uri in [plain, nbds_uri(&ts, &certs.client)] {
        let out = ts.file("head.raw");
        let _ = std::fs::remove_file(&out);
        run_ok("nbdcopy", &[&uri, &out.to_string_lossy()]);
        assert_eq!(&std::fs::read(&out).unwrap()[..9], b"both ways", "{uri}");
    }
}

#[test]
fn verify_peer_refuses_a_stranger_and_a_client_without_certificate() {
    require_tools!("openssl", "nbdinfo");
    let (_work, certs) = certs();
    let (ts, _dev) = tls_server(&certs.server, TlsMode::Require, true);
    let size = run_ok("nbdinfo", &["--size", &nbds_uri(&ts, &certs.client)]);
    assert_eq!(size.trim(), (8 * MIB).to_string());
    for refused in [&certs.stranger, &certs.anonymous] {
        let o = run_tool("nbdinfo", &["--size", &nbds_uri(&ts, refused)]);
        assert!(
            !o.status.success(),
            "{} was served: {}",
            refused.display(),
            String::from_utf8_lossy(&o.stdout)
        );
    }
}

#[test]
fn bad_certificate_directories_give_one_line_errors() {
    require_tools!("openssl");
    let (work, certs) = certs();
    let err = |dir: &Path, verify: bool| {
        let e = Tls::from_dir(dir, TlsMode::Require, verify).unwrap_err();
        assert!(!e.contains('\n'), "{e}");
        e
    };
    // No such directory: the missing file is named.
    let e = err(&work.path().join("nope"), false);
    assert!(e.contains("server-cert.pem"), "{e}");
    // A client directory has no server certificate.
    assert!(err(&certs.client, false).contains("server-cert.pem"));
    // A key that does not match the certificate.
    let mixed = work.path().join("mixed");
    std::fs::create_dir(&mixed).unwrap();
    std::fs::copy(
        certs.server.join("server-cert.pem"),
        mixed.join("server-cert.pem"),
    )
    .unwrap();
    std::fs::copy(
        certs.client.join("client-key.pem"),
        mixed.join("server-key.pem"),
    )
    .unwrap();
    assert!(err(&mixed, false).contains("server-key.pem"));
    // Garbage where the key should be.
    std::fs::write(mixed.join("server-key.pem"), "not a key\n").unwrap();
    assert!(err(&mixed, false).contains("server-key.pem"));
    // verify-peer needs the authority.
    let no_ca = work.path().join("no-ca");
    std::fs::create_dir(&no_ca).unwrap();
    for f in ["server-cert.pem", "server-key.pem"] {
        std::fs::copy(certs.server.join(f), no_ca.join(f)).unwrap();
    }
    assert!(Tls::from_dir(&no_ca, TlsMode::On, false).is_ok());
    assert!(err(&no_ca, true).contains("ca-cert.pem"));
}
