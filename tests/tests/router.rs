//! fsd behind a real HTTP/1.1 reverse proxy, as behind the Kubernetes agent-sandbox router:
//! nginx (Debian's, installed by `scripts/test.sh`) with `proxy_http_version 1.1`, routing on
//! `X-Sandbox-ID` and stripping `Authorization` like the router, forwards to fsd's `http:`
//! listener over TLS. `fsd-tools session --endpoint http://…` speaks gRPC-Web through it, its
//! bearer token in `x-fsd-authorization`: read, write, edit, apply_patch and a streamed read.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod pki;

use std::net::{IpAddr, Ipv4Addr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn nginx_bin() -> PathBuf {
    ["/usr/sbin/nginx", "/usr/bin/nginx"].iter().map(PathBuf::from).find(|p| p.exists()).unwrap_or_else(|| {
        panic!("nginx is not installed: this test needs Debian's nginx as its HTTP/1.1 router (scripts/test.sh installs it)")
    })
}

fn wait_port(port: u16, child: &mut Child, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("{what} exited before listening: {status}");
        }
        assert!(Instant::now() < deadline, "{what} did not listen within 20 s");
        std::thread::sleep(Duration::from_millis(20));
    }
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// An nginx that behaves like the agent-sandbox router in front of one sandbox: it needs
/// `X-Sandbox-ID` (400 `{"detail": …}` without), drops `Authorization` and speaks HTTP/1.1 to
/// the sandbox.
fn router(dir: &Path, listen: u16, upstream: u16, ca: &Path) -> Killed {
    let prefix = dir.join("nginx");
    std::fs::create_dir_all(prefix.join("logs")).unwrap();
    let conf = format!(
        r#"daemon off;
master_process off;
worker_processes 1;
error_log {prefix}/logs/error.log warn;
pid {prefix}/nginx.pid;
events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path {prefix}/body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
    client_max_body_size 0;
    server {{
        listen 127.0.0.1:{listen};
        location / {{
            if ($http_x_sandbox_id = "") {{
                return 400 '{{"detail": "X-Sandbox-ID header is required"}}';
            }}
            proxy_pass https://127.0.0.1:{upstream};
            proxy_http_version 1.1;
            proxy_set_header Authorization "";
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_request_buffering off;
            proxy_ssl_trusted_certificate {ca};
            proxy_ssl_verify on;
            proxy_ssl_protocols TLSv1.3;
            proxy_ssl_name fsd.test;
            proxy_ssl_server_name on;
        }}
    }}
}}
"#,
        prefix = prefix.display(),
        ca = ca.display(),
    );
    let path = dir.join("nginx.conf");
    std::fs::write(&path, conf).unwrap();
    let mut child = Command::new(nginx_bin())
        .arg("-p")
        .arg(&prefix)
        .arg("-c")
        .arg(&path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn nginx");
    wait_port(listen, &mut child, "nginx");
    Killed(child)
}

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
