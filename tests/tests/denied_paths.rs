//! Protected names and read-denied paths on every face: the tools (`fsd-tools session` over the
//! Unix socket, and over gRPC-Web on an `http:` listener), gRPC (our typed client, and grpcio in
//! `tests/python/denied.py`), REST, and MCP (`tests/mcp/denied.py`, the official Python SDK).
//! Both rules live in the worker's walk, so every face meets the same refusal: a read-denied
//! file (the daemon's default `read_denied` list) gives no byte of its content to a read, a
//! write, an edit (whose match would be an oracle), a move (to a name that is not denied too),
//! a delete, a link or an escalation; a listing shows it without failing. A write, move or
//! delete into a protected name (the default list: `.git`, git hooks, the agent hosts'
//! configuration) is refused, a link made after the daemon started included.

use crate::common;

use std::path::Path;

use common::rest::{RestDaemon, http, refused};
use common::rpc::{Rpc, p, wire};
use common::*;
use fsd_proto::{ErrorCode, v1};
use serde_json::{Value, json};

/// The client config of these sessions: without the observation policy every call reaches the
/// daemon (with it, an edit of a file never read is refused before the daemon is asked).
const BARE: &str = "applyPatch = true\nstrReplaceEditor = true\nobservationPolicy = false\n";

const SECRET: &str = "API_KEY=sk-live-0123456789abcdef\n";

/// The text a read-denied refusal reads as: `name` is what matched, when it is not `path`.
fn denied_text(verb: &str, path: &Path, name: Option<&Path>, pattern: &str) -> String {
    let denied = match name {
        Some(name) => format!("\"{}\" is denied", name.display()),
        None => "denied".to_owned(),
    };
    format!(
        "Error: cannot {verb} \"{}\": {denied} by the daemon's read_denied pattern \"{pattern}\" (no mode or approval grants access to it; do not retry with sandbox_permissions)",
        path.display()
    )
}

/// The seed's marker after a protected name, byte-exact.
fn protected_text(verb: &str, path: &Path, name: &str) -> String {
    format!(
        "Error: cannot {verb} \"{}\": {name} is a protected path [sandbox: file access denied under workspace-write mode]",
        path.display()
    )
}

/// A workspace with secrets, agent-host configuration and a link to a secret.
fn seed(root: &Path) {
    std::fs::write(root.join(".env"), SECRET).unwrap();
    std::fs::write(root.join("server.key"), SECRET).unwrap();
    std::fs::write(root.join("a.txt"), "alpha\n").unwrap();
    std::fs::create_dir(root.join(".claude")).unwrap();
    std::fs::write(root.join(".claude/settings.json"), "{}\n").unwrap();
    std::fs::write(root.join(".mcp.json"), "{}\n").unwrap();
    std::os::unix::fs::symlink(".env", root.join("innocent.txt")).unwrap();
}

/// What must never change on disk, however the calls went.
fn untouched(root: &Path) {
    assert_eq!(std::fs::read_to_string(root.join(".env")).unwrap(), SECRET);
    assert_eq!(std::fs::read_to_string(root.join("server.key")).unwrap(), SECRET);
    assert_eq!(std::fs::read_to_string(root.join(".claude/settings.json")).unwrap(), "{}\n");
    assert_eq!(std::fs::read_to_string(root.join(".mcp.json")).unwrap(), "{}\n");
    assert!(!root.join("plain.txt").exists());
}

#[track_caller]
fn no_secret(reply: &Reply) {
    assert!(!reply.json.to_string().contains("sk-live"), "the secret reached the caller: {}", reply.json);
}

