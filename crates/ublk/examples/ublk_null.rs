//! Serves a null ublk device (every request succeeds at once, no data
//! kept) until SIGTERM or SIGINT, then stops and deletes it and prints
//! what it served: the ceiling of the front end (driver, rings, this
//! crate) for a benchmark such as fio. Needs ublk_drv and root.
//!
//!     ublk_null [SIZE_MIB] [QUEUES] [DEPTH] [unpinned]
//!
//! `unpinned` leaves the queue threads where the scheduler puts them
//! instead of on their queues' CPUs, to measure what pinning gives.

use std::sync::Arc;

use ublk::{stop_on_signals, Device, NullTarget, Options};

fn main() {
    let mut args = std::env::args().skip(1);
    let size_mib: u64 = args.next().map_or(1024, |a| a.parse().expect("SIZE_MIB"));
    let queues: u16 = args.next().map_or(1, |a| a.parse().expect("QUEUES"));
    let depth: u16 = args.next().map_or(64, |a| a.parse().expect("DEPTH"));
    let pinned = match args.next().as_deref() {
        None => true,
        Some("unpinned") => false,
        Some(other) => panic!("{other:?}: the fourth argument is `unpinned` or nothing"),
    };
    if let Err(e) = stop_on_signals() {
        eprintln!("ublk_null: {e}");
        std::process::exit(1);
    }
    let mut opts = Options::new(size_mib << 20);
    opts.queues = queues;
    opts.depth = depth;
    opts.pin_queues = pinned;
    let result = Device::add(&opts).and_then(|dev| {
        let running = dev.start(Arc::new(NullTarget))?;
        println!("ublk_null: serving {}", running.block_path().display());
        running.wait()
    });
    match result {
        Ok(stats) => println!("ublk_null: stopped and deleted: {:?}", stats.total),
        Err(e) => {
            println!("ublk_null: {e}");
            std::process::exit(1);
        }
    }
}
