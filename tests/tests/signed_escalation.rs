//! Signed escalation end to end: the daemon checks each call, sends its own description to
//! `fsd-approver serve` (running as another uid) and tells the client only the decision. An
//! approval is good once, for that session, that path, that content, that operation, before it
//! expires; a compromised client speaking raw gRPC learns neither content nor existence of
//! anything outside its grant; every decision is audited with the description's digest.

use crate::common;

use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::rpc::{Rpc, p};
use common::*;
use fsd_proto::{ErrorCode, WireError, v1};
use serde_json::json;

/// The uid the approver runs as: not the daemon's, not the client's.
const APPROVER_UID: u32 = 65534;

fn approver_bin() -> PathBuf {
    let bin = bin_dir().join("fsd-approver");
    assert!(bin.is_file(), "{} is missing: build the workspace binaries first", bin.display());
    bin
}

/// A key pair in a directory the approver's uid owns.
struct Keys {
    dir: tempfile::TempDir,
    public: String,
}

impl Keys {
    fn new() -> Keys {
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new(approver_bin()).arg("keygen").arg("--dir").arg(dir.path()).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let public = std::fs::read_to_string(dir.path().join("approver.pub")).unwrap().trim().to_owned();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        for name in ["", "approver.key", "approver.pub"] {
            std::os::unix::fs::chown(dir.path().join(name), Some(APPROVER_UID), Some(APPROVER_UID)).unwrap();
        }
        Keys { dir, public }
    }

    fn key(&self) -> PathBuf {
        self.dir.path().join("approver.key")
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("approver.sock")
    }

    fn log(&self) -> PathBuf {
        self.dir.path().join("decisions.jsonl")
    }

    /// A rule file deciding every path at every mode.
    fn rules(&self, decision: &str) -> PathBuf {
        let path = self.dir.path().join(format!("{decision}.toml"));
        std::fs::write(&path, format!("[[rule]]\nmode = \"*\"\npath = \"/**\"\ndecision = \"{decision}\"\n"))
            .unwrap();
        path
    }
}

/// `fsd-approver serve` as another uid, on a socket only root's group may use.
struct Approver {
    child: Child,
    socket: PathBuf,
}

impl Approver {
    fn serve(keys: &Keys, rules: &Path) -> Approver {
        let mut cmd = Command::new(approver_bin());
        cmd.arg("serve")
            .arg("--key")
            .arg(keys.key())
            .arg("--listen")
            .arg(format!("unix:{}", keys.socket().display()))
            .arg("--rules")
            .arg(rules)
            .args(["--socket-mode", "0660", "--socket-group", "0", "--log"])
            .arg(keys.log())
            .uid(APPROVER_UID)
            .gid(0)
            .stdin(Stdio::null())
            .stderr(Stdio::null());
        Approver::wait(cmd.spawn().unwrap(), keys.socket())
    }

    fn wait(mut child: Child, socket: PathBuf) -> Approver {
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::os::unix::net::UnixStream::connect(&socket).is_err() {
            if let Ok(Some(status)) = child.try_wait() {
                panic!("fsd-approver serve exited: {status}");
            }
            assert!(Instant::now() < deadline, "fsd-approver serve did not listen");
            std::thread::sleep(Duration::from_millis(20));
        }
        Approver { child, socket }
    }

    /// Stops it the way an operator does (SIGTERM) and returns its exit status.
    fn stop(mut self) -> std::process::ExitStatus {
        rustix::process::kill_process(
            rustix::process::Pid::from_raw(self.child.id() as i32).unwrap(),
            rustix::process::Signal::TERM,
        )
        .unwrap();
        self.child.wait().unwrap()
    }
}

impl Drop for Approver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Signed {
    d: Daemon,
    outside: tempfile::TempDir,
    audit: PathBuf,
}

impl Signed {
    fn start(keys: &Keys, extra: &str) -> Signed {
        Signed::start_with_key(keys, &keys.public, extra)
    }

    fn start_with_key(keys: &Keys, public: &str, extra: &str) -> Signed {
        Signed::start_env(keys, public, extra, &[])
    }

    fn start_env(keys: &Keys, public: &str, extra: &str, env: &[(&str, &str)]) -> Signed {
        let outside = tempfile::tempdir().unwrap();
        let audit = outside.path().join("audit.jsonl");
        let config = format!(
            "escalation = \"signed\"\nmax_mode = \"danger-full-access\"\napprover_public_key = \"{public}\"\napprover_endpoint = \"unix:{}\"\naudit_log = \"{}\"\n{extra}",
            keys.socket().display(),
            audit.display()
        );
        Signed { d: Daemon::start_with_env(&[], &config, env), outside, audit }
    }

    fn audit(&self) -> Vec<serde_json::Value> {
        jsonl(&self.audit)
    }
}