/// The tools through one session: every call on a denied file is refused with the same words,
/// whether or not the edit's string is in it, and nothing is offered for a retry.
fn denied_on_the_tools(t: &mut ToolSession, root: &Path) {
    let env = root.join(".env");
    let link = root.join("innocent.txt");
    let read = t.read(&p(&env));
    err(&read, "FS_READ_DENIED", &denied_text("read", &env, None, "**/.env"));
    no_secret(&read);
    // Through a link: judged where it leads, and what matched is named.
    let read = t.read(&p(&link));
    err(&read, "FS_READ_DENIED", &denied_text("read", &link, Some(&env), "**/.env"));
    no_secret(&read);
    let key = root.join("server.key");
    err(&t.read(&p(&key)), "FS_READ_DENIED", &denied_text("read", &key, None, "**/*.key"));
    let write = t.call("write", json!({"file_path": p(&env), "content": "x\n"}));
    err(&write, "FS_READ_DENIED", &denied_text("modify", &env, None, "**/.env"));
    // An edit's match is an oracle: the string that is there and one that is not read alike.
    let hit = t.call("edit", json!({"file_path": p(&env), "old_string": "sk-live", "new_string": "x"}));
    let miss = t.call("edit", json!({"file_path": p(&env), "old_string": "nothere", "new_string": "x"}));
    err(&hit, "FS_READ_DENIED", &denied_text("modify", &env, None, "**/.env"));
    assert_eq!(hit.json, miss.json.clone().tap_id(&hit.json));
    no_secret(&hit);
    // A move to a name that is not denied, and a delete, through apply_patch.
    let plain = root.join("plain.txt");
    let patch = format!(
        "*** Begin Patch\n*** Update File: {}\n*** Move to: {}\n@@\n-API_KEY=sk-live-0123456789abcdef\n+x\n*** End Patch",
        p(&env),
        p(&plain)
    );
    let moved = t.call("apply_patch", json!({"input": patch}));
    assert!(moved.is_error(), "{}", moved.json);
    assert_eq!(moved.code(), Some("FS_READ_DENIED"), "{}", moved.json);
    no_secret(&moved);
    let patch = format!("*** Begin Patch\n*** Delete File: {}\n*** End Patch", p(&env));
    let deleted = t.call("apply_patch", json!({"input": patch}));
    assert_eq!(deleted.code(), Some("FS_READ_DENIED"), "{}", deleted.json);
    // A listing shows the denied file and does not fail.
    let view = t.call("str_replace_editor", json!({"command": "view", "path": p(root)}));
    assert!(!view.is_error(), "{}", view.json);
    let r = p(root);
    assert_eq!(
        view.text(),
        format!(
            "Here's the files and directories up to 2 levels deep in {r}, excluding hidden items, node_modules and __pycache__:\n{r}/\n{r}/a.txt\n{r}/innocent.txt\n{r}/server.key"
        )
    );
    for reply in [&read, &write, &hit, &moved, &deleted] {
        assert!(!reply.text().contains("To request approval"), "{}", reply.text());
    }
}

