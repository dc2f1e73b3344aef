//! Bad input, as property tests against a running daemon:
//!
//! - tool calls through a real `fsd-tools session` with hostile paths (NUL, `..`, control and
//!   bidi characters, over-long components, protected and temporary names, paths outside the
//!   root) and hostile arguments (huge, negative, fractional and mistyped numbers, wrong types,
//!   unknown keys, malformed patches): every call answers one JSON line with a stable code;
//! - raw gRPC frames with invalid UTF-8 in string fields, arbitrary varints and garbage bodies:
//!   every call answers a status with an fsd error (ErrorInfo with a known code; a body the codec
//!   cannot decode is INVALID_ARGUMENT with FS_INVALID_PATH), never a dropped connection;
//! - messages over the daemon's cap answer OUT_OF_RANGE, content over the editable cap
//!   FS_TOO_LARGE, and so does a replace-all whose result would be over it (in the worker and in
//!   the network process's checks before an escalation).
//!
//! After each suite nothing outside the root has changed, no daemon process died or was replaced
//! (a panic would kill a worker), and the daemon's log holds no panic.

use std::path::{Path, PathBuf};

use bytes::{Buf, BufMut};
use fsd_proto::{ErrorCode, WireError};
use fsd_soak::daemon::{self, Bins, Daemon};
use fsd_soak::session::ToolSession;
use fsd_soak::tree;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};
use serde_json::{Value, json};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};

/// A daemon on `<tmp>/ws` beside `<tmp>/outside` (a file and a directory the daemon must never
/// change), with its socket and log in `<tmp>/run`.
struct World {
    tmp: tempfile::TempDir,
    root: PathBuf,
    outside: PathBuf,
    log: PathBuf,
    daemon: Daemon,
    pids: Vec<u32>,
}

impl World {
    fn start(config: &str) -> World {
        let tmp = tempfile::Builder::new().prefix("fsd-badinput-").tempdir().unwrap();
        let base = std::fs::canonicalize(tmp.path()).unwrap();
        let (root, outside, run) = (base.join("ws"), base.join("outside"), base.join("run"));
        for d in [&root, &outside, &run, &outside.join("dir")] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(outside.join("secret.txt"), "outside the root\n").unwrap();
        std::fs::write(outside.join("dir/inner.txt"), "also outside\n").unwrap();
        std::fs::write(root.join("a.txt"), "alpha\nbeta\n").unwrap();
        std::fs::create_dir_all(root.join("sub/.git")).unwrap();
        std::fs::write(root.join("sub/.git/config"), "[core]\n").unwrap();
        std::os::unix::fs::symlink(&outside, root.join("out-link")).unwrap();
        let log = run.join("fsd.log");
        let options = daemon::Options {
            root: root.clone(),
            socket: run.join("fsd.sock"),
            config: config.to_owned(),
            log: Some(log.clone()),
        };
        let daemon = Daemon::start(&Bins::locate().unwrap(), &options).unwrap();
        // The first answer comes once the worker pools are up: only then is the tree complete.
        Raw::connect(&daemon.socket).call("Hello", Vec::new()).unwrap();
        let mut pids = daemon.pids();
        pids.sort();
        World { tmp, root, outside, log, daemon, pids }
    }

    fn outside_now(&self) -> std::collections::BTreeMap<PathBuf, tree::Node> {
        tree::snapshot(&self.outside, None)
    }

    /// Nothing outside changed, no process died or was replaced, no panic in the log.
    fn check(&mut self, outside_before: &std::collections::BTreeMap<PathBuf, tree::Node>) {
        let changes = tree::diff(outside_before, &self.outside_now());
        assert!(changes.is_empty(), "changed outside the root: {changes:?}");
        let names: Vec<_> =
            std::fs::read_dir(self.tmp.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names.len(), 3, "new names beside the root: {names:?}");
        let mut pids = self.daemon.pids();
        pids.sort();
        assert_eq!(pids, self.pids, "a daemon process died or was replaced");
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        assert!(!log.contains("panicked"), "the daemon panicked:\n{log}");
    }
}