fn jsonl(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn context(session: &str, ticket: Option<v1::EscalationTicket>) -> Option<v1::CallContext> {
    Some(v1::CallContext {
        session_id: session.into(),
        call_id: "c".into(),
        mode: if ticket.is_some() { v1::Mode::DangerFullAccess as i32 } else { v1::Mode::Unspecified as i32 },
        escalation: ticket,
    })
}

fn ask(
    rpc: &mut Rpc,
    session: &str,
    ops: Vec<v1::EscalatedOp>,
) -> Result<v1::EscalationDescription, WireError> {
    let request = v1::EscalationRequest {
        context: context(session, None),
        requested_mode: v1::Mode::DangerFullAccess as i32,
        justification: "the user asked".into(),
        ops,
        patch: None,
    };
    rpc.rt
        .block_on(rpc.client.request_escalation(request))
        .map(tonic::Response::into_inner)
        .map_err(|s| WireError::from_status(&s).unwrap())
}

fn op(name: &str, path: &Path) -> v1::EscalatedOp {
    v1::EscalatedOp { op: name.into(), path: p(path), ..Default::default() }
}

fn write_op(path: &Path, content: &str) -> v1::EscalatedOp {
    v1::EscalatedOp { content: Some(content.into()), ..op("writeText", path) }
}

/// An approved escalation's ticket.
fn ticket(reply: v1::EscalationDescription) -> v1::EscalationTicket {
    assert!(reply.approved, "{reply:?}");
    v1::EscalationTicket {
        approved_mode: v1::Mode::DangerFullAccess as i32,
        justification: "the user asked".into(),
        escalation_id: reply.escalation_id,
        nonce: reply.nonce,
        signature: Default::default(),
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

fn read(
    rpc: &mut Rpc,
    session: &str,
    path: &Path,
    ticket: Option<v1::EscalationTicket>,
) -> Result<String, WireError> {
    let request = v1::ReadTextRequest { context: context(session, ticket), path: p(path), max_bytes: 0 };
    rpc.rt
        .block_on(rpc.client.read_text(request))
        .map(|r| r.into_inner().text)
        .map_err(|s| WireError::from_status(&s).unwrap())
}

/// A second keygen into the same directory replaces nothing and says why in one line: a daemon
/// may already trust the first public key.
#[test]
fn the_approver_recipe_names_the_group_it_may_not_use_and_its_logs_are_private() {
    use std::os::unix::fs::MetadataExt;
    // The README's recipe ran the approver as a user outside the socket's group: the bare
    // "Operation not permitted (os error 1)" named neither the group nor the fix; a group given by
    // name was then shown as its number.
    let keys = Keys::new();
    let rules = keys.rules("allow");
    for group in ["0", "root"] {
        let out = Command::new(approver_bin())
            .arg("serve")
            .arg("--key")
            .arg(keys.key())
            .arg("--listen")
            .arg(format!("unix:{}", keys.socket().display()))
            .arg("--rules")
            .arg(&rules)
            .args(["--socket-mode", "0660", "--socket-group", group])
            .uid(APPROVER_UID)
            .gid(APPROVER_UID)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(!out.status.success(), "{group}");
        assert_eq!(
            String::from_utf8_lossy(&out.stderr),
            format!(
                "fsd-approver: cannot serve: {}: cannot give the socket to group {group} (--socket-group): Operation not \
                 permitted (os error 1); add the approver's user to that group (usermod -aG {group} USER) or run it \
                 as root\n",
                keys.socket().display()
            ),
            "{group}"
        );
    }
    // Run as the recipe now says (a member of the group): the decision log is the approver's
    // alone (0600), the daemon's audit log its group's to read (0640).
    let approver = Approver::serve(&keys, &rules);
    assert_eq!(std::fs::metadata(keys.log()).unwrap().mode() & 0o777, 0o600);
    let signed = Signed::start(&keys, "");
    assert_eq!(std::fs::metadata(&signed.audit).unwrap().mode() & 0o777, 0o640, "{}", signed.audit.display());
    drop(signed);
    approver.stop();
}

#[test]
fn keygen_never_replaces_a_key() {
    let dir = tempfile::tempdir().unwrap();
    let keygen = || Command::new(approver_bin()).arg("keygen").arg("--dir").arg(dir.path()).output().unwrap();
    assert!(keygen().status.success());
    let (private, public) = (
        std::fs::read(dir.path().join("approver.key")).unwrap(),
        std::fs::read(dir.path().join("approver.pub")).unwrap(),
    );
    let again = keygen();
    assert!(!again.status.success());
    assert_eq!(
        String::from_utf8_lossy(&again.stderr).trim_end(),
        format!(
            "fsd-approver: {} already exists: keygen never replaces a key (daemons may trust its public key); \
             remove it first or pass another --dir",
            dir.path().join("approver.key").display()
        )
    );
    assert_eq!(std::fs::read(dir.path().join("approver.key")).unwrap(), private);
    assert_eq!(std::fs::read(dir.path().join("approver.pub")).unwrap(), public);
}

#[test]
fn an_existing_file_outside_the_roots_is_read_then_edited_with_approval() {
    let keys = Keys::new();
    let approver = Approver::serve(&keys, &keys.rules("allow"));
    let s = Signed::start(&keys, "");
    let target = s.outside.path().join("app.conf");
    std::fs::write(&target, "port = 1\n").unwrap();
    let mut t = s.d.session();
    let esc = json!({"sandbox_permissions": "danger-full-access", "justification": "the user asked"});
    let with = |mut args: serde_json::Value| {
        args.as_object_mut().unwrap().extend(esc.as_object().unwrap().clone());
        args
    };
    // Unobserved: refused by the policy before anyone is asked.
    let r = t.call("edit", with(json!({"file_path": p(&target), "old_string": "1", "new_string": "2"})));
    err(
        &r,
        "FS_NOT_OBSERVED",
        &format!(
            "Error: cannot modify \"{}\": file has not been read — read the file, then retry",
            p(&target)
        ),
    );
    // A blind overwrite: the daemon will not say whether it exists; it asks for a read first.
    let r = t.call("write", with(json!({"file_path": p(&target), "content": "x"})));
    err(
        &r,
        "FS_NOT_OBSERVED",
        &format!(
            "Error: cannot modify \"{}\" under danger-full-access mode before reading it: read it first with the read tool, sandbox_permissions set to \"danger-full-access\" and a justification (an approved read also shows whether it exists), then retry this call",
            p(&target)
        ),
    );
    // The read without the fields: denied, with the hint for the one mode it needs.
    let r = t.call("read", json!({"file_path": p(&target)}));
    assert_eq!(r.code(), Some("FS_SANDBOX_DENIED"), "{}", r.json);
    assert!(r.text().ends_with("\nTo request approval for this call, retry it now with sandbox_permissions set to \"danger-full-access\" and a justification."), "{}", r.text());
    // Approved read, then approved edit: one approval each, none wasted.
    let r = t.call("read", with(json!({"file_path": p(&target)})));
    assert!(!r.is_error() && r.text().contains("port = 1"), "{}", r.json);
    // A wrong old_string fails in the daemon's checks, before the approver.
    let r = t.call(
        "edit",
        with(json!({"file_path": p(&target), "old_string": "port = 9", "new_string": "port = 2"})),
    );
    assert_eq!(r.code(), Some("FS_EDIT_NOT_FOUND"), "{}", r.json);
    let r = t.call(
        "edit",
        with(json!({"file_path": p(&target), "old_string": "port = 1", "new_string": "port = 2"})),
    );
    assert!(!r.is_error(), "{}", r.json);
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "port = 2\n");
    // Changed behind the session's back: stale, caught before the approver.
    std::fs::write(&target, "port = 3\n").unwrap();
    let r = t.call(
        "edit",
        with(json!({"file_path": p(&target), "old_string": "port = 2", "new_string": "port = 4"})),
    );
    assert_eq!(r.code(), Some("FS_STALE_VERSION"), "{}", r.json);
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "port = 3\n");
    // The approver decided exactly twice (the read and the edit): nothing that failed reached it.
    let decisions = jsonl(&keys.log());
    assert_eq!(decisions.len(), 2, "{decisions:?}");
    assert!(decisions.iter().all(|l| l["decision"] == "approved" && l["by"] == "rules"), "{decisions:?}");
    // The socket is the operator's: mode 0660, root's group, removed at exit.
    let meta = std::fs::metadata(&approver.socket).unwrap();
    assert_eq!((meta.mode() & 0o777, meta.gid()), (0o660, 0));
    let socket = approver.socket.clone();
    approver.stop();
    assert!(!socket.exists(), "the socket is removed at exit");
    // Each decision is one audit record carrying the digest the approver logged.
    let audit = s.audit();
    for decision in &decisions {
        let digest = decision["digest"].as_str().unwrap();
        assert!(
            audit.iter().any(|l| l["decision"] == "approved" && l["digest"] == digest),
            "{digest} not audited: {audit:?}"
        );
    }
    assert!(
        audit.iter().any(|l| l["op"] == "escalate:describe"
            && l["decision"] == "checked"
            && l["result"] == "FS_STALE_VERSION"),
        "{audit:?}"
    );
    assert!(
        !std::fs::read_to_string(&s.audit).unwrap().contains("port ="),
        "the audit log holds no contents"
    );
    // Who approved is in the approver's signed decision and in every record of its use: the
    // rule file and its rule.
    let by_rules = format!("rules {}: rule 1", keys.rules("allow").display());
    assert!(decisions.iter().all(|l| l["decider"] == by_rules.as_str()), "{decisions:?}");
    let approvals: Vec<_> = audit.iter().filter(|l| l["decision"] == "approved").collect();
    assert_eq!(approvals.len(), 4, "two decisions, two uses: {audit:?}");
    assert!(approvals.iter().all(|l| l["decided_by"] == by_rules.as_str()), "{audit:?}");
}

#[test]
fn a_refusal_changes_nothing_and_ends_the_loop() {
    let keys = Keys::new();
    let _approver = Approver::serve(&keys, &keys.rules("deny"));
    let s = Signed::start(&keys, "");
    let target = s.outside.path().join("secret.txt");
    std::fs::write(&target, "keep\n").unwrap();
    let mut t = s.d.session();
    let r = t.call("read", json!({"file_path": p(&target), "sandbox_permissions": "danger-full-access", "justification": "please"}));
    err(
        &r,
        "FS_SANDBOX_DENIED",
        "Error: escalation to danger-full-access was refused by the approver's rules (reason: rule 1 denies path 1 at danger-full-access); nothing was changed. Do not retry this call with sandbox_permissions; continue under workspace-write mode or ask the user. [sandbox: file access denied under workspace-write mode]",
    );
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep\n");
    let decisions = jsonl(&keys.log());
    assert_eq!(decisions.len(), 1, "{decisions:?}");
    assert_eq!(decisions[0]["decision"], "refused");
    assert_eq!(decisions[0]["reason"], "rule 1 denies path 1 at danger-full-access");
    let audit = s.audit();
    let by_rules =
        format!("rules {}: rule 1 denies path 1 at danger-full-access", keys.rules("deny").display());
    assert!(
        audit.iter().any(|l| l["decision"] == "refused"
            && l["digest"] == decisions[0]["digest"]
            && l["decided_by"] == by_rules.as_str()),
        "{audit:?}"
    );
}

#[test]
fn an_unreachable_approver_is_said_so_and_ends_the_loop() {
    let keys = Keys::new();
    let s = Signed::start(&keys, "");
    let target = s.outside.path().join("x.txt");
    let mut t = s.d.session();
    let r = t.call("read", json!({"file_path": p(&target), "sandbox_permissions": "danger-full-access", "justification": "please"}));
    err(
        &r,
        "FS_SANDBOX_DENIED",
        "Error: escalation to danger-full-access was not decided: the approver could not be reached; nothing was changed. Do not retry this call with sandbox_permissions; continue under workspace-write mode or ask the user. [sandbox: file access denied under workspace-write mode]",
    );
    assert!(s.audit().iter().any(|l| l["decision"] == "refused" && l["result"] == "unreachable"));
}

/// Replaces what differs by design (the path the caller named) so replies compare.
fn normalised(text: String, path: &Path) -> String {
    text.replace(&p(path), "<path>")
}

/// An answer in a stable form (metadata sorted).
fn shown<T: std::fmt::Debug>(answer: Result<T, WireError>) -> String {
    match answer {
        Ok(reply) => format!("ok {reply:?}"),
        Err(w) => {
            let metadata: std::collections::BTreeMap<_, _> = w.metadata.iter().collect();
            format!("{} {:?} {:?} {metadata:?}", w.code, w.message, w.path)
        }
    }
}

#[test]
fn a_compromised_client_learns_nothing_outside_its_grant() {
    let keys = Keys::new();
    let _approver = Approver::serve(&keys, &keys.rules("deny"));
    let s = Signed::start(&keys, "");
    let secret = "root:$6$very-secret-hash:19000:0:99999:7:::";
    let dir = s.outside.path();
    std::fs::write(dir.join("shadow"), format!("{secret}\n")).unwrap();
    std::fs::create_dir(dir.join("subdir")).unwrap();
    std::fs::set_permissions(dir.join("shadow"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let targets = [
        dir.join("shadow"),
        dir.join("absent"),
        dir.join("no/such/dir/file"),
        dir.join("subdir"),
        PathBuf::from("/proc/self/environ"),
    ];
    let mut rpc = Rpc::connect(&s.d);
    // Every request a client can make about a target, answered for each target: the answers
    // must be the same whatever the target is.
    type Probe = fn(&mut Rpc, &Path) -> String;
    let probes: Vec<(&str, Probe)> = vec![
        ("read escalation", |rpc, t| shown(ask(rpc, "s1", vec![op("readText", t)]))),
        ("write escalation with content", |rpc, t| shown(ask(rpc, "s1", vec![write_op(t, "x\n")]))),
        ("create-only write escalation", |rpc, t| {
            let guard =
                v1::WriteGuard { kind: Some(v1::write_guard::Kind::CreateIfAbsent(v1::CreateIfAbsent {})) };
            shown(ask(rpc, "s1", vec![v1::EscalatedOp { write_guard: Some(guard), ..write_op(t, "x\n") }]))
        }),
        ("edit escalation guessing the content", |rpc, t| {
            let guess = v1::EscalatedOp {
                old_string: Some("root:$6$very".into()),
                new_string: Some("x".into()),
                edit_guard: Some(v1::EditGuard { version: "guess".into(), target_key: String::new() }),
                ..op("editText", t)
            };
            shown(ask(rpc, "s1", vec![guess]))
        }),
        ("a patch escalation guessing the content", |rpc, t| {
            let request = v1::EscalationRequest {
                context: context("s1", None),
                requested_mode: v1::Mode::DangerFullAccess as i32,
                justification: "x".into(),
                ops: vec![op("writeText", t)],
                patch: Some(format!(
                    "*** Begin Patch\n*** Update File: {}\n@@\n-root:$6$very-secret-hash:19000:0:99999:7:::\n+x\n*** End Patch",
                    p(t)
                )),
            };
            let answer = rpc.rt.block_on(rpc.client.request_escalation(request));
            shown(answer.map(tonic::Response::into_inner).map_err(|s| WireError::from_status(&s).unwrap()))
        }),
        ("delete and move escalations", |rpc, t| {
            let moved = v1::EscalatedOp { destination: "/tmp/elsewhere".into(), ..op("moveFile", t) };
            format!(
                "{} {}",
                shown(ask(rpc, "s1", vec![op("deleteFile", t)])),
                shown(ask(rpc, "s1", vec![moved]))
            )
        }),
        ("a forged ticket on a read", |rpc, t| {
            let forged = v1::EscalationTicket {
                approved_mode: v1::Mode::DangerFullAccess as i32,
                justification: "x".into(),
                escalation_id: "00".repeat(16),
                nonce: vec![0u8; 16].into(),
                signature: vec![1u8; 64].into(),
            };
            shown(read(rpc, "s1", t, Some(forged)))
        }),
        ("a forged ticket on a write", |rpc, t| {
            let forged = v1::EscalationTicket {
                approved_mode: v1::Mode::DangerFullAccess as i32,
                escalation_id: "ab".repeat(16),
                ..Default::default()
            };
            shown(write(rpc, "s1", t, "x", forged))
        }),
        ("a plain read", |rpc, t| shown(read(rpc, "s1", t, None))),
    ];
    for (name, probe) in probes {
        let answers: Vec<String> = targets.iter().map(|t| normalised(probe(&mut rpc, t), t)).collect();
        for (target, answer) in targets.iter().zip(&answers) {
            assert_eq!(
                answer,
                &answers[0],
                "{name}: {} answers differently from {}",
                target.display(),
                targets[0].display()
            );
            assert!(!answer.contains("very-secret"), "{name}: the content leaked: {answer}");
        }
    }
    // Nothing was changed, and the approver saw the content it alone may see.
    assert_eq!(std::fs::read_to_string(dir.join("shadow")).unwrap(), format!("{secret}\n"));
    assert!(!dir.join("absent").exists());
}

#[test]
fn the_checks_tell_nothing_of_a_file_the_client_may_not_read() {
    let keys = Keys::new();
    let _approver = Approver::serve(&keys, &keys.rules("deny"));
    let s = Signed::start(&keys, "");
    let mut rpc = Rpc::connect(&s.d);
    // Inside the roots, so the client's grant reaches it, but its workers may not read it.
    let target = s.d.root.join("theirs.txt");
    std::fs::write(&target, "token = hunter2\n").unwrap();
    std::os::unix::fs::chown(&target, Some(4242), Some(4242)).unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(read(&mut rpc, "s1", &target, None).unwrap_err().code, ErrorCode::PermissionDenied);
    let edit = |old: &str| v1::EscalatedOp {
        old_string: Some(old.into()),
        new_string: Some("x".into()),
        ..op("editText", &target)
    };
    let answers: Vec<String> = ["token = hunter2", "token = guess", "t"]
        .iter()
        .map(|old| shown(ask(&mut rpc, "s1", vec![edit(old)])))
        .collect();
    // The answer for a target outside the grant: an approved read comes first.
    assert!(answers[0].starts_with("FS_NOT_OBSERVED"), "{answers:?}");
    assert_eq!(answers[0], answers[1], "{answers:?}");
    assert_eq!(answers[0], answers[2], "{answers:?}");
    // Nor is a change of it described: its ticket would read the file (a patch's preflight).
    for wire in [op("deleteFile", &target), write_op(&target, "mine\n")] {
        assert_eq!(shown(ask(&mut rpc, "s1", vec![wire])), answers[0]);
    }
    assert!(jsonl(&keys.log()).is_empty(), "the approver was asked about an unreadable file");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "token = hunter2\n");
}

#[test]
fn a_ticket_is_refused_for_anything_but_the_approved_call() {
    let keys = Keys::new();
    let _approver = Approver::serve(&keys, &keys.rules("allow"));
    let s = Signed::start(&keys, "[budgets]\npending_escalations = 64\n");
    let mut rpc = Rpc::connect(&s.d);
    let target = s.outside.path().join("t.txt");
    let elsewhere = s.outside.path().join("elsewhere.txt");
    // An approved read (of an absent file) lets the checks speak about the targets.
    for path in [&target, &elsewhere] {
        let tk = ticket(ask(&mut rpc, "s1", vec![op("readText", path)]).unwrap());
        assert_eq!(read(&mut rpc, "s1", path, Some(tk)).unwrap_err().code, ErrorCode::NotFound);
    }
    // A good ticket for one target says nothing about any other: the same refusal whatever
    // the other path is (a file, a directory, absent, under a missing directory).
    std::fs::write(s.outside.path().join("other.txt"), "x").unwrap();
    std::fs::create_dir(s.outside.path().join("dir")).unwrap();
    let tk = ticket(ask(&mut rpc, "s1", vec![op("readText", &target)]).unwrap());
    for other in ["other.txt", "dir", "absent", "no/such/dir/file"] {
        let err = read(&mut rpc, "s1", &s.outside.path().join(other), Some(tk.clone())).unwrap_err();
        assert_eq!(
            (err.code, err.message.as_str()),
            (
                ErrorCode::SandboxDenied,
                "escalation ticket refused: this call differs from every call the approver signed"
            ),
            "{other}"
        );
    }
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
        let mut tk = ticket(ask(&mut rpc, "s1", vec![write_op(&target, "ok\n")]).unwrap());
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
    let tk = ticket(ask(&mut rpc, "s1", vec![write_op(&target, "ok\n")]).unwrap());
    let request = v1::DeleteFileRequest { context: context("s1", Some(tk)), path: p(&target), guard: None };
    let status = rpc.rt.block_on(rpc.client.delete_file(request)).unwrap_err();
    assert_eq!(
        WireError::from_status(&status).unwrap().message,
        "escalation ticket refused: this call differs from every call the approver signed"
    );
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep\n");
    assert!(s.audit().iter().any(|l| l["op"] == "escalate:writeText" && l["decision"] == "refused"));
}

/// A write or an edit is approved only with its change, which the daemon shows the approver:
/// a request without it (nothing, or a bare digest) is refused before anyone is asked, and a
/// ticket approved for one content writes no other.
#[test]
fn an_approval_binds_the_content_the_approver_was_shown() {
    let keys = Keys::new();
    let _approver = Approver::serve(&keys, &keys.rules("allow"));
    let s = Signed::start(&keys, "[budgets]\npending_escalations = 64\n");
    let mut rpc = Rpc::connect(&s.d);
    let target = s.outside.path().join("x.conf");
    std::fs::write(&target, "a = 1\n").unwrap();
    let tk = ticket(ask(&mut rpc, "s1", vec![op("readText", &target)]).unwrap());
    assert_eq!(read(&mut rpc, "s1", &target, Some(tk)).unwrap(), "a = 1\n");
    let unbound = [
        ("a write without content", op("writeText", &target)),
        (
            "a write with a bare digest",
            v1::EscalatedOp {
                content_sha256: fsd_proto::digest::content(b"evil\n").into(),
                ..op("writeText", &target)
            },
        ),
        ("an edit without its strings", op("editText", &target)),
        (
            "an edit without new_string",
            v1::EscalatedOp { old_string: Some("a = 1".into()), ..op("editText", &target) },
        ),
    ];
    for (name, unbound) in unbound {
        let err = ask(&mut rpc, "s1", vec![unbound]).unwrap_err();
        assert_eq!(
            (err.code, err.get("reason"), err.message.as_str()),
            (
                ErrorCode::SandboxDenied,
                Some("unbound_change"),
                "an escalated write or edit must carry its change, so the approver sees what it approves"
            ),
            "{name}"
        );
    }
    assert_eq!(jsonl(&keys.log()).len(), 1, "only the read reached the approver");
    // Approved for content A: content B is refused, and nothing is written.
    let tk = ticket(ask(&mut rpc, "s1", vec![write_op(&target, "a = 2\n")]).unwrap());
    let err = write(&mut rpc, "s1", &target, "a = 3\n", tk.clone()).unwrap_err();
    assert_eq!((err.code, err.get("ticket")), (ErrorCode::SandboxDenied, Some("mismatch")), "{err:?}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "a = 1\n");
    write(&mut rpc, "s1", &target, "a = 2\n", tk).unwrap();
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "a = 2\n");
}

/// A digest the client sends beside a call whose content the daemon does not compute (a delete,
/// a read) binds nothing and is not shown as bound: the approval is the daemon's description of
/// the call, and the call it admits is the delete the approver saw.
#[test]
fn a_clients_own_digest_on_a_delete_binds_nothing() {
    let keys = Keys::new();
    let _approver = Approver::serve(&keys, &keys.rules("allow"));
    let s = Signed::start(&keys, "");
    let mut rpc = Rpc::connect(&s.d);
    let target = s.outside.path().join("old.conf");
    std::fs::write(&target, "a = 1\n").unwrap();
    let tk = ticket(ask(&mut rpc, "s1", vec![op("readText", &target)]).unwrap());
    assert_eq!(read(&mut rpc, "s1", &target, Some(tk)).unwrap(), "a = 1\n");
    let delete = v1::EscalatedOp {
        content_sha256: fsd_proto::digest::content(b"evil\n").into(),
        ..op("deleteFile", &target)
    };
    let tk = ticket(ask(&mut rpc, "s1", vec![delete]).unwrap());
    let request = v1::DeleteFileRequest { context: context("s1", Some(tk)), path: p(&target), guard: None };
    rpc.rt.block_on(rpc.client.delete_file(request)).unwrap_or_else(|s| panic!("{s:?}"));
    assert!(!target.exists());
}

/// The editor's insert asks approval for the content it will write: the file is re-read (with
/// an approved read, since the session's mode cannot), the new content computed, and only that
/// content approved; the daemon's description shows it (its digest is in the approval).
#[test]
fn the_editors_insert_is_approved_for_the_content_it_writes() {
    let keys = Keys::new();
    let _approver = Approver::serve(&keys, &keys.rules("allow"));
    let s = Signed::start(&keys, "");
    let mut t = s.d.session_with_config("strReplaceEditor = true\n");
    let target = s.outside.path().join("app.conf");
    std::fs::write(&target, "one\nthree\n").unwrap();
    let esc = |mut args: serde_json::Value| {
        let fields = json!({"sandbox_permissions": "danger-full-access", "justification": "the user asked"});
        args.as_object_mut().unwrap().extend(fields.as_object().unwrap().clone());
        args
    };
    let insert = esc(json!({"command": "insert", "path": p(&target), "insert_line": 1, "new_str": "two"}));
    let r = t.call("str_replace_editor", insert.clone());
    assert_eq!(r.code(), Some("FS_NOT_OBSERVED"), "{}", r.json);
    assert!(jsonl(&keys.log()).is_empty(), "the unobserved insert reached the approver");
    let r = t.call("read", esc(json!({"file_path": p(&target)})));
    assert!(!r.is_error(), "{}", r.json);
    let r = t.call("str_replace_editor", insert);
    assert!(!r.is_error(), "{}", r.json);
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "one\ntwo\nthree\n");
    // The read, the insert's re-read, the insert's content.
    let decisions = jsonl(&keys.log());
    assert_eq!(decisions.len(), 3, "{decisions:?}");
    let audit = s.audit();
    assert!(
        audit.iter().any(|l| l["op"] == "escalate:writeText" && l["decision"] == "approved"),
        "{audit:?}"
    );
    assert!(
        !audit.iter().any(|l| l["result"] == "FS_SANDBOX_DENIED"),
        "no unbound request was sent: {audit:?}"
    );
}

#[test]
fn an_approver_with_another_key_approves_nothing() {
    let keys = Keys::new();
    let other = Keys::new();
    let _approver = Approver::serve(&keys, &keys.rules("allow"));
    let s = Signed::start_with_key(&keys, &other.public, "");
    let mut rpc = Rpc::connect(&s.d);
    let reply = ask(&mut rpc, "s1", vec![op("readText", &s.outside.path().join("x"))]).unwrap();
    assert!(!reply.approved && reply.escalation_id.is_empty(), "{reply:?}");
    assert_eq!(reply.decided_by, v1::Decider::Unreachable as i32);
    assert!(s.audit().iter().any(|l| l["decision"] == "refused" && l["result"] == "bad_signature"));
}

#[test]
fn an_expired_ticket_is_refused() {
    let keys = Keys::new();
    let _approver = Approver::serve(&keys, &keys.rules("allow"));
    // Long enough that a loaded machine still gets the approver's answer inside the lifetime.
    let s = Signed::start(&keys, "escalation_ttl_secs = 3\n");
    let mut rpc = Rpc::connect(&s.d);
    let target = s.outside.path().join("late.txt");
    let tk = ticket(ask(&mut rpc, "s1", vec![op("readText", &target)]).unwrap());
    std::thread::sleep(Duration::from_millis(4100));
    let err = read(&mut rpc, "s1", &target, Some(tk)).unwrap_err();
    assert_eq!(err.message, "escalation ticket refused: the escalation expired");
    // The expiry is a decision too: one audit record with the digest the approver logged,
    // written when it expires (no other request comes to trigger it).
    let digest = jsonl(&keys.log())[0]["digest"].as_str().unwrap().to_owned();
    let deadline = Instant::now() + Duration::from_secs(10);
    let expired = loop {
        let audit = s.audit();
        let found: Vec<_> = audit.iter().filter(|l| l["decision"] == "expired").cloned().collect();
        if !found.is_empty() || Instant::now() > deadline {
            break found;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(expired.len(), 1, "{:?}", s.audit());
    assert_eq!(
        (&expired[0]["digest"], &expired[0]["result"], &expired[0]["path"], &expired[0]["op"]),
        (&json!(digest), &json!("unused"), &json!(p(&target)), &json!("escalate:describe"))
    );
}

#[test]
fn an_approved_read_is_good_for_one_read() {
    let keys = Keys::new();
    let _approver = Approver::serve(&keys, &keys.rules("allow"));
    let s = Signed::start(&keys, "");
    let mut rpc = Rpc::connect(&s.d);
    let target = s.outside.path().join("secret.txt");
    std::fs::write(&target, "v1\n").unwrap();
    let tk = ticket(ask(&mut rpc, "s1", vec![op("readText", &target)]).unwrap());
    assert_eq!(read(&mut rpc, "s1", &target, Some(tk.clone())).unwrap(), "v1\n");
    // A client that never releases the ticket does not get to keep reading with it.
    std::fs::write(&target, "v2\n").unwrap();
    let err = read(&mut rpc, "s1", &target, Some(tk)).unwrap_err();
    assert_eq!(
        (err.code, err.message.as_str()),
        (ErrorCode::SandboxDenied, "escalation ticket refused: unknown or already spent escalation")
    );
    // Nor do reads raced on one approval: exactly one of them runs.
    for _ in 0..5 {
        let tk = ticket(ask(&mut rpc, "s1", vec![op("readText", &target)]).unwrap());
        let read_ok = std::thread::scope(|scope| {
            let readers: Vec<_> = (0..4)
                .map(|_| {
                    let (tk, target, d) = (tk.clone(), &target, &s.d);
                    scope.spawn(move || read(&mut Rpc::connect(d), "s1", target, Some(tk)).is_ok())
                })
                .collect();
            readers.into_iter().map(|r| r.join().unwrap()).filter(|ok| *ok).count()
        });
        assert_eq!(read_ok, 1);
    }
}

/// An approved change lets its client read the file it changes as its preflight needs (once
/// per change; a stat or a write check is free), not again and again until it expires.
#[test]
fn an_approved_change_admits_one_read_of_its_target() {
    let keys = Keys::new();
    let _approver = Approver::serve(&keys, &keys.rules("allow"));
    let s = Signed::start(&keys, "");
    let mut rpc = Rpc::connect(&s.d);
    let target = s.outside.path().join("app.conf");
    std::fs::write(&target, "v1\n").unwrap();
    let tk = ticket(ask(&mut rpc, "s1", vec![op("readText", &target)]).unwrap());
    assert_eq!(read(&mut rpc, "s1", &target, Some(tk)).unwrap(), "v1\n");
    let tk = ticket(ask(&mut rpc, "s1", vec![write_op(&target, "v2\n")]).unwrap());
    let stat = |rpc: &mut Rpc, check_write: bool| {
        let request = v1::StatRequest {
            context: context("s1", Some(tk.clone())),
            path: p(&target),
            no_follow: false,
            check_write,
        };
        rpc.rt.block_on(rpc.client.stat(request)).map(drop).map_err(|s| WireError::from_status(&s).unwrap())
    };
    stat(&mut rpc, false).unwrap();
    stat(&mut rpc, true).unwrap();
    assert_eq!(read(&mut rpc, "s1", &target, Some(tk.clone())).unwrap(), "v1\n");
    // Changed behind the approval's back: the change's ticket does not show it again.
    std::fs::write(&target, "secret\n").unwrap();
    let err = read(&mut rpc, "s1", &target, Some(tk.clone())).unwrap_err();
    assert_eq!(
        (err.code, err.get("ticket"), err.message.as_str()),
        (
            ErrorCode::SandboxDenied,
            Some("reads_spent"),
            "escalation ticket refused: the escalation's reads of the files it changes are used up"
        )
    );
    stat(&mut rpc, false).unwrap();
    assert!(
        s.audit().iter().any(|l| l["op"] == "escalate:readText" && l["decision"] == "refused"),
        "{:?}",
        s.audit()
    );
}

/// A stat with an approved read's ticket leaves the read for the content it was approved
/// for; an approved deletion's ticket lets its client look at the file and delete it, never
/// read it.
#[test]
fn a_stat_spends_no_approved_read_and_a_deletion_reads_nothing() {
    let keys = Keys::new();
    let _approver = Approver::serve(&keys, &keys.rules("allow"));
    let s = Signed::start(&keys, "");
    let mut rpc = Rpc::connect(&s.d);
    let target = s.outside.path().join("notes.txt");
    std::fs::write(&target, "v1\n").unwrap();
    let stat = |rpc: &mut Rpc, tk: &v1::EscalationTicket| {
        let request = v1::StatRequest {
            context: context("s1", Some(tk.clone())),
            path: p(&target),
            ..Default::default()
        };
        rpc.rt.block_on(rpc.client.stat(request)).map(drop).map_err(|s| WireError::from_status(&s).unwrap())
    };
    let tk = ticket(ask(&mut rpc, "s1", vec![op("readText", &target)]).unwrap());
    stat(&mut rpc, &tk).unwrap();
    stat(&mut rpc, &tk).unwrap();
    assert_eq!(read(&mut rpc, "s1", &target, Some(tk)).unwrap(), "v1\n", "the stats left the read");
    let tk = ticket(ask(&mut rpc, "s1", vec![op("deleteFile", &target)]).unwrap());
    stat(&mut rpc, &tk).unwrap();
    let err = read(&mut rpc, "s1", &target, Some(tk.clone())).unwrap_err();
    assert_eq!((err.code, err.get("ticket")), (ErrorCode::SandboxDenied, Some("reads_spent")), "{err:?}");
    let request = v1::DeleteFileRequest { context: context("s1", Some(tk)), path: p(&target), guard: None };
    rpc.rt.block_on(rpc.client.delete_file(request)).unwrap_or_else(|s| panic!("{s:?}"));
    assert!(!target.exists());
}

/// Runs `call` on another client while the test hook holds the check it makes, and shows the
/// daemon answers another client's stat meanwhile (by ordering: the daemon says the check is
/// held as it answers; the held call has not answered yet). The daemon is pinned to one CPU,
/// so its runtime has one thread, which a check held on it would hold.
fn held_while<T: Send + 'static>(d: &Daemon, call: impl FnOnce() -> T + Send + 'static) -> T {
    let (answered, answer) = std::sync::mpsc::channel();
    let running = std::thread::spawn(move || {
        let _ = answered.send(call());
    });
    let mut other = Rpc::connect(d);
    let probe = d.path("fsd-fault-check-held");
    loop {
        assert!(answer.try_recv().is_err(), "the call was answered before its check was seen held");
        let status = other.stat(&probe).expect_err("the probe answers with a status");
        match status.message() {
            "held" => break,
            "not held" => std::thread::sleep(Duration::from_millis(5)),
            _ => panic!("the other client's stat was not answered while the check ran: {status:?}"),
        }
    }
    assert!(other.stat(&d.path("other.txt")).unwrap().info.is_some());
    assert!(
        matches!(answer.try_recv(), Err(std::sync::mpsc::TryRecvError::Empty)),
        "the check was still held when the other client's stat was answered"
    );
    other.stat(&d.path("fsd-fault-release-check")).unwrap();
    let out = answer.recv().unwrap();
    running.join().unwrap();
    out
}

/// A large escalated write is digested twice: when it is described (with its diff) and when its
/// ticket is used. Both run on the daemon's check threads, never on its runtime.
#[test]
fn a_large_escalated_writes_digests_do_not_hold_another_clients_stat() {
    let keys = Keys::new();
    let _approver = Approver::serve(&keys, &keys.rules("allow"));
    let config = format!(
        "escalation = \"signed\"\nmax_mode = \"danger-full-access\"\napprover_public_key = \"{}\"\napprover_endpoint = \"unix:{}\"\n",
        keys.public,
        keys.socket().display()
    );
    let d = Daemon::start_custom(&["taskset", "-c", "0"], &|_| {}, &[], &config, &[]);
    d.write("other.txt", "other\n");
    let big = d.path("fsd-fault-hold-check");
    let content = "a line of the new content\n".repeat((8 << 20) / 26);
    let (mut rpc, target, body) = (Rpc::connect(&d), big.clone(), content.clone());
    let (rpc, asked) = held_while(&d, move || {
        let asked = ask(&mut rpc, "s1", vec![write_op(&target, &body)]);
        (rpc, asked)
    });
    let tk = ticket(asked.unwrap());
    let (mut rpc, target, body) = (rpc, big.clone(), content.clone());
    held_while(&d, move || write(&mut rpc, "s1", &target, &body, tk)).unwrap();
    assert_eq!(std::fs::read_to_string(&big).unwrap(), content);
}

#[test]
fn an_approved_read_of_a_large_file_streams_in_the_same_call() {
    let keys = Keys::new();
    let _approver = Approver::serve(&keys, &keys.rules("allow"));
    let s = Signed::start(&keys, "");
    let target = s.outside.path().join("big.log");
    let body: String = (1..=2000).map(|n| format!("line {n}\n")).collect();
    std::fs::write(&target, &body).unwrap();
    // At or above readStreamMinSize the read tool streams after the daemon says FS_TOO_LARGE:
    // two reads of one approved call.
    let mut t = s.d.session_with_config("readStreamMinSize = 4096\n");
    let args = json!({"file_path": p(&target), "sandbox_permissions": "danger-full-access", "justification": "the user asked"});
    let r = t.call("read", args);
    assert!(!r.is_error() && r.text().contains("1: line 1\n"), "{}", r.json);
    // The call's end spent the approval: one decision, and nothing left to replay.
    assert_eq!(jsonl(&keys.log()).len(), 1);
}

#[test]
fn a_target_swapped_for_a_symlink_after_approval_is_refused() {
    let keys = Keys::new();
    let _approver = Approver::serve(&keys, &keys.rules("allow"));
    let s = Signed::start(&keys, "");
    let mut rpc = Rpc::connect(&s.d);
    let target = s.outside.path().join("file.txt");
    let victim = s.outside.path().join("victim.txt");
    std::fs::write(&target, "old\n").unwrap();
    std::fs::write(&victim, "victim\n").unwrap();
    let tk = ticket(ask(&mut rpc, "s1", vec![op("readText", &target)]).unwrap());
    assert_eq!(read(&mut rpc, "s1", &target, Some(tk)).unwrap(), "old\n");
    let tk = ticket(ask(&mut rpc, "s1", vec![write_op(&target, "new\n")]).unwrap());
    std::fs::remove_file(&target).unwrap();
    std::os::unix::fs::symlink(&victim, &target).unwrap();
    let err = write(&mut rpc, "s1", &target, "new\n", tk).unwrap_err();
    assert_eq!(
        err.message,
        "escalation ticket refused: this call differs from every call the approver signed"
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "victim\n");
}

#[test]
fn above_the_clients_maximum_nothing_is_described() {
    let keys = Keys::new();
    let uid = rustix::process::geteuid().as_raw();
    let s = Signed::start(&keys, &format!("[client_max_modes]\n\"{uid}\" = \"workspace-write\"\n"));
    let mut rpc = Rpc::connect(&s.d);
    let err = ask(&mut rpc, "s1", vec![op("writeText", &s.outside.path().join("x"))]).unwrap_err();
    assert_eq!(err.message, "danger-full-access is above this client's maximum mode workspace-write");
}

#[test]
fn pending_escalations_are_capped_per_client() {
    let keys = Keys::new();
    let _approver = Approver::serve(&keys, &keys.rules("allow"));
    let s = Signed::start(&keys, "[budgets]\npending_escalations = 2\n");
    let mut rpc = Rpc::connect(&s.d);
    let path = s.outside.path().join("x");
    for _ in 0..2 {
        assert!(ask(&mut rpc, "s1", vec![op("readText", &path)]).unwrap().approved);
    }
    let err = ask(&mut rpc, "s1", vec![op("readText", &path)]).unwrap_err();
    assert_eq!(err.code, ErrorCode::RateLimited);
    assert_eq!(err.metadata["budget"], "pending_escalations");
    let after: u64 = err.metadata["retry_after_ms"].parse().unwrap();
    assert!(after > 0 && after <= 120_000, "{after}");
    assert!(s.audit().iter().any(|l| l["decision"] == "refused" && l["result"] == "FS_RATE_LIMITED"));
    // The tools say so without suggesting the same request again at once.
    let mut t = s.d.session();
    let r = t.call(
        "read",
        json!({"file_path": p(&path), "sandbox_permissions": "danger-full-access", "justification": "x"}),
    );
    assert_eq!(r.code(), Some("FS_RATE_LIMITED"), "{}", r.json);
    assert!(
        r.text().starts_with(&format!("Error: cannot read \"{}\": the file service is limiting this client's calls (nothing was done) — wait ", p(&path))),
        "{}",
        r.text()
    );
}

/// Operations per request, per identity: the operations an identity's escalation requests list
/// count while they are checked and until each is decided, spent or expires.
#[test]
fn escalated_operations_are_capped_per_client() {
    let keys = Keys::new();
    let _approver = Approver::serve(&keys, &keys.rules("allow"));
    let s = Signed::start(&keys, "[budgets]\nescalated_ops = 3\npending_escalations = 64\n");
    let mut rpc = Rpc::connect(&s.d);
    let reads = |n: usize| (0..n).map(|i| op("readText", &s.outside.path().join(format!("f{i}")))).collect();
    let status = rpc
        .rt
        .block_on(rpc.client.request_escalation(v1::EscalationRequest {
            context: context("s1", None),
            requested_mode: v1::Mode::DangerFullAccess as i32,
            justification: "x".into(),
            ops: reads(4),
            patch: None,
        }))
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert_eq!(status.message(), "an escalation lists between 1 and 3 calls");
    let first = ask(&mut rpc, "s1", reads(2)).unwrap();
    assert!(first.approved, "{first:?}");
    let err = ask(&mut rpc, "s1", reads(2)).unwrap_err();
    assert_eq!((err.code, err.metadata["budget"].as_str()), (ErrorCode::RateLimited, "escalated_ops"));
    let after: u64 = err.metadata["retry_after_ms"].parse().unwrap();
    assert!(after > 0, "{after}");
    assert!(ask(&mut rpc, "s1", reads(1)).unwrap().approved, "what is left of the budget is usable");
    // Spending (here: releasing) an approved escalation gives its operations back.
    let release = v1::ReleaseEscalationRequest {
        context: context("s1", None),
        escalation_id: first.escalation_id,
        client_decision: None,
    };
    rpc.rt.block_on(rpc.client.release_escalation(release)).unwrap();
    assert!(ask(&mut rpc, "s1", reads(2)).unwrap().approved);
    let refusals = s
        .audit()
        .into_iter()
        .filter(|l| l["decision"] == "refused" && l["result"] == "FS_RATE_LIMITED")
        .count();
    assert_eq!(refusals, 1, "{:?}", s.audit());
    // The approver decided only what fit.
    assert_eq!(jsonl(&keys.log()).len(), 3);
}

/// An escalation request is a call like any other: a flood of them meets the call budget
/// before the daemon resolves, reads or diffs anything, and before any approver is asked.
#[test]
fn a_flood_of_escalation_requests_meets_the_call_budget() {
    let keys = Keys::new();
    let _approver = Approver::serve(&keys, &keys.rules("allow"));
    let s = Signed::start(
        &keys,
        "[budgets]\ncall_burst = 2\ncalls_per_second = 0.01\npending_escalations = 64\n",
    );
    let mut rpc = Rpc::connect(&s.d);
    let path = s.outside.path().join("x");
    for _ in 0..2 {
        assert!(ask(&mut rpc, "s1", vec![op("readText", &path)]).unwrap().approved);
    }
    let err = ask(&mut rpc, "s1", vec![op("readText", &path)]).unwrap_err();
    assert_eq!((err.code, err.metadata["budget"].as_str()), (ErrorCode::RateLimited, "calls_per_second"));
    let after: u64 = err.metadata["retry_after_ms"].parse().unwrap();
    assert!(after > 1000, "{after}");
    assert_eq!(jsonl(&keys.log()).len(), 2, "the refused request reached no approver");
    assert!(s.audit().iter().any(|l| l["decision"] == "refused" && l["result"] == "FS_RATE_LIMITED"));
}

#[test]
fn the_approver_refuses_to_run_misconfigured() {
    let keys = Keys::new();
    let run = |args: &[&str]| {
        let out =
            Command::new("setsid").arg(approver_bin()).args(args).stdin(Stdio::null()).output().unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).trim().to_owned())
    };
    let listen = format!("unix:{}", keys.socket().display());
    let public = keys.dir.path().join("approver.pub");
    let (code, text) = run(&[
        "serve",
        "--key",
        public.to_str().unwrap(),
        "--listen",
        &listen,
        "--rules",
        keys.rules("allow").to_str().unwrap(),
    ]);
    assert_eq!(
        (code, text),
        (
            Some(2),
            format!(
                "fsd-approver: {} is the public key: --key takes the private key (approver.key, mode 0600)",
                public.display()
            )
        )
    );
    // No rules and no terminal: nobody would decide.
    let (code, text) = run(&["serve", "--key", keys.key().to_str().unwrap(), "--listen", &listen]);
    assert_eq!(code, Some(2), "{text}");
    assert!(
        text.starts_with(
            "fsd-approver: nobody would decide: pass --rules FILE, a --config with a [web] page, or run serve on a terminal ("
        ),
        "{text}"
    );
    assert!(!keys.socket().exists());
}

