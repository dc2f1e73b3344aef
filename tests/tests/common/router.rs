//! An nginx that stands in for the Kubernetes agent-sandbox router: Debian's, installed by
//! `scripts/test.sh`, HTTP/1.1 to the upstream, `X-Sandbox-ID` required, `Authorization` stripped.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub fn nginx_bin() -> PathBuf {
    ["/usr/sbin/nginx", "/usr/bin/nginx"].iter().map(PathBuf::from).find(|p| p.exists()).unwrap_or_else(|| {
        panic!("nginx is not installed: this test needs Debian's nginx as its HTTP/1.1 router (scripts/test.sh installs it)")
    })
}

pub fn wait_port(port: u16, child: &mut Child, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("{what} exited before listening: {status}");
        }
        assert!(Instant::now() < deadline, "{what} did not listen within 20 s");
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// An nginx that behaves like the agent-sandbox router in front of one sandbox: it needs
/// `X-Sandbox-ID` (400 `{"detail": …}` without), drops `Authorization` and speaks HTTP/1.1 to
/// the sandbox.
pub fn router(dir: &Path, listen: u16, upstream: u16, ca: &Path) -> Killed {
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
