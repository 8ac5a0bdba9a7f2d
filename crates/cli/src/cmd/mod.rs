//! The subcommands of `zmem`, one module each (and `status`, the zramctl
//! view `ctl status` prints, and `docs`, which writes completions and man
//! pages): the product commands
//! (`replay`, `advise`, `classes`, `serve`, `ctl`, `run`) and, with the `lab` feature, the
//! command trees of `exp` and `bench`, which dispatch to the lab crate.

pub mod advise;
#[cfg(feature = "lab")]
pub mod bench;
pub mod classes;
pub mod ctl;
pub mod docs;
#[cfg(feature = "lab")]
pub mod exp;
pub mod replay;
pub mod run;
pub mod serve;
pub mod status;
