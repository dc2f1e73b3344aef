//! What an operator meets on a normal day, against the real binary: a start that cannot work
//! exits 2 at once with one line naming the cause (in the configured log format) and leaves no
//! socket file behind; health tells
//! which modes are served; SIGTERM with a stuck worker stops within `shutdown_grace_ms`; plaintext
//! loopback TCP is the `tcp` identity, read-only unless configured; a listener on port 0 logs the
//! port it bound.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use crate::pki;

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fsd_proto::v1;
use fsd_tool_client::connect::{self, Endpoint};
use serde_json::{Value, json};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

/// Runs `fsd` with `args` (and `FSD_LOG` when given) and returns (exit code, stderr lines,
/// seconds taken). A daemon that does not exit within 10 s is killed and fails the test.
fn start_failure(args: &[&str], fsd_log: Option<&str>, uid: Option<u32>) -> (Option<i32>, Vec<String>, f64) {
    let mut cmd = common::fsd_command();
    cmd.args(args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
    match fsd_log {
        Some(v) => cmd.env("FSD_LOG", v),
        None => cmd.env_remove("FSD_LOG"),
    };
    if let Some(uid) = uid {
        use std::os::unix::process::CommandExt;
        cmd.uid(uid).gid(uid);
    }
    let started = Instant::now();
    let (code, stderr) = run_to_exit(&mut cmd, Duration::from_secs(10), "a start that cannot work must fail");
    (code, stderr.lines().map(str::to_owned).collect(), started.elapsed().as_secs_f64())
}

/// Runs `cmd` (its stderr piped) until it exits: its exit code and stderr. One that runs past
/// `within` is killed and fails the test, saying `why` it should have stopped.
fn run_to_exit(cmd: &mut Command, within: Duration, why: &str) -> (Option<i32>, String) {
    let started = Instant::now();
    let mut child = cmd.spawn().expect("spawn fsd");
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if started.elapsed() > within {
            let _ = child.kill();
            let _ = child.wait();
            panic!("fsd {cmd:?} did not exit within {within:?}: {why}");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let mut stderr = String::new();
    child.stderr.take().expect("stderr").read_to_string(&mut stderr).expect("read stderr");
    (status.code(), stderr)
}

/// The message of one log line, in either format.
fn message(line: &str, json_format: bool) -> String {
    if json_format {
        let value: Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
        assert_eq!(value["level"], json!("ERROR"), "{line}");
        value["fields"]["message"].as_str().unwrap_or_else(|| panic!("no message: {line}")).to_owned()
    } else {
        assert!(!line.contains('\u{1b}'), "colour codes in a log that is not a terminal: {line:?}");
        line.split_once(" fsd: ")
            .map(|(_, m)| m.to_owned())
            .unwrap_or_else(|| panic!("not a fatal line: {line}"))
    }
}

#[test]
fn a_start_that_cannot_work_exits_2_with_one_line_naming_the_cause() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let file = dir.path().join("file");
    std::fs::write(&file, "x").unwrap();
    let link = dir.path().join("ws-link");
    std::os::unix::fs::symlink(&ws, &link).unwrap();
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy_port = busy.local_addr().unwrap().port();
    let socket = format!("unix:{}", dir.path().join("fsd.sock").display());
    let config = |name: &str, body: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, body).unwrap();
        path.display().to_string()
    };
    let bad_uid = config("uid.toml", "worker_uid = 4294967295\n");
    let big_reads = config("reads.toml", "max_read_bytes = 104857600\n");
    let no_submount = config("submount.toml", "allow_submounts = [\"/does/not/exist\"]\n");
    let bad_key = config("key.toml", "escalation = \"signed\"\napprover_public_key = \"abc\"\n");
    let no_time = config("zero.toml", "call_timeout_ms = 0\n");
    let no_ttl = config("ttl.toml", "escalation_ttl_secs = 0\n");
    let no_reads = config("no-reads.toml", "max_read_bytes = 0\n");
    let bad_syntax = config("bad.toml", "workers_per_mode = 2\nmax_mode = read-only\n");
    let no_cert = config(
        "tls.toml",
        &format!(
            "tls_cert = \"/does/not/exist.pem\"\ntls_key = \"/does/not/exist.key\"\n[tokens.ci]\nsha256 = \"{}\"\n",
            "0".repeat(64)
        ),
    );
    // A key that belongs to another certificate, and a "key" file that holds a certificate.
    let ca = pki::Ca::new(dir.path(), "ca");
    let server = ca.server("server", &["localhost"], &["127.0.0.1".parse().unwrap()]);
    let client = ca.client("client", "agent");
    let tls = |name: &str, cert: &Path, key: &Path| {
        config(
            name,
            &format!(
                "tls_cert = \"{}\"\ntls_key = \"{}\"\ntls_client_ca = \"{}\"\n",
                cert.display(),
                key.display(),
                ca.cert.display()
            ),
        )
    };
    let wrong_key = tls("wrong-key.toml", &server.cert, &client.key);
    let cert_as_key = tls("cert-as-key.toml", &server.cert, &server.cert);
    let p = |path: &Path| path.display().to_string();
    // The usual start, with one of the configs above.
    let with_config = |config: &str| -> Vec<String> {
        vec![
            "--listen".into(),
            socket.clone(),
            "--writable-root".into(),
            p(&ws),
            "--config".into(),
            config.into(),
        ]
    };
    let cases: Vec<(Vec<String>, Option<&str>, String)> = vec![
        (
            vec!["--listen".into(), socket.clone(), "--writable-root".into(), "/does/not/exist".into()],
            None,
            "writable root /does/not/exist does not exist".into(),
        ),
        (
            vec!["--listen".into(), socket.clone(), "--readable-root".into(), p(&file)],
            None,
            format!("readable root {} is not a directory", p(&file)),
        ),
        // One directory named twice, under another spelling or through a link.
        (
            vec![
                "--listen".into(),
                socket.clone(),
                "--writable-root".into(),
                p(&ws),
                "--writable-root".into(),
                format!("{}/", p(&ws)),
            ],
            None,
            format!("writable root {}/ is the same directory as writable root {}: list each root once", p(&ws), p(&ws)),
        ),
        (
            vec!["--listen".into(), socket.clone(), "--writable-root".into(), p(&ws), "--readable-root".into(), p(&link)],
            None,
            format!("readable root {} is the same directory as writable root {}: list each root once", p(&link), p(&ws)),
        ),
        // One socket listed twice: the second bind's "File exists" named no cause.
        (
            vec!["--listen".into(), socket.clone(), "--listen".into(), socket.clone(), "--writable-root".into(), p(&ws)],
            None,
            format!("listen {socket} is the same socket path as listen {socket}: list each listener once"),
        ),
        (
            vec!["--listen".into(), "unix:/does/not/exist/fsd.sock".into(), "--writable-root".into(), p(&ws)],
            None,
            "cannot listen on unix:/does/not/exist/fsd.sock: the socket directory /does/not/exist does not exist"
                .into(),
        ),
        (
            vec!["--listen".into(), "http+unix:/does/not/exist/fsd.sock".into(), "--writable-root".into(), p(&ws)],
            None,
            "cannot listen on http+unix:/does/not/exist/fsd.sock: the socket directory /does/not/exist does not exist"
                .into(),
        ),
        (
            with_config(&big_reads),
            None,
            "max_message_bytes 83886080 is too small for max_read_bytes 104857600: a message carries the whole \
             file plus 1 MiB of framing, so set max_message_bytes to at least 105906176"
                .into(),
        ),
        (
            with_config(&no_submount),
            None,
            "allow_submounts /does/not/exist does not exist".into(),
        ),
        (
            with_config(&bad_key),
            None,
            "approver_public_key is not hex: Odd number of digits".into(),
        ),
        // A TLS file that cannot be read is named by its key.
        (
            vec!["--listen".into(), "tcp:127.0.0.1:0".into(), "--writable-root".into(), p(&ws), "--config".into(), no_cert],
            None,
            "TLS setup failed: cannot read tls_cert /does/not/exist.pem: I/O error: No such file or directory (os error 2)"
                .into(),
        ),
        (
            vec!["--listen".into(), "tcp:127.0.0.1:0".into(), "--writable-root".into(), p(&ws), "--config".into(), wrong_key],
            None,
            format!(
                "TLS setup failed: tls_key {} is not the key of the certificate in tls_cert {}",
                p(&client.key),
                p(&server.cert)
            ),
        ),
        (
            vec!["--listen".into(), "tcp:127.0.0.1:0".into(), "--writable-root".into(), p(&ws), "--config".into(), cert_as_key],
            None,
            format!("TLS setup failed: tls_key {} holds no private key", p(&server.cert)),
        ),
        // A zero time is refused, not quietly raised to 1 ms.
        (
            with_config(&no_time),
            None,
            "invalid call_timeout_ms: must be at least 1".into(),
        ),
        (
            with_config(&no_ttl),
            None,
            "invalid escalation_ttl_secs: must be at least 1".into(),
        ),
        (
            with_config(&no_reads),
            None,
            "invalid max_read_bytes: must be at least 1".into(),
        ),
        // A syntax error: one line with the file, line and column, not the toml crate's snippet.
        (
            with_config(&bad_syntax),
            None,
            format!("invalid config {bad_syntax}:2:12: string values must be quoted"),
        ),
        (
            vec!["--listen".into(), format!("tcp:127.0.0.1:{busy_port}"), "--writable-root".into(), p(&ws)],
            None,
            format!("cannot listen on tcp:127.0.0.1:{busy_port}: Address already in use (os error 98)"),
        ),
        (
            with_config(&bad_uid),
            None,
            "worker_uid/worker_gid 4294967295:0 cannot be used: 4294967295 means \"unchanged\" to the kernel".into(),
        ),
        (
            vec!["--listen".into(), socket.clone(), "--writable-root".into(), p(&ws)],
            Some("bogus"),
            "invalid FSD_LOG \"bogus\": \"bogus\" is not a level (trace, debug, info, warn, error, off); write LEVEL or TARGET=LEVEL".into(),
        ),
        (
            vec!["--listen".into(), socket.clone(), "--writable-root".into(), p(&ws)],
            Some("fsd=loud"),
            "invalid FSD_LOG \"fsd=loud\"".into(),
        ),
    ];
    for (args, fsd_log, want) in cases {
        for json_format in [false, true] {
            let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
            if json_format {
                args.extend(["--log-format", "json"]);
            }
            let (code, lines, secs) = start_failure(&args, fsd_log, None);
            println!("{args:?} FSD_LOG={fsd_log:?}: exit {code:?} after {secs:.3} s: {lines:?}");
            assert_eq!(code, Some(2), "{args:?}: {lines:?}");
            assert!(secs < 2.0, "{args:?} took {secs:.3} s to fail");
            assert_eq!(lines.len(), 1, "{args:?}: one line, the cause: {lines:?}");
            let got = message(&lines[0], json_format);
            assert!(got.starts_with(&want), "{args:?}: {got:?} does not start with {want:?}");
        }
    }
    drop(busy);
}

