//! Fleets end to end: two hosts made of network namespaces joined by veth pairs to a client
//! namespace (addresses 10.99.x.0/24 exist only inside namespaces this test creates, and the
//! namespaces are deleted at the end, even on failure). One fsd in each host namespace serves
//! TLS; one `fsd-tools session` in the client namespace reads and edits on both; clients without
//! valid credentials, and a token presented on another client's connection, are refused; the
//! identity keys the maximum mode; a daemon restart is a clear UNAVAILABLE, never a silent
//! success. Loopback tests cover the reused connection, the idle timeout and reconnection.

use crate::common;
use crate::pki;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Output, Stdio};
use std::time::Duration;

use common::Reply;
use serde_json::{Value, json};

/// `ip`, found where iproute2 installs it.
fn ip_bin() -> PathBuf {
    let known = ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"].into_iter().map(PathBuf::from);
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).map(|d| d.join("ip")).collect::<Vec<_>>())
        .unwrap_or_default();
    known.chain(on_path).find(|p| p.is_file()).unwrap_or_else(|| {
        panic!("the two-host fleet test needs iproute2 (`ip`), which is not installed: apt-get install -y iproute2 (scripts/test.sh does)")
    })
}

fn ip(args: &[&str]) {
    let out = Command::new(ip_bin()).args(args).output().expect("run ip");
    assert!(
        out.status.success(),
        "`ip {}` failed ({}): {} — the two-host fleet test needs network namespaces (root or CAP_NET_ADMIN and CAP_SYS_ADMIN)",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    );
}

/// Namespaces this test run created; deleted on drop (a veth pair goes with its namespace).
struct Namespaces {
    prefix: String,
    names: Vec<String>,
}

const PREFIX: &str = "fz";

impl Namespaces {
    /// `c` (the client) linked to `a` (10.99.1.1) and `b` (10.99.2.1); the client is .2 on each.
    fn create() -> Namespaces {
        sweep_stale();
        let prefix = format!("{PREFIX}{}", std::process::id());
        let mut ns = Namespaces { prefix: prefix.clone(), names: Vec::new() };
        for role in ["c", "a", "b"] {
            let name = format!("{prefix}{role}");
            ip(&["netns", "add", &name]);
            ns.names.push(name);
        }
        let client = ns.name("c");
        ip(&["-n", &client, "link", "set", "lo", "up"]);
        for (host, subnet) in [("a", 1), ("b", 2)] {
            let host_ns = ns.name(host);
            let (client_if, host_if) = (format!("{prefix}c{host}"), format!("{prefix}{host}c"));
            // Made inside the client namespace, the peer straight in the host's: the interfaces
            // never exist in this machine's own namespace.
            ip(&[
                "-n", &client, "link", "add", &client_if, "type", "veth", "peer", "name", &host_if, "netns",
                &host_ns,
            ]);
            ip(&["-n", &client, "addr", "add", &format!("10.99.{subnet}.2/24"), "dev", &client_if]);
            ip(&["-n", &host_ns, "addr", "add", &format!("10.99.{subnet}.1/24"), "dev", &host_if]);
            ip(&["-n", &client, "link", "set", &client_if, "up"]);
            ip(&["-n", &host_ns, "link", "set", &host_if, "up"]);
            ip(&["-n", &host_ns, "link", "set", "lo", "up"]);
        }
        ns
    }

    fn name(&self, role: &str) -> String {
        format!("{}{role}", self.prefix)
    }

    /// A command that runs `program` inside namespace `role`.
    fn exec(&self, role: &str, program: &Path) -> Command {
        let mut cmd = Command::new(ip_bin());
        cmd.args(["netns", "exec", &self.name(role)]).arg(program);
        cmd
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for name in &self.names {
            let _ = Command::new(ip_bin()).args(["netns", "del", name]).output();
        }
    }
}

/// Deletes namespaces of earlier runs whose process is gone (a run killed before its cleanup).
fn sweep_stale() {
    let Ok(out) = Command::new(ip_bin()).args(["netns", "list"]).output() else { return };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or_default();
        let Some(rest) = name.strip_prefix(PREFIX) else { continue };
        let pid: String = rest.chars().take_while(char::is_ascii_digit).collect();
        if !pid.is_empty() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = Command::new(ip_bin()).args(["netns", "del", name]).output();
        }
    }
}