/// The person at the approver's terminal: a pseudo-terminal from Python's pty module answers.
#[test]
fn a_person_at_the_approvers_terminal_decides_and_sees_the_expiry_as_a_time() {
    let keys = Keys::new();
    let s = Signed::start(&keys, "");
    let transcript = keys.dir.path().join("transcript.txt");
    let mut person = Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("python/approver_terminal.py"))
        .arg(&transcript)
        .arg("y,n,not today")
        .arg(approver_bin())
        .args(["serve", "--key"])
        .arg(keys.key())
        .arg("--listen")
        .arg(format!("unix:{}", keys.socket().display()))
        .args(["--socket-mode", "0666"])
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::os::unix::net::UnixStream::connect(keys.socket()).is_err() {
        assert!(Instant::now() < deadline, "fsd-approver serve did not listen on its terminal");
        std::thread::sleep(Duration::from_millis(20));
    }
    let target = s.outside.path().join("asked.txt");
    std::fs::write(&target, "hello\n").unwrap();
    let mut t = s.d.session();
    // Spelled with a name escape: the person is shown the path the daemon reads.
    let spelled = format!("{}/\\x61sked.txt", p(s.outside.path()));
    let r = t.call("read", json!({"file_path": spelled, "sandbox_permissions": "danger-full-access", "justification": "to see it"}));
    assert!(!r.is_error() && r.text().contains("hello"), "{}", r.json);
    let r = t.call("edit", json!({"file_path": p(&target), "old_string": "hello", "new_string": "bye", "sandbox_permissions": "danger-full-access", "justification": "to change it"}));
    let _ = person.kill();
    let _ = person.wait();
    err(
        &r,
        "FS_SANDBOX_DENIED",
        "Error: escalation to danger-full-access was refused by the person approving escalations (reason: not today); nothing was changed. Do not retry this call with sandbox_permissions; continue under workspace-write mode or ask the user. [sandbox: file access denied under workspace-write mode]",
    );
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "hello\n");
    let shown = std::fs::read_to_string(&transcript).unwrap();
    assert!(
        shown.contains(&format!("op 1: readText {}\r\n  requested-as: {spelled}\r\n", p(&target))),
        "the person saw the description, the path acted on first: {shown}"
    );
    assert!(
        shown.contains(&format!("op 1: editText {}\r\n  target: ", p(&target))),
        "a path spelled as it resolves is shown once: {shown}"
    );
    // Who decided is in the audit log: the person, for the approval and for the refusal.
    let audit = s.audit();
    let decided = |decision: &str| {
        audit.iter().any(|l| {
            l["op"] == "escalate:describe" && l["decision"] == decision && l["decided_by"] == "person"
        })
    };
    assert!(decided("approved") && decided("refused"), "{audit:?}");
    let used = audit.iter().find(|l| l["op"] == "escalate:readText" && l["decision"] == "approved").unwrap();
    assert_eq!(
        (&used["path"], &used["requested_path"], &used["decided_by"]),
        (&json!(p(&target)), &json!(spelled), &json!("person")),
        "{audit:?}"
    );
    assert!(shown.contains("    -hello\r\n    +bye"), "and the daemon's diff: {shown}");
    let expiry = shown.lines().find(|l| l.starts_with("expires: ")).unwrap();
    assert!(expiry.contains(" UTC (in ") && expiry.starts_with("expires: 20"), "{expiry}");
}

