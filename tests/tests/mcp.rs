//! The MCP server face end to end: `fsd-tools mcp --root` (the embedded daemon) driven by the
//! official MCP Python SDK through `tests/mcp/client.py`. The interpreter is the venv that
//! `scripts/test.sh` builds; its path comes in `FSD_TEST_PYTHON`.

use crate::common;

use std::path::PathBuf;
use std::process::Command;

/// The Python with the pinned `mcp` package. A missing interpreter fails the test: skipping would
/// let a fresh clone pass without ever talking to a real MCP client.
fn python() -> PathBuf {
    match std::env::var_os("FSD_TEST_PYTHON") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => panic!(
            "FSD_TEST_PYTHON is not set: the MCP test needs the Python venv with the official `mcp` SDK. \
             Run `bash scripts/test.sh` (it creates .venv and exports FSD_TEST_PYTHON), or run \
             `python3 -m venv .venv && .venv/bin/pip install mcp==2.3.0` and set FSD_TEST_PYTHON=$PWD/.venv/bin/python"
        ),
    }
}

#[test]
fn python_sdk_client_drives_the_mcp_server() {
    let python = python();
    let tools = common::tools_bin();
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("ws");
    std::fs::create_dir(&root).expect("mkdir ws");
    let root = std::fs::canonicalize(&root).expect("canonicalize");
    let store = dir.path().join("attachments");
    let config = dir.path().join("client.toml");
    // apply_patch is off by default; read_image needs a store and an image-capable model.
    let body = format!(
        "applyPatch = true\nattachmentStore = {:?}\nimageInput = true\nmodel = \"mcp-test\"\n",
        store.display().to_string()
    );
    std::fs::write(&config, body).expect("write config");
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("mcp").join("client.py");
    let status = Command::new(&python)
        .arg(&script)
        .arg("--fsd-tools")
        .arg(&tools)
        .arg("--root")
        .arg(&root)
        .arg("--config")
        .arg(&config)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .status()
        .unwrap_or_else(|e| panic!("cannot run {} (FSD_TEST_PYTHON): {e}", python.display()));
    assert!(status.success(), "tests/mcp/client.py failed ({status}); its stderr says which check");
}

/// `fsd-tools mcp` reads and writes its stdio pipes on its own (single-threaded) runtime: after
/// a session of calls the process still has one thread, so no message went through tokio's
/// blocking pool (whose threads would linger).
#[test]
fn the_mcp_server_serves_its_pipes_without_a_blocking_pool() {
    use std::io::{BufRead, BufReader, Write};
    use std::process::Stdio;

    let d = common::Daemon::start();
    d.write("a.txt", "alpha\n");
    let mut child = Command::new(common::tools_bin())
        .arg("mcp")
        .arg("--endpoint")
        .arg(d.endpoint())
        .arg("--cwd")
        .arg(&d.root)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn fsd-tools mcp");
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut send = |message: serde_json::Value| {
        writeln!(stdin, "{message}").unwrap();
        stdin.flush().unwrap();
    };
    let mut receive = || {
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        serde_json::from_str::<serde_json::Value>(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"))
    };
    send(serde_json::json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "fsd-test", "version": "1"}}}));
    let init = receive();
    assert!(init["result"]["serverInfo"].is_object(), "{init}");
    send(serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    for id in 1..=5 {
        send(serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "read", "arguments": {"file_path": "a.txt"}}}));
        let reply = receive();
        assert_eq!(reply["id"], id, "{reply}");
        let text = reply["result"]["content"][0]["text"].as_str().unwrap_or_default();
        assert!(text.contains("alpha"), "{reply}");
    }
    let threads = std::fs::read_dir(format!("/proc/{}/task", child.id())).unwrap().count();
    // EOF on stdin ends the session.
    drop(stdin);
    let _ = child.wait();
    assert_eq!(threads, 1, "fsd-tools mcp ran {threads} threads: stdio went through a thread pool");
}

/// An embedded daemon that cannot start (here: link protection it cannot read, through the
/// fault-injection sysctl directory), under a real MCP client. Before, `fsd-tools mcp --root`
/// wrote the reason on stderr (which MCP hosts hide) and exited 2 without answering
/// `initialize`: the host showed a dead server. Now it answers, lists the tools, and every call
/// is an error result whose text carries the daemon's start line (no sandbox marker: nothing
/// was denied, nothing is served).
#[test]
fn an_embedded_daemon_that_cannot_start_is_said_in_every_call() {
    let unstartable = common::UnstartableRoot::new();
    let (var, hidden) = unstartable.env();
    let args = serde_json::json!({
        "fsd_tools": common::tools_bin(),
        "ws": unstartable.ws.path(),
        "env": {var: hidden, "FSD_LOG": "warn"},
    });
    let seen = common::python_json("mcp/unavailable.py", &args);
    assert_eq!(seen["tools"], serde_json::json!(["read", "write", "edit"]), "{seen}");
    let text = format!("Error: the file service is unavailable: {}", unstartable.line());
    for call in ["read", "write"] {
        assert_eq!(seen[call], serde_json::json!([true, text]), "{call}");
    }
}