/// A deterministic runner (CI failures reproduce); PROPTEST_CASES overrides the case count.
fn runner(cases: u32) -> TestRunner {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(cases);
    let config = Config { cases, failure_persistence: None, ..Config::default() };
    TestRunner::new_with_rng(config, TestRng::deterministic_rng(RngAlgorithm::ChaCha))
}

// ---- tool calls ----

/// Path components that have broken path handling somewhere.
fn component() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("..".to_owned()),
        Just(".".to_owned()),
        Just(String::new()),
        Just("a.txt".to_owned()),
        Just("sub".to_owned()),
        Just(".git".to_owned()),
        Just("out-link".to_owned()),
        Just("outside".to_owned()),
        Just("secret.txt".to_owned()),
        Just("x\0y".to_owned()),
        Just("\u{1}\u{7}\t\n\r\u{1b}[2J".to_owned()),
        Just("\u{7f}".to_owned()),
        Just("\u{202e}txt.exe".to_owned()),
        Just("caf\u{e9}".to_owned()),
        Just("a".repeat(256)),
        Just("b".repeat(5000)),
        Just(".fsd-tmp-0123456789abcdef0123456789abcdef".to_owned()),
        Just("~".to_owned()),
        Just("*".to_owned()),
        Just("%2e%2e".to_owned()),
        Just("..\\..\\".to_owned()),
        Just("C:".to_owned()),
        Just(" ".to_owned()),
        "[a-z]{1,8}",
        any::<String>(),
    ]
}

/// Where a path starts: the root, the outside directory, the filesystem root, nothing
/// (relative: joined with the session's cwd), or a climb out of the root.
fn path(world_root: String, outside: String) -> impl Strategy<Value = String> {
    let prefixes = prop_oneof![
        Just(world_root.clone()),
        Just(world_root.clone()),
        Just(format!("{world_root}/../outside")),
        Just(outside),
        Just(String::from("/")),
        Just(String::new()),
        Just(String::from("/proc/self")),
    ];
    (prefixes, prop::collection::vec(component(), 0..6)).prop_map(|(prefix, parts)| {
        let mut path = prefix;
        for part in parts {
            path.push('/');
            path.push_str(&part);
        }
        path
    })
}

/// Numbers and non-numbers where a tool expects a line number or count.
fn number() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!(0)),
        Just(json!(1)),
        Just(json!(-1)),
        Just(json!(u64::MAX)),
        Just(json!(i64::MIN)),
        Just(json!(1e300)),
        Just(json!(-1e300)),
        Just(json!(1.5)),
        Just(json!("10")),
        Just(Value::Null),
        Just(json!(true)),
        Just(json!([1])),
        Just(json!({"n": 1})),
        any::<u64>().prop_map(|n| json!(n)),
        any::<i64>().prop_map(|n| json!(n)),
    ]
}

fn text() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => any::<String>().prop_map(Value::from),
        1 => Just(json!("alpha")),
        1 => Just(json!("")),
        1 => Just(json!("a\0b")),
        1 => Just(Value::Null),
        1 => Just(json!(7)),
        1 => Just(json!(["x"])),
    ]
}

/// A patch with hostile paths and a random shape.
fn patch(p: BoxedStrategy<String>) -> impl Strategy<Value = Value> {
    (p.clone(), p, any::<String>(), 0..4u8).prop_map(|(a, b, body, shape)| {
        let input = match shape {
            0 => format!("*** Begin Patch\n*** Add File: {a}\n+{body}\n*** End Patch\n"),
            1 => format!("*** Begin Patch\n*** Update File: {a}\n*** Move to: {b}\n@@\n-alpha\n+{body}\n*** End Patch\n"),
            2 => format!("*** Begin Patch\n*** Delete File: {a}\n*** End Patch\n"),
            _ => body,
        };
        json!({"input": input})
    })
}