#[test]
fn a_start_that_fails_after_binding_leaves_no_socket_file_behind() {
    // The network process binds every listener, then opens the audit log, reads the TLS files
    // and binds the health port: a failure there used to leave the Unix socket files in place.
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let sockets = dir.path().join("sockets");
    std::fs::create_dir(&sockets).unwrap();
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy_port = busy.local_addr().unwrap().port();
    let config = |name: &str, body: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, body).unwrap();
        path.display().to_string()
    };
    // The audit log's signing key, as keygen writes it but left readable by everyone.
    let open_key = dir.path().join("audit.key");
    std::fs::write(&open_key, format!("{}\n", "7".repeat(64))).unwrap();
    std::fs::set_permissions(&open_key, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let cases = [
        (
            config("audit.toml", "audit_log = \"/does/not/exist/audit.jsonl\"\n"),
            "cannot open the audit log /does/not/exist/audit.jsonl: No such file or directory (os error 2)"
                .to_owned(),
        ),
        (
            config("health.toml", &format!("health_listen = \"tcp:127.0.0.1:{busy_port}\"\n")),
            format!(
                "cannot listen on health tcp:127.0.0.1:{busy_port}: Address already in use (os error 98)"
            ),
        ),
        (
            config(
                "tls.toml",
                &format!(
                    "tls_cert = \"/does/not/exist.pem\"\ntls_key = \"/does/not/exist.key\"\n[tokens.ci]\nsha256 = \"{}\"\n",
                    "0".repeat(64)
                ),
            ),
            "TLS setup failed: cannot read tls_cert /does/not/exist.pem".to_owned(),
        ),
        (
            config(
                "audit-key.toml",
                &format!(
                    "audit_log = \"{}\"\naudit_signing_key = \"{}\"\n",
                    dir.path().join("audit.jsonl").display(),
                    open_key.display()
                ),
            ),
            format!(
                "cannot use audit_signing_key: {} is readable by other users: a private key must be mode 0600",
                open_key.display()
            ),
        ),
    ];
    let grpc = format!("unix:{}", sockets.join("fsd.sock").display());
    let http = format!("http+unix:{}", sockets.join("http.sock").display());
    let ws = ws.display().to_string();
    for (config, want) in cases {
        let args = ["--listen", &grpc, "--listen", &http, "--writable-root", &ws, "--config", &config];
        let (code, lines, secs) = start_failure(&args, None, None);
        println!("{config}: exit {code:?} after {secs:.3} s: {lines:?}");
        assert_eq!(code, Some(2), "{config}: {lines:?}");
        assert_eq!(lines.len(), 1, "{config}: one line, the cause: {lines:?}");
        let got = message(&lines[0], false);
        assert!(got.starts_with(&want), "{config}: {got:?} does not start with {want:?}");
        // Neither socket file, nor the private directories they were bound in.
        let left: Vec<_> = std::fs::read_dir(&sockets).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert!(left.is_empty(), "{config}: a failed start left {left:?} in the socket directory");
    }
    drop(busy);
}

