//! Escalation at the `client` trust level: the fields are advertised only when hello offers a
//! wider mode; the seed's rules on sandbox_permissions and justification; an approved call runs
//! once at the wider mode and is audited; a refused one writes nothing; the daemon refuses what
//! is above the client's maximum whatever the client claims.

use crate::common;

use common::rpc::{Rpc, p};
use common::*;
use fsd_proto::{ErrorCode, WireError, v1};
use fsd_tool_client::connect::{self, Endpoint};
use fsd_tool_client::{ClientConfig, Session, Tools};
use serde_json::json;

/// The input schema property names of `tool` as a session on `d` advertises them, for a client
/// with an approver (a rule file): someone who can be asked.
fn advertised(d: &Daemon, tool: &str) -> Vec<String> {
    let rules = d.dir.path().join("any-rules.toml");
    std::fs::write(&rules, "").unwrap();
    advertised_with(d, tool, ClientConfig { escalation_rules: Some(rules), ..ClientConfig::default() })
}

fn advertised_with(d: &Daemon, tool: &str, config: ClientConfig) -> Vec<String> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let (client, hello) = rt.block_on(connect::connect(&Endpoint::Unix(d.socket.clone()))).unwrap();
    let session = Session::new(Tools::new(config), client, hello, d.root.clone());
    let schema = session.tools().schemas().into_iter().find(|s| s["name"] == tool).unwrap();
    schema["input_schema"]["properties"].as_object().unwrap().keys().cloned().collect()
}

struct Setup {
    d: Daemon,
    outside: tempfile::TempDir,
    audit: std::path::PathBuf,
    rules: std::path::PathBuf,
}

fn setup(extra_daemon_config: &str) -> Setup {
    let outside = tempfile::tempdir().unwrap();
    let audit = outside.path().join("audit.jsonl");
    let config = format!(
        "escalation = \"client\"\nmax_mode = \"danger-full-access\"\naudit_log = \"{}\"\n{extra_daemon_config}",
        audit.display()
    );
    let d = Daemon::start_with(&[], &config);
    let rules = outside.path().join("rules.toml");
    std::fs::write(
        &rules,
        format!(
            "[[rule]]\nmode = \"*\"\npath = \"{0}/denied/**\"\ndecision = \"deny\"\n\n[[rule]]\nmode = \"danger-full-access\"\npath = \"{0}/**\"\ndecision = \"allow\"\n",
            outside.path().display()
        ),
    )
    .unwrap();
    Setup { d, outside, audit, rules }
}

#[test]
fn the_fields_are_advertised_only_when_a_wider_mode_is_offered() {
    let s = setup("");
    let props = advertised(&s.d, "write");
    assert_eq!(props, ["file_path", "content", "sandbox_permissions", "justification"]);
    // An approved read is how a file outside the roots gets observed before an approved edit.
    assert_eq!(
        advertised(&s.d, "read"),
        ["file_path", "offset", "limit", "sandbox_permissions", "justification"]
    );
    // No one to ask (no approver configured): a call with the fields could only be refused.
    assert_eq!(advertised_with(&s.d, "write", ClientConfig::default()), ["file_path", "content"]);
    let deny = Daemon::start();
    assert_eq!(advertised(&deny, "write"), ["file_path", "content"]);
    assert_eq!(advertised(&deny, "edit"), ["file_path", "old_string", "new_string", "replace_all"]);
}

