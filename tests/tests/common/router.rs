//! An nginx that stands in for the Kubernetes agent-sandbox `sandbox-router` (the Go one,
//! `sandbox-router/proxy` of kubernetes-sigs/agent-sandbox): Debian's nginx, installed by
//! `scripts/test.sh`, configured to do what that router does with a request:
//!
//! - routes on `X-Sandbox-ID` (required, a DNS-1123 label), `X-Sandbox-Namespace` (default
//!   `default`), `X-Sandbox-Port` (default 8888) and `X-Sandbox-Pod-IP` (else the name
//!   `<id>.<namespace>.svc.cluster.local`, which the one-sandbox "cluster DNS" below resolves to
//!   the pod; a loopback pod IP passes, as under the router's `--allow-loopback-pod-ip` for
//!   sidecar and test shapes), answering `{"detail": …}` 400s with the router's texts and a 502
//!   `Could not connect to the backend sandbox: ID` when nothing listens there;
//! - proxies in **plain HTTP/1.1** to `POD:PORT` (the router resolves an `http` URL and never
//!   speaks HTTP/2 to a sandbox), the path decoded as Go's `url.URL{Path}` sends it (`%2F`
//!   arrives as `/`), with `Host` set to `POD:PORT`, `Authorization` removed, hop-by-hop headers
//!   (`Connection` included) dropped, `X-Forwarded-For` replaced by the client address and
//!   `X-Forwarded-Host`/`-Proto` set;
//! - keeps idle upstream connections (16 per sandbox, 90 s: Go's transport pool) while a client
//!   that says `Connection: close` gets its connection closed after its answer; dials for at
//!   most 30 s, waits at most 180 s (`PROXY_TIMEOUT_SECONDS`), reads request headers for at
//!   most 10 s and keeps an idle client connection 120 s; streams bodies both ways unbuffered
//!   (`FlushInterval: -1`) with no size cap.
//!
//! Where nginx differs: it resolves `.`/`..` segments and merges slashes before proxying, and it
//! does not re-escape characters such as a space in the decoded path (Go does); `PROXY_TIMEOUT`
//! bounds each read rather than the whole exchange. The tests send no such paths.

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

/// One sandbox pod the router can reach: its id and namespace (the router's DNS name for it)
/// and where its `http+pod:` listener is.
pub struct Sandbox<'a> {
    pub id: &'a str,
    pub namespace: &'a str,
    pub pod_ip: &'a str,
    pub port: u16,
}

/// The router on `127.0.0.1:listen`, in front of `sandbox`.
pub fn router(dir: &Path, listen: u16, sandbox: &Sandbox<'_>) -> Killed {
    let Sandbox { id, namespace, pod_ip, port } = sandbox;
    let label = "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$";
    let http = format!(
        r#"    default_type application/json;
    client_max_body_size 0;
    client_header_timeout 10s;
    keepalive_timeout 120s;
    map $http_x_sandbox_namespace $sandbox_namespace {{ "" "default"; default $http_x_sandbox_namespace; }}
    map $http_x_sandbox_port $sandbox_port {{ "" "8888"; default $http_x_sandbox_port; }}
    # The cluster's DNS, for one sandbox: <id>.<namespace>.svc.cluster.local.
    map "$http_x_sandbox_id.$sandbox_namespace.svc.cluster.local" $sandbox_dns {{
        "{id}.{namespace}.svc.cluster.local" "{pod_ip}";
        default "";
    }}
    map $http_x_sandbox_pod_ip $sandbox_host {{ "" $sandbox_dns; default $http_x_sandbox_pod_ip; }}
    # Whether anything listens at POD:PORT (the router finds out by dialing: refused is a 502).
    map "$sandbox_host:$sandbox_port" $sandbox_up {{ "{pod_ip}:{port}" 1; default 0; }}
    upstream sandbox_pod {{
        server {pod_ip}:{port};
        keepalive 16;
        keepalive_timeout 90s;
    }}
    server {{
        listen 127.0.0.1:{listen};
        location / {{
            if ($http_x_sandbox_id = "") {{
                return 400 '{{"detail":"X-Sandbox-ID header is required."}}\n';
            }}
            if ($http_x_sandbox_id !~ "{label}") {{
                return 400 '{{"detail":"Invalid sandbox ID format."}}\n';
            }}
            if ($sandbox_namespace !~ "{label}") {{
                return 400 '{{"detail":"Invalid namespace format."}}\n';
            }}
            if ($sandbox_port !~ "^[1-9][0-9]{{0,4}}$") {{
                return 400 '{{"detail":"Invalid port format."}}\n';
            }}
            if ($sandbox_up = 0) {{
                return 502 '{{"detail":"Could not connect to the backend sandbox: $http_x_sandbox_id"}}\n';
            }}
            proxy_pass http://sandbox_pod$uri$is_args$args;
            proxy_http_version 1.1;
            proxy_set_header Host "$sandbox_host:$sandbox_port";
            proxy_set_header Authorization "";
            proxy_set_header Connection "";
            proxy_set_header X-Forwarded-For $remote_addr;
            proxy_set_header X-Forwarded-Host $host;
            proxy_set_header X-Forwarded-Proto $scheme;
            proxy_connect_timeout 30s;
            proxy_read_timeout 180s;
            proxy_send_timeout 180s;
            proxy_buffering off;
            proxy_request_buffering off;
        }}
    }}
"#
    );
    start_nginx(dir, &http, listen)
}

/// Starts Debian's nginx in the foreground with everything it writes under `dir/nginx`, serving
/// `http` (the inside of its `http` block), once it listens on `listen`; killed when dropped.
pub fn start_nginx(dir: &Path, http: &str, listen: u16) -> Killed {
    let prefix = dir.join("nginx");
    std::fs::create_dir_all(prefix.join("logs")).unwrap();
    let conf = format!(
        r#"daemon off;
master_process off;
worker_processes 1;
error_log {prefix}/logs/error.log warn;
pid {prefix}/nginx.pid;
events {{ worker_connections 256; }}
http {{
    access_log off;
    client_body_temp_path {prefix}/body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
{http}}}
"#,
        prefix = prefix.display(),
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
