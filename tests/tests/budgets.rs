//! Fair to every client: per-identity budgets refuse a call over budget with FS_RATE_LIMITED and
//! `retry_after_ms` before it touches anything; a flood from one identity (a TLS client
//! certificate) leaves another's calls answered; a streamed read whose reader stops reading is
//! cancelled after `stream_idle_timeout_ms` and frees its stream slot; an upload can push only
//! the daemon's receive windows ahead of what the daemon reads (2 MiB a stream, 4 MiB a
//! connection), so no client makes the network process hold more than that per connection.
//! Checked by outcome, never by timing.

use crate::common;
use crate::pki;

use std::time::{Duration, Instant};

use common::Daemon;
use common::rpc::{self, Rpc};
use fsd_proto::ErrorCode;
use fsd_proto::v1;
use fsd_tool_client::connect::{self, Credentials, Endpoint, TlsCredentials};

/// The wait a FS_RATE_LIMITED refusal asks for.
#[track_caller]
fn rate_limited(status: &tonic::Status) -> Duration {
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    let wire = rpc::wire(status);
    assert_eq!(wire.code, ErrorCode::RateLimited, "{wire:?}");
    let ms: u64 = wire.get("retry_after_ms").expect("retry_after_ms").parse().expect("a number");
    assert!(ms >= 1, "{wire:?}");
    Duration::from_millis(ms)
}

#[test]
fn a_call_over_budget_is_refused_with_a_retry_time_and_touches_nothing() {
    // Burst 3, then one call every 2 s: the fourth call in a row is over budget.
    let d = Daemon::start_with(&[], "[budgets]\ncalls_per_second = 0.5\ncall_burst = 3\n");
    d.write("a.txt", "a\n");
    let mut r = Rpc::connect(&d);
    for _ in 0..3 {
        r.stat(&d.path("a.txt")).unwrap();
    }
    let status = r.write_text(&d.path("new.txt"), "never\n", None).unwrap_err();
    let wait = rate_limited(&status);
    assert!(wait > Duration::from_millis(500) && wait <= Duration::from_secs(2), "{wait:?}");
    assert_eq!(rpc::wire(&status).get("budget"), Some("calls_per_second"));
    assert!(!d.path("new.txt").exists(), "a refused call wrote nothing");
    // Waiting as told is enough.
    std::thread::sleep(wait);
    r.write_text(&d.path("new.txt"), "now\n", None).unwrap();
    assert_eq!(d.read("new.txt"), b"now\n");
}

#[test]
fn new_files_over_budget_are_refused_and_nothing_is_created() {
    let d = Daemon::start_with(&[], "[budgets]\nnew_files_per_second = 0.1\nnew_file_burst = 2\n");
    let mut r = Rpc::connect(&d);
    r.write_text(&d.path("one.txt"), "1\n", None).unwrap();
    r.write_text(&d.path("two.txt"), "2\n", None).unwrap();
    let status = r.write_text(&d.path("three.txt"), "3\n", None).unwrap_err();
    rate_limited(&status);
    assert_eq!(rpc::wire(&status).get("budget"), Some("new_files_per_second"));
    assert!(!d.path("three.txt").exists());
    // Reads are not new files.
    r.read_text(&d.path("one.txt"), 1 << 20).unwrap();
    // Overwrites are not new files either: while the budget is spent, a write over an existing
    // file goes ahead, unguarded or guarded by its version.
    let reply = r.write_text(&d.path("one.txt"), "1 again\n", None).unwrap();
    assert_eq!(reply.operation(), v1::WriteOperation::Update);
    let version = r.version(&d.path("two.txt"));
    let replace =
        v1::write_guard::Kind::ReplaceIfVersion(v1::ReplaceIfVersion { version, ..Default::default() });
    r.write_text(&d.path("two.txt"), "2 again\n", Some(replace)).unwrap();
    assert_eq!((d.read("one.txt"), d.read("two.txt")), (b"1 again\n".to_vec(), b"2 again\n".to_vec()));
    // A create is still refused, unguarded or createIfAbsent.
    let create = v1::write_guard::Kind::CreateIfAbsent(v1::CreateIfAbsent {});
    let status = r.write_text(&d.path("four.txt"), "4\n", Some(create)).unwrap_err();
    assert_eq!(rpc::wire(&status).get("budget"), Some("new_files_per_second"));
    let status = r.write_text(&d.path("three.txt"), "3\n", None).unwrap_err();
    assert_eq!(rpc::wire(&status).get("budget"), Some("new_files_per_second"));
    assert!(!d.path("three.txt").exists() && !d.path("four.txt").exists());
}

