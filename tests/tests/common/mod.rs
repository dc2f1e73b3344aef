//! Shared harness of the end-to-end tests: starts the real `fsd` binary on a real Unix socket in
//! a temporary directory, and drives the real tools through `fsd-tools session` (JSON lines) or
//! the library. Everything is torn down when the values drop. Daemons start through the shared kit
//! (`fsd-testkit`, also used by the bench and the soak).
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use fsd_testkit as testkit;
use serde_json::{Value, json};

pub mod docs;
pub mod rest;
pub mod router;
pub mod rpc;

/// The workspace's binaries (`target/<profile>`), found from this test executable
/// (`target/<profile>/deps/<test>`), built with the daemon's test hooks.
pub fn bins() -> testkit::Bins {
    let bins = testkit::Bins::locate().unwrap_or_else(|e| panic!("{e}"));
    // The fence and reliability tests use test-only hooks compiled into the daemon; a binary
    // built without them (a plain `cargo build`) would fail those tests confusingly.
    assert!(
        bins.has_test_hooks().unwrap_or_else(|e| panic!("{e}")),
        "target/debug/fsd was built without the test hooks: run `bash scripts/test.sh` (or `cargo build --workspace --bins --features fsd/fault-injection`) first"
    );
    bins
}

/// The directory holding the workspace's binaries.
pub fn bin_dir() -> PathBuf {
    bins().dir
}

/// The daemon's path, as an argument (a script that starts it, a comparison with /proc). A test
/// starts a daemon with [`Daemon`] or [`launch`], a bare run with [`fsd_command`].
pub fn fsd_bin() -> PathBuf {
    bins().fsd
}

pub fn tools_bin() -> PathBuf {
    bins().tools
}

/// A bare `fsd` command (stdin closed) for a run that is not a daemon being served: a start that
/// must fail, `--version`, a worker started by hand.
pub fn fsd_command() -> Command {
    bins().fsd_command()
}

/// The kit's launch of the test build of `fsd`, for a daemon laid out unlike [`Daemon`]'s.
pub fn launch() -> testkit::Launch {
    testkit::Launch::fsd(&bins())
}

/// A running daemon over a temporary workspace.
pub struct Daemon {
    /// The process tree, owned by the shared kit.
    pub process: testkit::Daemon,
    pub socket: PathBuf,
    pub dir: tempfile::TempDir,
    /// The writable root (canonical path).
    pub root: PathBuf,
}

/// `FSD_TEST_READ_PATH=workers`: a daemon whose config does not choose its read path serves
/// every read in its workers (`direct_reads = false`), so that the suite runs on both read paths
/// (`scripts/test.sh` runs the end-to-end tests once more so).
fn with_read_path(config: &str) -> String {
    match std::env::var("FSD_TEST_READ_PATH").as_deref() {
        Ok("workers") if !config.contains("direct_reads") => format!("direct_reads = false\n{config}"),
        Ok("workers" | "direct") | Err(_) => config.to_string(),
        Ok(other) => panic!("FSD_TEST_READ_PATH={other}: expected workers or direct"),
    }
}

impl Daemon {
    /// A daemon with one writable root `<tmp>/ws`.
    pub fn start() -> Daemon {
        Daemon::start_with(&[], "")
    }

    /// A daemon with extra flags and a config file body (empty: none).
    pub fn start_with(extra: &[&str], config: &str) -> Daemon {
        Daemon::start_with_env(extra, config, &[])
    }

    /// A daemon with extra flags, a config file body and extra environment (test hooks).
    pub fn start_with_env(extra: &[&str], config: &str, env: &[(&str, &str)]) -> Daemon {
        Daemon::start_custom(&[], &|_| {}, extra, config, env)
    }

    /// A daemon started through `wrapper` (a command that execs the rest, e.g. `prlimit ...`),
    /// after `prepare` ran on the (canonical) root, with extra flags, a config file body and
    /// extra environment.
    pub fn start_custom(
        wrapper: &[&str],
        prepare: &dyn Fn(&Path),
        extra: &[&str],
        config: &str,
        env: &[(&str, &str)],
    ) -> Daemon {
        Daemon::start_at(wrapper, prepare, extra, config, env, tempfile::tempdir().expect("tempdir"))
    }