/// Protected names: the default list, a protected name reached through a link made after the
/// daemon started, and a protected name that is itself a late link.
fn protected_on_the_tools(t: &mut ToolSession, root: &Path) {
    let settings = root.join(".claude/settings.json");
    t.read(&p(&settings));
    let write = t.call("write", json!({"file_path": p(&settings), "content": "{\"hooks\": {}}\n"}));
    err(&write, "FS_SANDBOX_DENIED", &protected_text("modify", &settings, ".claude"));
    for (rel, name) in [
        (".vscode/tasks.json", ".vscode"),
        (".codex/config.toml", ".codex"),
        (".gemini/settings.json", ".gemini"),
        (".cursor/mcp.json", ".cursor"),
        (".husky/pre-commit", ".husky"),
        (".githooks/pre-commit", ".githooks"),
        (".git/hooks/pre-commit", ".git"),
        ("sub/.mcp.json", ".mcp.json"),
    ] {
        let path = root.join(rel);
        let write = t.call("write", json!({"file_path": p(&path), "content": "run\n"}));
        err(&write, "FS_SANDBOX_DENIED", &protected_text("modify", &path, name));
        assert!(!path.exists(), "{rel}");
        assert!(!path.parent().unwrap().exists(), "{rel}: its directory was made");
    }
    // A move into a protected directory, a move out of one and a delete of one, in a patch.
    let a = root.join("a.txt");
    let into = root.join(".claude/hooks.json");
    let patch = format!(
        "*** Begin Patch\n*** Update File: {}\n*** Move to: {}\n@@\n-alpha\n+beta\n*** End Patch",
        p(&a),
        p(&into)
    );
    let moved = t.call("apply_patch", json!({"input": patch}));
    assert_eq!(moved.code(), Some("FS_SANDBOX_DENIED"), "{}", moved.json);
    assert!(!into.exists());
    let mcp = root.join(".mcp.json");
    let patch = format!("*** Begin Patch\n*** Delete File: {}\n*** End Patch", p(&mcp));
    assert_eq!(t.call("apply_patch", json!({"input": patch})).code(), Some("FS_SANDBOX_DENIED"));
    // Links made now, after the daemon and the session started: checked on this call.
    std::os::unix::fs::symlink(".claude", root.join("docs")).unwrap();
    let through = root.join("docs/settings.json");
    let write = t.call("write", json!({"file_path": p(&through), "content": "{}\n"}));
    assert_eq!(write.code(), Some("FS_SANDBOX_DENIED"), "{}", write.json);
    assert!(write.text().contains(".claude is a protected path"), "{}", write.text());
    std::fs::create_dir(root.join("conf")).unwrap();
    std::os::unix::fs::symlink("conf", root.join(".vscode")).unwrap();
    let tasks = root.join(".vscode/tasks.json");
    let write = t.call("write", json!({"file_path": p(&tasks), "content": "{}\n"}));
    err(&write, "FS_SANDBOX_DENIED", &protected_text("modify", &tasks, ".vscode"));
    assert!(!root.join("conf/tasks.json").exists());
    // An edit and a delete make no directory, so only the walk's record of the links it
    // followed shows that `.vscode` was on the way.
    std::fs::write(root.join("conf/settings.json"), "{}\n").unwrap();
    let settings_link = root.join(".vscode/settings.json");
    let edit =
        t.call("edit", json!({"file_path": p(&settings_link), "old_string": "{}", "new_string": "[]"}));
    err(&edit, "FS_SANDBOX_DENIED", &protected_text("modify", &settings_link, ".vscode"));
    let patch = format!("*** Begin Patch\n*** Delete File: {}\n*** End Patch", p(&settings_link));
    assert_eq!(t.call("apply_patch", json!({"input": patch})).code(), Some("FS_SANDBOX_DENIED"));
    assert_eq!(std::fs::read_to_string(root.join("conf/settings.json")).unwrap(), "{}\n");
    // Reading them stays allowed: the names are read-only, not hidden.
    let read = t.read(&p(&settings));
    assert!(!read.is_error(), "{}", read.json);
}

trait TapId {
    fn tap_id(self, like: &Value) -> Value;
}

impl TapId for Value {
    /// The same reply with `like`'s id, to compare two replies whole.
    fn tap_id(mut self, like: &Value) -> Value {
        self["id"] = like["id"].clone();
        self
    }
}

#[test]
fn the_tools_refuse_denied_files_and_protected_names() {
    let d = Daemon::start_custom(&[], &seed, &[], "", &[]);
    let mut t = d.session_with_config(BARE);
    denied_on_the_tools(&mut t, &d.root);
    protected_on_the_tools(&mut t, &d.root);
    untouched(&d.root);
}

#[test]
fn grpc_web_refuses_denied_files_and_protected_names() {
    let d = RestDaemon::start("", &[]);
    seed(&d.root);
    let config = d.dir.path().join("client.toml");
    std::fs::write(&config, BARE).unwrap();
    let mut t = ToolSession::start(&format!("http://127.0.0.1:{}", d.port), &d.root, Some(&config));
    denied_on_the_tools(&mut t, &d.root);
    protected_on_the_tools(&mut t, &d.root);
    untouched(&d.root);
}

