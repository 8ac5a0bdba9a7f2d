//! `zmem serve --config FILE`: a TOML file of the server's flags.
//!
//! This module owns the file's format and nothing else: each key is the long
//! name of a `zmem serve` flag (`comp = "zstd"`, `max-connections = 128`,
//! `export = ["zram0:4G", "zram1:1G"]`, `allow-remote = true`; `_` may stand
//! for `-`), and the file is turned into those flags, placed before the ones
//! on the command line. So every value goes through the same parser and the
//! same range checks as the flag, and a flag on the command line overrides
//! the file's (repeatable ones, like `export`, add to it). It reads the file
//! and rewrites the argument list; it runs nothing.

use std::ffi::OsString;

use clap::{ArgAction, Command};

/// Expands `--config FILE` (or `--config=FILE`) of a `serve` command line
/// into the file's flags. Other command lines come back unchanged.
pub fn expand(args: Vec<OsString>, cli: &Command) -> Result<Vec<OsString>, String> {
    if args.get(1).and_then(|a| a.to_str()) != Some("serve") {
        return Ok(args);
    }
    let mut path = None;
    for (i, a) in args.iter().enumerate().skip(2) {
        let Some(s) = a.to_str() else { continue };
        if s == "--" {
            break;
        }
        if s == "--config" {
            path = Some(
                args.get(i + 1)
                    .ok_or("--config needs a FILE")?
                    .to_string_lossy()
                    .into_owned(),
            );
        } else if let Some(p) = s.strip_prefix("--config=") {
            path = Some(p.to_string());
        }
    }
    let Some(path) = path else {
        return Ok(args);
    };
    let serve = cli
        .find_subcommand("serve")
        .ok_or("internal: no serve subcommand")?;
    let text = std::fs::read_to_string(&path).map_err(|e| format!("config {path}: {e}"))?;
    let flags = flags_of(&text, serve).map_err(|e| format!("config {path}: {e}"))?;
    let mut out = args[..2].to_vec();
    out.extend(flags.into_iter().map(OsString::from));
    out.extend(args[2..].iter().cloned());
    Ok(out)
}

/// The flags the TOML `text` stands for, checked against `serve`'s
/// arguments.
fn flags_of(text: &str, serve: &Command) -> Result<Vec<String>, String> {
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| e.message().to_string())?;
    let mut flags = Vec::new();
    for (key, value) in &table {
        let name = key.replace('_', "-");
        let arg = serve
            .get_arguments()
            .find(|a| a.get_long() == Some(name.as_str()) && name != "config")
            .ok_or_else(|| format!("unknown key {key:?} (keys are `zmem serve` flags)"))?;
        let takes_value = !matches!(arg.get_action(), ArgAction::SetTrue | ArgAction::SetFalse);
        let one = |v: &toml::Value| -> Result<Option<String>, String> {
            match v {
                toml::Value::Boolean(b) if !takes_value => Ok(b.then(|| format!("--{name}"))),
                toml::Value::String(s) if takes_value => Ok(Some(format!("--{name}={s}"))),
                toml::Value::Integer(n) if takes_value => Ok(Some(format!("--{name}={n}"))),
                toml::Value::Float(f) if takes_value => Ok(Some(format!("--{name}={f}"))),
                _ if takes_value => Err(format!("{key}: expected a string or a number")),
                _ => Err(format!("{key}: expected true or false")),
            }
        };
        match value {
            toml::Value::Array(items) => {
                for item in items {
                    flags.extend(one(item)?);
                }
            }
            v => flags.extend(one(v)?),
        }
    }
    Ok(flags)
}

#[cfg(test)]
mod tests {
    use clap::{Arg, ArgAction, Command};

    use super::*;

    fn cli() -> Command {
        Command::new("zmem").subcommand(
            Command::new("serve")
                .arg(Arg::new("export").long("export").action(ArgAction::Append))
                .arg(Arg::new("size").long("size"))
                .arg(Arg::new("max-connections").long("max-connections"))
                .arg(
                    Arg::new("allow-remote")
                        .long("allow-remote")
                        .action(ArgAction::SetTrue),
                )
                .arg(Arg::new("config").long("config")),
        )
    }

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn keys_become_flags_before_the_command_lines() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("z.toml");
        std::fs::write(
            &f,
            "size = \"4G\"\nmax_connections = 128\nexport = [\"a:1G\", \"b\"]\nallow-remote = true\n",
        )
        .unwrap();
        let path = f.to_str().unwrap();
        let got = expand(
            os(&["zmem", "serve", "--config", path, "--size", "2G"]),
            &cli(),
        )
        .unwrap();
        let got: Vec<String> = got
            .iter()
            .map(|s| s.to_string_lossy().into_owned())
            .collect();
        assert_eq!(&got[..2], ["zmem", "serve"]);
        assert!(got.contains(&"--size=4G".to_string()));
        assert!(got.contains(&"--max-connections=128".to_string()));
        assert!(got.contains(&"--export=a:1G".to_string()));
        assert!(got.contains(&"--export=b".to_string()));
        assert!(got.contains(&"--allow-remote".to_string()));
        // The command line's own flags come last, so they win.
        assert_eq!(&got[got.len() - 2..], ["--size", "2G"]);
    }

    #[test]
    fn bad_files_are_refused_with_the_key_named() {
        let serve = cli();
        let serve = serve.find_subcommand("serve").unwrap();
        let e = flags_of("sise = \"4G\"", serve).unwrap_err();
        assert!(e.contains("\"sise\""), "{e}");
        let e = flags_of("allow-remote = \"yes\"", serve).unwrap_err();
        assert!(e.contains("true or false"), "{e}");
        let e = flags_of("size = { a = 1 }", serve).unwrap_err();
        assert!(e.contains("size"), "{e}");
        assert!(flags_of("size = ", serve).is_err());
        assert!(flags_of("config = \"x\"", serve).is_err());
        // Other commands are left alone, and a missing file is named.
        let plain = os(&["zmem", "replay", "--config", "x"]);
        assert_eq!(expand(plain.clone(), &cli()).unwrap(), plain);
        let e = expand(
            os(&["zmem", "serve", "--config", "/nonexistent.toml"]),
            &cli(),
        )
        .unwrap_err();
        assert!(e.contains("/nonexistent.toml"), "{e}");
    }
}