#[test]
fn a_config_that_asks_for_json_logs_reports_its_own_errors_in_json() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let config = dir.path().join("fsd.toml");
    std::fs::write(&config, "log_format = \"json\"\nworkers_per_mode = 0\n").unwrap();
    let socket = format!("unix:{}", dir.path().join("fsd.sock").display());
    let args =
        ["--listen", &socket, "--writable-root", ws.to_str().unwrap(), "--config", config.to_str().unwrap()];
    let (code, lines, secs) = start_failure(&args, None, None);
    println!("exit {code:?} after {secs:.3} s: {lines:?}");
    assert_eq!(code, Some(2), "{lines:?}");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(message(&lines[0], true), "workers_per_mode must be between 1 and 64");
}

#[test]
fn a_second_daemon_on_a_served_socket_says_only_that() {
    let daemon = common::Daemon::start();
    let socket = format!("unix:{}", daemon.socket.display());
    let root = daemon.root.display().to_string();
    let (code, lines, secs) = start_failure(&["--listen", &socket, "--writable-root", &root], None, None);
    println!("exit {code:?} after {secs:.3} s: {lines:?}");
    assert_eq!(code, Some(2), "{lines:?}");
    assert_eq!(lines.len(), 1, "one line, the cause: {lines:?}");
    assert_eq!(
        message(&lines[0], false),
        format!("another daemon already listens on {}", daemon.socket.display())
    );
    // The first daemon still serves.
    daemon.write("still.txt", "here\n");
    let reply = daemon.session().read("still.txt");
    assert!(!reply.is_error(), "{}", reply.json);
}

