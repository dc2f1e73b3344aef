//! The reliability suite's workloads against a real `fsd` process tree: crash safety under
//! SIGKILL (`crash`), no lost updates between racing sessions (`races`), and a mixed-load soak
//! that watches memory and descriptors (`soak`), transactions all-or-nothing under SIGKILL
//! (`txn_crash`). The CI short forms in
//! `tests/tests/reliability_*.rs` and the long-run binaries (`fsd-crash`, `fsd-races`,
//! `fsd-soak`, each with `--duration`) call the same functions; docs/reliability.md says how.
#![forbid(unsafe_code)]

// `say!` and `note!` (output that never panics) come from the kit, shared with the bench.
#[macro_use]
extern crate fsd_testkit;

pub mod cli;
pub mod crash;
pub mod daemon;
pub mod races;
pub mod session;
pub mod soak;
pub mod tree;
pub mod txn_crash;
pub mod util;

pub use util::{Error, Result, Rng};
