//! Approvals for fleets, end to end with the real binaries: two daemons (sandboxes `alpha` and
//! `beta`, each known to the approver by its token) and one `fsd-approver serve` whose requests
//! wait in one queue; people decide on its web page (in a real headless Chromium, over HTTPS) or
//! at its terminal; an expired request cannot be approved; one daemon's approval is nothing at the
//! other; the webhook gets exactly the documented fields and never content.

use crate::common;
use crate::pki;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::rpc::{Rpc, p};
use common::*;
use fsd_proto::{ErrorCode, WireError, v1};
use serde_json::{Value, json};

const ALICE: &str = "alice-token-0123456789";
const BOB: &str = "bob-token-0123456789abc";
const ALPHA: &str = "alpha-daemon-token-0123";
const BETA: &str = "beta-daemon-token-01234";

fn approver_bin() -> PathBuf {
    bin_dir().join("fsd-approver")
}

fn python() -> PathBuf {
    match std::env::var_os("FSD_TEST_PYTHON") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => panic!("FSD_TEST_PYTHON is not set: bash scripts/test.sh creates the venv and exports it"),
    }
}

/// The approver's files: its key, tokens, config and decision log.
struct Files {
    dir: tempfile::TempDir,
    public: String,
}

impl Files {
    /// `web` is the `[web]` table's body; `webhook` the webhook's URL, if any.
    fn new(web: &str, webhook: Option<&str>) -> Files {
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new(approver_bin()).arg("keygen").arg("--dir").arg(dir.path()).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let public = std::fs::read_to_string(dir.path().join("approver.pub")).unwrap().trim().to_owned();
        for (name, token) in [("alice", ALICE), ("bob", BOB), ("alpha", ALPHA), ("beta", BETA)] {
            std::fs::write(dir.path().join(format!("{name}.token")), format!("{token}\n")).unwrap();
        }
        let d = dir.path().display();
        let hook = webhook.map(|url| format!("[webhook]\nurl = \"{url}\"\n")).unwrap_or_default();
        // Alice's agents run as uid 0 (these tests' clients); beta wants another person.
        let config = format!(
            "[web]\n{web}\n[[person]]\nname = \"alice\"\ntoken_file = \"{d}/alice.token\"\nclients = [\"uid:0\"]\n\n\
             [[person]]\nname = \"bob\"\ntoken_file = \"{d}/bob.token\"\n\n\
             [[daemon]]\nsandbox = \"alpha\"\ntoken_file = \"{d}/alpha.token\"\n\n\
             [[daemon]]\nsandbox = \"beta\"\ntoken_file = \"{d}/beta.token\"\nrequire_another_person = true\n\n{hook}"
        );
        std::fs::write(dir.path().join("approver.toml"), config).unwrap();
        Files { dir, public }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `serve` with the rest of the arguments every test gives it.
    fn serve_args(&self) -> Vec<String> {
        [
            "serve",
            "--key",
            &p(&self.path("approver.key")),
            "--listen",
            &format!("unix:{}", p(&self.path("approver.sock"))),
            "--config",
            &p(&self.path("approver.toml")),
            "--log",
            &p(&self.path("decisions.jsonl")),
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect()
    }

    fn decisions(&self) -> Vec<Value> {
        std::fs::read_to_string(self.path("decisions.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|l| l.get("decision").is_some())
            .collect()
    }

    /// A daemon of `sandbox` that asks this approver with its token.
    fn daemon(&self, sandbox: &str, extra: &str) -> Daemon {
        let config = format!(
            "escalation = \"signed\"\nmax_mode = \"danger-full-access\"\napprover_public_key = \"{}\"\n\
             approver_endpoint = \"unix:{}\"\napprover_token_file = \"{}\"\n{extra}",
            self.public,
            p(&self.path("approver.sock")),
            p(&self.path(&format!("{sandbox}.token"))),
        );
        Daemon::start_with(&[], &config)
    }

    fn wait_listening(&self, child: &mut Child) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::os::unix::net::UnixStream::connect(self.path("approver.sock")).is_err() {
            if let Ok(Some(status)) = child.try_wait() {
                panic!("fsd-approver serve exited: {status}");
            }
            assert!(Instant::now() < deadline, "fsd-approver serve did not listen");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Ends the approver with the test, however it ends.
struct Stop(Child);

impl Drop for Stop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One plain HTTP/1.1 exchange with the page on loopback, with a bearer token.
fn http(port: u16, method: &str, path: &str, token: &str, body: &str) -> (u16, String) {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let status = answer.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_owned();
    (status, body)
}

/// The keys of the requests the page lists (`id="r-KEY"`), in its order.
fn keys_on_page(page: &str) -> Vec<String> {
    page.split("id=\"r-").skip(1).filter_map(|s| s.split('"').next()).map(str::to_owned).collect()
}

/// Polls the page until it lists `n` requests; their keys.
fn wait_for_requests(port: u16, n: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, page) = http(port, "GET", "/", ALICE, "");
        assert_eq!(status, 200, "{page}");
        let keys = keys_on_page(&page);
        if keys.len() == n {
            return keys;
        }
        assert!(Instant::now() < deadline, "the page never listed {n} requests: {page}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn context(session: &str, ticket: Option<v1::EscalationTicket>) -> Option<v1::CallContext> {
    Some(v1::CallContext {
        session_id: session.into(),
        call_id: "c".into(),
        mode: if ticket.is_some() { v1::Mode::DangerFullAccess as i32 } else { v1::Mode::Unspecified as i32 },
        escalation: ticket,
    })
}

/// RequestEscalation for one operation: waits for the decision.
fn ask(rpc: &mut Rpc, session: &str, op: v1::EscalatedOp) -> v1::EscalationDescription {
    let request = v1::EscalationRequest {
        context: context(session, None),
        requested_mode: v1::Mode::DangerFullAccess as i32,
        justification: "the user asked".into(),
        ops: vec![op],
        patch: None,
    };
    rpc.rt.block_on(rpc.client.request_escalation(request)).unwrap().into_inner()
}

/// An approved read of `path` (an outside path is written only after one), then the write of
/// `content` asked: that decision.
fn ask_write(rpc: &mut Rpc, session: &str, path: &Path, content: &str) -> v1::EscalationDescription {
    let read =
        ask(rpc, session, v1::EscalatedOp { op: "readText".into(), path: p(path), ..Default::default() });
    assert!(read.approved, "{read:?}");
    let op = v1::EscalatedOp {
        op: "writeText".into(),
        path: p(path),
        content: Some(content.into()),
        ..Default::default()
    };
    ask(rpc, session, op)
}

fn write(
    rpc: &mut Rpc,
    session: &str,
    path: &Path,
    content: &str,
    reply: &v1::EscalationDescription,
) -> Result<(), WireError> {
    let ticket = v1::EscalationTicket {
        approved_mode: v1::Mode::DangerFullAccess as i32,
        justification: "the user asked".into(),
        escalation_id: reply.escalation_id.clone(),
        nonce: reply.nonce.clone(),
        signature: Default::default(),
    };
    let request = v1::WriteTextRequest {
        context: context(session, Some(ticket)),
        path: p(path),
        content: content.into(),
        ..Default::default()
    };
    rpc.rt.block_on(rpc.client.write_text(request)).map(drop).map_err(|s| WireError::from_status(&s).unwrap())
}

/// A webhook receiver on loopback: every body it was sent, answered 200.
fn webhook() -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hooks/fsd", listener.local_addr().unwrap());
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let seen = bodies.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let mut reader = BufReader::new(stream);
            let mut length = 0;
            let mut first = String::new();
            reader.read_line(&mut first).unwrap();
            loop {
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                if line == "\r\n" || line.is_empty() {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap();
                }
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            assert!(first.starts_with("POST /hooks/fsd "), "{first}");
            seen.lock().unwrap().push(String::from_utf8(body).unwrap());
            let _ = reader
                .get_mut()
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
        }
    });
    (url, bodies)
}

/// The page in Chromium over HTTPS: both daemons' requests in one queue on a phone-sized
/// screen; alice approves alpha's write, which lands; she may not decide beta's (her own agent
/// asked, and beta wants another person); bob denies it with a reason the model reads. The
/// webhook got one notification per request with exactly the documented fields, no content.
#[test]
fn two_daemons_wait_in_one_queue_and_people_decide_on_the_page_in_chromium() {
    let port = rest::free_port();
    let certs = tempfile::tempdir().unwrap();
    let ca = pki::Ca::new(certs.path(), "ca");
    let pair = ca.server("web", &["localhost"], &["127.0.0.1".parse().unwrap()]);
    let (hook, bodies) = webhook();
    let carol = ca.client("carol", "carol@example.org");
    let files = Files::new(
        &format!(
            "listen = \"tcp:127.0.0.1:{port}\"\ntls_cert = \"{}\"\ntls_key = \"{}\"\nclient_ca = \"{}\"\n\n\
             [[person]]\nname = \"carol\"\ncertificate = \"carol@example.org\"\n",
            p(&pair.cert),
            p(&pair.key),
            p(&ca.cert)
        ),
        Some(&hook),
    );
    let mut serve = Command::new(approver_bin());
    serve.args(files.serve_args()).stdin(Stdio::null()).stderr(Stdio::null());
    let mut child = serve.spawn().unwrap();
    files.wait_listening(&mut child);
    let _approver = Stop(child);
    let alpha = files.daemon("alpha", "");
    let beta = files.daemon("beta", "");
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("approved.txt");
    let secret = "SECRET-CONTENT-7f3a";
    let asked = {
        let mut rpc = Rpc::connect(&alpha);
        let target = target.clone();
        std::thread::spawn(move || {
            let reply = ask_write(&mut rpc, "s-alpha", &target, &format!("{secret}\n"));
            let wrote = write(&mut rpc, "s-alpha", &target, &format!("{secret}\n"), &reply);
            (reply, wrote)
        })
    };
    let refused_path = outside.path().join("refused.txt");
    std::fs::write(&refused_path, "keep\n").unwrap();
    // beta's request arrives once the page is open in Chromium showing alpha's alone.
    let arrive = outside.path().join("page-open");
    let refused = {
        let mut t = beta.session();
        let path = p(&refused_path);
        let arrive = arrive.clone();
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(120);
            while !arrive.exists() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            t.call("read", json!({"file_path": path, "sandbox_permissions": "danger-full-access", "justification": "to see <b>it</b>"}))
        })
    };
    let shot = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("approver-page.png");
    let _ = std::fs::remove_file(&shot);
    let out = Command::new(python())
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("web").join("approve.py"))
        .args([&format!("https://127.0.0.1:{port}"), ALICE, BOB])
        .arg(&shot)
        .arg(&arrive)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "tests/web/approve.py failed: {}", String::from_utf8_lossy(&out.stderr));
    let said: Value = serde_json::from_slice(&out.stdout).unwrap();
    // The page was opened once with alpha's request; beta's appeared on it within 15 s, the page
    // having reloaded itself (the script only looked).
    assert_eq!(
        (&said["opened"], &said["before"], &said["arrived"]),
        (&json!("navigate"), &json!(1), &json!("reload")),
        "{said}"
    );
    assert_eq!(said["status"], "2 requests wait, oldest first. All waiting requests", "{said}");
    assert!(said["logged_in"].as_str().unwrap().contains("Logged in as alice"), "{said}");
    assert_eq!(said["alpha_added"], json!([format!("    +{secret}")]), "the diff, as a diff: {said}");
    assert!(said["alpha_pre"].as_str().unwrap().contains("content-sha256: "), "{said}");
    assert_eq!((said["scripts"].as_u64(), said["external"].as_u64()), (Some(1), Some(0)), "{said}");
    // The page's policy lets its own style and script run (by their hashes), nothing else.
    assert_eq!((&said["styled"], &said["live"]), (&json!("rgb(34, 170, 119)"), &json!("1")), "{said}");
    assert!(said["width"].as_u64() <= said["viewport"].as_u64(), "wider than a phone: {said}");
    assert_eq!(
        (&said["alpha_read"]["title"], &said["alpha"]["title"]),
        (&json!("Approved"), &json!("Approved")),
        "{said}"
    );
    assert_eq!(said["beta_by_alice"]["title"], "Not decided", "{said}");
    assert_eq!(
        said["beta_by_alice"]["outcome"],
        "This request needs a person other than the one whose agent asked (uid:0 is yours): ask someone else to decide it.",
    );
    assert_eq!(said["beta"]["title"], "Denied", "{said}");
    assert_eq!(said["after"], "Nothing waits here now. All waiting requests", "{said}");
    // A person may log in with a client certificate instead of a token; without one (or a
    // token) the page asks for a login.
    let as_carol = r#"
