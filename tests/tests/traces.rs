//! Traces at a real OTLP receiver (`tests/python/otlp_receiver.py`: PyPI's `opentelemetry-proto`
//! with grpcio, installed by `scripts/test.sh`): a daemon with `otlp_endpoint` exports a span per
//! call, and the W3C `traceparent` an agent host sends becomes the parent of the daemon's spans
//! whichever way it comes: gRPC metadata (a tonic client), an HTTP header (REST), MCP
//! `params._meta` through `fsd-tools mcp` (the official MCP SDK), a JSON line's `_meta` and the
//! `TRACEPARENT` environment of `fsd-tools session` over gRPC-Web. Each call's span carries its
//! face, operation, mode and code, and has the queue wait and the worker's time as children;
//! no span carries the file's path or content. A collector that is down costs the calls nothing:
//! they answer, and the spans are counted as dropped in /metrics. A stop exports what is still
//! queued, waiting a bounded time for the collector. A collector behind TLS (the test PKI) that
//! asks for a client certificate and a token gets the spans of a daemon configured for it only.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use crate::pki;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::rest::{RestDaemon, free_port, http, python};
use serde_json::{Value, json};

/// The receiver, stopped (its stdin closed) when dropped.
struct Receiver {
    child: Child,
    port: u16,
    out: PathBuf,
}

impl Receiver {
    fn start(dir: &Path) -> Receiver {
        Receiver::start_with(dir, &[])
    }