/// `fsd-tools call read a.txt` through `endpoint` exits 0 and shows the file's one line (`what`
/// names the case in a failure).
fn reads_a_through(endpoint: &str, what: &str) {
    let out = Command::new(common::tools_bin())
        .args(["call", "read", r#"{"file_path": "a.txt"}"#, "--endpoint", endpoint])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{what}: {text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("1: a"), "{what}: {text}");
}

#[test]
fn a_socket_path_longer_than_sun_path_is_served_reached_and_not_taken_over() {
    // The daemon binds through the directory's descriptor and publishes by a rename, so any
    // path length serves; but a connect by the long path fails at once: the tools could not
    // reach it, and a second daemon took the live socket for a stale one and replaced it. A
    // long name in a short directory is long through the directory's descriptor too.
    fn check(deep: &[String], name: &str) {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir(&ws).unwrap();
        std::fs::write(ws.join("a.txt"), "a\n").unwrap();
        let deep = deep.iter().fold(dir.path().to_path_buf(), |path, d| path.join(d));
        std::fs::create_dir_all(&deep).unwrap();
        let long = deep.join(name);
        assert!(long.as_os_str().len() > 108, "{}", long.display());
        let listen = format!("unix:{}", long.display());
        // The kit waits on the short socket; both are published together.
        let daemon = common::launch()
            .unix(dir.path().join("fsd.sock"))
            .args(["--listen", &listen])
            .writable_root(&ws)
            .start()
            .unwrap_or_else(|e| panic!("{e}"));
        reads_a_through(&listen, name);
        let (code, lines, secs) =
            start_failure(&["--listen", &listen, "--writable-root", ws.to_str().unwrap()], None, None);
        println!("exit {code:?} after {secs:.3} s: {lines:?}");
        assert_eq!(code, Some(2), "{name}: {lines:?}");
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert_eq!(
            message(&lines[0], false),
            format!("another daemon already listens on {}", long.display())
        );
        drop(daemon);
    }
    check(&["d".repeat(60), "e".repeat(60)], "fsd.sock");
    check(&[], &format!("{}.sock", "s".repeat(100)));
}

/// A start as uid 65534 (the test runs as root): a directory and a workspace it may use, a config
/// of `config`, a socket in the directory; the directory, the socket's address and the arguments.
fn nobody_start(config: &str) -> (tempfile::TempDir, String, [String; 6]) {
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        rustix::process::geteuid().as_raw(),
        0,
        "this test starts the daemon as uid 65534: run it as root"
    );
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    // The workers' own workspace, no one else's to write: the kernel's link protection guards
    // nothing there, so these starts do not depend on the machine's fs.protected_* settings.
    std::os::unix::fs::chown(&ws, Some(65534), Some(65534)).unwrap();
    std::fs::set_permissions(&ws, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = dir.path().join("fsd.toml");
    std::fs::write(&path, config).unwrap();
    let socket = format!("unix:{}", dir.path().join("fsd.sock").display());
    let args =
        ["--listen", &socket, "--writable-root", ws.to_str().unwrap(), "--config", path.to_str().unwrap()]
            .map(str::to_owned);
    (dir, socket, args)
}

#[test]
fn the_daemons_processes_are_out_of_reach_of_their_own_uid() {
    // An unprivileged daemon shares its uid with whatever else runs as that user (with a
    // private daemon, the agent itself), and its processes hold the keys and the roots'
    // descriptors. It changes no id, so the kernel left each dumpable: that uid could trace
    // them and read their memory and environment.
    use std::os::unix::process::CommandExt;
    let (dir, socket, _args) = nobody_start("");
    let ws = dir.path().join("ws");
    std::fs::write(ws.join("a.txt"), "a\n").unwrap();
    let daemon = common::launch()
        .wrapper(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"])
        .unix(dir.path().join("fsd.sock"))
        .writable_root(&ws)
        .start()
        .unwrap_or_else(|e| panic!("{e}"));
    reads_a_through(&socket, "the unprivileged daemon");
    let environ_as_nobody = |pid: u32| {
        Command::new("cat")
            .arg(format!("/proc/{pid}/environ"))
            .uid(65534)
            .gid(65534)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .unwrap()
    };
    // The check can allow: another process of that uid is open to it.
    let mut other = Command::new("sleep").arg("30").uid(65534).gid(65534).spawn().unwrap();
    let open = environ_as_nobody(other.id());
    other.kill().unwrap();
    other.wait().unwrap();
    assert!(open.status.success(), "{}", String::from_utf8_lossy(&open.stderr));
    let pids = daemon.pids();
    assert!(pids.len() >= 3, "the supervisor, the network process and a worker at least: {pids:?}");
    for pid in pids {
        let role = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let role = String::from_utf8_lossy(&role).replace('\0', " ");
        let out = environ_as_nobody(pid);
        assert!(!out.status.success(), "{pid} ({role}) is open to its own uid");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("Permission denied"), "{pid} ({role}): {stderr}");
    }
}

#[test]
fn a_live_socket_a_second_daemon_may_not_connect_to_is_not_taken_over() {
    // A daemon as root, its socket 0660 root:root in a directory anyone may write; a second
    // start as uid 65534 on the same path cannot connect (EACCES). That said nothing about
    // whether a daemon listens, yet it was taken for a stale socket: removed and replaced.
    let (dir, socket, args) = nobody_start("");
    let path = dir.path().join("fsd.sock");
    let ws = dir.path().join("ws");
    std::fs::write(ws.join("a.txt"), "a\n").unwrap();
    let daemon = common::launch().unix(&path).writable_root(&ws).start().unwrap_or_else(|e| panic!("{e}"));
    let before = std::fs::symlink_metadata(&path).map(|m| std::os::unix::fs::MetadataExt::ino(&m)).unwrap();
    let (code, lines, secs) = start_failure(&args.each_ref().map(String::as_str), None, Some(65534));
    println!("exit {code:?} after {secs:.3} s: {lines:?}");
    assert_eq!(code, Some(2), "{lines:?}");
    assert_eq!(lines.len(), 1, "{lines:?}");
    let path_shown = socket.trim_start_matches("unix:");
    assert_eq!(
        message(&lines[0], false),
        format!(
            "cannot tell whether another daemon listens on {path_shown} (connecting: Permission denied (os error 13)); remove it if none does"
        )
    );
    let after = std::fs::symlink_metadata(&path).map(|m| std::os::unix::fs::MetadataExt::ino(&m)).unwrap();
    assert_eq!(before, after, "the live socket was replaced");
    // The first daemon still serves on it.
    reads_a_through(&socket, "the first daemon");
    drop(daemon);
}

#[test]
fn a_worker_identity_the_daemon_cannot_take_is_a_start_error() {
    // An unprivileged daemon asked to run its workers as root: needs CAP_SETUID, has none.
    let (_dir, _socket, args) = nobody_start("worker_uid = 0\nworker_gid = 0\n");
    let (code, lines, secs) = start_failure(&args.each_ref().map(String::as_str), None, Some(65534));
    println!("exit {code:?} after {secs:.3} s: {lines:?}");
    assert_eq!(code, Some(2), "{lines:?}");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        message(&lines[0], false).starts_with(
            "worker_uid/worker_gid 0:0 cannot be used: the daemon runs as 65534:65534 without CAP_SETUID/CAP_SETGID"
        ),
        "{lines:?}"
    );
}

#[test]
fn a_root_the_workers_cannot_use_is_a_start_error() {
    // Before, each started cleanly and said SERVING; then every call beneath the root failed
    // (FS_PERMISSION_DENIED, "cannot create temporary file: Permission denied"). Asked as the
    // worker identity, ACLs and all, before anything is served.
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        rustix::process::geteuid().as_raw(),
        0,
        "this test's daemons run as root or 65534: run it as root"
    );
    // (root's mode, its parent's, how it is named, the daemon's uid (None: root), config, the
    // start line)
    type Case<'a> = (u32, u32, &'a str, Option<u32>, &'a str, &'a str);
    let cases: &[Case] = &[
        // A non-root daemon on a root-owned 0755 directory (its workers keep its uid).
        (
            0o755,
            0o777,
            "--writable-root",
            Some(65534),
            "",
            "writable root {ROOT}: the workers (uid 65534, gid 65534) may \
          not create files in it (Permission denied (os error 13); owner 0:0, mode 0755): every write would fail; \
          give them write access (chown or chmod), set worker_uid/worker_gid, or name it with --readable-root",
        ),
        // A root daemon whose worker identity may not enter a readable root.
        (
            0o700,
            0o777,
            "--readable-root",
            None,
            "worker_uid = 65534\nworker_gid = 65534\n",
            "readable root {ROOT}: the \
          workers (uid 65534, gid 65534) may not enter it (Permission denied (os error 13); owner 0:0, mode 0700): \
          change its permissions or set worker_uid/worker_gid",
        ),
        // ... nor a writable one.
        (
            0o700,
            0o777,
            "--writable-root",
            None,
            "worker_uid = 65534\nworker_gid = 65534\n",
            "writable root {ROOT}: the \
          workers (uid 65534, gid 65534) may not enter it (Permission denied (os error 13); owner 0:0, mode 0700): \
          change its permissions or set worker_uid/worker_gid",
        ),
        // A root in a parent they may not pass: the parent is named, not the root's mode (before:
        // "mode 0755 ... change its permissions", of the root).
        (
            0o755,
            0o700,
            "--writable-root",
            None,
            "worker_uid = 65534\nworker_gid = 65534\n",
            "writable root {ROOT}: the \
          workers (uid 65534, gid 65534) may not enter it: they may not pass its parent directory {PARENT} \
          (Permission denied (os error 13); owner 0:0, mode 0700): change that directory's permissions, move the \
          root, or set worker_uid/worker_gid",
        ),
    ];
    for (mode, parent_mode, flag, uid, config, want) in cases {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let parent = dir.path().join("parent");
        std::fs::create_dir(&parent).unwrap();
        std::fs::set_permissions(&parent, std::fs::Permissions::from_mode(*parent_mode)).unwrap();
        let root = parent.join("root");
        std::fs::create_dir(&root).unwrap();
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(*mode)).unwrap();
        let open = dir.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let path = dir.path().join("fsd.toml");
        std::fs::write(&path, config).unwrap();
        let socket = format!("unix:{}", dir.path().join("fsd.sock").display());
        let mut args =
            vec!["--listen", &socket, "--config", path.to_str().unwrap(), *flag, root.to_str().unwrap()];
        if *flag == "--readable-root" {
            args.extend(["--writable-root", open.to_str().unwrap()]);
        }
        let (code, lines, secs) = start_failure(&args, None, *uid);
        println!("exit {code:?} after {secs:.3} s: {lines:?}");
        assert_eq!(code, Some(2), "{lines:?}");
        assert_eq!(lines.len(), 1, "{lines:?}");
        let want =
            want.replace("{ROOT}", root.to_str().unwrap()).replace("{PARENT}", parent.to_str().unwrap());
        assert_eq!(message(&lines[0], false), want);
    }
}