    /// A daemon like [`Daemon::start`] in a directory the caller made and may have put things
    /// in: the root is `<dir>/ws` (made here unless it exists), the socket `<dir>/fsd.sock`.
    pub fn start_in(dir: tempfile::TempDir) -> Daemon {
        Daemon::start_at(&[], &|_| {}, &[], "", &[], dir)
    }

    fn start_at(
        wrapper: &[&str],
        prepare: &dyn Fn(&Path),
        extra: &[&str],
        config: &str,
        env: &[(&str, &str)],
        dir: tempfile::TempDir,
    ) -> Daemon {
        let root = dir.path().join("ws");
        if !root.is_dir() {
            std::fs::create_dir(&root).expect("mkdir ws");
        }
        let root = std::fs::canonicalize(&root).expect("canonicalize");
        prepare(&root);
        let socket = dir.path().join("fsd.sock");
        let mut launch = launch().wrapper(wrapper).unix(&socket).writable_root(&root);
        let config = with_read_path(config);
        if !config.is_empty() {
            launch = launch.config(dir.path().join("fsd.toml"), config);
        }
        for (key, value) in env {
            launch = launch.env(key, value);
        }
        let process = launch.args(extra).start().unwrap_or_else(|e| panic!("{e}"));
        Daemon { process, socket, dir, root }
    }

    pub fn endpoint(&self) -> String {
        format!("unix:{}", self.socket.display())
    }

    /// A path inside the root.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    pub fn write(&self, rel: &str, bytes: impl AsRef<[u8]>) {
        let p = self.path(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).expect("mkdir -p");
        }
        std::fs::write(p, bytes).expect("write fixture");
    }

    pub fn read(&self, rel: &str) -> Vec<u8> {
        std::fs::read(self.path(rel)).expect("read back")
    }

    /// A `fsd-tools session` against this daemon, cwd = the root.
    pub fn session(&self) -> ToolSession {
        ToolSession::start(&self.endpoint(), &self.root, None)
    }

    pub fn session_with_config(&self, config: &str) -> ToolSession {
        let path = self.dir.path().join(format!("client-{}.toml", rand_suffix()));
        std::fs::write(&path, config).expect("write client config");
        ToolSession::start(&self.endpoint(), &self.root, Some(&path))
    }

    /// The supervisor's pid.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// The daemon's process and all its descendants (the supervisor, the network process and
    /// the workers), as they are now.
    pub fn pids(&self) -> Vec<u32> {
        self.process.pids()
    }

    /// Peak resident memory of the daemon, in KiB: VmHWM summed over the daemon's process and all
    /// its descendants, an upper bound of the whole daemon's peak.
    pub fn peak_rss_kib(&self) -> u64 {
        let (total, _) = self.process.peak_rss_kib();
        assert!(total > 0, "no VmHWM for the daemon (pid {})", self.pid());
        total
    }

    /// Sends SIGTERM and waits for the exit status and for the rest of the tree to be gone.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        self.process.terminate().unwrap_or_else(|e| panic!("{e}"))
    }

    /// Stops the daemon (SIGTERM) and starts a new one on the same socket, root and config.
    pub fn restart(&mut self) -> std::process::ExitStatus {
        self.process.restart().unwrap_or_else(|e| panic!("{e}"))
    }
}

fn rand_suffix() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0)
}

/// A running `fsd-tools session`: one owner of observations.
pub struct ToolSession {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    next_id: u64,
}

/// One result line.
#[derive(Debug, Clone)]
pub struct Reply {
    pub json: Value,
}

impl Reply {
    pub fn text(&self) -> &str {
        self.json["text"].as_str().unwrap_or("")
    }
    pub fn is_error(&self) -> bool {
        self.json["is_error"].as_bool().expect("is_error")
    }
    pub fn code(&self) -> Option<&str> {
        self.json["code"].as_str()
    }
    pub fn meta(&self) -> &Value {
        &self.json["meta"]
    }
}