    /// With the script's options (`--tls CERT KEY`, `--client-ca CA`, `--require-header N V`).
    fn start_with(dir: &Path, options: &[&std::ffi::OsStr]) -> Receiver {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("python").join("otlp_receiver.py");
        let out = dir.join("spans.jsonl");
        let mut child = Command::new(python())
            .arg(&script)
            .arg(&out)
            .args(options)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            // The refused handshakes are the point of a test, not news.
            .env("GRPC_VERBOSITY", "ERROR")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the OTLP receiver");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let port = line.trim().strip_prefix("listening ").and_then(|p| p.parse().ok()).unwrap_or_else(|| {
            panic!("the OTLP receiver did not start (opentelemetry-proto and grpcio in FSD_TEST_PYTHON?): {line:?}")
        });
        Receiver { child, port, out }
    }

    fn spans(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(&self.out).unwrap_or_default();
        text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    }

    /// The spans of `trace` once its server spans each have their queue and worker children
    /// (spans are exported as they end; the deadline only bounds a failure).
    fn trace(&self, trace: &str, servers: usize) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let spans: Vec<Value> = self.spans().into_iter().filter(|s| s["trace_id"] == trace).collect();
            let server: Vec<&Value> = spans.iter().filter(|s| s["kind"] == 2).collect();
            let complete = server.iter().all(|s| {
                let children = spans.iter().filter(|c| c["parent_span_id"] == s["span_id"]).count();
                children >= 2
            });
            if server.len() >= servers && complete {
                return spans;
            }
            assert!(Instant::now() < deadline, "trace {trace}: {spans:#?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

/// A traceparent of its own per way in: trace id `..{n}`, parent span id `..{n}`.
fn traceparent(n: u8) -> (String, String, String) {
    let trace = format!("{:032x}", 0x4bf92f3577b34da6a3ce929d0e0e0000u128 + u128::from(n));
    let parent = format!("{:016x}", 0x00f067aa0ba90200u64 + u64::from(n));
    (format!("00-{trace}-{parent}-01"), trace, parent)
}

/// The spans of one way in: every server span is a child of the host's span, names the face,
/// an operation, a mode and `ok`, and has an `fsd.queue` and an `fsd.worker` child.
fn check_trace(spans: &[Value], parent: &str, face: &str, name: &str, tool: Option<&str>) {
    let server: Vec<&Value> = spans.iter().filter(|s| s["kind"] == 2).collect();
    assert!(server.iter().any(|s| s["name"] == name), "{face}: no span {name:?} in {spans:#?}");
    for span in &server {
        let a = &span["attributes"];
        assert_eq!(span["parent_span_id"], parent, "{face}: {span:#}");
        assert_eq!(span["service"], "fsd", "{span:#}");
        assert_eq!(a["fsd.face"], face, "{span:#}");
        assert_eq!(a["fsd.code"], "ok", "{span:#}");
        assert!(
            a["fsd.op"].is_string() && a["fsd.mode"].is_string() && a["fsd.client"].is_string(),
            "{span:#}"
        );
        assert_eq!(a["gen_ai.tool.name"].as_str(), tool, "{face}: {span:#}");
        for child in ["fsd.queue", "fsd.worker"] {
            let found = spans.iter().find(|c| c["parent_span_id"] == span["span_id"] && c["name"] == child);
            let found = found.unwrap_or_else(|| panic!("{face}: no {child} under {span:#}"));
            assert_eq!(found["kind"], 1, "internal: {found:#}");
            assert_eq!(found["attributes"]["fsd.mode"], a["fsd.mode"], "{found:#}");
            let (start, end) = (found["start"].as_u64().unwrap(), found["end"].as_u64().unwrap());
            assert!(start <= end && span["start"].as_u64().unwrap() <= start, "{found:#} in {span:#}");
        }
    }
}

#[test]
fn a_hosts_traceparent_becomes_the_parent_of_the_daemons_spans() {
    let dir = tempfile::tempdir().unwrap();
    let receiver = Receiver::start(dir.path());
    // Every call without a caller's decision is traced too (the default samples a tenth).
    let config =
        format!("otlp_endpoint = \"http://127.0.0.1:{}\"\ntrace_sample_ratio = 1.0\n", receiver.port);
    let daemon = RestDaemon::start(&config, &[]);
    std::fs::write(daemon.path("notes.txt"), "alpha secret-line\n").unwrap();
    let socket = daemon.dir.path().join("fsd.sock");
    let notes = daemon.path("notes.txt").to_str().unwrap().to_owned();

    // A caller that decided not to sample (flags 00): no span, whatever the ratio. Made first,
    // so its spans, had there been any, would be exported before those checked below.
    let (mut unsampled, unsampled_trace, _) = traceparent(11);
    unsampled.replace_range(unsampled.len() - 2.., "00");
    let answer = http(daemon.port, "GET", "/v1/files/notes.txt", &[("traceparent", &unsampled)], b"");
    assert_eq!(answer.status, 200, "{}", String::from_utf8_lossy(&answer.body));

    // gRPC: the traceparent in the call's metadata.
    let (grpc_parent, grpc_trace, grpc_span) = traceparent(1);
    {
        use fsd_tool_client::connect::{self, Endpoint};
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let (mut client, _) = connect::connect(&Endpoint::Unix(socket.clone())).await.unwrap();
            let mut request = tonic::Request::new(fsd_proto::v1::ReadTextRequest {
                path: notes.clone(),
                ..Default::default()
            });
            request.metadata_mut().insert("traceparent", grpc_parent.parse().unwrap());
            let reply = client.read_text(request).await.unwrap().into_inner();
            assert_eq!(reply.text, "alpha secret-line\n");
        });
    }

    // REST: the traceparent header.
    let (rest_parent, rest_trace, rest_span) = traceparent(2);
    let answer = http(daemon.port, "GET", "/v1/files/notes.txt", &[("traceparent", &rest_parent)], b"");
    assert_eq!(answer.status, 200, "{}", String::from_utf8_lossy(&answer.body));

    // MCP: `params._meta.traceparent` of a tools/call, through `fsd-tools mcp`.
    let (mcp_parent, mcp_trace, mcp_span) = traceparent(3);
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("mcp").join("traced.py");
    let status = Command::new(python())
        .arg(&script)
        .args(["--fsd-tools".as_ref(), common::tools_bin().as_os_str()])
        .args(["--socket".as_ref(), socket.as_os_str()])
        .args(["--root".as_ref(), daemon.root.as_os_str()])
        .args(["--traceparent", &mcp_parent])
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .status()
        .unwrap();
    assert!(status.success(), "tests/mcp/traced.py failed ({status})");

    // JSON lines: a line's `_meta`, on the Unix socket (gRPC).
    let (line_parent, line_trace, line_span) = traceparent(4);
    let endpoint = format!("unix:{}", socket.display());
    let mut session = common::ToolSession::start(&endpoint, &daemon.root, None);
    let line = json!({"id": 1, "tool": "read", "args": {"file_path": "notes.txt"}, "_meta": {"traceparent": line_parent}});
    let reply = session.raw(&line.to_string());
    assert!(!reply.is_error(), "{}", reply.text());
    let untraced = session.read("notes.txt");
    assert!(!untraced.is_error(), "{}", untraced.text());
    session.finish();

    // The environment of `fsd-tools session`, over gRPC-Web on the HTTP listener.
    let (env_parent, env_trace, env_span) = traceparent(5);
    let web = format!("http://127.0.0.1:{}", daemon.port);
    let root = daemon.root.to_str().unwrap();
    let mut session = common::ToolSession::start_args(
        &["--endpoint", &web, "--cwd", root],
        &[("TRACEPARENT", &env_parent)],
    );
    let reply = session.read("notes.txt");
    assert!(!reply.is_error(), "{}", reply.text());
    session.finish();

    let grpc = receiver.trace(&grpc_trace, 1);
    check_trace(&grpc, &grpc_span, "grpc", "fsd.v1.Fsd/ReadText", None);
    let server = grpc.iter().find(|s| s["kind"] == 2).unwrap();
    assert_eq!(server["attributes"]["rpc.system"], "grpc", "{server:#}");
    assert_eq!(server["attributes"]["rpc.method"], "ReadText", "{server:#}");
    assert_eq!(server["attributes"]["fsd.op"], "readText", "{server:#}");

    let rest = receiver.trace(&rest_trace, 1);
    check_trace(&rest, &rest_span, "rest", "GET /v1/files/{path}", None);
    let server = rest.iter().find(|s| s["kind"] == 2).unwrap();
    assert_eq!(server["attributes"]["http.route"], "/v1/files/{path}", "{server:#}");
    assert_eq!(server["attributes"]["http.request.method"], "GET", "{server:#}");

    check_trace(&receiver.trace(&mcp_trace, 1), &mcp_span, "grpc", "fsd.v1.Fsd/ReadText", Some("read"));
    check_trace(&receiver.trace(&line_trace, 1), &line_span, "grpc", "fsd.v1.Fsd/ReadText", Some("read"));
    check_trace(&receiver.trace(&env_trace, 1), &env_span, "grpc-web", "fsd.v1.Fsd/ReadText", Some("read"));

    // The untraced read of the JSON-lines session began a trace of its own (a root span).
    let spans = receiver.spans();
    let ours = [&grpc_trace, &rest_trace, &mcp_trace, &line_trace, &env_trace];
    assert!(
        spans.iter().any(|s| s["kind"] == 2
            && s["parent_span_id"] == ""
            && !ours.iter().any(|t| s["trace_id"] == **t)),
        "no root span of an untraced call: {spans:#?}"
    );
    assert!(!spans.iter().any(|s| s["trace_id"] == unsampled_trace), "unsampled: {spans:#?}");
    // Neither the path nor the content is ever in a span.
    for span in &spans {
        let text = span.to_string();
        assert!(!text.contains("notes.txt") && !text.contains("secret-line"), "{span:#}");
    }
}