import ssl, sys, urllib.request
url, ca, cert, key = sys.argv[1:5]
context = ssl.create_default_context(cafile=ca)
if cert:
    context.load_cert_chain(cert, key)
print(urllib.request.urlopen(url, context=context, timeout=30).read().decode())
"#;
    let page = |cert: &str, key: &str| {
        let out = Command::new(python())
            .args(["-c", as_carol, &format!("https://127.0.0.1:{port}/"), &p(&ca.cert), cert, key])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    assert!(page(&p(&carol.cert), &p(&carol.key)).contains("<span>Logged in as carol</span>"));
    assert!(page("", "").contains("name=\"token\""));
    let png = std::fs::read(&shot).unwrap();
    assert!(png.starts_with(b"\x89PNG"), "the screenshot {} is a PNG", shot.display());
    // alpha's write landed with alice's approval; bob's denial and its reason reached the model.
    let (reply, wrote) = asked.join().unwrap();
    assert!(reply.approved && reply.decided_by == v1::Decider::Person as i32, "{reply:?}");
    assert_eq!(wrote, Ok(()));
    assert_eq!(std::fs::read_to_string(&target).unwrap(), format!("{secret}\n"));
    err(
        &refused.join().unwrap(),
        "FS_SANDBOX_DENIED",
        "Error: escalation to danger-full-access was refused by the person approving escalations (reason: not on Fridays); nothing was changed. Do not retry this call with sandbox_permissions; continue under workspace-write mode or ask the user. [sandbox: file access denied under workspace-write mode]",
    );
    // One line per decision, naming the sandbox and the person.
    let decided: Vec<(String, String, String, String)> = files
        .decisions()
        .iter()
        .map(|l| {
            let s = |k: &str| l[k].as_str().unwrap().to_owned();
            (s("sandbox"), s("decision"), s("decider"), s("reason"))
        })
        .collect();
    assert_eq!(
        decided,
        [
            ("alpha".into(), "approved".into(), "person alice".into(), String::new()),
            ("alpha".into(), "approved".into(), "person alice".into(), String::new()),
            ("beta".into(), "refused".into(), "person bob".into(), "not on Fridays".into()),
        ]
    );
    // The webhook: one notification per request, exactly these fields, never content.
    let bodies = bodies.lock().unwrap().clone();
    assert_eq!(bodies.len(), 3, "{bodies:?}");
    for body in &bodies {
        assert!(!body.contains(secret) && !body.contains("keep") && !body.contains("sha256"), "{body}");
        let v: Value = serde_json::from_str(body).unwrap();
        let mut fields: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        fields.sort();
        assert_eq!(fields, ["fsd", "text"], "{body}");
        let mut fields: Vec<&str> = v["fsd"].as_object().unwrap().keys().map(String::as_str).collect();
        fields.sort();
        assert_eq!(
            fields,
            ["expires", "justification", "mode", "operations", "ops", "request", "sandbox", "url"],
            "{body}"
        );
    }
    let beta_hook: Value = bodies
        .iter()
        .map(|b| serde_json::from_str::<Value>(b).unwrap())
        .find(|v| v["fsd"]["sandbox"] == "beta")
        .unwrap();
    let key = beta_hook["fsd"]["request"].as_str().unwrap();
    assert_eq!(
        beta_hook["fsd"],
        json!({
            "sandbox": "beta",
            "request": key,
            "mode": "danger-full-access",
            "ops": [{"op": "readText", "path": p(&refused_path)}],
            "operations": 1,
            "justification": "to see <b>it</b>",
            "expires": beta_hook["fsd"]["expires"],
            "url": format!("https://127.0.0.1:{port}/r/{key}"),
        })
    );
    assert_eq!(
        beta_hook["text"],
        format!(
            "fsd: an escalation waits in sandbox beta: readText {} at danger-full-access. Justification: to see &lt;b&gt;it&lt;/b&gt; <https://127.0.0.1:{port}/r/{key}|Open the approver page>",
            p(&refused_path)
        )
    );
}

