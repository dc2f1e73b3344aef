//! REST bodies on fsd's stream machinery, end to end over raw HTTP/1.1: a GET is a stream like
//! gRPC's streamText (the caller's open-streams budget, the idle timeout that cancels a stalled
//! reader), and a PUT streams its body with no lock held, so a stalled uploader holds up no other
//! call on the file and its `If-Match` is checked when it commits.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use common::rest::{RestDaemon, connect, exchange, http, read_head, refused, send_head};
use fsd_proto::v1;

/// A 64 MiB file: far more than the socket buffers and the stream's few chunks in flight hold,
/// so a GET whose reader stops reading really stalls the daemon's side.
const BIG: usize = 64 << 20;

#[test]
fn a_rest_get_counts_as_an_open_stream_and_a_stalled_one_is_cancelled() {
    let idle_ms = 3000;
    let daemon =
        RestDaemon::start(&format!("stream_idle_timeout_ms = {idle_ms}\n[budgets]\nopen_streams = 1\n"), &[]);
    let port = daemon.port;
    let data: Vec<u8> = (0..BIG).map(|n| (n % 251) as u8).collect();
    std::fs::write(daemon.path("big.bin"), &data).unwrap();
    std::fs::create_dir(daemon.path("dir")).unwrap();

    // One GET whose reader reads its headers and then nothing.
    let mut stalled = connect(port);
    send_head(&mut stalled, "GET", "/v1/files/big.bin", &[], 0);
    let head = read_head(&mut stalled);
    assert_eq!(head.status, 200, "{head:?}");
    assert_eq!(head.header("content-length"), Some(BIG.to_string().as_str()));
    let stalled_at = Instant::now();

    // The caller's only open stream is taken: a second GET of a file is refused at once, with
    // the budget's advice to wait, as a second streamText would be.
    let second = http(port, "GET", "/v1/files/big.bin", &[], b"");
    assert_eq!(second.status, 429, "a second GET was not refused: {:?}", second.headers);
    refused(&second, 429, "FS_RATE_LIMITED");
    let retry: u64 = second.header("retry-after").expect("Retry-After on a 429").parse().unwrap();
    assert!(retry >= 1, "{second:?}");
    assert!(
        stalled_at.elapsed() < Duration::from_millis(idle_ms),
        "the refusal came too late to prove anything"
    );
    // A listing and a HEAD are not streams: the budget does not refuse them.
    assert_eq!(http(port, "GET", "/v1/files/dir", &[], b"").status, 200);
    assert_eq!(http(port, "HEAD", "/v1/files/big.bin", &[], b"").status, 200);

    // Past the idle timeout the stalled stream is cancelled: its body ends short of its
    // Content-Length (the connection is cut, never a short body passing for the file).
    std::thread::sleep(Duration::from_millis(idle_ms * 2));
    let mut received = Vec::new();
    let end = stalled.read_to_end(&mut received);
    assert!(received.len() < BIG, "a stream cancelled for idleness delivered the whole file ({end:?})");
    assert_eq!(received, data[..received.len()], "the bytes that did arrive are the file's");

    // Its open-stream permit was given back: the next GET streams the whole file.
    let third = http(port, "GET", "/v1/files/big.bin", &[], b"");
    assert_eq!(third.status, 200, "{:?}", third.headers);
    assert!(third.body == data, "the GET after the cancelled one is not the file");
}

/// A gRPC client on the daemon's Unix socket, with the runtime that drives it.
struct Grpc {
    rt: tokio::runtime::Runtime,
    client: v1::fsd_client::FsdClient<tonic::transport::Channel>,
}

impl Grpc {
    fn connect(daemon: &RestDaemon) -> Grpc {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let endpoint = fsd_tool_client::connect::Endpoint::Unix(daemon.dir.path().join("fsd.sock"));
        let (client, _) = rt.block_on(fsd_tool_client::connect::connect(&endpoint)).unwrap();
        Grpc { rt, client }
    }

    /// Waits for one call; a call still waiting after 5 s (a call takes milliseconds) waits for
    /// the lock of the stalled upload, which the daemon holds until the connection times out.
    fn wait<T>(&self, what: &str, call: impl std::future::Future<Output = T>) -> T {
        let timed = self.rt.block_on(async { tokio::time::timeout(Duration::from_secs(5), call).await });
        timed.unwrap_or_else(|_| panic!("{what} did not complete while a PUT of the same file was stalled"))
    }

    fn read(&mut self, path: &str) -> v1::ReadTextReply {
        let request = v1::ReadTextRequest { path: path.to_owned(), ..Default::default() };
        let mut client = self.client.clone();
        self.wait("a gRPC read", client.read_text(request)).unwrap().into_inner()
    }

    fn write(&mut self, path: &str, content: &str, version: &str) -> v1::WriteTextReply {
        let guard = v1::write_guard::Kind::ReplaceIfVersion(v1::ReplaceIfVersion {
            version: version.to_owned(),
            target_key: String::new(),
        });
        let request = v1::WriteTextRequest {
            path: path.to_owned(),
            content: content.to_owned(),
            guard: Some(v1::WriteGuard { kind: Some(guard) }),
            ..Default::default()
        };
        let mut client = self.client.clone();
        self.wait("a gRPC write", client.write_text(request)).unwrap().into_inner()
    }
}