impl ToolSession {
    pub fn start(endpoint: &str, cwd: &Path, config: Option<&Path>) -> ToolSession {
        let mut cmd = Command::new(tools_bin());
        cmd.arg("session").arg("--endpoint").arg(endpoint).arg("--cwd").arg(cwd);
        if let Some(config) = config {
            cmd.arg("--config").arg(config);
        }
        ToolSession::spawn(&mut cmd)
    }

    /// A session with these arguments after `session` and these environment variables added.
    pub fn start_args(args: &[&str], env: &[(&str, &str)]) -> ToolSession {
        ToolSession::spawn(Command::new(tools_bin()).arg("session").args(args).envs(env.iter().copied()))
    }

    fn spawn(cmd: &mut Command) -> ToolSession {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn fsd-tools");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        ToolSession { child, stdin, stdout, next_id: 0 }
    }

    /// The session process's pid (to read its memory from /proc).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends one raw line and reads one reply line.
    pub fn raw(&mut self, line: &str) -> Reply {
        let stdin = self.stdin.as_mut().expect("session open");
        writeln!(stdin, "{line}").expect("write request");
        stdin.flush().expect("flush");
        let mut out = String::new();
        let n = self.stdout.read_line(&mut out).expect("read reply");
        assert!(n > 0, "fsd-tools session closed its output (its stderr says why)");
        Reply { json: serde_json::from_str(&out).expect("reply is JSON") }
    }

    /// Calls a tool.
    pub fn call(&mut self, tool: &str, args: Value) -> Reply {
        self.next_id += 1;
        let reply = self.raw(&json!({"id": self.next_id, "tool": tool, "args": args}).to_string());
        assert_eq!(reply.json["id"], json!(self.next_id), "ids echo in order");
        reply
    }

    pub fn read(&mut self, path: &str) -> Reply {
        self.call("read", json!({"file_path": path}))
    }

    /// Ends the session (EOF) and returns its exit status.
    pub fn finish(mut self) -> std::process::ExitStatus {
        drop(self.stdin.take());
        self.child.wait().expect("wait fsd-tools")
    }
}

impl Drop for ToolSession {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Asserts a reply is a success with exactly this text.
#[track_caller]
pub fn ok(reply: &Reply, text: &str) {
    assert!(!reply.is_error(), "expected success, got {}", reply.json);
    assert_eq!(reply.text(), text);
}

/// Asserts a reply is an error with this code and exactly this text.
#[track_caller]
pub fn err(reply: &Reply, code: &str, text: &str) {
    assert!(reply.is_error(), "expected an error, got {}", reply.json);
    assert_eq!(reply.code(), Some(code), "{}", reply.json);
    assert_eq!(reply.text(), text);
}

/// The read envelope for `path` with these body lines and footer.
pub fn envelope(path: &Path, lines: &[&str], footer: &str) -> String {
    let mut s = format!("<path>{}</path>\n<type>file</type>\n<content>\n", path.display());
    for l in lines {
        s.push_str(l);
        s.push('\n');
    }
    s.push('\n');
    s.push_str(footer);
    s.push_str("\n</content>");
    s
}

/// Makes a FIFO at `path` (reading one must never block the daemon).
pub fn mkfifo(path: &Path) {
    rustix::fs::mkfifoat(rustix::fs::CWD, path, rustix::fs::Mode::from_raw_mode(0o644)).expect("mkfifo");
}

/// Makes a symbolic link `link` pointing at `target` (absolute or relative, as given).
pub fn symlink(target: impl AsRef<Path>, link: &Path) {
    std::os::unix::fs::symlink(target, link).expect("symlink");
}

/// The write tool's five-line envelope.
pub fn write_envelope(path: &Path, verb: &str) -> String {
    format!("<path>{}</path>\n<type>file</type>\n<content>\n{verb}\n</content>", path.display())
}

/// A workspace the embedded daemon (`fsd-tools … --root .`) cannot serve, and the one line its
/// start says why: a root anyone may write (so links in it matter) while the link settings
/// cannot be read (`FSD_FAULT_SYSCTL_FS_DIR`, an empty directory). Run the client in `ws` with
/// [`UnstartableRoot::env`].
pub struct UnstartableRoot {
    pub hidden: tempfile::TempDir,
    pub ws: tempfile::TempDir,
}

impl UnstartableRoot {
    pub fn new() -> UnstartableRoot {
        use std::os::unix::fs::PermissionsExt;
        let hidden = tempfile::tempdir().expect("tempdir");
        let ws = tempfile::tempdir().expect("tempdir");
        std::fs::set_permissions(ws.path(), std::fs::Permissions::from_mode(0o777)).expect("chmod ws");
        std::fs::write(ws.path().join("README.md"), "# hi\n").expect("write README.md");
        UnstartableRoot { hidden, ws }
    }

