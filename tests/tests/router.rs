//! fsd behind a real HTTP/1.1 reverse proxy, as behind the Kubernetes agent-sandbox router:
//! nginx (Debian's, installed by `scripts/test.sh`) with `proxy_http_version 1.1`, routing on
//! `X-Sandbox-ID` and stripping `Authorization` like the router, forwards to fsd's `http:`
//! listener over TLS. `fsd-tools session --endpoint http://…` speaks gRPC-Web through it, its
//! bearer token in `x-fsd-authorization`: read, write, edit, apply_patch and a streamed read.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use crate::pki;

use std::net::{IpAddr, Ipv4Addr, TcpStream};
use std::process::{Command, Stdio};

use common::rest::free_port;
use common::router::router;

use serde_json::json;

#[test]
fn a_session_through_an_http11_router_speaks_grpc_web() {
    let dir = tempfile::tempdir().unwrap();
    let ca = pki::Ca::new(dir.path(), "ca");
    let server = ca.server("server", &["fsd.test"], &[IpAddr::V4(Ipv4Addr::LOCALHOST)]);
    let token = "router-test-token-0123456789";
    let fsd_port = free_port();
    let config = format!(
        "tls_cert = {:?}\ntls_key = {:?}\n[tokens.agent]\nsha256 = \"{}\"\n",
        server.cert,
        server.key,
        pki::sha256_hex(token)
    );
    let daemon = common::Daemon::start_with(&["--listen", &format!("http:127.0.0.1:{fsd_port}")], &config);
    let router_port = free_port();
    let _router = router(dir.path(), router_port, fsd_port, &ca.cert);

    // The router's own refusal, before anything reaches fsd.
    let mut conn = TcpStream::connect(("127.0.0.1", router_port)).unwrap();
    use std::io::{Read, Write};
    conn.write_all(b"GET /v1/health HTTP/1.1\r\nhost: r\r\nconnection: close\r\n\r\n").unwrap();
    let mut answer = String::new();
    conn.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 400") && answer.contains("X-Sandbox-ID"), "{answer}");

    let root = daemon.root.display().to_string();
    let client_config = dir.path().join("client.toml");
    std::fs::write(&client_config, "applyPatch = true\nreadStreamMinSize = 4096\n").unwrap();
    let big: String = (1..=2000).map(|i| format!("line {i:05}\n")).collect();
    daemon.write("big.txt", &big);
    daemon.write("notes.txt", "alpha\nbeta\n");
    let endpoint = format!("http://127.0.0.1:{router_port}");
    let port = fsd_port.to_string();
    let args = [
        "--endpoint",
        &endpoint,
        "--sandbox-id",
        "sb-1",
        "--sandbox-namespace",
        "default",
        "--sandbox-port",
        &port,
        "--token-env",
        "FSD_ROUTER_TOKEN",
        // The router strips it: were it forwarded, fsd would refuse the wrong token.
        "--header",
        "Authorization: Bearer not-the-token",
        "--cwd",
        &root,
        "--config",
        client_config.to_str().unwrap(),
    ];
    let mut s = common::ToolSession::start_args(&args, &[("FSD_ROUTER_TOKEN", token)]);

    let log = dir.path().join("nginx/logs/error.log");
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

    // Without the token, fsd (not the router) refuses: the credential is checked end to end.
    let args = ["--endpoint", &endpoint, "--sandbox-id", "sb-1", "--cwd", &root];
    let output = Command::new(common::tools_bin())
        .arg("session")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run fsd-tools");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("needs a client certificate or a bearer token"), "{stderr}");
}
