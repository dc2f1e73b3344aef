//! What a hostile web page, a hostile local user or a hostile image cannot do to the daemon or
//! the tools: reach the loopback HTTP face from a browser (DNS rebinding, a foreign `Origin`),
//! starve other identities with trickling uploads or idle Unix connections, blow up read_image's
//! memory with a compressed PNG chunk, or leave temporary files outside the fence.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::io::{BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::rest::{RestDaemon, read_head};
use common::*;
use serde_json::json;

/// One HTTP/1.1 request with exactly these headers (no `Host` unless given), its status and body.
fn raw_http(port: u16, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> (u16, String) {
    let (status, _, body) = raw_http_head(port, method, path, headers, body);
    (status, body)
}

/// [`raw_http`], with the answer's headers.
fn raw_http_head(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, Vec<(String, String)>, String) {
    let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut stream = BufReader::new(stream);
    let mut head =
        format!("{method} {path} HTTP/1.1\r\ncontent-length: {}\r\nconnection: close\r\n", body.len());
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream.get_mut().write_all(head.as_bytes()).unwrap();
    stream.get_mut().write_all(body).unwrap();
    let answer = read_head(&mut stream);
    let mut body = String::new();
    let _ = stream.read_to_string(&mut body);
    (answer.status, answer.headers, body)
}

#[test]
fn a_browser_page_cannot_reach_the_loopback_http_face() {
    let d = RestDaemon::start("", &[]);
    std::fs::write(d.path("secret.txt"), "the workspace's secret\n").unwrap();
    let port = d.port;
    let get = |headers: &[(&str, &str)]| raw_http(port, "GET", "/v1/files/secret.txt", headers, b"");
    let put = |headers: &[(&str, &str)], name: &str| {
        raw_http(port, "PUT", &format!("/v1/files/{name}"), headers, b"planted by a web page\n")
    };
    let here = format!("127.0.0.1:{port}");
    for (what, headers) in [
        // DNS rebinding: the attacker's name now resolves to 127.0.0.1, and the browser sends it.
        ("a rebound name", vec![("host", "attacker.example:8080")]),
        (
            "a rebound name and origin",
            vec![("host", "attacker.example"), ("origin", "http://attacker.example")],
        ),
        // A page elsewhere asking the loopback address directly.
        ("a foreign origin", vec![("host", here.as_str()), ("origin", "http://attacker.example")]),
        ("a sandboxed page (origin null)", vec![("host", "localhost"), ("origin", "null")]),
        ("no host at all", vec![]),
    ] {
        let (status, body) = get(&headers);
        assert_eq!(status, 403, "GET with {what}: {body}");
        assert!(!body.contains("secret"), "GET with {what} read the file: {body}");
        assert!(body.contains("PERMISSION_DENIED"), "{body}");
        let (status, body) = put(&headers, "planted.txt");
        assert_eq!(status, 403, "PUT with {what}: {body}");
        assert!(!d.path("planted.txt").exists(), "PUT with {what} wrote the workspace");
    }
    // gRPC-Web on the same listener is refused the same way.
    let (status, head, _) = raw_http_head(
        port,
        "POST",
        "/fsd.v1.Fsd/Hello",
        &[("host", "attacker.example"), ("content-type", "application/grpc-web+proto")],
        &[0, 0, 0, 0, 0],
    );
    let grpc_status =
        head.iter().find(|(k, _)| k.eq_ignore_ascii_case("grpc-status")).map(|(_, v)| v.as_str());
    assert_eq!((status, grpc_status), (200, Some("7")), "a gRPC-Web refusal is PERMISSION_DENIED: {head:?}");
    // Loopback names and addresses are served.
    for host in ["localhost", "127.0.0.1:1", "[::1]", here.as_str()] {
        let (status, body) = get(&[("host", host)]);
        assert_eq!((status, body.as_str()), (200, "the workspace's secret\n"), "{host}");
    }
    let (status, body) = put(&[("host", "localhost")], "ok.txt");
    assert_eq!(status, 204, "{body}");
    assert!(d.path("ok.txt").exists());
}

#[test]
fn the_http_face_serves_the_names_and_origins_the_operator_lists() {
    let d = RestDaemon::start(
        "http_allowed_hosts = [\"sandbox.agents.svc\"]\nhttp_allowed_origins = [\"https://console.example\"]\n",
        &[],
    );
    std::fs::write(d.path("notes.txt"), "notes\n").unwrap();
    let get = |headers: &[(&str, &str)]| raw_http(d.port, "GET", "/v1/files/notes.txt", headers, b"");
    for (headers, served) in [
        (vec![("host", "sandbox.agents.svc:8080")], true),
        (vec![("host", "SANDBOX.agents.svc.")], true),
        (vec![("host", "localhost"), ("origin", "https://console.example")], true),
        (vec![("host", "other.agents.svc")], false),
        (vec![("host", "localhost"), ("origin", "https://console.example:8443")], false),
        (vec![("host", "localhost"), ("origin", "http://console.example")], false),
    ] {
        let (status, body) = get(&headers);
        assert_eq!(status == 200, served, "{headers:?}: {status} {body}");
    }
}

#[test]
fn http_allowed_names_are_checked_at_start() {
    for (config, key) in [
        ("http_allowed_hosts = [\"a b\"]\n", "http_allowed_hosts"),
        ("http_allowed_hosts = [\"host:80\"]\n", "http_allowed_hosts"),
        ("http_allowed_origins = [\"console.example\"]\n", "http_allowed_origins"),
        ("http_allowed_origins = [\"ftp://console.example\"]\n", "http_allowed_origins"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("fsd.toml"), config).unwrap();
        let out = fsd_command()
            .arg("--listen")
            .arg(format!("unix:{}", dir.path().join("s").display()))
            .arg("--writable-root")
            .arg(dir.path())
            .arg("--config")
            .arg(dir.path().join("fsd.toml"))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains(key), "{config}: {stderr}");
    }
}

fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = 0xffff_ffffu32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ 0xedb8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

/// LSB-first bit packing, as deflate writes everything but Huffman codes.
struct Bits {
    out: Vec<u8>,
    acc: u64,
    n: u32,
}

impl Bits {
    fn put(&mut self, value: u64, count: u32) {
        self.acc |= value << self.n;
        self.n += count;
        while self.n >= 8 {
            self.out.push(self.acc as u8);
            self.acc >>= 8;
            self.n -= 8;
        }
    }

    /// A Huffman code goes most significant bit first.
    fn code(&mut self, code: u64, len: u32) {
        let reversed = (0..len).fold(0, |r, i| (r << 1) | ((code >> i) & 1));
        self.put(reversed, len);
    }
}

/// A zlib stream of about `size` zero bytes: one fixed-Huffman block, a literal zero and then
/// matches of 258 bytes at distance 1 (13 bits each: about 1:160).
fn zeros_zlib(size: u64) -> Vec<u8> {
    let matches = (size - 1) / 258;
    let mut bits = Bits { out: vec![0x78, 0x01], acc: 0, n: 0 };
    bits.put(1, 1); // the final block
    bits.put(1, 2); // fixed Huffman codes
    bits.code(0x30, 8); // literal 0
    for _ in 0..matches {
        bits.code(0xc5, 8); // length 258 (symbol 285)
        bits.code(0, 5); // distance 1
    }
    bits.code(0, 7); // end of block
    let mut out = bits.out;
    if bits.n > 0 {
        out.push(bits.acc as u8);
    }
    let total = 1 + matches * 258;
    let adler = ((total % 65_521) << 16) | 1;
    out.extend_from_slice(&(adler as u32).to_be_bytes());
    out
}