#[test]
fn a_patch_outside_the_roots_is_approved_as_a_whole() {
    let keys = Keys::new();
    let _approver = Approver::serve(&keys, &keys.rules("allow"));
    let s = Signed::start(&keys, "");
    let mut t = s.d.session_with_config("applyPatch = true\n");
    let esc = json!({"sandbox_permissions": "danger-full-access", "justification": "the user asked"});
    let old = s.outside.path().join("old.txt");
    let new = s.outside.path().join("added.txt");
    std::fs::write(&old, "gone\n").unwrap();
    for path in [&old, &new] {
        let mut args = json!({"file_path": p(path)});
        args.as_object_mut().unwrap().extend(esc.as_object().unwrap().clone());
        let _ = t.call("read", args);
    }
    // One description lists every operation; reads, the deletion and the new file all run on
    // the one ticket, which is spent when the patch finishes.
    let patch = format!(
        "*** Begin Patch\n*** Add File: {}\n+new\n*** Delete File: {}\n*** End Patch",
        p(&new),
        p(&old)
    );
    let mut args = json!({"input": patch});
    args.as_object_mut().unwrap().extend(esc.as_object().unwrap().clone());
    // Changed since it was read: the patch is refused before the approver sees it.
    std::fs::write(&old, "changed\n").unwrap();
    let r = t.call("apply_patch", args.clone());
    assert_eq!(r.code(), Some("FS_STALE_VERSION"), "{}", r.json);
    assert_eq!(jsonl(&keys.log()).len(), 2, "only the two reads reached the approver");
    let mut again = json!({"file_path": p(&old)});
    again.as_object_mut().unwrap().extend(esc.as_object().unwrap().clone());
    assert!(!t.call("read", again).is_error());
    let r = t.call("apply_patch", args);
    assert!(!r.is_error(), "{}", r.json);
    assert!(r.text().starts_with("Success. Updated the following files:"), "{}", r.text());
    assert_eq!(std::fs::read_to_string(&new).unwrap(), "new\n");
    assert!(!old.exists());
}

/// Checks before people, for apply_patch: every hunk is applied by the daemon to the file as it
/// is before the approver hears of the patch; a hunk that does not match fails with the report
/// preflight gives inside the roots, and the approval binds the content the patch writes.
#[test]
fn a_patch_whose_hunk_does_not_match_never_reaches_the_approver() {
    let keys = Keys::new();
    let _approver = Approver::serve(&keys, &keys.rules("allow"));
    let s = Signed::start(&keys, "");
    let mut t = s.d.session_with_config("applyPatch = true\n");
    let esc = json!({"sandbox_permissions": "danger-full-access", "justification": "the user asked"});
    let with = |mut args: serde_json::Value| {
        args.as_object_mut().unwrap().extend(esc.as_object().unwrap().clone());
        args
    };
    let outside = s.outside.path().join("app.conf");
    let inside = s.d.path("app.conf");
    for path in [&outside, &inside] {
        std::fs::write(path, "port = 1\nhost = a\n").unwrap();
    }
    let update = |path: &Path, old: &str, new: &str| {
        format!("*** Begin Patch\n*** Update File: {}\n@@\n-{old}\n+{new}\n*** End Patch", p(path))
    };
    assert!(!t.call("read", with(json!({"file_path": p(&outside)}))).is_error());
    assert!(!t.call("read", json!({"file_path": p(&inside)})).is_error());
    assert_eq!(jsonl(&keys.log()).len(), 1, "the read was approved");
    // The same mismatched hunk inside the roots (preflight) and outside (the daemon's checks).
    let local = t.call("apply_patch", json!({"input": update(&inside, "port = 9", "port = 2")}));
    let r = t.call("apply_patch", with(json!({"input": update(&outside, "port = 9", "port = 2")})));
    assert_eq!(r.code(), Some("PATCH_HUNK_MISMATCH"), "{}", r.json);
    assert_eq!(normalised(r.text().to_owned(), &outside), normalised(local.text().to_owned(), &inside));
    assert_eq!(
        normalised(r.text().to_owned(), &outside),
        "Error: Patch rejected before any change (1 problems):\n- operation 1 (update <path>, patch line 2): failed to find expected lines:\n  port = 9 (hunk at patch line 3)"
    );
    // A context line that is not there: the same.
    let unknown_context = format!(
        "*** Begin Patch\n*** Update File: {}\n@@ [server]\n-port = 1\n+port = 2\n*** End Patch",
        p(&outside)
    );
    let r = t.call("apply_patch", with(json!({"input": unknown_context})));
    assert!(r.text().ends_with("failed to find context '[server]' (hunk at patch line 3)"), "{}", r.text());
    // Deleting a file this session never read: refused by the policy, before anyone is asked.
    let unread = s.outside.path().join("unread.txt");
    std::fs::write(&unread, "x\n").unwrap();
    let delete = format!("*** Begin Patch\n*** Delete File: {}\n*** End Patch", p(&unread));
    let r = t.call("apply_patch", with(json!({"input": delete})));
    assert_eq!(r.code(), Some("FS_NOT_OBSERVED"), "{}", r.json);
    assert!(unread.exists());
    assert_eq!(jsonl(&keys.log()).len(), 1, "no failing patch reached the approver");
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "port = 1\nhost = a\n");
    assert!(
        s.audit().iter().any(|l| l["op"] == "escalate:describe"
            && l["decision"] == "checked"
            && l["result"] == "FS_EDIT_NOT_FOUND"),
        "{:?}",
        s.audit()
    );
    // A patch that applies is approved once and lands.
    let r = t.call("apply_patch", with(json!({"input": update(&outside, "port = 1", "port = 2")})));
    assert!(!r.is_error(), "{}", r.json);
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "port = 2\nhost = a\n");
    assert_eq!(jsonl(&keys.log()).len(), 2);
    // Two operations on one file: the second is checked against what the first leaves.
    let fresh = s.outside.path().join("fresh.txt");
    // An approved read of the absent file lets the checks speak about it.
    let r = t.call("read", with(json!({"file_path": p(&fresh)})));
    assert_eq!(r.code(), Some("FS_NOT_FOUND"), "{}", r.json);
    let twice = format!(
        "*** Begin Patch\n*** Add File: {0}\n+a\n+b\n*** Update File: {0}\n@@\n-b\n+c\n*** End Patch",
        p(&fresh)
    );
    let r = t.call("apply_patch", with(json!({"input": twice})));
    assert!(!r.is_error(), "{}", r.json);
    assert_eq!(std::fs::read_to_string(&fresh).unwrap(), "a\nc\n");
    assert_eq!(jsonl(&keys.log()).len(), 4, "the read and the patch");
    // A compromised client cannot have a patch approved and write something else with it.
    let mut rpc = Rpc::connect(&s.d);
    let tk = ticket(ask(&mut rpc, "s1", vec![op("readText", &outside)]).unwrap());
    read(&mut rpc, "s1", &outside, Some(tk)).unwrap();
    let request = v1::EscalationRequest {
        context: context("s1", None),
        requested_mode: v1::Mode::DangerFullAccess as i32,
        justification: "the user asked".into(),
        ops: vec![op("writeText", &outside)],
        patch: Some(update(&outside, "host = a", "host = b")),
    };
    let reply = rpc.rt.block_on(rpc.client.request_escalation(request)).unwrap().into_inner();
    let tk = ticket(reply);
    let err = write(&mut rpc, "s1", &outside, "evil\n", tk.clone()).unwrap_err();
    assert_eq!(
        err.message,
        "escalation ticket refused: this call differs from every call the approver signed"
    );
    write(&mut rpc, "s1", &outside, "port = 2\nhost = b\n", tk).unwrap();
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "port = 2\nhost = b\n");
}