/// The terminal decides from the same queue (in arrival order) while the webhook hangs; a
/// request nobody decides expires, and the page cannot approve it then; alpha's approval is
/// nothing at beta.
#[test]
fn the_terminal_decides_an_expired_request_cannot_be_approved_and_no_approval_crosses_daemons() {
    let port = rest::free_port();
    // A webhook that takes the connection and never answers: no decision waits for it.
    let hanging = TcpListener::bind("127.0.0.1:0").unwrap();
    let hook = format!("http://{}/hook", hanging.local_addr().unwrap());
    let files = Files::new(&format!("listen = \"tcp:127.0.0.1:{port}\"\n"), Some(&hook));
    let transcript = files.path("transcript.txt");
    // The person at the approver's terminal (a pseudo-terminal from Python's pty module)
    // approves the first request it is shown and leaves the next unanswered.
    let person = Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("python/approver_terminal.py"))
        .arg(&transcript)
        .arg("y,y")
        .arg(approver_bin())
        .args(files.serve_args())
        .spawn()
        .unwrap();
    let mut person = Stop(person);
    files.wait_listening(&mut person.0);
    let alpha = files.daemon("alpha", "");
    let beta = files.daemon("beta", "escalation_ttl_secs = 3\n");
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("terminal.txt");
    let mut rpc = Rpc::connect(&alpha);
    let reply = ask_write(&mut rpc, "s1", &target, "by the terminal\n");
    assert!(reply.approved, "{reply:?}");
    // The same session name, path, content and ticket at the other daemon: refused there.
    let mut other = Rpc::connect(&beta);
    let replayed = write(&mut other, "s1", &target, "by the terminal\n", &reply).unwrap_err();
    assert_eq!(replayed.code, ErrorCode::SandboxDenied, "{replayed:?}");
    assert!(!target.exists());
    write(&mut rpc, "s1", &target, "by the terminal\n", &reply).unwrap();
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "by the terminal\n");
    // beta's request waits (the terminal is asked and does not answer) until it expires.
    let late = outside.path().join("late.txt");
    let waiting = {
        let late = late.clone();
        std::thread::spawn(move || {
            ask(
                &mut other,
                "s2",
                v1::EscalatedOp { op: "readText".into(), path: p(&late), ..Default::default() },
            )
        })
    };
    let keys = wait_for_requests(port, 1);
    let expired = waiting.join().unwrap();
    assert!(!expired.approved, "{expired:?}");
    let (status, page) =
        http(port, "POST", "/decide", BOB, &format!("key={}&decision=approve&reason=", keys[0]));
    assert_eq!(status, 409, "{page}");
    assert!(page.contains("This request is no longer waiting: it expired at "), "{page}");
    assert!(!late.exists());
    let decided: Vec<(String, String, String)> = files
        .decisions()
        .iter()
        .map(|l| {
            let s = |k: &str| l[k].as_str().unwrap().to_owned();
            (s("sandbox"), s("decision"), s("decider"))
        })
        .collect();
    assert_eq!(
        decided,
        [
            ("alpha".into(), "approved".into(), "person".into()),
            ("alpha".into(), "approved".into(), "person".into()),
            ("beta".into(), "expired".into(), String::new())
        ]
    );
    let shown = std::fs::read_to_string(&transcript).unwrap();
    assert!(shown.contains(&format!("op 1: writeText {}\r\n", p(&target))), "{shown}");
}