/// One tool call: a tool name (sometimes unknown) and its arguments (sometimes not an object).
fn call(root: String, outside: String) -> impl Strategy<Value = (String, Value)> {
    let p = path(root, outside).boxed();
    let pv = p.clone().prop_map(Value::from);
    prop_oneof![
        (pv.clone(), proptest::option::of(number()), proptest::option::of(number())).prop_map(|(f, o, l)| {
            let mut args = json!({"file_path": f});
            if let Some(o) = o {
                args["offset"] = o;
            }
            if let Some(l) = l {
                args["limit"] = l;
            }
            ("read".to_owned(), args)
        }),
        (pv.clone(), text()).prop_map(|(f, c)| ("write".to_owned(), json!({"file_path": f, "content": c}))),
        (pv.clone(), text(), text(), prop_oneof![Just(json!(true)), Just(json!(false)), Just(json!("yes"))]).prop_map(
            |(f, o, n, r)| ("edit".to_owned(), json!({"file_path": f, "old_string": o, "new_string": n, "replace_all": r}))
        ),
        patch(p.clone()).prop_map(|args| ("apply_patch".to_owned(), args)),
        (
            prop_oneof![Just("view"), Just("create"), Just("str_replace"), Just("insert"), Just("undo_edit"), Just("rm -rf")],
            pv.clone(),
            text(),
            number(),
        )
            .prop_map(|(command, f, t, n)| {
                let args = json!({"command": command, "path": f, "file_text": t, "old_str": t, "new_str": t, "insert_line": n, "view_range": [n, n]});
                ("str_replace_editor".to_owned(), args)
            }),
        pv.clone().prop_map(|f| ("read_image".to_owned(), json!({"file_path": f}))),
        (pv.clone(), any::<String>()).prop_map(|(f, c)| ("write".to_owned(), json!({"file_path": f, "content": c}))),
        (pv.clone(), "alpha|beta|\\n", any::<String>()).prop_map(|(f, o, n)| ("edit".to_owned(), json!({"file_path": f, "old_string": o, "new_string": n}))),
        pv.clone().prop_map(|f| ("read".to_owned(), json!({"file_path": f}))),
        (pv, any::<String>()).prop_map(|(f, key)| {
            let mut args = json!({"file_path": f});
            args[key.as_str()] = json!(1);
            ("read".to_owned(), args)
        }),
        prop_oneof![Just(json!(42)), Just(json!("read")), Just(json!([])), Just(Value::Null)]
            .prop_map(|args| ("write".to_owned(), args)),
        "[a-z_]{0,12}".prop_map(|tool| (tool, json!({}))),
    ]
}

/// The codes a tool call may fail with on bad input: the daemon's stable codes and the tools'
/// own. FS_ABORTED (a worker died), FS_IO_ERROR and UNAVAILABLE (the daemon went away) are not.
fn stable(code: &str) -> bool {
    let daemon =
        ErrorCode::parse(code).is_some_and(|c| !matches!(c, ErrorCode::Aborted | ErrorCode::IoError));
    let tools = [
        "INVALID_ARGS",
        "INVALID_REQUEST",
        "UNKNOWN_TOOL",
        "PATCH_SYNTAX",
        "PATCH_REJECTED",
        "PATCH_HUNK_MISMATCH",
        "PATCH_SYMLINK_SOURCE",
        "FS_ALREADY_EXISTS",
        "IMAGE_STORE_FAILED",
    ];
    daemon || tools.contains(&code)
}

#[test]
fn hostile_tool_arguments_get_stable_codes_and_change_nothing_outside_the_root() {
    let mut world = World::start("");
    let before = world.outside_now();
    let config = world.tmp.path().join("run/client.toml");
    std::fs::write(&config, "applyPatch = true\nstrReplaceEditor = true\n").unwrap();
    let bins = Bins::locate().unwrap();
    let session = std::cell::RefCell::new(
        ToolSession::start(&bins, &world.daemon.socket, &world.root, Some(&config)).unwrap(),
    );
    // Some observations, so guarded writes and edits get past the policy to the daemon.
    for file in ["a.txt", "sub/.git/config"] {
        session
            .borrow_mut()
            .call("read", json!({"file_path": world.root.join(file).to_str().unwrap()}))
            .unwrap();
    }
    let codes = std::cell::RefCell::new(std::collections::BTreeMap::<String, u64>::new());
    let strategy = call(world.root.to_str().unwrap().to_owned(), world.outside.to_str().unwrap().to_owned());
    runner(300)
        .run(&strategy, |(tool, args)| {
            let reply = session
                .borrow_mut()
                .call(&tool, args.clone())
                .map_err(|e| TestCaseError::fail(format!("{tool} {args}: {e}")))?;
            let code = reply.code().unwrap_or("ok").to_owned();
            if reply.is_error() {
                prop_assert!(stable(&code), "{tool} {args} -> unstable code {code}: {}", reply.text());
                prop_assert!(reply.text().starts_with("Error: ") || tool == "apply_patch", "{}", reply.json);
            }
            *codes.borrow_mut().entry(code).or_default() += 1;
            Ok(())
        })
        .unwrap();
    println!("tool calls by outcome: {:?}", codes.borrow());
    // The session and the daemon still serve.
    let read = session
        .borrow_mut()
        .call("read", json!({"file_path": world.root.join("a.txt").to_str().unwrap()}))
        .unwrap();
    assert!(!read.is_error(), "{}", read.json);
    drop(session);
    world.check(&before);
}