/// A 64x64 PNG whose ICC profile chunk inflates to `size` bytes.
fn iccp_bomb(size: u64) -> Vec<u8> {
    let image = image::DynamicImage::ImageRgb8(image::ImageBuffer::from_fn(64, 64, |x, y| {
        image::Rgb([(x * 4) as u8, (y * 4) as u8, 90])
    }));
    let mut png = std::io::Cursor::new(Vec::new());
    image.write_to(&mut png, image::ImageFormat::Png).unwrap();
    let png = png.into_inner();
    let mut data = b"bomb\0\0".to_vec();
    data.extend(zeros_zlib(size));
    let mut chunk = (data.len() as u32).to_be_bytes().to_vec();
    let typed: Vec<u8> = b"iCCP".iter().chain(&data).copied().collect();
    chunk.extend(&typed);
    chunk.extend(crc32(&typed).to_be_bytes());
    // After the signature (8) and IHDR (25), before anything else.
    [&png[..33], &chunk, &png[33..]].concat()
}

#[test]
fn a_png_whose_icc_profile_inflates_to_256_mib_stays_within_the_image_limits() {
    let d = Daemon::start();
    let bomb = iccp_bomb(256 << 20);
    println!("the PNG is {} bytes", bomb.len());
    d.write("bomb.png", &bomb);
    let store = d.root.join(".attachments");
    let mut s = d.session_with_config(&format!(
        "attachmentStore = \"{}\"\nimageInput = true\nmodel = \"vision-1\"\n",
        store.display()
    ));
    let reply = s.call("read_image", json!({"file_path": d.path("bomb.png").display().to_string()}));
    let peak = fsd_testkit::procs::pid_status_kib(s.pid(), "VmHWM:").unwrap();
    println!("fsd-tools peak: {peak} KiB: {}", reply.text());
    assert!(!reply.is_error(), "{}", reply.json);
    // The profile is never inflated: the peak stays far below what inflating it takes.
    assert!(peak < 128 << 10, "fsd-tools peaked at {peak} KiB reading a 64x64 image");
}