#[test]
fn an_approved_escalation_runs_once_and_is_audited() {
    let s = setup("");
    let target = s.outside.path().join("out.txt");
    let mut t = s.d.session_with_config(&format!("escalationRules = \"{}\"\n", s.rules.display()));
    let write = |t: &mut ToolSession, extra: serde_json::Value| {
        let mut args = json!({"file_path": p(&target), "content": "approved\n"});
        args.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        t.call("write", args)
    };
    // Without the fields: the fence refuses, with the marker and the retry hint.
    let r = write(&mut t, json!({}));
    assert_eq!(r.code(), Some("FS_SANDBOX_DENIED"), "{}", r.json);
    assert!(r.text().contains("[sandbox: file access denied under workspace-write mode]\nTo request approval for this call, retry it now with sandbox_permissions set to \"danger-full-access\" and a justification."), "{}", r.text());
    assert!(!target.exists());
    // The seed's argument rules.
    let r = write(&mut t, json!({"sandbox_permissions": "danger-full-access", "justification": "  "}));
    err(
        &r,
        "INVALID_ARGS",
        "Error: justification must be a non-empty reason when sandbox_permissions differs from the current mode (workspace-write)",
    );
    let r = write(&mut t, json!({"justification": "because"}));
    err(&r, "INVALID_ARGS", "Error: justification was given without sandbox_permissions");
    let r = write(&mut t, json!({"sandbox_permissions": "root"}));
    err(
        &r,
        "INVALID_ARGS",
        "Error: sandbox_permissions must be one of read-only, workspace-write, danger-full-access",
    );
    // Repeating the current mode needs no reason and changes nothing.
    let r = write(&mut t, json!({"sandbox_permissions": "workspace-write", "justification": ""}));
    assert_eq!(r.code(), Some("FS_SANDBOX_DENIED"));
    // Approved: this one call runs at the wider mode.
    let r = write(
        &mut t,
        json!({"sandbox_permissions": "danger-full-access", "justification": "the user asked for it"}),
    );
    assert!(!r.is_error(), "{}", r.json);
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "approved\n");
    // The next call is back at the default mode.
    let r = t.call("edit", json!({"file_path": p(&target), "old_string": "approved", "new_string": "again"}));
    assert_eq!(r.code(), Some("FS_SANDBOX_DENIED"), "{}", r.json);
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "approved\n");
    // Both the decision and the mutation are in the audit log, without file contents.
    let audit = std::fs::read_to_string(&s.audit).unwrap();
    let lines: Vec<serde_json::Value> = audit.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(
        lines.iter().any(|l| l["op"] == "escalate:writeText"
            && l["decision"] == "approved"
            && l["mode"] == "danger-full-access"),
        "{audit}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l["op"] == "writeText" && l["mode"] == "danger-full-access" && l["result"] == "ok"),
        "{audit}"
    );
    assert!(lines.iter().any(|l| l["op"] == "writeText" && l["decision"] == "denied"), "{audit}");
    assert!(!audit.contains("approved\\n"), "the audit log holds no contents");
    // The rule file's decision is one record naming the digest of the daemon's description of
    // the checked call (the `checked` record carries the same).
    let decided: Vec<_> =
        lines.iter().filter(|l| l["op"] == "escalate:describe" && l["decision"] == "approved").collect();
    assert_eq!(decided.len(), 1, "{audit}");
    assert_eq!(decided[0]["result"], "client:rules", "{audit}");
    let digest = decided[0]["digest"].as_str().unwrap();
    assert_eq!(digest.len(), 64, "{audit}");
    assert!(
        lines.iter().any(|l| l["decision"] == "checked" && l["result"] == "ok" && l["digest"] == digest),
        "{audit}"
    );
}

#[test]
fn a_refused_escalation_writes_nothing() {
    let s = setup("");
    std::fs::create_dir(s.outside.path().join("denied")).unwrap();
    let target = s.outside.path().join("denied/x.txt");
    let mut t = s.d.session_with_config(&format!("escalationRules = \"{}\"\n", s.rules.display()));
    let r = t.call("write", json!({"file_path": p(&target), "content": "x", "sandbox_permissions": "danger-full-access", "justification": "please"}));
    // Refused: by whom, nothing changed, and no suggestion to send the same request again.
    err(
        &r,
        "FS_SANDBOX_DENIED",
        "Error: escalation to danger-full-access was refused by this client's escalation rules; nothing was changed. Do not retry this call with sandbox_permissions; continue under workspace-write mode or ask the user. [sandbox: file access denied under workspace-write mode]",
    );
    assert!(!target.exists());
    // No approver configured at all: refused as well, and said so.
    let mut none = s.d.session();
    let other = s.outside.path().join("y.txt");
    let r = none.call("write", json!({"file_path": p(&other), "content": "x", "sandbox_permissions": "danger-full-access", "justification": "please"}));
    err(
        &r,
        "FS_SANDBOX_DENIED",
        "Error: escalation to danger-full-access was refused: no approver is configured for this client; nothing was changed. Do not retry this call with sandbox_permissions; continue under workspace-write mode or ask the user. [sandbox: file access denied under workspace-write mode]",
    );
    assert!(!other.exists());
    // Each refusal is one audit record, as the client reported it.
    let audit = audit_lines(&s.audit);
    let refused = |by: &str, path: &std::path::Path| {
        audit.iter().any(|l| {
            l["op"] == "escalate:describe"
                && l["decision"] == "refused"
                && l["result"] == by
                && l["path"] == p(path)
        })
    };
    assert!(refused("client:rules", &target), "{audit:?}");
    assert!(refused("client:none", &other), "{audit:?}");
}