/// A transaction's new files are drawn from the new-file budget, one token each: one that would
/// create more files than the budget holds is refused whole (nothing changed, not even its
/// other operations), one that creates as many as it holds runs and spends them, and one that
/// only replaces goes ahead while the budget is spent. (One of more new files than the burst
/// runs on a full budget only, and spends them all: `Budgets::may_create_files`.)
#[test]
fn a_transactions_new_files_are_drawn_from_the_new_file_budget() {
    use v1::transact_operation::Kind;
    let state = tempfile::tempdir().unwrap();
    let d = Daemon::start_with(
        &[],
        &format!(
            "state_dir = \"{}\"\n[budgets]\nnew_files_per_second = 0.1\nnew_file_burst = 3\n",
            state.path().display()
        ),
    );
    d.write("old.txt", "old\n");
    let mut r = Rpc::connect(&d);
    // Two tokens left.
    r.write_text(&d.path("one.txt"), "1\n", None).unwrap();
    let write = |name: &str, content: &str| v1::TransactOperation {
        kind: Some(Kind::Write(v1::WriteTextRequest {
            path: d.path(name).to_string_lossy().into_owned(),
            content: content.to_owned(),
            ..Default::default()
        })),
    };
    let transact = |r: &mut Rpc, operations| {
        r.rt.block_on(r.client.transact(v1::TransactRequest { context: None, operations }))
    };
    let status = transact(
        &mut r,
        vec![
            write("old.txt", "changed\n"),
            write("a.txt", "a\n"),
            write("b.txt", "b\n"),
            write("c.txt", "c\n"),
        ],
    )
    .unwrap_err();
    rate_limited(&status);
    assert_eq!(rpc::wire(&status).get("budget"), Some("new_files_per_second"));
    assert_eq!(rpc::wire(&status).path, d.path("a.txt").to_string_lossy());
    assert_eq!(d.read("old.txt"), b"old\n");
    assert!(!d.path("a.txt").exists() && !d.path("b.txt").exists() && !d.path("c.txt").exists());

    transact(&mut r, vec![write("old.txt", "changed\n"), write("a.txt", "a\n"), write("b.txt", "b\n")])
        .unwrap();
    // Both tokens went to the transaction's two new files.
    let status = r.write_text(&d.path("c.txt"), "c\n", None).unwrap_err();
    assert_eq!(rpc::wire(&status).get("budget"), Some("new_files_per_second"));
    assert!(!d.path("c.txt").exists());
    // Replacing is no new file.
    transact(&mut r, vec![write("a.txt", "a again\n"), write("b.txt", "b again\n")]).unwrap();
    assert_eq!((d.read("a.txt"), d.read("b.txt")), (b"a again\n".to_vec(), b"b again\n".to_vec()));
}

#[test]
fn the_tools_tell_the_model_to_wait_and_retry() {
    let d = Daemon::start_with(&[], "[budgets]\ncalls_per_second = 0.2\ncall_burst = 2\n");
    d.write("a.txt", "a\n");
    let mut s = d.session();
    let mut refused = None;
    for _ in 0..5 {
        let reply = s.read("a.txt");
        if reply.is_error() {
            refused = Some(reply);
            break;
        }
    }
    let reply = refused.expect("the budget refused a read");
    assert_eq!(reply.code(), Some("FS_RATE_LIMITED"), "{}", reply.json);
    let text = reply.text();
    let prefix = format!(
        "Error: cannot read \"{}\": the file service is limiting this client's calls (nothing was done) — wait ",
        d.path("a.txt").display()
    );
    let rest = text.strip_prefix(&prefix).unwrap_or_else(|| panic!("{text}"));
    let ms = rest.strip_suffix(" ms, then retry").unwrap_or_else(|| panic!("{text}"));
    assert!(ms.parse::<u64>().is_ok_and(|ms| ms > 0 && ms <= 5000), "{text}");
}