/// A REST PUT of `len` bytes whose body drips one byte every 0.4 s until `stop`; returns the
/// answer's status, if one came.
fn trickle(
    port: u16,
    name: String,
    len: u64,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> Option<u16> {
    let mut stream = common::rest::connect(port);
    common::rest::send_head(&mut stream, "PUT", &format!("/v1/files/{name}"), &[], len);
    stream.get_ref().set_nonblocking(true).unwrap();
    let mut answer = [0u8; 12];
    for _ in 0..len {
        if stop.load(std::sync::atomic::Ordering::Relaxed) {
            return None;
        }
        if stream.get_mut().write_all(b"x").is_err() {
            break;
        }
        // The daemon gave up on it (a refusal): the status line is there to read.
        if let Ok(n) = stream.get_mut().read(&mut answer)
            && n > 9
        {
            return String::from_utf8_lossy(&answer[9..12]).parse().ok();
        }
        std::thread::sleep(Duration::from_millis(400));
    }
    None
}

#[test]
fn trickling_uploads_never_hold_every_worker() {
    // Two workers a mode (the default); a short deadline, so a call that finds no worker fails
    // while the uploads still drip.
    let d = RestDaemon::start("call_timeout_ms = 3000\n", &[]);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let tricklers: Vec<_> = (0..4)
        .map(|i| {
            let (port, stop) = (d.port, stop.clone());
            std::thread::spawn(move || trickle(port, format!("slow-{i}.bin"), 1000, stop))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1500));
    // Another identity (the Unix socket's uid) writes while they drip, for longer than the
    // deadline: every write is served.
    let socket = d.dir.path().join("fsd.sock");
    let mut s = ToolSession::start(&format!("unix:{}", socket.display()), &d.root, None);
    let started = std::time::Instant::now();
    let mut n = 0;
    while started.elapsed() < Duration::from_secs(5) {
        let path = d.path(&format!("victim-{n}.txt"));
        let r = s.call("write", json!({"file_path": path.display().to_string(), "content": "served\n"}));
        assert!(!r.is_error(), "write {n} with uploads dripping: {}", r.json);
        n += 1;
        std::thread::sleep(Duration::from_millis(200));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for t in tricklers {
        let _ = t.join().unwrap();
    }
    println!("{n} writes served while four uploads dripped");
}

/// A gRPC WriteBytes of `path` from the `tcp` identity (the REST listener's plain gRPC on
/// `port`) whose body drips one byte every 0.4 s until `stop`; returns the call's outcome, if
/// it ended first.
fn trickle_grpc(
    port: u16,
    path: String,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> Option<Result<u64, fsd_proto::WireError>> {
    use fsd_proto::v1::{self, write_bytes_request::Item};
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async move {
        let endpoint = fsd_tool_client::connect::Endpoint::Tcp(format!("127.0.0.1:{port}"));
        let (mut client, _) = fsd_tool_client::connect::connect(&endpoint).await.unwrap();
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let header = v1::WriteBytesHeader { path, ..Default::default() };
        tx.send(v1::WriteBytesRequest { item: Some(Item::Header(header)) }).await.unwrap();
        let stopped = stop.clone();
        let drip = async move {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let byte = v1::WriteBytesRequest { item: Some(Item::Chunk(vec![b'x'].into())) };
                if tx.send(byte).await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(400)).await;
            }
            // Not finished: dropped, the upload is abandoned.
            std::future::pending::<()>().await;
        };
        let call = client.write_bytes(tokio_stream::wrappers::ReceiverStream::new(rx));
        tokio::select! {
            reply = call => Some(reply.map(|r| r.into_inner().size).map_err(|s| common::rpc::wire(&s))),
            () = drip => None,
            () = async {
                while !stopped.load(std::sync::atomic::Ordering::Relaxed) {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            } => None,
        }
    })
}

#[test]
fn trickling_grpc_uploads_of_one_identity_leave_another_identitys_writes_served() {
    use fsd_proto::v1::{self, write_bytes_request::Item};
    // Two workers a mode (the default); a deadline short enough that a write waiting for the
    // drips to be cut off (past the minimum rate's 10 s grace) would fail.
    let d = RestDaemon::start("call_timeout_ms = 3000\n", &[]);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let tricklers: Vec<_> = (0..3)
        .map(|i| {
            let (port, stop, path) =
                (d.port, stop.clone(), d.path(&format!("slow-{i}.bin")).display().to_string());
            std::thread::spawn(move || trickle_grpc(port, path, stop))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1500));
    // Another identity (the Unix socket's uid): uploads over gRPC, small and larger than a pipe
    // holds, and a plain write, for longer than the deadline while the drips go on.
    let endpoint = fsd_tool_client::connect::Endpoint::Unix(d.dir.path().join("fsd.sock"));
    let socket = d.dir.path().join("fsd.sock");
    let mut s = ToolSession::start(&format!("unix:{}", socket.display()), &d.root, None);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let (mut client, _) = rt.block_on(fsd_tool_client::connect::connect(&endpoint)).unwrap();
    let started = std::time::Instant::now();
    let (mut n, mut slowest) = (0, Duration::ZERO);
    while started.elapsed() < Duration::from_secs(5) {
        for size in [100usize, 1 << 20] {
            let path = d.path(&format!("fast-{n}-{size}.bin")).display().to_string();
            let header = v1::WriteBytesHeader { path, ..Default::default() };
            let messages = vec![
                v1::WriteBytesRequest { item: Some(Item::Header(header)) },
                v1::WriteBytesRequest { item: Some(Item::Chunk(vec![7u8; size].into())) },
            ];
            let asked = std::time::Instant::now();
            let reply = rt.block_on(client.write_bytes(tokio_stream::iter(messages)));
            let reply =
                reply.unwrap_or_else(|s| panic!("upload {n} of {size} bytes: {:?}", common::rpc::wire(&s)));
            assert_eq!(reply.into_inner().size, size as u64);
            slowest = slowest.max(asked.elapsed());
        }
        let path = d.path(&format!("victim-{n}.txt"));
        let asked = std::time::Instant::now();
        let r = s.call("write", json!({"file_path": path.display().to_string(), "content": "served\n"}));
        assert!(!r.is_error(), "write {n} with uploads dripping: {}", r.json);
        slowest = slowest.max(asked.elapsed());
        n += 1;
        std::thread::sleep(Duration::from_millis(200));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for t in tricklers {
        // Stopped, or (on a slow machine, past the 10 s grace) cut off for its rate: never
        // written.
        match t.join().unwrap() {
            None => {}
            Some(Err(w)) => assert_eq!(w.get("reason"), Some("upload_too_slow"), "{w:?}"),
            Some(Ok(size)) => panic!("a dripping upload of {size} bytes was written"),
        }
    }
    println!("{n} rounds of uploads and writes served while three gRPC uploads dripped, slowest {slowest:?}");
    assert!(slowest < Duration::from_secs(3), "slowest call {slowest:?}");
    for i in 0..3 {
        assert!(!d.path(&format!("slow-{i}.bin")).exists(), "an abandoned drip wrote nothing");
    }
}

/// Opens `count` connections to `socket` (run as uid/gid 65534) and keeps them open until its
/// stdin closes; then one more, which it says was `served` when the daemon answered its HTTP/2
/// preface.
const HOARDER: &str = r#"
import socket, sys, time
path, count = sys.argv[1], int(sys.argv[2])
held = []
for _ in range(count):
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    held.append(s)
# The flood's own newcomers past the uid's cap that arrived while too many waited were closed;
# this one comes once they settled.
time.sleep(1)
s = socket.socket(socket.AF_UNIX)
s.settimeout(20)
s.connect(path)
s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0]))
try:
    frame = s.recv(9)
    print("served" if len(frame) == 9 and frame[3] == 4 else "closed", flush=True)