/// An fsd inside a host namespace: a Unix socket (to know it listens) and a TLS listener.
struct HostDaemon {
    /// The process tree, owned by the shared kit; `ip netns exec` execs fsd, so the child is the
    /// daemon's supervisor.
    process: fsd_testkit::Daemon,
    root: PathBuf,
}

impl HostDaemon {
    fn start(ns: &Namespaces, role: &str, dir: &Path, addr: &str, config: &str) -> HostDaemon {
        let root = dir.join(format!("root-{role}"));
        std::fs::create_dir_all(&root).unwrap();
        let root = std::fs::canonicalize(root).unwrap();
        // The TCP listener is in the host's namespace, out of the kit's reach: it waits for the
        // Unix socket, whose file every namespace sees.
        let process = common::launch()
            .wrapper([ip_bin().as_os_str(), "netns".as_ref(), "exec".as_ref(), ns.name(role).as_ref()])
            .unix(dir.join(format!("fsd-{role}.sock")))
            .args(["--listen".to_owned(), format!("tcp:{addr}")])
            .writable_root(&root)
            .config(dir.join(format!("fsd-{role}.toml")), config)
            .start()
            .unwrap_or_else(|e| panic!("fsd in namespace {role}: {e}"));
        HostDaemon { process, root }
    }

    /// Stops the daemon (SIGTERM, graceful) and starts it again with the same flags.
    fn restart(&mut self) {
        self.process.restart().unwrap_or_else(|e| panic!("{e}"));
    }
}

/// A `fsd-tools session --fleet … --target …` in the client namespace.
struct FleetClient {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    next_id: u64,
}

impl FleetClient {
    fn start(ns: &Namespaces, fleet: &Path, target: &str) -> FleetClient {
        let mut child = ns
            .exec("c", &common::tools_bin())
            .arg("session")
            .arg("--fleet")
            .arg(fleet)
            .arg("--target")
            .arg(target)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn fsd-tools session");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        FleetClient { child, stdin, stdout, next_id: 0 }
    }

    /// Calls a tool on `target` (None: the session's default target).
    fn call(&mut self, target: Option<&str>, tool: &str, args: Value) -> Reply {
        self.next_id += 1;
        let mut line = json!({"id": self.next_id, "tool": tool, "args": args});
        if let Some(target) = target {
            line["target"] = json!(target);
        }
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
        let mut out = String::new();
        assert!(self.stdout.read_line(&mut out).unwrap() > 0, "fsd-tools session closed its output");
        let reply = Reply { json: serde_json::from_str(&out).unwrap() };
        assert_eq!(reply.json["id"], json!(self.next_id));
        reply
    }
}