// ---- raw gRPC ----

/// Sends and receives raw message bytes, so a test can put anything on the wire.
#[derive(Debug, Clone, Default)]
struct RawCodec;

#[derive(Debug)]
struct RawEncoder;

#[derive(Debug)]
struct RawDecoder;

impl Encoder for RawEncoder {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for RawDecoder {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, tonic::Status> {
        let mut out = vec![0; src.remaining()];
        src.copy_to_slice(&mut out);
        Ok(Some(out))
    }
}

impl Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = RawEncoder;
    type Decoder = RawDecoder;
    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }
    fn decoder(&mut self) -> RawDecoder {
        RawDecoder
    }
}

/// A raw unary client on its own runtime.
struct Raw {
    rt: tokio::runtime::Runtime,
    grpc: tonic::client::Grpc<tonic::transport::Channel>,
}

impl Raw {
    fn connect(socket: &Path) -> Raw {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let endpoint = fsd_tool_client::connect::Endpoint::Unix(socket.to_path_buf());
        let channel = rt.block_on(fsd_tool_client::connect::channel(&endpoint)).unwrap();
        let grpc = tonic::client::Grpc::new(channel)
            .max_encoding_message_size(usize::MAX)
            .max_decoding_message_size(usize::MAX);
        Raw { rt, grpc }
    }

    fn call(&mut self, method: &str, body: Vec<u8>) -> Result<Vec<u8>, tonic::Status> {
        let path =
            tonic::codegen::http::uri::PathAndQuery::try_from(format!("/fsd.v1.Fsd/{method}")).unwrap();
        let grpc = &mut self.grpc;
        self.rt.block_on(async {
            grpc.ready().await.map_err(|e| tonic::Status::unavailable(e.to_string()))?;
            grpc.unary(tonic::Request::new(body), path, RawCodec).await.map(tonic::Response::into_inner)
        })
    }
}

fn varint(mut n: u64, out: &mut Vec<u8>) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// One length-delimited field (strings, bytes, messages).
fn field(number: u32, bytes: &[u8], out: &mut Vec<u8>) {
    varint(u64::from(number) << 3 | 2, out);
    varint(bytes.len() as u64, out);
    out.extend_from_slice(bytes);
}

/// One varint field.
fn number_field(number: u32, n: u64, out: &mut Vec<u8>) {
    varint(u64::from(number) << 3, out);
    varint(n, out);
}