#[test]
fn a_socket_group_the_daemon_may_not_give_names_socket_group() {
    // An unprivileged daemon outside the group: the bare "Operation not permitted" named no key.
    let (dir, socket, args) = nobody_start("socket_group = \"0\"\n");
    let (code, lines, secs) = start_failure(&args.each_ref().map(String::as_str), None, Some(65534));
    println!("exit {code:?} after {secs:.3} s: {lines:?}");
    assert_eq!(code, Some(2), "{lines:?}");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(
        message(&lines[0], false),
        format!(
            "cannot listen on {socket}: cannot give the socket to group 0 (socket_group): Operation not permitted \
             (os error 1); run the daemon as root or as a member of that group"
        )
    );
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left.len(), 2, "only ws and fsd.toml: {left:?}");
}

fn health(rt: &tokio::runtime::Runtime, socket: &Path, service: &str) -> ServingStatus {
    health_check(rt, socket, service).unwrap_or_else(|s| panic!("health {service:?}: {s}"))
}

fn health_check(
    rt: &tokio::runtime::Runtime,
    socket: &Path,
    service: &str,
) -> Result<ServingStatus, tonic::Status> {
    rt.block_on(async {
        let channel = connect::channel(&Endpoint::Unix(socket.to_owned())).await.expect("connect");
        let reply =
            HealthClient::new(channel).check(HealthCheckRequest { service: service.to_owned() }).await?;
        Ok(reply.into_inner().status())
    })
}

