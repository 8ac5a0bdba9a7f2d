//! Serves a sparse in-memory disk until Enter is pressed.
//!
//! `cargo run --release -p zmem-nbd --example memserve -- /tmp/nbd.sock 1G`
//! then, for example, `nbdinfo 'nbd+unix:///?socket=/tmp/nbd.sock'`.
//! Set `NBD_LOG=debug` (or `trace`) for a log on stderr.

use std::sync::Arc;

use nbd::{Export, Exports, MemDevice, Server};

struct StderrLog(log::LevelFilter);

impl log::Log for StderrLog {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= self.0
    }
    fn log(&self, r: &log::Record<'_>) {
        if self.enabled(r.metadata()) {
            eprintln!("[{}] {}", r.level(), r.args());
        }
    }
    fn flush(&self) {}
}

fn parse_size(s: &str) -> Option<u64> {
    let (num, mult) = match s.chars().last()? {
        'K' | 'k' => (&s[..s.len() - 1], 1 << 10),
        'M' | 'm' => (&s[..s.len() - 1], 1 << 20),
        'G' | 'g' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<u64>().ok().map(|n| n * mult)
}

fn main() {
    let level = std::env::var("NBD_LOG")
        .ok()
        .and_then(|l| l.parse().ok())
        .unwrap_or(log::LevelFilter::Info);
    let _ = log::set_logger(Box::leak(Box::new(StderrLog(level))));
    log::set_max_level(level);

    let mut args = std::env::args().skip(1);
    let path = args.next().unwrap_or_else(|| "/tmp/nbd.sock".into());
    let size = args.next().and_then(|s| parse_size(&s)).unwrap_or(1 << 30);
    let export = Export::new("", Arc::new(MemDevice::new(size))).with_description("zmem memserve");
    let exports = Exports::single(export).expect("valid export");
    let server = match Server::bind_unix(&path, exports) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("cannot listen on {path}: {e}");
            std::process::exit(1);
        }
    };
    eprintln!("serving {size} bytes on nbd+unix:///?socket={path}; press Enter to stop");
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    server.shutdown();
}