/// str_replace_editor under signed trust: what would fail (unobserved, not verbatim, stale)
/// never reaches the approver and reads as the editor's own text; an approved replacement lands.
#[test]
fn the_editors_replacements_are_checked_before_the_approver() {
    let keys = Keys::new();
    let _approver = Approver::serve(&keys, &keys.rules("allow"));
    let s = Signed::start(&keys, "");
    let mut t = s.d.session_with_config("strReplaceEditor = true\n");
    let target = s.outside.path().join("app.conf");
    std::fs::write(&target, "port = 1\n# the port\n").unwrap();
    let replace = |old: &str, new: &str| {
        json!({"command": "str_replace", "path": p(&target), "old_str": old, "new_str": new,
               "sandbox_permissions": "danger-full-access", "justification": "the user asked"})
    };
    let r = t.call("str_replace_editor", replace("port = 1", "port = 2"));
    assert_eq!(r.code(), Some("FS_NOT_OBSERVED"), "{}", r.json);
    assert!(jsonl(&keys.log()).is_empty(), "the unobserved replacement reached the approver");
    let r = t.call(
        "read",
        json!({"file_path": p(&target), "sandbox_permissions": "danger-full-access", "justification": "x"}),
    );
    assert!(!r.is_error(), "{}", r.json);
    let r = t.call("str_replace_editor", replace("port = 9", "port = 2"));
    err(
        &r,
        "FS_EDIT_NOT_FOUND",
        &format!(
            "Error: No replacement was performed, old_str `port = 9` did not appear verbatim in {}.",
            p(&target)
        ),
    );
    let r = t.call("str_replace_editor", replace("port", "p"));
    err(
        &r,
        "FS_AMBIGUOUS_EDIT",
        "Error: No replacement was performed. Multiple occurrences of old_str `port` in lines [1, 2]. Please ensure it is unique.",
    );
    std::fs::write(&target, "port = 3\n").unwrap();
    let r = t.call("str_replace_editor", replace("port = 3", "port = 4"));
    assert_eq!(r.code(), Some("FS_STALE_VERSION"), "{}", r.json);
    assert_eq!(jsonl(&keys.log()).len(), 1, "only the read reached the approver");
    let r = t.call(
        "read",
        json!({"file_path": p(&target), "sandbox_permissions": "danger-full-access", "justification": "x"}),
    );
    assert!(!r.is_error(), "{}", r.json);
    let r = t.call("str_replace_editor", replace("port = 3", "port = 4"));
    assert!(!r.is_error(), "{}", r.json);
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "port = 4\n");
    assert_eq!(jsonl(&keys.log()).len(), 3);
}

/// An escalation's checks are the call's own dry run, in a worker of the mode asked (the network
/// process matches no file content): an edit of a file that is not text fails there, before any
/// approver is asked, and so does a write whose guard no longer holds; the approver decides what
/// would succeed, and the checks change or make nothing.
#[test]
fn the_checks_are_a_dry_run_in_the_worker_and_ask_no_approver_about_what_would_fail() {
    let keys = Keys::new();
    let _approver = Approver::serve(&keys, &keys.rules("allow"));
    let s = Signed::start(&keys, "");
    let mut rpc = Rpc::connect(&s.d);
    let blob = s.outside.path().join("blob.bin");
    let binary: &[u8] = b"\x00\x01 binary \xff";
    std::fs::write(&blob, binary).unwrap();
    let text = s.outside.path().join("notes.txt");
    std::fs::write(&text, "one\n").unwrap();
    // The checks may speak of a target outside the caller's grant once it was approved to
    // read it (the reads are not made: nothing here reads or changes a file).
    let deeper = s.outside.path().join("new/deeper/x.txt");
    let known: Vec<_> = [&blob, &text, &deeper].iter().map(|t| op("readText", t)).collect();
    let reply = ask(&mut rpc, "s1", known).unwrap();
    assert!(reply.approved, "{reply:?}");
    let asked = |before: usize| jsonl(&keys.log()).len() - before;
    type Case<'a> = (&'a str, v1::EscalatedOp, Option<ErrorCode>);
    let edit = |old: &str| v1::EscalatedOp {
        old_string: Some(old.into()),
        new_string: Some("two".into()),
        ..op("editText", &blob)
    };
    let stale_write = v1::EscalatedOp {
        write_guard: Some(v1::WriteGuard {
            kind: Some(v1::write_guard::Kind::ReplaceIfVersion(v1::ReplaceIfVersion {
                version: "0.0.0".into(),
                target_key: String::new(),
            })),
        }),
        ..write_op(&text, "two\n")
    };
    let cases: Vec<Case> = vec![
        ("an edit of a file that is not text", edit("binary"), Some(ErrorCode::NotText)),
        ("a write whose guard no longer holds", stale_write, Some(ErrorCode::StaleVersion)),
        ("a creation below missing directories", write_op(&deeper, "x\n"), None),
    ];
    for (what, call, failure) in cases {
        let before = jsonl(&keys.log()).len();
        match (ask(&mut rpc, "s1", vec![call]), failure) {
            (Err(err), Some(code)) => {
                assert_eq!(err.code, code, "{what}: {err:?}");
                assert_eq!(asked(before), 0, "{what}: the approver was asked about a call that fails");
            }
            (Ok(reply), None) => {
                assert!(reply.approved, "{what}: {reply:?}");
                assert_eq!(asked(before), 1, "{what}: the approver decides what would succeed");
            }
            (other, _) => panic!("{what}: {other:?}"),
        }
    }
    assert_eq!(std::fs::read(&blob).unwrap(), binary);
    assert_eq!(std::fs::read_to_string(&text).unwrap(), "one\n");
    // The approved creation was never made; its check made no directory on its way.
    assert!(!s.outside.path().join("new").exists(), "the dry run made a directory");
}

/// The approver's socket is never reachable with the umask's mode or the wrong group: it appears
/// at its path already 0660 and in the named group (bound in a private directory first), leaves
/// nothing behind beside it, and a file put at the path is never replaced.
#[test]
fn the_approvers_socket_appears_with_its_final_mode_and_group() {
    let keys = Keys::new();
    let rules = keys.rules("allow");
    let socket = keys.socket();
    let serve = |socket: &Path| {
        Command::new("sh")
            .arg("-c")
            .arg("umask 000; exec \"$@\"")
            .arg("sh")
            .arg(approver_bin())
            .arg("serve")
            .arg("--key")
            .arg(keys.key())
            .arg("--listen")
            .arg(format!("unix:{}", socket.display()))
            .arg("--rules")
            .arg(&rules)
            .args(["--socket-mode", "0660", "--socket-group", "4321"])
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let mut child = serve(&socket);
    let deadline = Instant::now() + Duration::from_secs(10);
    // The first moment the path exists, it is already the operator's socket.
    let first = loop {
        if let Ok(meta) = std::fs::symlink_metadata(&socket) {
            break meta;
        }
        assert!(child.try_wait().unwrap().is_none(), "fsd-approver serve exited");
        assert!(Instant::now() < deadline, "fsd-approver serve did not listen");
        std::hint::spin_loop();
    };
    assert!(first.file_type().is_socket());
    assert_eq!((first.mode() & 0o777, first.gid()), (0o660, 4321));
    // The private directory it was bound in goes right after the link (not atomically with
    // it): left behind by nothing, so gone within the deadline.
    let beside = || {
        let mut names: Vec<String> = std::fs::read_dir(keys.dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    };
    while beside().len() > 4 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(beside(), ["allow.toml", "approver.key", "approver.pub", "approver.sock"]);
    let _ = child.kill();
    let _ = child.wait();
    // A file at the path is the operator's, not a stale socket: refused and kept.
    let file = keys.dir.path().join("taken.sock");
    std::fs::write(&file, "mine\n").unwrap();
    let out = serve(&file).wait_with_output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("exists and is not a socket"), "{out:?}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "mine\n");
}

/// The daemon's stderr, line by line, until a line of the start-up approver probe (its warning,
/// or its word that the approver accepts connections) arrives; that line and those before it.
fn until_probe(stderr: std::process::ChildStderr) -> Vec<String> {
    use std::io::BufRead;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            let probe = is_probe(&line);
            if tx.send(line).is_err() || probe {
                break;
            }
        }
    });
    let mut lines = Vec::new();
    loop {
        // A bound on the test, not a measurement: the probe gives up after 3 s by itself.
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(line) => {
                let probe = is_probe(&line);
                lines.push(line);
                if probe {
                    return lines;
                }
            }
            Err(e) => panic!("no line of the approver probe ({e}); stderr so far: {lines:#?}"),
        }
    }
}

/// A line of the probe: the only lines with an `approver` field.
fn is_probe(line: &str) -> bool {
    line.contains(" approver=")
}

fn start_signed_piped(keys: &Keys, endpoint: &str) -> (fsd_testkit::Daemon, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let config = format!(
        "escalation = \"signed\"\nmax_mode = \"danger-full-access\"\napprover_public_key = \"{}\"\napprover_endpoint = \"{endpoint}\"\n",
        keys.public
    );
    let d = launch()
        .unix(dir.path().join("fsd.sock"))
        .writable_root(&ws)
        .config(dir.path().join("fsd.toml"), config)
        .stderr(fsd_testkit::Stderr::Piped)
        .env("FSD_LOG", "info")
        .start()
        .unwrap_or_else(|e| panic!("{e}"));
    (d, dir)
}

/// An approver nobody answers at is warned about at start, in one line naming the endpoint and
/// the reason, and the daemon serves anyway (an approver may come up later); a listening
/// approver gets no warning.
#[test]
fn an_unreachable_approver_is_warned_about_at_start() {
    let keys = Keys::new();
    let gone = tempfile::tempdir().unwrap();
    // A socket file nobody listens on any more, and a TCP port nobody listens on.
    let dead_socket = gone.path().join("approver.sock");
    drop(std::os::unix::net::UnixListener::bind(&dead_socket).unwrap());
    let dead_port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    for endpoint in [format!("unix:{}", dead_socket.display()), format!("tcp:127.0.0.1:{dead_port}")] {
        // Started (every listener answers) with the approver unreachable.
        let (mut d, _dir) = start_signed_piped(&keys, &endpoint);
        let lines = until_probe(d.take_stderr().unwrap());
        let warning = lines.last().unwrap();
        assert!(warning.contains(" WARN "), "{lines:#?}");
        assert!(
            warning.contains(&format!("cannot reach the approver at {endpoint}: "))
                && warning.contains("Connection refused")
                && warning.contains("escalations are refused until it can be reached"),
            "{warning}"
        );
        drop(d.terminate());
    }
    let approver = Approver::serve(&keys, &keys.rules("allow"));
    let (mut d, _dir) = start_signed_piped(&keys, &format!("unix:{}", approver.socket.display()));
    let lines = until_probe(d.take_stderr().unwrap());
    assert!(lines.iter().all(|l| !l.contains("cannot reach the approver")), "{lines:#?}");
    assert!(lines.last().unwrap().contains("the approver accepts connections"), "{lines:#?}");
    drop(d.terminate());
}

/// An agent that can write a directory outside the roots swaps it, as fast as it can, with a
/// symlink to a root-only place: `a` and `b` exchange names (`renameat2(RENAME_EXCHANGE)`, one
/// system call), and back. `pause` stops it with everything as set up, for the test's own
/// setup and for each description (the race is against the approved call, not its approval).
struct Swapper {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    pause: std::sync::Arc<std::sync::atomic::AtomicBool>,
    paused: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<u64>>,
}

impl Swapper {
    fn start(a: PathBuf, b: PathBuf) -> Swapper {
        Swapper::run(move || {
            let _ = rustix::fs::renameat_with(
                rustix::fs::CWD,
                &a,
                rustix::fs::CWD,
                &b,
                rustix::fs::RenameFlags::EXCHANGE,
            );
        })
    }

    /// A link to `target` that appears at `name` and vanishes again, as fast as it can: what
    /// an approved creation (or a move's destination) meets when the agent races it.
    fn flicker(target: PathBuf, name: PathBuf) -> Swapper {
        Swapper::run(move || {
            if std::os::unix::fs::symlink(&target, &name).is_err() {
                let _ = std::fs::remove_file(&name);
            }
        })
    }

    fn run(exchange: impl Fn() + Send + 'static) -> Swapper {
        use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
        let (stop, pause, paused) = (
            std::sync::Arc::new(AtomicBool::new(false)),
            std::sync::Arc::new(AtomicBool::new(true)),
            std::sync::Arc::new(AtomicBool::new(false)),
        );
        let (stop2, pause2, paused2) = (stop.clone(), pause.clone(), paused.clone());
        let thread = std::thread::spawn(move || {
            // A name the approved call moved away (it won the race before the first swap) fails
            // the exchange until the test puts it back while the swapper is held: the swapper
            // keeps running, so that `hold` returns.
            let mut swaps = 0u64;
            while !stop2.load(SeqCst) {
                if pause2.load(SeqCst) {
                    paused2.store(true, SeqCst);
                    std::thread::yield_now();
                    continue;
                }
                paused2.store(false, SeqCst);
                exchange();
                exchange();
                swaps += 1;
            }
            swaps
        });
        let swapper = Swapper { stop, pause, paused, thread: Some(thread) };
        swapper.hold();
        swapper
    }

    /// Stops swapping, with `a` and `b` as set up, until [`Swapper::go`].
    fn hold(&self) {
        use std::sync::atomic::Ordering::SeqCst;
        self.pause.store(true, SeqCst);
        while !self.paused.load(SeqCst) {
            std::thread::yield_now();
        }
    }

    fn go(&self) {
        use std::sync::atomic::Ordering::SeqCst;
        self.paused.store(false, SeqCst);
        self.pause.store(false, SeqCst);
    }

    /// Stops it; returns how many round trips it made.
    fn finish(mut self) -> u64 {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        self.thread.take().unwrap().join().unwrap()
    }
}