#[test]
fn health_names_each_mode_and_a_mode_given_up_turns_the_daemon_not_serving() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let daemon = common::Daemon::start();
    for name in ["", "fsd.v1.Fsd", "fsd.v1.Fsd/read-only", "fsd.v1.Fsd/workspace-write"] {
        assert_eq!(health(&rt, &daemon.socket, name), ServingStatus::Serving, "{name:?}");
    }
    drop(daemon);

    // Workers of danger-full-access fail at birth: the supervisor gives that mode up.
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let socket = dir.path().join("fsd.sock");
    let config = dir.path().join("fsd.toml");
    let _daemon = common::launch()
        .unix(&socket)
        .writable_root(&ws)
        .config(&config, "max_mode = \"danger-full-access\"\n")
        .env("FSD_LOG", "off")
        .env("FSD_FAULT_WORKER_FAILS", "danger-full-access")
        .start()
        .unwrap_or_else(|e| panic!("{e}"));
    let deadline = Instant::now() + Duration::from_secs(30);
    // The socket exists before the first health report: until then a mode is not registered.
    while health_check(&rt, &socket, "fsd.v1.Fsd/danger-full-access").ok() != Some(ServingStatus::NotServing)
    {
        assert!(Instant::now() < deadline, "danger-full-access never turned NOT_SERVING");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(health(&rt, &socket, ""), ServingStatus::NotServing);
    assert_eq!(health(&rt, &socket, "fsd.v1.Fsd"), ServingStatus::NotServing);
    assert_eq!(health(&rt, &socket, "fsd.v1.Fsd/read-only"), ServingStatus::Serving);
    assert_eq!(health(&rt, &socket, "fsd.v1.Fsd/workspace-write"), ServingStatus::Serving);
}

/// A daemon whose every mode is given up (workers of each keep failing at start) does not run
/// on serving nothing: it stops with exit status 2, its last line naming the cause.
#[test]
fn a_daemon_whose_every_mode_is_given_up_stops_with_status_2() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let socket = format!("unix:{}", dir.path().join("fsd.sock").display());
    let mut cmd = common::fsd_command();
    cmd.args(["--listen", &socket, "--writable-root", ws.to_str().unwrap()])
        .env("FSD_FAULT_WORKER_FAILS", "read-only,workspace-write")
        .env("FSD_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let (code, stderr) = run_to_exit(&mut cmd, Duration::from_secs(60), "a daemon serving nothing must stop");
    assert_eq!(code, Some(2), "{stderr}");
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.contains("no mode can be served: ") && last.contains("workers keep exiting at start"),
        "{stderr}"
    );
}

#[test]
fn sigterm_with_a_stuck_worker_stops_within_the_shutdown_grace() {
    let grace_ms = 2000;
    // The read hangs in a worker, not in a direct read thread (`direct_reads = false`).
    let mut daemon =
        common::Daemon::start_with(&[], &format!("shutdown_grace_ms = {grace_ms}\ndirect_reads = false\n"));
    daemon.write("fsd-fault-hang", "x");
    // A read that never returns: the worker is stuck in it.
    let mut session = daemon.session();
    let hung = std::thread::spawn(move || {
        let reply = session.call("read", json!({"file_path": "fsd-fault-hang"}));
        drop(session);
        reply
    });
    std::thread::sleep(Duration::from_millis(500));
    let started = Instant::now();
    let status = daemon.terminate();
    let secs = started.elapsed().as_secs_f64();
    println!("SIGTERM with a stuck worker: exit {status} after {secs:.3} s (shutdown_grace_ms = {grace_ms})");
    assert!(status.success(), "{status}");
    // The grace plus process teardown; the old behaviour took 30 s and more.
    assert!(secs < f64::from(grace_ms) / 1000.0 + 1.5, "SIGTERM took {secs:.3} s");
    let reply = hung.join().unwrap();
    assert!(reply.is_error(), "{}", reply.json);
}

