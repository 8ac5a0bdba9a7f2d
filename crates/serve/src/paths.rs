//! Where `zmem serve` puts its sockets by default, and where `zmem ctl`
//! looks for them.
//!
//! This module owns the path rules both sides share: the default directory
//! (`$XDG_RUNTIME_DIR/zmem`, else `/tmp/zmem-UID`), the default NBD socket in
//! it, the control socket beside an NBD socket (its path plus `.ctl`), the
//! control socket of a TCP server (`tcp-PORT.ctl` in the default directory),
//! and the check that the default directory is private to the user. It opens
//! no socket.

use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The directory for default sockets: `$XDG_RUNTIME_DIR/zmem`, or
/// `/tmp/zmem-UID`.
pub fn default_dir() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d).join("zmem"),
        _ => PathBuf::from(format!("/tmp/zmem-{}", uid())),
    }
}

/// The default NBD socket.
pub fn default_socket() -> PathBuf {
    default_dir().join("nbd.sock")
}

/// The control socket that goes with the NBD socket `nbd`.
pub fn ctl_path_for(nbd: &Path) -> PathBuf {
    let mut s = nbd.as_os_str().to_owned();
    s.push(".ctl");
    PathBuf::from(s)
}

/// The default control socket of a server listening on TCP `port`.
pub fn tcp_ctl_path(port: u16) -> PathBuf {
    default_dir().join(format!("tcp-{port}.ctl"))
}

/// Creates `dir` (mode 0700) if needed, and refuses one that belongs to
/// another user (someone could have put sockets there). The error's
/// message is a sentence naming the directory.
pub fn ensure_private_dir(dir: &Path) -> io::Result<()> {
    let fail = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", dir.display()));
    if !dir.exists() {
        std::fs::create_dir_all(dir).map_err(fail)?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(fail)?;
    }
    let meta = std::fs::metadata(dir).map_err(fail)?;
    if meta.uid() != uid() {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} belongs to uid {}, not to us; give --socket explicitly",
                dir.display(),
                meta.uid()
            ),
        ));
    }
    Ok(())
}

/// The process's real user ID.
fn uid() -> u32 {
    rustix::process::getuid().as_raw()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ctl_socket_is_beside_the_nbd_socket() {
        assert_eq!(
            ctl_path_for(Path::new("/run/x/nbd.sock")),
            PathBuf::from("/run/x/nbd.sock.ctl")
        );
        assert_eq!(tcp_ctl_path(10809), default_dir().join("tcp-10809.ctl"));
        assert_eq!(default_socket(), default_dir().join("nbd.sock"));
    }

    #[test]
    fn private_dir_is_made_0700_and_ours() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("a/zmem");
        ensure_private_dir(&dir).unwrap();
        let meta = std::fs::metadata(&dir).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o700);
        assert_eq!(meta.uid(), uid());
        // A second call finds it and accepts it.
        ensure_private_dir(&dir).unwrap();
    }
}
