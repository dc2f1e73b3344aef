//! The agent-integration snippets of docs/agents.md stay right: each `<!-- file: NAME -->` block
//! parses, says what the guide says it does (the fsd server registered, the host's own file tools
//! off), and its `fsd-tools` command line is one `fsd-tools` accepts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::PathBuf;
use std::process::Command;

use serde_json::{Value, json};

/// Runs `fsd-tools ARGS` (with stdin closed) and insists it got past argument parsing: the
/// command line is valid even where the daemon or root it names is absent here.
fn accepted(args: &[String]) {
    let out =
        Command::new(common::tools_bin()).args(args).stdin(std::process::Stdio::null()).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("Usage:") && !stderr.contains("unexpected argument"), "{args:?}: {stderr}");
    assert!(stderr.starts_with("fsd-tools: "), "{args:?} failed for a reason of its own: {stderr}");
}

fn strings(value: &Value) -> Vec<String> {
    value.as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_owned()).collect()
}

#[test]
fn the_agent_integration_snippets_parse_and_turn_the_host_file_tools_off() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/agents.md");
    let doc = std::fs::read_to_string(&path).unwrap();
    let found = common::docs::marked_blocks(&doc, "file");
    assert_eq!(
        found.keys().map(String::as_str).collect::<Vec<_>>(),
        [".claude/settings.json", ".mcp.json", "config.toml", "mcp.json"]
    );

    for name in [".mcp.json", "mcp.json"] {
        let value: Value = serde_json::from_str(&found[name]).unwrap_or_else(|e| panic!("{name}: {e}"));
        let server = &value["mcpServers"]["fsd"];
        assert_eq!(server["command"], json!("fsd-tools"), "{name}");
        let args = strings(&server["args"]);
        assert_eq!(args[0], "mcp", "{name}");
        accepted(&args);
    }

    let settings: Value = serde_json::from_str(&found[".claude/settings.json"]).unwrap();
    let deny = strings(&settings["permissions"]["deny"]);
    for tool in ["Read", "Write", "Edit", "MultiEdit", "NotebookEdit", "Bash"] {
        assert!(deny.iter().any(|d| d == tool), "Claude Code's {tool} must be denied: {deny:?}");
    }
    let allow = strings(&settings["permissions"]["allow"]);
    for tool in ["read", "write", "edit"] {
        assert!(allow.contains(&format!("mcp__fsd__{tool}")), "{allow:?}");
    }
    assert_eq!(settings["enabledMcpjsonServers"], json!(["fsd"]));

    let codex: toml::Table = toml::from_str(&found["config.toml"]).unwrap();
    assert_eq!(codex["sandbox_mode"].as_str(), Some("read-only"), "Codex's own writes are fenced off");
    assert_eq!(codex["approval_policy"].as_str(), Some("never"), "and it cannot ask its way out");
    let fsd = &codex["mcp_servers"]["fsd"];
    assert_eq!(fsd["command"].as_str(), Some("fsd-tools"));
    let args: Vec<String> =
        fsd["args"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_owned()).collect();
    assert_eq!(args[0], "mcp");
    accepted(&args);
}
