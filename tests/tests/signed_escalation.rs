//! Signed escalation: an approval is an Ed25519 signature by `fsd-approver` over the daemon's own
//! description of the call, good once, for that session, that path, that content, that
//! operation, before it expires; anything else is refused with nothing written, and audited.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::rpc::{Rpc, p};
use common::*;
use fsd_proto::{ErrorCode, WireError, v1};
use serde_json::json;

fn approver_bin() -> PathBuf {
    let bin = bin_dir().join("fsd-approver");
    assert!(bin.is_file(), "{} is missing: build the workspace binaries first", bin.display());
    bin
}

struct Signed {
    d: Daemon,
    keys: tempfile::TempDir,
    outside: tempfile::TempDir,
    audit: PathBuf,
}

impl Signed {
    fn start(extra: &str) -> Signed {
        let keys = tempfile::tempdir().unwrap();
        let out = Command::new(approver_bin()).arg("keygen").arg("--dir").arg(keys.path()).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let public = std::fs::read_to_string(keys.path().join("approver.pub")).unwrap();
        let outside = tempfile::tempdir().unwrap();
        let audit = outside.path().join("audit.jsonl");
        let config = format!(
            "escalation = \"signed\"\nmax_mode = \"danger-full-access\"\napprover_public_key = \"{}\"\naudit_log = \"{}\"\n{extra}",
            public.trim(),
            audit.display()
        );
        std::fs::write(
            keys.path().join("allow.toml"),
            "[[rule]]\nmode = \"*\"\npath = \"/**\"\ndecision = \"allow\"\n",
        )
        .unwrap();
        std::fs::write(
            keys.path().join("deny.toml"),
            "[[rule]]\nmode = \"*\"\npath = \"/**\"\ndecision = \"deny\"\n",
        )
        .unwrap();
        Signed { d: Daemon::start_with(&[], &config), keys, outside, audit }
    }

    fn key(&self) -> PathBuf {
        self.keys.path().join("approver.key")
    }

    /// A tool session whose approver applies `rules` (allow.toml or deny.toml).
    fn session(&self, rules: &str) -> ToolSession {
        let command =
            json!([approver_bin(), "sign", "--key", self.key(), "--rules", self.keys.path().join(rules)]);
        self.d.session_with_config(&format!("approverCommand = {command}\n"))
    }

