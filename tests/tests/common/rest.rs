//! The REST face of a test daemon: a daemon with an `http:` listener (and its gRPC Unix
//! socket), and raw HTTP/1.1 exchanges on loopback TCP.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

pub fn python() -> PathBuf {
    match std::env::var_os("FSD_TEST_PYTHON") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => panic!(
            "FSD_TEST_PYTHON is not set: the agent-sandbox test needs the venv with the pinned \
             k8s-agent-sandbox SDK. Run `bash scripts/test.sh` (it creates .venv and exports \
             FSD_TEST_PYTHON)"
        ),
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A daemon with a REST listener (and its gRPC Unix socket), started with `env` added.
pub struct RestDaemon {
    /// The process tree, owned by the shared kit.
    pub process: fsd_testkit::Daemon,
    pub port: u16,
    pub dir: tempfile::TempDir,
    pub root: PathBuf,
}

impl RestDaemon {
    pub fn start(config: &str, env: &[(&str, &str)]) -> RestDaemon {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ws");
        std::fs::create_dir(&root).unwrap();
        RestDaemon::launch(dir, &root, config, env)
    }

    /// A daemon whose writable root is `root` (a directory the caller made, such as a mount).
    pub fn start_in(root: &std::path::Path, config: &str) -> RestDaemon {
        RestDaemon::launch(tempfile::tempdir().unwrap(), root, config, &[])
    }

    fn launch(
        dir: tempfile::TempDir,
        root: &std::path::Path,
        config: &str,
        env: &[(&str, &str)],
    ) -> RestDaemon {
        let root = std::fs::canonicalize(root).unwrap();
        let port = free_port();
        // The REST clients here are plaintext loopback TCP, the `tcp` identity: read-only unless
        // the config grants more, as the agent-sandbox example's config does for its pod.
        let mut launch = super::launch()
            .listen(fsd_testkit::Listener::Http(format!("127.0.0.1:{port}")))
            .unix(dir.path().join("fsd.sock"))
            .writable_root(&root)
            .config(
                dir.path().join("fsd.toml"),
                format!("client_max_modes = {{ tcp = \"workspace-write\" }}\n{config}"),
            );
        for (key, value) in env {
            launch = launch.env(key, value);
        }
        let process = launch.start().unwrap_or_else(|e| panic!("{e}"));
        RestDaemon { process, port, dir, root }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    /// Sends SIGTERM, without waiting: the caller watches the shutdown, then [`RestDaemon::wait`]s.
    pub fn terminate(&mut self) {
        self.process.signal(rustix::process::Signal::TERM);
    }

    pub fn wait(&mut self) -> std::process::ExitStatus {
        self.process.wait().unwrap_or_else(|e| panic!("{e}"))
    }

    /// The daemon's process and all its descendants.
    pub fn pids(&self) -> Vec<u32> {
        self.process.pids()
    }
}

/// One HTTP/1.1 exchange's answer.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.body))
    }
}

/// Sends one request on `stream` and reads its answer (Content-Length bodies only; a HEAD has
/// none).
pub fn exchange(
    stream: &mut BufReader<TcpStream>,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Answer {
    send_head(stream, method, path, headers, body.len() as u64);
    stream.get_mut().write_all(body).unwrap();
    let mut answer = read_head(stream);
    if method != "HEAD" {
        let len: usize = answer.header("content-length").map(|v| v.parse().unwrap()).unwrap_or(0);
        answer.body = vec![0; len];
        stream.read_exact(&mut answer.body).unwrap();
    }
    answer
}

/// Sends a request line and headers announcing a body of `content_length` bytes, and no body:
/// the caller sends it (or stalls).
pub fn send_head(
    stream: &mut BufReader<TcpStream>,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    content_length: u64,
) {
    let mut request =
        format!("{method} {path} HTTP/1.1\r\nhost: localhost\r\ncontent-length: {content_length}\r\n");
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str("\r\n");
    stream.get_mut().write_all(request.as_bytes()).unwrap();
}

/// Reads an answer's status line and headers, leaving its body unread.
pub fn read_head(stream: &mut BufReader<TcpStream>) -> Answer {
    let mut line = String::new();
    stream.read_line(&mut line).unwrap();
    let status: u16 =
        line.split_whitespace().nth(1).unwrap_or_else(|| panic!("bad status line {line:?}")).parse().unwrap();
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        stream.read_line(&mut line).unwrap();
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (k, v) = line.split_once(':').unwrap();
        headers.push((k.trim().to_owned(), v.trim().to_owned()));
    }
    Answer { status, headers, body: Vec::new() }
}

pub fn connect(port: u16) -> BufReader<TcpStream> {
    let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    BufReader::new(stream)
}

pub fn http(port: u16, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Answer {
    exchange(&mut connect(port), method, path, headers, body)
}

/// A refusal: its status and the spec's `{code, message}` body.
pub fn refused(answer: &Answer, status: u16, code: &str) {
    assert_eq!(answer.status, status, "{answer:?}");
    let body = answer.json();
    assert_eq!(body["code"], code, "{body}");
    assert!(body["message"].as_str().is_some_and(|m| !m.is_empty()), "{body}");
}
