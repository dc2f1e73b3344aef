//! Escalation approval inside an MCP host: with `escalationPrompt = true`, `fsd-tools mcp` asks
//! the person through the MCP client's elicitation, driven by the official MCP Python SDK
//! (`tests/mcp/elicitation.py`; the interpreter is the venv in `FSD_TEST_PYTHON`).

use crate::common;

use std::path::PathBuf;
use std::process::Command;

use common::*;

#[test]
fn the_person_approves_or_refuses_through_the_mcp_host() {
    let python = match std::env::var_os("FSD_TEST_PYTHON") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => panic!(
            "FSD_TEST_PYTHON is not set: this test needs the Python venv with the official `mcp` SDK \
             (bash scripts/test.sh creates it and exports FSD_TEST_PYTHON)"
        ),
    };
    let d = Daemon::start_with(&[], "escalation = \"client\"\nmax_mode = \"danger-full-access\"\n");
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("app.conf"), "port = 1\n").unwrap();
    let config = d.dir.path().join("client.toml");
    std::fs::write(&config, "escalationPrompt = true\n").unwrap();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("mcp").join("elicitation.py");
    let status = Command::new(&python)
        .arg(&script)
        .arg("--fsd-tools")
        .arg(tools_bin())
        .arg("--endpoint")
        .arg(d.endpoint())
        .arg("--cwd")
        .arg(&d.root)
        .arg("--config")
        .arg(&config)
        .arg("--outside")
        .arg(outside.path())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .status()
        .unwrap_or_else(|e| panic!("cannot run {} (FSD_TEST_PYTHON): {e}", python.display()));
    assert!(status.success(), "tests/mcp/elicitation.py failed ({status}); its stderr says which check");
}