impl Drop for Swapper {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Where the race is run: `out` (outside the roots, writable by the agent) holds `d`, a real
/// directory with `pub.txt`, and `link`, a symlink to `secret`: a root-owned 0700 directory
/// holding a 0600 `pub.txt`. `d/pub.lnk` is a symlink to that root-only file.
struct Race {
    out: PathBuf,
    secret: tempfile::TempDir,
}

const SECRET: &str = "root only\n";
const PUBLIC: &str = "public\n";

/// How the agent swaps: a directory on the way, or the final entry.
#[derive(Debug, Clone, Copy)]
enum Swap {
    Parent,
    Final,
}

impl Race {
    fn new(s: &Signed) -> Race {
        let out = s.outside.path().join("out");
        let secret = tempfile::tempdir().unwrap();
        std::fs::set_permissions(secret.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let file = secret.path().join("pub.txt");
        std::fs::write(&file, SECRET).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::create_dir_all(out.join("d")).unwrap();
        std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o777)).unwrap();
        std::fs::write(out.join("d/pub.txt"), PUBLIC).unwrap();
        std::os::unix::fs::symlink(secret.path(), out.join("link")).unwrap();
        std::os::unix::fs::symlink(&file, out.join("d/pub.lnk")).unwrap();
        Race { out, secret }
    }

    fn swapper(&self, swap: Swap) -> Swapper {
        match swap {
            Swap::Parent => Swapper::start(self.out.join("d"), self.out.join("link")),
            Swap::Final => Swapper::start(self.out.join("d/pub.txt"), self.out.join("d/pub.lnk")),
        }
    }

    fn target(&self) -> PathBuf {
        self.out.join("d/pub.txt")
    }

    /// The root-only file is as it was, and nothing new appeared beside it.
    fn secret_intact(&self, what: &str) {
        let file = self.secret.path().join("pub.txt");
        assert_eq!(std::fs::read_to_string(&file).ok().as_deref(), Some(SECRET), "{what}");
        let names: Vec<_> =
            std::fs::read_dir(self.secret.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["pub.txt"], "{what}");
    }
}

/// How many approvals each race is given: the attack this guards against won within 1 to 8.
const RACE_APPROVALS: usize = 40;

/// A refusal of an approved call that met another object: by the daemon's check of the ticket
/// or by the worker's own walk. Never the root-only object's content or any other outcome.
fn refused_as_another_object(err: &WireError, what: &str) {
    let reason = (err.code, err.get("reason"), err.get("ticket"));
    let allowed = [
        (ErrorCode::SandboxDenied, Some("ticket_refused"), Some("mismatch")),
        (ErrorCode::SandboxDenied, Some("not_approved_object"), None),
    ];
    assert!(allowed.contains(&reason), "{what}: {err:?}");
}

/// The client's end of a tool call: what is left of the escalation is spent, its budget freed.
fn release(rpc: &mut Rpc, session: &str, tk: &v1::EscalationTicket) {
    let release = v1::ReleaseEscalationRequest {
        context: context(session, None),
        escalation_id: tk.escalation_id.clone(),
        ..Default::default()
    };
    rpc.rt.block_on(rpc.client.release_escalation(release)).unwrap();
}

/// An approved read of each of `paths` (absent ones too): what lets the checks before an
/// approver talk about them to this client.
fn read_first(rpc: &mut Rpc, session: &str, paths: &[PathBuf]) {
    let ops = paths.iter().map(|path| op("readText", path)).collect();
    let tk = ticket(ask(rpc, session, ops).unwrap());
    release(rpc, session, &tk);
}

fn move_file(
    rpc: &mut Rpc,
    session: &str,
    source: &Path,
    destination: &Path,
    ticket: v1::EscalationTicket,
) -> Result<(), WireError> {
    let request = v1::MoveFileRequest {
        context: context(session, Some(ticket)),
        source: p(source),
        destination: p(destination),
        ..Default::default()
    };
    rpc.rt.block_on(rpc.client.move_file(request)).map(drop).map_err(|s| WireError::from_status(&s).unwrap())
}

/// An approved read of a file in a directory the agent writes, while the agent swaps that
/// directory (or the file) with a symlink to a root-only one: the read returns the approved
/// file or is refused, never the root-only file's content.
#[test]
fn an_approved_read_raced_by_a_symlink_swap_never_reads_a_root_only_file() {
    let keys = Keys::new();
    let _approver = Approver::serve(&keys, &keys.rules("allow"));
    let s = Signed::start(&keys, "");
    let mut rpc = Rpc::connect(&s.d);
    let race = Race::new(&s);
    for swap in [Swap::Parent, Swap::Final] {
        let swapper = race.swapper(swap);
        for i in 0..RACE_APPROVALS {
            swapper.hold();
            let tk = ticket(ask(&mut rpc, "s1", vec![op("readText", &race.target())]).unwrap());
            swapper.go();
            match read(&mut rpc, "s1", &race.target(), Some(tk.clone())) {
                Ok(text) => assert_eq!(text, PUBLIC, "{swap:?} approval {i}"),
                Err(err) => refused_as_another_object(&err, &format!("{swap:?} approval {i}")),
            }
            release(&mut rpc, "s1", &tk);
        }
        assert!(swapper.finish() > 0);
        race.secret_intact(&format!("{swap:?}"));
    }
}

/// The same race against an approved write of the file, and an approved creation beside it:
/// the root-only directory and file are never written.
#[test]
fn an_approved_write_or_creation_raced_by_a_symlink_swap_never_writes_a_root_only_file() {
    let keys = Keys::new();
    let _approver = Approver::serve(&keys, &keys.rules("allow"));
    let s = Signed::start(&keys, "");
    let mut rpc = Rpc::connect(&s.d);
    let race = Race::new(&s);
    let fresh = race.out.join("d/new.txt");
    read_first(&mut rpc, "s1", &[race.target(), fresh.clone()]);
    for swap in [Swap::Parent, Swap::Final] {
        let swapper = race.swapper(swap);
        for i in 0..RACE_APPROVALS {
            let what = format!("{swap:?} approval {i}");
            swapper.hold();
            let _ = std::fs::remove_file(&fresh);
            let content = format!("written {i}\n");
            for target in [race.target(), fresh.clone()] {
                swapper.hold();
                let tk = ticket(ask(&mut rpc, "s1", vec![write_op(&target, &content)]).unwrap());
                swapper.go();
                if let Err(err) = write(&mut rpc, "s1", &target, &content, tk.clone()) {
                    refused_as_another_object(&err, &what);
                }
                release(&mut rpc, "s1", &tk);
            }
            race.secret_intact(&what);
        }
        swapper.finish();
    }
    // Between the races, the approved writes reached the approved files.
    assert!(std::fs::read_to_string(race.target()).unwrap().starts_with("written "));
}

/// The same race against an approved move of the file out of the swapped directory: the
/// root-only file is never moved, and the destination never holds it.
#[test]
fn an_approved_move_raced_by_a_symlink_swap_never_moves_a_root_only_file() {
    let keys = Keys::new();
    let _approver = Approver::serve(&keys, &keys.rules("allow"));
    let s = Signed::start(&keys, "");
    let mut rpc = Rpc::connect(&s.d);
    let race = Race::new(&s);
    let moved = race.out.join("moved.txt");
    read_first(&mut rpc, "s1", &[race.target(), moved.clone()]);
    for swap in [Swap::Parent, Swap::Final] {
        let swapper = race.swapper(swap);
        for i in 0..RACE_APPROVALS {
            let what = format!("{swap:?} approval {i}");
            swapper.hold();
            if moved.exists() {
                assert_eq!(std::fs::read_to_string(&moved).unwrap(), PUBLIC, "{what}");
                std::fs::rename(&moved, race.target()).unwrap();
            }
            let mut ask_move = op("moveFile", &race.target());
            ask_move.destination = p(&moved);
            let tk = ticket(ask(&mut rpc, "s1", vec![ask_move]).unwrap());
            swapper.go();
            if let Err(err) = move_file(&mut rpc, "s1", &race.target(), &moved, tk.clone()) {
                refused_as_another_object(&err, &what);
            }
            release(&mut rpc, "s1", &tk);
            race.secret_intact(&what);
        }
        swapper.hold();
        if let Ok(text) = std::fs::read_to_string(&moved) {
            assert_eq!(text, PUBLIC);
            std::fs::rename(&moved, race.target()).unwrap();
        }
        swapper.finish();
    }
}

/// An approved move that caught an outside save (renamed over its source after the check) undoes
/// itself; a second save renamed over the destination while that undo looks stays at the
/// destination: the undo moves only what the move put there (`moves::undo_rename`).
#[test]
fn a_save_made_while_an_approved_move_is_undone_stays_at_the_destination() {
    let keys = Keys::new();
    let _approver = Approver::serve(&keys, &keys.rules("allow"));
    let s = Signed::start(&keys, "");
    let mut rpc = Rpc::connect(&s.d);
    let dir = s.outside.path().join("moves");
    std::fs::create_dir(&dir).unwrap();
    let (source, destination) = (dir.join("a.txt"), dir.join("fsd-fault-pause-move"));
    std::fs::write(&source, "approved\n").unwrap();
    read_first(&mut rpc, "s1", &[source.clone(), destination.clone()]);
    let mut ask_move = op("moveFile", &source);
    ask_move.destination = p(&destination);
    let tk = ticket(ask(&mut rpc, "s1", vec![ask_move]).unwrap());
    // The worker pauses a second before its rename (`fsd-fault-pause-move`), then a second
    // after its undo looks at the destination: one save in each.
    let saver = {
        let (source, destination, dir) = (source.clone(), destination.clone(), dir.clone());
        std::thread::spawn(move || {
            let save = |text: &str, to: &Path| {
                let temp = dir.join("save.tmp");
                std::fs::write(&temp, text).unwrap();
                std::fs::rename(&temp, to).unwrap();
            };
            std::thread::sleep(std::time::Duration::from_millis(500));
            save("first save\n", &source);
            std::thread::sleep(std::time::Duration::from_millis(1000));
            save("second save\n", &destination);
        })
    };
    let err = move_file(&mut rpc, "s1", &source, &destination, tk.clone()).unwrap_err();
    saver.join().unwrap();
    release(&mut rpc, "s1", &tk);
    assert_eq!(
        (err.code, err.get("reason")),
        (ErrorCode::SandboxDenied, Some("not_approved_object")),
        "{err:?}"
    );
    let holds = |path: &Path| std::fs::read_to_string(path).ok();
    assert_eq!(holds(&destination).as_deref(), Some("second save\n"), "the save at the destination");
    assert_eq!(holds(&source), None, "the first save, replaced at the destination by the second");
}

/// An approved creation, and an approved move's destination, raced by a link to the root-only
/// file that appears and vanishes at the approved (absent) name as fast as the agent can make
/// it: the creation never follows or replaces the link, so the root-only file is never written
/// or replaced, and nothing appears beside it.
#[test]
fn an_approved_creation_or_destination_raced_by_a_link_at_its_name_never_writes_through_it() {
    let keys = Keys::new();
    let _approver = Approver::serve(&keys, &keys.rules("allow"));
    let s = Signed::start(&keys, "");
    let mut rpc = Rpc::connect(&s.d);
    let race = Race::new(&s);
    let fresh = race.out.join("d/new.txt");
    let moved = race.out.join("d/moved.txt");
    read_first(&mut rpc, "s1", &[race.target(), fresh.clone(), moved.clone()]);
    let secret = race.secret.path().join("pub.txt");
    for name in [fresh.clone(), moved.clone()] {
        let swapper = Swapper::flicker(secret.clone(), name.clone());
        for i in 0..RACE_APPROVALS {
            let what = format!("{} approval {i}", name.display());
            swapper.hold();
            let _ = std::fs::remove_file(&name);
            if !race.target().exists() {
                std::fs::write(race.target(), PUBLIC).unwrap();
            }
            let content = format!("written {i}\n");
            let tk = if name == fresh {
                ticket(ask(&mut rpc, "s1", vec![write_op(&fresh, &content)]).unwrap())
            } else {
                let mut ask_move = op("moveFile", &race.target());
                ask_move.destination = p(&moved);
                ticket(ask(&mut rpc, "s1", vec![ask_move]).unwrap())
            };
            swapper.go();
            let done = if name == fresh {
                write(&mut rpc, "s1", &fresh, &content, tk.clone())
            } else {
                move_file(&mut rpc, "s1", &race.target(), &moved, tk.clone())
            };
            if let Err(err) = done {
                refused_as_another_object_or_taken(&err, &what);
            }
            release(&mut rpc, "s1", &tk);
            swapper.hold();
            race.secret_intact(&what);
            // What is at the name now is the approved content or a link, never the secret
            // replaced by it.
            if let Ok(meta) = std::fs::symlink_metadata(&name)
                && meta.file_type().is_file()
            {
                let text = std::fs::read_to_string(&name).unwrap();
                assert!(text == content || text == PUBLIC, "{what}: {text:?}");
            }
        }
        swapper.finish();
    }
}

/// A refusal of an approved creation that met something at its name: another object than the
/// approved absence, or a name taken by the time it was placed (`FS_NOT_OBSERVED`: something appeared
/// there that the caller never saw).
fn refused_as_another_object_or_taken(err: &WireError, what: &str) {
    // Taken (`FS_NOT_OBSERVED`), or a move's destination that changed under it (`FS_STALE_VERSION`:
    // a link there, or what was there gone): refused, nothing written (the caller checks that).
    if matches!(err.code, ErrorCode::NotObserved | ErrorCode::StaleVersion) {
        return;
    }
    refused_as_another_object(err, what);
}

/// A call that meets another object than the approved one spends its approval: the agent
/// gets one try per approval, not as many as it likes until the approval expires.
#[test]
fn a_call_that_meets_another_object_spends_its_approval() {
    let keys = Keys::new();
    let _approver = Approver::serve(&keys, &keys.rules("allow"));
    let s = Signed::start(&keys, "");
    let mut rpc = Rpc::connect(&s.d);
    let race = Race::new(&s);
    read_first(&mut rpc, "s1", &[race.target()]);
    let tk = ticket(ask(&mut rpc, "s1", vec![write_op(&race.target(), "mine\n")]).unwrap());
    // The directory swapped for the link to the root-only one: refused.
    let exchange = |a: &Path, b: &Path| {
        rustix::fs::renameat_with(rustix::fs::CWD, a, rustix::fs::CWD, b, rustix::fs::RenameFlags::EXCHANGE)
            .unwrap()
    };
    exchange(&race.out.join("d"), &race.out.join("link"));
    let err = write(&mut rpc, "s1", &race.target(), "mine\n", tk.clone()).unwrap_err();
    assert_eq!((err.code, err.get("ticket")), (ErrorCode::SandboxDenied, Some("mismatch")), "{err:?}");
    race.secret_intact("swapped");
    // Swapped back, the approval is gone: a new one is needed.
    exchange(&race.out.join("d"), &race.out.join("link"));
    let err = write(&mut rpc, "s1", &race.target(), "mine\n", tk).unwrap_err();
    assert_eq!((err.code, err.get("ticket")), (ErrorCode::SandboxDenied, Some("unknown")), "{err:?}");
    assert_eq!(std::fs::read_to_string(race.target()).unwrap(), PUBLIC);
    let tk = ticket(ask(&mut rpc, "s1", vec![write_op(&race.target(), "mine\n")]).unwrap());
    write(&mut rpc, "s1", &race.target(), "mine\n", tk).unwrap();
    assert_eq!(std::fs::read_to_string(race.target()).unwrap(), "mine\n");
}