/// Inside an MCP host that supports URL-mode elicitation (the official Python SDK), an
/// escalation sends the person to the approver's page for the session's request; the page
/// decides (`tests/mcp/url_elicitation.py` says what it checks).
#[test]
fn an_mcp_host_with_url_elicitation_sends_the_person_to_the_page() {
    let port = rest::free_port();
    let files = Files::new(&format!("listen = \"tcp:127.0.0.1:{port}\"\n"), None);
    let mut serve = Command::new(approver_bin());
    serve.args(files.serve_args()).stdin(Stdio::null()).stderr(Stdio::null());
    let mut child = serve.spawn().unwrap();
    files.wait_listening(&mut child);
    // The front (its one child) confined itself (Landlock sets no_new_privs); the keeper did not.
    let keeper = child.id();
    let children = std::fs::read_to_string(format!("/proc/{keeper}/task/{keeper}/children")).unwrap();
    let front: u32 = children.split_whitespace().next().unwrap().parse().unwrap();
    let no_new_privs = |pid: u32| {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        status.lines().find_map(|l| l.strip_prefix("NoNewPrivs:")).unwrap().trim().to_owned()
    };
    assert_eq!((no_new_privs(keeper), no_new_privs(front)), ("0".into(), "1".into()));
    let _approver = Stop(child);
    let alpha = files.daemon("alpha", "");
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("app.conf"), "port = 1\n").unwrap();
    let page = format!("http://127.0.0.1:{port}");
    let config = alpha.dir.path().join("client.toml");
    std::fs::write(&config, format!("approverUrl = \"{page}/\"\n")).unwrap();
    let out = Command::new(python())
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("mcp").join("url_elicitation.py"))
        .arg("--fsd-tools")
        .arg(tools_bin())
        .args(["--endpoint", &alpha.endpoint(), "--cwd", &p(&alpha.root), "--config", &p(&config)])
        .args(["--outside", &p(outside.path()), "--page", &page, "--token", BOB])
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "tests/mcp/url_elicitation.py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let decided: Vec<(String, String)> = files
        .decisions()
        .iter()
        .map(|l| (l["decision"].as_str().unwrap().to_owned(), l["decider"].as_str().unwrap().to_owned()))
        .collect();
    // Two decisions with a host on 2025-11-25, two more on 2026-07-28 (multi-round-trip).
    let said: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(said, json!({"elicitations": 2, "rounds": 2}));
    let (approved, refused) =
        (("approved".to_owned(), "person bob".to_owned()), ("refused".to_owned(), "person bob".to_owned()));
    assert_eq!(decided, [approved.clone(), refused.clone(), approved, refused]);
}

