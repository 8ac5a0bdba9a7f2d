//! `zmem completions` and `zmem man`: generated from the command tree, so
//! every subcommand and flag is in them.

mod common;

use std::process::Command;

use common::{stdout_of, zmem};

#[test]
fn completions_name_every_subcommand_and_parse_in_their_shell() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let script = stdout_of(&["completions", shell]);
        for word in [
            "replay",
            "serve",
            "ctl",
            "classes",
            "page-size",
            "output-all",
        ] {
            assert!(script.contains(word), "{shell}: no {word}");
        }
    }
    // bash itself checks the bash script's syntax.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("zmem.bash");
    std::fs::write(&path, stdout_of(&["completions", "bash"])).unwrap();
    let o = Command::new("bash").arg("-n").arg(&path).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // An unknown shell is a usage error.
    let o = zmem(&["completions", "tcsh"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn man_writes_one_page_per_command() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("man1");
    let listed = stdout_of(&["man", out.to_str().unwrap()]);
    let pages: Vec<&str> = listed.lines().collect();
    for name in [
        "zmem",
        "zmem-replay",
        "zmem-serve",
        "zmem-ctl",
        "zmem-classes",
    ] {
        let path = out.join(format!("{name}.1"));
        assert!(pages.contains(&path.to_str().unwrap()), "{name}: {listed}");
        let page = std::fs::read_to_string(&path).unwrap();
        assert!(page.starts_with(".ie"), "{name}: not roff");
        assert!(page.contains(&format!(".TH {name} 1")), "{name}");
    }
    let serve = std::fs::read_to_string(out.join("zmem-serve.1")).unwrap();
    assert!(
        serve.contains("max\\-connections"),
        "serve's flags are listed"
    );
    // Every listed file exists and is not empty.
    for p in &pages {
        assert!(std::fs::metadata(p).unwrap().len() > 100, "{p}");
    }
    // A directory that cannot be made is an error, not a success.
    let o = zmem(&["man", "/proc/self/no-such-dir"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(String::from_utf8_lossy(&o.stderr).lines().count(), 1);
}
