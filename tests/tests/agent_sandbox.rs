//! The REST face of Kubernetes agent-sandbox (KEP-539.2 `filesystem.yaml`) end to end: the real
//! `k8s-agent-sandbox` Python SDK (pinned by `scripts/test.sh`, interpreter in `FSD_TEST_PYTHON`)
//! through `tests/python/agent_sandbox_sdk.py`, and raw HTTP/1.1 for what the SDK does not send:
//! ETags and preconditions, error bodies, the mode query, metadata and health during shutdown.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::rest::{RestDaemon, connect, exchange, http, python, refused};

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;

fn outside_fixture(dir: &Path) -> PathBuf {
    let outside = dir.join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("canary"), "outside\n").unwrap();
    outside
}

#[test]
fn the_agent_sandbox_python_sdk_drives_the_rest_face() {
    let python = python();
    let daemon = RestDaemon::start("", &[]);
    let outside = outside_fixture(daemon.dir.path());
    common::symlink(&outside, &daemon.path("out"));
    for (rel, text) in [(".git/HEAD", "ref\n"), ("repo/.git/HEAD", "ref\n"), ("repo/src.txt", "src\n")] {
        std::fs::create_dir_all(daemon.path(rel).parent().unwrap()).unwrap();
        std::fs::write(daemon.path(rel), text).unwrap();
    }
    let status = Command::new(&python)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("python/agent_sandbox_sdk.py"))
        .arg(daemon.port.to_string())
        .arg(&daemon.root)
        .arg(&outside)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .status()
        .unwrap_or_else(|e| panic!("cannot run {} (FSD_TEST_PYTHON): {e}", python.display()));
    assert!(status.success(), "agent_sandbox_sdk.py failed ({status}); its output says which check");
    assert_eq!(std::fs::read(outside.join("canary")).unwrap(), b"outside\n");
    // 100 MiB went up and down: no process of the daemon may have held it.
    let peaks = peak_rss_kib(&daemon);
    let largest = peaks.iter().copied().max().unwrap_or(0);
    println!("daemon peak RSS per process after 100 MiB up and down (KiB): {peaks:?}");
    assert!(largest > 0, "no VmHWM for the daemon");
    assert!(largest < 64 << 10, "a daemon process peaked at {largest} KiB: the file was held in memory");
}

/// VmHWM of the daemon and of each of its descendants (supervisor, network process, workers).
fn peak_rss_kib(daemon: &RestDaemon) -> Vec<u64> {
    daemon.pids().into_iter().filter_map(|pid| fsd_testkit::procs::pid_status_kib(pid, "VmHWM:")).collect()
}

#[test]
fn etags_guard_writes_and_deletes_like_a_models_read() {
    let daemon = RestDaemon::start("", &[]);
    let port = daemon.port;
    let put = http(port, "PUT", "/v1/files/a.txt", &[("content-type", "application/octet-stream")], b"one");
    assert_eq!(put.status, 204, "{put:?}");
    let first = put.header("etag").unwrap().to_owned();
    assert!(first.starts_with('"') && first.ends_with('"'), "{first}");

    let get = http(port, "GET", "/v1/files/a.txt", &[], b"");
    assert_eq!((get.status, get.body.as_slice()), (200, b"one".as_slice()));
    assert_eq!(get.header("etag"), Some(first.as_str()));
    assert_eq!(get.header("content-length"), Some("3"));
    let head = http(port, "HEAD", "/v1/files/a.txt", &[], b"");
    assert_eq!(
        (head.status, head.header("etag"), head.header("content-length")),
        (200, Some(first.as_str()), Some("3"))
    );
    assert_eq!(http(port, "HEAD", "/v1/files/none.txt", &[], b"").status, 404);

    // If-None-Match: * creates only.
    refused(
        &http(port, "PUT", "/v1/files/a.txt", &[("if-none-match", "*")], b"two"),
        412,
        "PRECONDITION_FAILED",
    );
    assert_eq!(std::fs::read(daemon.path("a.txt")).unwrap(), b"one");
    assert_eq!(http(port, "PUT", "/v1/files/new.txt", &[("if-none-match", "*")], b"new").status, 204);

    // If-Match writes only at that version; the stale one is refused and changes nothing.
    let second = http(port, "PUT", "/v1/files/a.txt", &[("if-match", &first)], b"two");
    assert_eq!(second.status, 204, "{second:?}");
    let second = second.header("etag").unwrap().to_owned();
    assert_ne!(second, first);
    refused(
        &http(port, "PUT", "/v1/files/a.txt", &[("if-match", &first)], b"three"),
        412,
        "PRECONDITION_FAILED",
    );
    refused(
        &http(port, "DELETE", "/v1/files/a.txt", &[("if-match", &first)], b""),
        412,
        "PRECONDITION_FAILED",
    );
    refused(
        &http(port, "PUT", "/v1/files/gone.txt", &[("if-match", &first)], b"x"),
        412,
        "PRECONDITION_FAILED",
    );
    assert!(!daemon.path("gone.txt").exists(), "a guarded write created its file");
    assert_eq!(std::fs::read(daemon.path("a.txt")).unwrap(), b"two");
    // A change behind the daemon's back makes the ETag stale too.
    std::fs::write(daemon.path("a.txt"), "edited").unwrap();
    refused(
        &http(port, "PUT", "/v1/files/a.txt", &[("if-match", &second)], b"four"),
        412,
        "PRECONDITION_FAILED",
    );
    assert_eq!(std::fs::read(daemon.path("a.txt")).unwrap(), b"edited");
    let current = http(port, "HEAD", "/v1/files/a.txt", &[], b"").header("etag").unwrap().to_owned();
    assert_eq!(http(port, "DELETE", "/v1/files/a.txt", &[("if-match", &current)], b"").status, 204);
    assert!(!daemon.path("a.txt").exists());
}