/// A TLS daemon on loopback, and clients for certificate identities.
struct Fleet {
    daemon: Daemon,
    ca: pki::Ca,
    port: u16,
    dir: tempfile::TempDir,
}

impl Fleet {
    fn start(extra_config: &str) -> Fleet {
        let dir = tempfile::tempdir().unwrap();
        let ca = pki::Ca::new(dir.path(), "ca");
        let server = ca.server("fsd", &["fsd.test"], &["127.0.0.1".parse().unwrap()]);
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let config = format!(
            "tls_cert = {:?}\ntls_key = {:?}\ntls_client_ca = {:?}\n{extra_config}",
            server.cert, server.key, ca.cert
        );
        let daemon = Daemon::start_with(&["--listen", &format!("tcp:127.0.0.1:{port}")], &config);
        Fleet { daemon, ca, port, dir }
    }

    async fn client(&self, name: &str) -> connect::SessionClient {
        let pair = self.ca.client(name, name);
        let credentials = Credentials {
            tls: Some(TlsCredentials {
                ca_pem: std::fs::read(&self.ca.cert).unwrap(),
                identity: Some((std::fs::read(&pair.cert).unwrap(), std::fs::read(&pair.key).unwrap())),
                server_name: Some("fsd.test".into()),
            }),
            token: None,
            headers: Vec::new(),
        };
        let endpoint = Endpoint::Tcp(format!("127.0.0.1:{}", self.port));
        connect::open(&endpoint, &credentials).await.unwrap().0
    }
}

#[test]
fn a_flood_from_one_identity_leaves_another_identity_served() {
    let fleet = Fleet::start(
        "workers_per_mode = 1\nmax_concurrent_streams = 1024\nmax_calls_per_connection = 1024\n\
         [budgets]\ncalls_in_flight = 16\n",
    );
    let _ = &fleet.dir;
    fleet.daemon.write("a.txt", "a\n");
    let path = fleet.daemon.path("a.txt").display().to_string();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let alice = fleet.client("alice").await;
        let mut bob = fleet.client("bob").await;
        let stat = || v1::StatRequest { path: path.clone(), ..Default::default() };
        // alice: 4 waves of 400 concurrent stats.
        let flood = {
            let (alice, stat) = (alice.clone(), stat());
            tokio::spawn(async move {
                let (mut ok, mut limited) = (0u32, 0u32);
                for _ in 0..4 {
                    let calls: Vec<_> = (0..400)
                        .map(|_| {
                            let (mut c, r) = (alice.clone(), stat.clone());
                            tokio::spawn(async move { c.stat(r).await })
                        })
                        .collect();
                    for call in calls {
                        match call.await.unwrap() {
                            Ok(_) => ok += 1,
                            Err(status) => {
                                rate_limited(&status);
                                limited += 1;
                            }
                        }
                    }
                }
                (ok, limited)
            })
        };
        // bob, meanwhile: every call answered.
        let mut bob_ok = 0;
        let started = Instant::now();
        while !flood.is_finished() || bob_ok < 20 {
            bob.stat(stat()).await.unwrap_or_else(|s| panic!("bob was refused during alice's flood: {s:?}"));
            bob_ok += 1;
            assert!(started.elapsed() < Duration::from_secs(120), "the flood did not end");
        }
        let (ok, limited) = flood.await.unwrap();
        assert!(limited > 0, "alice's flood met her calls_in_flight budget ({ok} answered)");
        assert!(ok > 0, "alice was still served within her budget");
        assert!(bob_ok >= 20);
    });
}