/// `hello` over a client that connects to `endpoint`.
fn hello_over(rt: &tokio::runtime::Runtime, endpoint: &Endpoint) -> v1::HelloReply {
    rt.block_on(connect::connect(endpoint))
        .map(|(_, hello)| hello)
        .unwrap_or_else(|e| panic!("hello over {endpoint}: {e}"))
}

#[test]
fn plaintext_loopback_tcp_is_the_tcp_identity_read_only_unless_configured() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    for (config, want) in [
        ("", v1::Mode::ReadOnly),
        ("[client_max_modes]\ntcp = \"workspace-write\"\n", v1::Mode::WorkspaceWrite),
    ] {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let daemon = common::Daemon::start_with(&["--listen", &format!("tcp:127.0.0.1:{port}")], config);
        let tcp = hello_over(&rt, &Endpoint::Tcp(format!("127.0.0.1:{port}")));
        assert_eq!(tcp.max_mode(), want, "{config:?}");
        // The Unix socket's peer is still its uid, at the daemon's max_mode.
        let unix = hello_over(&rt, &Endpoint::Unix(daemon.socket.clone()));
        assert_eq!(unix.max_mode(), v1::Mode::WorkspaceWrite, "{config:?}");
        // A write over plaintext TCP is refused without the entry.
        let out = Command::new(common::tools_bin())
            .args(["call", "write", r#"{"file_path": "t.txt", "content": "x\n"}"#])
            .arg("--endpoint")
            .arg(format!("tcp:127.0.0.1:{port}"))
            .arg("--cwd")
            .arg(&daemon.root)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        if want == v1::Mode::ReadOnly {
            assert_eq!(out.status.code(), Some(1), "{text}");
            assert!(!daemon.path("t.txt").exists());
        } else {
            assert_eq!(out.status.code(), Some(0), "{text}");
            assert_eq!(daemon.read("t.txt"), b"x\n");
        }
    }
}

#[test]
fn a_tcp_listener_on_port_0_logs_the_port_it_bound_and_plaintext_is_a_warning() {
    use std::io::BufRead;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let socket = dir.path().join("fsd.sock");
    let mut daemon = common::launch()
        .unix(&socket)
        .writable_root(&ws)
        .args(["--listen", "tcp:127.0.0.1:0", "--listen", "http:127.0.0.1:0", "--log-format", "json"])
        .env("FSD_LOG", "info")
        .stderr(fsd_testkit::Stderr::Piped)
        .start()
        .unwrap_or_else(|e| panic!("{e}"));
    let mut lines = std::io::BufReader::new(daemon.take_stderr().unwrap()).lines();
    let mut named = Vec::new();
    while named.len() < 2 {
        let line = lines.next().expect("the log ended before both listeners were named").unwrap();
        let value: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        if let Some(listen) = value["fields"]["listen"].as_str().filter(|l| l.contains("127.0.0.1:")) {
            named.push(listen.to_owned());
            // Plaintext loopback, gRPC or HTTP: every local user may connect, as `tcp`.
            assert_eq!(value["level"], json!("WARN"), "{line}");
            assert_eq!(value["fields"]["identity"], json!("tcp"), "{line}");
            assert_eq!(value["fields"]["max_mode"], json!("read-only"), "{line}");
        }
    }
    for listen in &named {
        let port: u16 = listen.rsplit_once(':').unwrap().1.parse().unwrap();
        assert_ne!(port, 0, "{listen}: the log names the bound port, not 0");
    }
    assert!(named.iter().any(|l| l.starts_with("http:")), "{named:?}");
    // The logged port is the one that answers.
    let tcp = named.iter().find_map(|l| l.strip_prefix("tcp:")).expect("the tcp listener's line");
    let hello = hello_over(&rt, &Endpoint::Tcp(tcp.to_owned()));
    assert_eq!(hello.protocol_version, fsd_proto::PROTOCOL_VERSION);
    // The client's connection closes with its runtime, so the stop need not wait it out.
    drop(rt);
    daemon.signal(rustix::process::Signal::TERM);
    for line in lines {
        drop(line);
    }
    assert!(daemon.wait().unwrap().success());
}

#[test]
fn json_logs_are_json_on_every_line_with_json_field_values() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let socket = dir.path().join("fsd.sock");
    let mut daemon = common::launch()
        .unix(&socket)
        .writable_root(&ws)
        .args(["--log-format", "json"])
        .env("FSD_LOG", "info")
        .stderr(fsd_testkit::Stderr::Piped)
        .start()
        .unwrap_or_else(|e| panic!("{e}"));
    let mut pipe = daemon.take_stderr().unwrap();
    daemon.signal(rustix::process::Signal::TERM);
    let mut stderr = String::new();
    pipe.read_to_string(&mut stderr).unwrap();
    assert!(daemon.wait().unwrap().success());
    let lines: Vec<Value> = stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let root = lines.iter().find(|l| l["fields"]["message"] == json!("root")).expect("a root line");
    assert_eq!(root["fields"]["root"], json!(ws.display().to_string()));
    assert_eq!(root["fields"]["writable"], json!(true), "a boolean, not a debug string");
    assert!(lines.iter().any(|l| l["fields"]["message"] == json!("stopped")), "{stderr}");
}