#[test]
fn bad_requests_get_the_specs_error_bodies_and_change_nothing() {
    let daemon = RestDaemon::start("", &[]);
    let port = daemon.port;
    std::fs::create_dir_all(daemon.path("d/sub")).unwrap();
    std::fs::write(daemon.path("d/sub/f"), "f").unwrap();
    for mode in ["644", "0648", "04755", "0x644", "rw"] {
        let answer = http(port, "PUT", &format!("/v1/files/m.txt?mode={mode}"), &[], b"x");
        refused(&answer, 400, "INVALID_ARGUMENT");
    }
    assert!(!daemon.path("m.txt").exists(), "a refused mode created the file");
    assert_eq!(http(port, "PUT", "/v1/files/m.sh?mode=0750", &[], b"#!/bin/sh\n").status, 204);
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(daemon.path("m.sh")).unwrap().permissions().mode() & 0o777, 0o750);

    refused(&http(port, "GET", "/v1/files/none", &[], b""), 404, "NOT_FOUND");
    refused(&http(port, "DELETE", "/v1/files/none", &[], b""), 404, "NOT_FOUND");
    refused(&http(port, "DELETE", "/v1/files/d", &[], b""), 409, "CONFLICT");
    refused(&http(port, "DELETE", "/v1/files/d?recursive=maybe", &[], b""), 400, "INVALID_ARGUMENT");
    refused(&http(port, "PUT", "/v1/files/d", &[], b"x"), 400, "INVALID_ARGUMENT");
    refused(&http(port, "GET", "/v1/files/..%2F..%2Fetc%2Fpasswd", &[], b""), 403, "PERMISSION_DENIED");
    refused(&http(port, "GET", "/v1/files/a%00b", &[], b""), 400, "INVALID_ARGUMENT");
    refused(&http(port, "DELETE", "/v1/files/", &[], b""), 403, "PERMISSION_DENIED");
    refused(&http(port, "GET", "/v1/nothing", &[], b""), 404, "NOT_FOUND");
    assert!(daemon.path("d/sub/f").exists());

    // An empty directory goes without recursive; a tree with it; a listing names what is left.
    std::fs::create_dir(daemon.path("d/empty")).unwrap();
    assert_eq!(http(port, "DELETE", "/v1/files/d%2Fempty", &[], b"").status, 204);
    let listing = http(port, "GET", "/v1/files/d", &[], b"");
    assert_eq!(listing.status, 200);
    assert_eq!(listing.header("content-type"), Some("application/json"));
    let body = listing.json();
    assert_eq!(body["path"], daemon.path("d").display().to_string());
    let entries = body["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "{body}");
    assert_eq!((entries[0]["name"].as_str(), entries[0]["type"].as_str()), (Some("sub"), Some("directory")));
    assert!(entries[0]["modified_at"].as_str().unwrap().ends_with('Z'), "{body}");
    assert_eq!(http(port, "DELETE", "/v1/files/d?recursive=true", &[], b"").status, 204);
    assert!(!daemon.path("d").exists());

    // Over the upload limit: refused before a byte is written.
    let small = RestDaemon::start("max_upload_bytes = 10\n", &[]);
    refused(&http(small.port, "PUT", "/v1/files/big", &[], &[7u8; 11]), 413, "TOO_LARGE");
    assert!(!small.path("big").exists());
    assert_eq!(http(small.port, "PUT", "/v1/files/ten", &[], &[7u8; 10]).status, 204);
}