/// A host with neither URL nor form elicitation (the Python SDK declaring none) and an
/// approver with a page: the escalation fields are offered, and the escalated read waits for the
/// page's decision instead of being refused; bob approves there and the read returns the file
/// (`tests/mcp/page_without_elicitation.py`).
#[test]
fn an_mcp_host_without_elicitation_waits_for_the_page() {
    let port = rest::free_port();
    let files = Files::new(&format!("listen = \"tcp:127.0.0.1:{port}\"\n"), None);
    let mut serve = Command::new(approver_bin());
    serve.args(files.serve_args()).stdin(Stdio::null()).stderr(Stdio::null());
    let mut child = serve.spawn().unwrap();
    files.wait_listening(&mut child);
    let _approver = Stop(child);
    let alpha = files.daemon("alpha", "");
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("app.conf"), "port = 1\n").unwrap();
    let page = format!("http://127.0.0.1:{port}");
    let config = alpha.dir.path().join("client.toml");
    std::fs::write(&config, format!("approverUrl = \"{page}/\"\n")).unwrap();
    let out = Command::new(python())
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("mcp").join("page_without_elicitation.py"))
        .arg("--fsd-tools")
        .arg(tools_bin())
        .args(["--endpoint", &alpha.endpoint(), "--cwd", &p(&alpha.root), "--config", &p(&config)])
        .args(["--outside", &p(outside.path()), "--page", &page, "--token", BOB])
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "tests/mcp/page_without_elicitation.py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        said,
        json!({"protocol": "2025-11-25", "offered": true, "waiting_when_decided": true, "read": true, "host_asked": []})
    );
    let decided: Vec<(String, String)> = files
        .decisions()
        .iter()
        .map(|l| (l["decision"].as_str().unwrap().to_owned(), l["decider"].as_str().unwrap().to_owned()))
        .collect();
    assert_eq!(decided, [("approved".to_owned(), "person bob".to_owned())]);
}