#[test]
fn rest_refuses_denied_files_and_protected_names() {
    let d = RestDaemon::start("", &[]);
    seed(&d.root);
    let port = d.port;
    for path in ["/v1/files/.env", "/v1/files/innocent.txt", "/v1/files/server.key"] {
        let answer = http(port, "GET", path, &[], b"");
        refused(&answer, 403, "FS_READ_DENIED");
        assert!(!String::from_utf8_lossy(&answer.body).contains("sk-live"), "{answer:?}");
        refused(&http(port, "PUT", path, &[], b"x"), 403, "FS_READ_DENIED");
    }
    for path in ["/v1/files/.env", "/v1/files/server.key"] {
        refused(&http(port, "DELETE", path, &[], b""), 403, "FS_READ_DENIED");
    }
    // A delete does not follow a final link: the link goes, what it leads to stays.
    assert_eq!(http(port, "DELETE", "/v1/files/innocent.txt", &[], b"").status, 204);
    assert_eq!(http(port, "HEAD", "/v1/files/.env", &[], b"").status, 403);
    // A tree holding a denied file is not removed, not even its other files.
    std::fs::create_dir(d.root.join("tree")).unwrap();
    std::fs::write(d.root.join("tree/x.txt"), "x\n").unwrap();
    std::fs::write(d.root.join("tree/.env"), SECRET).unwrap();
    refused(&http(port, "DELETE", "/v1/files/tree?recursive=true", &[], b""), 403, "FS_READ_DENIED");
    assert!(d.root.join("tree/x.txt").exists());
    // The listing shows the denied files, without their size.
    let listing = http(port, "GET", "/v1/files/tree", &[], b"");
    assert_eq!(listing.status, 200, "{listing:?}");
    let entries = listing.json()["entries"].as_array().unwrap().clone();
    let env = entries.iter().find(|e| e["name"] == ".env").unwrap_or_else(|| panic!("{entries:?}"));
    assert_eq!((env["type"].clone(), env["size"].clone()), (json!("file"), json!(0)));
    // Protected names: a write into one, a late link into one, a delete of one.
    refused(&http(port, "PUT", "/v1/files/.claude/settings.json", &[], b"{}"), 403, "PERMISSION_DENIED");
    refused(&http(port, "PUT", "/v1/files/.vscode/tasks.json", &[], b"{}"), 403, "PERMISSION_DENIED");
    assert!(!d.root.join(".vscode").exists());
    refused(&http(port, "DELETE", "/v1/files/.mcp.json", &[], b""), 403, "PERMISSION_DENIED");
    std::os::unix::fs::symlink(".claude", d.root.join("late")).unwrap();
    refused(&http(port, "PUT", "/v1/files/late/settings.json", &[], b"{}"), 403, "PERMISSION_DENIED");
    untouched(&d.root);
}

/// A client that claims an approval at danger-full-access (client trust, the daemon believes
/// it) is still refused, and the tools' escalation is refused before anyone is asked.
#[test]
fn no_escalation_reaches_a_denied_file() {
    let outside = tempfile::tempdir().unwrap();
    let rules = outside.path().join("rules.toml");
    std::fs::write(&rules, "[[rule]]\nmode = \"*\"\npath = \"/**\"\ndecision = \"allow\"\n").unwrap();
    let audit = outside.path().join("audit.jsonl");
    let config = format!(
        "escalation = \"client\"\nmax_mode = \"danger-full-access\"\naudit_log = \"{}\"\n",
        audit.display()
    );
    let d = Daemon::start_custom(&[], &seed, &[], &config, &[]);
    let env = d.root.join(".env");
    let mut t = d.session_with_config(&format!("escalationRules = \"{}\"\n{BARE}", rules.display()));
    for (tool, args) in [
        ("read", json!({"file_path": p(&env)})),
        ("write", json!({"file_path": p(&env), "content": "x\n"})),
        ("edit", json!({"file_path": p(&env), "old_string": "sk-live", "new_string": "x"})),
    ] {
        let mut args = args;
        let map = args.as_object_mut().unwrap();
        map.insert("sandbox_permissions".into(), json!("danger-full-access"));
        map.insert("justification".into(), json!("the user asked for the key"));
        let reply = t.call(tool, args);
        assert_eq!(reply.code(), Some("FS_READ_DENIED"), "{tool}: {}", reply.json);
        assert!(reply.text().contains("no mode or approval grants access to it"), "{}", reply.text());
        no_secret(&reply);
    }
    // Straight to the daemon, as a compromised client would: an approved ticket in hand.
    let mut rpc = Rpc::connect(&d);
    let context = || {
        Some(v1::CallContext {
            mode: v1::Mode::DangerFullAccess as i32,
            escalation: Some(v1::EscalationTicket {
                approved_mode: v1::Mode::DangerFullAccess as i32,
                justification: "claimed".into(),
                ..Default::default()
            }),
            ..Default::default()
        })
    };
    let read = v1::ReadTextRequest { context: context(), path: p(&env), max_bytes: 1 << 20 };
    let status = rpc.rt.block_on(rpc.client.read_text(read)).unwrap_err();
    let refusal = wire(&status);
    assert_eq!(refusal.code, ErrorCode::ReadDenied, "{refusal:?}");
    assert_eq!(refusal.get("escalation"), Some("never"));
    assert_eq!(status.code(), tonic::Code::PermissionDenied);
    let moved = v1::MoveFileRequest {
        context: context(),
        source: p(&env),
        destination: p(&d.root.join("plain.txt")),
        ..Default::default()
    };
    let status = rpc.rt.block_on(rpc.client.move_file(moved)).unwrap_err();
    assert_eq!(wire(&status).code, ErrorCode::ReadDenied);
    untouched(&d.root);
    // The audit log records the refused move as denied, at the mode it was claimed for.
    let log = std::fs::read_to_string(&audit).unwrap();
    let denied = log.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()).any(|l| {
        l["op"] == "moveFile"
            && l["decision"] == "denied"
            && l["result"] == "FS_READ_DENIED"
            && l["mode"] == "danger-full-access"
    });
    assert!(denied, "{log}");
}