#[test]
fn multipart_bodies_write_their_file_part() {
    let daemon = RestDaemon::start("", &[]);
    let body = b"--XyZ\r\ncontent-disposition: form-data; name=\"note\"\r\n\r\nignored\r\n\
--XyZ\r\ncontent-disposition: form-data; name=\"file\"; filename=\"a.bin\"\r\ncontent-type: application/octet-stream\r\n\r\n\
\x00\x01binary\r\n--XyZ--\r\n";
    let answer = http(
        daemon.port,
        "PUT",
        "/v1/files/up%2Fa.bin",
        &[("content-type", "multipart/form-data; boundary=XyZ")],
        body,
    );
    assert_eq!(answer.status, 204, "{answer:?}");
    assert_eq!(std::fs::read(daemon.path("up/a.bin")).unwrap(), b"\x00\x01binary");
    let without = b"--XyZ\r\ncontent-disposition: form-data; name=\"note\"\r\n\r\nx\r\n--XyZ--\r\n";
    let answer = http(
        daemon.port,
        "PUT",
        "/v1/files/none.bin",
        &[("content-type", "multipart/form-data; boundary=XyZ")],
        without,
    );
    refused(&answer, 400, "INVALID_ARGUMENT");
    assert!(!daemon.path("none.bin").exists());
}

#[test]
fn metadata_serves_only_the_configured_variables() {
    let env = [
        ("SANDBOX_ID", "sb-1"),
        ("SANDBOX_NAMESPACE", "team"),
        ("POD_NAME", "pod-7"),
        ("AWS_SECRET_ACCESS_KEY", "secret"),
        ("KUBERNETES_SERVICE_HOST", "10.0.0.1"),
    ];
    let daemon = RestDaemon::start("metadata_env = [\"POD_NAME\"]\n", &env);
    let answer = http(daemon.port, "GET", "/v1/metadata", &[], b"");
    assert_eq!(answer.status, 200);
    assert_eq!(
        answer.json(),
        json!({"env": {"POD_NAME": "pod-7", "SANDBOX_ID": "sb-1", "SANDBOX_NAMESPACE": "team"}})
    );
    let custom = RestDaemon::start(
        "metadata_env_prefix = \"AGENT_\"\n",
        &[("AGENT_ROLE", "coder"), ("SANDBOX_ID", "sb-1")],
    );
    assert_eq!(
        http(custom.port, "GET", "/v1/metadata", &[], b"").json(),
        json!({"env": {"AGENT_ROLE": "coder"}})
    );
}

#[test]
fn health_is_ok_while_serving_and_503_during_shutdown() {
    let mut daemon = RestDaemon::start("", &[]);
    let mut conn = connect(daemon.port);
    let ok = exchange(&mut conn, "GET", "/v1/health", &[], b"");
    assert_eq!(ok.status, 200);
    let body = ok.json();
    assert_eq!(body["status"], "ok");
    assert!(body["uptime_seconds"].as_u64().is_some(), "{body}");
    daemon.terminate();
    // The open connection is still answered while the daemon drains; health says it is going.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let answer = exchange(&mut conn, "GET", "/v1/health", &[], b"");
        if answer.status == 503 {
            refused(&answer, 503, "UNAVAILABLE");
            break;
        }
        assert_eq!(answer.status, 200);
        assert!(Instant::now() < deadline, "health never said 503 during shutdown");
        std::thread::sleep(Duration::from_millis(20));
    }
    let status = daemon.wait();
    assert!(status.success(), "fsd exited with {status}");
}