/// A webhook that always answers 500 (a Python server counting POSTs): the approver tries it the
/// documented 3 times, 1 s then 2 s apart, then stops and says so in one line; the page's
/// decision meanwhile is not held.
#[test]
fn a_failing_webhook_is_tried_three_times_and_holds_no_decision() {
    const FAILING: &str = r#"
import http.server, sys
class Hook(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        print("POST", flush=True)
        self.send_response(500)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *args):
        pass
server = http.server.HTTPServer(("127.0.0.1", 0), Hook)
print(server.server_address[1], flush=True)
server.serve_forever()
"#;
    let mut hook = Command::new("python3").args(["-c", FAILING]).stdout(Stdio::piped()).spawn().unwrap();
    let mut lines = BufReader::new(hook.stdout.take().unwrap()).lines();
    let hook_port: u16 = lines.next().unwrap().unwrap().trim().parse().unwrap();
    let _hook = Stop(hook);
    let posts = Arc::new(Mutex::new(Vec::new()));
    {
        let posts = posts.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                if line == "POST" {
                    posts.lock().unwrap().push(Instant::now());
                }
            }
        });
    }
    let port = rest::free_port();
    let files = Files::new(
        &format!("listen = \"tcp:127.0.0.1:{port}\"\n"),
        Some(&format!("http://127.0.0.1:{hook_port}/hook")),
    );
    let stderr = std::fs::File::create(files.path("stderr.txt")).unwrap();
    let mut serve = Command::new(approver_bin());
    serve.args(files.serve_args()).stdin(Stdio::null()).stderr(stderr);
    let mut child = serve.spawn().unwrap();
    files.wait_listening(&mut child);
    let approver = Stop(child);
    let alpha = files.daemon("alpha", "");
    let outside = tempfile::tempdir().unwrap();
    let path = outside.path().join("app.conf");
    let asked = {
        let mut rpc = Rpc::connect(&alpha);
        let path = path.clone();
        std::thread::spawn(move || {
            let read = v1::EscalatedOp { op: "readText".into(), path: p(&path), ..Default::default() };
            let reply = ask(&mut rpc, "s1", read);
            (reply, Instant::now())
        })
    };
    let keys = wait_for_requests(port, 1);
    let (status, page) =
        http(port, "POST", "/decide", ALICE, &format!("key={}&decision=approve&reason=", keys[0]));
    assert_eq!(status, 200, "{page}");
    let (reply, answered) = asked.join().unwrap();
    assert!(reply.approved && reply.decided_by == v1::Decider::Person as i32, "{reply:?}");
    // Every try, then long enough for a fourth (4 s after the third) that must not come.
    let deadline = Instant::now() + Duration::from_secs(30);
    while posts.lock().unwrap().len() < 3 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_secs(6));
    let posts = posts.lock().unwrap().clone();
    assert_eq!(posts.len(), 3, "tries: {posts:?}");
    // The decision came before the webhook's tries were over.
    assert!(answered < posts[2], "the decision waited for the webhook");
    let gaps: Vec<Duration> = posts.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(
        gaps[0] >= Duration::from_millis(900) && gaps[1] >= Duration::from_millis(1900),
        "backoff 1 s, 2 s: {gaps:?}"
    );
    drop(approver);
    let said = std::fs::read_to_string(files.path("stderr.txt")).unwrap();
    let about: Vec<&str> = said.lines().filter(|l| l.contains("webhook")).collect();
    assert_eq!(
        about,
        [
            "fsd-approver: the webhook failed 3 times; the last: the webhook answered 500 Internal Server Error"
        ],
        "{said}"
    );
    let decided: Vec<String> =
        files.decisions().iter().map(|l| l["decider"].as_str().unwrap().to_owned()).collect();
    assert_eq!(decided, ["person alice"]);
}