/// Under signed trust the daemon refuses a read-denied path before it asks its approver (here
/// there is none to ask: asking would answer "could not be reached"), inside the roots and
/// outside them (where a target outside the grant otherwise goes to the approver unresolved).
#[test]
fn a_signed_escalation_of_a_denied_file_is_refused_before_any_approver() {
    let outside = tempfile::tempdir().unwrap();
    let outside_env = outside.path().join(".env");
    std::fs::write(&outside_env, SECRET).unwrap();
    // A valid point (the curve's base point), whose private key no approver holds.
    let key = format!("58{}", "66".repeat(31));
    let config = format!(
        "escalation = \"signed\"\nmax_mode = \"danger-full-access\"\napprover_public_key = \"{key}\"\napprover_endpoint = \"unix:{}\"\n",
        outside.path().join("no-approver.sock").display()
    );
    let d = Daemon::start_custom(&[], &seed, &[], &config, &[]);
    let mut t = d.session_with_config(BARE);
    let inside_env = d.root.join(".env");
    for env in [&inside_env, &outside_env] {
        let args = json!({
            "file_path": p(env),
            "sandbox_permissions": "danger-full-access",
            "justification": "the user asked for the key",
        });
        let reply = t.call("read", args);
        err(&reply, "FS_READ_DENIED", &denied_text("read", env, None, "**/.env"));
    }
    assert_eq!(std::fs::read_to_string(&outside_env).unwrap(), SECRET);
    untouched(&d.root);
}