/// `Rpc::connect` as Unix uid `uid`: the connecting thread alone takes it as its effective uid
/// (the peer credentials the daemon reads), its real uid still root's so that it can reach the
/// socket's directory.
fn connect_as(d: &Daemon, uid: u32) -> Rpc {
    std::fs::set_permissions(&d.socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    let mut dir = d.socket.parent();
    while let Some(at) = dir.filter(|at| *at != Path::new("/")) {
        let mode = std::fs::metadata(at).unwrap().permissions().mode();
        std::fs::set_permissions(at, std::fs::Permissions::from_mode(mode | 0o011)).unwrap();
        dir = at.parent();
    }
    let socket = d.socket.clone();
    std::thread::spawn(move || {
        let root = rustix::process::Uid::ROOT;
        rustix::thread::set_thread_res_uid(root, rustix::process::Uid::from_raw(uid), root).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let endpoint = fsd_tool_client::connect::Endpoint::Unix(socket);
        let (client, hello) = rt.block_on(fsd_tool_client::connect::connect(&endpoint)).unwrap();
        Rpc { rt, client, hello }
    })
    .join()
    .unwrap()
}

/// A file with more than one hard link is acted on under all its names: an escalated call on
/// it reaches only what its requester could reach itself, whatever an approver would approve.
#[test]
fn a_hard_linked_file_is_escalated_only_within_its_requesters_own_authority() {
    let keys = Keys::new();
    let _approver = Approver::serve(&keys, &keys.rules("allow"));
    let s = Signed::start(&keys, "");
    let agent = 65534;
    let mut rpc = connect_as(&s.d, agent);
    let out = s.outside.path().join("out");
    std::fs::create_dir(&out).unwrap();
    // A root-only file, and a second name of it where the agent asks.
    let shadow = s.outside.path().join("shadow");
    std::fs::write(&shadow, SECRET).unwrap();
    std::fs::set_permissions(&shadow, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::hard_link(&shadow, out.join("linked.txt")).unwrap();
    // The agent's own file with a second name: within its authority.
    let own = s.outside.path().join("own");
    std::fs::write(&own, PUBLIC).unwrap();
    std::fs::set_permissions(&own, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::chown(&own, Some(agent), Some(agent)).unwrap();
    std::fs::hard_link(&own, out.join("own.txt")).unwrap();
    for ops in [vec![op("readText", &out.join("linked.txt"))], vec![op("readText", &shadow)]] {
        let err = ask(&mut rpc, "s1", ops).unwrap_err();
        assert_eq!((err.code, err.get("reason")), (ErrorCode::SandboxDenied, Some("hard_linked")), "{err:?}");
    }
    assert!(jsonl(&keys.log()).is_empty(), "nothing reached the approver");
    let tk = ticket(ask(&mut rpc, "s1", vec![op("readText", &out.join("own.txt"))]).unwrap());
    assert_eq!(read(&mut rpc, "s1", &out.join("own.txt"), Some(tk)).unwrap(), PUBLIC);
    // Root may act on the root-only file itself: approved, under every name.
    let mut root = Rpc::connect(&s.d);
    let tk = ticket(ask(&mut root, "s1", vec![op("readText", &out.join("linked.txt"))]).unwrap());
    assert_eq!(read(&mut root, "s1", &out.join("linked.txt"), Some(tk)).unwrap(), SECRET);
}

/// The worker that performs an escalated call holds the hard-link rule itself, on what its own
/// walk finds: a network process that skips its refusal and lets an approver approve a call on
/// a root-only file with a second name (the hook `FSD_FAULT_SKIP_HARD_LINK_CHECK` plays such a
/// compromised process) still gets `hard_linked` from the worker, for a read, a streamed read
/// and a write's dry run, and nothing is read or changed.
#[test]
fn a_hard_linked_file_beyond_its_requester_is_refused_by_the_worker_itself() {
    // `lie`: the network process also tells the worker the requester is root; the worker
    // takes the requester from the approval's signed `client:` line instead.
    for compromise in ["1", "lie"] {
        refused_by_the_worker(compromise);
    }
}

fn refused_by_the_worker(compromise: &str) {
    let keys = Keys::new();
    let _approver = Approver::serve(&keys, &keys.rules("allow"));
    let s = Signed::start_env(&keys, &keys.public, "", &[("FSD_FAULT_SKIP_HARD_LINK_CHECK", compromise)]);
    let mut rpc = connect_as(&s.d, 65534);
    let out = s.outside.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let shadow = s.outside.path().join("shadow");
    std::fs::write(&shadow, SECRET).unwrap();
    std::fs::set_permissions(&shadow, std::fs::Permissions::from_mode(0o600)).unwrap();
    let linked = out.join("linked.txt");
    std::fs::hard_link(&shadow, &linked).unwrap();
    let hard_linked = |what: &str, err: WireError| {
        assert_eq!(
            (err.code, err.get("reason")),
            (ErrorCode::SandboxDenied, Some("hard_linked")),
            "{compromise} {what}: {err:?}"
        );
    };
    // The network process let the approver approve it: the worker refuses.
    let tk = ticket(ask(&mut rpc, "s1", vec![op("readText", &linked)]).unwrap());
    hard_linked("read", read(&mut rpc, "s1", &linked, Some(tk)).unwrap_err());
    let tk = ticket(ask(&mut rpc, "s1", vec![op("readText", &linked)]).unwrap());
    let request =
        v1::StreamTextRequest { context: context("s1", Some(tk)), path: p(&linked), ..Default::default() };
    let streamed = rpc.rt.block_on(async {
        let mut stream = rpc.client.stream_text(request).await?.into_inner();
        let mut text = Vec::new();
        while let Some(reply) = stream.message().await? {
            text.push(format!("{reply:?}"));
        }
        Ok::<_, tonic::Status>(text)
    });
    hard_linked("stream", WireError::from_status(&streamed.unwrap_err()).unwrap());
    // A write's dry run before approval is bound to the read's approval and run in a worker:
    // refused there already, before anyone is asked.
    hard_linked("write's dry run", ask(&mut rpc, "s1", vec![write_op(&linked, "evil\n")]).unwrap_err());
    assert_eq!(std::fs::read_to_string(&shadow).unwrap(), SECRET);
    assert_eq!(std::fs::metadata(&linked).unwrap().nlink(), 2, "both names still share the file");
}

/// The worker that performs an approved change or read checks the approver's signature itself:
/// a network process that hands it the call without the signature, or with a signature that
/// is not the approver's (the hook `FSD_FAULT_TAMPER_APPROVAL` plays such a compromised
/// process, after every check of the ticket passed), changes nothing and reads nothing.
#[test]
fn a_change_the_approver_did_not_sign_is_refused_by_the_worker_itself() {
    let keys = Keys::new();
    let _approver = Approver::serve(&keys, &keys.rules("allow"));
    for tamper in ["none", "forged"] {
        let s = Signed::start_env(&keys, &keys.public, "", &[("FSD_FAULT_TAMPER_APPROVAL", tamper)]);
        let mut rpc = Rpc::connect(&s.d);
        let target = s.outside.path().join("root-only.txt");
        std::fs::write(&target, SECRET).unwrap();
        read_first(&mut rpc, "s1", std::slice::from_ref(&target));
        let tk = ticket(ask(&mut rpc, "s1", vec![write_op(&target, "evil\n")]).unwrap());
        let err = write(&mut rpc, "s1", &target, "evil\n", tk).unwrap_err();
        assert_eq!(
            (err.code, err.get("reason")),
            (ErrorCode::SandboxDenied, Some("unsigned_escalation")),
            "{tamper}: {err:?}"
        );
        assert_eq!(std::fs::read_to_string(&target).unwrap(), SECRET, "{tamper}");
        // An escalated read too (it read the file before the worker checked it), whole or
        // streamed.
        let tk = ticket(ask(&mut rpc, "s1", vec![op("readText", &target)]).unwrap());
        let err = read(&mut rpc, "s1", &target, Some(tk)).unwrap_err();
        assert_eq!(
            (err.code, err.get("reason")),
            (ErrorCode::SandboxDenied, Some("unsigned_escalation")),
            "{tamper}: {err:?}"
        );
        let tk = ticket(ask(&mut rpc, "s1", vec![op("readText", &target)]).unwrap());
        let request = v1::StreamTextRequest {
            context: context("s1", Some(tk)),
            path: p(&target),
            ..Default::default()
        };
        let streamed = rpc.rt.block_on(async {
            let mut stream = rpc.client.stream_text(request).await?.into_inner();
            let mut text = Vec::new();
            while let Some(reply) = stream.message().await? {
                text.push(format!("{reply:?}"));
            }
            Ok::<_, tonic::Status>(text)
        });
        let err = WireError::from_status(&streamed.unwrap_err()).unwrap();
        assert_eq!(
            (err.code, err.get("reason")),
            (ErrorCode::SandboxDenied, Some("unsigned_escalation")),
            "{tamper}: {err:?}"
        );
    }
}

/// The worker holds an approved change to the name its approval lists, not only to the
/// directory and the object: a network process that sends an approved creation of `new.txt`
/// (its object "absent") to another absent name of the same directory, with the same approval
/// and binding (the hook `FSD_FAULT_REDIRECT_APPROVED` plays such a compromised process), makes
/// neither file.
#[test]
fn an_approved_creation_sent_to_another_name_of_its_directory_makes_nothing() {
    let keys = Keys::new();
    let _approver = Approver::serve(&keys, &keys.rules("allow"));
    let outside = tempfile::tempdir().unwrap();
    let (new, other) = (outside.path().join("new.txt"), outside.path().join("other.txt"));
    let env = [("FSD_FAULT_REDIRECT_APPROVED", other.to_str().unwrap())];
    let s = Signed::start_env(&keys, &keys.public, "", &env);
    let mut rpc = Rpc::connect(&s.d);
    read_first(&mut rpc, "s1", std::slice::from_ref(&new));
    let tk = ticket(ask(&mut rpc, "s1", vec![write_op(&new, "made\n")]).unwrap());
    let err = write(&mut rpc, "s1", &new, "made\n", tk).unwrap_err();
    assert_eq!(
        (err.code, err.get("reason")),
        (ErrorCode::SandboxDenied, Some("not_approved_object")),
        "{err:?}"
    );
    assert!(!other.exists() && !new.exists());
}

/// The parts of a `reach:` report (the test hook `fsd-fault-reach`: what an approved call could
/// do from inside itself beyond its object), by name.
fn reach(err: &WireError) -> std::collections::BTreeMap<String, String> {
    let report = err.message.strip_prefix("reach: ").unwrap_or_else(|| panic!("no reach report: {err:?}"));
    report
        .split(' ')
        .filter_map(|part| part.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// An approved call outside the roots runs in a process of its own with only the authority its
/// kind of call needs, not root over the whole filesystem: from inside it (the hook
/// `fsd-fault-reach`, plain `open(2)` by path as code gone wrong would), an approved read in a
/// root-only directory can neither read nor open its sibling, nor read or create anything in
/// another root-only directory, and holds DAC_READ_SEARCH only; an approved write there cannot
/// reach the other directory either and holds the five capabilities a replace needs.
#[test]
fn an_approved_call_reaches_only_its_approved_object_with_the_capabilities_it_needs() {
    let keys = Keys::new();
    let _approver = Approver::serve(&keys, &keys.rules("allow"));
    let other = tempfile::tempdir().unwrap();
    std::fs::set_permissions(other.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let elsewhere = other.path().join("secret.txt");
    std::fs::write(&elsewhere, SECRET).unwrap();
    std::fs::set_permissions(&elsewhere, std::fs::Permissions::from_mode(0o600)).unwrap();
    let env = [("FSD_FAULT_REACH_ELSEWHERE", elsewhere.to_str().unwrap())];
    let s = Signed::start_env(&keys, &keys.public, "", &env);
    let mut rpc = Rpc::connect(&s.d);
    let locked = s.outside.path().join("locked");
    std::fs::create_dir(&locked).unwrap();
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o700)).unwrap();
    let target = locked.join("fsd-fault-reach");
    std::fs::write(&target, PUBLIC).unwrap();
    let sibling = locked.join("fsd-fault-sibling");
    std::fs::write(&sibling, SECRET).unwrap();
    std::fs::set_permissions(&sibling, std::fs::Permissions::from_mode(0o600)).unwrap();
    let unchanged = || {
        assert_eq!(std::fs::read_to_string(&elsewhere).unwrap(), SECRET);
        assert_eq!(std::fs::read_to_string(&sibling).unwrap(), SECRET);
        assert!(!other.path().join("fsd-fault-created").exists());
    };

    let tk = ticket(ask(&mut rpc, "s1", vec![op("readText", &target)]).unwrap());
    let report = reach(&read(&mut rpc, "s1", &target, Some(tk)).unwrap_err());
    let denied = "denied".to_owned();
    let expected: std::collections::BTreeMap<String, String> = [
        ("sibling-read", denied.clone()),
        ("sibling-write", denied.clone()),
        ("other-dir-read", denied.clone()),
        ("other-dir-create", denied.clone()),
        ("caps", "DAC_READ_SEARCH".to_owned()),
        ("uid", "0".to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    assert_eq!(report, expected, "an approved read");
    unchanged();

    read_first(&mut rpc, "s1", std::slice::from_ref(&target));
    let tk = ticket(ask(&mut rpc, "s1", vec![write_op(&target, "new\n")]).unwrap());
    let report = reach(&write(&mut rpc, "s1", &target, "new\n", tk).unwrap_err());
    let shown: Vec<(&str, &str)> = ["other-dir-read", "other-dir-create", "caps", "uid"]
        .into_iter()
        .map(|k| (k, report.get(k).map(String::as_str).unwrap_or_default()))
        .collect();
    assert_eq!(
        shown,
        [
            ("other-dir-read", "denied"),
            ("other-dir-create", "denied"),
            ("caps", "CHOWN,DAC_OVERRIDE,DAC_READ_SEARCH,FOWNER,FSETID"),
            ("uid", "0"),
        ],
        "an approved write: {report:?}"
    );
    unchanged();

    // Narrowed, the approved calls still do their work in the root-only directory: a creation,
    // then a replace that keeps the file's owner and mode.
    let plain = locked.join("plain.txt");
    read_first(&mut rpc, "s1", std::slice::from_ref(&plain));
    let tk = ticket(ask(&mut rpc, "s1", vec![write_op(&plain, "one\n")]).unwrap());
    write(&mut rpc, "s1", &plain, "one\n", tk).unwrap();
    std::os::unix::fs::chown(&plain, Some(65534), Some(65534)).unwrap();
    std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o640)).unwrap();
    read_first(&mut rpc, "s1", std::slice::from_ref(&plain));
    let tk = ticket(ask(&mut rpc, "s1", vec![write_op(&plain, "two\n")]).unwrap());
    write(&mut rpc, "s1", &plain, "two\n", tk).unwrap();
    let meta = std::fs::metadata(&plain).unwrap();
    assert_eq!(
        (std::fs::read_to_string(&plain).unwrap().as_str(), meta.uid(), meta.gid(), meta.mode() & 0o7777),
        ("two\n", 65534, 65534, 0o640)
    );
}

/// An approved change of what one user other than root owns (the directory it changes names
/// in, and the file) runs as that user, with DAC_READ_SEARCH only: its own permissions decide,
/// so a root-only file beside it stays out of reach even for writing, and what it creates is
/// that user's.
#[test]
fn an_approved_change_of_one_users_own_files_runs_as_that_user() {
    const OWNER: u32 = 65534;
    let keys = Keys::new();
    let _approver = Approver::serve(&keys, &keys.rules("allow"));
    let s = Signed::start_env(&keys, &keys.public, "", &[("FSD_FAULT_REACH_ELSEWHERE", "/nonexistent/x")]);
    let mut rpc = Rpc::connect(&s.d);
    // The owner's 0700 directory, below root's 0700 temporary directory it may not search.
    let home = s.outside.path().join("home");
    std::fs::create_dir(&home).unwrap();
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::os::unix::fs::chown(&home, Some(OWNER), Some(OWNER)).unwrap();
    let target = home.join("fsd-fault-reach");
    std::fs::write(&target, PUBLIC).unwrap();
    std::os::unix::fs::chown(&target, Some(OWNER), Some(OWNER)).unwrap();
    let sibling = home.join("fsd-fault-sibling");
    std::fs::write(&sibling, SECRET).unwrap();
    std::fs::set_permissions(&sibling, std::fs::Permissions::from_mode(0o600)).unwrap();

    read_first(&mut rpc, "s1", std::slice::from_ref(&target));
    let tk = ticket(ask(&mut rpc, "s1", vec![write_op(&target, "new\n")]).unwrap());
    let report = reach(&write(&mut rpc, "s1", &target, "new\n", tk).unwrap_err());
    let shown: Vec<(&str, &str)> = ["sibling-write", "caps", "uid"]
        .into_iter()
        .map(|k| (k, report.get(k).map(String::as_str).unwrap_or_default()))
        .collect();
    assert_eq!(
        shown,
        [("sibling-write", "denied"), ("caps", "DAC_READ_SEARCH"), ("uid", "65534")],
        "{report:?}"
    );
    assert_eq!(std::fs::read_to_string(&sibling).unwrap(), SECRET);

    // The approved calls still do their work: a replace that keeps the owner's file its own,
    // and a creation that is the owner's.
    let own = home.join("own.txt");
    std::fs::write(&own, "one\n").unwrap();
    std::os::unix::fs::chown(&own, Some(OWNER), Some(OWNER)).unwrap();
    let new = home.join("new.txt");
    read_first(&mut rpc, "s1", &[own.clone(), new.clone()]);
    let tk = ticket(ask(&mut rpc, "s1", vec![write_op(&own, "two\n")]).unwrap());
    write(&mut rpc, "s1", &own, "two\n", tk).unwrap();
    let tk = ticket(ask(&mut rpc, "s1", vec![write_op(&new, "made\n")]).unwrap());
    write(&mut rpc, "s1", &new, "made\n", tk).unwrap();
    for (path, text) in [(&own, "two\n"), (&new, "made\n")] {
        let meta = std::fs::metadata(path).unwrap();
        assert_eq!(
            (std::fs::read_to_string(path).unwrap().as_str(), meta.uid()),
            (text, OWNER),
            "{}",
            path.display()
        );
    }
}

/// An approved call's process dies with its worker: a call that hangs past its deadline (the
/// hook `fsd-fault-hang-write`) gets its worker killed, and the process running the call goes
/// too, so it can never act after its caller was told the call ended.
#[test]
fn an_approved_call_that_hangs_dies_with_its_killed_worker() {
    let keys = Keys::new();
    let _approver = Approver::serve(&keys, &keys.rules("allow"));
    let s = Signed::start(&keys, "call_timeout_ms = 1500\n");
    let mut rpc = Rpc::connect(&s.d);
    let target = s.outside.path().join("fsd-fault-hang-write");
    read_first(&mut rpc, "s1", std::slice::from_ref(&target));
    let tk = ticket(ask(&mut rpc, "s1", vec![write_op(&target, "late\n")]).unwrap());
    let path = target.clone();
    let writer = std::thread::spawn(move || write(&mut rpc, "s1", &path, "late\n", tk));
    // The call's process: a danger-full-access worker whose parent is another one.
    let ppid = |pid: u32| -> Option<u32> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()
    };
    let call = loop {
        let workers = s.d.process.worker_pids("danger-full-access");
        if let Some(&child) = workers.iter().find(|&&pid| ppid(pid).is_some_and(|p| workers.contains(&p))) {
            break child;
        }
        assert!(!writer.is_finished(), "the call ended before its process was seen");
        std::thread::sleep(Duration::from_millis(20));
    };
    let err = writer.join().unwrap().unwrap_err();
    assert_eq!(err.code, ErrorCode::Aborted, "{err:?}");
    fsd_testkit::procs::wait_gone(&[call], Duration::from_secs(10), "the approved call's process").unwrap();
    assert!(!target.exists());
}

/// An approved listing of a root-only directory runs in its own process too, and its entries'
/// versions are the ones a read of each file gives (the listing may open the files of that
/// directory for their inode's generation, nothing elsewhere).
#[test]
fn an_approved_listing_shows_the_versions_a_read_gives() {
    let keys = Keys::new();
    let _approver = Approver::serve(&keys, &keys.rules("allow"));
    let s = Signed::start(&keys, "");
    let mut rpc = Rpc::connect(&s.d);
    let dir = s.outside.path().join("listed");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let file = dir.join("a.txt");
    std::fs::write(&file, PUBLIC).unwrap();
    let tk = ticket(ask(&mut rpc, "s1", vec![op("readText", &dir)]).unwrap());
    let request = v1::ListDirRequest { context: context("s1", Some(tk.clone())), path: p(&dir) };
    let listed = rpc.rt.block_on(rpc.client.list_dir(request)).unwrap().into_inner();
    release(&mut rpc, "s1", &tk);
    let tk = ticket(ask(&mut rpc, "s1", vec![op("readText", &file)]).unwrap());
    let request = v1::ReadTextRequest { context: context("s1", Some(tk)), path: p(&file), max_bytes: 0 };
    let read = rpc.rt.block_on(rpc.client.read_text(request)).unwrap().into_inner();
    let entries: Vec<(String, bool)> = listed
        .entries
        .iter()
        .map(|e| {
            (e.name.clone(), e.version.as_deref().is_some_and(|v| fsd_proto::version::same(v, &read.version)))
        })
        .collect();
    assert_eq!(entries, [("a.txt".to_owned(), true)], "{listed:?} {}", read.version);
}

/// Before anyone is asked, the daemon previews a call's content in its danger-full-access
/// worker (the dry run that gives a write's diff, the file a patch's hunks apply to). A
/// compromised network process (the hook `FSD_FAULT_FORGE_PREVIEW` plays one) asking that
/// worker to preview a root-only file outside the roots gets none of its content: not unbound
/// (served with a read-only worker's authority, which stops beneath the roots), and not bound
/// with the approval of another file beside it (the approval names that file only). The
/// approved file's own preview still works: its edit is described, approved and made.
#[test]
fn a_preview_of_an_object_no_approval_names_returns_none_of_its_content() {
    let keys = Keys::new();
    let _approver = Approver::serve(&keys, &keys.rules("allow"));
    let outside = tempfile::tempdir().unwrap();
    let shadow = outside.path().join("shadow");
    std::fs::write(&shadow, SECRET).unwrap();
    std::fs::set_permissions(&shadow, std::fs::Permissions::from_mode(0o600)).unwrap();
    let public = outside.path().join("app.conf");
    std::fs::write(&public, PUBLIC).unwrap();
    let env = [("FSD_FAULT_FORGE_PREVIEW", shadow.to_str().unwrap())];
    let s = Signed::start_env(&keys, &keys.public, "", &env);
    let mut rpc = Rpc::connect(&s.d);
    read_first(&mut rpc, "s1", std::slice::from_ref(&public));
    let request = v1::EscalationRequest {
        context: context("s1", None),
        requested_mode: v1::Mode::DangerFullAccess as i32,
        justification: "forge previews".into(),
        ops: vec![write_op(&public, "changed\n")],
        patch: None,
    };
    let status = rpc.rt.block_on(rpc.client.request_escalation(request)).unwrap_err();
    let report = WireError::from_status(&status).unwrap().message;
    let parts: std::collections::BTreeMap<&str, &str> = report
        .strip_prefix("forged: ")
        .unwrap_or_else(|| panic!("no report: {report}"))
        .split(' ')
        .filter_map(|part| part.split_once('='))
        .collect();
    assert_eq!(parts.keys().copied().collect::<Vec<_>>(), ["bound-check", "bound-read", "check", "read"]);
    for (what, got) in &parts {
        assert!(got.starts_with("refused:") || *got == "no-content", "{what}: {report}");
    }
    assert!(!report.contains("root only"), "{report}");
    // The approved file's preview is the legitimate one: described, approved, written.
    let tk = ticket(ask(&mut rpc, "s1", vec![write_op(&public, "changed\n")]).unwrap());
    write(&mut rpc, "s1", &public, "changed\n", tk).unwrap();
    assert_eq!(std::fs::read_to_string(&public).unwrap(), "changed\n");
    assert_eq!(std::fs::read_to_string(&shadow).unwrap(), SECRET);
}

/// An escalated apply_patch that adds two files in one new directory outside the roots is
/// described as two creations, each making that directory. The first call makes it; its worker
/// vouches for the directory it made (a tag under a key the network process never holds), so
/// the second call, redeemed with the same approval, may stand in it as if it had made it
/// itself. A directory the agent puts there instead (renamed in between) is not the one made:
/// that call is refused and nothing is written into it.
#[test]
fn a_patch_adding_two_files_in_one_new_directory_is_approved_as_a_whole() {
    let keys = Keys::new();
    let _approver = Approver::serve(&keys, &keys.rules("allow"));
    let s = Signed::start(&keys, "");
    let mut t = s.d.session_with_config("applyPatch = true\n");
    let esc = json!({"sandbox_permissions": "danger-full-access", "justification": "the user asked"});
    let with = |mut args: serde_json::Value| {
        args.as_object_mut().unwrap().extend(esc.as_object().unwrap().clone());
        args
    };
    let out = s.outside.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let dir = out.join("new");
    let (a, b) = (dir.join("a.txt"), dir.join("b.txt"));
    for path in [&a, &b] {
        let _ = t.call("read", with(json!({"file_path": p(path)})));
    }
    let patch = format!(
        "*** Begin Patch\n*** Add File: {}\n+one\n*** Add File: {}\n+two\n*** End Patch",
        p(&a),
        p(&b)
    );
    let r = t.call("apply_patch", with(json!({"input": patch})));
    assert!(!r.is_error(), "{}", r.json);
    assert_eq!(std::fs::read_to_string(&a).unwrap(), "one\n");
    assert_eq!(std::fs::read_to_string(&b).ok().as_deref(), Some("two\n"), "{}", r.text());

    // Raw gRPC, as a compromised client: the first creation makes the directory; before the
    // second, the agent swaps in a directory of its own at that name. The second call stands
    // in a directory no call of this approval made: refused, and it stays empty.
    let mut rpc = Rpc::connect(&s.d);
    let dir = out.join("other");
    let (c, d) = (dir.join("c.txt"), dir.join("d.txt"));
    read_first(&mut rpc, "s2", &[c.clone(), d.clone()]);
    let tk = ticket(ask(&mut rpc, "s2", vec![write_op(&c, "three\n"), write_op(&d, "four\n")]).unwrap());
    write(&mut rpc, "s2", &c, "three\n", tk.clone()).unwrap();
    std::fs::rename(&dir, out.join("made")).unwrap();
    std::fs::create_dir(&dir).unwrap();
    let err = write(&mut rpc, "s2", &d, "four\n", tk).unwrap_err();
    refused_as_another_object(&err, "a directory no call made");
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
}

/// An approved change runs in a process of its own, confined to the approved objects, which
/// cannot reach the change record: its worker records the change from the carrier it handed
/// the process (docs/rewind.md), before the process replies, so a listing made on the answer
/// has it (the hook `fsd-fault-slow-record` makes the worker take half a second to record). It
/// is listed as escalated, with its metadata only.
#[test]
fn an_approved_change_in_its_own_process_is_recorded() {
    approved_change_listed("fsd-fault-slow-record", &[], Duration::ZERO);
}

/// Without the handshake (`FSD_FAULT_NO_HANDSHAKE`: its pipes could not be made) the worker
/// records the change once the process has ended, so it is listed a moment after the answer.
#[test]
fn an_approved_change_is_recorded_when_its_handshake_cannot_start() {
    approved_change_listed("app.conf", &[("FSD_FAULT_NO_HANDSHAKE", "1")], Duration::from_secs(10));
}

/// An approved edit of the file `name` outside the roots, then the session's listing, asked
/// again for up to `wait` until it shows a change.
fn approved_change_listed(name: &str, env: &[(&str, &str)], wait: Duration) {
    let keys = Keys::new();
    let _approver = Approver::serve(&keys, &keys.rules("allow"));
    let state = tempfile::tempdir().unwrap();
    let s =
        Signed::start_env(&keys, &keys.public, &format!("state_dir = \"{}\"\n", state.path().display()), env);
    let target = s.outside.path().join(name);
    std::fs::write(&target, "port = 1\n").unwrap();
    let mut t = s.d.session();
    let with = |mut args: serde_json::Value| {
        let esc = json!({"sandbox_permissions": "danger-full-access", "justification": "the user asked"});
        args.as_object_mut().unwrap().extend(esc.as_object().unwrap().clone());
        args
    };
    let r = t.call("read", with(json!({"file_path": p(&target)})));
    assert!(!r.is_error(), "{}", r.json);
    let r = t.call(
        "edit",
        with(json!({"file_path": p(&target), "old_string": "port = 1", "new_string": "port = 2"})),
    );
    assert!(!r.is_error(), "{}", r.json);
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "port = 2\n");

    let deadline = Instant::now() + wait;
    let listing = loop {
        let listing = t.raw(&json!({"id": "ch", "changes": {"since": 0, "this_session": true}}).to_string());
        assert!(!listing.is_error(), "{}", listing.json);
        let empty = listing.meta()["changes"].as_array().is_some_and(|c| c.is_empty());
        if !empty || Instant::now() >= deadline {
            break listing;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let meta = listing.meta();
    let recorded: Vec<(&str, bool, &str)> = meta["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["operation"].as_str().unwrap(),
                c["escalated"].as_bool().unwrap(),
                c["targets"][0].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(recorded, [("editText", true, p(&target).as_str())], "{}", listing.json);
    assert_eq!(meta["files"][0]["diff"], serde_json::Value::Null, "{}", listing.json);
    assert!(listing.text().contains("content not shown: changed under an escalation"), "{}", listing.text());
    assert!(!listing.text().contains("port ="), "{}", listing.text());
}