/// A request body: a method and its fields, path bytes possibly invalid UTF-8.
fn raw_request(root: Vec<u8>) -> impl Strategy<Value = (&'static str, Vec<u8>)> {
    let (r1, r2, r3) = (root.clone(), root.clone(), root);
    let path = prop_oneof![
        // Valid UTF-8 below the root: these reach the daemon's own checks.
        3 => any::<String>().prop_map(move |tail| [&r1[..], b"/", tail.as_bytes()].concat()),
        2 => prop::collection::vec(prop::sample::select(vec!["..", ".", "", "a.txt", "sub", ".git", "out-link", "x\0y", "\u{202e}"]), 0..5)
            .prop_map(move |parts| [&r2[..], b"/", parts.join("/").as_bytes()].concat()),
        // Invalid UTF-8: the codec's refusal.
        1 => prop::collection::vec(any::<u8>(), 0..64).prop_map(move |tail| [&r3[..], b"/\xff", &tail[..]].concat()),
        1 => prop::collection::vec(any::<u8>(), 0..64),
    ];
    let method = prop_oneof![
        Just("Stat"),
        Just("ReadText"),
        Just("ReadBytes"),
        Just("ListDir"),
        Just("WriteText"),
        Just("EditText"),
        Just("DeleteFile"),
        Just("MoveFile"),
        Just("Hello"),
    ];
    let body = prop_oneof![
        3 => any::<String>().prop_map(String::into_bytes),
        1 => prop::collection::vec(any::<u8>(), 0..256),
    ];
    let shape = prop_oneof![3 => Just(0u8), 1 => Just(1u8), 1 => Just(2u8)];
    (method, path.clone(), path, body, any::<u64>(), shape).prop_map(
        |(method, path, other, body, n, shape)| {
            let mut out = Vec::new();
            match shape {
                // Well-formed fields, the path bytes as they come.
                0 => {
                    field(2, &path, &mut out);
                    match method {
                        "WriteText" | "EditText" => {
                            field(3, &body, &mut out);
                            field(4, &body, &mut out);
                        }
                        "MoveFile" => field(3, &other, &mut out),
                        "Stat" | "ReadText" | "ReadBytes" => number_field(3, n, &mut out),
                        _ => {}
                    }
                }
                // A mode and an escalation ticket of arbitrary bytes in the call context.
                1 => {
                    let mut context = Vec::new();
                    number_field(3, n % 8, &mut context);
                    field(4, &body, &mut context);
                    field(1, &context, &mut out);
                    field(2, &path, &mut out);
                }
                // Garbage.
                _ => out = body,
            }
            (method, out)
        },
    )
}

/// A status a bad request may answer: an fsd error with a known code (a body the codec cannot
/// decode included: that is FS_INVALID_PATH, never a bare INTERNAL).
fn acceptable(status: &tonic::Status) -> bool {
    WireError::from_status(status)
        .is_some_and(|wire| !matches!(wire.code, ErrorCode::Aborted | ErrorCode::IoError))
}

#[test]
fn invalid_utf8_in_a_string_field_is_an_invalid_argument_with_an_fsd_code() {
    let mut world = World::start("");
    let before = world.outside_now();
    let mut raw = Raw::connect(&world.daemon.socket);
    let root = world.root.to_str().unwrap().as_bytes().to_vec();
    let with_path = |path: &[u8], content: &[u8]| {
        let mut out = Vec::new();
        field(2, path, &mut out);
        field(3, content, &mut out);
        out
    };
    let mut context = Vec::new();
    field(1, b"\xc3(", &mut context);
    let mut in_context = Vec::new();
    field(1, &context, &mut in_context);
    field(2, &[&root[..], b"/c.txt"].concat(), &mut in_context);
    let cases: [(&str, Vec<u8>, &str, &str); 5] = [
        (
            "WriteText",
            with_path(&[&root[..], b"/bad\xff.txt"].concat(), b"x"),
            "invalid_utf8",
            "WriteTextRequest.path",
        ),
        (
            "WriteText",
            with_path(&[&root[..], b"/a.txt"].concat(), b"\xfe\xfe"),
            "invalid_utf8",
            "WriteTextRequest.content",
        ),
        ("Stat", with_path(b"\xed\xa0\x80", b""), "invalid_utf8", "StatRequest.path"),
        ("Stat", in_context, "invalid_utf8", "CallContext.session_id"),
        ("ReadText", b"\x12\x7f/short".to_vec(), "malformed", "ReadTextRequest.path"),
    ];
    for (method, body, reason, field_name) in cases {
        let status = raw.call(method, body).expect_err("refused");
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{method}: {status:?}");
        let wire = WireError::from_status(&status).unwrap_or_else(|| panic!("no fsd ErrorInfo: {status:?}"));
        assert_eq!(wire.code, ErrorCode::InvalidPath, "{method}: {status:?}");
        assert_eq!((wire.get("reason"), wire.get("field")), (Some(reason), Some(field_name)), "{method}");
    }
    assert_eq!(std::fs::read_to_string(world.root.join("a.txt")).unwrap(), "alpha\nbeta\n");
    let names: Vec<_> = std::fs::read_dir(&world.root).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names.len(), 3, "nothing created in the root: {names:?}");
    raw.call("Hello", Vec::new()).expect("the daemon still answers hello");
    world.check(&before);
}

