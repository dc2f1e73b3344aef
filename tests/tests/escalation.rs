//! Escalation at the `client` trust level: the fields are advertised only when hello offers a
//! wider mode; the seed's rules on sandbox_permissions and justification; an approved call runs
//! once at the wider mode and is audited; a refused one writes nothing; the daemon refuses what
//! is above the client's maximum whatever the client claims.

mod common;

use common::rpc::{Rpc, p};
use common::*;
use fsd_proto::{ErrorCode, WireError, v1};
use fsd_tool_client::connect::{self, Endpoint};
use fsd_tool_client::{ClientConfig, Session, Tools};
use serde_json::json;

/// The input schema property names of `tool` as a session on `d` advertises them.
fn advertised(d: &Daemon, tool: &str) -> Vec<String> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let (client, hello) = rt.block_on(connect::connect(&Endpoint::Unix(d.socket.clone()))).unwrap();
    let session = Session::new(Tools::new(ClientConfig::default()), client, hello, d.root.clone());
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
    assert!(advertised(&s.d, "read").iter().all(|p| p != "sandbox_permissions"), "read never escalates");
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
}

#[test]
fn a_refused_escalation_writes_nothing() {
    let s = setup("");
    std::fs::create_dir(s.outside.path().join("denied")).unwrap();
    let target = s.outside.path().join("denied/x.txt");
    let mut t = s.d.session_with_config(&format!("escalationRules = \"{}\"\n", s.rules.display()));
    let r = t.call("write", json!({"file_path": p(&target), "content": "x", "sandbox_permissions": "danger-full-access", "justification": "please"}));
    assert_eq!(r.code(), Some("FS_SANDBOX_DENIED"));
    assert!(r.text().starts_with("Error: escalation to danger-full-access was not approved [sandbox: file access denied under workspace-write mode]"), "{}", r.text());
    assert!(!target.exists());
    // No approver configured at all: refused as well.
    let mut none = s.d.session();
    let other = s.outside.path().join("y.txt");
    let r = none.call("write", json!({"file_path": p(&other), "content": "x", "sandbox_permissions": "danger-full-access", "justification": "please"}));
    assert_eq!(r.code(), Some("FS_SANDBOX_DENIED"));
    assert!(!other.exists());
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
