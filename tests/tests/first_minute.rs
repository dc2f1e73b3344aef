//! A newcomer's first minute: the errors that used to be dead ends say what happened and what to
//! do (an `http://` endpoint that is not fsd, a refused port, a tool that is off).

use crate::common;

use std::process::{Command, Stdio};

use common::router::{Killed, start_nginx};
use common::*;
use serde_json::json;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// `fsd-tools ARGS`: (exit code, stdout, stderr).
fn tools(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(tools_bin()).args(args).stdin(Stdio::null()).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The ways a newcomer reaches `endpoint` with extra flags: `call read` and `doctor` (one path
/// to the daemon, so one set of errors).
fn reach(endpoint: &str, extra: &[&str]) -> [(&'static str, Vec<String>); 2] {
    let with = |head: &[&str]| head.iter().chain(extra).map(|a| (*a).to_owned()).collect();
    [
        ("call", with(&["call", "read", r#"{"file_path": "/a.txt"}"#, "--endpoint", endpoint])),
        ("doctor", with(&["doctor", endpoint])),
    ]
}

/// nginx's own error pages name its version: the one part that depends on the machine.
fn without_nginx_version(text: String) -> String {
    match text.split_once("nginx/") {
        Some((head, tail)) => format!("{head}nginx/VERSION{}", &tail[tail.find('<').unwrap_or(0)..]),
        None => text,
    }
}

/// An nginx on `listen`: without `X-Sandbox-ID` a 400 with the router's JSON body, with it a
/// proxy to `upstream`, where nothing listens (502).
fn nginx(dir: &std::path::Path, listen: u16, upstream: u16) -> Killed {
    let http = format!(
        r#"    server {{
        listen 127.0.0.1:{listen};
        location / {{
            if ($http_x_sandbox_id = "") {{
                return 400 '{{"detail": "X-Sandbox-ID header is required"}}';
            }}
            proxy_pass http://127.0.0.1:{upstream};
        }}
    }}
"#
    );
    start_nginx(dir, &http, listen)
}

#[test]
fn an_http_endpoint_that_is_not_fsd_gives_its_status_and_body() {
    // Before: "did not answer hello: Internal: Invalid header bit 60 expected 0 or 1" for both;
    // `doctor` said "did not answer hello: Internal: h2 protocol error: http2 error" (it took
    // another path to the daemon than `call`).
    let dir = tempfile::tempdir().unwrap();
    let (listen, dead) = (free_port(), free_port());
    let _nginx = nginx(dir.path(), listen, dead);
    let endpoint = format!("http://127.0.0.1:{listen}");
    let body_502 = "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx/VERSION</center>\r\n</body>\r\n</html>\r\n";
    let cases: &[(&[&str], String)] = &[
        (
            &[],
            format!(
                "fsd-tools: the server at {endpoint} did not answer as fsd (gRPC-Web): HTTP 400 Bad Request, body \
                 \"{{\\\"detail\\\": \\\"X-Sandbox-ID header is required\\\"}}\"\n"
            ),
        ),
        (
            &["--sandbox-id", "sb-1"],
            format!(
                "fsd-tools: the server at {endpoint} did not answer as fsd (gRPC-Web): HTTP 502 Bad Gateway, body {:?}\n",
                body_502
            ),
        ),
    ];
    for (extra, want) in cases {
        for (how, args) in reach(&endpoint, extra) {
            let (code, stdout, stderr) = tools(&args.iter().map(String::as_str).collect::<Vec<_>>());
            assert_eq!(code, Some(2), "{how} {extra:?}: {stdout} {stderr}");
            assert_eq!(stdout, "", "{how} {extra:?}");
            assert_eq!(without_nginx_version(stderr), *want, "{how} {extra:?}");
        }
    }
}

#[test]
fn a_refused_http_port_names_the_address() {
    // Before: "Unknown: client error (Connect)" (`doctor`: a raw transport error).
    let port = free_port();
    let endpoint = format!("http://127.0.0.1:{port}");
    for (how, args) in reach(&endpoint, &[]) {
        let (code, stdout, stderr) = tools(&args.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(code, Some(2), "{how}: {stdout} {stderr}");
        assert_eq!(
            stderr,
            format!(
                "fsd-tools: no daemon at {endpoint}: the connection was refused (nothing listens on that port)\n"
            ),
            "{how}"
        );
    }
}

#[test]
fn a_tcp_endpoint_that_answers_http_1_says_what_it_answered() {
    // Before: "did not answer hello in plaintext: if that listener speaks TLS (the daemon's
    // config sets tls_cert), reach it with --target NAME ...": a web server is no TLS listener.
    let dir = tempfile::tempdir().unwrap();
    let (listen, dead) = (free_port(), free_port());
    let _nginx = nginx(dir.path(), listen, dead);
    let endpoint = format!("tcp:127.0.0.1:{listen}");
    let body_400 = "<html>\r\n<head><title>400 Bad Request</title></head>\r\n<body>\r\n<center><h1>400 Bad Request</h1></center>\r\n<hr><center>nginx/VERSION</center>\r\n</body>\r\n</html>\r\n";
    let want = format!(
        "fsd-tools: the server at {endpoint} is not fsd: it answered in HTTP/1.x, not gRPC over HTTP/2 (\
         HTTP/1.1 400 Bad Request, body {body_400:?}); point the client at one of the daemon's listen addresses\n"
    );
    for (how, args) in reach(&endpoint, &[]) {
        let (code, stdout, stderr) = tools(&args.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(code, Some(2), "{how}: {stdout} {stderr}");
        assert_eq!(without_nginx_version(stderr), want, "{how}");
    }
}

#[test]
fn a_tool_that_is_off_says_so_and_names_its_setting() {
    // Before: `unknown tool "apply_patch"`, with no word of how to turn it on.
    let d = Daemon::start();
    let mut s = d.session();
    let cases = [
        ("apply_patch", json!({"input": "*** Begin Patch\n*** End Patch\n"}), Some("applyPatch = true")),
        ("str_replace_editor", json!({"command": "view", "path": "/"}), Some("strReplaceEditor = true")),
        ("no_such_tool", json!({}), None),
    ];
    for (tool, args, setting) in cases {
        let reply = s.call(tool, args);
        assert_eq!(reply.code(), Some("UNKNOWN_TOOL"), "{}", reply.json);
        let want = match setting {
            Some(setting) => format!(
                "Error: tool \"{tool}\" is off in this client; {setting} in the client config (--config FILE) turns it on"
            ),
            None => format!("Error: unknown tool \"{tool}\""),
        };
        assert_eq!(reply.text(), want);
    }
    // Turned on, the same call runs.
    let mut s = d.session_with_config("applyPatch = true\n");
    let reply = s.call("apply_patch", json!({"input": "*** Begin Patch\n*** End Patch\n"}));
    assert_ne!(reply.code(), Some("UNKNOWN_TOOL"), "{}", reply.json);
}

/// A daemon that accepts client-approved escalation up to danger-full-access, and a client
/// config that asks the person (`escalationPrompt`).
fn escalating_daemon() -> (Daemon, std::path::PathBuf) {
    let d = Daemon::start_with(&[], "escalation = \"client\"\nmax_mode = \"danger-full-access\"\n");
    let config = d.dir.path().join("client.toml");
    std::fs::write(&config, "escalationPrompt = true\n").unwrap();
    (d, config)
}

/// `fsd-tools ARGS` in a session of its own (`setsid`): no controlling terminal to prompt on.
fn without_terminal(args: &[&str]) -> std::process::Child {
    Command::new("setsid")
        .arg(tools_bin())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("setsid fsd-tools")
}

/// Writes `lines` to the child, closes its stdin and returns its stdout lines as JSON.
fn exchange(mut child: std::process::Child, lines: &[serde_json::Value]) -> Vec<serde_json::Value> {
    use std::io::Write;
    let mut stdin = child.stdin.take().unwrap();
    for line in lines {
        writeln!(stdin, "{line}").unwrap();
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

const NO_ONE: &str = "escalation to danger-full-access was refused: no one could be asked (there is no terminal \
                      to prompt on); nothing was changed. Do not retry this call with sandbox_permissions; continue \
                      under workspace-write mode or ask the user. [sandbox: file access denied under workspace-write \
                      mode]";

#[test]
fn where_no_one_can_be_asked_escalation_is_not_offered_and_its_refusal_says_so() {
    let (d, config) = escalating_daemon();
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("x.txt");
    let write = json!({"file_path": target.to_str().unwrap(), "content": "x\n",
        "sandbox_permissions": "danger-full-access", "justification": "the user asked"});

    // The session face with no terminal: before, "refused by the user" though nobody was asked.
    let session =
        without_terminal(&["session", "--endpoint", &d.endpoint(), "--config", config.to_str().unwrap()]);
    let replies = exchange(session, &[json!({"id": 1, "tool": "write", "args": write})]);
    assert_eq!(replies[0]["text"], json!(format!("Error: {NO_ONE}")), "{}", replies[0]);
    assert!(!target.exists());

    // MCP: a host without elicitation is not offered the fields; one with it is.
    let has_fields = |tools: &serde_json::Value| {
        tools["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["inputSchema"]["properties"].get("sandbox_permissions").is_some())
            .count()
    };
    for (capabilities, fields) in [(json!({}), false), (json!({"elicitation": {}}), true)] {
        let mcp =
            without_terminal(&["mcp", "--endpoint", &d.endpoint(), "--config", config.to_str().unwrap()]);
        let replies = exchange(
            mcp,
            &[
                json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18",
                    "capabilities": capabilities, "clientInfo": {"name": "first-minute", "version": "1"}}}),
                json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
                json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
                json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                    "params": {"name": "apply_patch", "arguments": {"input": ""}}}),
            ],
        );
        let list = replies.iter().find(|r| r["id"] == json!(2)).unwrap_or_else(|| panic!("{replies:?}"));
        assert_eq!(has_fields(list) > 0, fields, "{capabilities}: {list}");
        // A tool that is off, through MCP: the protocol error names the setting.
        let off = replies.iter().find(|r| r["id"] == json!(3)).unwrap_or_else(|| panic!("{replies:?}"));
        assert_eq!(
            off["error"]["message"],
            json!(
                "Unknown tool: apply_patch (tool \"apply_patch\" is off in this client; applyPatch = true in the \
                 client config (--config FILE) turns it on)"
            ),
            "{off}"
        );
    }
}

#[test]
fn a_write_over_plaintext_tcp_names_client_max_modes_to_the_operator() {
    // Before: only `denied: read_only`, no pointer to the setting. The model's text stays the
    // seed's denial; the hint goes to the CLI's stderr (and `doctor`).
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ws");
    std::fs::create_dir(&root).unwrap();
    let addr = format!("127.0.0.1:{}", free_port());
    let daemon = common::launch().tcp(&addr).writable_root(&root).start().unwrap_or_else(|e| panic!("{e}"));
    let endpoint = format!("tcp:{addr}");
    let target = root.join("a.txt");
    let out = Command::new(tools_bin())
        .args([
            "call",
            "write",
            &json!({"file_path": target, "content": "a\n"}).to_string(),
            "--endpoint",
            &endpoint,
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stdout} {stderr}");
    assert!(stdout.ends_with("[sandbox: file access denied under read-only mode]\n"), "{stdout}");
    assert!(!stdout.contains("client_max_modes"), "an operator's setting in the model's text: {stdout}");
    assert_eq!(
        stderr,
        format!(
            "fsd-tools: note: this client may only read at {endpoint} (plaintext TCP callers are the identity tcp, \
             read-only unless the daemon's client_max_modes names it); writes will be refused\n"
        )
    );
    assert!(!target.exists());
    drop(daemon);
}
