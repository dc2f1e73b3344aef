//! The daemon's and the CLI's lifecycle: SIGTERM, SIGINT and SIGHUP exit 0 and remove the socket; `fsd-tools call`
//! exit codes (0 success, 1 tool error, 2 usage or unreachable daemon); the embedded daemon of
//! `--root` serves the call and leaves no socket directory behind; a restart waits for a
//! predecessor that is still exiting instead of taking its listener for a live daemon; the
//! journal's anchor attribute is held on writable roots while a daemon serves them; the process
//! role is one of three, and a child takes no configuration flag.

use crate::common;

use std::io::BufRead;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;

#[test]
fn a_stop_signal_exits_zero_and_removes_the_socket() {
    use rustix::process::Signal;
    // SIGHUP too (a closed terminal, an operator expecting a reload): its default action killed
    // the supervisor alone, leaving the socket file and no log line.
    for signal in [Signal::TERM, Signal::INT, Signal::HUP] {
        let mut d = Daemon::start();
        assert!(d.socket.exists());
        // A session that has finished its work does not keep the daemon from stopping.
        d.write("a.txt", "a\n");
        let mut s = d.session();
        assert!(!s.read("a.txt").is_error());
        assert!(s.finish().success());
        let processes = d.pids();
        d.process.signal(signal);
        let status = d.process.wait().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(status.code(), Some(0), "{signal:?}: {status}");
        assert!(!d.socket.exists(), "{signal:?}: the socket file is removed");
        // No process of the daemon outlives it (a zombie awaiting its reaper counts as gone).
        fsd_testkit::procs::wait_gone(&processes[1..], Duration::from_secs(10), "the daemon")
            .unwrap_or_else(|e| panic!("{signal:?}: {e}"));
    }
}

#[test]
fn a_signal_sent_to_the_network_process_stops_the_daemon_as_a_failure() {
    use std::io::Read;
    // An operator who signals the wrong pid: the daemon stopped serving, exited 0 (so
    // `Restart=on-failure` left it down) and logged "cannot replace worker" for each worker.
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let socket = dir.path().join("fsd.sock");
    let mut daemon = launch()
        .unix(&socket)
        .writable_root(&ws)
        .env("FSD_LOG", "info")
        .stderr(fsd_testkit::Stderr::Piped)
        .start()
        .unwrap_or_else(|e| panic!("{e}"));
    let supervisor = daemon.pid();
    let processes = daemon.pids();
    let network: Vec<u32> =
        processes.iter().copied().filter(|&p| fsd_testkit::role(p).as_deref() == Some("network")).collect();
    assert_eq!(network.len(), 1, "one network process among {processes:?}");
    // Signalled once it logs "listening", so with its handlers installed (a signal in the
    // moment before is its default action: also exit 2, saying how it ended).
    let mut pipe = std::io::BufReader::new(daemon.take_stderr().unwrap());
    let mut stderr = String::new();
    while !stderr.contains("listening") {
        assert_ne!(pipe.read_line(&mut stderr).unwrap(), 0, "the log ended before listening: {stderr}");
    }
    fsd_testkit::kill(network[0], rustix::process::Signal::TERM);
    pipe.read_to_string(&mut stderr).unwrap();
    let status = daemon.wait().unwrap();
    assert_eq!(status.code(), Some(2), "{status}: {stderr}");
    let loud: Vec<&str> = stderr.lines().filter(|l| !l.contains(" INFO ")).collect();
    let want = format!(
        "ERROR fsd: the network process stopped (exit status: 0) without the supervisor asking, so the \
         daemon stops; to stop fsd, signal the supervisor (pid {supervisor})"
    );
    assert_eq!(loud.len(), 1, "one line, the cause: {stderr}");
    assert!(loud[0].ends_with(&want), "{:?} does not end with {want:?}", loud[0]);
    assert!(!socket.exists(), "the socket file is removed");
    fsd_testkit::procs::wait_gone(&processes[1..], Duration::from_secs(10), "the daemon").unwrap();
}

/// Runs `fsd-tools` with these arguments, stdin closed, TMPDIR set to `tmp`.
fn tools(args: &[&str], tmp: &Path) -> Output {
    Command::new(tools_bin())
        .args(args)
        .env("TMPDIR", tmp)
        .env("FSD_LOG", "warn")
        .stdin(Stdio::null())
        .output()
        .expect("run fsd-tools")
}