/// Property: whatever the tree's shape and however its directories are swapped for links to the
/// outside while it is being removed, a recursive DELETE never touches a file outside the root.
#[test]
fn a_tree_delete_racing_renames_and_links_never_touches_the_outside() {
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    let daemon = RestDaemon::start("", &[]);
    let outside = outside_fixture(daemon.dir.path());
    std::fs::create_dir(outside.join("sub")).unwrap();
    std::fs::write(outside.join("sub/deep"), "deep\n").unwrap();
    let snapshot = |dir: &Path| {
        let mut all = Vec::new();
        let mut pending = vec![dir.to_owned()];
        while let Some(d) = pending.pop() {
            for entry in std::fs::read_dir(&d).unwrap().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    pending.push(path.clone());
                    all.push((path, None));
                } else {
                    all.push((path.clone(), Some(std::fs::read(&path).unwrap())));
                }
            }
        }
        all.sort();
        all
    };
    let before = snapshot(&outside);
    let config = Config { cases: 12, failure_persistence: None, ..Config::default() };
    let mut runner = TestRunner::new_with_rng(config, TestRng::deterministic_rng(RngAlgorithm::ChaCha));
    let counter = std::sync::atomic::AtomicU32::new(0);
    let strategy = (1usize..4, 1usize..4, 1usize..6);
    runner
        .run(&strategy, |(depth, width, files)| {
            let case = counter.fetch_add(1, Ordering::Relaxed) + 1;
            let top = daemon.path(&format!("tree{case}"));
            let mut dirs = vec![top.clone()];
            let mut frontier = vec![top.clone()];
            for _ in 0..depth {
                let mut next = Vec::new();
                for d in &frontier {
                    for w in 0..width {
                        let child = d.join(format!("d{w}"));
                        next.push(child.clone());
                        dirs.push(child);
                    }
                }
                frontier = next;
            }
            for d in &dirs {
                std::fs::create_dir_all(d).unwrap();
                for f in 0..files {
                    std::fs::write(d.join(format!("f{f}")), "x").unwrap();
                }
            }
            // The racer swaps every inner directory for a link to the outside and back.
            let stop = Arc::new(AtomicBool::new(false));
            let racer = {
                let (stop, inner, outside) = (stop.clone(), dirs[1..].to_vec(), outside.clone());
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        for d in &inner {
                            let moved = d.with_extension("moved");
                            if std::fs::rename(d, &moved).is_ok() {
                                let _ = std::os::unix::fs::symlink(&outside, d);
                                std::thread::yield_now();
                                let _ = std::fs::remove_file(d);
                                let _ = std::fs::rename(&moved, d);
                            }
                        }
                    }
                })
            };
            let answer =
                http(daemon.port, "DELETE", &format!("/v1/files/tree{case}?recursive=true"), &[], b"");
            stop.store(true, Ordering::Relaxed);
            racer.join().unwrap();
            println!(
                "case {case}: depth {depth} width {width} files {files}: {} {}",
                answer.status,
                String::from_utf8_lossy(&answer.body)
            );
            if answer.status != 204 {
                // Refused or cut short by the race: an error body, never a crossing.
                let body = answer.json();
                assert!(body["code"].as_str().is_some(), "{answer:?}");
            }
            assert_eq!(snapshot(&outside), before, "case {case}: the outside changed ({answer:?})");
            let _ = std::fs::remove_dir_all(&top);
            Ok(())
        })
        .unwrap();
}