/// `fsd-tools call read` against `endpoint` (as `uid` when given): exit code and stderr.
fn call_against(endpoint: &str, uid: Option<u32>) -> (Option<i32>, String) {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(common::tools_bin());
    cmd.args(["call", "read", r#"{"file_path": "/x"}"#, "--endpoint", endpoint]).current_dir("/");
    if let Some(uid) = uid {
        cmd.uid(uid).gid(uid);
    }
    let out = cmd.output().unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stderr).trim_end().to_owned())
}

#[test]
fn client_errors_name_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.sock");
    let stale = dir.path().join("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let cases = [
        (
            format!("unix:{}", missing.display()),
            format!(
                "fsd-tools: no daemon at unix:{0}: the socket {0} does not exist (is fsd running with --listen unix:{0}?)",
                missing.display()
            ),
        ),
        (
            format!("unix:{}", stale.display()),
            format!(
                "fsd-tools: no daemon at unix:{0}: nothing listens on the socket {0} (the daemon stopped)",
                stale.display()
            ),
        ),
        (
            format!("tcp:127.0.0.1:{port}"),
            format!(
                "fsd-tools: no daemon at tcp:127.0.0.1:{port}: the connection was refused (nothing listens on that port)"
            ),
        ),
    ];
    for (endpoint, want) in cases {
        let (code, stderr) = call_against(&endpoint, None);
        assert_eq!((code, stderr.as_str()), (Some(2), want.as_str()), "{endpoint}");
    }

    // A socket this user may not open: whose it is, and who asks.
    let daemon = common::Daemon::start();
    let endpoint = daemon.endpoint();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(daemon.dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let (code, stderr) = call_against(&endpoint, Some(65534));
    assert_eq!(code, Some(2), "{stderr}");
    assert_eq!(
        stderr,
        format!(
            "fsd-tools: permission denied on the socket of {endpoint}: this user (nobody (uid 65534)) may not search a directory above {}",
            daemon.socket.display()
        )
    );
    std::fs::set_permissions(daemon.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let (code, stderr) = call_against(&endpoint, Some(65534));
    assert_eq!(code, Some(2), "{stderr}");
    assert_eq!(
        stderr,
        format!(
            "fsd-tools: permission denied on the socket of {endpoint}: it belongs to root (uid 0) and group root (gid 0) \
             (mode 0660) and this user (nobody (uid 65534)) is neither; add this user to the group, or run as the owner"
        )
    );
}

#[test]
fn a_client_config_error_is_one_line_naming_the_file_line_and_column() {
    // As the daemon's: the toml crate's own rendering was a five-line snippet with a caret.
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "unknown.toml",
            "readLimit = 10\nbogus = 1\n",
            ":2:1: unknown field `bogus`, expected one of `read`, ",
        ),
        ("type.toml", "readLimit = \"ten\"\n", ":1:13: invalid type: string \"ten\", expected u64"),
    ];
    for (name, body, want) in cases {
        let path = dir.path().join(name);
        std::fs::write(&path, body).unwrap();
        let output = Command::new(common::tools_bin())
            .args(["schemas", "--config", path.to_str().unwrap()])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        println!("{name}: {stderr}");
        assert_eq!(output.status.code(), Some(2), "{name}: {stderr}");
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{name}: one line: {lines:?}");
        let head = format!("fsd-tools: invalid config {}{want}", path.display());
        assert!(lines[0].starts_with(&head), "{name}: {:?} does not start with {head:?}", lines[0]);
    }
}

#[test]
fn doctor_says_what_the_daemon_serves_and_checks_a_client_config() {
    let daemon = common::Daemon::start();
    let config = daemon.dir.path().join("client.toml");
    std::fs::write(&config, "escalationPrompt = true\n").unwrap();
    let out = Command::new(common::tools_bin())
        .args(["doctor", &daemon.endpoint(), "--config", config.to_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], format!("daemon at {}", daemon.endpoint()));
    assert!(lines[1].starts_with("  version 0.1.0 (protocol "), "{text}");
    assert_eq!(lines[2], format!("  root {} (writable)", daemon.root.display()));
    assert!(
        text.contains("  default mode workspace-write, highest mode for this client workspace-write\n"),
        "{text}"
    );
    assert!(text.contains("  mode workspace-write: served, fence "), "{text}");
    assert!(text.contains("  mode danger-full-access: NOT served"), "{text}");
    assert!(text.contains("  escalation: deny (no call runs above the default mode)\n"), "{text}");
    assert!(
        text.contains("  warning: an approver is configured, but the daemon denies every escalation"),
        "{text}"
    );
}

#[test]
fn doctor_at_a_health_port_says_that_is_not_the_daemons_listener() {
    let port = common::rest::free_port();
    let daemon = common::Daemon::start_with(&[], &format!("health_listen = \"tcp:127.0.0.1:{port}\"\n"));
    let out = Command::new(common::tools_bin())
        .args(["doctor", &format!("tcp:127.0.0.1:{port}")])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(
        stderr.trim_end(),
        format!(
            "fsd-tools: the server at tcp:127.0.0.1:{port} speaks gRPC but not fsd.v1 (a daemon's health_listen \
             port, or another service): point the client at one of the daemon's listen addresses (Unimplemented: )"
        )
    );
    drop(daemon);
}