/// Daemons reach the approver over TLS on TCP: alpha is named by its client certificate (no
/// token), beta by its token; a certificate of another CA fails the handshake and one of the
/// right CA that names no daemon is refused, so neither is ever asked about. alpha's approval
/// is nothing at beta. The approver refuses plain gRPC off loopback before it listens.
#[test]
fn daemons_are_named_by_certificate_or_token_over_tls_and_a_stranger_is_refused() {
    let port = rest::free_port();
    let certs = tempfile::tempdir().unwrap();
    let server_ca = pki::Ca::new(certs.path(), "approver-ca");
    let server = server_ca.server("approver", &["localhost"], &["127.0.0.1".parse().unwrap()]);
    let daemons_ca = pki::Ca::new(certs.path(), "daemons-ca");
    let alpha_cert = daemons_ca.client("alpha", "alpha.sandboxes.example");
    let nameless = daemons_ca.client("gamma", "gamma.sandboxes.example");
    let stranger = pki::Ca::new(certs.path(), "stranger-ca").client("stranger", "alpha.sandboxes.example");
    let files = Files::new("", None);
    let d = files.dir.path().display();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(
        files.path("approver.toml"),
        format!(
            "[grpc]\ntls_cert = \"{}\"\ntls_key = \"{}\"\nclient_ca = \"{}\"\n\n\
             [[daemon]]\nsandbox = \"alpha\"\ncertificate = \"alpha.sandboxes.example\"\n\n\
             [[daemon]]\nsandbox = \"beta\"\ntoken_file = \"{d}/beta.token\"\n",
            p(&server.cert),
            p(&server.key),
            p(&daemons_ca.cert)
        ),
    )
    .unwrap();
    std::fs::write(
        files.path("rules.toml"),
        format!("[[rule]]\nmode = \"*\"\npath = \"{}/**\"\ndecision = \"allow\"\n", p(outside.path())),
    )
    .unwrap();
    let serve = |listen: &str, config: &str| {
        let mut args = files.serve_args();
        for (flag, value) in [("--listen", listen.to_owned()), ("--config", p(&files.path(config)))] {
            let at = args.iter().position(|a| a == flag).unwrap();
            args[at + 1] = value;
        }
        args.extend(["--rules".to_owned(), p(&files.path("rules.toml"))]);
        let mut command = Command::new(approver_bin());
        command.args(args).stdin(Stdio::null());
        command
    };
    // Plain gRPC off loopback: refused, saying what to set, before anything listens.
    std::fs::write(files.path("plain.toml"), "").unwrap();
    let out = serve("tcp:0.0.0.0:0", "plain.toml").output().unwrap();
    assert!(!out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "fsd-approver: --listen tcp:0.0.0.0:0: plain gRPC only on a loopback address; give --config a [grpc] table (tls_cert, tls_key) so daemons connect over TLS (their approver_ca_file)"
    );
    let mut child =
        serve(&format!("tcp:127.0.0.1:{port}"), "approver.toml").stderr(Stdio::null()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(child.try_wait().unwrap().is_none(), "fsd-approver serve exited");
        assert!(Instant::now() < deadline, "fsd-approver serve did not listen");
        std::thread::sleep(Duration::from_millis(20));
    }
    let _approver = Stop(child);
    let daemon = |identity: &str| {
        let config = format!(
            "escalation = \"signed\"\nmax_mode = \"danger-full-access\"\napprover_public_key = \"{}\"\n\
             approver_endpoint = \"tcp:127.0.0.1:{port}\"\napprover_ca_file = \"{}\"\n{identity}",
            files.public,
            p(&server_ca.cert),
        );
        Daemon::start_with(&[], &config)
    };
    let certified = |pair: &pki::Pair| {
        format!("approver_client_cert = \"{}\"\napprover_client_key = \"{}\"\n", p(&pair.cert), p(&pair.key))
    };
    let alpha = daemon(&certified(&alpha_cert));
    let beta = daemon(&format!("approver_token_file = \"{d}/beta.token\"\n"));
    let target = outside.path().join("by-certificate.txt");
    let mut rpc = Rpc::connect(&alpha);
    let reply = ask_write(&mut rpc, "s1", &target, "named by its certificate\n");
    assert!(reply.approved && reply.decided_by == v1::Decider::Rules as i32, "{reply:?}");
    // The same session, path, content and ticket at beta: refused there, nothing written.
    let mut other = Rpc::connect(&beta);
    let replayed = write(&mut other, "s1", &target, "named by its certificate\n", &reply).unwrap_err();
    assert_eq!(replayed.code, ErrorCode::SandboxDenied, "{replayed:?}");
    assert!(!target.exists());
    write(&mut rpc, "s1", &target, "named by its certificate\n", &reply).unwrap();
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "named by its certificate\n");
    let read = v1::EscalatedOp { op: "readText".into(), path: p(&target), ..Default::default() };
    let by_token = ask(&mut other, "s2", read.clone());
    assert!(by_token.approved, "{by_token:?}");
    // Another CA's certificate (with alpha's very name), and the right CA's for no daemon:
    // neither reaches a decision.
    for pair in [&stranger, &nameless] {
        let refused = daemon(&certified(pair));
        let answer = ask(&mut Rpc::connect(&refused), "s3", read.clone());
        assert!(!answer.approved && answer.decided_by == v1::Decider::Unreachable as i32, "{answer:?}");
    }
    let decided: Vec<(String, String)> = files
        .decisions()
        .iter()
        .map(|l| (l["sandbox"].as_str().unwrap().to_owned(), l["decision"].as_str().unwrap().to_owned()))
        .collect();
    let approved = |sandbox: &str| (sandbox.to_owned(), "approved".to_owned());
    assert_eq!(decided, [approved("alpha"), approved("alpha"), approved("beta")]);
}

