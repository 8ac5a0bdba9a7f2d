//! X.509 certificates for TLS tests, made with the `openssl` program: a
//! certificate authority, a server certificate for `localhost` and
//! 127.0.0.1 it signed, and client certificates, laid out in directories
//! as nbdkit, qemu and libnbd read them (`ca-cert.pem`, `server-cert.pem`,
//! `server-key.pem`; `client-cert.pem`, `client-key.pem`).

use std::path::{Path, PathBuf};

use crate::clients::run_ok;

/// The certificate directories of one test.
pub struct Certs {
    /// The server's: `ca-cert.pem`, `server-cert.pem`, `server-key.pem`.
    pub server: PathBuf,
    /// A client's: `ca-cert.pem` and a client certificate the same
    /// authority signed.
    pub client: PathBuf,
    /// A client whose certificate another authority signed (it trusts the
    /// server's authority, so only the server can refuse it).
    pub stranger: PathBuf,
    /// A client with the authority only, and no certificate of its own.
    pub anonymous: PathBuf,
}

/// Makes every directory of [`Certs`] under `dir`, with P-256 keys valid
/// for two days.
pub fn make_certs(dir: &Path) -> Certs {
    let d = |name: &str| {
        let p = dir.join(name);
        std::fs::create_dir_all(&p).expect("certificate dir");
        p
    };
    let (work, server, client, stranger, anonymous) = (
        d("ca"),
        d("server"),
        d("client"),
        d("stranger"),
        d("anonymous"),
    );
    let ca = authority(&work, "ca", "zmem test CA");
    let other_ca = authority(&work, "other-ca", "zmem test other CA");
    sign(&work, &ca, "server", &server, "serverAuth", true);
    sign(&work, &ca, "client", &client, "clientAuth", false);
    sign(&work, &other_ca, "client", &stranger, "clientAuth", false);
    for to in [&server, &client, &stranger, &anonymous] {
        std::fs::copy(ca.join("ca-cert.pem"), to.join("ca-cert.pem")).expect("copy CA");
    }
    Certs {
        server,
        client,
        stranger,
        anonymous,
    }
}

fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// A self-signed authority in `work/name/` (`ca-cert.pem`, `ca-key.pem`).
fn authority(work: &Path, name: &str, cn: &str) -> PathBuf {
    let dir = work.join(name);
    std::fs::create_dir_all(&dir).expect("CA dir");
    run_ok(
        "openssl",
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "2",
            "-subj",
            &format!("/CN={cn}"),
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
            "-keyout",
            &s(&dir.join("ca-key.pem")),
            "-out",
            &s(&dir.join("ca-cert.pem")),
        ],
    );
    dir
}

/// A key and a certificate signed by the authority in `ca`, written to
/// `to/ROLE-key.pem` and `to/ROLE-cert.pem`.
fn sign(work: &Path, ca: &Path, role: &str, to: &Path, usage: &str, names: bool) {
    let csr = work.join(format!("{role}.csr"));
    let ext = work.join(format!("{role}-{usage}.ext"));
    let mut text = format!(
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage={usage}\n"
    );
    if names {
        text.push_str("subjectAltName=DNS:localhost,IP:127.0.0.1\n");
    }
    std::fs::write(&ext, text).expect("extensions file");
    let key = to.join(format!("{role}-key.pem"));
    run_ok(
        "openssl",
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-subj",
            &format!("/CN={}", if names { "localhost" } else { role }),
            "-keyout",
            &s(&key),
            "-out",
            &s(&csr),
        ],
    );
    run_ok(
        "openssl",
        &[
            "x509",
            "-req",
            "-in",
            &s(&csr),
            "-CA",
            &s(&ca.join("ca-cert.pem")),
            "-CAkey",
            &s(&ca.join("ca-key.pem")),
            "-set_serial",
            &format!("{}", std::process::id()),
            "-days",
            "2",
            "-extfile",
            &s(&ext),
            "-out",
            &s(&to.join(format!("{role}-cert.pem"))),
        ],
    );
}