except OSError:
    print("not served", flush=True)
sys.stdin.read()
"#;

#[test]
fn idle_unix_connections_of_one_uid_leave_room_for_everyone_else() {
    // Few descriptors, as under a service manager's default limit, so that hoarded connections
    // would exhaust them; the socket open to every local user.
    let d = Daemon::start_custom(
        &["prlimit", "--nofile=256:256", "--"],
        &|_| {},
        &[],
        "socket_mode = \"0666\"\n",
        &[],
    );
    let mut mode = std::fs::metadata(d.dir.path()).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut mode, 0o755);
    std::fs::set_permissions(d.dir.path(), mode).unwrap();
    d.write("a.txt", "a\n");
    let mut hoarder = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", HOARDER])
        .arg(&d.socket)
        .arg("300")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut BufReader::new(hoarder.stdout.take().unwrap()), &mut line).unwrap();
    // Its own newcomer is served: it takes the slot of one of its idle connections.
    assert_eq!(line.trim(), "served", "the hoarding uid's own new connection");
    // Another identity's session says hello and reads.
    let (tx, rx) = std::sync::mpsc::channel();
    let (endpoint, root) = (d.endpoint(), d.root.clone());
    std::thread::spawn(move || {
        let mut s = ToolSession::start(&endpoint, &root, None);
        let _ = tx.send(s.read(root.join("a.txt").to_str().unwrap()).json);
    });
    let reply = rx.recv_timeout(Duration::from_secs(60)).expect("another uid's session got no answer");
    assert_eq!(reply["is_error"], json!(false), "{reply}");
    drop(hoarder.stdin.take());
    hoarder.wait().unwrap();
}

