//! The one kit that starts daemons for the end-to-end tests, the bench and the soak: it finds the
//! binaries, builds the command (listeners, roots, config, extra arguments, environment, a
//! wrapper, where stderr goes, a parent pipe), waits until the daemon's own listeners answer,
//! lists its process tree and their roles, samples their memory, and stops them (SIGTERM with a
//! wait for the whole tree, SIGKILL of the tree, or on drop). No test, bench or soak starts `fsd`
//! any other way (`tests/tests/tidy.rs` checks it).
#![forbid(unsafe_code)]

pub mod bins;
pub mod daemon;
pub mod error;
pub mod procs;

pub use bins::Bins;
pub use daemon::{Daemon, Launch, Listener, Stderr};
pub use error::{Error, Result};
pub use procs::{Sample, kill, role, tree};

/// `println!` for output nobody may read any more: a closed stdout (`| head`) ends the process
/// quietly, exit 0, instead of panicking.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if writeln!(std::io::stdout(), $($arg)*).is_err() {
            std::process::exit(0);
        }
    }};
}

/// `eprintln!` that never panics: a closed stderr loses the line.
#[macro_export]
macro_rules! note {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}
