//! The reliability suite's workloads against a real `fsd` process tree: crash safety under
//! SIGKILL (`crash`), no lost updates between racing sessions (`races`), and a mixed-load soak
//! that watches memory and descriptors (`soak`). The CI short forms in
//! `tests/tests/reliability_*.rs` and the long-run binaries (`fsd-crash`, `fsd-races`,
//! `fsd-soak`, each with `--duration`) call the same functions; docs/reliability.md says how.
#![forbid(unsafe_code)]

/// `println!` for output nobody may read any more: a closed stdout (`| head`) ends the process
/// quietly, exit 0, instead of panicking.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if writeln!(std::io::stdout(), $($arg)*).is_err() {
            std::process::exit(0);
        }
    }};
}

/// `eprintln!` that never panics: a closed stderr loses the line.
macro_rules! note {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

pub mod cli;
pub mod crash;
pub mod daemon;
pub mod races;
pub mod session;
pub mod soak;
pub mod tree;
pub mod util;

pub use util::{Error, Result, Rng};
