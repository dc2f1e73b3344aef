//! The MCP server face end to end: `fsd-tools mcp --root` (the embedded daemon) driven by the
//! official MCP Python SDK through `tests/mcp/client.py`. The interpreter is the venv that
//! `scripts/test.sh` builds; its path comes in `FSD_TEST_PYTHON`.

mod common;

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