/// What a tool call costs in round trips, as the daemon's spans of its trace show: a read is
/// one ReadText; an apply_patch asks about its whole patch in one Inspect (however many
/// targets: three here), then makes its changes.
#[test]
fn a_tool_call_makes_the_fewest_daemon_calls() {
    let dir = tempfile::tempdir().unwrap();
    let receiver = Receiver::start(dir.path());
    let config =
        format!("otlp_endpoint = \"http://127.0.0.1:{}\"\ntrace_sample_ratio = 1.0\n", receiver.port);
    let daemon = RestDaemon::start(&config, &[]);
    std::fs::write(daemon.path("a.txt"), "one\ntwo\n").unwrap();
    std::fs::write(daemon.path("b.txt"), "three\n").unwrap();
    let endpoint = format!("unix:{}", daemon.dir.path().join("fsd.sock").display());
    let client = dir.path().join("client.toml");
    std::fs::write(&client, "applyPatch = true\n").unwrap();
    let mut session = common::ToolSession::start(&endpoint, &daemon.root, Some(&client));
    let traced = |session: &mut common::ToolSession, n: u8, tool: &str, args: Value| {
        let (parent, trace, _) = traceparent(n);
        let line = json!({"id": n, "tool": tool, "args": args, "_meta": {"traceparent": parent}});
        let reply = session.raw(&line.to_string());
        assert!(!reply.is_error(), "{tool}: {}", reply.text());
        trace
    };
    let read = traced(&mut session, 21, "read", json!({"file_path": "a.txt"}));
    assert!(!session.read("b.txt").is_error());
    let patch = "*** Begin Patch\n*** Update File: a.txt\n@@\n-two\n+2\n*** Delete File: b.txt\n*** Add File: c.txt\n+new\n*** End Patch";
    let patched = traced(&mut session, 22, "apply_patch", json!({"input": patch}));
    session.finish();
    assert_eq!(std::fs::read_to_string(daemon.path("a.txt")).unwrap(), "one\n2\n");
    assert!(!daemon.path("b.txt").exists());

    let calls = |trace: &str, servers: usize| {
        let mut spans: Vec<Value> =
            receiver.trace(trace, servers).into_iter().filter(|s| s["kind"] == 2).collect();
        spans.sort_by_key(|s| s["start"].as_u64());
        spans.iter().map(|s| s["name"].as_str().unwrap().to_owned()).collect::<Vec<_>>()
    };
    assert_eq!(calls(&read, 1), ["fsd.v1.Fsd/ReadText"]);
    assert_eq!(
        calls(&patched, 4),
        ["fsd.v1.Fsd/Inspect", "fsd.v1.Fsd/WriteText", "fsd.v1.Fsd/DeleteFile", "fsd.v1.Fsd/WriteText"],
    );
    let spans = receiver.trace(&patched, 4);
    let inspect = spans.iter().find(|s| s["name"] == "fsd.v1.Fsd/Inspect").unwrap();
    assert_eq!(inspect["attributes"]["fsd.op"], "inspect", "{inspect:#}");
    assert_eq!(inspect["attributes"]["gen_ai.tool.name"], "apply_patch", "{inspect:#}");
}