#[test]
fn the_rules_judge_the_path_the_daemon_acts_on() {
    let s = setup("");
    std::fs::create_dir(s.outside.path().join("denied")).unwrap();
    std::fs::create_dir(s.outside.path().join("other")).unwrap();
    let mut t = s.d.session_with_config(&format!("escalationRules = \"{}\"\n", s.rules.display()));
    // A name escape and a `..` are read by the daemon, not by the glob: the deny rule decides.
    let check = |t: &mut ToolSession, given: String, lands: &str| {
        let r = t.call("write", json!({"file_path": given, "content": "x", "sandbox_permissions": "danger-full-access", "justification": "please"}));
        assert_eq!(r.code(), Some("FS_SANDBOX_DENIED"), "{given}: {}", r.json);
        assert!(r.text().contains("refused by this client's escalation rules"), "{given}: {}", r.text());
        assert!(!s.outside.path().join(lands).exists(), "{given}: written");
    };
    let outside = p(s.outside.path());
    check(&mut t, format!("{outside}/\\x64enied/a.txt"), "denied/a.txt");
    check(&mut t, format!("{outside}/other/../denied/b.txt"), "denied/b.txt");
    // A link on the way: the daemon follows it, so the rules judge where it leads.
    std::os::unix::fs::symlink(s.outside.path().join("denied"), s.outside.path().join("other/link")).unwrap();
    check(&mut t, format!("{outside}/other/link/c.txt"), "denied/c.txt");
}