#[test]
fn raw_frames_with_invalid_utf8_and_garbage_get_statuses_and_change_nothing_outside() {
    let mut world = World::start("");
    let before = world.outside_now();
    let raw = std::cell::RefCell::new(Raw::connect(&world.daemon.socket));
    let outcomes = std::cell::RefCell::new(std::collections::BTreeMap::<String, u64>::new());
    let strategy = raw_request(world.root.to_str().unwrap().as_bytes().to_vec());
    runner(400)
        .run(&strategy, |(method, body)| {
            let result = raw.borrow_mut().call(method, body.clone());
            match result {
                Ok(_) => *outcomes.borrow_mut().entry("ok".into()).or_default() += 1,
                Err(status) => {
                    prop_assert!(acceptable(&status), "{method} {body:?} -> {status:?}");
                    let key = WireError::from_status(&status)
                        .map_or_else(|| format!("{:?}", status.code()), |w| w.code.to_string());
                    *outcomes.borrow_mut().entry(key).or_default() += 1;
                }
            }
            Ok(())
        })
        .unwrap();
    println!("raw calls by outcome: {:?}", outcomes.borrow());
    raw.borrow_mut().call("Hello", Vec::new()).expect("the daemon still answers hello");
    world.check(&before);
}

#[test]
fn oversize_messages_and_content_are_refused_and_the_daemon_keeps_serving() {
    let mut world = World::start(
        "max_editable_file_bytes = 1048576\nmax_read_bytes = 1048576\nmax_message_bytes = 2097152\n",
    );
    let before = world.outside_now();
    let mut raw = Raw::connect(&world.daemon.socket);
    let target = world.root.join("big.txt");
    let request = |content_len: usize| {
        let mut out = Vec::new();
        field(2, target.to_str().unwrap().as_bytes(), &mut out);
        field(3, &vec![b'x'; content_len], &mut out);
        out
    };
    // Over the message cap: refused by the transport's decoder, before any worker.
    let status = raw.call("WriteText", request(3 << 20)).unwrap_err();
    assert_eq!(status.code(), tonic::Code::OutOfRange, "{status:?}");
    // Under the message cap, over the editable cap: FS_TOO_LARGE with the size and the limit.
    let status = raw.call("WriteText", request(1_500_000)).unwrap_err();
    let wire = WireError::from_status(&status).expect("an fsd error");
    assert_eq!(wire.code, ErrorCode::TooLarge, "{status:?}");
    assert_eq!((wire.get("size"), wire.get("limit")), (Some("1500000"), Some("1048576")));
    assert!(!target.exists());
    // A path far over the bound, and many components.
    for path in
        [format!("{}/{}", world.root.display(), "a/".repeat(40_000)), format!("/{}", "x".repeat(1 << 20))]
    {
        let mut body = Vec::new();
        field(2, path.as_bytes(), &mut body);
        let status = raw.call("Stat", body).unwrap_err();
        let wire = WireError::from_status(&status).unwrap_or_else(|| {
            panic!(
                "not an fsd error: {:?} {}",
                status.code(),
                &status.message()[..status.message().len().min(300)]
            )
        });
        assert_eq!(wire.code, ErrorCode::InvalidPath, "{status:?}");
    }
    // Still serving.
    let mut body = Vec::new();
    field(2, target.to_str().unwrap().as_bytes(), &mut body);
    field(3, b"fits\n", &mut body);
    raw.call("WriteText", body).expect("a write that fits");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "fits\n");
    world.check(&before);
}