    /// The fault-injection variable that hides the link settings from the daemon.
    pub fn env(&self) -> (&'static str, &Path) {
        ("FSD_FAULT_SYSCTL_FS_DIR", self.hidden.path())
    }

    /// The daemon's start line, as the client repeats it.
    pub fn line(&self) -> String {
        format!(
            "fsd exited before it listened (exit status: 2): cannot read whether the kernel protects links \
             ({0}/protected_hardlinks: No such file or directory (os error 2), {0}/protected_symlinks: No such file \
             or directory (os error 2)), which the confined modes need here (others than the workers may make links \
             in root {1}, owner 0:0, mode 0777); make /proc/sys/fs readable to the daemon (no ProcSubset=pid in a \
             systemd unit)",
            self.hidden.path().display(),
            std::fs::canonicalize(self.ws.path()).expect("canonicalize ws").display()
        )
    }
}

/// The Python of the venv `scripts/test.sh` builds (`FSD_TEST_PYTHON`), with the pinned clients
/// the tests drive (the MCP SDK, grpcio, the agent-sandbox SDK, selenium).
pub fn python() -> PathBuf {
    match std::env::var_os("FSD_TEST_PYTHON") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => panic!(
            "FSD_TEST_PYTHON is not set: this test needs the Python venv with the pinned clients. \
             Run `bash scripts/test.sh` (it creates .venv and exports FSD_TEST_PYTHON)"
        ),
    }
}

/// Runs the test script `script` (a path below `tests/`) with `args` as its one argument, and
/// returns the JSON it prints; a script that fails fails the test with its standard error.
pub fn python_json(script: &str, args: &Value) -> Value {
    let python = python();
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(script);
    let out = Command::new(&python)
        .arg(&path)
        .arg(args.to_string())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {} (FSD_TEST_PYTHON): {e}", python.display()));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "tests/{script} failed ({}):\n{stderr}", out.status);
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

/// What an outside writer does while fsd is in one of a test hook's pauses: a save (a new file
/// renamed over the name, as editors save), or a write in place (into whatever file is there).
#[derive(Debug, Clone, Copy)]
pub enum Outside {
    Save(&'static str),
    Write(&'static str),
}

impl Outside {
    pub fn run(self, path: &Path) {
        match self {
            Outside::Save(text) => save_over(path, text),
            Outside::Write(text) => std::fs::write(path, text).expect("write in place"),
        }
    }
}

/// An editor's save: `text` written to a new file, renamed over `path`.
pub fn save_over(path: &Path, text: &str) {
    let tmp = path.with_extension("save");
    std::fs::write(&tmp, text).expect("write the save");
    std::fs::rename(&tmp, path).expect("rename the save over the name");
}

/// The files in `dir` other than `name`, and their contents in order: what an undo kept beside
/// the name.
pub fn beside(dir: &Path, name: &Path) -> (Vec<PathBuf>, Vec<String>) {
    let beside: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("list the root")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p != name)
        .collect();
    let mut contents: Vec<String> =
        beside.iter().map(|p| String::from_utf8(std::fs::read(p).expect("read")).expect("text")).collect();
    contents.sort();
    (beside, contents)
}
