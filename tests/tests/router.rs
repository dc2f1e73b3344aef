//! fsd behind the agent-sandbox router as the real router runs it: plain HTTP/1.1 from the
//! router to the pod's `http+pod:` listener at `X-Sandbox-Port` (nginx configured as the Go
//! `sandbox-router` proxies, `common::router`), `Authorization` stripped, the bearer token in
//! `x-fsd-authorization` counted because the operator opted in (`pod_network_tokens`). Through
//! it: the router's own refusals, `fsd-tools session --endpoint http://…` (gRPC-Web: read,
//! edit, write, apply_patch, a streamed read), the same session from a fleet file, the Python
//! SDK's REST file calls (and its in-cluster mode straight to the pod), and a client that says
//! `Connection: close`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};

use common::rest::{free_port, python};
use common::router::{Sandbox, router};

use serde_json::json;

const TOKEN: &str = "router-test-token-0123456789";

/// One raw request to the router and its whole answer (the router closes after it).
fn raw(port: u16, head: &str) -> String {
    let mut conn = TcpStream::connect(("127.0.0.1", port)).unwrap();
    conn.write_all(head.as_bytes()).unwrap();
    let mut answer = String::new();
    conn.read_to_string(&mut answer).unwrap();
    answer
}

#[test]
fn the_router_path_carries_sessions_fleets_and_the_sdk_to_the_pod_listener() {
    let dir = tempfile::tempdir().unwrap();
    let pod_port = free_port();
    // The template's shape: the pod network reads; the router's token writes.
    let config = format!(
        "pod_network_tokens = true\nclient_max_modes = {{ pod = \"read-only\", \"token:router\" = \"workspace-write\" }}\n[tokens.router]\nsha256 = \"{}\"\n",
        fsd::identity::token_sha256_hex(TOKEN)
    );
    let daemon = common::Daemon::start_custom(
        &[],
        &|_| {},
        &["--listen", &format!("http+pod:127.0.0.1:{pod_port}")],
        &config,
        &[],
    );
    let router_port = free_port();
    let sandbox = Sandbox { id: "sb-1", namespace: "agents", pod_ip: "127.0.0.1", port: pod_port };
    let _router = router(dir.path(), router_port, &sandbox);
    let log = dir.path().join("nginx/logs/error.log");

    // The router's own answers, before anything reaches fsd.
    let route = |headers: &str| {
        raw(router_port, &format!("GET /v1/health HTTP/1.1\r\nhost: r\r\n{headers}connection: close\r\n\r\n"))
    };
    let p = pod_port;
    for (headers, status, detail) in [
        (String::new(), "400", "X-Sandbox-ID header is required."),
        ("x-sandbox-id: SB_1\r\n".to_owned(), "400", "Invalid sandbox ID format."),
        ("x-sandbox-id: sb-1\r\nx-sandbox-namespace: a.b\r\n".to_owned(), "400", "Invalid namespace format."),
        ("x-sandbox-id: sb-1\r\nx-sandbox-port: 80a\r\n".to_owned(), "400", "Invalid port format."),
        (
            format!("x-sandbox-id: sb-9\r\nx-sandbox-namespace: agents\r\nx-sandbox-port: {p}\r\n"),
            "502",
            "Could not connect to the backend sandbox: sb-9",
        ),
        // The default port (8888) is not where this pod listens: refused like a dial.
        (
            "x-sandbox-id: sb-1\r\nx-sandbox-namespace: agents\r\n".to_owned(),
            "502",
            "Could not connect to the backend sandbox: sb-1",
        ),
    ] {
        let answer = route(&headers);
        assert!(answer.starts_with(&format!("HTTP/1.1 {status}")), "{headers:?}: {answer}");
        assert!(answer.contains(&format!("{{\"detail\":\"{detail}\"}}")), "{headers:?}: {answer}");
    }
    // Found by name (the router's DNS form) or by X-Sandbox-Pod-IP; a client that says
    // `Connection: close` gets its answer and the close.
    for via in ["x-sandbox-namespace: agents\r\n".to_owned(), "x-sandbox-pod-ip: 127.0.0.1\r\n".to_owned()] {
        let answer = route(&format!("x-sandbox-id: sb-1\r\n{via}x-sandbox-port: {p}\r\n"));
        assert!(
            answer.starts_with("HTTP/1.1 200") && answer.contains("\"status\":\"ok\""),
            "{via:?}: {answer}"
        );
    }

    let root = daemon.root.display().to_string();
    let client_config = dir.path().join("client.toml");
    std::fs::write(&client_config, "applyPatch = true\nreadStreamMinSize = 4096\n").unwrap();
    let big: String = (1..=2000).map(|i| format!("line {i:05}\n")).collect();
    daemon.write("big.txt", &big);
    daemon.write("notes.txt", "alpha\nbeta\n");
    daemon.write("seed.txt", "seed\n");
    let endpoint = format!("http://127.0.0.1:{router_port}");
    let port = pod_port.to_string();
    let route_args = [
        "--endpoint",
        &endpoint,
        "--sandbox-id",
        "sb-1",
        "--sandbox-namespace",
        "agents",
        "--sandbox-port",
        &port,
    ];
    let mut args = route_args.to_vec();
    args.extend([
        "--token-env",
        "FSD_ROUTER_TOKEN",
        // The router strips it: were it forwarded, fsd would refuse the wrong token.
        "--header",
        "Authorization: Bearer not-the-token",
        "--cwd",
        &root,
        "--config",
        client_config.to_str().unwrap(),
    ]);
    let mut s = common::ToolSession::start_args(&args, &[("FSD_ROUTER_TOKEN", TOKEN)]);
    let r = s.read("notes.txt");
    if r.is_error() {
        eprintln!("nginx error log: {}", std::fs::read_to_string(&log).unwrap_or_default());
    }
    assert!(!r.is_error(), "{}", r.json);
    assert!(r.text().contains("1: alpha\n2: beta"), "{}", r.text());
    let r = s.call("edit", json!({"file_path": "notes.txt", "old_string": "beta", "new_string": "gamma"}));
    assert!(!r.is_error(), "{}", r.json);
    let r = s.call("write", json!({"file_path": "new.txt", "content": "written through the router\n"}));
    assert!(!r.is_error(), "{}", r.json);
    let patch = "*** Begin Patch\n*** Update File: notes.txt\n@@\n alpha\n-gamma\n+delta\n*** End Patch";
    let r = s.call("apply_patch", json!({"input": patch}));
    assert!(!r.is_error(), "{}", r.json);
    // Above readStreamMinSize: the read streams (StreamText) through the proxy.
    let r = s.call("read", json!({"file_path": "big.txt", "offset": 1990, "limit": 11}));
    assert!(!r.is_error(), "{}", r.json);
    assert!(r.text().contains("1990: line 01990") && r.text().contains("2000: line 02000"), "{}", r.text());
    assert_eq!(r.meta()["totalLines"], 2000, "{}", r.json);
    assert!(s.finish().success());
    assert_eq!(std::fs::read_to_string(daemon.path("notes.txt")).unwrap(), "alpha\ndelta\n");
    assert_eq!(std::fs::read_to_string(daemon.path("new.txt")).unwrap(), "written through the router\n");

    // The same route from a fleet file.
    let fleet = dir.path().join("fleet.toml");
    std::fs::write(
        &fleet,
        format!(
            "[targets.sb1]\nendpoint = \"{endpoint}\"\nsandboxId = \"sb-1\"\nsandboxNamespace = \"agents\"\nsandboxPort = {pod_port}\ntokenEnv = \"FSD_ROUTER_TOKEN\"\ncwd = {root:?}\n"
        ),
    )
    .unwrap();
    let fleet_args = ["--fleet", fleet.to_str().unwrap(), "--target", "sb1"];
    let mut s = common::ToolSession::start_args(&fleet_args, &[("FSD_ROUTER_TOKEN", TOKEN)]);
    assert!(s.read("notes.txt").text().contains("1: alpha"));
    let r = s.call("edit", json!({"file_path": "notes.txt", "old_string": "delta", "new_string": "epsilon"}));
    assert!(!r.is_error(), "{}", r.json);
    assert_eq!(r.meta()["target"], "sb1", "{}", r.json);
    assert!(s.finish().success());
    assert_eq!(std::fs::read_to_string(daemon.path("notes.txt")).unwrap(), "alpha\nepsilon\n");

    // Without the token the router's callers are `pod`: they read, and may not write.
    let mut args = route_args.to_vec();
    args.extend(["--cwd", &root]);
    let mut s = common::ToolSession::start_args(&args, &[]);
    assert!(s.read("seed.txt").text().contains("1: seed"));
    let r = s.call("write", json!({"file_path": "seed.txt", "content": "no\n"}));
    assert!(r.is_error(), "{}", r.json);
    assert_eq!(r.code(), Some("FS_SANDBOX_DENIED"), "{}", r.json);
    assert!(s.finish().success());
    assert_eq!(std::fs::read_to_string(daemon.path("seed.txt")).unwrap(), "seed\n");
    // A wrong token is fsd's to refuse (the router passes it on): at hello.
    let output = Command::new(common::tools_bin())
        .arg("session")
        .args(route_args)
        .args(["--token-env", "FSD_ROUTER_TOKEN", "--cwd", &root])
        .env("FSD_ROUTER_TOKEN", "not-the-token")
        .stdin(Stdio::null())
        .output()
        .expect("run fsd-tools");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("the bearer token is not valid for this daemon"), "{stderr}");

    // The Python SDK: REST file calls through the router, and its in-cluster mode to the pod.
    let output = Command::new(python())
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("python/router_sdk.py"))
        .args([router_port.to_string(), pod_port.to_string(), TOKEN.to_owned()])
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("run the SDK script (FSD_TEST_PYTHON)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "router_sdk.py failed:\n{stdout}\n{}\nnginx: {}",
        String::from_utf8_lossy(&output.stderr),
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    assert_eq!(stdout.lines().filter(|l| l.starts_with("ok ")).count(), 9, "{stdout}");
    assert!(!daemon.path("dir").exists() && !daemon.path("in-cluster.txt").exists());
}