/// The exporter never holds a call up: with nothing listening at the collector's address, calls
/// answer as usual and their spans are counted as dropped (`export_failed`).
#[test]
fn a_collector_that_is_down_costs_the_calls_nothing() {
    let config = format!("otlp_endpoint = \"http://127.0.0.1:{}\"\ntrace_sample_ratio = 1.0\n", free_port());
    let daemon = RestDaemon::start(&config, &[]);
    std::fs::write(daemon.path("notes.txt"), "alpha\n").unwrap();
    for _ in 0..5 {
        let answer = http(daemon.port, "GET", "/v1/files/notes.txt", &[], b"");
        assert_eq!(answer.status, 200, "{}", String::from_utf8_lossy(&answer.body));
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let metrics = String::from_utf8(http(daemon.port, "GET", "/metrics", &[], b"").body).unwrap();
        let dropped = metrics
            .lines()
            .find_map(|l| l.strip_prefix("fsd_spans_dropped_total{reason=\"export_failed\"} "))
            .and_then(|v| v.parse::<u64>().ok());
        // Five calls, a server span and two children each.
        if dropped == Some(15) {
            break;
        }
        assert!(Instant::now() < deadline, "{metrics}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A daemon with an `http:` listener whose log (at info) goes to `dir/fsd.log`.
fn logged_daemon(dir: &Path, config: &str) -> (fsd_testkit::Daemon, u16, PathBuf) {
    let root = dir.join("ws");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("notes.txt"), "alpha\n").unwrap();
    let port = free_port();
    let log = dir.join("fsd.log");
    let daemon = common::launch()
        .listen(fsd_testkit::Listener::Http(format!("127.0.0.1:{port}")))
        .unix(dir.join("fsd.sock"))
        .writable_root(std::fs::canonicalize(&root).unwrap())
        .config(dir.join("fsd.toml"), config)
        .stderr(fsd_testkit::Stderr::Log(log.clone()))
        .env("FSD_LOG", "info")
        .start()
        .unwrap_or_else(|e| panic!("{e}"));
    (daemon, port, log)
}

/// The spans of calls answered right before a SIGTERM are exported before the daemon exits
/// (the export task sends what it holds once a second, so without the stop's flush they were
/// lost with the process).
#[test]
fn the_spans_of_calls_right_before_a_stop_reach_the_collector() {
    let dir = tempfile::tempdir().unwrap();
    let receiver = Receiver::start(dir.path());
    let config = format!("otlp_endpoint = \"http://127.0.0.1:{}\"\n", receiver.port);
    let (mut daemon, port, log) = logged_daemon(dir.path(), &config);
    let (parent, trace, span) = traceparent(6);
    const CALLS: usize = 20;
    for _ in 0..CALLS {
        let answer = http(port, "GET", "/v1/files/notes.txt", &[("traceparent", &parent)], b"");
        assert_eq!(answer.status, 200, "{}", String::from_utf8_lossy(&answer.body));
    }
    daemon.signal(rustix::process::Signal::TERM);
    let status = daemon.wait().unwrap();
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(status.success(), "{status}: {log}");
    // Read once: the receiver wrote every span before it answered the export.
    let spans: Vec<Value> = receiver.spans().into_iter().filter(|s| s["trace_id"] == trace).collect();
    let servers = spans.iter().filter(|s| s["kind"] == 2).count();
    assert_eq!((servers, spans.len()), (CALLS, 3 * CALLS), "{log}\n{spans:#?}");
    check_trace(&spans, &span, "rest", "GET /v1/files/{path}", None);
    assert!(!log.contains("trace spans not exported"), "{log}");
}

/// A collector that accepts connections but never answers holds the stop only for the flush's
/// bound: the daemon exits on its own (status 0, not killed at the end of `shutdown_grace`),
/// and the spans it could not send are counted and said in one line.
#[test]
fn a_collector_that_never_answers_does_not_hold_the_stop() {
    let dir = tempfile::tempdir().unwrap();
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = silent.local_addr().unwrap();
    // Accepts and keeps every connection, reading and writing nothing.
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in silent.incoming() {
            held.push(stream);
        }
    });
    let (mut daemon, port, log) = logged_daemon(
        dir.path(),
        &format!("otlp_endpoint = \"http://{address}\"\ntrace_sample_ratio = 1.0\n"),
    );
    for _ in 0..5 {
        let answer = http(port, "GET", "/v1/files/notes.txt", &[], b"");
        assert_eq!(answer.status, 200, "{}", String::from_utf8_lossy(&answer.body));
    }
    daemon.signal(rustix::process::Signal::TERM);
    let status = daemon.wait().unwrap();
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(status.success(), "{status}: {log}");
    // Five calls, a server span and two children each; none reached the collector.
    let line = log.lines().find(|l| l.contains("trace spans not exported at the stop"));
    let line = line.unwrap_or_else(|| panic!("no line for the lost spans: {log}"));
    assert!(line.contains("lost=15"), "{line}");
}

