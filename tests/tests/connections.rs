//! Connections on a TLS listener: one that never completes an authenticated call is closed after
//! `unauthenticated_idle_ms`; half-open connections (no handshake) never take connection slots
//! and are capped per source address; when the listener is full of idle strangers, an
//! authenticated client still connects and calls. Checked by outcome.

use crate::common;
use crate::pki;

use std::time::Duration;

use common::Daemon;
use fsd_proto::v1;
use fsd_tool_client::connect::{self, Credentials, Endpoint, TlsCredentials};

struct Tls {
    daemon: Daemon,
    ca: pki::Ca,
    client: pki::Pair,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Tls {
    fn start(extra: &str) -> Tls {
        let dir = tempfile::tempdir().unwrap();
        let ca = pki::Ca::new(dir.path(), "ca");
        let server = ca.server("fsd", &["fsd.test"], &["127.0.0.1".parse().unwrap()]);
        let client = ca.client("agent", "agent");
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let config = format!(
            "tls_cert = {:?}\ntls_key = {:?}\ntls_client_ca = {:?}\n{extra}",
            server.cert, server.key, ca.cert
        );
        let daemon = Daemon::start_with(&["--listen", &format!("tcp:127.0.0.1:{port}")], &config);
        std::fs::write(daemon.root.join("f.txt"), "x\n").unwrap();
        Tls { daemon, ca, client, port, _dir: dir }
    }

    fn credentials(&self) -> Credentials {
        Credentials {
            tls: Some(TlsCredentials {
                ca_pem: std::fs::read(&self.ca.cert).unwrap(),
                identity: Some((
                    std::fs::read(&self.client.cert).unwrap(),
                    std::fs::read(&self.client.key).unwrap(),
                )),
                server_name: Some("fsd.test".into()),
            }),
            token: None,
            headers: Vec::new(),
        }
    }

    fn endpoint(&self) -> Endpoint {
        Endpoint::Tcp(format!("127.0.0.1:{}", self.port))
    }

    fn stat(&self) -> v1::StatRequest {
        v1::StatRequest { path: self.daemon.root.join("f.txt").display().to_string(), ..Default::default() }
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

#[test]
fn a_connection_without_an_authenticated_call_is_closed_and_one_with_a_call_is_kept() {
    let t = Tls::start("unauthenticated_idle_ms = 300\nidle_timeout_ms = 60000\n");
    runtime().block_on(async {
        // Handshake done, certificate verified, but no call: closed after 300 ms.
        let (link, state) = connect::link(&t.endpoint(), &t.credentials()).await.unwrap();
        assert_eq!(state.connections(), 1);
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let mut client = fsd_proto::v1::fsd_client::FsdClient::new(link);
        client.stat(t.stat()).await.unwrap();
        assert_eq!(state.connections(), 2, "the stranger's connection was closed and a new one opened");
        // That connection made an authenticated call: the short timeout no longer applies.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        client.stat(t.stat()).await.unwrap();
        assert_eq!(state.connections(), 2, "an authenticated connection is kept");
    });
}

#[test]
fn idle_and_half_open_connections_never_lock_out_an_authenticated_client() {
    let t = Tls::start(
        "max_connections = 32\nmax_handshakes = 64\nmax_handshakes_per_source = 8\nhandshake_timeout_ms = 60000\n\
         unauthenticated_idle_ms = 60000\nidle_timeout_ms = 60000\n",
    );
    let addr: std::net::SocketAddr = format!("127.0.0.1:{}", t.port).parse().unwrap();
    runtime().block_on(async {
        // 1000 half-open connections from another address: TCP only, never a TLS hello.
        let mut half_open = Vec::new();
        for _ in 0..1000 {
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
            half_open.push(socket.connect(addr).await.unwrap());
        }
        // More idle, handshaken connections than the listener has slots, that never call.
        let mut idle = Vec::new();
        for _ in 0..48 {
            idle.push(connect::link(&t.endpoint(), &t.credentials()).await.unwrap());
        }
        // An authenticated client still gets in and is answered.
        for _ in 0..3 {
            let (mut client, _, _) = connect::open(&t.endpoint(), &t.credentials()).await.unwrap();
            client.stat(t.stat()).await.unwrap();
        }
        // Most half-open connections were closed at once, past the per-source handshake cap.
        let mut closed = 0;
        for stream in &half_open {
            let mut buf = [0u8; 1];
            if let Ok(Ok(0)) = tokio::time::timeout(Duration::from_millis(1), stream.peek(&mut buf)).await {
                closed += 1;
            }
        }
        assert!(closed >= 1000 - 8, "only {closed} of 1000 half-open connections were closed");
        drop((half_open, idle));
    });
}