/// Our typed gRPC client, the calls a tool never makes alone: stream, stat, a listing.
#[test]
fn grpc_calls_refuse_denied_files_and_list_them() {
    let d = Daemon::start_custom(&[], &seed, &[], "", &[]);
    let mut rpc = Rpc::connect(&d);
    let env = d.root.join(".env");
    assert_eq!(wire(&rpc.stat(&env).unwrap_err()).code, ErrorCode::ReadDenied);
    assert_eq!(wire(&rpc.read_text(&env, 1 << 20).unwrap_err()).code, ErrorCode::ReadDenied);
    let stream = v1::StreamTextRequest { path: p(&env), ..Default::default() };
    let status = rpc.rt.block_on(async {
        match rpc.client.stream_text(stream).await {
            Err(status) => status,
            Ok(reply) => reply.into_inner().message().await.expect_err("a chunk of a denied file"),
        }
    });
    assert_eq!(wire(&status).code, ErrorCode::ReadDenied);
    // A pattern naming a directory denies what is in it, and a write never makes it.
    std::fs::create_dir(d.root.join(".ssh")).unwrap();
    std::fs::write(d.root.join(".ssh/config"), "Host *\n").unwrap();
    let refusal = wire(&rpc.read_text(&d.root.join(".ssh/config"), 1 << 20).unwrap_err());
    let ssh = p(&d.root.join(".ssh"));
    assert_eq!(
        (refusal.code, refusal.get("pattern"), refusal.get("name")),
        (ErrorCode::ReadDenied, Some("**/.ssh"), Some(ssh.as_str()))
    );
    let keys = d.root.join("new/.ssh/authorized_keys");
    assert_eq!(
        wire(&rpc.write_text(&keys, "ssh-ed25519 AAAA\n", None).unwrap_err()).code,
        ErrorCode::ReadDenied
    );
    assert!(!d.root.join("new").exists());
    let listing = rpc.list_dir(&d.root).unwrap();
    let entry = listing.entries.iter().find(|e| e.name == ".env").expect(".env listed");
    assert_eq!((entry.r#type(), entry.version.as_deref(), entry.size), (v1::FileType::File, None, None));
    // A link to it is listed as leading nowhere the caller may go.
    let link = listing.entries.iter().find(|e| e.name == "innocent.txt").expect("link listed");
    assert_eq!((link.r#type(), link.version.as_deref()), (v1::FileType::Other, None), "{link:?}");
    untouched(&d.root);
}

/// grpcio, a client we did not write, over the Unix socket.
#[test]
fn python_grpcio_meets_the_same_refusals() {
    let d = Daemon::start_custom(&[], &seed, &[], "", &[]);
    let seen = common::python_json(
        "python/denied.py",
        &json!({
            "proto_dir": repo().join("proto"),
            "stub_dir": d.dir.path(),
            "socket": d.socket,
            "root": d.root,
        }),
    );
    let root = p(&d.root);
    assert_eq!(
        seen["read"],
        json!(["PERMISSION_DENIED", "FS_READ_DENIED", "never", "**/.env", format!("{root}/.env")])
    );
    assert_eq!(
        seen["read_link"],
        json!(["PERMISSION_DENIED", "FS_READ_DENIED", "never", "**/.env", format!("{root}/.env")])
    );
    for call in ["edit_hit", "edit_miss", "write", "move_to_plain", "delete", "stream"] {
        assert_eq!(seen[call][1], json!("FS_READ_DENIED"), "{call}: {seen}");
    }
    assert_eq!(seen["listed"], json!([".env", false, false]));
    for call in ["protected_write", "protected_move", "late_link_write"] {
        assert_eq!(
            seen[call],
            json!(["PERMISSION_DENIED", "FS_SANDBOX_DENIED", "protected"]),
            "{call}: {seen}"
        );
    }
    untouched(&d.root);
}

/// The official MCP SDK through `fsd-tools mcp`.
#[test]
fn python_mcp_client_meets_the_same_refusals() {
    let d = Daemon::start_custom(&[], &seed, &[], "", &[]);
    let config = d.dir.path().join("client.toml");
    std::fs::write(&config, BARE).unwrap();
    let seen = common::python_json(
        "mcp/denied.py",
        &json!({
            "fsd_tools": tools_bin(),
            "endpoint": d.endpoint(),
            "root": d.root,
            "config": config,
        }),
    );
    let env = d.root.join(".env");
    let link = d.root.join("innocent.txt");
    assert_eq!(seen["read"], json!([true, denied_text("read", &env, None, "**/.env")]));
    assert_eq!(seen["read_link"], json!([true, denied_text("read", &link, Some(&env), "**/.env")]));
    assert_eq!(seen["edit"], json!([true, denied_text("modify", &env, None, "**/.env")]));
    assert_eq!(seen["write"], json!([true, denied_text("modify", &env, None, "**/.env")]));
    let settings = d.root.join(".claude/settings.json");
    assert_eq!(seen["protected_write"], json!([true, protected_text("modify", &settings, ".claude")]));
    let late = d.root.join("late/settings.json");
    assert_eq!(seen["late_link_write"][0], json!(true), "{seen}");
    assert!(seen["late_link_write"][1].as_str().unwrap().contains(".claude is a protected path"), "{seen}");
    assert!(!late.exists() || std::fs::read_to_string(&late).unwrap() == "{}\n");
    untouched(&d.root);
}

fn repo() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_owned()
}
