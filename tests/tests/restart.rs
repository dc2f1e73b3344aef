//! Sessions on `--endpoint` survive a daemon restart on every face: the next call says once that
//! the file service restarted and earlier reads no longer count, then the session works against
//! the new daemon with its observations dropped. The MCP face is driven by the official Python
//! SDK (`tests/mcp/restart.py`, the interpreter from `FSD_TEST_PYTHON`); the JSON-lines face by
//! `fsd-tools session`; the library face by `Session` itself.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use fsd_tool_client::config::ClientConfig;
use fsd_tool_client::connect::{self, Credentials, Endpoint};
use fsd_tool_client::tools::{Session, Tools};
use serde_json::json;

const RESTARTED: &str = "Error: The file service restarted, so earlier reads no longer count. Read files again \
                         before you edit or overwrite them, then retry this call.";

/// Stops the test daemon (SIGTERM) and starts a new one on the same socket and root.
fn restart(daemon: &mut common::Daemon) {
    assert!(daemon.restart().success());
}

#[test]
fn an_mcp_session_survives_a_daemon_restart_python_sdk() {
    let python = match std::env::var_os("FSD_TEST_PYTHON") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => panic!(
            "FSD_TEST_PYTHON is not set: this test needs the venv with the official `mcp` SDK that \
             scripts/test.sh builds (or: python3 -m venv .venv && .venv/bin/pip install mcp==2.3.0; \
             FSD_TEST_PYTHON=$PWD/.venv/bin/python)"
        ),
    };
    // The daemon is the kit's; the script asks for each restart and stop on its stdout.
    let mut daemon = common::Daemon::start();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("mcp").join("restart.py");
    let mut child = Command::new(&python)
        .arg(&script)
        .arg("--fsd-tools")
        .arg(common::tools_bin())
        .arg("--socket")
        .arg(&daemon.socket)
        .arg("--root")
        .arg(&daemon.root)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {} (FSD_TEST_PYTHON): {e}", python.display()));
    let mut answers = child.stdin.take().unwrap();
    let mut asks = Vec::new();
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        match line.as_str() {
            "restart" => restart(&mut daemon),
            "stop" => assert!(daemon.terminate().success()),
            other => panic!("restart.py asked for {other:?}"),
        }
        asks.push(line);
        writeln!(answers, "done").unwrap();
    }
    let status = child.wait().unwrap();
    assert!(status.success(), "tests/mcp/restart.py failed ({status}); its stderr says which check");
    assert_eq!(asks, ["restart", "stop"], "the script's requests");
}

#[test]
fn a_json_lines_session_survives_a_daemon_restart() {
    let mut daemon = common::Daemon::start();
    daemon.write("notes.txt", "alpha\nbeta\n");
    let mut session = daemon.session();
    assert!(!session.read("notes.txt").is_error());
    let edit = |old: &str, new: &str| json!({"file_path": "notes.txt", "old_string": old, "new_string": new});
    assert!(!session.call("edit", edit("alpha", "one")).is_error());

    restart(&mut daemon);
    let first = session.call("edit", edit("beta", "two"));
    assert_eq!((first.code(), first.text()), (Some("UNAVAILABLE"), RESTARTED), "{}", first.json);
    assert_eq!(daemon.read("notes.txt"), b"one\nbeta\n");
    let unread = session.call("edit", edit("beta", "two"));
    assert_eq!(unread.code(), Some("FS_NOT_OBSERVED"), "{}", unread.json);
    let reread = session.read("notes.txt");
    assert!(!reread.is_error() && reread.text().contains("one"), "{}", reread.json);
    assert!(!session.call("edit", edit("beta", "two")).is_error());
    assert_eq!(daemon.read("notes.txt"), b"one\ntwo\n");
}

#[test]
fn a_library_session_survives_a_daemon_restart() {
    let mut daemon = common::Daemon::start();
    daemon.write("notes.txt", "alpha\n");
    // A runtime that runs between calls, as a library user's does: the connection sees the
    // daemon go away while the session waits.
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let endpoint = Endpoint::Unix(daemon.socket.clone());
    let (client, hello, _link) = rt.block_on(connect::open(&endpoint, &Credentials::default())).unwrap();
    let mut session = Session::new(Tools::new(ClientConfig::default()), client, hello, daemon.root.clone());
    let read = json!({"file_path": "notes.txt"});
    let write = json!({"file_path": "notes.txt", "content": "new\n"});
    assert!(!rt.block_on(session.call("read", read.clone())).is_error);

    restart(&mut daemon);
    let first = rt.block_on(session.call("write", write.clone()));
    assert!(first.is_error);
    assert_eq!(first.text(), RESTARTED);
    let unread = rt.block_on(session.call("write", write.clone()));
    assert!(unread.is_error && unread.text().contains("has not been read"), "{}", unread.text());
    assert!(!rt.block_on(session.call("read", read)).is_error);
    assert!(!rt.block_on(session.call("write", write)).is_error);
    assert_eq!(daemon.read("notes.txt"), b"new\n");
}