/// The byte write and the removal the REST face uses are fsd.v1 calls too (WriteBytes, a client
/// stream; Remove), on the gRPC socket of the same daemon.
#[test]
fn write_bytes_and_remove_are_grpc_calls_too() {
    use fsd_proto::v1::{self, write_bytes_request::Item};
    let daemon = RestDaemon::start("", &[]);
    let endpoint = fsd_tool_client::connect::Endpoint::Unix(daemon.dir.path().join("fsd.sock"));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let (mut client, _) = fsd_tool_client::connect::connect(&endpoint).await.unwrap();
        let path = daemon.path("bin/data.bin").display().to_string();
        let chunk: Vec<u8> = (0..=255u8).cycle().take(1 << 20).collect();
        let header =
            v1::WriteBytesHeader { context: None, path: path.clone(), guard: None, mode: Some(0o600) };
        let mut messages = vec![v1::WriteBytesRequest { item: Some(Item::Header(header)) }];
        messages
            .extend((0..12).map(|_| v1::WriteBytesRequest { item: Some(Item::Chunk(chunk.clone().into())) }));
        let reply = client.write_bytes(tokio_stream::iter(messages)).await.unwrap().into_inner();
        assert_eq!(reply.size, 12 << 20);
        assert_eq!(reply.operation, v1::WriteOperation::Create as i32);
        let on_disk = std::fs::read(daemon.path("bin/data.bin")).unwrap();
        assert_eq!(on_disk.len(), 12 << 20);
        assert!(on_disk.chunks(1 << 20).all(|c| c == chunk.as_slice()));
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(daemon.path("bin/data.bin")).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let stat = client.stat(v1::StatRequest { path: path.clone(), ..Default::default() }).await.unwrap();
        let stat_version = stat.into_inner().info.unwrap().version;
        // The reply's version is the file's, with the digest of every byte that went in.
        let (meta, content) = fsd_proto::version::split(&reply.version);
        assert_eq!(fsd_proto::version::split(&stat_version).0, meta);
        assert!(content.is_some_and(|c| c.starts_with("c00000.")), "{}", reply.version);

        // A stale guard replaces nothing.
        let guard = v1::WriteGuard {
            kind: Some(v1::write_guard::Kind::ReplaceIfVersion(v1::ReplaceIfVersion {
                version: "v1.stale".into(),
                target_key: String::new(),
            })),
        };
        let header =
            v1::WriteBytesHeader { context: None, path: path.clone(), guard: Some(guard), mode: None };
        let messages = vec![
            v1::WriteBytesRequest { item: Some(Item::Header(header)) },
            v1::WriteBytesRequest { item: Some(Item::Chunk(b"other".to_vec().into())) },
        ];
        let status = client.write_bytes(tokio_stream::iter(messages)).await.unwrap_err();
        let wire = fsd_proto::WireError::from_status(&status).unwrap();
        assert_eq!(wire.code, fsd_proto::ErrorCode::StaleVersion, "{status:?}");
        assert_eq!(std::fs::read(daemon.path("bin/data.bin")).unwrap().len(), 12 << 20);

        // Remove: a non-empty directory needs recursive.
        let dir = daemon.path("bin").display().to_string();
        let remove =
            |recursive| v1::RemoveRequest { context: None, path: dir.clone(), recursive, guard: None };
        let status = client.remove(remove(false)).await.unwrap_err();
        assert_eq!(fsd_proto::WireError::from_status(&status).unwrap().code, fsd_proto::ErrorCode::NotEmpty);
        let reply = client.remove(remove(true)).await.unwrap().into_inner();
        assert_eq!(reply.removed, 2);
        assert!(!daemon.path("bin").exists());
    });
}

/// A listing reports a link as what it resolves to inside the fence (a file with the target's
/// size, a directory), and skips one that leads outside or nowhere; a GET through an inside
/// link reads the target.
#[test]
fn links_in_listings_are_what_they_resolve_to_inside_the_fence() {
    let daemon = RestDaemon::start("", &[]);
    let outside = outside_fixture(daemon.dir.path());
    std::fs::create_dir_all(daemon.path("d/sub")).unwrap();
    std::fs::write(daemon.path("d/target.txt"), "twelve bytes").unwrap();
    common::symlink(Path::new("target.txt"), &daemon.path("d/to-file"));
    common::symlink(Path::new("sub"), &daemon.path("d/to-dir"));
    common::symlink(outside.join("canary"), &daemon.path("d/to-outside"));
    common::symlink(Path::new("missing"), &daemon.path("d/dangling"));
    let listing = http(daemon.port, "GET", "/v1/files/d", &[], b"");
    assert_eq!(listing.status, 200, "{listing:?}");
    let body = listing.json();
    let mut entries: Vec<(String, String, u64)> = body["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let kind = e["type"].as_str().unwrap().to_owned();
            let size = if kind == "file" { e["size"].as_u64().unwrap() } else { 0 };
            (e["name"].as_str().unwrap().to_owned(), kind, size)
        })
        .collect();
    entries.sort();
    let want = [
        ("sub", "directory", 0),
        ("target.txt", "file", 12),
        ("to-dir", "directory", 0),
        ("to-file", "file", 12),
    ];
    let want: Vec<(String, String, u64)> =
        want.iter().map(|(n, k, s)| ((*n).to_owned(), (*k).to_owned(), *s)).collect();
    assert_eq!(entries, want, "{body}");
    let get = http(daemon.port, "GET", "/v1/files/d%2Fto-file", &[], b"");
    assert_eq!((get.status, get.body.as_slice()), (200, b"twelve bytes".as_slice()));
    refused(&http(daemon.port, "GET", "/v1/files/d%2Fto-outside", &[], b""), 403, "PERMISSION_DENIED");
}