/// The count of `fsd_spans_dropped_total{reason="export_failed"}` once it is at least `least`.
fn export_failures(port: u16, least: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let metrics = String::from_utf8(http(port, "GET", "/metrics", &[], b"").body).unwrap();
        let dropped = metrics
            .lines()
            .find_map(|l| l.strip_prefix("fsd_spans_dropped_total{reason=\"export_failed\"} "))
            .and_then(|v| v.parse::<u64>().ok());
        if let Some(dropped) = dropped.filter(|d| *d >= least) {
            return dropped;
        }
        assert!(Instant::now() < deadline, "{metrics}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A collector that serves TLS, asks for a client certificate and wants an auth header gets the
/// spans of a daemon with `https://`, `otlp_ca`, `otlp_client_cert`/`otlp_client_key` and
/// `otlp_headers_file`; a daemon that trusts another CA, shows no certificate or sends another
/// token exports nothing (its spans are counted as failed exports).
#[test]
fn a_collector_behind_tls_with_a_client_certificate_and_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let collector_ca = pki::Ca::new(d, "collector-ca");
    let other_ca = pki::Ca::new(d, "other-ca");
    let client_ca = pki::Ca::new(d, "client-ca");
    let server = collector_ca.server("collector", &["collector.test"], &["127.0.0.1".parse().unwrap()]);
    let client = client_ca.client("fsd-client", "fsd");
    let token = "Bearer 7f3e-collector-token";
    let receiver = Receiver::start_with(
        d,
        &[
            "--tls".as_ref(),
            server.cert.as_os_str(),
            server.key.as_os_str(),
            "--client-ca".as_ref(),
            client_ca.cert.as_os_str(),
            "--require-header".as_ref(),
            "authorization".as_ref(),
            token.as_ref(),
        ],
    );
    let headers = d.join("headers");
    std::fs::write(&headers, format!("# the collector's token\nAuthorization: {token}\nx-tenant: fleet-a\n"))
        .unwrap();
    let wrong_token = d.join("wrong-headers");
    std::fs::write(&wrong_token, "authorization: Bearer another\n").unwrap();

    enum Want {
        Exported,
        Refused,
    }
    let cases = [
        ("everything right", &collector_ca.cert, Some(&client), &headers, Want::Exported),
        ("another CA", &other_ca.cert, Some(&client), &headers, Want::Refused),
        ("no client certificate", &collector_ca.cert, None, &headers, Want::Refused),
        ("another token", &collector_ca.cert, Some(&client), &wrong_token, Want::Refused),
    ];
    for (n, (what, ca, client, headers, want)) in cases.into_iter().enumerate() {
        let mut config = format!(
            "otlp_endpoint = \"https://127.0.0.1:{}\"\notlp_ca = {ca:?}\notlp_headers_file = {headers:?}\n",
            receiver.port
        );
        if let Some(client) = client {
            config += &format!("otlp_client_cert = {:?}\notlp_client_key = {:?}\n", client.cert, client.key);
        }
        let daemon = RestDaemon::start(&config, &[]);
        std::fs::write(daemon.path("notes.txt"), "alpha\n").unwrap();
        let (parent, trace, span) = traceparent(7 + n as u8);
        let answer = http(daemon.port, "GET", "/v1/files/notes.txt", &[("traceparent", &parent)], b"");
        assert_eq!(answer.status, 200, "{what}: {}", String::from_utf8_lossy(&answer.body));
        match want {
            Want::Exported => {
                check_trace(&receiver.trace(&trace, 1), &span, "rest", "GET /v1/files/{path}", None);
            }
            Want::Refused => {
                assert_eq!(export_failures(daemon.port, 3), 3, "{what}");
                let spans: Vec<Value> =
                    receiver.spans().into_iter().filter(|s| s["trace_id"] == trace).collect();
                assert!(spans.is_empty(), "{what}: {spans:#?}");
            }
        }
    }
}

/// `metrics = false`: nothing is kept, and /metrics says so with 404.
#[test]
fn metrics_can_be_turned_off() {
    let daemon = RestDaemon::start("metrics = false\n", &[]);
    std::fs::write(daemon.path("notes.txt"), "alpha\n").unwrap();
    assert_eq!(http(daemon.port, "GET", "/v1/files/notes.txt", &[], b"").status, 200);
    let answer = http(daemon.port, "GET", "/metrics", &[], b"");
    assert_eq!(answer.status, 404, "{}", String::from_utf8_lossy(&answer.body));
}