#[test]
fn call_exit_codes() {
    let d = Daemon::start();
    d.write("a.txt", "alpha\n");
    let tmp = tempfile::tempdir().unwrap();
    let endpoint = d.endpoint();
    let root = d.root.display().to_string();
    let missing_socket = format!("unix:{}", d.dir.path().join("nobody.sock").display());
    let p = d.path("a.txt");
    // (arguments, exit code, exact stdout or None when only the code matters)
    let cases: Vec<(Vec<&str>, i32, Option<String>)> = vec![
        (
            vec!["call", "read", r#"{"file_path": "a.txt"}"#, "--endpoint", &endpoint, "--cwd", &root],
            0,
            Some(format!("{}\n", envelope(&p, &["1: alpha"], "(End of file - total 1 lines)"))),
        ),
        (
            vec!["call", "read", r#"{"file_path": "nope.txt"}"#, "--endpoint", &endpoint, "--cwd", &root],
            1,
            Some(format!("Error: cannot read \"{}\": not found\n", d.path("nope.txt").display())),
        ),
        (
            vec![
                "call",
                "read",
                r#"{"file_path": "a.txt", "limit": 5000}"#,
                "--endpoint",
                &endpoint,
                "--cwd",
                &root,
            ],
            1,
            Some("Error: limit must be less than or equal to 2000\n".to_owned()),
        ),
        // An unreachable daemon, a missing endpoint, bad JSON, an unknown endpoint form: usage.
        (
            vec!["call", "read", r#"{"file_path": "a.txt"}"#, "--endpoint", &missing_socket, "--cwd", &root],
            2,
            Some(String::new()),
        ),
        (vec!["call", "read", r#"{"file_path": "a.txt"}"#, "--cwd", &root], 2, Some(String::new())),
        (vec!["call", "read", "{not json", "--endpoint", &endpoint, "--cwd", &root], 2, Some(String::new())),
        (
            vec!["call", "read", r#"{"file_path": "a.txt"}"#, "--endpoint", "carrier-pigeon", "--cwd", &root],
            2,
            Some(String::new()),
        ),
    ];
    for (args, code, stdout) in cases {
        let out = tools(&args, tmp.path());
        assert_eq!(
            out.status.code(),
            Some(code),
            "fsd-tools {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        if let Some(stdout) = stdout {
            assert_eq!(String::from_utf8(out.stdout).unwrap(), stdout, "fsd-tools {args:?}");
        }
    }
    // `call` is one-shot: its policy is off, so a write needs no read.
    let out = tools(
        &[
            "call",
            "write",
            r#"{"file_path": "a.txt", "content": "beta\n"}"#,
            "--endpoint",
            &endpoint,
            "--cwd",
            &root,
        ],
        tmp.path(),
    );
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8(out.stdout).unwrap(), format!("{}\n", write_envelope(&p, "Updated file")));
    assert_eq!(d.read("a.txt"), b"beta\n");
}

#[test]
fn call_with_root_runs_an_embedded_daemon_and_cleans_up() {
    let ws = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(ws.path()).unwrap();
    std::fs::write(root.join("a.txt"), "alpha\nbeta\n").unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let root_arg = root.display().to_string();
    let out = Command::new(tools_bin())
        .args([
            "call",
            "read",
            r#"{"file_path": "a.txt", "offset": 2}"#,
            "--root",
            &root_arg,
            "--cwd",
            &root_arg,
        ])
        .env("TMPDIR", tmp.path())
        // The embedded daemon inherits this, so its own account of how it stopped is on stderr.
        .env("FSD_LOG", "info")
        .stdin(Stdio::null())
        .output()
        .expect("run fsd-tools");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        format!("{}\n", envelope(&root.join("a.txt"), &["2: beta"], "(End of file - total 2 lines)"))
    );
    // No socket directory (nor anything else) is left in the temporary directory.
    let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().map(|e| e.unwrap().path()).collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    // The daemon stopped by itself when the pipe closed (CONTRACT), rather than being killed by
    // the client's fallback after its grace period.
    assert!(stderr.contains("parent pipe closed"), "the daemon saw the pipe close: {stderr}");
    assert!(stderr.contains("stopped"), "the embedded daemon did not stop by itself: {stderr}");
}

/// A process in the state a killed network process is in for a moment: its main thread has
/// exited (a zombie), another thread still holds the listening socket. That thread lets go of it
/// half a second after the first connection (the starting daemon's check), then the process ends.
const EXITING_LISTENER: &str = r#"
import ctypes, os, socket, sys, threading, time
listener = socket.socket(socket.AF_UNIX)
listener.bind(sys.argv[1])
listener.listen(1024)
def hold():
    listener.accept()
    time.sleep(0.5)
    os._exit(0)
threading.Thread(target=hold).start()
print("listening", flush=True)
ctypes.CDLL(None).pthread_exit(None)
"#;

/// The exiting listener, killed if the test ends early (it would otherwise wait forever).
struct Predecessor(std::process::Child);

impl Drop for Predecessor {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn main_thread_exited(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')))
}

#[test]
fn a_restart_waits_for_a_predecessor_still_exiting_instead_of_giving_up() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ws");
    std::fs::create_dir(&root).unwrap();
    let root = std::fs::canonicalize(&root).unwrap();
    let socket = dir.path().join("fsd.sock");
    let mut predecessor = Predecessor(
        Command::new("python3")
            .arg("-c")
            .arg(EXITING_LISTENER)
            .arg(&socket)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("this test needs python3 for its exiting listener: {e}")),
    );
    let mut line = String::new();
    std::io::BufReader::new(predecessor.0.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "listening", "the exiting listener did not start");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !main_thread_exited(predecessor.0.id()) {
        assert!(Instant::now() < deadline, "the exiting listener's main thread did not exit");
        std::thread::sleep(Duration::from_millis(5));
    }

    // Serving means this daemon's own listener: the kit waits for a connection whose peer (the
    // process that called listen()) is one of its processes. Without the wait the daemon exits
    // with "another daemon already listens" as soon as it sees the predecessor's socket.
    let started = std::thread::spawn(move || Daemon::start_in(dir));
    assert!(predecessor.0.wait().unwrap().success());
    let mut d = started.join().unwrap_or_else(|_| panic!("fsd did not wait for its exiting predecessor"));
    assert_eq!(d.socket, socket);
    assert_eq!(d.root, root);
    d.write("a.txt", "after the restart\n");
    let mut s = d.session();
    let reply = s.read("a.txt");
    assert!(!reply.is_error() && reply.text().contains("after the restart"), "{}", reply.text());
    assert!(s.finish().success());
    assert!(d.terminate().success());
}

/// The extended attribute names on `dir`.
fn attributes(dir: &Path) -> Vec<String> {
    let mut buf = vec![0u8; 65536];
    let n = rustix::fs::listxattr(dir, &mut buf[..]).expect("listxattr");
    buf[..n]
        .split(|&b| b == 0)
        .filter(|n| !n.is_empty())
        .map(|n| String::from_utf8_lossy(n).into_owned())
        .collect()
}

/// The journal lives on tmpfs beside the tree, never in it: a writable root has its journal
/// directory while a daemon serves it, the root itself carries nothing (no attribute, as the
/// journal once kept there), and the last daemon to stop removes the directory.
#[test]
fn a_writable_roots_journal_directory_is_held_while_a_daemon_serves_it() {
    use fsd_soak::tree::{journal_dir, journal_entries};
    let docs = tempfile::tempdir().unwrap();
    let docs_arg = docs.path().display().to_string();
    let mut first = Daemon::start_with(&["--readable-root", &docs_arg], "");
    let dir = journal_dir(&first.root);
    let mode = |p: &Path| {
        std::fs::metadata(p).map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o7777)
    };
    assert_eq!(mode(&dir).ok(), Some(0o700), "{}: the writable root's journal directory", dir.display());
    assert_eq!(mode(dir.parent().unwrap()).ok(), Some(0o711), "the base: passed through, never listed");
    assert!(!journal_dir(docs.path()).exists(), "a readable root has none");

    // A create and a replace journal their temporary files and drop the entries.
    let mut s = first.session();
    let path = first.path("a.txt").display().to_string();
    assert!(!s.call("write", serde_json::json!({"file_path": path, "content": "one\n"})).is_error());
    assert!(!s.call("write", serde_json::json!({"file_path": path, "content": "two\n"})).is_error());
    assert!(s.finish().success());
    assert_eq!(journal_entries(&first.root), Vec::<String>::new(), "no entry is left");
    assert_eq!(attributes(&first.root), Vec::<String>::new(), "the root carries no attribute");

    // A second daemon on the same root: the first to stop leaves the directory to it.
    let sockets = tempfile::tempdir().unwrap();
    let mut second =
        launch().unix(sockets.path().join("fsd.sock")).writable_root(&first.root).start().unwrap();
    assert_eq!(first.terminate().code(), Some(0));
    assert!(dir.is_dir(), "the other daemon still journals there");
    assert_eq!(second.terminate().unwrap().code(), Some(0));
    assert!(!dir.exists(), "the last daemon to stop removes it");
}

/// The role is an enum with no catch-all: an unknown one is a usage error, not a supervisor
/// (which it used to start); a worker names its mode; a child takes no configuration flag or
/// file (its configuration is the supervisor's, in its first frame).
#[test]
fn a_role_is_one_of_three_and_a_child_takes_no_configuration_flag() {
    let child_flag = "take their configuration from the supervisor's first frame, never from flags or a file";
    let cases: &[(&[&str], &str)] = &[
        (
            &["--role", "bogus", "--listen", "unix:/nonexistent/fsd.sock"],
            "invalid value 'bogus' for '--role <ROLE>'",
        ),
        (&["--role", "worker", "--ipc-fd", "3"], "a worker needs --worker-mode"),
        (&["--role", "worker", "--worker-mode", "sideways", "--ipc-fd", "3"], "invalid value 'sideways'"),
        (&["--role", "network", "--ipc-fd", "3", "--config", "/nonexistent/fsd.toml"], child_flag),
        (
            &["--role", "worker", "--worker-mode", "read-only", "--ipc-fd", "3", "--writable-root", "/tmp"],
            child_flag,
        ),
    ];
    for (args, said) in cases {
        let out = fsd_command().args(*args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(said), "{args:?}: {stderr}");
    }
}