#[test]
fn the_daemon_refuses_modes_above_the_clients_maximum() {
    let uid = rustix::process::geteuid().as_raw();
    let s = setup(&format!("[client_max_modes]\n\"{uid}\" = \"workspace-write\"\n"));
    // hello offers nothing wider to this client, so the tools do not advertise the fields.
    assert_eq!(advertised(&s.d, "write"), ["file_path", "content"]);
    // A client that claims an approval anyway is refused by the daemon.
    let target = s.outside.path().join("z.txt");
    let mut rpc = Rpc::connect(&s.d);
    assert_eq!(rpc.hello.max_mode, v1::Mode::WorkspaceWrite as i32);
    let request = v1::WriteTextRequest {
        context: Some(v1::CallContext {
            mode: v1::Mode::DangerFullAccess as i32,
            escalation: Some(v1::EscalationTicket {
                approved_mode: v1::Mode::DangerFullAccess as i32,
                justification: "forged".into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        path: p(&target),
        content: "x".into(),
        ..Default::default()
    };
    let status = rpc.rt.block_on(rpc.client.write_text(request)).unwrap_err();
    let wire = WireError::from_status(&status).unwrap();
    assert_eq!(wire.code, ErrorCode::SandboxDenied);
    assert_eq!(wire.message, "danger-full-access is above this client's maximum mode workspace-write");
    assert!(!target.exists());
}

#[test]
fn at_deny_a_claimed_escalation_is_refused() {
    let d = Daemon::start_with(&[], "max_mode = \"danger-full-access\"\n");
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("x.txt");
    let mut rpc = Rpc::connect(&d);
    let request = v1::WriteTextRequest {
        context: Some(v1::CallContext {
            mode: v1::Mode::DangerFullAccess as i32,
            escalation: Some(v1::EscalationTicket {
                approved_mode: v1::Mode::DangerFullAccess as i32,
                justification: "claimed".into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        path: p(&target),
        content: "x".into(),
        ..Default::default()
    };
    let status = rpc.rt.block_on(rpc.client.write_text(request)).unwrap_err();
    let wire = WireError::from_status(&status).unwrap();
    assert_eq!(wire.message, "escalation to danger-full-access is disabled on this daemon");
    assert!(!target.exists());
    assert_eq!(advertised(&d, "write"), ["file_path", "content"]);
}

fn audit_lines(path: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn an_existing_file_outside_the_roots_is_read_then_edited_with_the_rule_files_approval() {
    let s = setup("");
    let target = s.outside.path().join("app.conf");
    std::fs::write(&target, "port = 1\n").unwrap();
    let mut t = s.d.session_with_config(&format!("escalationRules = \"{}\"\n", s.rules.display()));
    let esc = json!({"sandbox_permissions": "danger-full-access", "justification": "the user asked"});
    let with = |mut args: serde_json::Value| {
        args.as_object_mut().unwrap().extend(esc.as_object().unwrap().clone());
        args
    };
    // Unobserved: the policy refuses before the daemon's checks or the rules see it.
    let r = t.call("edit", with(json!({"file_path": p(&target), "old_string": "1", "new_string": "2"})));
    err(
        &r,
        "FS_NOT_OBSERVED",
        &format!(
            "Error: cannot modify \"{}\": file has not been read — read the file, then retry",
            p(&target)
        ),
    );
    assert!(
        audit_lines(&s.audit).iter().all(|l| l["op"] != "escalate:describe"),
        "nothing reached the daemon"
    );
    // The read the edit needs, approved for this one call.
    let r = t.call("read", json!({"file_path": p(&target)}));
    assert!(r.text().ends_with("\nTo request approval for this call, retry it now with sandbox_permissions set to \"danger-full-access\" and a justification."), "{}", r.text());
    let r = t.call("read", with(json!({"file_path": p(&target)})));
    assert!(!r.is_error() && r.text().contains("port = 1"), "{}", r.json);
    // An edit that cannot match fails in the daemon's checks; no call runs at the wider mode.
    let r =
        t.call("edit", with(json!({"file_path": p(&target), "old_string": "port = 9", "new_string": "x"})));
    assert_eq!(r.code(), Some("FS_EDIT_NOT_FOUND"), "{}", r.json);
    let audit = audit_lines(&s.audit);
    assert!(
        audit.iter().any(|l| l["op"] == "escalate:describe"
            && l["decision"] == "checked"
            && l["result"] == "FS_EDIT_NOT_FOUND"),
        "{audit:?}"
    );
    assert!(!audit.iter().any(|l| l["op"] == "escalate:editText"), "{audit:?}");
    // A touch changes the metadata, not the content: the checks, like the write, still hold.
    let later = std::time::SystemTime::now() + std::time::Duration::from_secs(5);
    std::fs::File::options().write(true).open(&target).unwrap().set_modified(later).unwrap();
    let r = t.call(
        "edit",
        with(json!({"file_path": p(&target), "old_string": "port = 1", "new_string": "port = 2"})),
    );
    assert!(!r.is_error(), "{}", r.json);
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "port = 2\n");
    // Changed behind the session's back: stale, before any approval.
    std::fs::write(&target, "port = 3\n").unwrap();
    let r = t.call(
        "edit",
        with(json!({"file_path": p(&target), "old_string": "port = 2", "new_string": "port = 4"})),
    );
    assert_eq!(r.code(), Some("FS_STALE_VERSION"), "{}", r.json);
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "port = 3\n");
    let audit = audit_lines(&s.audit);
    assert_eq!(
        audit.iter().filter(|l| l["op"] == "escalate:editText" && l["decision"] == "approved").count(),
        1,
        "{audit:?}"
    );
    // A patch whose hunk does not match fails in the daemon's checks: the rule file is not
    // consulted and nothing runs at the wider mode.
    let r = t.call("read", with(json!({"file_path": p(&target)})));
    assert!(!r.is_error(), "{}", r.json);
    let approved = |audit: &[serde_json::Value]| audit.iter().filter(|l| l["decision"] == "approved").count();
    let before = approved(&audit_lines(&s.audit));
    let patch =
        format!("*** Begin Patch\n*** Update File: {}\n@@\n-port = 9\n+port = 4\n*** End Patch", p(&target));
    let mut t =
        s.d.session_with_config(&format!("escalationRules = \"{}\"\napplyPatch = true\n", s.rules.display()));
    assert!(!t.call("read", with(json!({"file_path": p(&target)}))).is_error());
    let before_patch = approved(&audit_lines(&s.audit));
    assert!(before_patch > before, "the new session's read was approved");
    let r = t.call("apply_patch", with(json!({"input": patch})));
    assert_eq!(r.code(), Some("PATCH_HUNK_MISMATCH"), "{}", r.json);
    assert!(
        r.text().ends_with("failed to find expected lines:\n  port = 9 (hunk at patch line 3)"),
        "{}",
        r.text()
    );
    let audit = audit_lines(&s.audit);
    assert_eq!(approved(&audit), before_patch, "nothing was approved for the patch: {audit:?}");
    assert_eq!(
        audit.iter().filter(|l| l["decision"] == "checked" && l["result"] == "FS_EDIT_NOT_FOUND").count(),
        2,
        "{audit:?}"
    );
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "port = 3\n");
}

/// A patch's paths are judged where each lands: the daemon returns every path, then every move's
/// destination, resolved, and the client's rules judge each against its own (a destination
/// through a link into a denied directory, between two allowed files, is refused; the same
/// patch moving to an allowed directory is approved and runs).
#[test]
fn a_patchs_moves_are_judged_where_they_land() {
    let s = setup("");
    let outside = s.outside.path();
    for dir in ["denied", "other"] {
        std::fs::create_dir(outside.join(dir)).unwrap();
    }
    std::os::unix::fs::symlink(outside.join("denied"), outside.join("other/link")).unwrap();
    let src = outside.join("src.txt");
    std::fs::write(&src, "one\n").unwrap();
    let with = |mut args: serde_json::Value| {
        args["sandbox_permissions"] = json!("danger-full-access");
        args["justification"] = json!("the user asked");
        args
    };
    let mut t =
        s.d.session_with_config(&format!("escalationRules = \"{}\"\napplyPatch = true\n", s.rules.display()));
    assert!(!t.call("read", with(json!({"file_path": p(&src)}))).is_error());
    let patch = |to: &str| {
        format!(
            "*** Begin Patch\n*** Add File: {0}/ok1.txt\n+a\n*** Update File: {0}/src.txt\n*** Move to: {0}/{to}\n@@\n-one\n+two\n*** Add File: {0}/ok2.txt\n+b\n*** End Patch",
            p(outside)
        )
    };
    let r = t.call("apply_patch", with(json!({"input": patch("other/link/moved.txt")})));
    assert_eq!(r.code(), Some("FS_SANDBOX_DENIED"), "{}", r.json);
    assert!(r.text().contains("refused by this client's escalation rules"), "{}", r.text());
    for never in ["ok1.txt", "ok2.txt", "denied/moved.txt"] {
        assert!(!outside.join(never).exists(), "{never} was written");
    }
    assert_eq!(std::fs::read_to_string(&src).unwrap(), "one\n");
    let r = t.call("apply_patch", with(json!({"input": patch("other/moved.txt")})));
    assert!(!r.is_error(), "{}", r.json);
    assert_eq!(std::fs::read_to_string(outside.join("other/moved.txt")).unwrap(), "two\n");
    assert!(!src.exists() && outside.join("ok1.txt").exists() && outside.join("ok2.txt").exists());
}

/// The terminal prompt of the client-level approver: `fsd-tools session` on a pseudo-terminal
/// (Python's pty module) with its JSON lines on pipes; the person answers each prompt.
#[test]
fn the_terminal_prompt_decides_and_is_not_asked_what_would_fail() {
    let s = setup("");
    let target = s.outside.path().join("asked.txt");
    std::fs::write(&target, "hello\n").unwrap();
    let config = s.outside.path().join("client.toml");
    std::fs::write(&config, "escalationPrompt = true\n").unwrap();
    let esc = |mut args: serde_json::Value| {
        args["sandbox_permissions"] = json!("danger-full-access");
        args["justification"] = json!("the user asked");
        args
    };
    // The read spells the path with a name escape: the person is shown the path the daemon
    // reads, the spelling beside it.
    let spelled = format!("{}/\\x61sked.txt", p(s.outside.path()));
    let requests = json!([
        {"id": 0, "tool": "edit", "args": esc(json!({"file_path": p(&target), "old_string": "hello", "new_string": "bye"}))},
        {"id": 1, "tool": "read", "args": esc(json!({"file_path": spelled}))},
        {"id": 2, "tool": "edit", "args": esc(json!({"file_path": p(&target), "old_string": "nope", "new_string": "x"}))},
        {"id": 3, "tool": "edit", "args": esc(json!({"file_path": p(&target), "old_string": "hello", "new_string": "bye"}))},
        {"id": 4, "tool": "edit", "args": esc(json!({"file_path": p(&target), "old_string": "bye", "new_string": "x"}))},
    ]);
    let requests_path = s.outside.path().join("requests.json");
    std::fs::write(&requests_path, requests.to_string()).unwrap();
    let script = r#"
import json, os, pty, select, sys
tools, endpoint, cwd, config, requests_path, answers = sys.argv[1:7]
answers = answers.split(",")
in_r, in_w = os.pipe()
out_r, out_w = os.pipe()
pid, fd = pty.fork()
if pid == 0:
    os.dup2(in_r, 0)
    os.dup2(out_w, 1)
    os.execv(tools, [tools, "session", "--endpoint", endpoint, "--cwd", cwd, "--config", config])
os.close(in_r)
os.close(out_w)
transcript, buf, replies, answered = b"", b"", [], 0
for request in json.load(open(requests_path)):
    os.write(in_w, (json.dumps(request) + "\n").encode())
    while b"\n" not in buf:
        ready, _, _ = select.select([fd, out_r], [], [], 30)
        if not ready:
            sys.exit("no reply within 30 s")
        if fd in ready:
            transcript += os.read(fd, 4096)
            if transcript.endswith(b"[y/N] ") and transcript.count(b"[y/N] ") > answered and answers:
                answered += 1
                os.write(fd, answers.pop(0).encode() + b"\n")
        if out_r in ready:
            buf += os.read(out_r, 65536)
    line, buf = buf.split(b"\n", 1)
    replies.append(json.loads(line))
os.close(in_w)
os.waitpid(pid, 0)
print(json.dumps({"replies": replies, "transcript": transcript.decode(errors="replace")}))
"#;
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(tools_bin())
        .arg(s.d.endpoint())
        .arg(&s.d.root)
        .arg(&config)
        .arg(&requests_path)
        .arg("y,y,n")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let result: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let replies = result["replies"].as_array().unwrap();
    let transcript = result["transcript"].as_str().unwrap();
    // Unobserved: refused by the policy before the person is asked.
    assert_eq!(replies[0]["code"], "FS_NOT_OBSERVED", "{replies:?}");
    assert!(replies[1]["text"].as_str().unwrap().contains("hello"), "{replies:?}");
    assert_eq!(replies[2]["code"], "FS_EDIT_NOT_FOUND", "{replies:?}");
    // Approved by the person: the edit of the existing outside file lands.
    assert_eq!(replies[3]["is_error"], json!(false), "{replies:?}");
    assert!(!replies[3]["text"].as_str().unwrap().starts_with("Error"), "{replies:?}");
    assert_eq!(
        replies[4]["text"],
        "Error: escalation to danger-full-access was refused by the user; nothing was changed. Do not retry this call with sandbox_permissions; continue under workspace-write mode or ask the user. [sandbox: file access denied under workspace-write mode]"
    );
    assert_eq!(
        transcript.matches("[y/N] ").count(),
        3,
        "asked for the read and the two edits that can run only: {transcript}"
    );
    let audit = audit_lines(&s.audit);
    let decisions: Vec<_> =
        audit.iter().filter(|l| l["op"] == "escalate:describe" && l["result"] == "client:person").collect();
    let shown: Vec<_> = decisions.iter().map(|l| l["decision"].as_str().unwrap()).collect();
    assert_eq!(shown, ["approved", "approved", "refused"], "each answer is one record: {audit:?}");
    assert!(decisions.iter().all(|l| l["digest"].as_str().is_some_and(|d| d.len() == 64)), "{audit:?}");
    assert!(
        transcript.contains(&format!("  path: {} (requested as {spelled})\r\n", p(&target))),
        "{transcript}"
    );
    assert!(transcript.contains(&format!("  path: {}\r\n", p(&target))), "{transcript}");
    // The audit names the path the daemon acts on, the request's spelling beside it.
    let read = audit.iter().find(|l| l["decision"] == "checked" && l["result"] == "ok").unwrap();
    assert_eq!((&read["path"], &read["requested_path"]), (&json!(p(&target)), &json!(spelled)), "{audit:?}");
    assert_eq!(decisions[0]["path"], json!(p(&target)), "{audit:?}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "bye\n", "the approved edit only");
}

/// An escalation's checks before anyone is asked run on the whole current file (a patch's hunks
/// applied to it; an edit's match runs in the worker's dry run, its preview here), which takes
/// as long as the file is big. What of it the network process does runs on the daemon's check
/// threads, not its runtime: here the daemon is pinned to one CPU (so its
/// runtime has one thread, which a check on it would hold), a check of a large file is held by
/// the test build's hook, and meanwhile another client's stat is answered, by the daemon that
/// says the check is held as it answers.
fn a_held_check_does_not_hold_another_clients_stat(
    escalated: impl FnOnce(&std::path::Path) -> (v1::EscalatedOp, Option<String>),
) {
    let config = "escalation = \"client\"\nmax_mode = \"danger-full-access\"\n";
    let d = Daemon::start_custom(&["taskset", "-c", "0"], &|_| {}, &[], config, &[]);
    let big = d.path("fsd-fault-hold-check");
    let mut body = "a line of the large file\n".repeat((24 << 20) / 25);
    body.push_str("last\n");
    std::fs::write(&big, &body).unwrap();
    d.write("other.txt", "other\n");
    let (op, patch) = escalated(&big);
    let request = v1::EscalationRequest {
        context: Some(v1::CallContext {
            session_id: "checker".into(),
            call_id: "c".into(),
            ..Default::default()
        }),
        requested_mode: v1::Mode::DangerFullAccess as i32,
        justification: "the user asked".into(),
        ops: vec![op],
        patch,
    };
    let (answered, answer) = std::sync::mpsc::channel();
    let mut checker = Rpc::connect(&d);
    let asked = std::thread::spawn(move || {
        let reply = checker.rt.block_on(checker.client.request_escalation(request));
        let _ = answered.send(reply.map(tonic::Response::into_inner));
    });
    let mut other = Rpc::connect(&d);
    let probe = d.path("fsd-fault-check-held");
    // Asked until the daemon answers that the check is held, unless the check's answer comes
    // first (it does when nothing else could be answered while the check ran).
    loop {
        if let Ok(reply) = answer.try_recv() {
            panic!("no other call was answered while the check was held (its answer: {reply:?})");
        }
        let status = other.stat(&probe).expect_err("the probe answers with a status");
        match status.message() {
            "held" => break,
            "not held" => std::thread::sleep(std::time::Duration::from_millis(5)),
            _ => panic!("the other client's stat was not answered while the check ran: {status:?}"),
        }
    }
    let stat = other.stat(&d.path("other.txt")).unwrap();
    assert!(stat.info.is_some(), "{stat:?}");
    assert!(
        matches!(answer.try_recv(), Err(std::sync::mpsc::TryRecvError::Empty)),
        "the check was still held when the other client's stat was answered"
    );
    other.stat(&d.path("fsd-fault-release-check")).unwrap();
    let reply = answer.recv().unwrap().unwrap_or_else(|s| panic!("{s:?}"));
    assert_eq!(reply.decided_by, v1::Decider::Client as i32, "{reply:?}");
    assert!(!reply.digest.is_empty(), "{reply:?}");
    asked.join().unwrap();
    assert_eq!(std::fs::read(&big).unwrap(), body.as_bytes(), "a check writes nothing");
}

#[test]
fn a_large_patch_check_does_not_hold_another_clients_stat() {
    a_held_check_does_not_hold_another_clients_stat(|big| {
        let patch =
            format!("*** Begin Patch\n*** Update File: {}\n@@\n-last\n+changed\n*** End Patch", p(big));
        (v1::EscalatedOp { op: "writeText".into(), path: p(big), ..Default::default() }, Some(patch))
    });
}

/// A write's preview (the diff an approver sees, the digest the approval binds) is linear in
/// the content's size too: made on the check threads, held there by the hook.
#[test]
fn a_large_write_preview_does_not_hold_another_clients_stat() {
    a_held_check_does_not_hold_another_clients_stat(|big| {
        let mut content = "a line of the new content\n".repeat((24 << 20) / 26);
        content.push_str("changed\n");
        let op = v1::EscalatedOp {
            op: "writeText".into(),
            path: p(big),
            content: Some(content),
            ..Default::default()
        };
        (op, None)
    });
}

#[test]
fn a_large_edit_check_does_not_hold_another_clients_stat() {
    a_held_check_does_not_hold_another_clients_stat(|big| {
        let op = v1::EscalatedOp {
            op: "editText".into(),
            path: p(big),
            old_string: Some("last\n".into()),
            new_string: Some("changed\n".into()),
            ..Default::default()
        };
        (op, None)
    });
}