impl Drop for FleetClient {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `fsd-tools call TOOL ARGS --fleet F --target T` in the client namespace.
fn one_call(ns: &Namespaces, fleet: &Path, target: &str, tool: &str, args: Value) -> Output {
    ns.exec("c", &common::tools_bin())
        .args(["call", tool, &args.to_string(), "--fleet"])
        .arg(fleet)
        .args(["--target", target])
        .stdin(Stdio::null())
        .output()
        .expect("run fsd-tools call")
}

#[track_caller]
fn refused(out: &Output, needle: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(2),
        "expected a refusal (exit 2); stdout {:?} stderr {stderr:?}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(stderr.contains(needle), "stderr {stderr:?} does not say {needle:?}");
}

#[track_caller]
fn success(reply: &Reply) {
    assert!(!reply.is_error(), "expected success, got {}", reply.json);
}

#[test]
fn two_hosts_over_tls_one_session_reads_and_edits_both_and_strangers_are_refused() {
    let ns = Namespaces::create();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ca = pki::Ca::new(d, "fleet-ca");
    let rogue = pki::Ca::new(d, "rogue-ca");
    let server_a = ca.server("fsd-a", &["fsd-a"], &["10.99.1.1".parse().unwrap()]);
    let server_b = ca.server("fsd-b", &["fsd-b"], &["10.99.2.1".parse().unwrap()]);
    let agent_a = ca.client("agent-a", "agent-a");
    let agent_b = ca.client("agent-b", "agent-b");
    let forged_a = rogue.client("forged-agent-a", "agent-a");
    let (ci_token, alice_token) =
        ("ci-0123456789abcdef0123456789abcdef", "alice-fedcba9876543210fedcba9876543210");
    std::fs::write(d.join("ci.token"), format!("{ci_token}\n")).unwrap();
    std::fs::write(d.join("alice.token"), alice_token).unwrap();
    std::fs::write(d.join("bad.token"), "not-a-token-of-this-fleet").unwrap();

    // Host a: mutual TLS required; agent-b may only read.
    let mut host_a = HostDaemon::start(
        &ns,
        "a",
        d,
        "10.99.1.1:7443",
        &format!(
            "tls_cert = {:?}\ntls_key = {:?}\ntls_client_ca = {:?}\n[client_max_modes]\n\"cert:agent-b\" = \"read-only\"\n",
            server_a.cert, server_a.key, ca.cert
        ),
    );
    // Host b: a certificate is optional, a token then stands in; alice's token is bound to the
    // agent-a certificate and may only read.
    let host_b = HostDaemon::start(
        &ns,
        "b",
        d,
        "10.99.2.1:7443",
        &format!(
            "tls_cert = {:?}\ntls_key = {:?}\ntls_client_ca = {:?}\ntls_client_cert = \"optional\"\n\
             [tokens.ci]\nsha256 = \"{}\"\n[tokens.alice]\nsha256 = \"{}\"\ncert = \"agent-a\"\n\
             [client_max_modes]\n\"token:alice\" = \"read-only\"\n",
            server_b.cert,
            server_b.key,
            ca.cert,
            pki::sha256_hex(ci_token),
            pki::sha256_hex(alice_token)
        ),
    );
    std::fs::write(host_a.root.join("notes.txt"), "alpha\n").unwrap();
    std::fs::write(host_b.root.join("notes.txt"), "bravo\n").unwrap();

    let target = |name: &str, endpoint: &str, extra: &str, cwd: &Path| {
        format!(
            "[targets.{name:?}]\nendpoint = \"tcp:{endpoint}\"\nca = {:?}\ncwd = {:?}\n{extra}\n",
            ca.cert, cwd
        )
    };
    let cert = |p: &pki::Pair| format!("cert = {:?}\nkey = {:?}", p.cert, p.key);
    let (a, b) = ("10.99.1.1:7443", "10.99.2.1:7443");
    let fleet_text = [
        target("a", a, &cert(&agent_a), &host_a.root),
        target("b", b, "tokenFile = \"ci.token\"", &host_b.root),
        target("a-nocert", a, "", &host_a.root),
        target("a-forged", a, &cert(&forged_a), &host_a.root),
        target("a-agent-b", a, &cert(&agent_b), &host_a.root),
        target("b-notoken", b, "", &host_b.root),
        target("b-badtoken", b, "tokenFile = \"bad.token\"", &host_b.root),
        target("b-stolen", b, &format!("{}\ntokenFile = \"alice.token\"", cert(&agent_b)), &host_b.root),
        target("b-alice", b, &format!("{}\ntokenFile = \"alice.token\"", cert(&agent_a)), &host_b.root),
    ]
    .concat();
    let fleet = d.join("fleet.toml");
    std::fs::write(&fleet, fleet_text).unwrap();

    // One session, both hosts: reads, then edits (the observation policy is on: read first).
    let mut session = FleetClient::start(&ns, &fleet, "a");
    let read_a = session.call(None, "read", json!({"file_path": "notes.txt"}));
    success(&read_a);
    assert!(read_a.text().contains("1: alpha"), "{}", read_a.json);
    assert_eq!(read_a.meta()["target"], json!("a"));
    let read_b = session.call(Some("b"), "read", json!({"file_path": "notes.txt"}));
    success(&read_b);
    assert!(read_b.text().contains("1: bravo"), "{}", read_b.json);
    assert_eq!(read_b.meta()["target"], json!("b"));
    // Observations are per host: a read on a does not let b's copy be edited.
    let edit_a = session.call(
        None,
        "edit",
        json!({"file_path": "notes.txt", "old_string": "alpha", "new_string": "alpha, edited over TLS"}),
    );
    success(&edit_a);
    let edit_b = session.call(
        Some("b"),
        "edit",
        json!({"file_path": "notes.txt", "old_string": "bravo", "new_string": "bravo, edited with a token"}),
    );
    success(&edit_b);
    let write_b = session.call(Some("b"), "write", json!({"file_path": "new.txt", "content": "made on b\n"}));
    success(&write_b);
    assert_eq!(std::fs::read_to_string(host_a.root.join("notes.txt")).unwrap(), "alpha, edited over TLS\n");
    assert_eq!(
        std::fs::read_to_string(host_b.root.join("notes.txt")).unwrap(),
        "bravo, edited with a token\n"
    );
    assert_eq!(std::fs::read_to_string(host_b.root.join("new.txt")).unwrap(), "made on b\n");
    let unknown = session.call(Some("zulu"), "read", json!({"file_path": "notes.txt"}));
    assert!(unknown.is_error() && unknown.text().contains("no target \"zulu\""), "{}", unknown.json);

    // A daemon restart under the session: a clear UNAVAILABLE, never a silent success.
    host_a.restart();
    let after = session.call(
        None,
        "edit",
        json!({"file_path": "notes.txt", "old_string": "edited", "new_string": "changed"}),
    );
    assert!(after.is_error(), "a call after the restart must fail: {}", after.json);
    assert_eq!(after.code(), Some("UNAVAILABLE"), "{}", after.json);
    assert!(after.text().contains("restarted"), "{}", after.json);
    assert_eq!(std::fs::read_to_string(host_a.root.join("notes.txt")).unwrap(), "alpha, edited over TLS\n");
    // The next call opens a new session there, which must read before it edits.
    let unread = session.call(
        None,
        "edit",
        json!({"file_path": "notes.txt", "old_string": "edited", "new_string": "changed"}),
    );
    assert_eq!(unread.code(), Some("FS_NOT_OBSERVED"), "{}", unread.json);
    success(&session.call(None, "read", json!({"file_path": "notes.txt"})));
    success(&session.call(
        None,
        "edit",
        json!({"file_path": "notes.txt", "old_string": "edited", "new_string": "changed"}),
    ));
    assert_eq!(std::fs::read_to_string(host_a.root.join("notes.txt")).unwrap(), "alpha, changed over TLS\n");
    // Host b never restarted: its session and observations are intact.
    success(&session.call(
        Some("b"),
        "edit",
        json!({"file_path": "new.txt", "old_string": "made", "new_string": "still made"}),
    ));
    drop(session);

    let read = json!({"file_path": "notes.txt"});
    // No certificate where one is required, or one from another CA: the handshake fails.
    let out = one_call(&ns, &fleet, "a-nocert", "read", read.clone());
    refused(
        &out,
        "fleet target \"a-nocert\": the daemon at tcp:10.99.1.1:7443 closed the TLS connection before answering hello",
    );
    let out = one_call(&ns, &fleet, "a-forged", "read", read.clone());
    refused(
        &out,
        "fleet target \"a-forged\": the daemon at tcp:10.99.1.1:7443 closed the TLS connection before answering hello",
    );
    // No token and no certificate, or a token this daemon does not know.
    refused(
        &one_call(&ns, &fleet, "b-notoken", "read", read.clone()),
        "needs a client certificate or a bearer token",
    );
    refused(
        &one_call(&ns, &fleet, "b-badtoken", "read", read.clone()),
        "the bearer token is not valid for this daemon",
    );
    // alice's token on agent-b's connection.
    refused(
        &one_call(&ns, &fleet, "b-stolen", "read", read.clone()),
        "is bound to another client certificate",
    );
    // The same token on its own certificate works, at the maximum mode its identity has.
    let out = one_call(&ns, &fleet, "b-alice", "read", read.clone());
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let out = one_call(&ns, &fleet, "b-alice", "write", json!({"file_path": "x.txt", "content": "no\n"}));
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("read-only"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let out = one_call(&ns, &fleet, "a-agent-b", "write", json!({"file_path": "x.txt", "content": "no\n"}));
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("read-only"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(!host_a.root.join("x.txt").exists() && !host_b.root.join("x.txt").exists());
    // Plaintext to a remote address is refused by the client before anything is sent.
    let out = ns
        .exec("c", &common::tools_bin())
        .args(["call", "read", &read.to_string(), "--endpoint", &format!("tcp:{a}")])
        .output()
        .unwrap();
    refused(&out, "a remote daemon needs TLS");
    drop(host_b);
}

#[test]
fn a_non_loopback_listener_without_tls_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let out = common::fsd_command()
        .args(["--listen", "tcp:0.0.0.0:7443", "--writable-root"])
        .arg(dir.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("listener tcp:0.0.0.0:7443 is not on loopback: a non-loopback TCP listener needs TLS (set tls_cert and tls_key)"),
        "{stderr}"
    );
}

/// A free loopback port (bound, then released for the daemon to take).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[test]
fn a_link_reuses_one_connection_and_reconnects_after_the_idle_timeout() {
    use fsd_tool_client::connect::{self, Credentials, Endpoint, TlsCredentials};
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ca = pki::Ca::new(d, "ca");
    let server = ca.server("fsd", &["fsd.test"], &["127.0.0.1".parse().unwrap()]);
    let client = ca.client("agent", "agent");
    let port = free_port();
    let config = format!(
        "tls_cert = {:?}\ntls_key = {:?}\ntls_client_ca = {:?}\nidle_timeout_ms = 600\n",
        server.cert, server.key, ca.cert
    );
    let daemon = common::Daemon::start_with(&["--listen", &format!("tcp:127.0.0.1:{port}")], &config);
    std::fs::write(daemon.root.join("f.txt"), "x\n").unwrap();
    let credentials = Credentials {
        tls: Some(TlsCredentials {
            ca_pem: std::fs::read(&ca.cert).unwrap(),
            identity: Some((std::fs::read(&client.cert).unwrap(), std::fs::read(&client.key).unwrap())),
            server_name: Some("fsd.test".into()),
        }),
        token: None,
        headers: Vec::new(),
    };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let endpoint = Endpoint::Tcp(format!("127.0.0.1:{port}"));
        let (mut client, hello, link) = connect::open(&endpoint, &credentials).await.unwrap();
        assert_eq!(hello.protocol_version, fsd_proto::PROTOCOL_VERSION);
        assert!(link.instance().is_some(), "hello pinned the daemon instance");
        let stat = || fsd_proto::v1::StatRequest {
            path: daemon.root.join("f.txt").display().to_string(),
            ..Default::default()
        };
        for _ in 0..5 {
            client.stat(stat()).await.unwrap();
        }
        assert_eq!(link.connections(), 1, "calls reuse one connection");
        // Idle past the daemon's idle timeout: it closes the connection; the next call opens
        // a new one to the same instance and succeeds.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        client.stat(stat()).await.unwrap();
        assert_eq!(link.connections(), 2, "the idle connection was closed and reopened");
        assert!(!link.restarted());
    });
}

#[test]
fn a_plaintext_client_of_a_tls_listener_is_told_it_may_speak_tls() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ca = pki::Ca::new(d, "ca");
    let server = ca.server("fsd", &["fsd.test"], &["127.0.0.1".parse().unwrap()]);
    let port = free_port();
    let config =
        format!("tls_cert = {:?}\ntls_key = {:?}\ntls_client_ca = {:?}\n", server.cert, server.key, ca.cert);
    let _daemon = common::Daemon::start_with(&["--listen", &format!("tcp:127.0.0.1:{port}")], &config);
    let endpoint = format!("tcp:127.0.0.1:{port}");
    let want = format!(
        "fsd-tools: the daemon at {endpoint} did not answer hello in plaintext: if that listener speaks TLS \
         (the daemon's config sets tls_cert), reach it with --target NAME and a fleet file that names its ca ("
    );
    for args in
        [vec!["call", "read", r#"{"file_path": "/x"}"#, "--endpoint", &endpoint], vec!["doctor", &endpoint]]
    {
        let out = Command::new(common::tools_bin()).args(&args).stdin(Stdio::null()).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        println!("{args:?}: {stderr}");
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.starts_with(&want), "{args:?}: {stderr}");
    }
}