#[test]
fn a_replace_all_that_would_grow_past_the_editable_cap_is_refused_by_worker_and_network_process() {
    let mut world = World::start(
        "max_editable_file_bytes = 1048576\nescalation = \"client\"\nmax_mode = \"danger-full-access\"\n",
    );
    let before = world.outside_now();
    let mut raw = Raw::connect(&world.daemon.socket);
    let target = world.root.join("many.txt");
    let original = "a".repeat(1 << 20);
    std::fs::write(&target, &original).unwrap();
    let path = target.to_str().unwrap().as_bytes();
    let edit = |new: &str| {
        let mut out = Vec::new();
        field(2, path, &mut out);
        field(3, b"a", &mut out);
        field(4, new.as_bytes(), &mut out);
        number_field(5, 1, &mut out);
        out
    };
    let too_large = |status: tonic::Status, size: u64| {
        let wire = WireError::from_status(&status).unwrap_or_else(|| panic!("not an fsd error: {status:?}"));
        assert_eq!(wire.code, ErrorCode::TooLarge, "{status:?}");
        assert_eq!((wire.get("size"), wire.get("limit")), (Some(size.to_string().as_str()), Some("1048576")));
    };
    // Each of the 2^20 matches doubles: a file twice the cap.
    too_large(raw.call("EditText", edit("bb")).unwrap_err(), 2 << 20);
    // Each grows to 1 MiB: a terabyte, which no worker may try to hold.
    let huge = "b".repeat(1 << 20);
    too_large(raw.call("EditText", edit(&huge)).unwrap_err(), 1 << 40);
    assert_eq!(std::fs::read_to_string(&target).unwrap(), original, "the disk is unchanged");

    // The checks before an escalation replace in the network process: the same bound holds there.
    let mut op = Vec::new();
    field(1, b"editText", &mut op);
    field(2, path, &mut op);
    field(6, b"a", &mut op);
    field(7, huge.as_bytes(), &mut op);
    number_field(8, 1, &mut op);
    let mut context = Vec::new();
    field(1, b"session", &mut context);
    field(2, b"call", &mut context);
    let mut request = Vec::new();
    field(1, &context, &mut request);
    number_field(2, 3, &mut request);
    field(3, b"grow every line", &mut request);
    field(4, &op, &mut request);
    too_large(raw.call("RequestEscalation", request).unwrap_err(), 1 << 40);

    raw.call("Hello", Vec::new()).expect("the daemon still answers hello");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), original);
    world.check(&before);
}

#[test]
fn a_write_in_the_files_crlf_style_past_the_editable_cap_is_refused() {
    let mut world = World::start("max_editable_file_bytes = 1048576\n");
    let before = world.outside_now();
    let mut raw = Raw::connect(&world.daemon.socket);
    let target = world.root.join("crlf.txt");
    std::fs::write(&target, "a\r\nb\r\n").unwrap();
    // Under the cap as sent; twice as long once every LF becomes the file's CRLF.
    let mut body = Vec::new();
    field(2, target.to_str().unwrap().as_bytes(), &mut body);
    field(3, &vec![b'\n'; 600_000], &mut body);
    number_field(5, 1, &mut body);
    let status = raw.call("WriteText", body).unwrap_err();
    let wire = WireError::from_status(&status).expect("an fsd error");
    assert_eq!(wire.code, ErrorCode::TooLarge, "{status:?}");
    assert_eq!((wire.get("size"), wire.get("limit")), (Some("1200000"), Some("1048576")));
    assert_eq!(std::fs::read(&target).unwrap(), b"a\r\nb\r\n", "the disk is unchanged");
    world.check(&before);
}

#[test]
fn a_move_refused_for_its_stale_source_creates_no_destination_directories() {
    let mut world = World::start("");
    let before = world.outside_now();
    let mut raw = Raw::connect(&world.daemon.socket);
    let source = world.root.join("a.txt");
    let mut guard = Vec::new();
    field(1, b"v1.not-the-version-it-has", &mut guard);
    let mut body = Vec::new();
    field(2, source.to_str().unwrap().as_bytes(), &mut body);
    field(3, world.root.join("new1/new2/a.txt").to_str().unwrap().as_bytes(), &mut body);
    field(4, &guard, &mut body);
    let status = raw.call("MoveFile", body).unwrap_err();
    let wire = WireError::from_status(&status).expect("an fsd error");
    assert_eq!(wire.code, ErrorCode::StaleVersion, "{status:?}");
    assert!(!world.root.join("new1").exists(), "a refused move created the destination's directories");
    assert_eq!(std::fs::read_to_string(&source).unwrap(), "alpha\nbeta\n");
    world.check(&before);
}