#[test]
fn a_stream_that_is_not_read_is_cancelled_after_the_idle_timeout_and_frees_its_slot() {
    let d = Daemon::start_with(&[], "stream_idle_timeout_ms = 400\n[budgets]\nopen_streams = 1\n");
    // Larger than every window and buffer between the daemon's reader and this client.
    let big = vec![b'x'; 96 << 20];
    d.write("big.txt", &big);
    let path = d.path("big.txt").display().to_string();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let (mut client, _) = connect::connect(&Endpoint::Unix(d.socket.clone())).await.unwrap();
        let request =
            || v1::StreamTextRequest { path: path.clone(), chunk_bytes: 1 << 20, ..Default::default() };
        let mut stalled = client.stream_text(request()).await.unwrap().into_inner();
        let first = stalled.message().await.unwrap().expect("the header");
        assert!(matches!(first.item, Some(v1::stream_text_reply::Item::Header(_))));
        // The one stream this identity may hold is taken.
        let status = client.clone().stream_text(request()).await.unwrap_err();
        rate_limited(&status);
        assert_eq!(rpc::wire(&status).get("budget"), Some("open_streams"));
        // Not reading: the daemon cancels the stream and the slot comes back.
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut second = loop {
            match client.clone().stream_text(request()).await {
                Ok(stream) => break stream.into_inner(),
                Err(status) => {
                    rate_limited(&status);
                    assert!(Instant::now() < deadline, "the stalled stream never freed its slot");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        };
        // The stalled stream ends with the cancellation, never as if the file were complete.
        let mut received = 0usize;
        let ended = loop {
            match stalled.message().await {
                Ok(Some(v1::StreamTextReply { item: Some(v1::stream_text_reply::Item::Chunk(bytes)) })) => {
                    received += bytes.len()
                }
                Ok(Some(_)) => {}
                Ok(None) => panic!("the cancelled stream ended cleanly after {received} bytes"),
                Err(status) => break status,
            }
        };
        assert!(received < big.len());
        let wire = rpc::wire(&ended);
        assert_eq!(wire.code, ErrorCode::Aborted, "{wire:?}");
        // A reason and the limit, not a sentence: the tools word it.
        assert_eq!(
            (wire.get("reason"), wire.get("limit_ms")),
            (Some("stream_idle"), Some("400")),
            "{wire:?}"
        );
        // The second stream, read promptly, delivers the whole file.
        let mut total = 0usize;
        while let Some(message) = second.message().await.unwrap() {
            if let Some(v1::stream_text_reply::Item::Chunk(bytes)) = message.item {
                total += bytes.len();
            }
        }
        assert_eq!(total, big.len());
    });
}

/// How much a client may send on each of `streams` uploads opened on one HTTP/2 connection
/// before the daemon reads a byte: the send capacity the daemon's windows grant, each stream
/// asking for 64 MiB. Waits until `expected` bytes in all are granted (or 10 s passed), then a
/// little longer, so a larger window would show.
async fn granted_upload_capacity(socket: &std::path::Path, streams: usize, expected: usize) -> Vec<usize> {
    let io = tokio::net::UnixStream::connect(socket).await.unwrap();
    let (client, connection) = h2::client::Builder::new()
        // The client's own buffer must not be what bounds the capacity.
        .max_send_buffer_size(64 << 20)
        .handshake::<_, bytes::Bytes>(io)
        .await
        .unwrap();
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let mut client = client.ready().await.unwrap();
    let mut bodies = Vec::new();
    for _ in 0..streams {
        let request = http::Request::builder()
            .method("POST")
            .uri("http://fsd/fsd.v1.Fsd/WriteBytes")
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())
            .unwrap();
        let (response, mut body) = client.send_request(request, false).unwrap();
        body.reserve_capacity(64 << 20);
        bodies.push((body, response));
        client = client.ready().await.unwrap();
    }
    // Capacity arrives with the daemon's SETTINGS and WINDOW_UPDATE frames; nothing is sent, so
    // nothing more is granted later.
    let granted = |bodies: &[(h2::SendStream<bytes::Bytes>, _)]| -> Vec<usize> {
        bodies.iter().map(|(body, _)| body.capacity()).collect()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while granted(&bodies).iter().sum::<usize>() < expected && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    granted(&bodies)
}

#[test]
fn an_upload_the_daemon_has_not_read_holds_at_most_its_receive_windows() {
    let daemon = Daemon::start();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let one = granted_upload_capacity(&daemon.socket, 1, 2 << 20).await;
        assert_eq!(one, vec![2 << 20], "one upload may run 2 MiB ahead of the daemon");
        let three = granted_upload_capacity(&daemon.socket, 3, 4 << 20).await;
        assert_eq!(three.iter().sum::<usize>(), 4 << 20, "a connection's uploads: 4 MiB in all {three:?}");
    });
}