/// One `POST /login` to the page on loopback from `source` (a loopback address of its own):
/// the status and the `Retry-After` header.
fn login_from(port: u16, source: &str, name: &str, token: &str) -> (u16, Option<u64>) {
    const POST: &str = r#"
import socket, sys
port, source, body = int(sys.argv[1]), sys.argv[2], sys.argv[3]
s = socket.create_connection(("127.0.0.1", port), source_address=(source, 0))
s.sendall((f"POST /login HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
           "Content-Type: application/x-www-form-urlencoded\r\n"
           f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n{body}").encode())
data = b""
while chunk := s.recv(65536):
    data += chunk
sys.stdout.write(data.decode())
"#;
    let body = format!("name={name}&token={token}&next=%2F");
    let out = Command::new("python3").args(["-c", POST, &port.to_string(), source, &body]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let answer = String::from_utf8(out.stdout).unwrap();
    let status = answer.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let retry = answer
        .lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("retry-after:").map(|v| v.trim().to_owned()))
        .and_then(|v| v.parse().ok());
    (status, retry)
}

/// The page's login rate limit: past 3 failures in the window, a source address gets 429 (a
/// right token too) while another address may log in; 3 failures naming alice refuse alice
/// from any address, not bob; once the window has passed, the right token logs in again.
#[test]
fn failed_logins_are_limited_per_address_and_per_person_until_the_window_ends() {
    let port = rest::free_port();
    let files = Files::new(
        &format!("listen = \"tcp:127.0.0.1:{port}\"\nlogin_failures = 3\nlogin_window_secs = 6\n"),
        None,
    );
    let mut serve = Command::new(approver_bin());
    serve.args(files.serve_args()).stdin(Stdio::null()).stderr(Stdio::null());
    let mut child = serve.spawn().unwrap();
    files.wait_listening(&mut child);
    let _approver = Stop(child);
    let wrong = "wrong-token-0123456789";
    let steps: [(&str, &str, &str, (u16, bool)); 11] = [
        // One address: three failures, then refused, a right token too.
        ("127.0.0.2", "", wrong, (403, false)),
        ("127.0.0.2", "", wrong, (403, false)),
        ("127.0.0.2", "", wrong, (403, false)),
        ("127.0.0.2", "", wrong, (429, true)),
        ("127.0.0.2", "", ALICE, (429, true)),
        // Another address is not held by the first one's failures.
        ("127.0.0.3", "", BOB, (303, false)),
        // One person named from one address, then refused from another; bob is not.
        ("127.0.0.4", "alice", wrong, (403, false)),
        ("127.0.0.4", "alice", BOB, (403, false)),
        ("127.0.0.4", "alice", wrong, (403, false)),
        ("127.0.0.5", "alice", ALICE, (429, true)),
        ("127.0.0.5", "bob", BOB, (303, false)),
    ];
    // When each answer came: the daemon counted the failure before it, so a window starts no
    // later than its first failure's answer (timing from the asking flaked under load).
    let mut answered = Vec::new();
    for (source, name, token, (status, retry)) in steps {
        let (got, after) = login_from(port, source, name, token);
        answered.push(Instant::now());
        assert_eq!((got, after.is_some()), (status, retry), "{source} {name} {token}");
        assert!(after.is_none_or(|s| (1..=6).contains(&s)), "Retry-After {after:?}");
    }
    // Both windows (6 s from each key's first failure, alice's the later) have passed: the
    // right tokens log in.
    std::thread::sleep((answered[6] + Duration::from_millis(6100)).saturating_duration_since(Instant::now()));
    assert_eq!(login_from(port, "127.0.0.2", "", ALICE), (303, None));
    assert_eq!(login_from(port, "127.0.0.5", "alice", ALICE), (303, None));
}