/// The names in the root: a staged upload that was refused must leave no temporary file.
fn names(daemon: &RestDaemon) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(&daemon.root)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn a_stalled_put_blocks_no_other_call_and_its_if_match_is_checked_at_commit() {
    let daemon = RestDaemon::start("", &[]);
    let port = daemon.port;
    let file = daemon.path("a.txt");
    let path = file.display().to_string();
    std::fs::write(&file, "one\n").unwrap();
    let etag = http(port, "HEAD", "/v1/files/a.txt", &[], b"").header("etag").unwrap().to_owned();
    let mut grpc = Grpc::connect(&daemon);
    let half = vec![b'p'; 1 << 20];

    // A PUT guarded by the current ETag sends half its body and stalls.
    let mut put = connect(port);
    send_head(&mut put, "PUT", "/v1/files/a.txt", &[("if-match", &etag)], 2 * half.len() as u64);
    put.get_mut().write_all(&half).unwrap();
    std::thread::sleep(Duration::from_millis(300));

    // Meanwhile gRPC reads the file (the old content, never a partial upload) and replaces it.
    let read = grpc.read(&path);
    assert_eq!(read.text, "one\n");
    let written = grpc.write(&path, "two\n", &read.version);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "two\n");
    assert!(!written.version.is_empty());

    // The upload completes; its guard is checked now, against the file as it is: 412, and the
    // gRPC write stands.
    put.get_mut().write_all(&half).unwrap();
    let mut answer = read_head(&mut put);
    let len: usize = answer.header("content-length").unwrap().parse().unwrap();
    answer.body = vec![0; len];
    put.read_exact(&mut answer.body).unwrap();
    refused(&answer, 412, "PRECONDITION_FAILED");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "two\n");
    assert_eq!(names(&daemon), ["a.txt"], "the refused upload left its temporary file");

    // A stalled PUT whose guard still holds when it commits replaces the file.
    let etag = http(port, "HEAD", "/v1/files/a.txt", &[], b"").header("etag").unwrap().to_owned();
    let mut put = connect(port);
    send_head(&mut put, "PUT", "/v1/files/a.txt", &[("if-match", &etag)], 2 * half.len() as u64);
    put.get_mut().write_all(&half).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(grpc.read(&path).text, "two\n");
    put.get_mut().write_all(&half).unwrap();
    let answer = read_head(&mut put);
    assert_eq!(answer.status, 204, "{answer:?}");
    assert_eq!(std::fs::read(&file).unwrap(), [half.as_slice(), half.as_slice()].concat());
    assert_eq!(names(&daemon), ["a.txt"]);
}

/// A REST connection is its caller's once it made a call (it is not closed as a stranger's
/// after `unauthenticated_idle_ms`), and a request whose body streams for longer than
/// `idle_timeout_ms` is in flight, not idle: neither a slow upload nor a slow download is cut.
#[test]
fn a_rest_connection_in_use_is_neither_a_strangers_nor_idle() {
    let daemon = RestDaemon::start("unauthenticated_idle_ms = 500\nidle_timeout_ms = 1000\n", &[]);
    let port = daemon.port;
    std::fs::write(daemon.path("a.txt"), "a").unwrap();
    let mut conn = connect(port);
    assert_eq!(exchange(&mut conn, "GET", "/v1/files/a.txt", &[], b"").status, 200);
    std::thread::sleep(Duration::from_millis(800));
    let again = exchange(&mut conn, "GET", "/v1/files/a.txt", &[], b"");
    assert_eq!((again.status, again.body.as_slice()), (200, b"a".as_slice()));

    // An upload trickling in over 2.5 s.
    let mut put = connect(port);
    let piece = vec![b'u'; 4096];
    send_head(&mut put, "PUT", "/v1/files/slow.bin", &[], 10 * piece.len() as u64);
    for _ in 0..10 {
        put.get_mut().write_all(&piece).unwrap();
        std::thread::sleep(Duration::from_millis(250));
    }
    let answer = read_head(&mut put);
    assert_eq!(answer.status, 204, "{answer:?}");
    assert_eq!(std::fs::metadata(daemon.path("slow.bin")).unwrap().len(), 10 * 4096);

    // A download read slowly over about 2.5 s.
    let data: Vec<u8> = (0..8u32 << 20).map(|n| (n % 253) as u8).collect();
    std::fs::write(daemon.path("big.bin"), &data).unwrap();
    let mut get = connect(port);
    send_head(&mut get, "GET", "/v1/files/big.bin", &[], 0);
    assert_eq!(read_head(&mut get).status, 200);
    let mut received = Vec::new();
    let mut buf = vec![0u8; 512 << 10];
    while received.len() < data.len() {
        std::thread::sleep(Duration::from_millis(150));
        let want = buf.len().min(data.len() - received.len());
        get.read_exact(&mut buf[..want]).unwrap_or_else(|e| {
            panic!("the slow download was cut after {} of {} bytes: {e}", received.len(), data.len())
        });
        received.extend_from_slice(&buf[..want]);
    }
    assert!(received == data, "the slow download is not the file");
}