    /// Signs a description the way an operator's approver would.
    fn sign(&self, description: &str) -> Vec<u8> {
        let mut child = Command::new(approver_bin())
            .args(["sign", "--key"])
            .arg(self.key())
            .arg("--rules")
            .arg(self.keys.path().join("allow.toml"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(description.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success());
        hex_decode(String::from_utf8(out.stdout).unwrap().trim())
    }

    fn audit(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(&self.audit)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

fn hex_decode(text: &str) -> Vec<u8> {
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap()).collect()
}

fn context(session: &str, ticket: Option<v1::EscalationTicket>) -> Option<v1::CallContext> {
    Some(v1::CallContext {
        session_id: session.into(),
        call_id: "c".into(),
        mode: if ticket.is_some() { v1::Mode::DangerFullAccess as i32 } else { v1::Mode::Unspecified as i32 },
        escalation: ticket,
    })
}

fn sha256(bytes: &[u8]) -> Vec<u8> {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).to_vec()
}

/// Describes `op` on `path` with `content` for session "s1" and returns a signed ticket.
fn ticket(s: &Signed, rpc: &mut Rpc, op: &str, path: &Path, content: &str) -> v1::EscalationTicket {
    let request = v1::EscalationRequest {
        context: context("s1", None),
        requested_mode: v1::Mode::DangerFullAccess as i32,
        justification: "the user asked".into(),
        ops: vec![v1::EscalatedOp {
            op: op.into(),
            path: p(path),
            destination: String::new(),
            content_sha256: if op == "writeText" {
                sha256(content.as_bytes()).into()
            } else {
                Default::default()
            },
            ..Default::default()
        }],
    };
    let described = rpc.rt.block_on(rpc.client.request_escalation(request)).unwrap().into_inner();
    assert!(described.description.starts_with("fsd escalation v1\n"), "{}", described.description);
    assert!(described.description.contains(&format!("op 1: {op} {}", p(path))), "{}", described.description);
    let signature = s.sign(&described.description);
    v1::EscalationTicket {
        approved_mode: v1::Mode::DangerFullAccess as i32,
        justification: "the user asked".into(),
        escalation_id: described.escalation_id,
        nonce: described.nonce,
        signature: signature.into(),
    }
}

fn write(
    rpc: &mut Rpc,
    session: &str,
    path: &Path,
    content: &str,
    ticket: v1::EscalationTicket,
) -> Result<(), WireError> {
    let request = v1::WriteTextRequest {
        context: context(session, Some(ticket)),
        path: p(path),
        content: content.into(),
        ..Default::default()
    };
    rpc.rt.block_on(rpc.client.write_text(request)).map(drop).map_err(|s| WireError::from_status(&s).unwrap())
}

#[test]
fn the_tools_get_a_signature_and_use_it_once() {
    let s = Signed::start("");
    let target = s.outside.path().join("approved.txt");
    let mut t = s.session("allow.toml");
    let r = t.call("write", json!({"file_path": p(&target), "content": "approved\n", "sandbox_permissions": "danger-full-access", "justification": "the user asked"}));
    assert!(!r.is_error(), "{}", r.json);
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "approved\n");
    // The next call is back at the default mode.
    let r = t.call("edit", json!({"file_path": p(&target), "old_string": "approved", "new_string": "again"}));
    assert_eq!(r.code(), Some("FS_SANDBOX_DENIED"), "{}", r.json);
    // An approver that says no: refused, nothing written.
    let mut no = s.session("deny.toml");
    let other = s.outside.path().join("denied.txt");
    let r = no.call("write", json!({"file_path": p(&other), "content": "x", "sandbox_permissions": "danger-full-access", "justification": "please"}));
    assert!(r.text().starts_with("Error: escalation to danger-full-access was not approved"), "{}", r.json);
    assert!(!other.exists());
    let audit = s.audit();
    assert!(audit.iter().any(|l| l["op"] == "escalate:describe" && l["decision"] == "pending"), "{audit:?}");
    assert!(
        audit.iter().any(|l| l["op"] == "escalate:writeText" && l["decision"] == "approved"),
        "{audit:?}"
    );
}

#[test]
fn a_ticket_is_refused_for_anything_but_the_approved_call() {
    let s = Signed::start("");
    let mut rpc = Rpc::connect(&s.d);
    let target = s.outside.path().join("t.txt");
    let elsewhere = s.outside.path().join("elsewhere.txt");
    type Variant = fn(&mut v1::EscalationTicket) -> (&'static str, &'static str, bool);
    let cases: Vec<(&str, Variant, &str)> = vec![
        ("replay", |_| ("s1", "ok\n", false), "unknown or already spent escalation"),
        ("another path", |_| ("s1", "ok\n", true), "this call differs from every call the approver signed"),
        (
            "other content",
            |_| ("s1", "evil\n", false),
            "this call differs from every call the approver signed",
        ),
        ("another session", |_| ("s2", "ok\n", false), "the escalation belongs to another session or client"),
        (
            "forged signature",
            |t| {
                let mut sig = t.signature.to_vec();
                sig[0] ^= 1;
                t.signature = sig.into();
                ("s1", "ok\n", false)
            },
            "the escalation ticket is not signed by the configured approver",
        ),
        (
            "another nonce",
            |t| {
                let mut nonce = t.nonce.to_vec();
                nonce[0] ^= 1;
                t.nonce = nonce.into();
                ("s1", "ok\n", false)
            },
            "unknown or already spent escalation",
        ),
    ];
    for (name, variant, want) in cases {
        let mut tk = ticket(&s, &mut rpc, "writeText", &target, "ok\n");
        if name == "replay" {
            write(&mut rpc, "s1", &target, "ok\n", tk.clone()).unwrap();
            std::fs::remove_file(&target).unwrap();
        }
        let (session, content, other_path) = variant(&mut tk);
        let path = if other_path { &elsewhere } else { &target };
        let err = write(&mut rpc, session, path, content, tk).unwrap_err();
        assert_eq!(err.code, ErrorCode::SandboxDenied, "{name}");
        assert_eq!(err.message, format!("escalation ticket refused: {want}"), "{name}");
        assert!(!target.exists() && !elsewhere.exists(), "{name}: something was written");
    }
    // Another operation: a ticket for a write does not delete.
    std::fs::write(&target, "keep\n").unwrap();
    let tk = ticket(&s, &mut rpc, "writeText", &target, "ok\n");
    let request = v1::DeleteFileRequest { context: context("s1", Some(tk)), path: p(&target), guard: None };
    let status = rpc.rt.block_on(rpc.client.delete_file(request)).unwrap_err();
    assert_eq!(
        WireError::from_status(&status).unwrap().message,
        "escalation ticket refused: this call differs from every call the approver signed"
    );
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep\n");
    assert!(s.audit().iter().any(|l| l["op"] == "escalate:writeText" && l["decision"] == "refused"));
}

#[test]
fn an_expired_ticket_is_refused() {
    let s = Signed::start("escalation_ttl_secs = 1\n");
    let mut rpc = Rpc::connect(&s.d);
    let target = s.outside.path().join("late.txt");
    let tk = ticket(&s, &mut rpc, "writeText", &target, "ok\n");
    std::thread::sleep(std::time::Duration::from_millis(2100));
    let err = write(&mut rpc, "s1", &target, "ok\n", tk).unwrap_err();
    assert_eq!(err.message, "escalation ticket refused: the escalation expired");
    assert!(!target.exists());
}

#[test]
fn a_target_swapped_for_a_symlink_after_approval_is_refused() {
    let s = Signed::start("");
    let mut rpc = Rpc::connect(&s.d);
    let target = s.outside.path().join("file.txt");
    let victim = s.outside.path().join("victim.txt");
    std::fs::write(&target, "old\n").unwrap();
    std::fs::write(&victim, "victim\n").unwrap();
    let tk = ticket(&s, &mut rpc, "writeText", &target, "new\n");
    std::fs::remove_file(&target).unwrap();
    std::os::unix::fs::symlink(&victim, &target).unwrap();
    let err = write(&mut rpc, "s1", &target, "new\n", tk).unwrap_err();
    assert_eq!(
        err.message,
        "escalation ticket refused: this call differs from every call the approver signed"
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "victim\n");
    let audit = s.audit();
    assert!(
        audit.iter().any(|l| l["op"] == "escalate:writeText"
            && l["decision"] == "refused"
            && l["path"] == p(&target)),
        "{audit:?}"
    );
}

#[test]
fn above_the_clients_maximum_nothing_is_described() {
    let uid = rustix::process::geteuid().as_raw();
    let s = Signed::start(&format!("[client_max_modes]\n\"{uid}\" = \"workspace-write\"\n"));
    let mut rpc = Rpc::connect(&s.d);
    let request = v1::EscalationRequest {
        context: context("s1", None),
        requested_mode: v1::Mode::DangerFullAccess as i32,
        justification: "why".into(),
        ops: vec![v1::EscalatedOp {
            op: "writeText".into(),
            path: p(&s.outside.path().join("x")),
            ..Default::default()
        }],
    };
    let status = rpc.rt.block_on(rpc.client.request_escalation(request)).unwrap_err();
    assert_eq!(
        WireError::from_status(&status).unwrap().message,
        "danger-full-access is above this client's maximum mode workspace-write"
    );
}

#[test]
fn the_terminal_prompt_signs_only_on_yes() {
    let s = Signed::start("");
    // A pseudo-terminal from Python's pty module stands in for the operator's terminal.
    let script = r#"
import os, pty, sys, select
key, answer = sys.argv[1], sys.argv[2]
pid, fd = pty.fork()
if pid == 0:
    r, w = os.pipe()
    os.write(w, b"fsd escalation v1\nid: 1\nmode: danger-full-access\nop 1: writeText /tmp/x\n")
    os.close(w)
    os.dup2(r, 0)
    os.execv(sys.argv[3], [sys.argv[3], "sign", "--key", key])
out = b""
answered = False
while True:
    try:
        ready, _, _ = select.select([fd], [], [], 10)
        if not ready:
            break
        data = os.read(fd, 4096)
    except OSError:
        break
    if not data:
        break
    out += data
    if not answered and b"Approve? [y/N]" in out:
        os.write(fd, answer.encode() + b"\n")
        answered = True
_, status = os.waitpid(pid, 0)
sys.stdout.write(out.decode(errors="replace"))
sys.exit(os.waitstatus_to_exitcode(status))
"#;
    let run = |answer: &str| {
        Command::new("python3")
            .arg("-c")
            .arg(script)
            .arg(s.key())
            .arg(answer)
            .arg(approver_bin())
            .output()
            .unwrap()
    };
    let yes = run("y");
    let shown = String::from_utf8_lossy(&yes.stdout).into_owned();
    assert_eq!(yes.status.code(), Some(0), "{shown}");
    assert!(shown.contains("op 1: writeText /tmp/x"), "the person saw the description: {shown}");
    let no = run("n");
    assert_eq!(no.status.code(), Some(1), "{}", String::from_utf8_lossy(&no.stdout));
}

#[test]
fn the_approver_sees_a_diff_the_daemon_made() {
    let s = Signed::start("");
    let mut rpc = Rpc::connect(&s.d);
    let target = s.outside.path().join("diffed.txt");
    std::fs::write(&target, "one\ntwo\n").unwrap();
    let request = v1::EscalationRequest {
        context: context("s1", None),
        requested_mode: v1::Mode::DangerFullAccess as i32,
        justification: "fix".into(),
        ops: vec![
            v1::EscalatedOp {
                op: "writeText".into(),
                path: p(&target),
                // A lying digest is ignored when the content itself is sent.
                content_sha256: vec![0u8; 32].into(),
                content: Some("one\nTWO\u{202e}\n".into()),
                ..Default::default()
            },
            v1::EscalatedOp {
                op: "editText".into(),
                path: p(&target),
                old_string: Some("one".into()),
                new_string: Some("uno".into()),
                ..Default::default()
            },
        ],
    };
    let described = rpc.rt.block_on(rpc.client.request_escalation(request)).unwrap().into_inner();
    let text = &described.description;
    assert!(text.contains("  diff:\n"), "{text}");
    assert!(text.contains("    -two\n    +TWO\\u{202e}\n"), "the daemon's own diff, escaped: {text}");
    assert!(text.contains("    -one\n    +uno\n"), "{text}");
    assert!(
        text.contains(&format!(
            "  content-sha256: {}\n",
            hex_encode(&sha256("one\nTWO\u{202e}\n".as_bytes()))
        )),
        "{text}"
    );
    // The signed ticket admits exactly that content.
    let signature = s.sign(text);
    let tk = v1::EscalationTicket {
        approved_mode: v1::Mode::DangerFullAccess as i32,
        justification: "fix".into(),
        escalation_id: described.escalation_id,
        nonce: described.nonce,
        signature: signature.into(),
    };
    assert!(write(&mut rpc, "s1", &target, "one\nTWO\u{202e}\n", tk).is_ok());
}

fn hex_encode(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn the_approver_can_be_a_service_and_patches_are_approved_as_a_whole() {
    let s = Signed::start("");
    let socket = s.keys.path().join("approver.sock");
    let mut approver = Command::new(approver_bin())
        .args(["serve", "--key"])
        .arg(s.key())
        .arg("--listen")
        .arg(format!("unix:{}", socket.display()))
        .arg("--rules")
        .arg(s.keys.path().join("allow.toml"))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        assert!(std::time::Instant::now() < deadline, "fsd-approver serve did not listen");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let config = format!("applyPatch = true\napproverEndpoint = \"unix:{}\"\n", socket.display());
    let mut t = s.d.session_with_config(&config);
    let target = s.outside.path().join("served.txt");
    let r = t.call("write", json!({"file_path": p(&target), "content": "served\n", "sandbox_permissions": "danger-full-access", "justification": "the user asked"}));
    assert!(!r.is_error(), "{}", r.json);
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "served\n");
    // A patch outside the root: one description lists every operation; reads, the update and
    // the new file all run on the one ticket, which is spent when the patch finishes.
    let patch = format!(
        "*** Begin Patch\n*** Add File: {new}\n+new\n*** Delete File: {old}\n*** End Patch",
        new = p(&s.outside.path().join("added.txt")),
        old = p(&target),
    );
    let r = t.call("apply_patch", json!({"input": patch, "sandbox_permissions": "danger-full-access", "justification": "the user asked"}));
    let text = r.text().to_owned();
    let _ = approver.kill();
    let _ = approver.wait();
    assert!(!r.is_error(), "{}", r.json);
    assert!(text.starts_with("Success. Updated the following files:"), "{text}");
    assert_eq!(std::fs::read_to_string(s.outside.path().join("added.txt")).unwrap(), "new\n");
    assert!(!target.exists());
}
