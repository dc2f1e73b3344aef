//! Every binary exits quietly when its standard output or standard error is a pipe nobody reads
//! (`fsd-tools schemas | head -1`): no panic, no backtrace, no exit 101.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::process::{Command, Stdio};

/// A pipe whose reading end is already closed.
fn closed_pipe() -> Stdio {
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    Stdio::from(writer)
}

/// Runs `bin args` with stdout (or stderr) closed; returns (exit code, the other stream).
fn run(bin: &str, args: &[&str], close_stderr: bool) -> (Option<i32>, String) {
    let path = common::bin_dir().join(bin);
    let mut cmd = Command::new(&path);
    cmd.args(args).stdin(Stdio::null());
    if close_stderr {
        cmd.stdout(Stdio::null()).stderr(closed_pipe());
    } else {
        cmd.stdout(closed_pipe()).stderr(Stdio::piped());
    }
    let out = cmd.output().unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn closed_standard_output_or_error_ends_every_binary_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    let keys = keys.to_str().unwrap();
    // (binary, arguments, the exit code it must end with)
    let stdout_cases: &[(&str, &[&str], i32)] = &[
        ("fsd-tools", &["schemas"], 0),
        ("fsd-tools", &["guidance"], 0),
        ("fsd-tools", &["completions", "bash"], 0),
        ("fsd-tools", &["man"], 0),
        ("fsd-tools", &["--help"], 0),
        ("fsd", &["--help"], 0),
        ("fsd", &["--version"], 0),
        ("fsd", &["--completions", "zsh"], 0),
        ("fsd", &["--man"], 0),
        ("fsd-approver", &["completions", "bash"], 0),
        ("fsd-approver", &["man"], 0),
        ("fsd-approver", &["keygen", "--dir", keys], 0),
        ("fsd-approver", &["--help"], 0),
        ("fsd-bench", &["--help"], 0),
        ("fsd-soak", &["--help"], 0),
        ("fsd-crash", &["--help"], 0),
        ("fsd-races", &["--help"], 0),
    ];
    for (bin, args, code) in stdout_cases {
        let (got, stderr) = run(bin, args, false);
        println!("{bin} {args:?} with stdout closed: exit {got:?}, stderr {stderr:?}");
        assert_eq!(got, Some(*code), "{bin} {args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{bin} {args:?} panicked: {stderr}");
    }
    // Errors reported on a closed stderr: the exit code still tells, nothing panics.
    let stderr_cases: &[(&str, &[&str], i32)] = &[
        ("fsd", &["--listen", "unix:/does/not/exist/s", "--writable-root", "/does/not/exist"], 2),
        ("fsd-tools", &["call", "read", "{}", "--endpoint", "unix:/does/not/exist/s"], 2),
        ("fsd-approver", &["serve", "--key", "/does/not/exist", "--listen", "unix:/does/not/exist/s"], 2),
    ];
    for (bin, args, code) in stderr_cases {
        let (got, _) = run(bin, args, true);
        println!("{bin} {args:?} with stderr closed: exit {got:?}");
        assert_eq!(got, Some(*code), "{bin} {args:?}");
    }
}
