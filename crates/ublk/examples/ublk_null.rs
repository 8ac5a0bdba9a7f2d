//! Serves a null ublk device (every request succeeds at once, no data
//! kept) until SIGTERM or SIGINT, then stops and deletes it and prints
//! what it served: the ceiling of the front end (driver, rings, this
//! crate) for a benchmark such as fio. Needs ublk_drv and root.
//!
//!     ublk_null [SIZE_MIB] [QUEUES] [DEPTH] [unpinned] [copy-by-driver]
//!
//! `unpinned` leaves the queue threads where the scheduler puts them
//! instead of on their queues' CPUs, to measure what pinning gives.
//! `copy-by-driver` gives each tag a buffer the driver copies into and out
//! of, instead of `UBLK_F_USER_COPY` (where the driver offers it), to
//! measure the two ways and to run the older one on a newer kernel.

use std::sync::Arc;

use ublk::{stop_on_signals, Device, NullTarget, Options};

fn main() {
    let mut args = std::env::args().skip(1);
    let size_mib: u64 = args.next().map_or(1024, |a| a.parse().expect("SIZE_MIB"));
    let queues: u16 = args.next().map_or(1, |a| a.parse().expect("QUEUES"));
    let depth: u16 = args.next().map_or(64, |a| a.parse().expect("DEPTH"));
    let (mut pinned, mut user_copy) = (true, true);
    for a in args {
        match a.as_str() {
            "unpinned" => pinned = false,
            "copy-by-driver" => user_copy = false,
            other => panic!("{other:?}: after DEPTH, `unpinned` or `copy-by-driver`"),
        }
    }
    if let Err(e) = stop_on_signals() {
        eprintln!("ublk_null: {e}");
        std::process::exit(1);
    }
    let mut opts = Options::new(size_mib << 20);
    opts.queues = queues;
    opts.depth = depth;
    opts.pin_queues = pinned;
    opts.user_copy = user_copy;
    let result = Device::add(&opts).and_then(|dev| {
        let copy = if dev.info().flags & ublk::sys::F_USER_COPY != 0 {
            "user copy"
        } else {
            "copied by the driver"
        };
        let running = dev.start(Arc::new(NullTarget))?;
        println!(
            "ublk_null: serving {} (data {copy})",
            running.block_path().display()
        );
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