#[test]
fn temporary_files_of_writes_whose_directory_left_the_fence_are_removed() {
    // Workers enough for the four writes at once (uploads hold all but one, one identity half).
    let d = RestDaemon::start("workers_per_mode = 9\n", &[]);
    let outside = d.dir.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::create_dir(d.path("d")).unwrap();
    // Uploads into d/ that have sent part of their body, and a write that the test build pauses
    // for 2 s between its last byte and its rename.
    let uploads: Vec<_> = (0..3)
        .map(|i| {
            let mut stream = common::rest::connect(d.port);
            common::rest::send_head(&mut stream, "PUT", &format!("/v1/files/d/upload-{i}.bin"), &[], 1 << 20);
            // More than a pipe holds: an upload takes its worker once its pipe is full.
            stream.get_mut().write_all(&[b's'; 256 << 10]).unwrap();
            stream
        })
        .collect();
    let port = d.port;
    let paused = std::thread::spawn(move || {
        common::rest::http(
            port,
            "PUT",
            "/v1/files/d/fsd-fault-pause-rename",
            &[],
            b"the caller's secret bytes\n",
        )
    });
    let temps = |dir: &std::path::Path| {
        std::fs::read_dir(dir)
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().starts_with(".fsd-tmp-"))
            .count()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while temps(&d.path("d")) < 4 {
        assert!(std::time::Instant::now() < deadline, "the writes never made their temporary files");
        std::thread::sleep(Duration::from_millis(5));
    }
    // A shell moves the directory out of the fence while the writes are in flight; then the
    // uploads' clients go away.
    std::fs::rename(d.path("d"), outside.join("d")).unwrap();
    drop(uploads);
    let answer = paused.join().unwrap();
    assert_ne!(answer.status, 204, "a write into a directory outside the fence must fail");
    let moved = outside.join("d");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while temps(&moved) > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "temporary files stay outside the fence: {:?}",
            std::fs::read_dir(&moved).unwrap().map(|e| e.unwrap().file_name()).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let left: Vec<_> = std::fs::read_dir(&moved).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(left.is_empty(), "nothing of the writes is outside the fence: {left:?}");
    // Nor of their journal entries: the supervisor removed the files by the workers' records,
    // so the entries went with them.
    assert_eq!(fsd_soak::tree::journal_entries(&d.root), Vec::<String>::new(), "journal entries left");
    // The daemon serves on.
    assert_eq!(common::rest::http(d.port, "PUT", "/v1/files/after.txt", &[], b"a\n").status, 204);
}

#[test]
fn an_upload_slower_than_the_minimum_rate_is_cut_off_and_another_identitys_upload_served() {
    use fsd_proto::v1::{self, write_bytes_request::Item};
    // Two workers a mode: uploads hold one. The default minimum rate (16 KiB/s past 10 s).
    let d = RestDaemon::start("", &[]);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (port, flag) = (d.port, stop.clone());
    let trickler = std::thread::spawn(move || trickle(port, "slow.bin".into(), 100, flag));
    std::thread::sleep(Duration::from_millis(1500));
    // Another identity (the Unix socket's uid) uploads 1 MiB over gRPC, as long as the drip
    // holds the uploads' worker and after: it is served once the drip is cut off.
    let endpoint = fsd_tool_client::connect::Endpoint::Unix(d.dir.path().join("fsd.sock"));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let path = d.path("fast.bin").display().to_string();
    let reply = rt.block_on(async {
        let (mut client, _) = fsd_tool_client::connect::connect(&endpoint).await.unwrap();
        let header = v1::WriteBytesHeader { context: None, path, guard: None, mode: None };
        let messages = vec![
            v1::WriteBytesRequest { item: Some(Item::Header(header)) },
            v1::WriteBytesRequest { item: Some(Item::Chunk(vec![7u8; 1 << 20].into())) },
        ];
        client.write_bytes(tokio_stream::iter(messages)).await
    });
    let reply = reply.expect("the other identity's upload").into_inner();
    assert_eq!(reply.size, 1 << 20);
    assert_eq!(std::fs::read(d.path("fast.bin")).unwrap(), vec![7u8; 1 << 20]);
    let cut = trickler.join().unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert_eq!(cut, Some(503), "the dripping upload is answered 503 once it falls behind");
    assert!(!d.path("slow.bin").exists(), "nothing of the cut-off upload was written");
}
